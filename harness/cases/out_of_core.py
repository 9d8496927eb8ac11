"""Explicit out-of-core streaming from pinned host memory: the baseline experts use in place of
unified memory (``harness.workloads.cupy.chunked`` holds the schedule and sizes the chunks).

The working set lives in pinned host memory and never needs to fit on the card, so fractions
above 1 need no opt-in: only host memory. Each step streams it through two device buffers:
``stream`` computes out = x + y chunk by chunk and copies each result back; ``reduce`` sums x.
The chunk is sized from the set (``chunk_elements``), so that filling and draining the pipeline
stays a small part of the step at every size. ``budget`` is the emulated card the device buffers
are drawn under: CuPy's pool is capped at it and the chunks are sized to fit it.

Work per step: ``bytes`` as the on-device pattern counts them (so the figures compare with the
``unified`` case), ``h2d_bytes`` and ``d2h_bytes`` over the host link, and the ``chunk_bytes``
and ``chunks`` used; the h2d rate is read against the pinned host-to-device ceiling.
"""
from __future__ import annotations

from harness.measure.guards import budget as budgets
from harness.measure.guards.requirements import need_cupy, need_gpus
from harness.measure.guards.workingset import FRACTIONS, card_total, working_set_bytes
from harness.cases.base import Case
from harness.measure.workload import Workload
from harness.workloads.cupy.streamed import PATTERNS, on_budget


def build(pattern: str, fraction: float, budget: str) -> Workload:
    devices = need_gpus(1)
    cupy = need_cupy()
    total = card_total(devices)
    nbytes = working_set_bytes(fraction, total)
    capped = budgets.resolve(budget, total, "cupy")
    with budgets.handed_back(capped) as hand:
        return hand(on_budget(cupy, capped, pattern, nbytes, "the working set"))


# Every chunk crosses the pinned host-to-device link; the overlap hides the compute behind it.
CASE = Case(name="out_of_core", params={"pattern": PATTERNS, "fraction": FRACTIONS, "budget": budgets.BUDGETS},
            build=build, bound_by=lambda pattern, fraction, budget: "h2d_pinned",
            allocator=lambda **_: "cupy", earlier={"budget": "card"}, doc=__doc__)
