"""How busy a step's GPUs were, as NVML reads them, with a stand-in pynvml: a step over several
GPUs counts the time any of them worked, so GPUs taking turns are not read as waiting on the host."""
import sys
import types

import pytest

from harness.measure import busy
from harness.measure.timing import no_prepare
from test_devices import FakeNvml


class Utilisation(FakeNvml):
    """pynvml whose GPU i reports ``shares[i]`` percent busy in every sample."""
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, shares):
        super().__init__(["NVIDIA H200"] * len(shares))
        self.shares = shares

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.split("-")[1])

    def nvmlDeviceGetSamples(self, handle, kind, since):
        sample = types.SimpleNamespace(timeStamp=since + 1, sampleValue=types.SimpleNamespace(uiVal=self.shares[handle]))
        return kind, [sample, sample]


def busy_of(monkeypatch, shares, gpus) -> dict:
    monkeypatch.setitem(sys.modules, "pynvml", Utilisation(shares))
    monkeypatch.setattr(busy, "_profiled", lambda *a: None)  # the profiler saw nothing: NVML answers
    monkeypatch.setattr(busy, "NVML_MIN_S", 0.0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    step = types.SimpleNamespace(gpus=gpus, timing=None, prepare=no_prepare, step=lambda: None, sync=lambda: None)
    return busy.gpu_busy(step, 0.1)


def test_gpus_that_take_turns_read_as_busy_together(monkeypatch):
    got = busy_of(monkeypatch, [45, 43], (0, 1))  # naive model parallel: one stage at a time
    assert got == {"fraction": 0.88, "source": "nvml", "gpus": [0.45, 0.43]}


@pytest.mark.parametrize("shares, gpus, fraction", [([30, 30], (0, 1), 0.6), ([90, 95], (0, 1), 1.0),
                                                    ([10, 43], (1,), 0.43)])
def test_the_share_sums_the_steps_own_gpus_and_stops_at_one(monkeypatch, shares, gpus, fraction):
    assert busy_of(monkeypatch, shares, gpus)["fraction"] == fraction
