"""The scenario as users first meet it: the managed pool set as CuPy's allocator, three
``size x size`` float64 ``cupy.ones`` arrays, summed, the result checked.

``size`` comes from the card: the five arrays alive at the peak (a, b, c, the temporary a + b,
and the sum) take ``fraction`` of the card's total memory. Under 1 it stays under the guard's
cap; past 1 it reaches past the card, and runs only with the opt-in. Every step starts from an
empty pool, so it pays for fresh managed pages as a first run does.
"""
from __future__ import annotations

from math import isqrt

from harness.workloads.cupy.managed import install_cupy_allocator
from harness.measure.outcomes import CheckFailed
from harness.measure.guards.requirements import need_cupy, need_gpus
from harness.measure.guards.workingset import card_total, guard_managed, working_set_bytes
from harness.cases.base import Case
from harness.measure.workload import Workload

FRACTIONS = (0.4, 0.8, 1.5)
ARRAYS_AT_PEAK = 5


def size_for(fraction: float, total_bytes: int) -> int:
    """The largest size whose five float64 size x size arrays fit in ``fraction`` of the card."""
    return isqrt(working_set_bytes(fraction, total_bytes) // (ARRAYS_AT_PEAK * 8))


def seed(cupy, size: int):
    a = cupy.ones((size, size))
    b = cupy.ones((size, size))
    c = cupy.ones((size, size))
    return a + b + c


def build(fraction: float) -> Workload:
    devices = need_gpus(1)
    cupy = need_cupy()
    size = size_for(fraction, card_total(devices))
    nbytes = ARRAYS_AT_PEAK * 8 * size * size
    spill = "an oversubscribed working set, which spills to the host" if fraction > 1 else None
    guard = guard_managed(fraction, nbytes, devices, spill)
    pool = install_cupy_allocator(cupy, "managed_pool", guard)
    seed(cupy, 256)  # compiles the kernels
    state = {}

    def prepare():
        state.clear()
        pool.free_all_blocks()

    def step():
        state["sum"] = seed(cupy, size)

    def check():
        total = state.get("sum")
        if total is None or total.shape != (size, size):
            raise CheckFailed("seed: no size x size result")
        low, high = float(total.min()), float(total.max())
        if not low == high == 3.0:
            raise CheckFailed(f"seed: a + b + c of ones ranges {low}..{high}, expected 3 everywhere")
        return {"exact": True, "size": size}

    # Three fills write three arrays; two additions read two and write one each.
    work = {"bytes": 9 * 8 * size * size, "working_set_bytes": nbytes}
    return Workload(step=step, check=check, prepare=prepare, work=work, sync=cupy.cuda.runtime.deviceSynchronize,
                    gpus=(0,), warmup=0, repeat=3)


# Under the card's size the pages are first touched on the GPU and stay there (a device stream);
# past it they spill, and the host link bounds the step. Either way each step's fresh pages are
# faulted in through the driver, on the host: its pace is the host's.
CASE = Case(name="unified_seed", params={"fraction": FRACTIONS}, build=build,
            bound_by=lambda fraction: "h2d_pinned" if fraction > 1 else "device_copy",
            host_paced=lambda fraction: True, doc=__doc__)
