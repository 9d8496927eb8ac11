"""What one "what fits" probe runs, alone in its process (its entry is ``python -m
harness.cases.fits_probe CONFIG_JSON N CAP_BYTES batch|seq_len``, which reads the config back).

Caps the CUDA allocator at CAP_BYTES before anything is allocated, builds the
``tricks`` training step of the config at batch N (no accumulation), or one sequence of N
tokens, runs ``STEPS`` optimizer steps and answers ``{"fits": true|false, "pid": ...,
"peak_allocated": bytes, "peak_reserved": bytes, "context_bytes": bytes, "peak_device": bytes,
"device_total": bytes,
"reason": ..., "short_of": "device"|"host"}`` (the context and the device's peak where NVML lists the
probe's process). Out of memory is an
answer; any other error is a broken probe (a traceback, exit 1). On the CPU there is no
allocator cap: the probe only says whether the step runs.
"""
from __future__ import annotations

import os
from typing import Mapping

from harness.measure.guards.budget import cap_torch
from harness.measure.outcomes import DEVICE, is_out_of_memory

STEPS = 2  # the second step holds the optimizer state the first one created
# What a probe of size n sets in the ``tricks`` parameters, by what the search grows.
GROWS = {"batch": lambda n: {"batch": n, "micro_batch": n},
         "seq_len": lambda n: {"seq_len": n, "batch": 1, "micro_batch": 1}}


def sizes(over: str, n: int) -> dict:
    """The ``tricks`` parameters a probe of size n sets."""
    return GROWS[over](n)


def probe(params: Mapping, n: int, cap_bytes: int, over: str = "batch", record: str | None = None) -> dict:
    """``params``: the ``tricks`` parameters of a validated config (the step the search starts
    from); the probe trains it grown to ``n`` along ``over``. Its ``budget`` is the whole card:
    the probe's cap is ``cap_bytes``. ``record`` (on a GPU): a path where the allocator's requests
    go, as the simulator reads them (``harness.workloads.search.simulator``)."""
    from harness.workloads.training.allocator import use_torch
    from harness.workloads.training.precision import process
    from harness.workloads.training.tricks import make_trainer
    from harness.workloads.training.ways import parse
    from harness.measure.guards.requirements import need_torch
    way = parse(params["technique"])  # once: the pieces below are handed the Way
    use_torch(way.allocator)  # before torch starts, as the tricks case does
    torch = need_torch(params["device"])
    cuda = params["device"] == "cuda"
    if cuda:
        cap_torch(cap_bytes, 0)
    result = {"pid": os.getpid(), "n": n}
    record = record if cuda else None  # torch records its CUDA allocator's requests alone
    if record:
        # no frames: the requests alone, which the probe's own run does not slow past recording them
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
    try:
        with process(way) as prec:  # as the tricks case runs it
            shape = {k: v for k, v in dict(params, **sizes(over, n)).items() if k not in ("budget", "technique")}
            trainer, _ = make_trainer(way=way, prec=prec, **shape)
            try:
                for _ in range(STEPS):
                    trainer.step()
                if cuda:
                    torch.cuda.synchronize()
                    # read before the trainer closes: what its step set up outside the pool (a
                    # process group's communication buffers) held the device through the step
                    context = context_bytes(torch)
            finally:
                trainer.close()
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        _recorded(torch, record)
        # the memory that ran short: the device's, or the host's where a way out keeps data there
        return dict(result, fits=False, reason=(str(e).strip().splitlines() or [type(e).__name__])[0],
                    short_of=getattr(e, "memory", DEVICE))
    _recorded(torch, record)
    if record:
        result.update(kept_on_host(trainer))
    if cuda:
        result["peak_allocated"] = int(torch.cuda.max_memory_allocated(0))
        result["peak_reserved"] = int(torch.cuda.max_memory_reserved(0))
        result["allocator_backend"] = torch.cuda.get_allocator_backend()  # the setting its environment held
        # the device's total as torch sees it (less than NVML's): on the whole card it, less the
        # context, binds before the cap (``predict.reachable``)
        result["device_total"] = int(torch.cuda.get_device_properties(0).total_memory)
        if context is not None:
            # torch keeps what it reserved (nothing here empties its cache): the device held the
            # context and the reserved peak together at the peak
            result.update(context_bytes=context, peak_device=context + result["peak_reserved"])
    return dict(result, fits=True)


def kept_on_host(trainer) -> dict:
    """Where the way keeps what the forward saves on the host: the bytes of each tensor its latest
    forward kept there and the share its guard allowed (``offload.activations_on_host``), which a
    recording files for the replay's host bound (``replayed.Recorded.host``); {} where it keeps none."""
    saving = trainer.saving
    if not hasattr(saving, "packed"):
        return {}
    return {"host_packs": list(saving.packed), "host_limit": int(saving.limit)}


def _recorded(torch, path: str | None) -> None:
    """The requests recorded since ``probe`` began, written to ``path`` (gzip'd JSON)."""
    if not path:
        return
    import gzip
    import json

    from harness.workloads.search import simulator
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(path, "wt") as f:
        json.dump(simulator.dump(simulator.programme(trace)), f)


def context_bytes(torch) -> int | None:
    """What this process holds on the device outside torch's pool (the CUDA context, the loaded
    modules, the libraries' workspaces): NVML's figure for this process less what torch reserves,
    the overhead a named card charges (``budget.resolve``). None where NVML does not list this
    process (a container's own process ids) or cannot be read: the device's used memory would
    count the probes running beside this one."""
    from harness.measure.guards.budget import held_here
    from harness.measure.instruments.devices import cuda_gpu, nvml
    try:
        import pynvml
    except ImportError:
        return None
    gpu = cuda_gpu(0)
    if gpu is None:
        return None
    try:
        with nvml() as lib:
            held, read = held_here(lib, lib.nvmlDeviceGetHandleByIndex(gpu.index), 0)
    except pynvml.NVMLError:
        return None
    return held - int(torch.cuda.memory_reserved(0)) if read == "nvml process" else None
