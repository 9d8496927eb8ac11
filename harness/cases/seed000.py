"""Seed 000 exactly: three 8 GiB float64 arrays (2**30 elements each) and ``c = a + b``, the
scenario whose error was "out of memory to allocate 8589934592 bytes (total 17179869184 bytes)"
on a 16 GiB card, priced way by way under an emulated card (``budget``, 16GB by default in the
benchmarks).

``way`` as in ``harness.cases.beyond``: ``device_pool`` (CuPy's pool capped at the budget: the
three arrays do not fit under 16GB, recorded with the bytes they ask for), ``managed_pool`` (the
fix the seed was given; the budget is not enforced on managed pages and nothing is evicted on a
card with room for the set, as the record says), ``out_of_core`` (the arrays in pinned host memory,
added a chunk at a time) and ``zero_copy`` (the arrays in mapped pinned host memory, added in
place over the host link).

a[i] = i % 1021 and b[i] = i % 1019, so every c[i] is known: the check sums all of c against the
closed form and compares a sample element by element. The add writes into c's buffer
(``cupy.add(a, b, out=c)``), so three arrays are held, as in the seed; a step is one add. Memory
at every level (pool, device, host) is read by the runner.
"""
from __future__ import annotations

from harness.measure.guards import budget as budgets
from harness.measure.guards.requirements import need_gpus
from harness.measure.guards.workingset import card
from harness.cases.base import Case
from harness.measure.workload import Workload
from harness.workloads.cupy.beyond import ALLOCATOR, WAYS, bound_by as beyond_bound_by, way_workload

ELEMENTS = 2**30  # 8 GiB of float64: the allocation the seed's error names
ARRAYS = 3  # a, b and c
SET_BYTES = ARRAYS * 8 * ELEMENTS
WHAT = "seed 000's three float64 arrays of 2**30 elements"


def build(way: str, budget: str) -> Workload:
    devices = need_gpus(1)
    b = budgets.resolve(budget, card(devices).memory_total, ALLOCATOR[way])
    # The stream pattern is c = a + b over SET_BYTES / 24 = 2**30 elements per array.
    with budgets.handed_back(b) as hand:
        return hand(way_workload(way, "stream", SET_BYTES, b, devices, WHAT))


CASE = Case(name="seed000", params={"way": WAYS, "budget": budgets.CARD_BUDGETS}, build=build,
            declared_bytes=lambda way, budget: SET_BYTES,
            bound_by=lambda way, budget: beyond_bound_by(way, "stream"),
            allocator=lambda way, budget: ALLOCATOR[way], doc=__doc__)
