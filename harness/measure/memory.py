"""Peak memory at the levels that differ in practice, each under its own label.

- ``allocator.torch.max_allocated.cuda:N``: bytes held by live tensors at the peak.
- ``allocator.torch.max_reserved.cuda:N``: bytes PyTorch's caching allocator held from the driver.
- ``allocator.cupy.pool_used`` / ``allocator.cupy.pool_total``: CuPy's default pool (sampled,
  since CuPy keeps no peak of its own); ``allocator.cupy.NAME.used`` / ``.total`` for a pool a
  case set as the allocator and named with ``watch_pool``.
- ``device.used.gpuN``: NVML's used memory, what nvidia-smi shows: the CUDA context and any other
  process on the card included. ``device.used_before.gpuN`` is the same figure before the case
  started, so the case's own share is the difference.
- ``host.rss``: this process's resident set, sampled; ``host.max_rss``: the kernel's own peak
  of it over the process's life (each case runs in a fresh process, so that is the case's).

Sampled figures can miss a spike shorter than the sampling period; the allocator peaks cannot.
"""
from __future__ import annotations

import resource
import sys
import threading

import psutil

SAMPLE_PERIOD_S = 0.005


class _Nvml:
    def __init__(self, indices):
        self.indices = list(indices)
        self.handles = []
        if not self.indices:
            return
        import pynvml
        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]

    def used(self) -> dict[int, int]:
        return {i: self._used(h) for i, h in zip(self.indices, self.handles)}

    def _used(self, handle) -> int:
        # Version 2 counts the driver's reserved memory apart from "used", as nvidia-smi does;
        # version 1 folds it into "used" (about 600 MiB on an H200).
        try:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.nvml.nvmlMemory_v2).used)
        except (AttributeError, TypeError, self.nvml.NVMLError):
            return int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def close(self):
        if self.handles:
            self.nvml.nvmlShutdown()


_WATCHED: dict[str, object] = {}


def watch_pool(name: str, pool) -> None:
    """Samples ``pool`` (anything with used_bytes() and total_bytes()) under its name."""
    _WATCHED[name] = pool


def _imported(name: str):
    """The module if its import has finished. The sampler runs beside the case, which may be
    importing the framework right then: a half-imported module lacks what is read here."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def _cupy_pool():
    cupy = _imported("cupy")
    return cupy.get_default_memory_pool() if cupy is not None else None


def _torch_cuda():
    torch = _imported("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda


class PeakMemory:
    """Context manager: ``with PeakMemory(gpus=[0]) as peak: ...; peak.bytes`` -> {label: bytes}."""

    def __init__(self, gpus=(), period_s: float = SAMPLE_PERIOD_S):
        self.gpus = list(gpus)
        self.period_s = period_s
        self.bytes: dict[str, int] = {}
        self._stop = threading.Event()

    def __enter__(self):
        self._process = psutil.Process()
        self._nvml = _Nvml(self.gpus)
        for i, used in self._nvml.used().items():
            self.bytes[f"device.used_before.gpu{i}"] = used
        cuda = _torch_cuda()
        if cuda is not None:
            for i in range(cuda.device_count()):
                cuda.reset_peak_memory_stats(i)
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        self._nvml.close()
        self._read_torch()
        self.bytes["host.max_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return False

    def _run(self):
        while not self._stop.wait(self.period_s):
            self._sample()

    def _peak(self, label: str, value: int):
        if value > self.bytes.get(label, -1):
            self.bytes[label] = int(value)

    def _sample(self):
        self._peak("host.rss", self._process.memory_info().rss)
        for i, used in self._nvml.used().items():
            self._peak(f"device.used.gpu{i}", used)
        pool = _cupy_pool()
        if pool is not None:
            self._peak("allocator.cupy.pool_used", pool.used_bytes())
            self._peak("allocator.cupy.pool_total", pool.total_bytes())
        for name, pool in list(_WATCHED.items()):
            self._peak(f"allocator.cupy.{name}.used", pool.used_bytes())
            self._peak(f"allocator.cupy.{name}.total", pool.total_bytes())

    def _read_torch(self):
        cuda = _torch_cuda()
        if cuda is None:
            return
        for i in range(cuda.device_count()):
            self.bytes[f"allocator.torch.max_allocated.cuda:{i}"] = int(cuda.max_memory_allocated(i))
            self.bytes[f"allocator.torch.max_reserved.cuda:{i}"] = int(cuda.max_memory_reserved(i))
