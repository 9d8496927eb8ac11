"""The Chainer workloads: a two-layer GCN (Kipf & Welling), an MLP and a small CNN, each trained
with Adam on data it can learn, and the training step the harness times.

Imported only once ``harness.workloads.chainer.compat_chainer`` has imported Chainer. Every weight and input is
made on the host by NumPy from a seed and sent to the device, so the CPU and GPU runs (and the
PyTorch GCN) start from the same numbers.
"""
from __future__ import annotations

import numpy as np

from harness.workloads.chainer.compat_chainer import import_chainer
from harness.measure.outcomes import learned

chainer, _ = import_chainer()
F = chainer.functions
L = chainer.links

LR = 0.01
# The check asks the last step's loss to be below this fraction of the first's. The first is
# taken before any update, so a model that does not learn (or a step that updates nothing)
# fails it.
LOSS_DROP = 0.95


def mlp_lr(sizes) -> float:
    """Adam moves every weight by about lr a step, so a layer's output by about lr x fan-in: the
    rate falls with the width (as muP sets it for Adam), so that a wide MLP's loss falls from the
    first step at every batch, as the loss check (``LOSS_DROP``) demands, instead of first rising."""
    return min(LR, 0.6 / max(sizes[:-1]))


def he(rng, shape, fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


# ---- the GCN (weights from harness.workloads.chainer.graphs.gcn_weights, shared with the PyTorch GCN) ----------

class GCN(chainer.Chain):
    """Z = A_hat relu(A_hat X W1) W2, no bias: Kipf & Welling's two layers. X W is taken before
    the sparse product, which then runs at the narrower width."""

    def __init__(self, w1: np.ndarray, w2: np.ndarray):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(w1.shape[1], w1.shape[0], nobias=True, initialW=w1)
            self.l2 = L.Linear(w2.shape[1], w2.shape[0], nobias=True, initialW=w2)

    def forward(self, adj, x):
        h = F.relu(F.sparse_matmul(adj, self.l1(x)))
        return F.sparse_matmul(adj, self.l2(h))


def coo_on(device, graph):
    """A_hat as a Chainer COO matrix on ``device``; rows are sorted, so order "C"."""
    send = device.send
    return chainer.utils.CooMatrix(send(graph.value), send(graph.row), send(graph.col),
                                   (graph.nodes, graph.nodes), order="C")


# ---- MLP and CNN -----------------------------------------------------------------------------

class MLP(chainer.Chain):
    def __init__(self, sizes, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        with self.init_scope():
            self.layers = chainer.ChainList(*[L.Linear(i, o, initialW=he(rng, (o, i), i), initial_bias=0)
                                              for i, o in zip(sizes[:-1], sizes[1:])])

    def forward(self, x):
        *hidden, last = self.layers
        for layer in hidden:
            x = F.relu(layer(x))
        return last(x)


class CNN(chainer.Chain):
    """conv3x3(32) relu pool2, conv3x3(64) relu pool2, linear: a CIFAR-sized small net."""

    def __init__(self, channels: int, side: int, classes: int, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        flat = 64 * (side // 4) ** 2
        with self.init_scope():
            self.c1 = L.Convolution2D(channels, 32, 3, pad=1, initialW=he(rng, (32, channels, 3, 3), channels * 9),
                                      initial_bias=0)
            self.c2 = L.Convolution2D(32, 64, 3, pad=1, initialW=he(rng, (64, 32, 3, 3), 32 * 9), initial_bias=0)
            self.fc = L.Linear(flat, classes, initialW=he(rng, (classes, flat), flat), initial_bias=0)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.c1(x)), 2)
        h = F.max_pooling_2d(F.relu(self.c2(h)), 2)
        return self.fc(h)


def teacher_batch(batch: int, features: int, classes: int, seed: int = 0):
    """Inputs and the labels a fixed random linear teacher gives them: learnable by an MLP."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, features), dtype=np.float32)
    teacher = rng.standard_normal((features, classes)).astype(np.float32)
    return x, np.argmax(x @ teacher, axis=1).astype(np.int32)


def template_images(batch: int, channels: int, side: int, classes: int, seed: int = 0):
    """Each image is its class's fixed random template plus as much noise again."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, batch).astype(np.int32)
    templates = rng.standard_normal((classes, channels, side, side), dtype=np.float32)
    x = rng.standard_normal((batch, channels, side, side), dtype=np.float32)
    x += templates[labels]
    return x, labels


# ---- training --------------------------------------------------------------------------------

class Trainer:
    """One step: forward, loss, backward, Adam update. Each step's loss stays on the device
    (reading it would add a synchronisation to the step) until ``check`` reads them all."""

    def __init__(self, model, loss_fn, lr: float = LR):
        self.model, self.loss_fn = model, loss_fn
        self.optimizer = chainer.optimizers.Adam(alpha=lr)
        self.optimizer.setup(model)
        self.losses = []

    def step(self) -> None:
        loss = self.loss_fn()
        self.model.cleargrads()
        loss.backward()
        self.optimizer.update()
        self.losses.append(loss.array)

    def check(self) -> dict:
        return learned(self.losses, LOSS_DROP)


def classifier_workload(backend, model, x, t, nbytes: int, warmup: int, repeat: int, lr: float = LR):
    """The Workload of a classifier trained on one fixed batch (x, t), wherever ``backend`` runs it;
    a guard refusal inside a step is a does-not-fit of ``nbytes``."""
    from harness.measure.workload import Workload
    from harness.workloads.chainer.chainer_backend import guard_refusal_does_not_fit
    model.to_device(backend.device)
    x, t = backend.device.send(x), backend.device.send(t)
    trainer = Trainer(model, lambda: F.softmax_cross_entropy(model(x), t), lr=lr)
    return Workload(step=guard_refusal_does_not_fit(nbytes)(trainer.step), sync=backend.sync, gpus=backend.gpus,
                    check=lambda: dict(trainer.check(), shims=backend.shims, **backend.notes), work={"samples": len(t)},
                    warmup=warmup, repeat=repeat)
