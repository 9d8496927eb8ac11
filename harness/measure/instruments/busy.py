"""How busy the GPU was during a step: GPU activity over the step's wall time.

A step whose GPU sits idle most of its time is bound by the host (launches, Python, copies it
waits for), and its figure ranks the host rather than the technique. The fraction is read over
a few extra steps after the timed ones (so profiling never touches the timing or the peaks):

- ``cupti``: kernels, copies and memsets that PyTorch's profiler (CUPTI) saw, their union over
  each step's window, per step, over the median step time of the unprofiled timing (the
  profiler's own overhead lengthens the profiled steps on the host, never the GPU's work).
- ``nvml``: NVML's utilisation samples (the share of each sample period in which a kernel ran),
  where the profiler saw no GPU activity or is not available: over the timed steps themselves
  where they lasted long enough for several samples (``Sampled``, read beside them, which
  touches neither their timing nor their peaks), else over extra steps; per GPU (kept as
  ``gpus``) and summed over a step's GPUs (``across_gpus``). Coarser: the driver samples every
  1/6 s to 1 s.

Every reading names the GPUs it read (``sampled``: ``gpuN``, N the CUDA device of the process
that ran the steps), and a GPU case that neither could read says why (``source: none``, with
the ``reason`` of each: no NVML here, no device behind the ordinal, no sample): a GPU case's
record never holds an empty busy share, which the gate would read as "busy unknown".
"""
from __future__ import annotations

import math
import time
from contextlib import ExitStack

from harness.measure.instruments.timing import no_prepare

STEPS = 3
NVML_MIN_S = 1.0  # long enough for several of the driver's utilisation samples
STEP_MARK = "oombench.busy_step"


def union_s(intervals, lo: float, hi: float) -> float:
    """Length of the union of (start, end) intervals clipped to [lo, hi]."""
    total, reach = 0.0, lo
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        # Outside the window, or already counted.
        if b <= max(a, reach):  # pragma: no mutate (at b == max(a, reach) the interval adds nothing)
            continue
        total += b - max(a, reach)
        reach = b
    return total


def fraction(windows, activity, step_s: float | None = None) -> float | None:
    """GPU-active time within the steps' windows over their wall time: the windows' own length,
    or ``step_s`` per window where the windows are stretched by a profiler."""
    wall = len(windows) * step_s if step_s else sum(b - a for a, b in windows)
    if wall <= 0:
        return None
    return min(1.0, sum(union_s(activity, a, b) for a, b in windows) / wall)


def _profiled(workload, steps: int, step_s: float) -> float | None:
    import torch
    # The autograd profiler is the tracer torch.profiler.profile drives (Kineto, CUPTI for the GPU),
    # started without it: torch.profiler's start imports torch._inductor and sympy to read one
    # setting, seconds of every case's fresh process.
    from torch.autograd.profiler import profile, record_function
    with profile(use_device="cuda", use_kineto=True) as prof:
        for _ in range(steps + 1):
            _prepared(workload)
            with record_function(STEP_MARK):
                workload.step()
                workload.sync()
    events = prof.function_events
    # The first traced step is a warm-up, its window left out: CUPTI can miss the activity of the
    # first step it traces, which would read as an idle GPU.
    cpu = torch.autograd.DeviceType.CPU
    windows = sorted((e.time_range.start, e.time_range.end) for e in events
                     if e.name == STEP_MARK and e.device_type == cpu)[1:]
    # A user annotation on the GPU's timeline (the step mark's own, ``gpu_user_annotation``) spans
    # from the step's first kernel to its last, idle gaps included: it is not activity, and counted
    # it reads every step as busy, as torch's own tables know (they leave it out of device time).
    gpu = [(e.time_range.start, e.time_range.end) for e in events
           if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation
           and e.time_range.end > e.time_range.start]
    # Profiler times are in microseconds.
    return fraction(windows, gpu, step_s * 1e6) if gpu else None


def _prepared(workload):
    if workload.prepare is not no_prepare:
        workload.prepare()
        workload.sync()


