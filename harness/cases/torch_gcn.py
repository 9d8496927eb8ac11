"""PyTorch training the GCN of ``chainer_gcn`` on the same graph from the same weights, with
Adam at the same rate: the framework Chainer's users moved to, against Chainer on either pool.

Parameters: ``device`` (cpu, cuda; on cuda PyTorch's caching allocator), ``nodes``,
``features``, as ``chainer_gcn``. ``work`` and the check are ``chainer_gcn``'s.
"""
from __future__ import annotations

from harness.workloads.chainer.graphs import (CLASSES, FEATURES, HIDDEN, NODES, TOLERANCE, gcn_bytes,
                                              gcn_reference_rows, gcn_weights, planted_partition, rows_checked,
                                              sample_rows)
from harness.measure.outcomes import learned
from harness.measure.guards.requirements import need_torch
from harness.measure.instruments.timing import torch_sync
from harness.cases.base import Case
from harness.measure.workload import Workload

DEVICES = ("cpu", "cuda")
LR, LOSS_DROP = 0.01, 0.95  # as harness.workloads.chainer.chainer_nets


def declared_bytes(device="cuda", nodes=NODES[0], features=FEATURES[0]) -> int:
    return gcn_bytes(nodes, features, HIDDEN, CLASSES, index_bytes=8)  # torch's indices are int64


def torch_gcn_workload(device: str, nodes: int, features: int, hidden: int = HIDDEN, classes: int = CLASSES,
                       warmup: int = 2, repeat: int = 10) -> Workload:
    torch = need_torch(device)
    gpus = (0,) if device == "cuda" else ()
    from harness.workloads.chainer import torch_gcn as tg
    graph = planted_partition(nodes, features, classes)
    model = tg.GCN(*gcn_weights(features, hidden, classes)).to(device)
    adj = tg.adjacency(graph, device)
    x, t = torch.from_numpy(graph.features).to(device), torch.from_numpy(graph.labels).long().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(adj, x), t)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())  # read in check: no synchronisation inside the step

    def check():
        trained = learned(losses, LOSS_DROP)
        rows = sample_rows(nodes)
        with torch.no_grad():
            out = model(adj, x)[torch.from_numpy(rows).to(device)].cpu().numpy()
        w1, w2 = model.w1.detach().cpu().numpy().T, model.w2.detach().cpu().numpy().T
        ref = gcn_reference_rows(graph, w1, w2, rows)
        return dict(**trained, **rows_checked(out, ref, TOLERANCE))

    return Workload(step=step, sync=torch_sync(gpus), gpus=gpus, check=check,
                    work={"nodes": nodes, "edges": graph.nnz}, warmup=warmup, repeat=repeat)


def build(device: str, nodes: int, features: int) -> Workload:
    return torch_gcn_workload(device, nodes, features)


CASE = Case(name="torch_gcn", params={"device": DEVICES, "nodes": NODES, "features": FEATURES},
            build=build, declared_bytes=declared_bytes, doc=__doc__)
