"""Data parallel versus model parallel: one training ``Job`` under one strategy, as a Workload.

- ``single``: the whole model on one device, the baseline for scaling efficiency;
- ``dp``: ``nn.DataParallel``, one process driving every GPU;
- ``ddp``: DistributedDataParallel, one process per GPU (NCCL; gloo on the CPU);
- ``naive_mp``: the model cut into k balanced stages on k devices, the whole batch at once;
- ``pipeline``: the same stages fed ``micro_batches`` micro-batches in GPipe order;
- ``fsdp``: FSDP2 (``fully_shard``), one process per GPU.

One-process strategies are timed by the runner like any case. Multi-process ones are launched
through ``harness.workloads.parallelism.launch`` (torch's elastic launcher), on ``nodes`` node agents of this
box or, under a multi-node launch (``launch.Nodes.from_env``), one agent per box; rank 0's own
timing, each rank's peaks and each rank's GPU-busy share come back as the Workload's measurements,
and the check says how the ranks were laid out (nodes, GPUs per node, transport). A box that does
not hold rank 0 of a multi-node launch skips: node 0's record holds every rank.
"""
from __future__ import annotations

import hashlib
import os
import statistics
import time
from dataclasses import replace

from harness.measure.workload import BENCHMARK_TIMEOUT_S, Workload
from harness.measure.outcomes import CheckFailed, Skip
from harness.measure.guards.requirements import need_module, need_torch_cuda
from harness.measure.guards.safety import MULTICAST_OFF
from harness.measure.instruments.timing import Timing, torch_sync
from harness.workloads.parallelism.parallel_job import Job

STRATEGIES = ("single", "dp", "ddp", "naive_mp", "pipeline", "fsdp")
MULTI_PROCESS = ("ddp", "fsdp")
MODEL_PARALLEL = ("naive_mp", "pipeline")
LAUNCH_TIMEOUT_S = BENCHMARK_TIMEOUT_S - 100  # under asv's limit, so that the launcher's clean-up runs first


def build(job: Job) -> Workload:
    # nn.DataParallel broadcasts through NCCL in this process, and the ranks inherit this
    # environment: NVLink multicast stays off whatever the calling shell says (see harness.measure.guards.safety).
    os.environ.update(MULTICAST_OFF)
    _check_fits_strategy(job)
    _need_runtime(job)
    if job.strategy in MULTI_PROCESS:
        return _multi_process(job)
    return _one_process(job)


def _check_fits_strategy(job: Job) -> None:
    """Parameter combinations that mean nothing skip with what to change."""
    if job.strategy == "single" and job.gpus != 1:
        raise Skip(f"single uses one device; gpus={job.gpus} applies to the other strategies: use gpus=1")
    if job.micro_batches != 1 and job.strategy != "pipeline":
        raise Skip(f"micro_batches={job.micro_batches} applies to pipeline only: "
                   f"use micro_batches=1 with {job.strategy}")
    if job.strategy in ("dp", "ddp", "fsdp") and job.batch % job.gpus:
        raise Skip(f"batch {job.batch} does not split evenly over {job.gpus} devices: use a multiple of {job.gpus}")
    if job.strategy == "pipeline" and job.batch % job.micro_batches:
        raise Skip(f"batch {job.batch} does not split into {job.micro_batches} equal micro-batches: use a multiple")
    if job.device == "cpu" and job.strategy == "dp":
        raise Skip("nn.DataParallel replicates over CUDA devices; on the CPU use ddp (gloo) instead")
    if (job.nodes != 1 or job.transport != "fast") and job.strategy not in MULTI_PROCESS:
        raise Skip(f"nodes and transport apply to the multi-process strategies ({', '.join(MULTI_PROCESS)}): "
                   f"use nodes=1 transport=fast with {job.strategy}")
    if job.gpus % job.nodes:
        raise Skip(f"gpus={job.gpus} does not split evenly over nodes={job.nodes}: use a multiple of {job.nodes}")
    if job.cut != "balanced" and not (job.strategy in MODEL_PARALLEL and job.model == "resnet50" and job.gpus == 2):
        raise Skip(f"cut={job.cut} is ResNet50's cut in two for naive_mp and pipeline: use gpus=2 with those, "
                   "or cut=balanced")


def _need_runtime(job: Job) -> None:
    if job.device == "cuda":
        need_torch_cuda(_on_this_box(job))
    else:
        need_module("torch", "pip install 'oombench[torch]'")
    if job.model == "resnet50":  # before any worker starts: a missing torchvision is a skip, not a crash
        need_module("torchvision.models", "pip install torchvision (the build that matches torch)")


# ---- one process: single, dp, naive_mp, pipeline ---------------------------------------------

def _devices(job: Job) -> list[str]:
    return [f"cuda:{i}" for i in range(job.gpus)] if job.device == "cuda" else ["cpu"] * job.gpus


def _trainer(job: Job):
    if job.strategy in MODEL_PARALLEL:
        from harness.workloads.parallelism.model_parallel import Stages
        return Stages(job, _devices(job))
    from harness.workloads.parallelism.data_parallel import Replicated
    device = _devices(job)[0]
    return Replicated(job, device, device_ids=list(range(job.gpus)) if job.strategy == "dp" else None)


