"""Working sets sized as a fraction of a card's memory, and the limits each must respect.

A fraction is of the card's total memory, so the same sweep means the same thing on an 80 GB
and a 141 GB card. Above 1 the working set cannot be resident at once: oversubscription, which
runs only with the explicit opt-in (``harness.measure.guards.safety``). Managed memory that must start on the
host, and pinned host buffers, also need that much host memory: they are held to half of what
the host has available, so that a sweep never pushes the box into swap or the OOM killer.

"The card" is CUDA device 0 of this process, found through ``CUDA_VISIBLE_DEVICES``
(``harness.measure.instruments.devices.cuda_gpu``), never NVML's GPU 0: NVML numbers every GPU of the host.
"""
from __future__ import annotations

import psutil

from harness.measure.guards.inputs import HOST_MEMORY_ENV, host_memory_bytes
from harness.measure.outcomes import Skip
from harness.measure.guards.safety import OPT_IN_ENV, OPT_IN_FLAG, ManagedGuard, OversubscriptionRefused
from harness.units import gb

# The sweep a case declares; benchmark classes pick the subset they run (see benchmarks/unified.py).
FRACTIONS = (0.02, 0.1, 0.25, 0.4, 0.8, 1.5)
HOST_CAP_FRACTION = 0.5


def card(devices, ordinal: int = 0):
    """The GPU behind CUDA device ``ordinal`` here; a Skip saying why where there is none."""
    from harness.measure.instruments.devices import cuda_gpu
    gpu = cuda_gpu(ordinal, devices)
    if gpu is None:
        raise Skip(f"needs CUDA device {ordinal}, and this process sees {devices.count} GPU(s) "
                   f"({devices.reason or 'CUDA_VISIBLE_DEVICES hides it'}): run it on a GPU box")
    return gpu


def card_total(devices, ordinal: int = 0) -> int:
    """Total bytes of the card a working set is sized for (see ``card``)."""
    return card(devices, ordinal).memory_total


def working_set_bytes(fraction: float, total_bytes: int) -> int:
    if not fraction > 0:
        raise ValueError(f"working-set fraction must be above 0, got {fraction}")
    if total_bytes <= 0:
        raise ValueError(f"card memory must be positive, got {total_bytes}")
    return int(fraction * total_bytes)


def admit_managed(fraction: float, nbytes: int, guard: ManagedGuard) -> None:
    """Refuses, with the fix in the message, a managed working set past the card without the
    opt-in, or past the guard's cap."""
    if fraction > 1 and not guard.allow_oversubscription:
        raise OversubscriptionRefused(
            f"working set of {fraction:g} x the card's memory ({gb(nbytes)}) oversubscribes GPU {guard.gpu}: "
            f"it runs only when you opt in, on a machine you own ({OPT_IN_ENV}=1 or {OPT_IN_FLAG}); "
            "oversubscribing managed memory can hang a shared GPU for every process on the host")
    guard.check(nbytes)


def host_available(environ=None) -> int:
    """Host memory available, in bytes. Some VMs (the lent multi-GPU boxes among them) report little
    memory until it is first used: ``HOST_MEMORY_ENV`` states what the host really has, in GB."""
    stated = host_memory_bytes(environ)
    return stated if stated is not None else int(psutil.virtual_memory().available)


def host_share(available: int) -> int:
    """The share of the host's available memory one process may take (``HOST_CAP_FRACTION``)."""
    return int(available * HOST_CAP_FRACTION)


def need_host(nbytes: int, what: str, available: int | None = None) -> None:
    available = host_available() if available is None else available
    cap = host_share(available)
    if nbytes > cap:
        raise Skip(f"{what} needs {gb(nbytes)} of host memory; the limit is {HOST_CAP_FRACTION:g} of the "
                   f"{gb(available)} available ({gb(cap)}): run it on a host with more memory "
                   f"(on a VM that grows its memory as it is used, state it with {HOST_MEMORY_ENV})")


def guard_managed(fraction: float, nbytes: int, devices, host_use: str | None = None) -> ManagedGuard:
    """A guard for CUDA device 0 (the card the memory lands on) that has admitted this working set;
    a refusal is a skip with its fix. ``host_use`` says why the set also needs host memory, where it does."""
    guard = ManagedGuard.for_gpu(devices=devices)
    try:
        admit_managed(fraction, nbytes, guard)
    except OversubscriptionRefused as e:
        raise Skip(f"refused by the managed-memory guard: {e}") from None
    if host_use:
        need_host(nbytes, host_use)
    return guard
