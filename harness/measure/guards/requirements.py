"""What a case needs to run here; each unmet need raises ``Skip`` with the fix in its message."""
from __future__ import annotations

import importlib

from harness.measure.instruments.devices import Devices, discover
from harness.measure.outcomes import Skip


def need_module(name: str, install: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise Skip(f"{name} is not installed ({e}): {install}") from None


def need_gpus(count: int = 1, devices: Devices | None = None) -> Devices:
    devices = devices if devices is not None else discover()
    if devices.count >= count:
        return devices
    have = f"{devices.count} GPU(s)" if devices.count else f"no GPU: {devices.reason}"
    raise Skip(f"needs {count} GPU(s), this box has {have}; run it on a box with {count} or more")


def need_torch(device: str):
    """torch for a case that runs on ``device``: "cuda" (a CUDA build seeing a GPU) or "cpu"."""
    if device == "cuda":
        return need_torch_cuda(1)
    if device == "cpu":
        return need_module("torch", "pip install 'oombench[torch]'")
    raise ValueError(f"device must be cpu or cuda, got {device!r}")


def need_torch_cuda(count: int = 1):
    """torch, built with CUDA and seeing at least ``count`` GPUs."""
    need_gpus(count)
    torch = need_module("torch", "pip install 'oombench[torch]' (a CUDA build)")
    if not torch.cuda.is_available():
        raise Skip(f"torch {torch.__version__} cannot use the GPU (CPU-only build or no driver): "
                   "install a CUDA build of torch")
    if torch.cuda.device_count() < count:
        raise Skip(f"needs {count} GPU(s), torch sees {torch.cuda.device_count()}; check CUDA_VISIBLE_DEVICES")
    return torch


CUPY_INSTALL = "pip install 'oombench[cupy]' (cupy-cuda12x for a CUDA 12 driver)"


def need_cupy():
    """CuPy, on a box with a GPU that CuPy sees (the GPU is asked about first: on a box without
    one, that is the reason to give, not CuPy's absence)."""
    need_gpus(1)
    cupy = need_module("cupy", CUPY_INSTALL)
    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise Skip("CuPy sees no GPU; check CUDA_VISIBLE_DEVICES and the driver")
    return cupy