def _one_process(job: Job) -> Workload:
    trainer, sync = _trainer(job), torch_sync(_gpus(job))
    durations, losses = [], []

    def step():
        # The runner's clock brackets this too; these durations serve the bubble estimate.
        t0 = time.perf_counter()
        trainer.step()
        sync()
        durations.append(time.perf_counter() - t0)
        if not losses:
            losses.append(float(trainer.last_loss))

    def check():
        result = loss_check(losses[0], float(trainer.last_loss))
        if job.strategy in MODEL_PARALLEL:
            result.update(bubble(trainer, sync, statistics.median(durations[job.warmup:] or durations)))
        return result

    return Workload(step=step, check=check, work=job.work(), sync=sync, gpus=_gpus(job),
                    warmup=job.warmup, repeat=job.repeat)


def _gpus(job: Job) -> tuple:
    return tuple(range(_on_this_box(job))) if job.device == "cuda" else ()


def _on_this_box(job: Job) -> int:
    """The GPUs of this box the case uses: all its ``gpus``, but their share under a multi-node launch."""
    from harness.workloads.parallelism.nodes import Nodes
    boxes = Nodes.from_env().count if job.strategy in MULTI_PROCESS else 1
    return job.gpus // boxes if job.gpus % boxes == 0 else job.gpus


def bubble(stages, sync, step_s: float) -> dict:
    """Idle fraction per stage: 1 - (its own compute, timed alone) / (the step's time)."""
    busy = stages.stage_busy_s(sync)
    idle = [max(0.0, 1 - b / step_s) for b in busy]
    return {"cuts": stages.cuts, "stage_estimated_bytes": _stage_sums(stages.sizes, stages.cuts),
            "stage_busy_s": busy, "stage_idle_fraction": idle, "bubble_fraction": sum(idle) / len(idle)}


def _stage_sums(sizes, cuts) -> list[int]:
    from harness.workloads.parallelism.stages import stage_ranges
    return [int(sum(sizes[a:b])) for a, b in stage_ranges(cuts, len(sizes))]


def loss_check(first: float, last: float) -> dict:
    if not (first == first and last == last) or last in (float("inf"), float("-inf")):
        raise CheckFailed(f"loss is not finite (first {first}, last {last}): the strategy computed garbage")
    return {"loss_first": first, "loss": last}


# ---- several processes: ddp, fsdp ------------------------------------------------------------

def _multi_process(job: Job) -> Workload:
    from harness.workloads.parallelism.distributed import worker
    from harness.workloads.parallelism.launch import launch
    nodes = _nodes(job)
    here = launch(worker, job.gpus, (job,), timeout_s=LAUNCH_TIMEOUT_S, nodes=nodes)
    if not nodes.local and 0 not in here:
        raise Skip(f"rank 0 ran on another node of this {nodes.count}-node launch, whose record holds every rank's "
                   "figures")
    ranks = next(iter(here.values()))  # every rank gathered every rank's report
    memory = {label: v for r in ranks for label, v in r["memory"].items()}
    check = {**loss_check(ranks[0]["loss_first"], ranks[0]["loss"]),
             "rank_median_s": [r["timing"]["median_s"] for r in ranks],
             "launch": {"nodes": nodes.count, "gpus_per_node": job.gpus // nodes.count, "transport": job.transport,
                        "rendezvous": "localhost" if nodes.local else nodes.endpoint}}
    return Workload(step=lambda: None, check=lambda: check, work=job.work(), gpus=_gpus(job),
                    timing=Timing.from_dict(ranks[0]["timing"]), memory=memory, busy=ranks_busy(ranks))


def _nodes(job: Job):
    """A multi-node launch (``harness run --nnodes``, or SLURM's) spreads the ranks over boxes;
    else ``job.nodes`` node agents share this one."""
    from harness.workloads.parallelism.nodes import Nodes
    launched = Nodes.from_env(transport=job.transport)
    if launched.count > 1 and job.nodes > 1:
        raise Skip(f"nodes={job.nodes} runs node agents on one box; under a {launched.count}-node launch use nodes=1")
    if launched.count > 1:
        # One rendezvous per case: a finished one is closed. Every node names it alike.
        return replace(launched, run_id=f"{launched.run_id}-{hashlib.sha1(repr(job).encode()).hexdigest()[:12]}")
    return Nodes(count=job.nodes, transport=job.transport)


def ranks_busy(ranks: list) -> dict:
    """The GPU-busy share each rank read of its own GPU over its timed steps, per GPU, with the
    GPUs sampled named; summed over the GPUs as one process's GPUs are (``busy.across_gpus``)."""
    from harness.measure.instruments.busy import across_gpus
    read = [r["busy"] for r in ranks if r.get("busy", {}).get("fraction") is not None]
    if not read:
        reasons = "; ".join(sorted({r.get("busy", {}).get("reason", "no reading") for r in ranks}))
        return {"source": "none", "reason": reasons} if any(r.get("busy") for r in ranks) else {}
    shares = [b["fraction"] for b in read]
    return {"fraction": round(across_gpus(shares), 4), "source": read[0]["source"],
            "gpus": shares, "sampled": [b["gpu"] for b in read]}
