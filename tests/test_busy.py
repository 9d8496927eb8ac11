"""How busy a step's GPUs were, as NVML reads them, with a stand-in pynvml: a step over several
GPUs counts the time any of them worked, so GPUs taking turns are not read as waiting on the host;
a rank of a multi-process case reads its own GPU over its own timed steps."""
import sys
import time
import types

import pytest

from harness.measure.instruments import busy
from harness.measure.instruments.timing import no_prepare
from nvml_stub import StrictNvml


class Utilisation(StrictNvml):
    """pynvml whose GPU i reports ``shares[i]`` percent busy in every sample."""
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, shares):
        super().__init__(["NVIDIA H200"] * len(shares))
        self.shares = shares

    def nvmlDeviceGetSamples(self, handle, kind, since):
        share = self.shares[self._gpu(handle)]
        sample = types.SimpleNamespace(timeStamp=since + 1, sampleValue=types.SimpleNamespace(uiVal=share))
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
    assert got == {"fraction": 0.88, "source": "nvml", "gpus": [0.45, 0.43], "sampled": ["gpu0", "gpu1"]}


@pytest.mark.parametrize("shares, gpus, fraction", [([30, 30], (0, 1), 0.6), ([90, 95], (0, 1), 1.0),
                                                    ([10, 43], (1,), 0.43)])
def test_the_share_sums_the_steps_own_gpus_and_stops_at_one(monkeypatch, shares, gpus, fraction):
    assert busy_of(monkeypatch, shares, gpus)["fraction"] == fraction


# ---- a rank of a multi-process case reads its own GPU over its own timed steps ----------------------

class SinceKept(Utilisation):
    """Utilisation that keeps the instant each reading started from; ``empty``: no sample at all."""

    def __init__(self, shares, empty=False):
        super().__init__(shares)
        self.since, self.empty = [], empty

    def nvmlDeviceGetSamples(self, handle, kind, since):
        self.since.append(since)
        return (kind, []) if self.empty else super().nvmlDeviceGetSamples(handle, kind, since)


def sampled(monkeypatch, fake, gpus, label="gpu1"):
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with busy.Sampled(gpus) as s:
        before = int(time.time() * 1e6)
        s.begin()
        return s.reading(label), before


def test_a_rank_reads_its_own_gpu_from_the_start_of_its_timed_steps(monkeypatch):
    fake = SinceKept([10, 43])
    got, before = sampled(monkeypatch, fake, [1])
    assert got == {"fraction": 0.43, "source": "nvml", "gpu": "gpu1"}
    assert fake.since and min(fake.since) >= before  # the samples read are the steps', none from before
    assert fake.open == 0  # NVML shut down again


def test_a_rank_without_a_reading_says_why_and_a_cpu_rank_reads_nothing(monkeypatch):
    got, _ = sampled(monkeypatch, SinceKept([10, 43], empty=True), [0], "gpu0")
    assert got["source"] == "none" and "no utilisation sample" in got["reason"] and got["gpu"] == "gpu0"
    assert sampled(monkeypatch, SinceKept([10]), [])[0] == {}


