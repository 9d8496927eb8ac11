"""Working sets beyond an emulated card: each way out a shared GPU allows, and the device pool
that has none.

``budget`` is the emulated card (``harness.measure.guards.budget``); ``times`` the working set as a
multiple of it, so every set here is larger than the card it pretends to be. ``way``:

- ``device_pool``: CuPy's pool capped at the budget: the set cannot be allocated there, and the
  record is does-not-fit with the bytes it asks for (checked before anything is allocated);
- ``out_of_core``: the set in pinned host memory, streamed through device buffers sized to fit
  the budget (``harness.cases.out_of_core``); stream and reduce only;
- ``zero_copy``: the set in pinned host memory mapped for the GPU (``harness.workloads.cupy.mapped``),
  read and written in place by the kernels over the host link. Not managed memory: it may be
  larger than the card, host memory permitting;
- ``managed_pool``: CuPy's managed pool, admitted by the managed-memory guard, so the set stays
  under the card's free memory. The budget is not enforced on managed pages, and on this card
  nothing is evicted: the record says so in its check (``budget_enforced``, ``evicted``) and
  declares no enforcing allocator. True oversubscription runs only with the opt-in
  (``harness.measure.guards.safety``), on a machine the user owns.

``pattern`` is one of ``harness.workloads.cupy.kernels``'s: stream, reduce, matmul, gather. Work per
step: the pattern's ``bytes`` (and ``flops``), ``working_set_bytes``, and for the ways over the
host link ``h2d_bytes`` and ``d2h_bytes``, so that the report reads the rate as a fraction of
pinned host-to-device.
"""
from __future__ import annotations

from harness.workloads.cupy import streamed
from harness.workloads.cupy.beyond import ALLOCATOR, WAYS, bound_by, way_workload
from harness.workloads.cupy.kernels import PATTERNS
from harness.measure.guards import budget as budgets
from harness.measure.outcomes import Skip
from harness.measure.guards.requirements import need_gpus
from harness.measure.guards.workingset import card
from harness.cases.base import Case
from harness.measure.workload import Workload

TIMES = (1.5, 3.0)


def refuse(way: str, pattern: str) -> None:
    """Skips, with the way that runs it, a pattern a way does not apply to."""
    if way == "out_of_core" and pattern not in streamed.PATTERNS:
        raise Skip(f"out_of_core streams each element once, in order: pattern {pattern!r} reads "
                   f"{'random rows of the whole table' if pattern == 'gather' else 'its operands many times'}, "
                   f"which no chunk order serves; run it with way=zero_copy or way=managed_pool, or "
                   f"out_of_core with pattern={' or '.join(streamed.PATTERNS)}")


def set_bytes(budget: budgets.Budget, times: float) -> int:
    """The working set: ``times`` the budget's limit."""
    if not times > 1:
        raise ValueError(f"a working set beyond the budget is more than 1 x it, got {times}: pass times > 1")
    return int(times * budget.limit_bytes)


def build(way: str, pattern: str, budget: str, times: float) -> Workload:
    refuse(way, pattern)
    devices = need_gpus(1)
    b = budgets.resolve(budget, card(devices).memory_total, ALLOCATOR[way])
    with budgets.handed_back(b) as hand:
        return hand(way_workload(way, pattern, set_bytes(b, times), b, devices, f"a {times:g} x {budget} working set"))


def declared_bytes(way, pattern, budget, times):
    from harness.measure.instruments.devices import discover
    devices = discover()
    if not devices.count:
        return None
    return set_bytes(budgets.resolve(budget, card(devices).memory_total, None), times)


CASE = Case(name="beyond", params={"way": WAYS, "pattern": PATTERNS, "budget": budgets.CARD_BUDGETS, "times": TIMES},
            build=build, declared_bytes=declared_bytes, bound_by=bound_by,
            allocator=lambda way, **_: ALLOCATOR[way], doc=__doc__)
