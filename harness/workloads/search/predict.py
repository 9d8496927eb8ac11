"""What fits, predicted from a few probes: each peak (allocated, reserved, the device's) as a law
of the size a search grows, fitted by least squares, and the largest size whose peak stays under
a budget's bytes. Pure functions over probe results (``fits_probe.probe``'s dicts): no torch.

Why these laws: at one shape a training step's tensors scale with the batch (activations, their
gradients, the logits), while the model's states do not, so a peak is linear in the batch. Along
one sequence, attention that materialises its scores grows with the square of the length and the
rest linearly: the probes decide. Two sizes give a line; a third that falls off it by more than
``LINEAR_MISS`` (reserved bytes move in allocator segments, a few MB to tens of MB) asks for the
square. The cap binds what the allocator reserves (``BINDS``), so the largest size is read there,
against what the allocator can reach (``reachable``): the cap, or on the whole card the device's
total as torch sees it less the context the process holds beside the pool; and never past a size
the host's memory could not hold (``host_short``), which no device cap moves.

How the reserve is read: what the allocator reserves is the tensors' bytes (the allocated peak,
a law of the step) and an overhead, the blocks it strands beside them. The overhead moves with
the size in two ways: it grows with the step's tensors while the allocator packs them one way, and
it falls (to a fraction, in one size) where a freed block comes to be taken whole instead of split:
another packing (``regime``). The law is read within the packing of the largest size under the
cap, from the sizes nearest it (``near``); where that size alone shows its packing, from the
allocated law and its overhead in proportion (``_repacked``). The tensors alone bound the answer
from above (``Prediction.bound``), whatever the packing. Where the allocated peak is flat over the
smallest sizes (the model's states set it, the step's tensors hide under them) and one size past
it shows the step's growth, no law is read (``_past_plateau``).

What it cannot see: a change of packing between the probes and the answer (the overhead at the
answer is a few percent to tens of percent of the peak, and which packing the allocator finds
there, no smaller size says), a phase of the step that comes to set the peak only at larger sizes
(attention's square along a long sequence), and the rounding of the reserve to segments, which a
line through sizes a step apart carries to the cap: a law read far from the cap lands some sizes
off, most along one sequence, whose search steps are a small share of the size.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from numpy.polynomial import polynomial

from harness.units import gb

KINDS = ("peak_allocated", "peak_reserved", "peak_device")
BINDS = "peak_reserved"  # what the allocator's cap holds: a request past it raises out of memory
# How far (relative) the third probe may fall from the line through the others before the square
# law replaces the line along a sequence.
LINEAR_MISS = 0.01
# The largest segment the caching allocator reserves for a mid-sized request (its "large" pool's
# unit): a reserve that moves by this much or less has not shown how the step grows.
SEGMENT = 20 * 2**20
# What the caching allocator rounds a large request's segment up to: each reserve a law goes through
# may lie up to this far over the tensors' exact bytes, from rounding alone.
ROUND = 2 * 2**20
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
    # Per probe the reserve's law went through, how the law moves per byte that probe's reserve is
    # off by (coefficients as ``laws``'): what the allocator's rounding (``ROUND``) can do to it.
    rounding: tuple = ()

    def peak(self, n: float, kind: str = BINDS) -> float:
        """The peak of ``kind`` at size ``n`` on its law (bytes)."""
        return float(polynomial.polyval(n, self.laws[kind]))

    def band(self, n: float) -> float:
        """How far the reserve's law at ``n`` can lie from the one its probes' exact bytes would
        give, where each reserve it went through is up to ``ROUND`` off (bytes): the rounding
        alone, no change of packing."""
        return ROUND * sum(abs(float(polynomial.polyval(n, b))) for b in self.rounding)

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
    # A rise of one allocator segment or less is the reserve's jitter, no slope: where the
    # optimizer's plateau hides the activations, such a line would put the answer thousands of
    # sizes past any that was probed.
    if ys[-1] - ys[0] <= SEGMENT:
        raise Refused(f"{BINDS} is flat from {sizes[0]:,} to {sizes[-1]:,} (within one allocator segment, "
                      f"{gb(SEGMENT)}): probe sizes further apart")
    # Attention's square shows in the tensors themselves: the shape of the law (its degree, and
    # which sizes lie on it) is read off the allocated bytes where every size has them, since the
    # reserve moves in the allocator's jumps, no law.
    sizes = _past_plateau(seen, over)
    shape = "peak_allocated" if "peak_allocated" in kinds else BINDS
    sizes, degree = _on_law(sizes, [seen[n][shape] for n in sizes], over)
    laws = {k: tuple(polynomial.polyfit(sizes, [seen[n][k] for n in sizes], degree)) for k in kinds}
    # Least squares is linear in the bytes: a probe's error moves the law by its error times the
    # fit of a unit at that probe alone.
    rounding = tuple(tuple(polynomial.polyfit(sizes, np.eye(len(sizes))[i], degree)) for i in range(len(sizes)))
    return Fit(over=over, degree=degree, sizes=tuple(sizes), laws=laws, rounding=rounding)


def _past_plateau(seen: Mapping, over: str) -> list:
    """The sizes of ``seen`` past the optimizer's plateau, all of them where there is none: where
    the allocated peak stays within one ``SEGMENT`` of the smallest size's, the model's states set
    it whatever the size (the step's tensors hide under them), and those sizes say nothing of how
    the step grows. ``Refused`` where fewer than two sizes are left past it: one draws no line."""
    sizes = sorted(seen)
    if not all("peak_allocated" in seen[n] for n in sizes):
        return sizes
    flat = [n for n in sizes if seen[n]["peak_allocated"] - seen[sizes[0]]["peak_allocated"] <= SEGMENT]
    past = [n for n in sizes if n > max(flat)]
    if len(flat) > 1 and len(past) < 2:
        raise Refused(f"peak_allocated is flat from {flat[0]:,} to {flat[-1]:,} (the model's states set it): "
                      f"{len(past) or 'no'} size past it shows how the step grows; probe a larger {over}")
    return sizes if len(flat) == 1 else past


def _on_law(sizes: list, peaks: list, over: str) -> tuple[list, int]:
    """(the sizes the law runs through, its degree). A step's peak is the highest of its phases':
    the optimizer's (the model's states, whatever the size) and the backward's (the activations,
    growing with it); at the smallest sizes the first can set it, a plateau under which the
    backward's law runs. Every coefficient of a memory law is at least zero (no size frees what a
    smaller one holds): a smallest probe that asks for a negative one, or lies over the line the two
    above it draw by more than ``LINEAR_MISS`` (less is the reserve's jitter), lies on the plateau,
    and leaves the fit."""
    while len(sizes) >= 3:
        degree = _degree(sizes, peaks, over)
        if degree == 2 and min(polynomial.polyfit(sizes, peaks, 2)) >= 0:
            return sizes, 2
        above = polynomial.polyfit(sizes[1:], peaks[1:], 1)
        if peaks[0] <= polynomial.polyval(sizes[0], above) * (1 + LINEAR_MISS):  # on the line over it, or under
            return sizes, 1
        sizes, peaks = sizes[1:], peaks[1:]
    return sizes, 1


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


# How many probed sizes a prediction is fitted on: a line's two and the third that may ask for a square.
NEAREST = 3


def near(results: Sequence[Mapping], cap: int, over: str, strict: bool = False) -> Fit | None:
    """The law from the probe ``results`` at the sizes nearest the largest one whose reserve is
    under ``cap`` (``NEAREST``), among those that share its allocator packing (``regime``), past
    the optimizer's plateau (``_past_plateau``): read where the answer is, not where the model's
    states alone fill the card, nor across a change of packing. Where that size alone shows its
    packing, the allocated law with its overhead (``_repacked``). None where the probes cannot
    carry one yet (``strict``: ``Refused``, saying why)."""
    seen = points(results)
    try:
        if not seen:
            raise Refused("a prediction needs probes that fit at two sizes at least, got 0: probe another size")
        seen = {n: seen[n] for n in _past_plateau(seen, over)}
        # The largest size under the cap is where the answer's packing was last seen: the
        # highest reserve under it may be a lone spike of the allocator's, which no law continues.
        anchor = max((n for n in seen if seen[n][BINDS] <= cap), default=min(seen))
        run = regime(seen, anchor)
        if len(run) >= 2:
            nearest = sorted(run, key=lambda n: abs(n - anchor))[:NEAREST]
            return fit([dict(seen[n], n=n, fits=True) for n in nearest], over)
        return _repacked(seen, anchor, over)
    except Refused:
        if strict:
            raise
        return None


def _repacked(seen: Mapping, anchor: int, over: str) -> Fit:
    """The law where ``anchor`` alone shows the allocator's packing (``regime``): the allocated law,
    which no packing moves, read from the sizes nearest it, and the reserve's overhead at ``anchor``
    growing in proportion to the size (what the allocator strands is blocks of the step's own
    tensors, which grow with it)."""
    if overhead(seen[anchor]) is None:
        raise Refused(f"the probe at {anchor:,} reports no peak_allocated: the reserve's law needs it there")
    nearest = sorted((n for n in seen if overhead(seen[n]) is not None), key=lambda n: abs(n - anchor))[:NEAREST]
    law = fit([dict(seen[n], n=n, fits=True, peak_reserved=seen[n]["peak_allocated"]) for n in nearest], over)
    allocated = np.asarray(law.laws["peak_allocated"], dtype=float)
    reserved = allocated + np.eye(1, law.degree + 1, 1)[0] * overhead(seen[anchor]) / anchor
    laws = {k: v for k, v in law.laws.items() if k != "peak_device"}
    # The allocated bytes are exact; the overhead is read off ``anchor``'s reserve alone.
    per_byte = tuple(np.eye(1, law.degree + 1, 1)[0] / anchor)
    return Fit(over=over, degree=law.degree, sizes=law.sizes, laws={**laws, BINDS: tuple(reserved)},
               rounding=(per_byte,))


def overhead(peaks: Mapping) -> int | None:
    """What the allocator reserves beyond what the tensors hold at the peak (bytes), None where
    the probe did not report its allocated peak."""
    return None if "peak_allocated" not in peaks else peaks[BINDS] - peaks["peak_allocated"]


def regime(seen: Mapping, anchor: int) -> list:
    """The probed sizes that share ``anchor``'s packing: the run of sizes around it with no fall of
    the reserve's overhead (``overhead``) to less than half, and by more than one allocator
    ``SEGMENT``, between neighbours. Such a fall is the caching allocator finding another packing
    (a freed block now taken whole where it was split): the sizes either side lie on two laws that
    no one line joins. Smaller moves are the overhead's jitter from one size to the next."""
    sizes = sorted(seen)
    i = j = sizes.index(anchor)
    while i > 0 and not _falls(seen[sizes[i - 1]], seen[sizes[i]]):
        i -= 1
    while j + 1 < len(sizes) and not _falls(seen[sizes[j]], seen[sizes[j + 1]]):
        j += 1
    return sizes[i:j + 1]


def _falls(below: Mapping, above: Mapping) -> bool:
    low, high = overhead(below), overhead(above)
    return low is not None and high is not None and high < low / 2 - SEGMENT


def reachable(cap: int, results: Sequence[Mapping]) -> int:
    """The bytes the allocator can reserve under ``cap``: the cap, and where the probes say the
    device's total as torch sees it (``device_total``) and what the process holds outside the pool
    (``context_bytes``), at most the one less the other. The whole card's budget is NVML's total,
    but the driver keeps part of it from CUDA and the context sits in the rest, so there the device
    binds before the cap does."""
    totals = [int(r["device_total"]) for r in results if r.get("device_total")]
    contexts = [int(r["context_bytes"]) for r in results if r.get("context_bytes")]
    return min(cap, min(totals) - max(contexts)) if totals and contexts else cap


def host_short(results: Sequence[Mapping]) -> int | None:
    """The smallest size the host's memory could not hold (killed, or stopped by a way out's guard
    of host memory), which fits under no device cap; None where none was seen."""
    short = [int(r["n"]) for r in results if r.get("fits") is False
             and (r.get("killed") or r.get("short_of") == "host")]
    return min(short, default=None)


@dataclass(frozen=True)
class Prediction:
    law: Fit  # the law read near what the allocator can reach
    reach: int  # the bytes the allocator can reserve under the cap (``reachable``)
    largest: int  # the largest size on the law within ``reach``, below any the host could not hold
    # The largest size whose allocated peak alone stays within ``reach``: none past it fits, whatever
    # the allocator's packing (it reserves at least what the tensors hold). None without allocated peaks.
    bound: int | None = None
    # The largest sizes the law gives where each probe's reserve it went through is ``ROUND`` over
    # what the law read, and under (``Fit.band``): answers the probes cannot tell apart.
    among: tuple = ()


def prediction(results: Sequence[Mapping], cap: int, over: str, unit: int = 1, limit: int | None = None,
               here: Sequence[Mapping] | None = None, strict: bool = False) -> Prediction | None:
    """The prediction under ``cap`` from the probe ``results``: the law ``near`` what the allocator
    can reach (``reachable``) and the largest size on it, below any size the host could not hold
    and any whose tensors alone pass the reach (``Prediction.bound``), with the sizes the allocator's
    rounding alone leaves it among (``Prediction.among``); None until the probes carry a law.
    ``strict`` (an answer said to a reader: the error table, ``harness try``): ``Refused``, saying
    why, where they carry none, and where the rounding alone leaves the answer more than a step
    either way; a search's aim (not strict) takes the law's size all the same, since only its
    probes decide the answer. The device and the host are read off ``here`` (this machine's probes;
    by default ``results``): another card's total or host says nothing of them."""
    here = results if here is None else here
    reach = reachable(cap, here)
    law = near(results, reach, over, strict)
    if law is None:
        return None
    host = host_short(here)
    if host is not None:
        limit = host - 1 if limit is None else min(limit, host - 1)
    bound = law.largest(reach, unit, limit, kind="peak_allocated") if _rises(law, "peak_allocated") else None
    # A reserve's line flatter than the tensors' (read across a packing that strands less as the
    # size grows) would put the answer past what the tensors alone can hold.
    top = min(x for x in (limit, bound, UNBOUNDED) if x is not None)
    largest = min(law.largest(reach, unit, limit), top)
    among = tuple(last_multiple(lambda n, side=side: law.peak(n) + side * law.band(n) <= reach + 0.5, unit, top)
                  for side in (1, -1))
    made = Prediction(law, reach, largest, bound, among)
    if strict and max(largest - among[0], among[1] - largest) > unit:
        raise Refused(f"the allocator's rounding of the probes' reserves (up to {gb(ROUND)} each) leaves the "
                      f"answer anywhere from {among[0]:,} to {among[1]:,}, more than a step from {largest:,}: "
                      f"probe sizes nearer the cap or further apart")
    return made


# Where no limit is given, the search for a largest size stops here.
UNBOUNDED = 2**40


def last_multiple(under, unit: int, top: int) -> int:
    """The largest multiple of ``unit`` up to ``top`` for which ``under`` holds, where it holds up
    to a size and not past it; 0 where it does not hold at ``unit``."""
    if not under(unit):
        return 0
    low, high = 1, 2
    while high * unit <= top and under(high * unit):
        low, high = high, 2 * high
    high = min(high, top // unit + 1)  # the first multiple known to fail, or past ``top``
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if under(mid * unit) else (low, mid)
    return low * unit


def _rises(law: Fit, kind: str) -> bool:
    """Whether ``kind``'s law rises by more than one allocator ``SEGMENT`` over the sizes it was
    read from: a flat one (the model's states setting the peak) bounds no size."""
    return kind in law.laws and law.peak(max(law.sizes), kind) - law.peak(min(law.sizes), kind) > SEGMENT


def guess(results: Sequence[Mapping], cap: int, over: str, unit: int = 1, limit: int | None = None,
          here: Sequence[Mapping] | None = None) -> int | None:
    """The largest size ``prediction`` gives; None until the probes carry a law."""
    made = prediction(results, cap, over, unit, limit, here)
    return None if made is None else made.largest


# torch's out-of-memory message names the device's total and what the process holds (context and
# pool together) beside what its pool holds: the two figures ``reachable`` needs, in probes logged
# before they reported them.
_TOTAL = re.compile(r"total capacity of ([0-9.]+) (GiB|MiB)")
_HELD = re.compile(r"this process has ([0-9.]+) (GiB|MiB) memory in use\..*?Of the allocated memory ([0-9.]+) "
                   r"(GiB|MiB) is allocated by PyTorch, and ([0-9.]+) (GiB|MiB) is reserved")
_UNITS = {"GiB": 2**30, "MiB": 2**20}


def told(reason: str | None) -> dict:
    """``device_total`` and ``context_bytes`` as torch's out-of-memory ``reason`` states them (to
    its two decimals); {} where it states neither."""
    got = {}
    total = _TOTAL.search(reason or "")
    if total:
        got["device_total"] = round(float(total.group(1)) * _UNITS[total.group(2)])
    held = _HELD.search(reason or "")
    if held:
        mine, pool, spare = (float(held.group(i)) * _UNITS[held.group(i + 1)] for i in (1, 3, 5))
        got["context_bytes"] = round(mine - pool - spare)
    return got


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
