"""What the parallelism cases train: the model, its data and its loss, from one picklable
description (``Job``) that each rank's process can rebuild exactly.

Every strategy starts from the same seed, the same weights and the same global batch, and uses
plain SGD, so after the same number of steps they must reach the same loss: the check that
tells a parallel strategy that computes something else from one that is merely slow.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.workloads.training.models import LMConfig

LR = 0.02  # large enough that a few steps move the loss well past float noise (what the equal-loss
          # tests compare), small enough that SGD does not diverge in a dozen steps


@dataclass(frozen=True)
class Job:
    model: str  # "resnet50" or "lm"
    strategy: str
    device: str  # "cuda" or "cpu"
    gpus: int  # devices used: GPUs, or on the CPU the worker processes / stages
    batch: int  # global batch, the same whatever the strategy: the samples one step processes
    micro_batches: int = 1
    image_size: int = 224
    classes: int = 1000
    depth: int = 12
    width: int = 1024
    heads: int = 16
    seq_len: int = 1024
    vocab: int = 32000
    seed: int = 0
    warmup: int = 2
    repeat: int = 10
    nodes: int = 1  # node agents the ranks are spread over: on this box, or one per box of a rendezvous
    transport: str = "fast"  # "sockets": NCCL without its peer-to-peer and shared-memory paths
    cut: str = "balanced"  # model parallel: "balanced" (the largest stage smallest) or "seed003" (after layer2)

    @property
    def lm_config(self) -> LMConfig:
        return LMConfig(vocab=self.vocab, width=self.width, depth=self.depth, heads=self.heads, seq_len=self.seq_len)

    def work(self) -> dict:
        """What one step processes; rates follow from it."""
        if self.model == "lm":
            return {"samples": self.batch, "tokens": self.batch * self.seq_len}
        return {"samples": self.batch}


def build_model(job: Job):
    from harness.workloads.training import models
    if job.model == "lm":
        return models.transformer_lm(job.lm_config, seed=job.seed)
    return models.resnet50(num_classes=job.classes, seed=job.seed)


def layers(job: Job, model) -> list:
    from harness.workloads.training import models
    return models.lm_layers(model) if job.model == "lm" else models.resnet_layers(model)


def batch(job: Job):
    """The global batch (inputs, targets) on the CPU."""
    from harness.workloads.training import models
    if job.model == "lm":
        return models.tokens(job.batch, job.seq_len, job.vocab, seed=job.seed + 1)
    return models.images(job.batch, job.image_size, job.classes, seed=job.seed + 1)


def loss_fn(job: Job):
    """Mean over the batch, so the mean of equal micro-batch (or shard) losses is the batch's."""
    import torch.nn.functional as F
    if job.model == "lm":
        return lambda logits, targets: F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return F.mse_loss  # against one-hot labels, as in the model-parallel ResNet50 tutorial


def optimizer(params):
    import torch
    return torch.optim.SGD(params, lr=LR)


def shard(tensor, rank: int, world: int):
    """This rank's equal slice of the global batch (the batch divides evenly: checked earlier)."""
    n = tensor.shape[0] // world
    return tensor[rank * n:(rank + 1) * n]
