"""Chainer 7.8.1 training a small CNN (two 3x3 convolutions of 32 and 64 channels, each with
ReLU and 2x2 max pooling, then a linear layer) on 3 x 32 x 32 images, each its class's template
plus noise. Without cuDNN (Chainer 7.8.1 finds none beside CuPy 14) Chainer convolves by
im2col and a matrix product, whose column buffers are part of what the pool must hold.

Parameters: ``device`` and ``pool`` (``harness.workloads.chainer.chainer_backend``), ``batch``. A step is one
forward, backward and Adam update over the batch; ``work`` counts its samples. The check asks
the loss to have dropped.
"""
from __future__ import annotations

from harness.workloads.chainer.chainer_backend import DEVICES, POOLS, guard_refusal_does_not_fit, open_backend
from harness.cases.base import Case
from harness.measure.workload import Workload

CHANNELS, SIDE, CLASSES = 3, 32, 16
BATCHES = (128, 1024, 4096, 8192)


def declared_bytes(device="cuda", pool="device_pool", batch=BATCHES[0], side=SIDE) -> int:
    """An estimate in fp32 per image: the input, each layer's output twice (itself and its
    gradient), and both im2col buffers (channels x 9 per output pixel)."""
    p1, p2 = side * side, (side // 2) ** 2
    activations = 32 * p1 * 2 + 32 * p1 // 4 + 64 * p2 * 2 + 64 * p2 // 4
    columns = CHANNELS * 9 * p1 + 32 * 9 * p2
    return 4 * batch * (CHANNELS * p1 + 2 * activations + columns)


def cnn_workload(device: str, pool: str, batch: int, side: int = SIDE, warmup: int = 2, repeat: int = 10) -> Workload:
    nbytes = declared_bytes(device, pool, batch, side)
    backend = open_backend(device, pool, nbytes)
    return guard_refusal_does_not_fit(nbytes)(_build)(backend, batch, side, warmup, repeat, nbytes)


def _build(backend, batch, side, warmup, repeat, nbytes):
    from harness.workloads.chainer import chainer_nets as nets
    x, t = nets.template_images(batch, CHANNELS, side, CLASSES)
    return nets.classifier_workload(backend, nets.CNN(CHANNELS, side, CLASSES), x, t, nbytes, warmup, repeat)


def build(device: str, pool: str, batch: int) -> Workload:
    return cnn_workload(device, pool, batch)


CASE = Case(name="chainer_cnn", params={"device": DEVICES, "pool": POOLS, "batch": BATCHES},
            build=build, declared_bytes=declared_bytes, doc=__doc__)
