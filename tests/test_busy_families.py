"""Every GPU case of the Chainer and ceilings families files how busy its GPUs were, naming the
GPUs it read, or says why it could not: run through the runner on the CPU, with a stand-in
NVML and each family's GPU reached through a stand-in of what only a GPU box has (CuPy's pool,
CUDA torch). A case whose workload forgot its GPUs would file an empty share, which the gate
reads as "busy unknown"; these tests fail on it."""
import dataclasses
import sys
import types
from unittest import mock

import pytest

from conftest import fake_devices
from harness import cases
from harness.cases import ceilings
from harness.drive import runner
from harness.drive.runner import execute
from harness.measure.instruments import busy
from harness.measure.outcomes import OK
from harness.measure.instruments.timing import no_sync
from harness.workloads import copies
from harness.workloads.chainer import chainer_backend
from test_busy import Utilisation

CHAINER = {"chainer_mlp": {"batch": 256, "budget": "card"}, "chainer_cnn": {"batch": 128},
           "chainer_gcn": {"nodes": 2**14, "features": 128, "budget": "card"}}
GPU_PROBES = ceilings.GPU_PROBES + ceilings.MULTI_GPU_PROBES


class Cards(Utilisation):
    """The stand-in NVML, with the PCI bus ids a record's environment reads of each card."""

    def nvmlDeviceGetPciInfo(self, handle):
        return types.SimpleNamespace(busId=f"00000000:{self._gpu(handle) + 1:02x}:00.0")


@pytest.fixture
def nvml(monkeypatch):
    """Two GPUs, 97% and 91% busy; the profiler sees nothing (as on this CPU): NVML answers."""
    monkeypatch.setitem(sys.modules, "pynvml", Cards([97, 91]))
    monkeypatch.setattr(busy, "_profiled", lambda *a: None)
    monkeypatch.setattr(busy, "NVML_MIN_S", 0.0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def chainer_on_a_gpu(monkeypatch):
    """Chainer's CUDA backend as the cases get it on a GPU box (device 0), its arrays on NumPy.
    Three timed steps, not the case's dozen; the classifiers' steps (whose im2col takes seconds
    on this CPU) do nothing, their workloads otherwise as built."""
    # Chainer is imported here, not when every worker collects this module.
    from harness.workloads.chainer import chainer_nets
    timed = runner.time_steps
    monkeypatch.setattr(runner, "time_steps", lambda step, **kw: timed(step, **{**kw, "warmup": 0, "repeat": 3}))
    built = chainer_nets.classifier_workload
    monkeypatch.setattr(chainer_nets, "classifier_workload",
                        lambda *a, **kw: dataclasses.replace(built(*a, **kw), step=lambda: None, check=dict))
    def backend(device, pool, nbytes, budget="card"):
        cpu = chainer_backend.open_backend("cpu", "numpy", nbytes)
        if device == "cpu":
            return cpu
        return chainer_backend.Backend(chainer=cpu.chainer, device=cpu.device, gpus=(0,), shims=cpu.shims)
    for name in CHAINER:
        monkeypatch.setattr(sys.modules[cases.get(name).build.__module__], "open_backend", backend)


@pytest.fixture
def torch_on_gpus(monkeypatch):
    """CUDA torch as the probes see it on a two-GPU box: every tensor a stand-in, every check met."""
    for probes in (ceilings, copies):  # copies holds the host-link probe ceilings and pageable share
        monkeypatch.setattr(probes, "need_torch_cuda", lambda count=1: mock.MagicMock(name="torch"))
        monkeypatch.setattr(probes, "torch_sync", lambda gpus=(): no_sync)
    monkeypatch.setattr(ceilings, "need_gpus", lambda count=1: fake_devices(count=2))
    monkeypatch.setattr(ceilings, "rel_err", lambda out, ref: 0.0)


def filed(case: str, params: dict, gpus: int = 2):
    rec = execute(case, params, devices=fake_devices(count=gpus))
    assert rec.outcome == OK, rec.reason
    return rec.gpu_busy


@pytest.mark.parametrize("case", sorted(CHAINER))
def test_each_chainer_case_on_the_gpu_files_its_gpus_busy_share(nvml, chainer_on_a_gpu, case):
    params = {"device": "cuda", "pool": "device_pool", **CHAINER[case]}
    assert filed(case, params) == {"fraction": 0.97, "gpus": [0.97], "source": "nvml", "sampled": ["gpu0"]}


@pytest.mark.parametrize("probe", GPU_PROBES)
def test_each_gpu_ceiling_files_the_busy_share_of_the_gpus_it_used(nvml, torch_on_gpus, probe):
    got = filed("ceilings", {"probe": probe})
    assert got["source"] == "nvml" and got["fraction"] > 0
    assert got["sampled"] == (["gpu0", "gpu1"] if probe in ceilings.MULTI_GPU_PROBES else ["gpu0"])


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_each_pageable_copy_files_its_gpus_busy_share(nvml, torch_on_gpus, direction):
    got = filed("pageable", {"direction": direction, "size_mib": 64})
    assert got["sampled"] == ["gpu0"] and got["fraction"] == 0.97


def test_without_nvml_a_gpu_case_says_so_and_a_cpu_case_reads_nothing(monkeypatch, chainer_on_a_gpu):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` fails, as where it is not installed
    monkeypatch.setattr(busy, "_profiled", lambda *a: None)
    # CUDA sees the card, NVML is not there to list it.
    got = filed("chainer_mlp", {"device": "cuda", "pool": "device_pool", **CHAINER["chainer_mlp"]}, gpus=0)
    assert got["source"] == "none" and "nvml: ModuleNotFoundError" in got["reason"] and "fraction" not in got
    assert filed("chainer_mlp", {"device": "cpu", "pool": "numpy", **CHAINER["chainer_mlp"]}, gpus=0) == {}


def test_a_gpu_no_nvml_device_stands_behind_is_named_as_the_reason(monkeypatch, nvml, chainer_on_a_gpu):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # a card NVML does not list
    got = filed("chainer_mlp", {"device": "cuda", "pool": "device_pool", **CHAINER["chainer_mlp"]})
    assert got["source"] == "none" and "no NVML device behind CUDA device(s) [0]" in got["reason"]
