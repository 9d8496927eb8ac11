import pytest

from harness.measure.instruments import devices
from harness.measure.instruments.machine import machine_info, machine_name
from harness.measure.instruments.environment import snapshot

from conftest import fake_devices


def test_no_gpu_is_reported_not_raised():
    d = devices.discover()  # this machine and CI have no NVIDIA driver
    assert d.count == 0 and d.reason
    assert "no GPU" in devices.describe(d)


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
    from harness.measure.instruments.memory import PeakMemory
    from harness.measure.workload import Workload
    from harness.cases.base import Case
    asked = []
    monkeypatch.setattr(runner, "PeakMemory", lambda gpus: asked.append(list(gpus)) or PeakMemory())
    case = Case(name="pinned", params={"device": ("cuda", "cpu")},
                build=lambda device: Workload(step=lambda: None, check=lambda: {}, work={"bytes": 1}, warmup=0,
                                              repeat=2))
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
