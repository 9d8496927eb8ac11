"""A synthetic graph a graph convolution network can learn (a planted partition), and what the
Chainer and PyTorch GCNs share on it: initial weights, the bytes a step holds, a float64 reference.

Nodes fall into ``classes`` communities; each node draws ``degree / 2`` edges, to a node of its
own community with probability ``p_in`` and to any node otherwise, and every edge is kept in both
directions, so the mean degree is ``degree``. Features are the community's mean vector, weak
against unit noise in each feature, plus that noise: averaging over neighbours, mostly of the
same community, sharpens the signal, which is what a GCN's propagation does.

The adjacency is Kipf & Welling's: self loops added, normalised symmetrically,
A_hat = D^-1/2 (A + I) D^-1/2, as COO sorted by row (CSR's order; ``indptr`` gives each row's
slice). Repeated edges stay as repeated entries: a COO product sums them, as the degree does.
Built on the host with NumPy; the frameworks take it from here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEGREE = 16
P_IN = 0.8
SIGNAL = 0.1  # per feature, against unit noise
# The GCN both frameworks train on it, at the sizes their cases sweep: nodes, feature widths, the
# hidden width and the classes; and how far its rows may be from the float64 reference.
NODES = (2**14, 2**16, 2**18, 2**20, 2**21)
FEATURES = (128, 512)
HIDDEN, CLASSES = 64, 16
TOLERANCE = 1e-4  # fp32 sums of ~17 terms stay far below it; a wrong index or a lost update does not


@dataclass
class Graph:
    features: np.ndarray  # (n, f) float32
    labels: np.ndarray  # (n,) int32, the community
    row: np.ndarray  # (nnz,) int32, sorted
    col: np.ndarray  # (nnz,) int32
    value: np.ndarray  # (nnz,) float32, A_hat's entries
    indptr: np.ndarray  # (n + 1,) int64: row i's entries are [indptr[i], indptr[i + 1])

    @property
    def nodes(self) -> int:
        return len(self.labels)

    @property
    def nnz(self) -> int:
        return len(self.value)


def nnz_of(nodes: int, degree: int = DEGREE) -> int:
    return nodes * (2 * (degree // 2) + 1)


def planted_partition(nodes: int, features: int, classes: int, degree: int = DEGREE, p_in: float = P_IN,
                      seed: int = 0) -> Graph:
    if nodes < classes or degree < 2:
        raise ValueError(f"need nodes >= classes and degree >= 2, "
                         f"got nodes={nodes}, classes={classes}, degree={degree}")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, nodes).astype(np.int32)
    src, dst = _edges(rng, labels, classes, degree // 2, p_in)
    row = np.concatenate([src, dst, np.arange(nodes)])
    col = np.concatenate([dst, src, np.arange(nodes)])
    order = np.argsort(row, kind="stable")
    row, col = row[order].astype(np.int32), col[order].astype(np.int32)
    counts = np.bincount(row, minlength=nodes)
    dinv = 1.0 / np.sqrt(counts)
    value = (dinv[row] * dinv[col]).astype(np.float32)
    means = rng.standard_normal((classes, features)).astype(np.float32) * np.float32(SIGNAL)
    x = rng.standard_normal((nodes, features), dtype=np.float32)
    x += means[labels]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Graph(features=x, labels=labels, row=row, col=col, value=value, indptr=indptr)


def _edges(rng, labels, classes, per_node, p_in):
    n = len(labels)
    src = np.repeat(np.arange(n), per_node)
    inside = rng.random(len(src)) < p_in
    dst = rng.integers(0, n, len(src))
    # A node of the same community: a uniform pick among that community's members.
    by_class = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[by_class], np.arange(classes + 1))
    c = labels[src[inside]]
    sizes = starts[c + 1] - starts[c]
    dst[inside] = by_class[starts[c] + (rng.random(len(c)) * sizes).astype(np.int64)]
    return src, dst


def propagate_rows(graph: Graph, rows: np.ndarray, dense) -> np.ndarray:
    """(A_hat @ D)[rows] in float64, reading ``dense(ids)`` only at the rows' neighbours: a
    reference for a few rows of a product over a graph too large to multiply on the host."""
    starts, ends = graph.indptr[rows], graph.indptr[rows + 1]
    seg = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)])
    offsets = np.concatenate([[0], np.cumsum(ends - starts)[:-1]])
    cols = graph.col[seg]
    ids, inverse = np.unique(cols, return_inverse=True)
    terms = graph.value[seg, None].astype(np.float64) * np.asarray(dense(ids), np.float64)[inverse]
    return np.add.reduceat(terms, offsets, axis=0)


# ---- shared by the Chainer and the PyTorch GCN ---------------------------------------------

def glorot(rng, out_size: int, in_size: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (in_size + out_size))
    return rng.uniform(-limit, limit, (out_size, in_size)).astype(np.float32)


def gcn_weights(features: int, hidden: int, classes: int, seed: int = 0):
    """W1 (hidden, features) and W2 (classes, hidden), in Chainer's Linear layout (out, in)."""
    rng = np.random.default_rng(seed)
    return glorot(rng, hidden, features), glorot(rng, classes, hidden)


def gcn_bytes(nodes: int, features: int, hidden: int, classes: int, index_bytes: int = 4) -> int:
    """An estimate of what a step holds at its peak, in fp32: the features, the adjacency (value,
    row and column indices), the labels, and each activation of width hidden or classes twice
    (itself and its gradient)."""
    n = nodes
    return 4 * n * features + (4 + 2 * index_bytes) * nnz_of(n) + 4 * n + 4 * 2 * 3 * n * (hidden + classes)


def gcn_reference_rows(graph: Graph, w1: np.ndarray, w2: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Z[rows] = (A_hat relu(A_hat X W1^T) W2^T)[rows] in float64, from their two-hop neighbourhoods."""
    x, w1, w2 = graph.features, w1.T.astype(np.float64), w2.T.astype(np.float64)

    def hidden_at(ids):
        return np.maximum(propagate_rows(graph, ids, lambda j: x[j].astype(np.float64) @ w1), 0)

    return propagate_rows(graph, rows, lambda ids: hidden_at(ids) @ w2)


def sample_rows(nodes: int, count: int = 32, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).choice(nodes, min(count, nodes), replace=False)


def rows_checked(out: np.ndarray, ref: np.ndarray, tolerance: float) -> dict:
    """The relative error of a GCN's output at sampled rows; CheckFailed past ``tolerance``."""
    from harness.measure.outcomes import CheckFailed
    err = float(np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref))
    if not err <= tolerance:  # also catches NaN
        raise CheckFailed(f"GCN output at {len(ref)} sampled nodes is off the float64 reference by {err:.3g} "
                          f"(tolerance {tolerance:g})")
    return {"rel_err": err, "tolerance": tolerance}
