"""Model parallelism in one process: the network cut into k consecutive stages on k devices.

``naive`` sends the whole batch through stage 1, then stage 2, ...: one device works at a time.
``pipeline`` feeds micro-batches in the GPipe order: at clock t, stage s runs micro-batch t - s,
so while stage 2 works on micro-batch 1, stage 1 already works on micro-batch 2. CUDA launches
are asynchronous and each device has its own stream, so issuing in that order is what lets the
GPUs overlap; all micro-batches' backward passes go through one ``backward`` call, whose engine
runs each device's share on that device's own thread. The mean of equal micro-batch losses is
the batch loss, so both compute the same gradients as one device.

On the CPU every stage is "cpu": the arithmetic is the same (the loss tests rest on that), there
is just nothing to overlap.
"""
from __future__ import annotations

import time

from harness.workloads.parallelism import parallel_job
from harness.workloads.parallelism.stages import cut_after, layer_bytes, split_balanced, stage_ranges

CUTS = ("balanced", "seed003")


def cuts(job: parallel_job.Job, model, layers, sizes, k: int) -> list[int]:
    """``balanced``: where the largest stage is smallest (``split_balanced``); ``seed003``: after
    ResNet50's ``layer2``, where seed 003 (the PyTorch model-parallel tutorial) cut it in two."""
    if job.cut == "balanced":
        return split_balanced(sizes, k)
    if job.cut == "seed003" and job.model == "resnet50" and k == 2:
        return cut_after(layers, model.layer2)
    raise ValueError(f"cut={job.cut!r} cuts ResNet50 in two; use cut=balanced for {job.model} on {k} devices")


class Stages:
    """The model's layers, cut as ``job.cut`` says (``cuts``), stage s on ``devices[s]``."""

    def __init__(self, job: parallel_job.Job, devices: list[str]):
        import torch
        self.model = model = parallel_job.build_model(job)  # whose layers the stages hold
        layers = parallel_job.layers(job, model)
        x, self.targets = parallel_job.batch(job)
        self.sizes = layer_bytes(layers, x)
        self.cuts = cuts(job, model, layers, self.sizes, len(devices))
        self.devices = devices
        self.stages = [torch.nn.Sequential(*layers[a:b]).to(dev)
                       for (a, b), dev in zip(stage_ranges(self.cuts, len(layers)), devices)]
        self.inputs = x.to(devices[0])
        self.targets = self.targets.to(devices[-1])
        self.loss_fn = parallel_job.loss_fn(job)
        self.opt = parallel_job.optimizer([p for s in self.stages for p in s.parameters()])
        self.micro_batches = job.micro_batches
        self.last_loss = float("nan")

    def forward_all(self, xs) -> list:
        """GPipe order: clock t runs micro-batch t - s on stage s, later stages first, so that
        each stage's input is what the stage before it produced at the previous clock."""
        k, m = len(self.stages), len(xs)
        acts = [[None] * k for _ in range(m)]
        for t in range(m + k - 1):
            for s in reversed(range(k)):
                i = t - s
                if 0 <= i < m:
                    inp = xs[i] if s == 0 else acts[i][s - 1].to(self.devices[s], non_blocking=True)
                    acts[i][s] = self.stages[s](inp)
        return [a[-1] for a in acts]

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        xs = self.inputs.chunk(self.micro_batches)
        ys = self.targets.chunk(self.micro_batches)
        outs = self.forward_all(xs)
        loss = sum(self.loss_fn(o, y) for o, y in zip(outs, ys)) / len(xs)
        loss.backward()
        self.opt.step()
        self.last_loss = loss.detach()

    def stage_busy_s(self, sync, repeat: int = 3) -> list[float]:
        """Seconds each stage computes in one step (forward and backward of every micro-batch),
        timed alone, stage by stage, on inputs of the right shape. Against the pipelined step
        time it gives each stage's idle (bubble) fraction. Weights are left untouched."""
        import torch
        xs = self.inputs.chunk(self.micro_batches)
        inputs = []  # each stage's input per micro-batch, as the pipeline produces it
        with torch.no_grad():
            for s, stage in enumerate(self.stages):
                xs = [x.to(self.devices[s]) for x in xs]
                inputs.append(xs)
                xs = [stage(x) for x in xs]
        busy = []
        for s, stage in enumerate(self.stages):
            samples = []
            for _ in range(repeat + 1):  # the first is a warm-up
                sync()
                t0 = time.perf_counter()
                for x in inputs[s]:
                    # Later stages compute their input's gradient in training; stage 0 does not.
                    x = x.detach().requires_grad_(s > 0 and x.is_floating_point())
                    out = stage(x)
                    out.backward(torch.ones_like(out))
                sync()
                samples.append(time.perf_counter() - t0)
            busy.append(sorted(samples[1:])[len(samples[1:]) // 2])
        for stage in self.stages:
            stage.zero_grad(set_to_none=True)
        return busy
