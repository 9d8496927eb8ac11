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

from harness.workloads.cupy.kernels import PATTERNS
from harness.workloads.cupy.kernels import build as build_pattern
from harness.workloads.cupy.managed import install_cupy_allocator
from harness.workloads.cupy.mapped import use_mapped
from harness.measure.guards import budget as budgets
from harness.measure.outcomes import DoesNotFit, Skip
from harness.measure.guards.requirements import need_cupy, need_gpus
from harness.measure.guards.safety import OversubscriptionRefused
from harness.measure.guards.workingset import card, guard_managed, need_host
from harness.cases import out_of_core
from harness.cases.base import Case
from harness.measure.workload import Workload

WAYS = ("device_pool", "managed_pool", "out_of_core", "zero_copy")
TIMES = (1.5, 3.0)
# The allocator a way's budget is enforced in (ENFORCED's key); None: nothing of the set is capped.
ALLOCATOR = {"device_pool": "cupy", "out_of_core": "cupy", "managed_pool": None, "zero_copy": None}
OVER_THE_LINK = ("out_of_core", "zero_copy")


def refuse(way: str, pattern: str) -> None:
    """Skips, with the way that runs it, a pattern a way does not apply to."""
    if way == "out_of_core" and pattern not in out_of_core.PATTERNS:
        raise Skip(f"out_of_core streams each element once, in order: pattern {pattern!r} reads "
                   f"{'random rows of the whole table' if pattern == 'gather' else 'its operands many times'}, "
                   f"which no chunk order serves; run it with way=zero_copy or way=managed_pool, or "
                   f"out_of_core with pattern={' or '.join(out_of_core.PATTERNS)}")


def set_bytes(budget: budgets.Budget, times: float) -> int:
    """The working set: ``times`` the budget's limit."""
    if not times > 1:
        raise ValueError(f"a working set beyond the budget is more than 1 x it, got {times}: pass times > 1")
    return int(times * budget.limit_bytes)


def fit_pool(budget: budgets.Budget, pool, nbytes: int, what: str) -> None:
    """Caps ``pool`` at the budget; does-not-fit, before anything is allocated, where ``nbytes``
    cannot fit under it."""
    budgets.enforce_pool(budget, pool)
    if nbytes > budget.limit_bytes:
        raise budget.over(nbytes, what)


def link_bytes(pattern, name: str) -> dict:
    """Bytes a step moves over the host link when the set lives in host memory: the inputs read,
    the outputs written; a gather reads only its indices and the rows they name."""
    if name == "gather":
        count = pattern.work["bytes"] // 24
        return {"h2d_bytes": 16 * count, "d2h_bytes": 8 * count}
    read = sum(a.nbytes for a in pattern.inputs)
    return {"h2d_bytes": read, "d2h_bytes": pattern.nbytes - read}


def on_device(cupy, name: str, nbytes: int, extra_work=None, note=None) -> Workload:
    """``name`` over ``nbytes`` from whatever allocator CuPy has now."""
    pat = build_pattern(name, cupy, nbytes)
    sync = cupy.cuda.runtime.deviceSynchronize
    sync()
    work = dict(pat.work, working_set_bytes=pat.nbytes, **(extra_work(pat) if extra_work else {}))
    return Workload(step=pat.step, sync=sync, gpus=(0,), work=work, warmup=1, repeat=5,
                    check=lambda: dict(pat.check(), **(note or {})))


def way_workload(way: str, name: str, nbytes: int, budget: budgets.Budget, devices, what: str) -> Workload:
    """Pattern ``name`` over a working set of ``nbytes`` by ``way``, under ``budget``."""
    gpu = card(devices)
    if way == "managed_pool":
        guard = guard_managed(nbytes / gpu.memory_total, nbytes, devices)
        cupy = need_cupy()
        install_cupy_allocator(cupy, "managed_pool", guard)
        try:
            return on_device(cupy, name, nbytes, note=budget.managed_note(nbytes, gpu.memory_free))
        except OversubscriptionRefused as e:  # the set was admitted; a temporary on top of it was not
            raise DoesNotFit(f"does not fit under the managed-memory guard's cap: {e}", nbytes) from None
    if way != "device_pool":
        need_host(nbytes, f"the {'pinned' if way == 'out_of_core' else 'mapped pinned'} host copy of {what}")
    cupy = need_cupy()
    if way == "out_of_core":
        return out_of_core.on_budget(cupy, budget, name, nbytes, what)
    if way == "zero_copy":
        use_mapped(cupy)
        return on_device(cupy, name, nbytes, extra_work=lambda pat: link_bytes(pat, name),
                         note={"device_bytes_of_set": 0})
    fit_pool(budget, cupy.get_default_memory_pool(), nbytes, what)
    return on_device(cupy, name, nbytes)


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


def bound_by(way, pattern, budget=None, times=None):
    """Over the host link the pinned host-to-device rate bounds it; on the card (managed pages
    stay resident there) a product by fp32 matmul, the rest by device copy."""
    if way in OVER_THE_LINK:
        return "h2d_pinned"
    return "matmul_fp32" if pattern == "matmul" else "device_copy"


CASE = Case(name="beyond", params={"way": WAYS, "pattern": PATTERNS, "budget": budgets.CARD_BUDGETS, "times": TIMES},
            build=build, declared_bytes=declared_bytes, bound_by=bound_by,
            allocator=lambda way, **_: ALLOCATOR[way], doc=__doc__)
