import sys
import time

import numpy as np

from harness.measure.instruments import memory
from harness.measure.instruments.memory import PeakMemory

MiB = 2**20


def steps(peak, work=lambda: None):
    peak.steps_begin()
    work()
    peak.steps_end()


def allocate(mib):
    block = np.ones(mib * MiB, dtype=np.uint8)  # touched, so resident
    del block


def test_host_peak_sees_a_short_lived_allocation():
    with PeakMemory() as before:
        steps(before)
    with PeakMemory(period_s=0.001) as peak:
        steps(peak, lambda: allocate(300))
    assert peak.bytes["host.rss"] >= before.bytes["host.rss"] + 250 * MiB
    assert peak.bytes["host.max_rss"] >= peak.bytes["host.rss"] - 16 * MiB


def test_set_up_and_what_follows_the_steps_are_not_the_steps_peak():
    with PeakMemory(period_s=0.001) as peak:
        allocate(400)  # build
        steps(peak, lambda: allocate(50))
        allocate(400)  # the check
    step, setup = peak.bytes["host.max_rss"], peak.bytes["setup.host.max_rss"]
    assert setup - step >= 300 * MiB
    assert peak.bytes["setup.host.rss"] - peak.bytes["host.rss"] >= 300 * MiB


def test_only_the_levels_present_are_labelled():
    with PeakMemory() as peak:
        steps(peak)
    assert set(peak.bytes) == {"host.rss", "host.max_rss", "setup.host.rss", "setup.host.max_rss"}


def test_a_case_that_never_reached_its_steps_has_set_up_levels_only():
    with PeakMemory() as peak:
        pass
    assert set(peak.bytes) == {"setup.host.rss", "setup.host.max_rss"}


class Pool:
    def __init__(self, used, total):
        self.used, self.total = used, total

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.total


def test_a_framework_half_way_through_its_import_is_not_read(monkeypatch):
    import importlib.machinery
    import types
    half = types.ModuleType("cupy")  # as sys.modules holds it while `import cupy` runs
    half.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    half.__spec__._initializing = True
    monkeypatch.setitem(sys.modules, "cupy", half)
    with PeakMemory(period_s=0.001) as peak:
        peak.steps_begin = lambda: None  # sampled in set-up: stays under setup.
        time.sleep(0.02)
        half.__spec__._initializing = False
        pool = Pool(5, 7)
        half.get_default_memory_pool = lambda: pool  # the import finished
        time.sleep(0.02)
        pool.used = pool.total = 1  # seen only if the sampler survived the half-import
    assert peak.bytes["setup.allocator.cupy.pool_used"] == 5 and peak.bytes["setup.allocator.cupy.pool_total"] == 7


def test_a_watched_pools_peak_is_kept():
    pool = Pool(2 * MiB, 4 * MiB)
    memory.watch_pool("async_pool", pool)
    try:
        with PeakMemory(period_s=0.001) as peak:
            steps(peak, lambda: (time.sleep(0.02), setattr(pool, "used", MiB), time.sleep(0.02)))
    finally:
        memory._WATCHED.clear()
    assert peak.bytes["allocator.cupy.async_pool.used"] == 2 * MiB
    assert peak.bytes["allocator.cupy.async_pool.total"] == 4 * MiB


def fake_cupy(monkeypatch, pool):
    """A stand-in for CuPy with its memory-hook interface: the pool calls the entered hooks'
    malloc_postprocess after each allocation, as CuPy's MemoryPool.malloc does."""
    import types
    hooks = []

    class MemoryHook:
        def __enter__(self):
            hooks.append(self)

        def __exit__(self, exc_type, exc_value, traceback):  # CuPy's signature
            hooks.remove(self)

        def malloc_postprocess(self, **kwargs):
            pass

    cupy = types.ModuleType("cupy")
    cupy.get_default_memory_pool = lambda: pool
    cupy.cuda = types.ModuleType("cupy.cuda")
    cupy.cuda.memory_hook = types.ModuleType("cupy.cuda.memory_hook")
    cupy.cuda.memory_hook.MemoryHook = MemoryHook
    for name, module in (("cupy", cupy), ("cupy.cuda", cupy.cuda), ("cupy.cuda.memory_hook", cupy.cuda.memory_hook)):
        monkeypatch.setitem(sys.modules, name, module)

    def malloc(nbytes):
        pool.used += nbytes
        pool.total = max(pool.total, pool.used)
        for hook in list(hooks):
            hook.malloc_postprocess(device_id=0, size=nbytes, mem_size=nbytes, mem_ptr=0, pmem_id=0)
    return malloc


