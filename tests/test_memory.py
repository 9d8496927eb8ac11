import sys
import time

import numpy as np

from harness.measure import memory
from harness.measure.memory import PeakMemory

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

        def __exit__(self, *exc):
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
