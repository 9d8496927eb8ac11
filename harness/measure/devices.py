"""What GPUs this box has, read through NVML (what nvidia-smi shows).

NVML answers without creating a CUDA context, so discovery neither takes device memory nor
initialises CUDA in a process that may later fork. On a box without an NVIDIA driver it says
so in `Devices.reason` instead of raising.
"""
from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass

from harness.units import gb


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_total: int
    memory_free: int
    compute_capability: str
    uuid: str

    @property
    def memory_gib(self) -> float:
        return self.memory_total / 2**30


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


def discover() -> Devices:
    try:
        import pynvml as nvml
    except ImportError:
        return Devices(reason="nvidia-ml-py is not installed: pip install nvidia-ml-py")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return Devices(reason=f"no NVIDIA GPU visible (NVML: {e})")
    try:
        n = nvml.nvmlDeviceGetCount()
        gpus = tuple(_gpu(nvml, i) for i in range(n))
        return Devices(gpus=gpus, driver=_text(nvml.nvmlSystemGetDriverVersion()),
                       cuda_driver=_cuda_version(nvml.nvmlSystemGetCudaDriverVersion()),
                       peer=_peer_matrix(nvml, n),
                       reason=None if n else "NVML found no GPU")
    finally:
        nvml.nvmlShutdown()


def describe(devices: Devices, memory=gb) -> str:
    """The box in a line: "1 x NVIDIA H200 (150.8 GB, sm_90), driver 580.159.04, CUDA 13.0"."""
    if not devices.gpus:
        return f"no GPU ({devices.reason})"
    names = sorted({g.name for g in devices.gpus})
    g = devices.gpus[0]
    return (f"{devices.count} x {', '.join(names)} ({memory(g.memory_total)}, sm_{g.compute_capability.replace('.', '')}), "
            f"driver {devices.driver}, CUDA {devices.cuda_driver}")
