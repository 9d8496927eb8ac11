"""Workloads that fragment, as real training does: every step its own shape at a fixed amount of
work, and the same workloads at one fixed shape to compare with.

A shape distribution is named in the parameters (``SHAPES``): ``uniformA-B`` draws each step's
size uniformly from A to B (sequence lengths by the token; image sides by ``IMAGE_STRIDE``, the
factor ResNet50 downsamples by), ``pow2_A-B`` uniformly from the powers of two A, 2A, ... B (the
few lengths of bucketed batching, each dividing the token budget), ``fixedN`` is N every step.
Draws come from a generator seeded once per case, so every setting of the allocator meets the same
sizes in the same order.

A step holds as much work as ``batch`` samples at ``REFERENCE``: the LM trains
``batch x REFERENCE`` tokens a step (16 x 1024 = 16,384, the issue's budget) as ``tokens // L``
sequences of the step's length L, which is how length-bucketed batching under a token budget
feeds a model; ResNet50 trains ``batch x REFERENCE**2`` pixels a step (seed 003's 10 images of
1024 x 1024) as ``pixels // S**2`` images of the step's side S. The data are views of one stream
kept on the device (tokens, or pixels and labels), so the only allocations that change from step
to step are the model's own: activations, logits and their gradients.

The LM's tokens are one stream cut at each step's length: the model meets the same pairs of
neighbouring tokens every step, so its loss falls as it learns them, whatever the cut. ResNet50's
labels are the first rows of one set, so it learns them however its images change.

``AttentionStack`` is the same kind of step for CuPy (its pools are what is measured): ``depth``
layers of softmax attention over a step of ``tokens // L`` sequences of length L, each layer's
scores (L x L a sequence) and output kept to the end of the step, as autograd keeps what
backward needs. Array-generic: NumPy runs it on the CPU.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

REFERENCE = 1024
IMAGE_STRIDE = 32
SHAPES = ("uniform128-4096", "pow2_128-4096", "uniform224-1024", "fixed1024", "uniform16-64", "pow2_16-64", "fixed32")
WORKLOADS = ("lm", "resnet50")
SEED = 0
_NAME = re.compile(r"(?:(uniform|pow2_)(\d+)-(\d+)|fixed(\d+))")


@dataclass(frozen=True)
class Shapes:
    name: str
    low: int
    high: int
    doubling: bool = False  # the powers of two from low to high, not every size between

    @property
    def fixed(self) -> bool:
        return self.low == self.high

    def choices(self, stride: int = 1):
        if self.doubling:
            return [self.low << i for i in range((self.high // self.low).bit_length())]
        return range(self.low, self.high + 1, stride)


def shapes_of(name: str) -> Shapes:
    """The distribution ``name`` stands for; ValueError naming the form for anything else."""
    m = _NAME.fullmatch(str(name))
    if m is None:
        raise _unknown(name)
    low, high = (int(m[4]),) * 2 if m[4] else (int(m[2]), int(m[3]))
    doubling = m[1] == "pow2_"
    ratio = high // low if 0 < low <= high else 0
    if not ratio or (doubling and (high % low or ratio & (ratio - 1))):
        raise _unknown(name)
    return Shapes(str(name), low, high, doubling)


def _unknown(name) -> ValueError:
    return ValueError(f"shape distribution {name!r} is not uniformA-B (0 < A <= B), pow2_A-B (B = A times a "
                      f"power of two) or fixedN: name one, e.g. {SHAPES[0]} or {SHAPES[1]}")


class Sizes:
    """The size of each step, drawn once from ``shapes`` with a generator seeded by ``seed``:
    ``shapes``' choices (for a uniform draw, the multiples of ``stride`` from ``low`` up to ``high``)."""

    def __init__(self, shapes: Shapes, seed: int = SEED, stride: int = 1):
        self.choices = shapes.choices(stride)
        self.rng, self.drawn = random.Random(seed), []

    def __getitem__(self, step: int) -> int:
        while len(self.drawn) <= step:
            self.drawn.append(self.rng.choice(self.choices))
        return self.drawn[step]


def rows(budget: int, size: int, per_row) -> int:
    """Samples of ``size`` a step of ``budget`` holds (``per_row(size)`` each); ValueError where
    not even one does."""
    n = budget // per_row(size)
    if n < 1:
        raise ValueError(f"a step of {budget} holds no sample of size {size}: raise the batch or lower the sizes")
    return n


def sequences(tokens: int, length: int) -> int:
    return rows(tokens, length, lambda n: n)


def images(pixels: int, side: int) -> int:
    return rows(pixels, side, lambda n: n * n)


class VaryingSteps:
    """``step()`` feeds the trainer the batch of the next size and trains it: ``batch_of(size)``
    -> a micro-batch ``((inputs...), targets)``."""

    def __init__(self, trainer, sizes: Sizes, batch_of):
        self.trainer, self.sizes, self.batch_of, self.done = trainer, sizes, batch_of, 0

    def __call__(self):
        self.trainer.feed([self.batch_of(self.sizes[self.done])])
        self.done += 1
        self.trainer.step()


