"""The name a box's results are filed under, the label people read, and what asv is told of it
(harness.measure.instruments.machine): a wrong name files one card's figures beside another's."""
import hashlib
import types
from dataclasses import replace

import pytest

from conftest import fake_devices
from harness.measure.instruments import machine
from harness.measure.instruments.devices import Devices
from harness.measure.instruments.environment import Environment

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(autouse=True)
def named_afresh():
    """Names are cached per process: each test names its boxes itself."""
    machine._named.cache_clear()


def env(devices=None, cpu="Intel(R) Xeon(R) Processor", **fields) -> Environment:
    return Environment(python="3.12.3", platform="Linux 6.18.44 x86_64", cpu=cpu, num_cpu=16, libraries={},
                       devices=fake_devices() if devices is None else devices, **fields)


def mixed(*names) -> Devices:
    box = fake_devices(count=len(names))
    return replace(box, gpus=tuple(replace(g, name=n) for g, n in zip(box.gpus, names)))


@pytest.mark.parametrize("text, slug", [(H100, "nvidia-h100-80gb-hbm3"), ("--A  b--", "a-b"),
                                        ("Intel(R) Xeon(R) Processor", "intel-r-xeon-r-processor"), ("", "")])
def test_a_slug_is_lower_case_words_joined_by_single_dashes(text, slug):
    assert machine.slug(text) == slug


def test_a_gpu_box_is_named_by_each_model_and_how_many_of_it():
    assert machine.machine_name(fake_devices("NVIDIA H200", 1)) == "nvidia-h200-x1"
    assert machine.machine_name(fake_devices(H100, 2), cpu="ignored") == "nvidia-h100-80gb-hbm3-x2"
    assert machine.machine_name(mixed(H100, "NVIDIA A100-SXM4-40GB", H100)) == \
        "nvidia-a100-sxm4-40gb-x1+nvidia-h100-80gb-hbm3-x2"


def test_a_box_without_a_gpu_is_named_by_its_cpu_cut_to_40_characters():
    none = Devices(reason="no NVIDIA GPU visible")
    assert machine.machine_name(none, "AMD EPYC 7B13 64-Core Processor") == "cpu-amd-epyc-7b13-64-core-processor"
    assert machine.machine_name(none, "x" * 50) == "cpu-" + "x" * 40
    assert machine.machine_name(none, "") == machine.machine_name(none) == "cpu-unknown"


def test_devices_made_by_hand_with_a_list_are_named_as_any_others():
    listed = replace(fake_devices("NVIDIA H200", 2), gpus=list(fake_devices("NVIDIA H200", 2).gpus))
    assert machine.machine_name(listed) == "nvidia-h200-x2"
    assert machine.machine_name(Devices(gpus=[], reason="none"), "Xeon") == "cpu-xeon"


def test_people_read_the_card_without_its_maker_and_how_many_past_one():
    assert machine.machine_label(env(fake_devices(H100, 1))) == "H100 80GB HBM3"
    assert machine.machine_label(env(fake_devices("NVIDIA H200", 4))) == "H200 x4"
    assert machine.machine_label(env(fake_devices("Tesla P100-PCIE-16GB", 1))) == "Tesla P100-PCIE-16GB"
    assert machine.machine_label(env(Devices(reason="none"))) == "Intel(R) Xeon(R) Processor"
    assert machine.machine_label(env(Devices(reason="none"), cpu="")) == "cpu-unknown"


def test_asv_is_told_the_six_fields_and_the_card_s_own(monkeypatch):
    monkeypatch.setattr(machine.psutil, "virtual_memory", lambda: types.SimpleNamespace(total=135148564480))
    box = replace(fake_devices("NVIDIA H200", 2, total=143771 * 2**20), driver="580.159.04", cuda_driver="13.0")
    assert machine.machine_info(env(box)) == {
        "machine": "nvidia-h200-x2", "os": "Linux 6.18.44 x86_64", "arch": "x86_64",
        "cpu": "Intel(R) Xeon(R) Processor", "num_cpu": "16", "ram": "135148564480",
        "gpu": "2 x NVIDIA H200 (143771 MiB, sm_90), driver 580.159.04, CUDA 13.0", "gpu_count": "2",
        "gpu_memory_mib": "143771", "compute_capability": "9.0", "driver": "580.159.04", "cuda_driver": "13.0"}
    cpu_only = machine.machine_info(env(Devices(reason="no NVIDIA GPU visible")))
    assert cpu_only["gpu"] == "no GPU (no NVIDIA GPU visible)" and cpu_only["gpu_count"] == "0"
    assert "driver" not in cpu_only and "gpu_memory_mib" not in cpu_only
    unknown = machine.machine_info(env(replace(box, driver=None, cuda_driver=None)))
    assert (unknown["driver"], unknown["cuda_driver"]) == ("", "")
    assert cpu_only["machine"] == "cpu-intel-r-xeon-r-processor"
    first = replace(box, gpus=(box.gpus[0], replace(box.gpus[1], memory_total=2**30, compute_capability="8.0")))
    info = machine.machine_info(env(first))
    assert (info["gpu_memory_mib"], info["compute_capability"]) == ("143771", "9.0")  # the first card's


@pytest.mark.parametrize("info, label", [
    ({"gpu": "1 x NVIDIA H200 (143771 MiB, sm_90), driver 580, CUDA 13.0", "gpu_count": "1"}, "H200 x1"),
    ({"gpu": "2 x NVIDIA H100 80GB HBM3 (81559 MiB, sm_90), driver 580"}, "H100 80GB HBM3 x2"),
    ({"gpu": "no GPU (NVML: driver not loaded)", "gpu_count": "0"}, "none"),
    ({"gpu": "no GPU (x)"}, "none"),
    ({"gpu": "something else", "gpu_count": "0"}, "none"),
    ({"gpu": "a line asv was given by hand, longer than forty characters"}, "a line asv was given by hand, longer tha"),
    ({}, ""),
])
def test_the_gpu_label_is_read_back_from_asv_s_gpu_line(info, label):
    assert machine.gpu_label(info) == label


def test_the_description_is_saved_where_asv_run_machine_looks(monkeypatch, tmp_path):
    import asv.machine
    monkeypatch.setenv("HOME", str(tmp_path))
    machine.register_with_asv({"machine": "nvidia-h200-x1", "os": "Linux"})
    assert asv.machine.MachineCollection.load("nvidia-h200-x1") == {"machine": "nvidia-h200-x1", "os": "Linux"}


def test_a_record_s_host_is_its_stored_id_else_a_hash_of_its_gpus_else_unsaid():
    assert machine.host_key(env(host={"id": "f3fc9504c53f"})) == "f3fc9504c53f"
    two = fake_devices(count=2)
    expected = hashlib.sha256(b"GPU-0\nGPU-1").hexdigest()[:12]
    assert machine.host_key(env(two)) == expected
    assert machine.host_key(env(replace(two, gpus=two.gpus[::-1]), host={"id": ""})) == expected  # any order
    assert machine.host_key(env(Devices(reason="none"))) == ""
