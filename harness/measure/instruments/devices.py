"""What GPUs this box has, read through NVML (what nvidia-smi shows).

NVML answers without creating a CUDA context, so discovery neither takes device memory nor
initialises CUDA in a process that may later fork. On a box without an NVIDIA driver it says
so in `Devices.reason` instead of raising.
"""
from __future__ import annotations

import ctypes
import os
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace

from harness.units import gb


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_total: int
    memory_free: int
    compute_capability: str
    uuid: str


@dataclass(frozen=True)
class Devices:
    gpus: tuple[GPU, ...] = ()
    driver: str | None = None
    cuda_driver: str | None = None
    # peer[i][j]: GPU i can read GPU j's memory directly (NVLink or PCIe peer-to-peer);
    # None where NVML could not tell.
    peer: tuple[tuple[bool | None, ...], ...] = ()
    reason: str | None = None

    @property
    def count(self) -> int:
        return len(self.gpus)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Devices":
        gpus = tuple(GPU(**g) for g in d.get("gpus", ()))
        peer = tuple(tuple(row) for row in d.get("peer", ()))
        return cls(gpus=gpus, driver=d.get("driver"), cuda_driver=d.get("cuda_driver"),
                   peer=peer, reason=d.get("reason"))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu(nvml, index: int) -> GPU:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
    return GPU(index=index, name=_text(nvml.nvmlDeviceGetName(h)), memory_total=int(mem.total),
               memory_free=int(mem.free), compute_capability=f"{major}.{minor}",
               uuid=_text(nvml.nvmlDeviceGetUUID(h)))


def _p2p_read_index(nvml) -> int:
    # nvidia-ml-py 13.x defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a stray comma),
    # which ctypes refuses; take the number inside.
    index = nvml.NVML_P2P_CAPS_INDEX_READ
    return index[0] if isinstance(index, tuple) else index


def _peer_matrix(nvml, n: int) -> tuple[tuple[bool | None, ...], ...]:
    """peer[i][j]: True or False as NVML reports it, None where NVML could not tell."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    read = _p2p_read_index(nvml)

    def ok(i, j):
        if i == j:
            return True
        try:
            return nvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], read) == nvml.NVML_P2P_STATUS_OK
        except (nvml.NVMLError, ctypes.ArgumentError):
            return None

    return tuple(tuple(ok(i, j) for j in range(n)) for i in range(n))


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


class _Session:
    """NVML initialised for a ``with`` block, which is given pynvml, and shut down after it."""

    def __init__(self, module):
        self.module = module

    def __enter__(self):
        self.module.nvmlInit()
        return self.module

    def __exit__(self, *exc):
        self.module.nvmlShutdown()


def nvml() -> _Session:
    """``with nvml() as pynvml:`` NVML for the block; NVML counts its initialisations, so blocks nest.
    Without nvidia-ml-py this call raises ImportError, before the block (a caller may ask for NVML
    first and look its card up after); without a driver, entering raises pynvml's NVMLError. What
    either means is the caller's to say."""
    import pynvml
    return _Session(pynvml)


def discover() -> Devices:
    try:
        session = nvml()
    except ImportError:
        return Devices(reason="nvidia-ml-py is not installed: pip install nvidia-ml-py")
    with ExitStack() as held:  # NVML that does not start is no GPU; one that fails after is an error
        try:
            pynvml = held.enter_context(session)
        except session.module.NVMLError as e:
            return Devices(reason=f"no NVIDIA GPU visible (NVML: {e})")
        n = pynvml.nvmlDeviceGetCount()
        gpus = tuple(_gpu(pynvml, i) for i in range(n))
        return Devices(gpus=gpus, driver=_text(pynvml.nvmlSystemGetDriverVersion()),
                       cuda_driver=_cuda_version(pynvml.nvmlSystemGetCudaDriverVersion()),
                       peer=_peer_matrix(pynvml, n),
                       reason=None if n else "NVML found no GPU")


VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def visible_entries(environ=None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: None when unset (every GPU, in order), else
    its entries up to the first empty one (CUDA ignores the rest)."""
    value = (os.environ if environ is None else environ).get(VISIBLE_ENV)
    if value is None:
        return None
    out = []
    for entry in value.split(","):
        if not entry.strip():
            break
        out.append(entry.strip())
    return out


def cuda_gpu(ordinal: int, devices: Devices | None = None, environ=None) -> GPU | None:
    """The GPU behind CUDA device ``ordinal`` of this process, or None where there is none.

    NVML numbers every GPU of the host and ignores ``CUDA_VISIBLE_DEVICES``; CUDA numbers only
    the visible ones, in that variable's order. Its entries are NVML indices (CUDA's and NVML's
    orders agree on a box of one GPU model: both by PCI bus), GPU UUIDs (``GPU-...``, a unique
    prefix will do) or MIG devices (``MIG-...``), whose own memory NVML reads by UUID."""
    devices = discover() if devices is None else devices
    entries = visible_entries(environ)
    if entries is None:
        return devices.gpus[ordinal] if 0 <= ordinal < devices.count else None
    if not 0 <= ordinal < len(entries):
        return None
    return _entry_gpu(entries[ordinal], devices)


def visible_indices(devices: Devices, environ=None) -> list[int]:
    """NVML's indices of the GPUs this process's CUDA can use, in CUDA's order, each once. A case
    pinned to one GPU of a shared box (``CUDA_VISIBLE_DEVICES``) reads the memory of that GPU
    alone: another process starting on a neighbour would otherwise count as its own peak."""
    entries = visible_entries(environ)
    if entries is None:
        return [g.index for g in devices.gpus]
    gpus = (cuda_gpu(o, devices, environ) for o in range(len(entries)))
    return list(dict.fromkeys(g.index for g in gpus if g is not None))


def _entry_gpu(entry: str, devices: Devices) -> GPU | None:
    if entry.isdigit():
        return next((g for g in devices.gpus if g.index == int(entry)), None)
    if entry.startswith("MIG-"):
        return _mig_gpu(entry, devices)
    matches = [g for g in devices.gpus if g.uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else None


def _mig_gpu(uuid: str, devices: Devices) -> GPU | None:
    """A MIG instance: its memory from NVML by its UUID, the rest from the GPU that holds it."""
    with ExitStack() as held:  # the shutdown outside the try: NVML failing to start or read means None, not to stop
        try:
            pynvml = held.enter_context(nvml())
            h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            parent = _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h)))
        except Exception:
            return None
    host = next((g for g in devices.gpus if g.uuid == parent), None)
    if host is None:
        return None
    return replace(host, memory_total=int(mem.total), memory_free=int(mem.free), uuid=uuid)


def gpu_processes() -> dict[int, int] | None:
    """NVML index -> how many compute processes hold each GPU of the box now, every GPU listed;
    None where NVML cannot say (no driver here). A sandbox that hides other containers'
    processes shows fewer: this sees what NVML lets it see."""
    with ExitStack() as held:
        try:
            pynvml = held.enter_context(nvml())
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            return {i: len(pynvml.nvmlDeviceGetComputeRunningProcesses(h)) for i, h in enumerate(handles)}
        except Exception:
            return None


def describe(devices: Devices, memory=gb) -> str:
    """The box in a line: "1 x NVIDIA H200 (150.8 GB, sm_90), driver 580.159.04, CUDA 13.0"."""
    if not devices.gpus:
        return f"no GPU ({devices.reason})"
    names = sorted({g.name for g in devices.gpus})
    g = devices.gpus[0]
    return (f"{devices.count} x {', '.join(names)} "
            f"({memory(g.memory_total)}, sm_{g.compute_capability.replace('.', '')}), "
            f"driver {devices.driver}, CUDA {devices.cuda_driver}")
