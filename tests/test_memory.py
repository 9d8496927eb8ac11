import sys
import time

import numpy as np

from harness.measure import memory
from harness.measure.memory import PeakMemory

MiB = 2**20


def test_host_peak_sees_a_short_lived_allocation():
    with PeakMemory() as before:
        pass
    with PeakMemory(period_s=0.001) as peak:
        block = np.ones(300 * MiB, dtype=np.uint8)  # touched, so resident
        del block
    assert peak.bytes["host.rss"] >= before.bytes["host.rss"] + 250 * MiB
    assert peak.bytes["host.max_rss"] >= peak.bytes["host.rss"] - 16 * MiB


def test_only_the_levels_present_are_labelled():
    with PeakMemory() as peak:
        pass
    assert set(peak.bytes) == {"host.rss", "host.max_rss"}  # no GPU, no CuPy here


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
        time.sleep(0.02)
        half.__spec__._initializing = False
        pool = Pool(5, 7)
        half.get_default_memory_pool = lambda: pool  # the import finished
        time.sleep(0.02)
        pool.used = pool.total = 1  # seen only if the sampler survived the half-import
    assert peak.bytes["allocator.cupy.pool_used"] == 5 and peak.bytes["allocator.cupy.pool_total"] == 7


def test_a_watched_pools_peak_is_kept():
    pool = Pool(2 * MiB, 4 * MiB)
    memory.watch_pool("async_pool", pool)
    try:
        with PeakMemory(period_s=0.001) as peak:
            time.sleep(0.02)
            pool.used = MiB
            time.sleep(0.02)
    finally:
        memory._WATCHED.clear()
    assert peak.bytes["allocator.cupy.async_pool.used"] == 2 * MiB
    assert peak.bytes["allocator.cupy.async_pool.total"] == 4 * MiB
