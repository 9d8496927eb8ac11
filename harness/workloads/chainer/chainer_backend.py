"""Where a Chainer case runs: the device, and on the GPU the CuPy allocator Chainer draws from.

- ``device=cpu, pool=numpy``: Chainer on NumPy (the CPU runs and the tests);
- ``device=cuda, pool=device_pool``: Chainer's default, CuPy's pool over cudaMalloc;
- ``device=cuda, pool=managed_pool``: the fix Chainer users were given for `out of memory`,
  ``cupy.cuda.set_allocator(cupy.cuda.MemoryPool(cupy.cuda.malloc_managed).malloc)``, with every
  managed request through the guard (``harness.measure.guards.safety``), which caps the total below the card's
  free memory.

``budget`` (``harness.measure.guards.budget``) is the emulated card: on the device pool it caps CuPy's pool
(``set_limit``), so a step past it runs out of memory and is recorded as does-not-fit. On the
managed pool it caps nothing: the managed pool is the way past the card, the guard keeps the set
under the card's free memory, and nothing is evicted on this card; the check says so
(``budget_enforced``, ``evicted``). On the CPU there is no card to emulate: only ``card``.

Any other pairing is skipped with the pairing that works. Chainer takes CuPy's default pool
(``chainer.backends.cuda.memory_pool``) and sets no allocator of its own, so the one set here,
after Chainer's import and before any array is made, is the one every Chainer array comes from.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from harness.workloads.cupy.managed import install_cupy_allocator
from harness.measure.guards import budget as budgets
from harness.measure.outcomes import DoesNotFit, Skip
from harness.measure.guards.requirements import need_cupy, need_gpus, need_module
from harness.measure.guards.safety import OversubscriptionRefused
from harness.measure.instruments.timing import no_sync
from harness.measure.guards.workingset import card, card_total, guard_managed
from harness.units import gb

DEVICES = ("cpu", "cuda")
POOLS = ("numpy", "device_pool", "managed_pool")
SCIPY_INSTALL = "pip install scipy (Chainer's sparse_matmul on the CPU runs through SciPy)"


@dataclass
class Backend:
    chainer: object
    device: object  # a chainer.backend.Device: send() puts host arrays where the case runs
    sync: Callable[[], None] = no_sync
    gpus: tuple = ()
    shims: list = field(default_factory=list)
    notes: dict = field(default_factory=dict)  # what the check says of the budget
    budget: budgets.Budget | None = None  # as resolved on the GPU, for the record (``budgets.handed_back``)


def allocator(device: str, pool: str, **_) -> str | None:
    """The allocator a Chainer case's budget is enforced in (``Case.allocator``): Chainer's CuPy
    pool on the GPU; none on the managed pool (see the module's doc) or the CPU."""
    return "chainer" if (device, pool) == ("cuda", "device_pool") else None


def check_pairing(device: str, pool: str) -> None:
    """Skips a pairing that cannot run; the values themselves were checked by the case's config."""
    if device == "cpu" and pool != "numpy":
        raise Skip(f"pool={pool} is a CuPy allocator, for the GPU: run it with device=cuda "
                   "(device=cpu runs on NumPy: pool=numpy)")
    if device == "cuda" and pool == "numpy":
        raise Skip("pool=numpy is the CPU's: device=cuda takes pool=device_pool (Chainer's default) "
                   "or pool=managed_pool")


def _chainer():
    from harness.workloads.chainer.compat_chainer import import_chainer
    try:
        return import_chainer()
    except ImportError as e:
        raise Skip(str(e)) from None


def _cupy():
    devices = need_gpus(1)
    return need_cupy(), devices


def open_backend(device: str, pool: str, declared_bytes: int, budget: str = "card") -> Backend:
    """Skips, with the fix, where this pairing cannot run here; ``declared_bytes`` is what the
    case will ask for, admitted by the managed-memory guard before anything is allocated."""
    check_pairing(device, pool)
    if device == "cpu" and not budgets.is_whole_card(budget):
        raise Skip(f"budget {budget} emulates a smaller GPU by capping CuPy's pool: run it with device=cuda "
                   "(device=cpu takes budget=card)")
    if device == "cpu":
        need_module("scipy", SCIPY_INSTALL)
        chainer, shims = _chainer()
        return Backend(chainer=chainer, device=chainer.get_device("@numpy"), shims=shims)
    cupy, devices = _cupy()
    emulated = budgets.resolve(budget, card_total(devices), allocator(device, pool))
    chainer, shims = _chainer()
    if not chainer.backends.cuda.available:
        raise Skip("Chainer imported but cannot use CuPy (chainer.backends.cuda.available is False): "
                   "check that `import cupy` works in this interpreter")
    guard = None
    if pool == "managed_pool":
        guard = guard_managed(declared_bytes / card_total(devices), declared_bytes, devices)
    made = install_cupy_allocator(cupy, pool, guard)
    notes = {}
    if pool == "device_pool":
        budgets.enforce_pool(emulated, made)
    else:
        notes = emulated.managed_note(declared_bytes, card(devices).memory_free)
    return Backend(chainer=chainer, device=chainer.get_device("@cupy:0"),
                   sync=cupy.cuda.runtime.deviceSynchronize, gpus=(0,), shims=shims, notes=notes,
                   budget=emulated)


def guard_refusal_does_not_fit(declared_bytes: int):
    """A managed request the guard refuses part-way through is a does-not-fit under the cap
    (the declared figure is an estimate; the guard counts what is really asked for)."""
    def wrap(fn):
        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except OversubscriptionRefused as e:
                raise DoesNotFit(f"does not fit under the managed-memory guard's cap "
                                 f"(about {gb(declared_bytes)} declared): {e}", declared_bytes) from None
        return guarded
    return wrap
