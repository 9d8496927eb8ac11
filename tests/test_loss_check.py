"""The loss check: a technique's loss curve held against fp32's, its gap a share of the first
loss, steps the scaler skipped aligned out, and a curve over its tolerance allowed twice the widest
gap among runs of the reference. Curves are written here: nothing trains."""
import math

import pytest
import torch

from harness.measure.outcomes import CheckFailed
from harness.workloads.training import reference
from harness.workloads.training import tricks as trick_steps
from harness.workloads.training.ways import parse


def no_training(steps, way, micro_batch):
    pytest.fail("a reference trained where the test hands in its curves")


# checked_against_reference's shape: how a reference trains (here: never), at which batch and micro-batch
SHAPE = dict(train=no_training, batch=4, micro_batch=4)


@pytest.mark.parametrize("losses, match", [([2.0, float("nan")], "loss is nan"), ([2.0, 2.5], "did not learn")])
def test_a_broken_or_stuck_training_fails_its_check(losses, match):
    with pytest.raises(CheckFailed, match=match):
        trick_steps.losses_checked([torch.tensor(v) for v in losses])


def memorising(steps=12, start=6.9, rate=0.45):
    """A loss curve like ResNet50 memorising one batch: from ln(1000) towards zero in a few steps."""
    return [start * math.exp(-rate * i * i / 4) for i in range(steps)]


def test_the_gap_is_a_share_of_the_first_loss_so_a_memorised_batch_does_not_fail_on_rounding():
    ref = memorising()
    # Off by 30% of its own value near zero (rounding in a chaotic regime), 0.1% of the start.
    near_zero = [r * (1.3 if r < 0.01 else 1.0) for r in ref]
    assert reference.against_reference(parse("checkpoint"), near_zero, "fp32", ref)["deviation"] < 2e-3
    # The same 30% where the loss is still large is a real difference.
    with pytest.raises(CheckFailed, match="of the first loss"):
        reference.against_reference(parse("checkpoint"), [r * 1.3 if r > 1 else r for r in ref], "fp32", ref)


def test_steps_the_scaler_skipped_are_aligned_out_and_only_those():
    ref = memorising()
    # Two overflowed steps at the start: the weights stayed put, so the curve lags by two.
    lagging = ref[:1] * 3 + ref[1:-2]
    skipped = [True, True] + [False] * 10
    out = reference.against_reference(parse("fp16_autocast"), lagging, "fp32", ref, skipped)
    assert out["deviation"] == 0 and out["skipped_steps"] == 2
    with pytest.raises(CheckFailed):  # a lag the scaler did not declare is a lost update
        reference.against_reference(parse("fp16_autocast"), lagging, "fp32", ref)


def bumped(curve, share, step=3):
    """``curve`` with ``share`` of its first loss added at one step."""
    return [v + share * curve[0] if i == step else v for i, v in enumerate(curve)]


def test_a_curve_over_its_tolerance_is_allowed_the_widest_gap_among_the_reference_runs(monkeypatch):
    ref = memorising()
    # five runs of one reference, as nondeterministic GPU sums give them: within 0.003 of the first,
    # 0.006 apart at the widest
    runs = iter([ref, bumped(ref, 0.003), bumped(ref, -0.003), bumped(ref, 0.001), ref])
    monkeypatch.setattr(reference, "reference_losses", lambda steps, way, *at: ("fp32", next(runs)))
    out = reference.checked_against_reference(parse("checkpoint"), bumped(ref, 0.007), [False] * 12, **SHAPE)
    assert out["reference_spread"] == pytest.approx(0.006)
    assert out["deviation"] == pytest.approx(0.004)  # from the nearest run, ref + 0.003
    assert out["reference_runs"] == reference.REFERENCE_RUNS == 5


def test_a_curve_is_held_to_the_nearest_reference_run_and_fails_where_it_is_far_from_every_one(monkeypatch):
    ref = memorising()
    tolerance = trick_steps.TOLERANCE["checkpoint"]

    def checked(share):
        runs = iter([ref, bumped(ref, tolerance / 2), bumped(ref, tolerance), ref, ref])  # spread: the tolerance
        monkeypatch.setattr(reference, "reference_losses", lambda steps, way, *at: ("fp32", next(runs)))
        return reference.checked_against_reference(parse("checkpoint"), bumped(ref, share * tolerance),
                                                     [False] * 12, **SHAPE)
    # 2.75 tolerances above the first run, 1.75 above the third: one fp32 could have drawn
    assert checked(2.75)["deviation"] == pytest.approx(1.75 * tolerance)
    # 2.5 below every run: past the tolerance and the spread once, within it and the spread twice
    assert checked(-2.5)["deviation"] == pytest.approx(2.5 * tolerance)
    with pytest.raises(CheckFailed, match=r"allowed \+ 2 x 0.002, the widest gap among 5 fp32 runs"):
        checked(-3.25)  # below every run by more than the tolerance and twice the spread