def test_the_pools_step_peak_is_read_at_every_allocation_not_sampled(monkeypatch):
    pool = Pool(8 * MiB, 8 * MiB)
    malloc = fake_cupy(monkeypatch, pool)

    def step():  # an array lives for far less than a sampling period, then is freed
        malloc(32 * MiB)
        pool.used -= 32 * MiB

    with PeakMemory(period_s=3600) as peak:
        steps(peak, step)
        malloc(100 * MiB)  # the check's allocation: after the steps, not theirs
    assert peak.bytes["allocator.cupy.pool_used"] == 40 * MiB
    assert peak.bytes["allocator.cupy.pool_total"] == 40 * MiB


def test_the_pool_hook_is_named_and_gone_after_the_steps(monkeypatch):
    pool = Pool(0, 0)
    malloc = fake_cupy(monkeypatch, pool)
    entered = []
    with PeakMemory(period_s=3600) as peak:
        peak.steps_begin()
        entered.append(peak._hook.hook.name)
        malloc(MiB)
        peak.steps_end()
        assert peak._hook is None
    assert entered == ["oombench.peak"] and peak.bytes["allocator.cupy.pool_used"] == MiB


def fake_torch(monkeypatch, gpus=2):
    """A stand-in for torch.cuda's caching allocator on each GPU: its peaks follow what is
    allocated and go back to what is held when reset, as torch's do."""
    import types
    held = [0] * gpus
    peak = [0] * gpus
    reserved_extra = MiB  # the allocator reserves a little more than it hands out

    def allocate(gpu, nbytes):
        held[gpu] += nbytes
        peak[gpu] = max(peak[gpu], held[gpu])

    def reset(gpu):
        peak[gpu] = held[gpu]

    cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, device_count=lambda: gpus,
        max_memory_allocated=lambda i: peak[i], max_memory_reserved=lambda i: peak[i] + reserved_extra,
        reset_peak_memory_stats=reset)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return allocate


def test_the_torch_peak_of_the_steps_leaves_set_up_and_the_check_out(monkeypatch):
    allocate = fake_torch(monkeypatch)
    with PeakMemory(period_s=3600) as peak:
        allocate(0, 10 * MiB)  # the model, held through the steps
        allocate(0, 500 * MiB), allocate(0, -500 * MiB)  # set-up's scratch, freed before the steps
        allocate(1, 7 * MiB)
        steps(peak, lambda: (allocate(0, 50 * MiB), allocate(0, -50 * MiB), allocate(1, 3 * MiB)))
        allocate(0, 900 * MiB)  # the check, after the steps
    got = peak.bytes
    assert got["allocator.torch.max_allocated.cuda:0"] == 60 * MiB
    assert got["allocator.torch.max_reserved.cuda:0"] == 61 * MiB
    assert got["allocator.torch.max_allocated.cuda:1"] == 10 * MiB
    assert got["setup.allocator.torch.max_allocated.cuda:0"] == 510 * MiB
    assert got["setup.allocator.torch.max_reserved.cuda:1"] == 8 * MiB


def test_a_case_that_failed_in_set_up_keeps_its_torch_peak_as_set_up(monkeypatch):
    allocate = fake_torch(monkeypatch, gpus=1)
    with PeakMemory(period_s=3600) as peak:
        allocate(0, 300 * MiB)
    assert peak.bytes["setup.allocator.torch.max_allocated.cuda:0"] == 300 * MiB
    assert "allocator.torch.max_allocated.cuda:0" not in peak.bytes


def test_no_torch_peak_is_read_while_cuda_is_not_initialised(monkeypatch):
    allocate = fake_torch(monkeypatch, gpus=1)
    sys.modules["torch"].cuda.is_initialized = lambda: False
    with PeakMemory(period_s=3600) as peak:
        steps(peak, lambda: allocate(0, MiB))
    assert not any("torch" in label for label in peak.bytes)


def fake_nvml(monkeypatch, used_v2, reserved=600 * MiB, v2=True):
    """pynvml over two cards: version 2 of the memory info reports ``used_v2[i]``, version 1
    folds the driver's reserved memory into it, as NVML does."""
    import types
    calls = []

    class NVMLError(Exception):
        pass

    def memory_info(handle, version=None):
        if version is not None and version is not nvml.nvmlMemory_v2:
            raise NVMLError("unknown version")
        used = used_v2[handle[1]] + (0 if version is not None else reserved)
        return types.SimpleNamespace(used=used)

    nvml = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i), nvmlDeviceGetMemoryInfo=memory_info)
    if v2:
        nvml.nvmlMemory_v2 = object()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return calls


