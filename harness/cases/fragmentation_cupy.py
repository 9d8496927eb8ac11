"""CuPy's pools on a workload that fragments: ``harness.workloads.training.fragmenting.AttentionStack``, a
step of ``depth`` softmax-attention layers over ``batch x 1024`` tokens cut into sequences of the
step's length, every layer's scores and output kept to the step's end (as autograd keeps them).

Parameters: ``pool`` (``device_pool``, ``async_pool`` or ``limited_pool``:
``harness.workloads.training.allocator``), ``shapes`` (the lengths, as in ``fragmentation``), ``budget``
(every pool capped at the emulated card with ``set_limit``), ``batch``, ``width``, ``depth``.

The check recomputes the last step's first sequence on the host in float64 and holds the device's
output to it; it keeps the pool's used and held bytes at each step's end (where everything the step
made is alive) and ``fragmentation``, the largest held over the largest used, and the limit
``limited_pool`` ran under (``pool_limit``)."""
from __future__ import annotations

from harness.cases.base import Case
from harness.measure.guards.budget import BUDGETS, is_whole_card, resolve
from harness.measure.instruments.memory import fragmentation
from harness.measure.outcomes import CheckFailed
from harness.measure.guards.requirements import need_cupy
from harness.measure.workload import Workload
from harness.workloads.training import allocator as settings
from harness.workloads.training.fragmenting import REFERENCE, AttentionStack, live_bytes, shapes_of

CASE_NAME = "fragmentation_cupy"
PARAMS = {"pool": settings.CUPY, "shapes": ("uniform128-4096", "fixed1024"), "budget": BUDGETS, "batch": (16,),
          "width": (128,), "depth": (12,)}


def largest_live(shapes, tokens: int, width: int, depth: int) -> int:
    """The most any step at a length ``shapes`` can draw holds live at its end."""
    return max(live_bytes(tokens, n, width, depth) for n in range(shapes.low, shapes.high + 1))


def build(pool, shapes, budget, batch, width, depth) -> Workload:
    cupy = need_cupy()
    import numpy
    from harness.measure.instruments.devices import discover
    from harness.measure.guards.workingset import card_total
    dist, tokens = shapes_of(shapes), batch * REFERENCE
    live = largest_live(dist, tokens, width, depth)
    capped = None if is_whole_card(budget) else resolve(budget, card_total(discover()), "cupy")
    chosen = settings.use_cupy_pool(cupy, pool, None if capped is None else capped.limit_bytes, live)
    work = AttentionStack(cupy, dist, tokens, width, depth, pool=chosen)

    def check():
        result = work.check(numpy)
        used, held = (max(h[i] for h in work.highs) for i in (0, 1))
        out = {**result, "sizes": work.sizes.drawn[:work.done], "largest_live": live, "step_used": used,
               "step_held": held, "fragmentation": fragmentation(held, used),
               "pool_limit": chosen.get_limit() if hasattr(chosen, "get_limit") else None}
        if not result["ok"]:
            raise CheckFailed(f"the device's attention differs from the host's by {result['rel_err']:.3g} of its "
                              f"largest value, over the {result['tolerance']:g} allowed", out)
        return out

    def sync():
        cupy.cuda.Device().synchronize()

    return Workload(step=work, sync=sync, check=check, work={"tokens": tokens}, gpus=(0,), warmup=3, repeat=20,
                    budget=capped)


CASE = Case(name=CASE_NAME, params=PARAMS, build=build, doc=__doc__, allocator=lambda **_: "cupy")
