"""A working set beyond an emulated card, by each way out a shared GPU allows: the pool capped at
the budget (``device_pool``), managed memory under its guard (``managed_pool``), pinned host memory
streamed through device buffers (``out_of_core``, ``harness.workloads.cupy.streamed``) or mapped
for the GPU (``zero_copy``, ``harness.workloads.cupy.mapped``). Shared by the ``beyond`` case (a
multiple of the budget, any pattern) and the ``seed000`` case (the seed's three arrays, added).
"""
from __future__ import annotations

from harness.measure.guards import budget as budgets
from harness.measure.guards.requirements import need_cupy
from harness.measure.guards.safety import OversubscriptionRefused
from harness.measure.guards.workingset import card, guard_managed, need_host
from harness.measure.outcomes import DoesNotFit
from harness.measure.workload import Workload
from harness.workloads.cupy import streamed
from harness.workloads.cupy.kernels import build as build_pattern
from harness.workloads.cupy.managed import install_cupy_allocator
from harness.workloads.cupy.mapped import use_mapped

WAYS = ("device_pool", "managed_pool", "out_of_core", "zero_copy")
# The allocator a way's budget is enforced in (ENFORCED's key); None: nothing of the set is capped.
ALLOCATOR = {"device_pool": "cupy", "out_of_core": "cupy", "managed_pool": None, "zero_copy": None}
OVER_THE_LINK = ("out_of_core", "zero_copy")


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
        return streamed.on_budget(cupy, budget, name, nbytes, what)
    if way == "zero_copy":
        use_mapped(cupy)
        return on_device(cupy, name, nbytes, extra_work=lambda pat: link_bytes(pat, name),
                         note={"device_bytes_of_set": 0})
    fit_pool(budget, cupy.get_default_memory_pool(), nbytes, what)
    return on_device(cupy, name, nbytes)


def bound_by(way, pattern, budget=None, times=None):
    """Over the host link the pinned host-to-device rate bounds it; on the card (managed pages
    stay resident there) a product by fp32 matmul, the rest by device copy."""
    if way in OVER_THE_LINK:
        return "h2d_pinned"
    return "matmul_fp32" if pattern == "matmul" else "device_copy"
