"""Peak memory at the levels that differ in practice, each under its own label, for the timed
steps alone; what build and warm-up took is kept apart under ``setup.``.

- ``allocator.torch.max_allocated.cuda:N``: bytes held by live tensors at the peak.
- ``allocator.torch.max_reserved.cuda:N``: bytes PyTorch's caching allocator held from the driver.
- ``allocator.cupy.pool_used`` / ``allocator.cupy.pool_total``: CuPy's default pool;
  ``allocator.cupy.NAME.used`` / ``.total`` for a pool a case set as the allocator and named with
  ``watch_pool``. During the steps these are read at every allocation (a CuPy memory hook), so
  no short-lived array is missed; during set-up they are sampled.
- ``device.used.gpuN``: NVML's used memory, what nvidia-smi shows: the CUDA context and any other
  process on the card included (sampled). ``device.used_before.gpuN`` is the same figure before
  the case started, so the case's own share is the difference.
- ``host.rss``: this process's resident set, sampled; ``host.max_rss``: the kernel's own
  high-water mark of it (reset when the steps begin, where the kernel allows it).

Why the steps alone: a case's build (random inputs made on the host, a model moved over) and its
check (a float64 reference, an equality test) allocate what the technique being measured never
needs; their peak would be charged to the technique.
"""
from __future__ import annotations

import resource
import sys
import threading
from contextlib import ExitStack

import psutil

from harness.measure.instruments.devices import nvml

# The prefix of the memory levels of a case's set-up (schema 2 on): not its steps', so never gated.
SETUP = "setup."
SAMPLE_PERIOD_S = 0.005


class _Nvml:
    def __init__(self, indices):
        self.indices = list(indices)
        self.handles = []
        self._held = ExitStack()
        if not self.indices:
            return
        self.nvml = self._held.enter_context(nvml())
        self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]

    def used(self) -> dict[int, int]:
        return {i: self._used(h) for i, h in zip(self.indices, self.handles)}

    def _used(self, handle) -> int:
        # Version 2 counts the driver's reserved memory apart from "used", as nvidia-smi does;
        # version 1 folds it into "used", which would charge every case with what no case allocated.
        try:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.nvml.nvmlMemory_v2).used)
        except (AttributeError, TypeError, self.nvml.NVMLError):
            return int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def close(self):
        self._held.close()


_WATCHED: dict[str, object] = {}


def watch_pool(name: str, pool) -> None:
    """Samples ``pool`` (anything with used_bytes() and total_bytes()) under its name."""
    _WATCHED[name] = pool


