"""The loss check of a way out: its loss curve held against fp32's on the same model, data and
seed, its gap a share of the first loss, steps the fp16 scaler skipped aligned out; or, for a way
that trains other weights or by another rule, its own criterion (``Way.falls``).

The fp32 references train through the ``train(steps, way, micro_batch) -> losses`` the caller
hands in (``tricks.trained`` at the case's shape): this module compares curves and chooses which
reference runs, and builds no step of its own."""
from __future__ import annotations

import itertools
import math

from harness.measure.outcomes import CheckFailed, is_out_of_memory
from harness.workloads.training import ways

REFERENCE_RUNS = 5  # runs of the reference whose widest gap a curve over its tolerance is allowed
# How many times that widest gap is allowed. The technique's curve is one more draw of the same
# sums: a further draw of a normal quantity lies farther than once the widest gap among three
# draws from all of them about one time in eight, farther than twice that among five about one
# time in two hundred.
SPREAD_FACTOR = 2

# The references that train the whole batch at once, as (label, way): the same sums as fp32.
FP32 = ways.Way()
WHOLE_BATCH = (("fp32", FP32), ("fp32 with checkpointing", ways.Way(checkpoint=True)))
SAME_SUMS = {label for label, _ in WHOLE_BATCH}  # runs of one reference, whichever of them fit


def held_to_whole_batch(check: dict) -> bool:
    """Whether a check held the loss curve against fp32 on the whole batch (or was that
    reference itself); False where only the case's own micro-batches, or nothing, could run as
    the reference, so that what accumulation changes went unchecked."""
    return check.get("reference") in ("itself", *(label for label, _ in WHOLE_BATCH))


def references(way, batch: int, micro_batch: int):
    """The fp32 runs to hold ``way`` against, best first, as (label, way, micro-batch):
    fp32 on the whole batch; the same with activations recomputed (the same sums, less memory)
    where that does not fit beside the case; fp32 on the case's own micro-batches last (then the
    accumulation itself goes unchecked). None for fp32 on the whole batch: it is the reference."""
    if way == FP32 and micro_batch == batch:
        return []
    runs = [(label, ref, batch) for label, ref in WHOLE_BATCH]
    if micro_batch != batch:
        runs.append((f"fp32 in micro-batches of {micro_batch}", FP32, micro_batch))
    return runs


def reference_losses(steps: int, way, train, batch: int,
                     micro_batch: int) -> tuple[str, list[float]] | tuple[None, str]:
    """Trains the first reference that fits for ``steps`` steps through ``train(steps, way,
    micro_batch)``: (its label, its losses), or (None, why none could run); ("itself", None) for
    the reference itself."""
    runs = references(way, batch, micro_batch)
    if not runs:
        return "itself", None
    tried = []
    for label, ref_way, micro in runs:
        try:
            return label, train(steps, ref_way, micro)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            tried.append(label)
        _free_cuda()  # out of the except block: the error's frames, which hold the failed trainer, are gone
    return None, f"no fp32 reference fits on the card beside the case ({'; '.join(tried)} ran out of memory)"


def _free_cuda():
    import torch
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def aligned(losses, skipped) -> list[tuple[int, float]]:
    """(index into the reference's losses, loss) per step. A step the GradScaler skipped left the
    weights as they were, so the loss after it belongs beside the reference's loss before it: the
    curves are compared at equal numbers of applied updates."""
    applied, pairs = 0, []
    for i, value in enumerate(losses):
        pairs.append((applied, float(value)))
        applied += not (i < len(skipped) and skipped[i])  # steps past the list: none skipped
    return pairs


def curve_gap(losses, ref_losses, one_sided: bool = False) -> tuple[int, float]:
    """(step, gap) of the largest gap between two curves of equal steps, as a share of the
    reference's first loss; above the reference only where ``one_sided``."""
    scale = abs(float(ref_losses[0]))
    gaps = [(float(v) - float(r)) / scale for v, r in zip(losses, ref_losses)]
    gaps = [max(g, 0.0) if one_sided else abs(g) for g in gaps]
    # a NaN gap is the worst: max compares nothing as larger than NaN, and would pass it over
    worst = max(range(len(gaps)), key=lambda i: math.inf if math.isnan(gaps[i]) else gaps[i])
    return worst, gaps[worst]


def deviation(way, losses, ref_losses, skipped=()):
    """(the aligned (reference step, loss) pairs, the worst step, its gap): ``curve_gap`` of the
    way's curve against the reference's at equal numbers of applied updates."""
    pairs = [(i, v) for i, v in aligned(losses, skipped) if i < len(ref_losses)]
    worst, gap = curve_gap([v for _, v in pairs], [ref_losses[i] for i, _ in pairs], way.one_sided)
    return pairs, worst, gap


