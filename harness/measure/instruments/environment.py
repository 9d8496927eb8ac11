"""The environment a measurement was taken in: machine, GPUs, driver, CUDA, Python, libraries.

Library versions come from the installed distributions' metadata, so taking a snapshot imports
nothing heavy; the CUDA runtime that a framework was built against is read from the framework
only when the case has already imported it.
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata

from harness.measure.instruments import devices as devices_mod
from harness.measure.instruments import host as host_mod
from harness.measure.instruments import shims as shims_mod

# Distribution names whose versions are part of every result's identity.
LIBRARIES = ("torch", "numpy", "cupy-cuda13x", "cupy-cuda12x", "cupy", "chainer", "nvidia-ml-py",
             "asv", "asv-runner", "cuda-bindings", "scipy-openblas64", "scipy-openblas32",
             "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13")


def library_versions(names=LIBRARIES) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def framework_cuda() -> dict[str, str]:
    """CUDA runtime each already-imported framework was built with."""
    out = {}
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "cuda", None):
        out["torch"] = torch.version.cuda
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            v = cupy.cuda.runtime.runtimeGetVersion()
            out["cupy"] = f"{v // 1000}.{v % 1000 // 10}"
        except Exception:  # no GPU: CuPy imports but cannot talk to a runtime
            pass
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class Environment:
    python: str
    platform: str
    cpu: str
    num_cpu: int
    libraries: dict
    devices: devices_mod.Devices
    framework_cuda: dict = field(default_factory=dict)
    # Compatibility shims applied before import (e.g. Chainer on NumPy 2), by name.
    shims: tuple = ()
    # The interpreter that measured: two environments on one box (two venvs with different
    # library releases) are told apart by it, as asv tells them apart by python path.
    executable: str = ""
    # The physical host (``harness.measure.instruments.host``): empty in records made before it was kept.
    host: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["devices"] = self.devices.to_dict()
        d["shims"] = list(self.shims)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Environment":
        d = dict(d)
        d["devices"] = devices_mod.Devices.from_dict(d["devices"])
        d["shims"] = tuple(d.get("shims", ()))
        return cls(**d)


def snapshot(devices: devices_mod.Devices | None = None, shims=None) -> Environment:
    """``shims`` defaults to those this process has applied (``harness.measure.instruments.shims``)."""
    devices = devices if devices is not None else devices_mod.discover()
    cpu = cpu_model()
    return Environment(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        cpu=cpu,
        num_cpu=os.cpu_count() or 0,
        libraries=library_versions(),
        devices=devices,
        framework_cuda=framework_cuda(),
        shims=tuple(shims_mod.applied() if shims is None else shims),
        executable=sys.executable,
        host=host_mod.identity(devices, cpu),
    )