def _imported(name: str):
    """The module if its import has finished. The sampler runs beside the case, which may be
    importing the framework right then: a half-imported module lacks what is read here."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is None or getattr(spec, "_initializing", False):  # pragma: no mutate (None is as false)
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


def _vm_hwm() -> int | None:
    """The kernel's high-water mark of this process's resident set (VmHWM), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_hwm() -> bool:
    """Resets VmHWM to the current resident set (Linux: "5" into clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _PoolHook:
    """Reads the CuPy pools' used and total bytes after every allocation from a pool: the exact
    peak, where sampling would miss an array that lives between two samples. CuPy's hooks are
    per thread: this one is entered in the thread that runs the steps."""

    def __init__(self, on_alloc):
        from cupy.cuda import memory_hook

        class Hook(memory_hook.MemoryHook):
            name = "oombench.peak"

            def malloc_postprocess(self, **kwargs):
                on_alloc()

        self.hook = Hook()

    def __enter__(self):
        self.hook.__enter__()
        return self

    def __exit__(self, *exc):
        self.hook.__exit__(*exc)


class PeakMemory:
    """``with PeakMemory(gpus=[0]) as peak: build; warm up; peak.steps_begin(); steps;
    peak.steps_end()``; then ``peak.bytes`` -> {label: bytes}: plain labels for the steps,
    ``setup.`` labels for what came before them. Without ``steps_begin`` (a case that failed
    or did not fit while being built) every level is a set-up level."""

    def __init__(self, gpus=(), period_s: float = SAMPLE_PERIOD_S):
        self.gpus = list(gpus)
        self.period_s = period_s
        self._levels = {"setup": {}, "steps": {}}
        self._phase = "setup"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hook = None
        self._hwm_reset = False  # pragma: no mutate (read only after steps_begin sets it)

    @property
    def bytes(self) -> dict[str, int]:
        setup = {(k if k.startswith("device.used_before.") else SETUP + k): v for k, v in self._levels["setup"].items()}
        return {**setup, **self._levels["steps"]}

    def __enter__(self):
        self._process = psutil.Process()
        self._nvml = _Nvml(self.gpus)
        for i, used in self._nvml.used().items():
            self._levels["setup"][f"device.used_before.gpu{i}"] = used
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)  # pragma: no mutate (joined in __exit__)
        self._thread.start()
        return self

    def steps_begin(self) -> None:
        """The timed steps start: set-up's peaks are put aside and every peak starts again from
        the levels held now (the allocators' own peaks reset, CUDA being initialised by now)."""
        self._sample()
        self._read_torch(reset=True)
        self._levels["setup"]["host.max_rss"] = _vm_hwm() or _ru_maxrss()
        self._hwm_reset = _reset_hwm()
        with self._lock:
            self._phase = "steps"
        self._sample()
        cupy = _imported("cupy")
        if cupy is not None:
            self._hook = _PoolHook(self._sample_pools).__enter__()

    def steps_end(self) -> None:
        """The timed steps are over: what the check allocates after them is not theirs."""
        if self._phase != "steps":
            return
        if self._hook is not None:
            self._hook.__exit__(None, None, None)
            self._hook = None
        self._sample()
        self._read_torch(reset=False)  # pragma: no mutate (None is as false)
        if self._hwm_reset:
            self._levels["steps"]["host.max_rss"] = _vm_hwm()
        with self._lock:
            self._phase = "done"

    def __exit__(self, *exc):
        self.steps_end()
        self._stop.set()
        self._thread.join()
        if self._phase == "setup":
            self._sample()
            self._read_torch(reset=False)  # pragma: no mutate (None is as false)
            self._levels["setup"]["host.max_rss"] = _ru_maxrss()
        self._nvml.close()
        return False

    def _run(self):
        while not self._stop.wait(self.period_s):
            self._sample()

    def _peak(self, label: str, value: int):
        with self._lock:
            if self._phase == "done":
                return
            levels = self._levels[self._phase]
            if value > levels.get(label, -1):  # pragma: no mutate (bytes are never negative; a tie keeps it)
                levels[label] = int(value)

    def _sample(self):
        self._peak("host.rss", self._process.memory_info().rss)
        for i, used in self._nvml.used().items():
            self._peak(f"device.used.gpu{i}", used)
        self._sample_pools()

    def _sample_pools(self):
        pool = _cupy_pool()
        if pool is not None:
            self._peak("allocator.cupy.pool_used", pool.used_bytes())
            self._peak("allocator.cupy.pool_total", pool.total_bytes())
        for name, pool in list(_WATCHED.items()):
            self._peak(f"allocator.cupy.{name}.used", pool.used_bytes())
            self._peak(f"allocator.cupy.{name}.total", pool.total_bytes())

    def _read_torch(self, reset: bool):
        cuda = _torch_cuda()
        if cuda is None:
            return
        for i in range(cuda.device_count()):
            self._peak(f"allocator.torch.max_allocated.cuda:{i}", cuda.max_memory_allocated(i))
            self._peak(f"allocator.torch.max_reserved.cuda:{i}", cuda.max_memory_reserved(i))
            if reset:
                cuda.reset_peak_memory_stats(i)


def fragmentation(reserved: int | None, allocated: int | None) -> float | None:
    """Bytes an allocator held from the driver over the bytes live tensors or arrays held, at
    their peaks: 1.0 where every cached byte was in use; None where nothing was allocated."""
    if not reserved or (allocated or 0) <= 0:
        return None
    return round(reserved / allocated, 4)


def reserved_peak(levels: dict) -> int | None:
    """The most bytes an allocator held over the steps, from a record's levels: torch's caching
    allocator's reserve, or a CuPy pool's total; None where neither was read."""
    held = [v for k, v in levels.items() if k.startswith("allocator.") and ("max_reserved" in k or k.endswith("total"))]
    return max(held) if held else None


def torch_peaks(cuda, device: int = 0) -> dict:
    """torch's peaks on ``device`` since they were last reset (``PeakMemory.steps_begin`` resets
    them: read before anything else allocates, they are the steps' own) and their ratio."""
    allocated, reserved = int(cuda.max_memory_allocated(device)), int(cuda.max_memory_reserved(device))
    return {"peak_allocated": allocated, "peak_reserved": reserved,
            "fragmentation": fragmentation(reserved, allocated)}


def _ru_maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
