"""An emulated card: a memory budget smaller than the card a case runs on, enforced in the
allocator of the library the case uses.

Most people who meet "CUDA out of memory" have a 16 or 24 GB card; the suite runs on 80 and
141 GB ones. A budget makes the big card behave as the small one for the case's own
allocations, without asking the GPU for anything past its free memory:

- torch: ``torch.cuda.set_per_process_memory_fraction(limit / torch's total)``; the caching
  allocator raises its OutOfMemoryError past it;
- CuPy, and Chainer through CuPy: the pool's ``set_limit(size=limit)``, for the device pool and
  for a pool over managed memory alike; the pool raises OutOfMemoryError past it.

What the budget does not cap is stated, not hidden: the CUDA context, cuBLAS and cuDNN
workspaces taken outside the pool, and a library's own caches. The record keeps the budget's
name, its limit, the card and how it was enforced (``Record.budget``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.measure.outcomes import DoesNotFit, Skip
from harness.measure.safety import OPT_IN_ENV
from harness.units import GB, gb

BUDGETS = ("16GB", "24GB", "40GB", "80GB", "card")
# How each library's allocator is capped: what a record says was enforced.
ENFORCED = {"torch": "torch.cuda.set_per_process_memory_fraction of torch's total",
            "cupy": "cupy.cuda.MemoryPool.set_limit",
            "cupy_managed": "cupy.cuda.MemoryPool(malloc_managed).set_limit",
            "chainer": "cupy.cuda.MemoryPool.set_limit (Chainer's pool)"}


@dataclass(frozen=True)
class Budget:
    name: str  # one of BUDGETS
    limit_bytes: int  # what the allocator may hand out
    card_bytes: int  # the card's total memory
    enforced: str  # how (ENFORCED's value), "" where nothing caps it

    def to_dict(self) -> dict:
        return asdict(self)

    def managed_note(self, nbytes: int, memory_free: int) -> dict:
        """What a record on managed memory says of this budget: managed pages are not capped by
        it, and whether a set of ``nbytes`` had to leave a card with ``memory_free`` bytes free
        (only with the opt-in: the guard admits no more than the card has free)."""
        evicted = nbytes > memory_free
        return {"budget_enforced": False, "evicted": evicted,
                "note": (f"managed pages are not capped by the {self.name} budget: the {gb(nbytes)} set "
                         + ("oversubscribes the card (opted in), so pages are evicted to the host" if evicted else
                            f"stays under the card's {gb(memory_free)} free, so nothing is evicted on this card; "
                            f"true oversubscription runs only with {OPT_IN_ENV}=1 on a machine you own"))}

    def over(self, nbytes: int, what: str) -> DoesNotFit:
        """The does-not-fit of ``what`` asking ``nbytes`` under this budget, before it is allocated."""
        return DoesNotFit(f"does not fit: {what} needs {gb(nbytes)}, over the {self.name} budget "
                          f"({gb(self.limit_bytes)} of a {gb(self.card_bytes)} card)", nbytes)


def budget_bytes(name: str, card_total: int) -> int:
    """Bytes of budget ``name`` on a card of ``card_total`` bytes; Skip, naming the fix, when the
    card is smaller than the budget (an emulated card must be a smaller one)."""
    if name == "card":
        return card_total
    if name not in BUDGETS:
        raise ValueError(f"budget {name!r} is not one of {', '.join(BUDGETS)}: pass one of them")
    wanted = int(name.removesuffix("GB")) * GB
    if wanted > card_total:
        raise Skip(f"budget {name} is larger than this card ({gb(card_total)}): run it on a card with {name} or more")
    return wanted


def of(name: str, card_total: int, allocator: str | None) -> Budget:
    """Budget ``name`` on this card, enforced in ``allocator`` (a key of ENFORCED; None: not capped)."""
    if allocator is not None and allocator not in ENFORCED:
        raise ValueError(f"allocator {allocator!r} is not one of {', '.join(ENFORCED)}")
    return Budget(name, budget_bytes(name, card_total), card_total, ENFORCED.get(allocator, ""))


def enforce_torch(budget: Budget, device: int = 0) -> None:
    """Caps torch's caching allocator on ``device`` at the budget."""
    cap_torch(budget.limit_bytes, device)


def cap_torch(limit_bytes: int, device: int = 0) -> int:
    """Caps torch's caching allocator on ``device`` at ``limit_bytes`` (at most the whole card);
    returns the bytes it allows. torch applies the fraction to its own total (the device's
    ``total_memory``), which is less than NVML's by what the driver keeps: a fraction of NVML's
    total would cap short of the limit, by a different amount on each card."""
    import torch
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total), device)
    return min(limit_bytes, total)


def enforce_pool(budget: Budget, pool) -> None:
    """Caps a CuPy ``MemoryPool`` (device or managed) at the budget."""
    pool.set_limit(size=budget.limit_bytes)