def test_a_curve_within_its_tolerance_costs_no_further_reference_run(monkeypatch):
    ref, calls = memorising(), []
    monkeypatch.setattr(reference, "reference_losses",
                        lambda steps, way, *at: calls.append(1) or ("fp32", list(ref)))
    out = reference.checked_against_reference(parse("checkpoint"), bumped(ref, 0.001), [False] * 12, **SHAPE)
    assert len(calls) == 1 and out["reference_spread"] == 0 and out["reference_runs"] == 1


def test_where_two_reference_runs_agree_a_curve_over_its_tolerance_fails(monkeypatch):
    ref = memorising()
    monkeypatch.setattr(reference, "reference_losses", lambda steps, way, *at: ("fp32", list(ref)))
    with pytest.raises(CheckFailed, match=r"\+ 2 x 0, the widest gap among 5 fp32 runs"):
        reference.checked_against_reference(parse("checkpoint"), bumped(ref, 0.003), [False] * 12, **SHAPE)


def test_the_losses_checked_name_the_seed_they_trained_from():
    assert trick_steps.losses_checked([torch.tensor(v) for v in (2.0, 1.0)])["seed"] == trick_steps.SEED == 0


def test_a_step_the_scaler_skipped_pairs_its_loss_with_the_reference_before_it():
    assert reference.aligned([1.0, 2.0, 3.0, 4.0], [True]) == [(0, 1.0), (0, 2.0), (1, 3.0), (2, 4.0)]
    assert reference.aligned([1.0, 2.0, 3.0], [False, True, True]) == [(0, 1.0), (1, 2.0), (1, 3.0)]


def test_the_widest_gap_is_a_share_of_the_reference_s_first_loss_in_either_direction_or_above_only():
    assert reference.curve_gap([1.0, 2.5, 2.0], [2.0, 2.0, 2.0]) == (0, 0.5)
    assert reference.curve_gap([1.0, 2.5, 2.0], [2.0, 2.0, 2.0], one_sided=True) == (1, 0.25)
    assert reference.curve_gap([-1.0, -3.0], [-2.0, -2.0]) == (0, 0.5)  # the scale is the first loss's size
    # a curve longer than the reference is held to the reference's steps
    pairs, worst, gap = reference.deviation(parse("seq_cap"), [2.0, 2.2, 9.0], [2.0, 2.0])
    assert (pairs, worst, gap) == ([(0, 2.0), (1, 2.2)], 1, pytest.approx(0.1))
    assert reference.deviation(parse("checkpoint"), [2.0, 1.8], [2.0, 2.0])[1:] == (1, pytest.approx(0.1))
    assert reference.deviation(parse("seq_cap"), [2.0, 1.8], [2.0, 2.0])[2] == 0  # below the reference: one-sided


def test_the_check_keeps_what_it_compared_and_a_gap_at_the_tolerance_passes():
    ref = [2.0, 1.0, 0.5]
    near = [2.0, 1.0 + 2e-3 * 2.0, 0.5]  # exactly the tolerance of checkpoint, 2e-3 of the first loss
    # a gap of exactly the tolerance (0.25 of the first loss, exact in binary) passes
    assert reference.against_reference(parse("tied_embeddings"), [2.0, 1.5], "fp32", [2.0, 1.0])["deviation"] == 0.25
    out = reference.against_reference(parse("checkpoint"), near, "fp32", ref, [False, False, False], 0.001, 2)
    assert out == {"deviation": pytest.approx(2e-3), "tolerance": 2e-3, "reference": "fp32", "reference_spread": 0.001,
                   "spread_factor": 2, "reference_runs": 2, "reference_loss_last": 0.5, "losses": near,
                   "reference_losses": ref, "skipped_steps": 0}
    with pytest.raises(CheckFailed) as e:
        reference.against_reference(parse("checkpoint"), [2.0, 1.1, 0.5], "fp32", ref, [False, True, False])
    # the skipped second step leaves the third's loss beside the reference's second
    assert str(e.value) == ("checkpoint: loss 0.5 at step 3 against 1 for fp32 after as many updates, a gap of 0.25 of "
                            "the first loss (2), over the 0.002 allowed + 2 x 0, the widest gap among 1 fp32 runs")
    assert e.value.priced and e.value.details["skipped_steps"] == 1 and e.value.details["deviation"] == 0.25
    # a NaN loss past the first step is the widest gap, not one passed over
    step, gap = reference.curve_gap([2.0, float("nan"), 0.5], ref)
    assert step == 1 and math.isnan(gap)
    with pytest.raises(CheckFailed, match="loss nan at step 2"):
        reference.against_reference(parse("checkpoint"), [2.0, float("nan"), 0.5], "fp32", ref)


