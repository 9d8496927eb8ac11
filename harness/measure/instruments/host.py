"""Which physical host a figure came from.

Boxes of one GPU kind share a machine name on purpose (their GPU-bound figures compare), but
whatever involves the host (pageable copies, page-fault migration, host memory) differs from
one host to the next. A record therefore names its host: a stable hash, and the facts that
explain a difference between two hosts (the GPUs' PCIe link, their NUMA node, CPU, driver).

The hash is of the GPUs' UUIDs where there are GPUs (they name the physical cards, whatever
container or hostname the run had), else of the machine id and hostname with the CPU model and the
MAC addresses of the network devices: VMs cloned from one image share ``/etc/machine-id`` and often
a hostname, but not their network cards, and seldom their CPU.
"""
from __future__ import annotations

import hashlib
import platform
from contextlib import ExitStack
from pathlib import Path

from harness.measure.instruments.devices import Devices, nvml

MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
PCI_DEVICES = Path("/sys/bus/pci/devices")
NET_DEVICES = Path("/sys/class/net")


def digest(parts) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def _machine_id() -> str:
    for path in MACHINE_ID_FILES:
        try:
            return path.read_text().strip()
        except OSError:
            continue
    return ""


def _macs() -> list[str]:
    """The MAC addresses of the network interfaces backed by a device (a NIC, a virtio card), sorted:
    bridges, veths and loopback are made per boot or per container, so they name no host."""
    try:
        links = sorted(NET_DEVICES.iterdir())
    except OSError:
        return []
    found = []
    for link in links:
        try:
            mac = (link / "address").read_text().strip().lower()
        except OSError:
            continue
        if (link / "device").exists() and mac and mac.strip("0:"):
            found.append(mac)
    return sorted(set(found))


def _numa_node(bus_id: str) -> int | None:
    # NVML writes the bus id as 00000000:1B:00.0; sysfs as 0000:1b:00.0.
    domain, _, rest = bus_id.lower().partition(":")
    try:
        return int((PCI_DEVICES / f"{domain[-4:]}:{rest}" / "numa_node").read_text())
    except (OSError, ValueError):
        return None


def _links(count: int) -> list[dict]:
    """Each GPU's PCIe link (generation and width now and at most) and NUMA node, from NVML."""
    if not count:
        return []
    with ExitStack() as held:
        try:
            pynvml = held.enter_context(nvml())
        except Exception:  # no driver: nothing to say about links
            return []
        return [_link(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]


def _link(nvml, handle) -> dict:
    def read(fn):
        try:
            return int(getattr(nvml, fn)(handle))
        except Exception:  # not supported on this card or driver: left out, not guessed
            return None

    bus = nvml.nvmlDeviceGetPciInfo(handle).busId
    bus = bus.decode() if isinstance(bus, bytes) else str(bus)
    return {"pci_bus_id": bus, "numa_node": _numa_node(bus),
            "pcie_gen": read("nvmlDeviceGetCurrPcieLinkGeneration"),
            "pcie_width": read("nvmlDeviceGetCurrPcieLinkWidth"),
            "pcie_gen_max": read("nvmlDeviceGetMaxPcieLinkGeneration"),
            "pcie_width_max": read("nvmlDeviceGetMaxPcieLinkWidth")}


def identity(devices: Devices, cpu: str) -> dict:
    uuids = sorted(g.uuid for g in devices.gpus)
    basis = uuids or [_machine_id(), platform.node(), cpu, *_macs()]
    return {"id": digest(basis), "gpu_uuids": uuids, "links": _links(devices.count),
            "cpu": cpu, "driver": devices.driver}