def lm_trainer(device: str, shapes: Shapes, batch: int, vocab: int, width: int, depth: int, prec,
               keep_references: bool = False, draws: int = SEED):
    """(step, trainer, tokens a step at most): the LM over ``shapes``' lengths, drawn with seed
    ``draws`` (the model and its data keep theirs), in the everyday loop where ``keep_references``
    (``Trainer``'s)."""
    import torch
    from harness.workloads.training.models import LMConfig, transformer_lm
    from harness.workloads.training.trainer import Trainer, learning_rate, token_loss_sum
    from harness.workloads.training.tricks import heads
    tokens = batch * REFERENCE
    sequences(tokens, shapes.high)  # even the longest fits one sequence a step
    model = transformer_lm(LMConfig(vocab=vocab, width=width, depth=depth, heads=heads(width),
                                    seq_len=shapes.high), seed=SEED).to(device)
    gen = torch.Generator().manual_seed(SEED)
    stream = torch.randint(1, vocab, (tokens + 1,), generator=gen).to(device)

    def batch_of(length):
        n = sequences(tokens, length) * length
        return (stream[:n].view(-1, length),), stream[1:n + 1].view(-1, length)

    sizes = Sizes(shapes, draws)
    trainer = Trainer(model, [batch_of(sizes[0])], token_loss_sum, prec, torch.device(device).type,
                      lr=learning_rate(width), keep_references=keep_references)
    return VaryingSteps(trainer, sizes, batch_of), trainer, tokens


def resnet_trainer(device: str, shapes: Shapes, batch: int, prec, classes: int = 1000, keep_references: bool = False,
                   draws: int = SEED):
    """(step, trainer, pixels a step): ResNet50 over ``shapes``' image sides (the draws and the
    everyday loop as ``lm_trainer``'s)."""
    import torch
    from harness.workloads.training.models import resnet50
    from harness.workloads.training.trainer import LR, Trainer, image_loss_sum
    pixels = batch * REFERENCE ** 2
    most = images(pixels, shapes.low)
    model = resnet50(classes, seed=SEED).to(device)
    gen = torch.Generator().manual_seed(SEED)
    stream = torch.randn(3 * pixels, generator=gen).to(device)
    labels = torch.zeros(most, classes).scatter_(1, torch.randint(0, classes, (most, 1), generator=gen), 1.0)
    labels = labels.to(device)

    def batch_of(side):
        n = images(pixels, side)
        return (stream[:n * 3 * side * side].view(n, 3, side, side),), labels[:n]

    sizes = Sizes(shapes, draws, IMAGE_STRIDE)
    trainer = Trainer(model, [batch_of(sizes[0])], image_loss_sum, prec, torch.device(device).type, lr=LR,
                      keep_references=keep_references)
    return VaryingSteps(trainer, sizes, batch_of), trainer, pixels


def attention_layers(xp, x, depth: int) -> list:
    """``depth`` layers of softmax(h h^T / sqrt(width)) h over ``x`` (sequences, length, width),
    every layer's scores and output kept: [scores, output, scores, output, ...]."""
    kept, h = [], x
    for _ in range(depth):
        scores = h @ h.transpose(0, 2, 1)
        scores *= h.shape[-1] ** -0.5
        scores -= scores.max(axis=-1, keepdims=True)
        xp.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        h = scores @ h
        kept += [scores, h]
    return kept


def live_bytes(tokens: int, length: int, width: int, depth: int, itemsize: int = 4) -> int:
    """What a step of ``AttentionStack`` at ``length`` holds live at its end: every layer's scores
    (``tokens // length`` sequences of length x length) and output (length x width each)."""
    n = sequences(tokens, length)
    return depth * n * (length * length + length * width) * itemsize


class AttentionStack:
    """A step of ``attention_layers`` on ``tokens // L`` sequences of the next length L, cut from
    one stream of ``tokens`` x ``width`` values; the last step's first sequence and its output are
    kept for the check, and ``pool``'s used and held bytes at each step's end (None: not read)."""

    def __init__(self, xp, shapes: Shapes, tokens: int, width: int, depth: int, pool=None):
        sequences(tokens, shapes.high)
        self.xp, self.width, self.depth, self.tokens, self.pool = xp, width, depth, tokens, pool
        self.sizes, self.done, self.last = Sizes(shapes, SEED), 0, None
        self.stream = xp.random.default_rng(SEED).standard_normal(tokens * width, dtype=xp.float32)
        self.highs = []  # (used, held) bytes of the pool at each step's end, where its live set peaks

    def __call__(self):
        length = self.sizes[self.done]
        self.done += 1
        n = sequences(self.tokens, length)
        x = self.stream[:n * length * self.width].reshape(n, length, self.width)
        kept = attention_layers(self.xp, x, self.depth)
        self.last = (x[0], kept[-1][0])
        if self.pool is not None:  # everything the step made is alive here: its high point
            self.highs.append((self.pool.used_bytes(), self.pool.total_bytes()))

    def check(self, numpy, rtol: float = 1e-3) -> dict:
        """The last step's first sequence again on the host (NumPy, in float64): its output must
        match the device's within ``rtol`` of its largest value."""
        if self.last is None:
            raise ValueError("no step ran: run the workload before checking it")
        x, got = (numpy.asarray(a.get() if hasattr(a, "get") else a, dtype=numpy.float64) for a in self.last)
        want = attention_layers(numpy, x[None], self.depth)[-1][0]
        err = float(numpy.abs(got - want).max() / max(numpy.abs(want).max(), 1e-30))
        return {"rel_err": err, "tolerance": rtol, "length": int(x.shape[0]), "ok": bool(err <= rtol)}