def _nvml(workload) -> list[float] | None:
    """Each of the workload's GPUs' mean utilisation over steps run for at least NVML_MIN_S."""
    from harness.measure.instruments.devices import cuda_gpu, nvml
    session = nvml()  # asked first: without nvidia-ml-py, that is the reason given, not a card not found
    gpus = [cuda_gpu(o) for o in workload.gpus]  # the cards CUDA devices are, CUDA_VISIBLE_DEVICES honoured
    if any(g is None for g in gpus):
        raise LookupError(f"no NVML device behind CUDA device(s) {list(workload.gpus)}")
    with session as pynvml:
        handles = [pynvml.nvmlDeviceGetHandleByUUID(g.uuid) for g in gpus]
        since = int(time.time() * 1e6)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < NVML_MIN_S:
            _prepared(workload)
            workload.step()
            workload.sync()
        shares = [_share(pynvml, handle, since) for handle in handles]
        return None if None in shares else shares


def _share(nvml, handle, since_us: int, until_us: int | None = None) -> float | None:
    """A GPU's mean utilisation over the driver's samples since ``since_us`` (up to ``until_us``);
    None without any."""
    _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
    values = [s.sampleValue.uiVal for s in samples if since_us <= s.timeStamp <= (until_us or s.timeStamp)]
    return sum(values) / len(values) / 100 if values else None


class Sampled:
    """How busy one rank's GPU was over its own timed steps, where the steps run in a rank of a
    multi-process case: NVML's utilisation samples from ``begin()`` (called as the timed steps
    begin: nothing runs beside the steps, so the timing is untouched) to ``reading()``. The rank
    runs ``steps_short`` more steps where its timed ones were too short for several samples.
    ``gpus``: the rank's CUDA ordinals (none on the CPU: no reading)."""

    def __init__(self, gpus):
        self.gpus, self.handles, self.problem = list(gpus), [], None
        self.since, self.t0, self.until, self.lasted = None, None, None, 0.0
        self._held = ExitStack()

    def __enter__(self):
        if self.gpus:
            try:
                from harness.measure.instruments.devices import cuda_gpu, nvml
                self.nvml = self._held.enter_context(nvml())
                cards = [cuda_gpu(o) for o in self.gpus]
                if None in cards:
                    raise LookupError(f"no NVML device behind CUDA device(s) {self.gpus}")
                self.handles = [self.nvml.nvmlDeviceGetHandleByUUID(c.uuid) for c in cards]
            except Exception as e:  # the reading says why; the steps run all the same
                self.problem = f"nvml: {type(e).__name__}: {e}"[:200]
        return self

    def __exit__(self, *exc):
        self._held.close()

    def begin(self) -> None:
        self.since, self.t0 = int(time.time() * 1e6), time.perf_counter()

    def end(self) -> None:
        """The timed steps are over: what runs after them (a check, a profiler) is not theirs.
        Nothing where they never began (measured elsewhere)."""
        if self.t0 is None:
            return
        self.until, self.lasted = int(time.time() * 1e6), time.perf_counter() - self.t0

    def timed_shares(self) -> list[float] | None:
        """Each GPU's utilisation over the timed steps (``begin`` to ``end``), where they lasted
        NVML_MIN_S or more and every GPU has a sample; None otherwise."""
        if not self.handles or self.until is None or self.lasted < NVML_MIN_S:
            return None
        shares = [_share(self.nvml, h, self.since, self.until) for h in self.handles]
        return None if None in shares else shares

    def steps_short(self, step_s: float) -> int:
        """Untimed steps still to run for the window to last NVML_MIN_S."""
        if not self.handles or self.t0 is None or step_s <= 0:
            return 0
        return max(0, math.ceil((NVML_MIN_S - (time.perf_counter() - self.t0)) / step_s))

    def reading(self, label: str) -> dict:
        """{"fraction", "source": "nvml", "gpu": label} (over this rank's GPUs, summed as
        ``across_gpus``), {"source": "none", "reason", "gpu"} where NVML could not say, {} on the CPU."""
        if not self.gpus:
            return {}
        if self.handles and self.since is not None:
            try:
                shares = [_share(self.nvml, h, self.since) for h in self.handles]
                if None not in shares:
                    return {"fraction": round(across_gpus(shares), 4), "source": "nvml", "gpu": label}
                self.problem = "nvml: no utilisation sample over the steps"
            except Exception as e:
                self.problem = f"nvml: {type(e).__name__}: {e}"[:200]
        return {"source": "none", "reason": self.problem or "nvml: the steps never began", "gpu": label}


