"""The managed-memory guard.

Asking CUDA for more managed (unified) memory than the card has free can hang the GPU for every
process on the host, not only the one that asked. So every managed allocation the suite makes
goes through a ``ManagedGuard``: it keeps a running total and refuses any request that would
take the total above a cap set below the card's free memory, unless the user has opted in to
oversubscription explicitly. Never opt in on a shared GPU.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field

from harness.units import gb

OPT_IN_ENV = "OOMBENCH_ALLOW_OVERSUBSCRIPTION"
OPT_IN_FLAG = "--allow-oversubscription"
# NVLink multicast (NVLS) can take a shared host's GPUs out of service: every process the suite
# starts, and every distributed worker, runs with it off.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Of the memory free when the guard is made; the rest is left for the CUDA context, the
# framework's own buffers and whatever else is on the card.
DEFAULT_CAP_FRACTION = 0.9


class OversubscriptionRefused(Exception):
    pass


def opted_in(environ=None) -> bool:
    value = (os.environ if environ is None else environ).get(OPT_IN_ENV, "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


@dataclass
class ManagedGuard:
    free_bytes: int
    fraction: float = DEFAULT_CAP_FRACTION
    allow_oversubscription: bool = field(default_factory=opted_in)
    gpu: int = 0
    allocated: int = 0

    def __post_init__(self):
        if not 0 < self.fraction < 1:
            raise ValueError(f"cap fraction must be between 0 and 1 (exclusive), got {self.fraction}")
        if self.free_bytes <= 0:
            raise ValueError(f"free memory must be positive, got {self.free_bytes}")

    @property
    def cap(self) -> int:
        return int(self.free_bytes * self.fraction)

    def fits(self, nbytes: int) -> bool:
        return self.allocated + nbytes <= self.cap

    def check(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"allocation size must be >= 0, got {nbytes}")
        if self.allow_oversubscription or self.fits(nbytes):
            return
        raise OversubscriptionRefused(
            f"managed allocation of {gb(nbytes)} refused: with {gb(self.allocated)} already allocated "
            f"it would pass the cap of {gb(self.cap)} ({self.fraction:.2f} of the {gb(self.free_bytes)} "
            f"free on GPU {self.gpu}). Oversubscribing managed memory can hang a shared GPU for everyone on "
            f"the host. Only on a machine you own: set {OPT_IN_ENV}=1 or pass {OPT_IN_FLAG}.")

    def reserve(self, nbytes: int) -> None:
        self.check(nbytes)
        self.allocated += nbytes

    def release(self, nbytes: int) -> None:
        self.allocated = max(0, self.allocated - nbytes)

    def wrap(self, malloc, hand_out=None):
        """An allocator that checks each request, then calls ``malloc(nbytes)``; the bytes are
        released when what it handed out is garbage-collected.

        By default the release hangs on a weak reference to ``malloc``'s result. Objects that take
        no weak reference (CuPy's memory) pass ``hand_out(mem, reservation)``, which returns what
        to hand out, holding ``reservation`` for as long as the memory lives.
        """
        def guarded(nbytes: int):
            self.reserve(nbytes)
            try:
                mem = malloc(nbytes)
            except BaseException:
                self.release(nbytes)
                raise
            if hand_out is not None:
                return hand_out(mem, _Reservation(self, nbytes))
            weakref.finalize(mem, self.release, nbytes)
            return mem
        return guarded

    @classmethod
    def for_gpu(cls, gpu: int = 0, fraction: float = DEFAULT_CAP_FRACTION, devices=None) -> "ManagedGuard":
        from harness.measure.devices import discover
        from harness.measure.outcomes import Skip
        devices = devices if devices is not None else discover()
        if gpu >= devices.count:
            raise Skip(f"managed memory needs GPU {gpu}, and this box has {devices.count} ({devices.reason or 'too few'})")
        return cls(free_bytes=devices.gpus[gpu].memory_free, fraction=fraction, gpu=gpu)


class _Reservation:
    """Gives its bytes back to the guard when it is collected."""

    def __init__(self, guard: ManagedGuard, nbytes: int):
        self._release = weakref.finalize(self, guard.release, nbytes)
