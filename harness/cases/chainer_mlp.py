"""Chainer 7.8.1 training an MLP (1024, 2048, 2048, 16) on a batch a random linear teacher
labels: the batch-bound workload, beside the GCN's graph-bound one, on the same pools.

Parameters: ``device``, ``pool`` and ``budget`` (``harness.workloads.chainer.chainer_backend``: the budget caps
Chainer's pool on the device pool, and nothing on the managed pool), ``batch``. A step is one
forward, backward and Adam update over the batch; ``work`` counts its samples. The check asks
the loss to have dropped.
"""
from __future__ import annotations

from harness.workloads.chainer.chainer_backend import (DEVICES, POOLS, allocator, guard_refusal_does_not_fit,
                                                       open_backend)
from harness.measure.guards.budget import BUDGETS, handed_back
from harness.cases.base import Case
from harness.measure.workload import Workload

SIZES = (1024, 2048, 2048, 16)
BATCHES = (256, 4096, 65536, 262144)
# Past a 16 GB budget: twice the sweep's largest batch, whose step holds well over 8 GB of
# Chainer's pool (results/); the activations grow with the batch, the weights do not.
PAST_16GB = 524288


def declared_bytes(device="cuda", pool="device_pool", batch=BATCHES[0], budget="card", sizes=SIZES) -> int:
    """An estimate in fp32: the batch, each layer's output and its ReLU's, twice (itself and its
    gradient), and the weights four times (themselves, gradient, Adam's two moments)."""
    weights = sum((i + 1) * o for i, o in zip(sizes[:-1], sizes[1:]))
    return 4 * (batch * (sizes[0] + 1) + 2 * 2 * batch * sum(sizes[1:]) + 4 * weights)


def mlp_workload(device: str, pool: str, batch: int, sizes=SIZES, warmup: int = 2, repeat: int = 10,
                 budget: str = "card") -> Workload:
    nbytes = declared_bytes(device, pool, batch, sizes=sizes)
    backend = open_backend(device, pool, nbytes, budget)
    with handed_back(backend.budget) as hand:
        return hand(guard_refusal_does_not_fit(nbytes)(_build)(backend, batch, tuple(sizes), warmup, repeat, nbytes))


def _build(backend, batch, sizes, warmup, repeat, nbytes):
    from harness.workloads.chainer import chainer_nets as nets
    x, t = nets.teacher_batch(batch, sizes[0], sizes[-1])
    return nets.classifier_workload(backend, nets.MLP(sizes), x, t, nbytes, warmup, repeat, lr=nets.mlp_lr(sizes))


def build(device: str, pool: str, batch: int, budget: str) -> Workload:
    return mlp_workload(device, pool, batch, budget=budget)


CASE = Case(name="chainer_mlp",
            params={"device": DEVICES, "pool": POOLS, "batch": BATCHES + (PAST_16GB,), "budget": BUDGETS},
            build=build, declared_bytes=declared_bytes, allocator=allocator, earlier={"budget": "card"}, doc=__doc__)