def across_gpus(shares: list[float]) -> float:
    """The share of the step in which some GPU was busy, at most: the GPUs' shares summed, capped
    at 1. NVML samples each GPU at its own instants, so their union cannot be read; the sum bounds
    it from above. A step read as host-bound under it surely waited on the host, and a model-
    parallel step, whose GPUs take turns by design, is not mistaken for one."""
    return min(1.0, sum(shares))


def label(ordinal: int) -> str:
    """A GPU as a reading names it: the CUDA device of the process that ran the steps."""
    return f"gpu{ordinal}"


def gpu_busy(workload, step_s: float, timed: Sampled | None = None, trace: bool = True) -> dict:
    """{"fraction": 0..1, "source": "cupti" | "nvml", "sampled": [the GPUs read]}, with NVML's share
    of the timed steps as ``nvml`` beside a traced fraction where NVML read them; {} for a case
    without a GPU; what the processes that ran the steps read (``Workload.busy``) where they were
    not this one; {"source": "none", "reason": ...} where neither could say. ``timed``: NVML as
    it sampled the timed steps, read before any extra step is run. ``trace`` False (a run that
    asked for no extra step, ``RunContext.trace_busy``): NVML's share of the timed steps alone."""
    if workload.timing is not None:
        return workload.busy
    if not workload.gpus:
        return {}
    if not trace:
        return _untraced(workload, timed)
    reasons = []
    readers = (("cupti", lambda: _cupti_reading(workload, step_s)), ("nvml", lambda: _nvml_reading(workload, timed)))
    for source, read in readers:
        try:
            reading = read()
        except Exception as e:  # a profiler or NVML that cannot answer here: the other may
            reasons.append(f"{source}: {type(e).__name__}: {e}"[:200])
            continue
        if reading is not None:
            beside = _nvml_beside(timed) if source == "cupti" else {}
            return {**reading, **beside, "source": source, "sampled": [label(o) for o in workload.gpus]}
        reasons.append(f"{source}: saw no GPU activity")
    return {"source": "none", "reason": "; ".join(reasons)}


def _untraced(workload, timed: Sampled | None) -> dict:
    """NVML's share of the timed steps, with no step run for a reading: for a run that asked for
    none (a compare's later rounds, whose verdict reads their times alone)."""
    try:
        reading = _as_reading(timed.timed_shares() if timed is not None else None)
        why = f"nvml: no reading of the timed steps (it needs {NVML_MIN_S:g} s of them and a sample of each GPU)"
    except Exception as e:  # NVML that cannot answer here
        reading, why = None, f"nvml: {type(e).__name__}: {e}"[:200]
    if reading is not None:
        return {**reading, "source": "nvml", "sampled": [label(o) for o in workload.gpus]}
    return {"source": "none", "reason": f"cupti: not traced in this run (no extra step); {why}"}


def _nvml_beside(timed: Sampled | None) -> dict:
    """NVML's share over the timed steps, kept beside a traced one where NVML read them (``nvml``):
    a second opinion, read with no extra step, against which a fault of the tracer stands out."""
    if timed is None:
        return {}
    try:
        shares = timed.timed_shares()
    except Exception:  # NVML that cannot answer here leaves the traced share alone
        return {}
    return {} if shares is None else {"nvml": round(across_gpus(shares), 4)}


def _cupti_reading(workload, step_s: float) -> dict | None:
    fraction = _profiled(workload, STEPS, step_s)
    return None if fraction is None else {"fraction": round(fraction, 4)}


def _nvml_reading(workload, timed: Sampled | None) -> dict | None:
    """Over the timed steps where ``timed`` read them, else over steps run for it."""
    return _as_reading((timed.timed_shares() if timed is not None else None) or _nvml(workload))


def _as_reading(shares: list[float] | None) -> dict | None:
    """The GPUs' shares summed (``across_gpus``), each GPU's kept beside; None for no shares."""
    if shares is None:
        return None
    return {"fraction": round(across_gpus(shares), 4), "gpus": [round(v, 4) for v in shares]}
