import types

import pytest

from harness.measure import devices
from harness.measure.machine import machine_info, machine_name
from harness.measure.environment import snapshot

from conftest import fake_devices


class FakeNvml(types.ModuleType):
    """Stands in for pynvml: two H100s, peers of each other."""
    NVML_P2P_CAPS_INDEX_READ = 0,  # sic: nvidia-ml-py 13 defines it as a tuple
    NVML_P2P_STATUS_OK = 0

    class NVMLError(Exception):
        pass

    def __init__(self, names, p2p_ok=True):
        super().__init__("pynvml")
        self.names, self.p2p_ok, self.open = names, p2p_ok, 0

    def nvmlInit(self): self.open += 1
    def nvmlShutdown(self): self.open -= 1
    def nvmlDeviceGetCount(self): return len(self.names)
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return self.names[h]
    def nvmlDeviceGetMemoryInfo(self, h): return types.SimpleNamespace(total=81559 * 2**20, free=80000 * 2**20, used=1559 * 2**20)
    def nvmlDeviceGetCudaComputeCapability(self, h): return (9, 0)
    def nvmlDeviceGetUUID(self, h): return f"GPU-{h}"
    def nvmlSystemGetDriverVersion(self): return b"580.159.04"
    def nvmlSystemGetCudaDriverVersion(self): return 13000
    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        assert isinstance(cap, int)  # ctypes takes no tuple
        return 0 if self.p2p_ok else 3


def test_no_gpu_is_reported_not_raised():
    d = devices.discover()  # this machine and CI have no NVIDIA driver
    assert d.count == 0 and d.reason
    assert "no GPU" in devices.describe(d)


def test_discovery_reads_nvml(monkeypatch):
    fake = FakeNvml(["NVIDIA H100 80GB HBM3"] * 2)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    d = devices.discover()
    assert d.count == 2 and d.reason is None
    assert d.gpus[1].name == "NVIDIA H100 80GB HBM3" and d.gpus[1].memory_total == 81559 * 2**20
    assert d.gpus[0].compute_capability == "9.0"
    assert (d.driver, d.cuda_driver) == ("580.159.04", "13.0")
    assert d.peer == ((True, True), (True, True))
    assert fake.open == 0  # NVML shut down again


def test_gpus_without_peer_access(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", FakeNvml(["A"] * 2, p2p_ok=False))
    assert devices.discover().peer == ((True, False), (False, True))


def test_machine_name_tells_gpu_models_and_counts_apart():
    h100 = machine_name(fake_devices("NVIDIA H100 80GB HBM3"))
    h200 = machine_name(fake_devices("NVIDIA H200"))
    h200x2 = machine_name(fake_devices("NVIDIA H200", count=2))
    assert (h100, h200, h200x2) == ("nvidia-h100-80gb-hbm3-x1", "nvidia-h200-x1", "nvidia-h200-x2")
    assert machine_name(devices.Devices(reason="none"), "AMD EPYC 7B13").startswith("cpu-amd-epyc-7b13")


def test_machine_description_names_the_gpu():
    info = machine_info(snapshot(fake_devices("NVIDIA H200", count=2)))
    assert info["machine"] == "nvidia-h200-x2"
    assert "2 x NVIDIA H200" in info["gpu"] and info["gpu_count"] == "2"
    assert info["driver"] == "580.159.04" and info["cuda_driver"] == "13.0"
    assert all(isinstance(v, str) for v in info.values())  # asv's machine fields are strings


@pytest.mark.parametrize("visible, ordinal, expected", [
    (None, 1, 1), ("3", 0, 3), ("2,0", 1, 0), ("GPU-3", 0, 3), ("1,,3", 1, None), ("", 0, None),
    ("7", 0, None), ("0", 1, None)])
def test_a_cuda_ordinal_is_mapped_to_its_gpu_through_cuda_visible_devices(visible, ordinal, expected):
    """NVML numbers every GPU of the host; CUDA only the visible ones, in CUDA_VISIBLE_DEVICES's order."""
    box = fake_devices(count=4)
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    gpu = devices.cuda_gpu(ordinal, box, environ)
    assert (gpu.index if gpu else None) == expected


@pytest.mark.parametrize("visible, expected", [
    (None, [0, 1, 2, 3]), ("2", [2]), ("3,1", [3, 1]), ("GPU-2,GPU-2", [2]), ("1,,3", [1]), ("", []), ("7", [])])
def test_the_gpus_a_process_can_use_are_named_by_their_nvml_index(visible, expected):
    """A case pinned to one GPU of a shared box reads that GPU's memory alone."""
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert devices.visible_indices(fake_devices(count=4), environ) == expected


def test_a_case_samples_the_memory_of_the_gpus_it_can_see_only(monkeypatch):
    from harness.drive import runner
    from harness.measure.memory import PeakMemory
    from harness.measure.workload import Workload
    from harness.cases.base import Case
    asked = []
    monkeypatch.setattr(runner, "PeakMemory", lambda gpus: asked.append(list(gpus)) or PeakMemory())
    case = Case(name="pinned", params={"device": ("cuda", "cpu")},
                build=lambda device: Workload(step=lambda: None, check=lambda: {}, work={"bytes": 1}, warmup=0, repeat=2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    runner.execute(case, {"device": "cuda"}, devices=fake_devices(count=4))
    runner.execute(case, {"device": "cpu"}, devices=fake_devices(count=4))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    runner.execute(case, {"device": "cuda"}, devices=fake_devices(count=4))
    assert asked == [[2], [], [0, 1, 2, 3]]


def test_a_uuid_prefix_names_its_gpu_only_when_it_names_one():
    box = devices.Devices(gpus=tuple(devices.GPU(i, "H", 1, 1, "9.0", f"GPU-ab{i}") for i in range(2)))
    assert devices.cuda_gpu(0, box, {"CUDA_VISIBLE_DEVICES": "GPU-ab1"}).index == 1
    assert devices.cuda_gpu(0, box, {"CUDA_VISIBLE_DEVICES": "GPU-ab"}) is None  # ambiguous, as CUDA finds it


def test_a_mig_device_is_read_by_its_own_uuid(monkeypatch):
    class Nvml(FakeNvml):
        def nvmlDeviceGetHandleByUUID(self, uuid): return ("mig", uuid)
        def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h): return 2
        def nvmlDeviceGetMemoryInfo(self, h):
            free = 5 * 2**30 if isinstance(h, tuple) else 80 * 2**30
            return types.SimpleNamespace(total=2 * free, free=free, used=0)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", Nvml(["NVIDIA H100"] * 4))
    gpu = devices.cuda_gpu(0, fake_devices(count=4), {"CUDA_VISIBLE_DEVICES": "MIG-1234"})
    assert (gpu.index, gpu.uuid, gpu.memory_free) == (2, "MIG-1234", 5 * 2**30)