def test_the_cards_used_memory_before_and_during_the_steps_as_nvidia_smi_counts_it(monkeypatch):
    used = [5 * MiB, 7 * MiB, 11 * MiB]
    calls = fake_nvml(monkeypatch, used)
    with PeakMemory(gpus=[2, 1], period_s=3600) as peak:
        used[2] += 100 * MiB  # set-up
        steps(peak, lambda: used.__setitem__(1, used[1] + 30 * MiB))
    assert calls == ["init", "shutdown"]
    got = {k: v // MiB for k, v in peak.bytes.items() if "device" in k}
    assert got == {"device.used_before.gpu2": 11, "device.used_before.gpu1": 7,
                   "setup.device.used.gpu2": 111, "setup.device.used.gpu1": 7,
                   "device.used.gpu2": 111, "device.used.gpu1": 37}


def test_an_nvml_without_version_2_reports_version_1s_used(monkeypatch):
    fake_nvml(monkeypatch, [3 * MiB], v2=False)
    with PeakMemory(gpus=[0], period_s=3600) as peak:
        pass
    assert peak.bytes["device.used_before.gpu0"] == 603 * MiB


def test_no_card_no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it would fail
    with PeakMemory(period_s=3600) as peak:
        steps(peak)
    assert not any("device" in k for k in peak.bytes)


def test_the_kernels_high_water_mark_is_read_and_reset_through_proc(monkeypatch, tmp_path):
    import io
    written = []

    class Clear(io.StringIO):
        def __exit__(self, *exc):
            written.append(self.getvalue())

    files = {"/proc/self/status": lambda mode: io.StringIO("Name:\tpython\nVmPeak:\t 9 kB\nVmHWM:\t    1234 kB\n"),
             "/proc/self/clear_refs": lambda mode: Clear()}
    monkeypatch.setattr(memory, "open", lambda path, mode="r": files[path](mode), raising=False)
    assert memory._vm_hwm() == 1234 * 1024
    assert memory._reset_hwm() is True and written == ["5"]

    def refused(path, mode="r"):
        raise PermissionError(path)
    monkeypatch.setattr(memory, "open", refused, raising=False)
    assert memory._vm_hwm() is None and memory._reset_hwm() is False


def test_without_proc_the_max_rss_is_getrusages_in_bytes(monkeypatch):
    import types
    monkeypatch.setattr(memory.resource, "getrusage", lambda who: types.SimpleNamespace(ru_maxrss=7))  # KiB
    monkeypatch.setattr(memory, "_vm_hwm", lambda: None)
    monkeypatch.setattr(memory, "_reset_hwm", lambda: False)
    assert memory._ru_maxrss() == 7 * 1024
    with PeakMemory(period_s=3600) as peak:
        steps(peak)
    assert peak.bytes["setup.host.max_rss"] == 7 * 1024
    assert "host.max_rss" not in peak.bytes  # not reset, so no steps' own mark
    with PeakMemory(period_s=3600) as failed:
        pass
    assert failed.bytes["setup.host.max_rss"] == 7 * 1024


def test_torchs_peaks_are_reset_once_when_the_steps_begin(monkeypatch):
    allocate = fake_torch(monkeypatch, gpus=1)
    cuda = sys.modules["torch"].cuda
    resets = []
    reset = cuda.reset_peak_memory_stats
    cuda.reset_peak_memory_stats = lambda i: (resets.append(i), reset(i))
    with PeakMemory(period_s=3600) as peak:
        steps(peak, lambda: allocate(0, MiB))
    assert resets == [0]  # torch's own counters are left as they are for whoever reads them next
    with PeakMemory(period_s=3600):
        allocate(0, MiB)  # failed in set-up
    assert resets == [0]


def test_a_level_of_zero_bytes_is_kept_and_nothing_after_the_steps_counts():
    pool = Pool(0, 0)
    memory.watch_pool("empty", pool)
    try:
        with PeakMemory(period_s=3600) as peak:
            steps(peak)
            pool.used = pool.total = 5 * MiB
            peak._sample()  # the sampler's next tick, after the steps
    finally:
        memory._WATCHED.clear()
    assert peak.bytes["allocator.cupy.empty.used"] == 0 and peak.bytes["allocator.cupy.empty.total"] == 0


def test_an_error_in_the_case_goes_through():
    import pytest
    with pytest.raises(ZeroDivisionError):
        with PeakMemory(period_s=3600):
            _ = 1 / 0
