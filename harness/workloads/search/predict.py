"""What fits, predicted from a few probes: each peak (allocated, reserved, the device's) as a law
of the size a search grows, fitted by least squares, and the largest size whose peak stays under
a budget's bytes. Pure functions over probe results (``fits_probe.probe``'s dicts): no torch.

Why these laws: at one shape a training step's tensors scale with the batch (activations, their
gradients, the logits), while the model's states do not, so a peak is linear in the batch. Along
one sequence, attention that materialises its scores grows with the square of the length and the
rest linearly: the probes decide. Two sizes give a line; a third that falls off it by more than
``LINEAR_MISS`` (reserved bytes move in allocator segments, a few MB to tens of MB) asks for the
square. The cap binds what the allocator reserves (``BINDS``), so the largest size is read there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from numpy.polynomial import polynomial

KINDS = ("peak_allocated", "peak_reserved", "peak_device")
BINDS = "peak_reserved"  # what the allocator's cap holds: a request past it raises out of memory
# How far (relative) the third probe may fall from the line through the others before the square
# law replaces the line along a sequence.
LINEAR_MISS = 0.01
# Along which axis a square term may enter: a batch's samples are independent of one another.
DEGREES = {"batch": (1,), "seq_len": (1, 2)}


class Refused(ValueError):
    """The probes cannot carry a prediction; the message names what to probe."""


@dataclass(frozen=True)
class Fit:
    over: str  # the axis: "batch" or "seq_len"
    degree: int  # 1: linear, 2: quadratic
    sizes: tuple  # the sizes it was fitted on
    laws: dict  # kind -> polynomial coefficients, lowest power first (numpy.polynomial's order)

    def peak(self, n: float, kind: str = BINDS) -> float:
        """The peak of ``kind`` at size ``n`` on its law (bytes)."""
        return float(polynomial.polyval(n, self.laws[kind]))

    def largest(self, cap: int, unit: int = 1, limit: int | None = None, kind: str = BINDS) -> int:
        """The largest multiple of ``unit`` whose ``kind`` peak stays at most ``cap`` (at most
        ``limit``); 0 where even ``unit`` does not. Peaks are whole bytes: a law within half a
        byte of the cap is at it."""
        under = self._under(cap, kind)
        roots = polynomial.polyroots(np.asarray(self.laws[kind], dtype=float) - np.eye(1, self.degree + 1)[0] * cap)
        real = [r.real for r in np.atleast_1d(roots) if abs(r.imag) < 1e-9 * max(1.0, abs(r.real))]
        n = math.floor(max(real, default=0.0) / unit) * unit
        if limit is not None:
            n = min(n, limit // unit * unit)
        while n > 0 and not under(n):  # the float root may land a step off the whole-byte answer
            n -= unit
        while (limit is None or n + unit <= limit) and under(n + unit):
            n += unit
        return max(n, 0)

    def _under(self, cap: int, kind: str):
        return lambda n: self.peak(n, kind) <= cap + 0.5

    def to_dict(self, cap: int, unit: int = 1, limit: int | None = None) -> dict:
        """What a record keeps beside its answer: the predicted largest size under ``cap``, its
        peaks there, the law and the sizes it came from."""
        n = self.largest(cap, unit, limit)
        return {"largest": n, "law": "quadratic" if self.degree == 2 else "linear", "from_sizes": list(self.sizes),
                **{kind: round(self.peak(n, kind)) for kind in self.laws}}


def points(results: Sequence[Mapping]) -> dict:
    """Size -> {kind: bytes} of the probes that fit and report peaks; a size probed twice (two
    budgets) keeps each kind's highest."""
    got: dict = {}
    for r in results:
        if not r.get("fits") or not r.get(BINDS):
            continue
        peaks = got.setdefault(int(r["n"]), {})
        for kind in KINDS:
            if r.get(kind) is not None:
                peaks[kind] = max(int(r[kind]), peaks.get(kind, 0))
    return got


def fit(results: Sequence[Mapping], over: str) -> Fit:
    """The laws of each peak over ``over`` from probe ``results``; ``Refused`` (one line naming
    the fix) with fewer than two sizes that fit, or peaks that do not grow with the size."""
    if over not in DEGREES:
        raise Refused(f"over {over!r} is not one of {', '.join(DEGREES)}: predict along one of them")
    seen = points(results)
    if len(seen) < 2:
        raise Refused(f"a prediction needs probes that fit at two sizes at least, got {len(seen)}: probe another size")
    sizes = sorted(seen)
    ys = [seen[n][BINDS] for n in sizes]
    drop = _drop(ys)
    if drop is not None:
        raise Refused(f"{BINDS} does not grow with {over}: {ys[drop - 1]:,} at {sizes[drop - 1]:,} but "
                      f"{ys[drop]:,} at {sizes[drop]:,}; probe sizes further apart")
    # The other peaks get a law where they grow too; the size is read off the cap's alone.
    kinds = [k for k in KINDS if all(k in seen[n] for n in sizes) and _drop([seen[n][k] for n in sizes]) is None]
    if ys[-1] <= ys[0]:
        raise Refused(f"{BINDS} is flat from {sizes[0]:,} to {sizes[-1]:,}: probe sizes further apart")
    degree = _degree(sizes, [seen[n][BINDS] for n in sizes], over)
    laws = {k: tuple(polynomial.polyfit(sizes, [seen[n][k] for n in sizes], degree)) for k in kinds}
    return Fit(over=over, degree=degree, sizes=tuple(sizes), laws=laws)


def _drop(ys: list):
    """The first index where ``ys`` falls; None where it never does."""
    return next((i for i in range(1, len(ys)) if ys[i] < ys[i - 1]), None)


def _degree(sizes: list, peaks: list, over: str) -> int:
    """1 unless ``over`` allows the square, three sizes or more are known, the line misses one
    of them by more than ``LINEAR_MISS`` and the square curves upwards (memory that grows ever
    slower per token is not attention's)."""
    if 2 not in DEGREES[over] or len(sizes) < 3:
        return 1
    line = polynomial.polyfit(sizes, peaks, 1)
    miss = max(abs(polynomial.polyval(n, line) - p) / p for n, p in zip(sizes, peaks))
    square = polynomial.polyfit(sizes, peaks, 2)
    return 2 if miss > LINEAR_MISS and square[2] > 0 else 1


def cards(law: Fit, limits: Mapping[str, int], unit: int = 1, limit: int | None = None) -> dict:
    """Budget name -> the largest size predicted under its allocator bytes (``limits``: a budget's
    ``limit_bytes`` as ``harness.measure.guards.budget.resolve`` gives it; a named card's is its
    total less the context charged to it)."""
    return {name: law.largest(cap, unit, limit) for name, cap in limits.items()}


def budgets(law: Fit, card_total: int, context: int | None = None, unit: int = 1, limit: int | None = None) -> dict:
    """Budget name -> the largest size predicted under it, for every budget no larger than a card
    of ``card_total`` bytes, each resolved as a case resolves it (``budget.resolve``): a cap's bytes,
    the whole card, and a named card's total less ``context`` (what a process holds outside the
    allocator's pool, charged to it), named cards only where ``context`` is known."""
    from harness.measure.guards.budget import CARD_BUDGETS, CARDS, Overhead, resolve, size_bytes
    limits = {}
    for name in CARD_BUDGETS:
        if size_bytes(name, card_total) > card_total or (name in CARDS and context is None):
            continue
        overhead = Overhead(context, "the probes' NVML figure less torch's reserve") if name in CARDS else None
        limits[name] = resolve(name, card_total, "torch", overhead).limit_bytes
    return cards(law, limits, unit, limit)
