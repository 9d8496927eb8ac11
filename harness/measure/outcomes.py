"""How a case ends other than with a figure.

- ``Skip``: it cannot run here (no GPU, too few GPUs, library missing, API unsupported). The
  reason names the fix.
- ``DoesNotFit``: it ran out of memory. That is a result ("does not fit"), recorded with the
  size it asked for, not a crash.
- ``CheckFailed``: it ran but computed a wrong answer, so its timing means nothing.
"""
from __future__ import annotations

import math

import re

OK = "ok"
SKIPPED = "skipped"
DOES_NOT_FIT = "does_not_fit"
FAILED = "failed"
OUTCOMES = (OK, SKIPPED, DOES_NOT_FIT, FAILED)


class Skip(Exception):
    """The case cannot run here; the message says why and how to fix it."""


DEVICE, HOST = "device", "host"  # the memory a case ran short of


class DoesNotFit(Exception):
    """The case asked for more memory than it has. ``requested_bytes``: what it asked for, where
    known; ``memory``: which memory ran short: ``DEVICE``, that of the device the case runs on (the
    host's for a CPU case), or ``HOST`` for a GPU case's way out that keeps its data on the host."""

    def __init__(self, message: str, requested_bytes: int | None = None, memory: str = DEVICE):
        super().__init__(message)
        self.requested_bytes, self.memory = requested_bytes, memory


class CheckFailed(Exception):
    """The case's result disagrees with its reference. ``details``: what was compared (say, both
    loss curves), kept in the failed record's ``check`` so that the failure can be read back.
    ``priced``: the steps did all their work and only trained another curve than the reference's
    (accumulation under BatchNorm, say), so their time is a price and the record keeps it; a wrong
    answer (a kernel's, a garbage loss) is not priced: its time may be of work never done."""

    def __init__(self, message: str, details: dict | None = None, priced: bool = False):
        super().__init__(message)
        self.details = details or {}
        self.priced = priced


_UNITS = {"b": 1, "bytes": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50, "eib": 2**60,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
# PyTorch CUDA: "Tried to allocate 20.00 GiB"; PyTorch CPU: "you tried to allocate 123 bytes";
# NumPy: "Unable to allocate 4.00 EiB for an array"; CuPy: "Out of memory allocating 1,024 bytes".
_SIZE = re.compile(r"(?:tried to allocate|unable to allocate|out of memory allocating)\s+([\d,.]+)\s*([a-z]+)", re.I)

_OOM_TYPES = ("OutOfMemoryError",)
# Under an allocator cap (a budget, a what-fits probe) cuBLAS and cuDNN can fail to get their
# workspace and say so in their own words rather than as torch's OutOfMemoryError.
LIBRARY_OOM = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE")
_OOM_TEXT = ("out of memory", "can't allocate memory", "unable to allocate", "cudaErrorMemoryAllocation", *LIBRARY_OOM)


def requested_bytes(message: str) -> int | None:
    m = _SIZE.search(message)
    if not m:
        return None
    unit = _UNITS.get(m.group(2).lower())
    return int(float(m.group(1).replace(",", "")) * unit) if unit else None


def is_out_of_memory(exc: BaseException) -> bool:
    """True for the out-of-memory errors of Python, NumPy, PyTorch (CPU and CUDA) and CuPy."""
    if isinstance(exc, (MemoryError, DoesNotFit)):
        return True
    if type(exc).__name__ in _OOM_TYPES:
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(t.lower() in text.lower() for t in _OOM_TEXT)


def as_does_not_fit(exc: BaseException, declared_bytes: int | None = None) -> DoesNotFit:
    if isinstance(exc, DoesNotFit):
        return exc
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    size = requested_bytes(str(exc))
    return DoesNotFit(f"does not fit: {first_line}", size if size is not None else declared_bytes)


def learned(losses, drop: float = 1.0) -> dict:
    """The check every training case makes of its losses, one rule for all: every loss finite and
    the last below ``drop`` x the first. Returns the first and last loss and the step count;
    raises CheckFailed naming the step or the shortfall."""
    values = [float(v) for v in losses]
    if not values:
        raise CheckFailed("no training step ran: ask for at least one")
    bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if bad is not None:
        raise CheckFailed(f"loss is {values[bad]} at step {bad + 1}: this technique broke training")
    if not values[-1] < drop * values[0]:
        need = "" if drop == 1.0 else f" (needs below {drop} x the first)"
        raise CheckFailed(f"training did not learn: loss {values[0]:.4g} at the first step, {values[-1]:.4g} "
                          f"after {len(values)}{need}")
    return {"loss_first": values[0], "loss_last": values[-1], "steps": len(values)}