def test_a_rank_runs_more_steps_only_where_its_timed_ones_were_too_short(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", Utilisation([50]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with busy.Sampled([0]) as s:
        s.begin()
        assert 1 <= s.steps_short(busy.NVML_MIN_S / 10) <= 10
        s.t0 -= busy.NVML_MIN_S  # steps that lasted the whole window already
        assert s.steps_short(busy.NVML_MIN_S / 10) == 0
    assert busy.Sampled([]).steps_short(0.1) == 0


def test_a_parallel_records_busy_share_is_each_ranks_gpu_and_never_empty_on_gpus():
    from harness.workloads.parallelism.parallel import ranks_busy
    read = [{"busy": {"fraction": 0.45, "source": "nvml", "gpu": "gpu0"}},
            {"busy": {"fraction": 0.43, "source": "nvml", "gpu": "gpu1"}}]
    assert ranks_busy(read) == {"fraction": 0.88, "source": "nvml", "gpus": [0.45, 0.43], "sampled": ["gpu0", "gpu1"]}
    unread = [{"busy": {"source": "none", "reason": "nvml: no utilisation sample over the steps", "gpu": "gpu0"}}]
    assert ranks_busy(unread) == {"source": "none", "reason": "nvml: no utilisation sample over the steps"}
    assert ranks_busy([{"busy": {}}, {"busy": {}}]) == {}  # CPU ranks


def test_the_runner_files_what_the_ranks_read_where_they_ran_the_steps():
    from harness.measure.instruments.timing import Timing
    from harness.measure.workload import Workload
    ranks = {"fraction": 0.9, "source": "nvml", "gpus": [0.9], "sampled": ["gpu0"]}
    w = Workload(step=lambda: None, check=dict, work={}, gpus=(0,), timing=Timing(1, 1, 1, 1, 1, 3, 1), busy=ranks)
    assert busy.gpu_busy(w, 1.0) == ranks


# ---- a one-process case: NVML read over its timed steps where they lasted long enough ------------

def one_process(monkeypatch, lasted_s: float, traced: bool = False, trace: bool = True):
    """gpu_busy of a case whose timed steps NVML sampled for ``lasted_s``; (reading, extra steps run).
    ``traced``: the tracer's reading is the test's own (else the tracer sees nothing); ``trace``:
    gpu_busy's own."""
    fake = SinceKept([80])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    if not traced:
        monkeypatch.setattr(busy, "_profiled", lambda *a: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    extra = []
    step = types.SimpleNamespace(gpus=(0,), timing=None, prepare=no_prepare, step=lambda: extra.append(1),
                                 sync=lambda: None)
    monkeypatch.setattr(busy, "NVML_MIN_S", 0.05)
    with busy.Sampled(step.gpus) as timed:
        timed.begin()
        timed.end()
        timed.lasted = lasted_s
        return (busy.gpu_busy(step, 0.01, timed, trace=trace), len(extra),
                bool(fake.since) and fake.since[0] == timed.since)


def test_a_one_process_case_is_read_over_its_timed_steps_where_they_lasted_long_enough(monkeypatch):
    got, extra, from_timed = one_process(monkeypatch, lasted_s=1.0)
    assert got == {"fraction": 0.8, "gpus": [0.8], "source": "nvml", "sampled": ["gpu0"]}
    assert extra == 0 and from_timed  # no step ran for the reading: it is the timed steps'


def test_a_traced_share_keeps_nvmls_reading_of_the_timed_steps_beside_it(monkeypatch):
    """The tracer's share decides; NVML's over the timed steps is kept as a second opinion, where it
    read them, so that a tracer that misreads (every step busy) stands out against it."""
    for lasted, beside in ((1.0, {"nvml": 0.8}), (0.001, {})):
        monkeypatch.setattr(busy, "_cupti_reading", lambda workload, step_s: {"fraction": 0.97})
        got = one_process(monkeypatch, lasted_s=lasted, traced=True)[0]
        assert got == {"fraction": 0.97, **beside, "source": "cupti", "sampled": ["gpu0"]}
    # No NVML over the timed steps, or one that fails there: the traced share stands alone.
    failing = types.SimpleNamespace(timed_shares=lambda: 1 / 0)
    assert busy._nvml_beside(None) == {} and busy._nvml_beside(failing) == {}
    assert busy._nvml_beside(types.SimpleNamespace(timed_shares=lambda: [0.30004, 0.25003])) == {"nvml": 0.5501}


def test_timed_steps_too_short_for_the_driver_are_read_over_extra_steps(monkeypatch):
    got, extra, from_timed = one_process(monkeypatch, lasted_s=0.001)
    assert got["fraction"] == 0.8 and extra >= 1 and not from_timed


class FakeTrace:
    """The autograd profiler's results as ``_profiled`` reads them: each traced step's window
    (``STEP_MARK``, 10 us apart, each with a CPU op of its own) and the GPU's activity,
    ``busy[i]`` us at the start of step i (an empty kernel where it is 0)."""

    def __init__(self, busy_us, **kwargs):
        import torch
        cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

        def event(name, kind, a, b, annotation=False):
            return types.SimpleNamespace(name=name, device_type=kind, time_range=types.SimpleNamespace(start=a, end=b),
                                         is_user_annotation=annotation)

        # Each step's mark also shows on the GPU's timeline, as Kineto files it (gpu_user_annotation),
        # over the span of the step's GPU side: not work, and not the step's window either.
        self.function_events = (
            [event(busy.STEP_MARK, cpu, 10 * i, 10 * i + 10) for i in range(len(busy_us))]
            + [event(busy.STEP_MARK, cuda, 10 * i + 1, 10 * i + 9, annotation=True) for i in range(len(busy_us))]
            + [event("aten::mm", cpu, 10 * i + 1, 10 * i + 3) for i in range(len(busy_us))]
            + [event("kernel", cuda, 10 * i, 10 * i + b) for i, b in enumerate(busy_us)])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def profiled(monkeypatch, busy_us, step_s):
    """``_profiled``'s share over a traced run whose GPU was busy ``busy_us``, with what it
    asked the profiler for and the marks it named."""
    import contextlib

    import torch.autograd.profiler as autograd_profiler
    asked, marks, ran = {}, [], []

    def profile(**kwargs):
        asked.update(kwargs)
        return FakeTrace(busy_us)

    def record_function(name):
        marks.append(name)
        return contextlib.nullcontext()

    monkeypatch.setattr(autograd_profiler, "profile", profile)
    monkeypatch.setattr(autograd_profiler, "record_function", record_function)
    step = types.SimpleNamespace(prepare=no_prepare, step=lambda: ran.append(1), sync=lambda: None)
    return busy._profiled(step, len(busy_us) - 1, step_s), asked, marks, ran


def test_the_traced_warm_up_step_is_left_out_of_the_busy_share(monkeypatch):
    """CUPTI can miss the first traced step's kernels: that step runs, but only the steps after it
    are read (the warm-up step reads idle here, the three after it 2, 5 and 8 us of 10)."""
    share, asked, marks, ran = profiled(monkeypatch, [0, 2, 5, 8], 10e-6)
    assert share == pytest.approx(0.5, rel=1e-9)
    assert len(ran) == 4 and marks == [busy.STEP_MARK] * 4  # the warm-up step and the three read, each marked
    assert asked == {"use_device": "cuda", "use_kineto": True}  # CUPTI's kernels, through Kineto


def test_the_share_is_over_the_unprofiled_step_time_and_none_where_no_kernel_ran(monkeypatch):
    # The profiler stretches each step's window on the host (10 us here); the GPU's work is read
    # against the step's own time, 8 us: (2 + 4 + 6) / (3 x 8).
    assert profiled(monkeypatch, [0, 2, 4, 6], 8e-6)[0] == pytest.approx(0.5, rel=1e-9)
    # Only empty kernels: the profiler saw no GPU work, and NVML is asked instead.
    assert profiled(monkeypatch, [0, 0, 0, 0], 8e-6)[0] is None


def test_an_untraced_run_reads_nvml_over_its_timed_steps_and_runs_no_step_for_it(monkeypatch):
    """A run that asked for no extra step (a compare's later rounds): never the tracer, never a step
    run for NVML; its share of the timed steps where it read them, else none, saying why."""
    def no_trace(*a):
        raise AssertionError("traced")

    monkeypatch.setattr(busy, "_profiled", no_trace)
    monkeypatch.setattr(busy, "_cupti_reading", no_trace)
    got, extra, from_timed = one_process(monkeypatch, lasted_s=1.0, traced=True, trace=False)
    assert (got, extra, from_timed) == (
        {"fraction": 0.8, "gpus": [0.8], "source": "nvml", "sampled": ["gpu0"]}, 0, True)
    got, extra, _ = one_process(monkeypatch, lasted_s=0.001, traced=True, trace=False)
    assert extra == 0 and got["source"] == "none"
    assert got["reason"] == ("cupti: not traced in this run (no extra step); nvml: no reading of the timed steps "
                             f"(it needs {busy.NVML_MIN_S:g} s of them and a sample of each GPU)")
    # No NVML beside the timed steps at all: the same reason.
    step = types.SimpleNamespace(gpus=(0,), timing=None)
    assert busy.gpu_busy(step, 0.01, None, trace=False) == {"source": "none", "reason": got["reason"]}
    # NVML that fails says how, within the reason's length.
    failing = types.SimpleNamespace(timed_shares=lambda: (_ for _ in ()).throw(OSError("x" * 300)))
    got = busy.gpu_busy(step, 0.01, failing, trace=False)
    assert got["reason"] == "cupti: not traced in this run (no extra step); " + ("nvml: OSError: " + "x" * 300)[:200]


def test_the_runner_hands_the_runs_trace_setting_to_the_busy_reading(monkeypatch, tmp_path):
    from dataclasses import replace

    from harness.cases.ceilings import CASE, host_copy
    from harness.drive import runner
    from harness.measure.records.store import RecordStore, RunContext
    from harness.units import MiB
    asked = []
    monkeypatch.setattr(runner, "gpu_busy", lambda *a, trace=True: asked.append(trace) or {})
    # The real case over a copy of 1 MiB, not 512: what the runner hands on does not depend on the size.
    small = replace(CASE, build=lambda probe: host_copy(MiB))
    for trace in (False, True):
        ctx = RunContext(RecordStore(tmp_path), "m", "run", "c" * 40, trace_busy=trace)
        assert runner.execute(small, {"probe": "host_copy"}, run=ctx).ok
    runner.execute(small, {"probe": "host_copy"})
    assert asked == [False, True, True]


def test_nvml_shares_are_kept_to_four_places_each_and_summed():
    timed = types.SimpleNamespace(timed_shares=lambda: [0.123456, 0.200004])
    assert busy._nvml_reading(None, timed) == {"fraction": 0.3235, "gpus": [0.1235, 0.2]}
    assert busy._as_reading(None) is None


def test_the_tracer_is_handed_the_steps_and_a_failing_one_leaves_nvml_to_answer(monkeypatch):
    """The tracer runs the case's own steps against its unprofiled step time; where it fails, NVML
    still answers, and where neither can, the reason names both, in order."""
    seen = []
    monkeypatch.setattr(busy, "_profiled", lambda w, steps, step_s: seen.append((w, steps, step_s)) or 0.5)
    step = types.SimpleNamespace(gpus=(0,), timing=None)
    assert busy.gpu_busy(step, 0.25) == {"fraction": 0.5, "source": "cupti", "sampled": ["gpu0"]}
    assert seen == [(step, busy.STEPS, 0.25)]

    def fails(*a):
        raise RuntimeError("no CUPTI here " + "y" * 300)
    monkeypatch.setattr(busy, "_profiled", fails)
    monkeypatch.setattr(busy, "_nvml_reading", lambda w, timed: {"fraction": 0.7, "gpus": [0.7]})
    assert busy.gpu_busy(step, 0.25) == {"fraction": 0.7, "gpus": [0.7], "source": "nvml", "sampled": ["gpu0"]}
    monkeypatch.setattr(busy, "_nvml_reading", lambda w, timed: None)
    assert busy.gpu_busy(step, 0.25) == {
        "source": "none",
        "reason": ("cupti: RuntimeError: no CUPTI here " + "y" * 300)[:200] + "; nvml: saw no GPU activity"}
