"""What NVML says of the box, read into Devices (harness.measure.instruments.devices), against a strict stand-in
for pynvml: handles are objects of their own, each GPU differs from the others in memory, name
and UUID, so a value read from the wrong handle, or none, shows."""
import sys

import pytest

from harness.measure.instruments import devices
from harness.measure.instruments.devices import GPU, Devices
from nvml_stub import GiB, StrictNvml


@pytest.fixture
def nvml(monkeypatch):
    fake = StrictNvml(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100"])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_each_gpu_is_read_from_its_own_handle(nvml):
    box = devices.discover()
    assert box.gpus[2] == GPU(index=2, name="NVIDIA H200", memory_total=30 * GiB, memory_free=28 * GiB,
                              compute_capability="10.0", uuid="GPU-2")
    assert [g.index for g in box.gpus] == [0, 1, 2, 3] and box.reason is None and nvml.open == 0
    assert (box.driver, box.cuda_driver) == ("580.159.04", "12.4")


@pytest.mark.parametrize("code, version", [(13000, "13.0"), (12040, "12.4"), (11080, "11.8"), (12090, "12.9")])
def test_the_driver_s_cuda_version_is_major_dot_minor(nvml, code, version):
    nvml.cuda = code
    assert devices.discover().cuda_driver == version


def test_peers_are_read_pair_by_pair_and_unknown_where_nvml_errs(nvml):
    assert devices.discover().peer == ((True, True, False, None), (True, True, False, None),
                                       (False, False, True, None), (None, None, None, True))


def test_the_read_capability_given_as_a_tuple_is_passed_as_its_number(nvml):
    nvml.NVML_P2P_CAPS_INDEX_READ = 4
    assert devices._p2p_read_index(nvml) == 4
    nvml.NVML_P2P_CAPS_INDEX_READ = (4,)
    assert devices._p2p_read_index(nvml) == 4


def test_nvml_that_finds_no_gpu_says_so_and_a_missing_binding_names_its_install(nvml, monkeypatch):
    nvml.names = []
    assert devices.discover() == Devices(driver="580.159.04", cuda_driver="12.4", reason="NVML found no GPU")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert devices.discover().reason == "nvidia-ml-py is not installed: pip install nvidia-ml-py"


def test_a_mig_instance_is_its_own_memory_on_the_gpu_that_holds_it(nvml):
    box = devices.discover()
    mig = devices.cuda_gpu(0, box, environ={"CUDA_VISIBLE_DEVICES": "MIG-2-a"})
    assert mig == GPU(index=2, name="NVIDIA H200", memory_total=5 * GiB, memory_free=4 * GiB,
                      compute_capability="10.0", uuid="MIG-2-a")
    gone = Devices(gpus=box.gpus[:2])  # the holder is not among the GPUs known
    assert devices.cuda_gpu(0, gone, environ={"CUDA_VISIBLE_DEVICES": "MIG-2-a"}) is None
    assert nvml.open == 0


def test_without_a_visibility_list_device_n_is_the_nth_gpu(nvml):
    box = devices.discover()
    assert [devices.cuda_gpu(n, box, environ={}).index for n in range(4)] == [0, 1, 2, 3]
    assert devices.cuda_gpu(4, box, environ={}) is None and devices.cuda_gpu(-1, box, environ={}) is None
    assert devices.cuda_gpu(0, environ={}).uuid == "GPU-0"  # no devices given: this box's, discovered


def test_every_gpu_s_running_processes_are_counted(nvml):
    assert devices.gpu_processes() == {0: 0, 1: 1, 2: 2, 3: 3}
    assert nvml.open == 0


def test_the_box_in_a_line_names_every_model_and_the_first_card(nvml):
    box = devices.discover()
    assert devices.describe(box) == ("4 x NVIDIA A100, NVIDIA H100 80GB HBM3, NVIDIA H200 (10.7 GB, sm_80), "
                                     "driver 580.159.04, CUDA 12.4")


def test_devices_read_back_from_a_record_are_what_was_written(nvml):
    box = devices.discover()
    assert Devices.from_dict(box.to_dict()) == box
    assert Devices.from_dict({}) == Devices()
    assert Devices.from_dict({"reason": "no GPU", "peer": [[True]]}) == Devices(peer=((True,),), reason="no GPU")


def test_nvml_is_open_inside_its_block_alone_however_the_block_is_left(nvml):
    with devices.nvml() as module:
        assert module is nvml and nvml.open == 1
        with devices.nvml():  # NVML counts its initialisations: blocks nest
            assert nvml.open == 2
        assert nvml.open == 1
    assert nvml.open == 0
    with pytest.raises(KeyError):
        with devices.nvml():
            raise KeyError("a read that failed")
    assert nvml.open == 0


def test_without_the_binding_asking_for_nvml_fails_before_any_block_and_without_a_driver_entering_does(
        nvml, monkeypatch):
    def no_driver():
        raise nvml.NVMLError("driver not loaded")
    monkeypatch.setattr(nvml, "nvmlInit", no_driver)
    session = devices.nvml()
    with pytest.raises(nvml.NVMLError, match="driver not loaded"):
        session.__enter__()
    assert devices.discover().reason == "no NVIDIA GPU visible (NVML: driver not loaded)"
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(ImportError):
        devices.nvml()
    assert devices.gpu_processes() is None


def test_an_nvml_that_fails_after_it_opened_is_an_error_not_a_box_without_gpus(nvml, monkeypatch):
    def lost():
        raise nvml.NVMLError("GPU is lost")
    monkeypatch.setattr(nvml, "nvmlDeviceGetCount", lost)
    with pytest.raises(nvml.NVMLError, match="GPU is lost"):
        devices.discover()
    assert nvml.open == 0