def test_a_curve_is_held_to_this_run_s_fp32_curve_where_there_is_one(monkeypatch):
    ref = memorising()
    monkeypatch.setattr(reference, "reference_losses", lambda *a, **k: pytest.fail("trained a reference"))
    out = reference.checked_against_reference(parse("checkpoint"), ref, [False] * 12, fp32_curve=ref, **SHAPE)
    assert (out["reference"], out["deviation"]) == ("fp32", 0)
    monkeypatch.setattr(reference, "reference_losses", lambda *a, **k: ("itself", None))
    assert reference.checked_against_reference(parse("fp32"), ref, [False] * 12, fp32_curve=ref, **SHAPE) == {
        "reference": "itself"}
    monkeypatch.setattr(reference, "reference_losses", lambda *a, **k: (None, "none fits"))
    assert reference.checked_against_reference(parse("checkpoint"), ref, [False] * 12, **SHAPE) == {
        "reference": None, "reference_reason": "none fits"}


def test_reference_runs_of_the_same_sums_give_a_spread_and_a_run_of_other_sums_ends_the_check(monkeypatch):
    ref = memorising()
    far = bumped(ref, 0.007)

    calls = []

    def runs(*labels):
        given = iter([(label, bumped(ref, 0.003 * i)) for i, label in enumerate(labels)])
        monkeypatch.setattr(reference, "reference_losses", lambda *a, **k: calls.append((a, k)) or next(given))
    runs("fp32", "fp32 with checkpointing", "fp32", "fp32", "fp32 with checkpointing")
    out = reference.checked_against_reference(parse("checkpoint"), far, [False] * 11 + [True], **SHAPE)
    assert (out["reference_runs"], out["reference_spread"], out["skipped_steps"]) == (5, pytest.approx(0.012), 1)
    assert out["deviation"] == pytest.approx(0.001)  # from the nearest run, ref + 0.006
    # each run as long as the curve, at the case's batch and micro-batch
    assert calls == [((12, parse("checkpoint"), no_training, 4, 4), {})] * 5
    runs("fp32", "fp32 in micro-batches of 2", "fp32")
    with pytest.raises(CheckFailed, match="the widest gap among 1 fp32 runs"):
        reference.checked_against_reference(parse("checkpoint"), far, [False] * 12, **SHAPE)


def lagging(curve, steps=2):
    """``curve`` as a run whose first ``steps`` updates the scaler skipped: it lags by as many."""
    return curve[:1] * (steps + 1) + curve[1:-steps]


def test_a_curve_held_to_this_run_s_fp32_curve_aligns_out_the_steps_the_scaler_skipped(monkeypatch):
    ref = memorising()
    monkeypatch.setattr(reference, "reference_losses", lambda *a, **k: pytest.fail("trained a reference"))
    out = reference.checked_against_reference(parse("fp16_autocast"), lagging(ref), [True, True] + [False] * 10,
                                                fp32_curve=ref, **SHAPE)
    assert (out["deviation"], out["reference_runs"], out["skipped_steps"]) == (0, 1, 2)


def test_the_nearest_reference_run_is_the_nearest_after_the_skipped_steps_are_aligned_out(monkeypatch):
    ref = memorising()
    # Unaligned, the curve sits nearest the run that lags as it does; aligned, nearest the others.
    runs = iter([ref, lagging(ref), ref, lagging(ref), ref])
    monkeypatch.setattr(reference, "reference_losses", lambda *a, **k: ("fp32", next(runs)))
    out = reference.checked_against_reference(parse("checkpoint"), bumped(lagging(ref), 0.003, step=6),
                                                [True, True] + [False] * 10, **SHAPE)
    assert out["reference_runs"] == 5 and out["deviation"] == pytest.approx(0.003)


def out_of_memory():
    return torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def training(runs_out, trained: list, error=None):
    """A ``train`` that records what it was asked for and runs out of memory for each (way, micro-batch)
    in ``runs_out`` (every one where ``runs_out`` is None), or raises ``error``."""
    def train(steps, way, micro_batch):
        trained.append((str(way), micro_batch))
        if error is not None:
            raise error
        if runs_out is None or (str(way), micro_batch) in runs_out:
            raise out_of_memory()
        return [float(steps)] * steps
    return train


def test_the_first_reference_that_fits_trains_and_one_that_runs_out_passes_to_the_next():
    trained = []
    train = training({("fp32", 4)}, trained)
    got = reference.reference_losses(3, parse("bf16_autocast"), train, 4, 4)
    assert got == ("fp32 with checkpointing", [3.0] * 3) and trained == [("fp32", 4), ("checkpoint", 4)]
    trained.clear()
    assert reference.reference_losses(3, parse("fp32"), train, 4, 4) == ("itself", None) and not trained
    # in micro-batches the case's own split is tried last; where none fits, the reason names each
    label, why = reference.reference_losses(2, parse("fp32"), training(None, trained), 4, 2)
    assert label is None and why == ("no fp32 reference fits on the card beside the case (fp32; fp32 with "
                                     "checkpointing; fp32 in micro-batches of 2 ran out of memory)")
    assert trained == [("fp32", 4), ("checkpoint", 4), ("fp32", 2)]
    with pytest.raises(ValueError, match="a broken step"):  # any other error is no does-not-fit: raised
        reference.reference_losses(2, parse("checkpoint"), training((), [], ValueError("a broken step")), 4, 4)