def against_reference(way, losses, reference: str, ref_losses, skipped=(), spread: float = 0.0,
                      runs: int = 1) -> dict:
    """The largest gap between the technique's loss curve and the reference's, as a share of the
    reference's first loss (above it only, for a technique that changes the model or data), with
    steps the scaler skipped aligned out; CheckFailed past the technique's tolerance plus
    ``SPREAD_FACTOR`` times ``spread``, the widest gap among ``runs`` runs of the reference itself
    (``checked_against_reference``)."""
    pairs, worst, gap = deviation(way, losses, ref_losses, skipped)
    allowed = way.tolerance
    compared = {"deviation": gap, "tolerance": allowed, "reference": reference, "reference_spread": spread,
                "spread_factor": SPREAD_FACTOR, "reference_runs": runs, "reference_loss_last": float(ref_losses[-1]),
                "losses": [v for _, v in pairs], "reference_losses": [float(r) for r in ref_losses],
                "skipped_steps": sum(bool(s) for s in skipped)}
    if not gap <= allowed + SPREAD_FACTOR * spread:  # a NaN gap fails too
        i, v = pairs[worst]
        raise CheckFailed(f"{way}: loss {v:.5g} at step {worst + 1} against {ref_losses[i]:.5g} for {reference} "
                          f"after as many updates, a gap of {gap:.3g} of the first loss ({abs(ref_losses[0]):.4g}), "
                          f"over the {allowed:g} allowed + {SPREAD_FACTOR} x {spread:.3g}, the widest gap among {runs} "
                          f"{reference} runs", compared, priced=True)
    return compared


def checked_against_reference(way, losses, skipped, train, batch: int, micro_batch: int, fp32_curve=None) -> dict:
    """The check of ``way``'s loss curve against the first fp32 reference that fits.
    GPU kernels that sum with atomics (cuDNN's convolution backward among them) give a
    different curve on every run, and a batch being memorised amplifies that; so a curve over its
    tolerance is held once more against the nearest of ``REFERENCE_RUNS`` runs of the reference,
    allowed on top ``SPREAD_FACTOR`` times the widest gap among those runs: the gap between one
    pair of runs varies several-fold from pair to pair, so one pair understates how far two runs of
    the same step drift apart, and a curve that only the first run's drift put out of reach is one
    fp32 could have drawn. A technique that changes the sums stays as far from every run.
    Where sums run in a fixed order (the CPU) every gap is zero and changes nothing.
    ``fp32_curve``: fp32's own curve on the whole batch at this shape, measured earlier in the
    same run, in place of the first reference run (one draw of the same training as any other).
    ``train``, ``batch``, ``micro_batch``: ``reference_losses``'s."""
    if fp32_curve is not None and references(way, batch, micro_batch):
        reference, ref_losses = WHOLE_BATCH[0][0], list(fp32_curve)  # pragma: no mutate: fp32's label is its technique
    else:
        reference, ref_losses = reference_losses(len(losses), way, train, batch, micro_batch)
    if way.falls is not None:
        return held_to_falling(way, losses, reference, ref_losses, skipped)
    if reference is None:
        return {"reference": None, "reference_reason": ref_losses}
    if ref_losses is None:
        return {"reference": reference}
    try:
        return against_reference(way, losses, reference, ref_losses, skipped)
    except CheckFailed:
        runs = [ref_losses]
        for _ in range(REFERENCE_RUNS - 1):
            again, again_losses = reference_losses(len(losses), way, train, batch, micro_batch)
            if again != reference and not {again, reference} <= SAME_SUMS:
                raise  # a later run did not fit as the first did, and sums otherwise: no spread to learn
            runs.append(again_losses)
        spread = max(curve_gap(a, b)[1] for a, b in itertools.combinations(runs, 2))
        nearest = min(runs, key=lambda run: deviation(way, losses, run, skipped)[2])
        return against_reference(way, losses, reference, nearest, skipped, spread, len(runs))


def held_to_falling(way, losses, reference, ref_losses, skipped=()) -> dict:
    """The check of a way held to a criterion of its own (``Way.falls``: it trains other weights or
    by another rule than fp32's Adam): its last loss at most (1 - falls) of its first, CheckFailed
    otherwise. fp32's curve, where one ran, is recorded beside it with the gap, not held against it."""
    first, last = float(losses[0]), float(losses[-1])
    criterion = (f"{way}: held to its own criterion, not to fp32's curve: the last loss at most "
                 f"{1 - way.falls:g} of the first (it falls by {way.falls:g} of it within the run)")
    compared = {"criterion": criterion, "falls": way.falls, "fell": (first - last) / abs(first),
                "losses": [float(v) for v in losses], "reference": reference}
    if reference is not None and ref_losses is not None:
        pairs, _, gap = deviation(way, losses, ref_losses, skipped)
        compared.update(deviation=gap, reference_losses=[float(r) for r in ref_losses],
                        reference_loss_last=float(ref_losses[-1]))
    elif reference is None:
        compared["reference_reason"] = ref_losses
    if not last <= (1 - way.falls) * first:  # a NaN fails too
        raise CheckFailed(f"{way}: loss {last:.5g} after {len(losses)} steps against {first:.5g} at the first, "
                          f"a fall of {compared['fell']:.3g} of it, under the {way.falls:g} its criterion asks",
                          compared, priced=True)
    return compared
