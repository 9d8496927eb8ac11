"""The managed-memory guard.

Asking CUDA for more managed (unified) memory than the card has free can hang the GPU for every
process on the host, not only the one that asked. So every managed allocation the suite makes
goes through a ``ManagedGuard``: it keeps a running total and refuses any request that would
take the total above a cap set below the card's free memory, unless the user has opted in to
oversubscription explicitly. Never opt in on a shared GPU.

The cap is of the GPU, not of one process: a guard made for a GPU (``for_gpu``) keeps its
reservations in that GPU's ledger (``ManagedLedger``, a JSON file per GPU UUID, changed only
under its lock), so every process on the card, of every run, counts against one cap: the
fraction of what was free when the first of them reserved. Entries of dead processes drop out.
"""
from __future__ import annotations

import itertools
import json
import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path

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


_GUARD_IDS = itertools.count(1)


def _started(pid: int) -> float | None:
    import psutil
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


class ManagedLedger:
    """The managed reservations of every process on one GPU: ``{"free": bytes free when the
    first live entry was made, "entries": [{"pid", "started", "guard", "bytes"}]}``."""

    def __init__(self, path):
        self.path = Path(path)

    @classmethod
    def for_uuid(cls, uuid: str) -> "ManagedLedger":
        from harness.measure.guards.locks import gpu_lock
        return cls(str(gpu_lock(uuid)).removesuffix(".lock") + ".managed.json")

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}  # pragma: no mutate (any non-dict reads as the empty ledger below)
        data = data if isinstance(data, dict) else {}
        # Its baseline is read only where a live entry holds bytes (``change``).
        return {"free": data.get("free"), "entries": [e for e in data.get("entries", []) if
                                                      _started(e["pid"]) == e["started"]]}

    def _write(self, data: dict) -> None:
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def change(self, guard: int, nbytes: int, free: int, admit) -> int:
        """Sets this process's ``guard`` entry to ``nbytes`` once ``admit(others, free)``
        returns without raising (``others``: bytes the other entries hold; ``free``: the GPU's
        baseline, this guard's ``free`` where no one else holds any); returns the baseline."""
        from filelock import FileLock
        with FileLock(str(self.path) + ".lock"):
            data = self._read()
            mine = [e for e in data["entries"] if (e["pid"], e["guard"]) == (os.getpid(), guard)]
            others = [e for e in data["entries"] if e not in mine]
            base = data["free"] if others and data["free"] else free
            admit(sum(e["bytes"] for e in others), base)
            me = os.getpid()
            started = _started(me)  # pragma: no mutate (psutil.Process(None) is this process too)
            entry = [{"pid": me, "started": started, "guard": guard, "bytes": nbytes}]
            self._write({"free": base, "entries": others + (entry if nbytes else [])})
            return base

    def held(self) -> int:
        """Bytes the live entries hold together."""
        return sum(e["bytes"] for e in self._read()["entries"])


def opted_in(environ=None) -> bool:
    environ = os.environ if environ is None else environ
    value = environ.get(OPT_IN_ENV, "")  # pragma: no mutate (any stand-in for unset reads as no)
    return value.strip().lower() in {"1", "true", "yes", "on"}


@dataclass
class ManagedGuard:
    free_bytes: int
    fraction: float = DEFAULT_CAP_FRACTION
    allow_oversubscription: bool = field(default_factory=opted_in)
    gpu: int = 0
    allocated: int = 0
    ledger: ManagedLedger | None = None  # None: this guard's own reservations only
    _id: int = field(default_factory=lambda: next(_GUARD_IDS), repr=False, compare=False)

    def __post_init__(self):
        if not 0 < self.fraction < 1:
            raise ValueError(f"cap fraction must be between 0 and 1 (exclusive), got {self.fraction}")
        if self.free_bytes <= 0:
            raise ValueError(f"free memory must be positive, got {self.free_bytes}")
        if self.ledger is not None:  # a guard collected unreleased leaves nothing held in the ledger
            # (no mutate: the baseline it passes is read only beside a live entry, and it leaves none)
            weakref.finalize(self, _forget, self.ledger, self._id, self.free_bytes)  # pragma: no mutate

    @property
    def cap(self) -> int:
        return int(self.free_bytes * self.fraction)

    def fits(self, nbytes: int) -> bool:
        return self.allocated + nbytes <= self.cap

    def check(self, nbytes: int) -> None:
        self._admit(nbytes, 0, self.free_bytes)
        if self.ledger is not None:
            self.ledger.change(self._id, self.allocated, self.free_bytes,
                               lambda others, free: self._admit(nbytes, others, free))

    def _admit(self, nbytes: int, others: int, free: int) -> None:
        if nbytes < 0:
            raise ValueError(f"allocation size must be >= 0, got {nbytes}")
        cap = int(free * self.fraction)
        if self.allow_oversubscription or others + self.allocated + nbytes <= cap:
            return
        elsewhere = f" and {gb(others)} reserved by other processes on this GPU" if others else ""
        raise OversubscriptionRefused(
            f"managed allocation of {gb(nbytes)} refused: with {gb(self.allocated)} already allocated{elsewhere} "
            f"it would pass the cap of {gb(cap)} ({self.fraction:.2f} of the {gb(free)} "
            f"free on GPU {self.gpu}). Oversubscribing managed memory can hang a shared GPU for everyone on "
            f"the host. Only on a machine you own: set {OPT_IN_ENV}=1 or pass {OPT_IN_FLAG}.")

    def reserve(self, nbytes: int) -> None:
        if self.ledger is None:
            self._admit(nbytes, 0, self.free_bytes)
        else:
            self.ledger.change(self._id, self.allocated + nbytes, self.free_bytes,
                               lambda others, free: self._admit(nbytes, others, free))
        self.allocated += nbytes

    def release(self, nbytes: int) -> None:
        self.allocated = max(0, self.allocated - nbytes)
        if self.ledger is not None:
            _forget(self.ledger, self._id, self.free_bytes, self.allocated)

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
        """The guard of CUDA device ``gpu`` as this process numbers it (``CUDA_VISIBLE_DEVICES``
        honoured): its free memory, and its ledger, shared by every process on that GPU."""
        from harness.measure.instruments.devices import cuda_gpu, discover
        from harness.measure.outcomes import Skip
        devices = devices if devices is not None else discover()
        card = cuda_gpu(gpu, devices)
        if card is None:
            raise Skip(f"managed memory needs CUDA device {gpu}, and this process sees "
                       f"{devices.count} GPU(s) ({devices.reason or 'too few, or CUDA_VISIBLE_DEVICES hides it'})")
        return cls(free_bytes=card.memory_free, fraction=fraction, gpu=gpu, ledger=ManagedLedger.for_uuid(card.uuid))


def _forget(ledger: ManagedLedger, guard: int, free: int, keep: int = 0) -> None:
    """Sets a guard's ledger entry to ``keep`` bytes; never raises (it runs from finalizers)."""
    try:
        ledger.change(guard, keep, free, lambda others, base: None)  # pragma: no mutate (admits all: its value unread)
    except Exception:
        pass


class _Reservation:
    """Gives its bytes back to the guard when it is collected."""

    def __init__(self, guard: ManagedGuard, nbytes: int):
        self._release = weakref.finalize(self, guard.release, nbytes)
