"""Chainer 7.8.1 training a two-layer GCN full-batch: a whole graph on the GPU at once, where
Chainer users met `out of memory` and were told to put CuPy on a managed pool.

Parameters:
- ``device`` and ``pool`` (``harness.workloads.chainer.chainer_backend``): cpu/numpy, or cuda with Chainer's default
  pool (``device_pool``) or the managed pool (``managed_pool``);
- ``nodes``: the graph's size, a planted partition of mean degree 16 (``harness.workloads.chainer.graphs``);
- ``features``: the input width. Hidden width 64, 16 classes;
- ``budget``: the emulated card (``harness.measure.guards.budget``), enforced in Chainer's CuPy pool on the
  device pool; on the managed pool it caps nothing and the check says so.

A step is one full-batch forward, backward and Adam update over every node; ``work`` counts the
nodes and the adjacency's entries, so rates follow. The check asks the loss to have dropped, and
the trained model's output at 32 sampled nodes to match a float64 reference computed on the host
from their two-hop neighbourhoods (the sparse product's GPU kernel is the part most likely to
go wrong). ``torch_gcn`` is the same model on the same graph and weights in PyTorch.
"""
from __future__ import annotations

from harness.workloads.chainer.chainer_backend import (DEVICES, POOLS, allocator, guard_refusal_does_not_fit,
                                                       open_backend)
from harness.measure.guards.budget import BUDGETS, handed_back
from harness.workloads.chainer.graphs import (CLASSES, FEATURES, HIDDEN, NODES, TOLERANCE, gcn_bytes,
                                              gcn_reference_rows, gcn_weights, planted_partition, rows_checked,
                                              sample_rows)
from harness.cases.base import Case
from harness.measure.workload import Workload


def declared_bytes(device="cuda", pool="device_pool", nodes=NODES[0], features=FEATURES[0], budget="card") -> int:
    """``harness.workloads.chainer.graphs.gcn_bytes``: admitted by the managed-memory guard first; quoted when a step
    does not fit."""
    return gcn_bytes(nodes, features, HIDDEN, CLASSES)


def gcn_workload(device: str, pool: str, nodes: int, features: int, hidden: int = HIDDEN,
                 classes: int = CLASSES, warmup: int = 2, repeat: int = 10, budget: str = "card") -> Workload:
    nbytes = gcn_bytes(nodes, features, hidden, classes)
    backend = open_backend(device, pool, nbytes, budget)
    built = guard_refusal_does_not_fit(nbytes)(_build)
    with handed_back(backend.budget) as hand:
        return hand(built(backend, nodes, features, hidden, classes, warmup, repeat, nbytes))


def _build(backend, nodes, features, hidden, classes, warmup, repeat, nbytes):
    from harness.workloads.chainer import chainer_nets as nets
    graph = planted_partition(nodes, features, classes)
    model = nets.GCN(*gcn_weights(features, hidden, classes))
    model.to_device(backend.device)
    adj = nets.coo_on(backend.device, graph)
    x, t = backend.device.send(graph.features), backend.device.send(graph.labels)
    trainer = nets.Trainer(model, lambda: nets.F.softmax_cross_entropy(model(adj, x), t))
    rows = sample_rows(nodes)
    host = nets.chainer.backend.CpuDevice().send

    def check():
        learned = trainer.check()
        with nets.chainer.no_backprop_mode():
            out = host(model(adj, x).array[backend.device.send(rows)])
        ref = gcn_reference_rows(graph, host(model.l1.W.array), host(model.l2.W.array), rows)
        return dict(learned, **rows_checked(out, ref, TOLERANCE), shims=backend.shims, **backend.notes)

    return Workload(step=guard_refusal_does_not_fit(nbytes)(trainer.step), sync=backend.sync, gpus=backend.gpus,
                    check=check, work={"nodes": nodes, "edges": graph.nnz}, warmup=warmup, repeat=repeat)


def build(device: str, pool: str, nodes: int, features: int, budget: str) -> Workload:
    return gcn_workload(device, pool, nodes, features, budget=budget)


CASE = Case(name="chainer_gcn",
            params={"device": DEVICES, "pool": POOLS, "nodes": NODES, "features": FEATURES, "budget": BUDGETS},
            build=build, declared_bytes=declared_bytes, allocator=allocator, earlier={"budget": "card"}, doc=__doc__)
