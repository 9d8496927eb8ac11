"""The multi-process trainers, one process per device: ``ddp`` (DistributedDataParallel: each
rank holds the whole model and a 1/world shard of the batch; gradients are averaged by
all-reduce) and ``fsdp`` (FSDP2, ``fully_shard``: parameters, gradients and optimizer state
sharded over ranks, gathered layer by layer when used). NCCL on GPUs, gloo on the CPU.

The runner times ``step()`` in its own process, which here only waits. So each rank times its
own steps with the harness's ``time_steps`` (collectives keep the ranks in step) and reports its
timing, its own peak memory over them (its allocator's and its GPU's), how busy its GPU was over
them, and the global loss; rank 0's timing stands for the step. Every rank's report is gathered
to every rank (``all_gather_object``), so that whichever node's agent holds rank 0, on this box
or on another, hands the case every rank's figures.
"""
from __future__ import annotations

import os
import resource

from harness.workloads.parallelism import parallel_job
from harness.measure.instruments import busy
from harness.measure.instruments.memory import PeakMemory
from harness.measure.instruments.timing import time_steps


def worker(rank: int, world: int, job: parallel_job.Job) -> list:
    """Runs under ``harness.workloads.parallelism.launch.launch``; returns every rank's report, by rank."""
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", rank))  # this rank's GPU among those its node sees
    device = _device(torch, job, local, world)
    backend = "nccl" if job.device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world,
                            device_id=torch.device(device) if job.device == "cuda" else None)
    trainer = _trainer(torch, job, device, rank, world)
    sync = (lambda: torch.cuda.synchronize(device)) if job.device == "cuda" else (lambda: None)
    # The peaks cover the timed steps alone, as in the runner's own cases: the allocator's, and the
    # device's (NVML: the context and NCCL's buffers included), which the parent cannot see apart
    # from the build, the whole launch being its set-up.
    gpus = [local] if job.device == "cuda" else []
    index = gpu_index(local) if gpus else None  # NVML's, read once: each reading enumerates the box
    peak = PeakMemory(gpus=[index] if gpus else [])
    with peak, busy.Sampled(gpus) as sampled:
        timing = time_steps(trainer["step"], sync=sync, warmup=job.warmup, repeat=job.repeat,
                            begin=lambda: (peak.steps_begin(), sampled.begin()))
        peak.steps_end()
        losses = trainer["losses"]()  # after the timed steps, as every strategy reports them
        _long_enough(torch, dist, trainer["step"], sync, sampled, timing.median_s, device)
        reading = sampled.reading(gpu_label(local, index))
    dist.all_reduce(losses)  # mean of equal shards' means: the global batch's loss
    first, last = (float(v) / world for v in losses)
    mine = {"timing": timing.to_dict(), "loss_first": first, "loss": last,
            "memory": _memory(torch, job, device, rank, local, index, peak.bytes), "busy": reading}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    # Only on success: after an error a peer may be stuck in a collective and the destroy with
    # it; the launcher kills every rank instead.
    dist.destroy_process_group()
    return everyone


def _long_enough(torch, dist, step, sync, sampled, step_s: float, device) -> None:
    """Untimed steps after the timed ones until the GPU-busy window is long enough for the
    driver's samples; the same count on every rank (the largest any rank needs), since each step
    holds collectives that every rank must join."""
    need = torch.tensor([sampled.steps_short(step_s)], device=device)
    dist.all_reduce(need, op=dist.ReduceOp.MAX)
    for _ in range(int(need.item())):
        step()
    sync()


def _device(torch, job, local, world) -> str:
    if job.device == "cuda":
        torch.cuda.set_device(local)
        return f"cuda:{local}"
    # Share the host's cores between ranks instead of each rank taking them all.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    return "cpu"


def _trainer(torch, job, device, rank, world) -> dict:
    model = parallel_job.build_model(job).to(device)
    if job.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        # The GPU as this rank's node numbers it (``device``, from LOCAL_RANK), never the global
        # rank: a rank on a second node sees its GPUs from 0.
        net = DistributedDataParallel(model, device_ids=[torch.device(device)] if job.device == "cuda" else None)
    elif job.strategy == "fsdp":
        net = _fully_shard(torch, job, model, world)
    else:
        raise ValueError(f"{job.strategy!r} is not a multi-process strategy: use ddp or fsdp")
    x, y = parallel_job.batch(job)
    x, y = parallel_job.shard(x, rank, world).to(device), parallel_job.shard(y, rank, world).to(device)
    loss_fn, opt = parallel_job.loss_fn(job), parallel_job.optimizer(net.parameters())
    kept = []  # the first step's loss and the latest

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        kept[1:] = [loss.detach()]
        if len(kept) == 1:
            kept.insert(0, kept[0])

    return {"step": step, "losses": lambda: torch.stack(kept).float().clone()}


def _fully_shard(torch, job, model, world):
    """Each layer is its own FSDP unit (gathered just before it runs, freed after), then the root;
    that is what keeps only one layer's full parameters alive at a time."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(job.device, (world,))
    for layer in parallel_job.layers(job, model):
        if _is_block(layer, model):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _is_block(layer, model) -> bool:
    """A transformer block or a ResNet bottleneck: a unit of the model's own with parameters.
    Single convolutions, norms and the classifier stay in the root unit (one all-gather for
    all of them); the embedding and head wrappers of ``lm_layers`` are not the model's modules."""
    own = any(layer is m for m in model.modules())
    return own and bool(list(layer.children())) and any(True for _ in layer.parameters())


def gpu_index(local: int) -> int:
    """NVML's index of this rank's GPU (CUDA device ``local``), the number the case's process
    gives it too: NVML numbers every GPU of the box, whatever ``CUDA_VISIBLE_DEVICES`` hides. Where
    NVML cannot tell, the ordinal past those of earlier nodes of the box (``launch.FIRST_GPU``)."""
    from harness.measure.instruments.devices import cuda_gpu
    from harness.workloads.parallelism.nodes import FIRST_GPU
    gpu = cuda_gpu(local)
    return gpu.index if gpu is not None else int(os.environ.get(FIRST_GPU, 0)) + local


def gpu_label(local: int, index: int | None = None) -> str:
    """This rank's GPU as the case's process labels the GPUs of its box (``gpuN``, ``gpu_index``,
    read here where ``index`` is not given), or, for a rank on another box of a multi-node launch,
    with that node's number before it (``node1.gpu0``)."""
    from harness.workloads.parallelism.nodes import Nodes
    node = int(os.environ.get("GROUP_RANK", 0))
    index = gpu_index(local) if index is None else index
    return f"node{node}.gpu{index}" if Nodes.from_env().count > 1 and node != 0 else f"gpu{index}"


def _memory(torch, job, device, rank, local, index, steps: dict) -> dict:
    """The rank's peaks over its timed steps: the allocator's by global rank, the device level
    of its own GPU (``local`` on its node, NVML's ``index``) by ``gpu_label``, the figure that the
    case's reading of that GPU before any rank started is taken from; ``steps``: its
    ``PeakMemory.bytes``."""
    if job.device == "cuda":
        used = f"device.used.gpu{index}"
        return {f"allocator.torch.max_allocated.cuda:{rank}": int(torch.cuda.max_memory_allocated(device)),
                f"allocator.torch.max_reserved.cuda:{rank}": int(torch.cuda.max_memory_reserved(device)),
                **({f"device.used.{gpu_label(local, index)}": steps[used]} if used in steps else {})}
    return {f"host.max_rss.rank{rank}": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
