"""Chainer 7.8.1 training a two-layer GCN full-batch: a whole graph on the GPU at once, where
Chainer users met `out of memory` and were told to put CuPy on a managed pool.

Parameters:
- ``device`` and ``pool`` (``harness.chainer_backend``): cpu/numpy, or cuda with Chainer's default
  pool (``device_pool``) or the managed pool (``managed_pool``);
- ``nodes``: the graph's size, a planted partition of mean degree 16 (``harness.graphs``);
- ``features``: the input width. Hidden width 64, 16 classes.

A step is one full-batch forward, backward and Adam update over every node; ``work`` counts the
nodes and the adjacency's entries, so rates follow. The check asks the loss to have dropped, and
the trained model's output at 32 sampled nodes to match a float64 reference computed on the host
from their two-hop neighbourhoods (the sparse product's GPU kernel is the part most likely to
go wrong).
"""
from __future__ import annotations

import numpy as np

from ..chainer_backend import DEVICES, POOLS, guard_refusal_does_not_fit, open_backend
from ..graphs import nnz_of, planted_partition, propagate_rows
from ..outcomes import CheckFailed
from . import Case, Workload

NODES = (2**14, 2**16, 2**18, 2**20, 2**21)
FEATURES = (128, 512)
HIDDEN, CLASSES = 64, 16
SAMPLED = 32
TOLERANCE = 1e-4  # relative error of fp32 sums of ~17 terms is far below; a wrong index is not


def declared_bytes(device="cuda", pool="device_pool", nodes=NODES[0], features=FEATURES[0],
                   hidden=HIDDEN, classes=CLASSES) -> int:
    """An estimate of what a step holds at its peak, in fp32: the features, the adjacency (value,
    row and column), and each activation of width hidden or classes twice (itself and its
    gradient). Admitted by the managed-memory guard first; quoted when a step does not fit."""
    n = nodes
    return 4 * (n * features + 3 * nnz_of(n) + n + 2 * 3 * n * (hidden + classes))


def reference_rows(graph, w1, w2, rows):
    """Z[rows] = (A_hat relu(A_hat X W1^T) W2^T)[rows] in float64."""
    x = graph.features

    def hidden_at(ids):
        return np.maximum(propagate_rows(graph, ids, lambda j: x[j].astype(np.float64) @ w1.T.astype(np.float64)), 0)

    return propagate_rows(graph, rows, lambda ids: hidden_at(ids) @ w2.T.astype(np.float64))


def gcn_workload(device: str, pool: str, nodes: int, features: int, hidden: int = HIDDEN,
                 classes: int = CLASSES, warmup: int = 2, repeat: int = 10) -> Workload:
    nbytes = declared_bytes(device, pool, nodes, features, hidden, classes)
    backend = open_backend(device, pool, nbytes)
    return guard_refusal_does_not_fit(nbytes)(_build)(backend, nodes, features, hidden, classes, warmup, repeat, nbytes)


def _build(backend, nodes, features, hidden, classes, warmup, repeat, nbytes):
    from .. import chainer_nets as nets
    graph = planted_partition(nodes, features, classes)
    w1, w2 = nets.gcn_weights(features, hidden, classes)
    model = nets.GCN(w1, w2)
    model.to_device(backend.device)
    adj = nets.coo_on(backend.device, graph)
    x, t = backend.device.send(graph.features), backend.device.send(graph.labels)
    trainer = nets.Trainer(model, lambda: nets.F.softmax_cross_entropy(model(adj, x), t))
    rows = np.random.default_rng(1).choice(nodes, SAMPLED, replace=False)

    def check():
        learned = trainer.check()
        with nets.chainer.no_backprop_mode():
            out = nets.chainer.backend.CpuDevice().send(model(adj, x).array[backend.device.send(rows)])
        host = lambda p: nets.chainer.backend.CpuDevice().send(p.array)
        ref = reference_rows(graph, host(model.l1.W), host(model.l2.W), rows)
        err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        if not err <= TOLERANCE:
            raise CheckFailed(f"GCN output at {SAMPLED} sampled nodes is off the float64 reference by {err:.3g} "
                              f"(tolerance {TOLERANCE:g})")
        return dict(learned, rel_err=err, tolerance=TOLERANCE, shims=backend.shims)

    return Workload(step=guard_refusal_does_not_fit(nbytes)(trainer.step), sync=backend.sync, gpus=backend.gpus,
                    check=check, work={"nodes": nodes, "edges": graph.nnz}, warmup=warmup, repeat=repeat)


def build(device: str, pool: str, nodes: int, features: int) -> Workload:
    return gcn_workload(device, pool, nodes, features)


CASE = Case(name="chainer_gcn",
            params={"device": DEVICES, "pool": POOLS, "nodes": NODES, "features": FEATURES},
            build=build, declared_bytes=declared_bytes, doc=__doc__)
