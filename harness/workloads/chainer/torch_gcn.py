"""The GCN of ``harness.workloads.chainer.chainer_nets`` in PyTorch, for the framework Chainer's users moved to:
the same two layers, Z = A_hat relu(A_hat X W1) W2, with A_hat as a ``torch.sparse`` COO tensor.
Imported only once torch is known to be there."""
from __future__ import annotations

import numpy as np
import torch


class GCN(torch.nn.Module):
    def __init__(self, w1: np.ndarray, w2: np.ndarray):
        """``w1``, ``w2`` in Chainer's Linear layout (out, in), as ``harness.workloads.chainer.graphs.gcn_weights``."""
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(w1.T)))
        self.w2 = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(w2.T)))

    def forward(self, adj, x):
        h = torch.relu(torch.sparse.mm(adj, x @ self.w1))
        return torch.sparse.mm(adj, h @ self.w2)


def adjacency(graph, device) -> torch.Tensor:
    """A_hat as a coalesced COO tensor: repeated entries summed, as Chainer's COO product sums them."""
    index = torch.from_numpy(np.stack([graph.row, graph.col]).astype(np.int64))
    adj = torch.sparse_coo_tensor(index, torch.from_numpy(graph.value), (graph.nodes, graph.nodes))
    return adj.coalesce().to(device)
