"""What a case needs to run here: each unmet need is a skip whose message names the fix, and the
GPU is asked about before a library, so a box without one says so rather than that a library is
missing. Each message is written out: a skip that says the wrong thing sends its reader to the
wrong fix."""
import sys
import types

import pytest

from harness.measure.guards import requirements as req
from harness.measure.instruments.devices import Devices
from harness.measure.outcomes import Skip

from conftest import fake_devices

NO_GPU = Devices(reason="NVML: driver not loaded")


def skip_of(fn, *args) -> str:
    with pytest.raises(Skip) as e:
        fn(*args)
    return str(e.value)


def fake_torch(available=True, count=1, version="2.11.0"):
    cuda = types.SimpleNamespace(is_available=lambda: available, device_count=lambda: count)
    return types.SimpleNamespace(cuda=cuda, __version__=version)


def fake_cupy(count=1):
    return types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: count)))


def test_a_module_that_imports_is_handed_back_and_one_that_does_not_is_a_skip_with_the_install(monkeypatch):
    assert req.need_module("json", "unused") is sys.modules["json"]
    monkeypatch.setitem(sys.modules, "oombench_absent", None)  # importing it raises ImportError
    said = skip_of(req.need_module, "oombench_absent", "pip install oombench-absent")
    assert said.startswith("oombench_absent is not installed (") and said.endswith("): pip install oombench-absent")


def test_gpus_are_counted_and_too_few_is_a_skip_naming_what_the_box_has():
    two = fake_devices(count=2)
    assert req.need_gpus(2, two) is two and req.need_gpus(1, two) is two
    assert skip_of(req.need_gpus, 3, two) == "needs 3 GPU(s), this box has 2 GPU(s); run it on a box with 3 or more"
    assert skip_of(req.need_gpus, 1, NO_GPU) == \
        "needs 1 GPU(s), this box has no GPU: NVML: driver not loaded; run it on a box with 1 or more"


def test_gpus_default_to_one_and_to_what_this_box_has(monkeypatch):
    monkeypatch.setattr(req, "discover", lambda: NO_GPU)
    assert "needs 1 GPU(s), this box has no GPU" in skip_of(req.need_gpus)
    one = fake_devices(count=1)
    monkeypatch.setattr(req, "discover", lambda: one)
    assert req.need_gpus() is one


def test_torch_on_the_cpu_needs_only_torch_and_a_device_it_does_not_know_is_an_error(monkeypatch):
    torch = fake_torch(available=False, count=0)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(req, "discover", lambda: NO_GPU)
    assert req.need_torch("cpu") is torch
    with pytest.raises(ValueError, match="device must be cpu or cuda, got 'tpu'"):
        req.need_torch("tpu")
    monkeypatch.setitem(sys.modules, "torch", None)
    assert skip_of(req.need_torch, "cpu").endswith(": pip install 'oombench[torch]'")


def test_torch_on_cuda_asks_for_the_gpu_first_then_a_cuda_build_then_enough_visible_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(req, "discover", lambda: NO_GPU)
    assert skip_of(req.need_torch, "cuda").startswith("needs 1 GPU(s), this box has no GPU")  # not torch's absence
    monkeypatch.setattr(req, "discover", lambda: fake_devices(count=2))
    assert skip_of(req.need_torch_cuda, 2).endswith(": pip install 'oombench[torch]' (a CUDA build)")
    monkeypatch.setitem(sys.modules, "torch", fake_torch(available=False, version="2.11.0+cpu"))
    assert skip_of(req.need_torch, "cuda") == ("torch 2.11.0+cpu cannot use the GPU (CPU-only build or no driver): "
                                               "install a CUDA build of torch")
    torch = fake_torch(count=1)
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert skip_of(req.need_torch_cuda, 2) == "needs 2 GPU(s), torch sees 1; check CUDA_VISIBLE_DEVICES"
    assert req.need_torch("cuda") is torch and req.need_torch_cuda() is torch
    monkeypatch.setitem(sys.modules, "torch", fake_torch(count=2))
    assert req.need_torch_cuda(2) is sys.modules["torch"]


def test_cupy_asks_for_the_gpu_first_then_cupy_then_a_gpu_cupy_sees(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(req, "discover", lambda: NO_GPU)
    assert skip_of(req.need_cupy).startswith("needs 1 GPU(s), this box has no GPU")
    monkeypatch.setattr(req, "discover", lambda: fake_devices(count=1))
    assert skip_of(req.need_cupy).endswith(f": {req.CUPY_INSTALL}")
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(count=0))
    assert skip_of(req.need_cupy) == "CuPy sees no GPU; check CUDA_VISIBLE_DEVICES and the driver"
    cupy = fake_cupy(count=1)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert req.need_cupy() is cupy
