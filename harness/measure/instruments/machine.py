"""The name and description asv records for this box, from its GPUs.

Results are filed under the machine's name, so the name says what matters for the figures: the
GPU model and how many (``nvidia-h200-x2``), or the CPU where there is no GPU. Boxes of the same
GPU model and count share a name on purpose: their results are comparable.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import psutil

from harness.measure.instruments.devices import Devices, describe
from harness.measure.instruments.environment import Environment
from harness.measure.instruments.host import digest as host_digest


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")  # pragma: no mutate (lower-cased: "X"s never strip)


def machine_name(devices: Devices, cpu: str = "") -> str:
    try:
        return _named(devices, cpu)  # pragma: no mutate (a call gone wrong raises TypeError: named below alike)
    except TypeError:  # devices holding a list somewhere (made by hand): named afresh
        return _name(devices, cpu)


@lru_cache(maxsize=4096)
def _named(devices: Devices, cpu: str) -> str:
    """Named once per distinct environment: readers of many records ask it for each of them."""
    return _name(devices, cpu)


def _name(devices: Devices, cpu: str) -> str:
    if devices.gpus:
        counts = Counter(g.name for g in devices.gpus)
        return "+".join(f"{slug(name)}-x{n}" for name, n in sorted(counts.items()))
    return f"cpu-{slug(cpu)[:40] or 'unknown'}"


def machine_label(env: Environment) -> str:
    """The box as people name it: its GPU ("H100 80GB HBM3", "H200 x2"), or its CPU without one.
    Tables, docs and the gate all label machines with this."""
    return named_gpus(env.devices) if env.devices.gpus else env.cpu or machine_name(env.devices)


def named_gpus(devices: Devices) -> str:
    """The GPUs as people name them ("H100 80GB HBM3", "H200 x2"): ``machine_label`` of a GPU box."""
    gpus = devices.gpus
    name = re.sub(r"^NVIDIA\s+", "", gpus[0].name)
    return name if len(gpus) == 1 else f"{name} x{len(gpus)}"


def machine_info(env: Environment) -> dict[str, str]:
    """asv's six machine fields, plus the GPU fields that tell an H100 box from an H200 box."""
    d = env.devices
    info = {
        "machine": machine_name(d, env.cpu),
        "os": env.platform,
        "arch": env.platform.split()[-1],
        "cpu": env.cpu,
        "num_cpu": str(env.num_cpu),
        "ram": str(psutil.virtual_memory().total),
        "gpu": describe(d, memory=_asv_memory),
        "gpu_count": str(d.count),
    }
    if d.gpus:
        info.update(gpu_memory_mib=str(d.gpus[0].memory_total // 2**20),
                    compute_capability=d.gpus[0].compute_capability,
                    driver=d.driver or "", cuda_driver=d.cuda_driver or "")
    return info


def gpu_label(info: dict[str, str]) -> str:
    """machine_info's "gpu" line, short enough for asv's legends: "H100 80GB HBM3 x1", "H200 x2",
    or "none" (the line itself, with the memory, driver, CUDA or why no GPU shows, stays in
    machine.json and in the records). Read back from the line, so results written before this
    existed get the same label."""
    text = info.get("gpu", "")
    found = re.match(r"(\d+) x (.+?) \(", text)
    if found:
        return f"{re.sub(r'NVIDIA ', '', found.group(2))} x{found.group(1)}"
    return "none" if text.startswith("no GPU") or info.get("gpu_count") == "0" else text[:40]


def _asv_memory(n: int) -> str:
    """The card's memory as asv's "gpu" field has always held it: asv files and graphs results by
    this field, so writing it as describe() now does (GB) would split every machine's history."""
    return f"{n // 2**20} MiB"


class MachineFileError(OSError):
    """asv's per-user machine file cannot be written; the message names the fix."""


def register_with_asv(info: dict[str, str]) -> None:
    """Store the description where ``asv run --machine NAME`` looks for it (~/.asv-machine.json).

    The file is the user's, shared by every run: asv rewrites it in place (truncate, then write), so
    runs side by side could read it half written or drop each other's entry. Here one process at a
    time updates it (a lock beside it) and the new file replaces the old whole, so a reader, asv's
    included, sees one or the other. A file left unreadable (by asv's in-place writes) is rewritten."""
    from asv.machine import MachineCollection
    from filelock import FileLock

    path = Path(MachineCollection.get_machine_file_path())
    try:
        with FileLock(f"{path}.lock", timeout=60):
            try:
                known = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            except (ValueError, UnicodeDecodeError):
                known = {}
            known = known if isinstance(known, dict) else {}
            known.update({info["machine"]: info, "version": MachineCollection.api_version})
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=4, sort_keys=True), encoding="utf-8")
            os.replace(tmp, path)
    except OSError as e:
        raise MachineFileError(f"cannot write asv's machine file {path} ({e.strerror or e}): asv reads the box's "
                               "description from it; set HOME to a folder you can write, e.g. HOME=$(mktemp -d)") \
            from None


def host_key(env: Environment) -> str:
    """The host a record came from: its stored identity, or for records made before hosts were
    kept, the same hash of the GPUs' UUIDs (which those records hold); "" where neither says."""
    if env.host.get("id"):
        return env.host["id"]
    uuids = sorted(g.uuid for g in env.devices.gpus)
    return host_digest(uuids) if uuids else ""
