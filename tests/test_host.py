"""Which physical host a record came from (harness.measure.instruments.host): a hash of the GPUs' UUIDs, else
of the machine id and hostname, and each GPU's PCIe link and NUMA node as NVML and sysfs say."""
import hashlib
import sys
import types

import pytest

from conftest import fake_devices
from harness.measure.instruments import host
from harness.measure.instruments.devices import Devices


class LinkNvml(types.ModuleType):
    """pynvml of two GPUs: GPU 0 at bus 00000000:1B:00.0 (as bytes) on a gen 5 x16 link, GPU 1 at
    00000000:9A:00.0, whose current width NVML cannot read."""

    def __init__(self):
        super().__init__("pynvml")
        self.open = 0

    def nvmlInit(self): self.open += 1
    def nvmlShutdown(self): self.open -= 1
    def nvmlDeviceGetHandleByIndex(self, i): return ("handle", i)

    def nvmlDeviceGetPciInfo(self, h):
        bus = {0: b"00000000:1B:00.0", 1: "00000000:9A:00.0"}[h[1]]
        return types.SimpleNamespace(busId=bus)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h): return 5 - h[1]
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h): return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        if h[1] == 1:
            raise RuntimeError("not supported")
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h): return 16


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "PCI_DEVICES", tmp_path)
    (tmp_path / "0000:1b:00.0").mkdir()
    (tmp_path / "0000:1b:00.0" / "numa_node").write_text("1\n")
    (tmp_path / "0000:9a:00.0").mkdir()
    (tmp_path / "0000:9a:00.0" / "numa_node").write_text("not a number")
    return tmp_path


def test_a_digest_is_the_first_12_hex_of_the_sha256_of_the_lines():
    assert host.digest(["a", "b"]) == hashlib.sha256(b"a\nb").hexdigest()[:12]


def test_a_gpu_box_is_its_cards_in_any_order_with_each_link(monkeypatch, sysfs):
    nvml = LinkNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    two = fake_devices(count=2)
    found = host.identity(Devices(gpus=two.gpus[::-1], driver="580.159.04"), "Xeon")
    assert found == {"id": host.digest(["GPU-0", "GPU-1"]), "gpu_uuids": ["GPU-0", "GPU-1"], "cpu": "Xeon",
                     "driver": "580.159.04", "links": [
                         {"pci_bus_id": "00000000:1B:00.0", "numa_node": 1, "pcie_gen": 5, "pcie_width": 16,
                          "pcie_gen_max": 5, "pcie_width_max": 16},
                         {"pci_bus_id": "00000000:9A:00.0", "numa_node": None, "pcie_gen": 4, "pcie_width": None,
                          "pcie_gen_max": 5, "pcie_width_max": 16}]}
    assert nvml.open == 0


def nic(net, name, mac, device=True):
    (net / name).mkdir(parents=True)
    (net / name / "address").write_text(mac + "\n")
    if device:
        (net / name / "device").mkdir()


def test_a_box_without_a_gpu_is_its_machine_id_hostname_cpu_and_network_cards(tmp_path, monkeypatch):
    (tmp_path / "dbus-id").write_text("abc123\n")
    net = tmp_path / "net"
    nic(net, "lo", "00:00:00:00:00:00")
    nic(net, "eth0", "52:54:00:AA:BB:01")
    nic(net, "docker0", "02:42:ac:11:00:02", device=False)  # a bridge: made per boot, names no host
    monkeypatch.setattr(host, "NET_DEVICES", net)
    monkeypatch.setattr(host, "MACHINE_ID_FILES", (tmp_path / "missing", tmp_path / "dbus-id"))
    monkeypatch.setattr(host.platform, "node", lambda: "box-7")
    found = host.identity(Devices(reason="none"), "EPYC")
    assert found == {"id": host.digest(["abc123", "box-7", "EPYC", "52:54:00:aa:bb:01"]), "gpu_uuids": [],
                     "links": [], "cpu": "EPYC", "driver": None}
    monkeypatch.setattr(host, "MACHINE_ID_FILES", (tmp_path / "missing",))
    assert host.identity(Devices(reason="none"), "EPYC")["id"] == host.digest(["", "box-7", "EPYC",
                                                                               "52:54:00:aa:bb:01"])


def test_two_clones_of_one_image_get_two_host_ids(tmp_path, monkeypatch):
    """Cloned VMs share /etc/machine-id and a hostname; their CPU or their network cards tell them apart."""
    (tmp_path / "id").write_text("same-image\n")
    monkeypatch.setattr(host, "MACHINE_ID_FILES", (tmp_path / "id",))
    monkeypatch.setattr(host.platform, "node", lambda: "vm")
    ids = []
    for box, (cpu, mac) in enumerate((("AMD EPYC", "52:54:00:00:00:01"), ("Intel Xeon", "52:54:00:00:00:01"),
                                      ("AMD EPYC", "52:54:00:00:00:02"))):
        net = tmp_path / f"net{box}"
        nic(net, "ens3", mac)
        monkeypatch.setattr(host, "NET_DEVICES", net)
        ids.append(host.identity(Devices(reason="none"), cpu)["id"])
    assert len(set(ids)) == 3
    monkeypatch.setattr(host, "NET_DEVICES", tmp_path / "no-sysfs")
    assert host.identity(Devices(reason="none"), "AMD EPYC")["id"] == host.digest(["same-image", "vm", "AMD EPYC"])


def test_without_nvml_a_gpu_box_has_no_links_to_say(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert host.identity(fake_devices(count=1), "Xeon")["links"] == []
    assert host._links(0) == []


def test_a_bus_id_of_a_four_digit_domain_finds_the_same_sysfs_node(sysfs):
    assert host._numa_node("0000:1B:00.0") == host._numa_node("00000000:1B:00.0") == 1
    assert host._numa_node("00000000:3C:00.0") is None  # no such device here
