"""The loss check: a technique's loss curve held against fp32's, its gap a share of the first
loss, steps the scaler skipped aligned out, and a curve over its tolerance allowed the widest gap
among runs of the reference. Curves are written here: nothing trains."""
import math

import pytest
import torch

from harness.measure.outcomes import CheckFailed
from harness.workloads import tricks as trick_steps

SHAPE = dict(device="cpu", workload="lm", batch=4, micro_batch=4, vocab=128, width=32, depth=2, seq_len=16)


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
    assert trick_steps.against_reference("checkpoint", near_zero, "fp32", ref)["deviation"] < 2e-3
    # The same 30% where the loss is still large is a real difference.
    with pytest.raises(CheckFailed, match="of the first loss"):
        trick_steps.against_reference("checkpoint", [r * 1.3 if r > 1 else r for r in ref], "fp32", ref)


def test_steps_the_scaler_skipped_are_aligned_out_and_only_those():
    ref = memorising()
    # Two overflowed steps at the start: the weights stayed put, so the curve lags by two.
    lagging = ref[:1] * 3 + ref[1:-2]
    skipped = [True, True] + [False] * 10
    out = trick_steps.against_reference("fp16_autocast", lagging, "fp32", ref, skipped)
    assert out["deviation"] == 0 and out["skipped_steps"] == 2
    with pytest.raises(CheckFailed):  # a lag the scaler did not declare is a lost update
        trick_steps.against_reference("fp16_autocast", lagging, "fp32", ref)


def bumped(curve, share, step=3):
    """``curve`` with ``share`` of its first loss added at one step."""
    return [v + share * curve[0] if i == step else v for i, v in enumerate(curve)]


def test_a_curve_over_its_tolerance_is_allowed_the_widest_gap_among_the_reference_runs(monkeypatch):
    ref = memorising()
    # three runs of one reference, as nondeterministic GPU sums give them: each 0.003 from the first,
    # 0.006 from each other
    runs = iter([ref, bumped(ref, 0.003), bumped(ref, -0.003)])
    monkeypatch.setattr(trick_steps, "reference_losses", lambda steps, technique, **shape: ("fp32", next(runs)))
    out = trick_steps.checked_against_reference("checkpoint", bumped(ref, 0.007), [False] * 12, **SHAPE)
    assert out["reference_spread"] == pytest.approx(0.006)
    assert out["deviation"] == pytest.approx(0.004)  # from the nearest run, ref + 0.003
    assert out["reference_runs"] == trick_steps.REFERENCE_RUNS == 3


def test_a_curve_is_held_to_the_nearest_reference_run_and_fails_where_it_is_far_from_every_one(monkeypatch):
    ref = memorising()
    tolerance = trick_steps.TOLERANCE["checkpoint"]

    def checked(share):
        runs = iter([ref, bumped(ref, tolerance / 2), bumped(ref, tolerance)])  # spread: the tolerance
        monkeypatch.setattr(trick_steps, "reference_losses", lambda steps, technique, **shape: ("fp32", next(runs)))
        return trick_steps.checked_against_reference("checkpoint", bumped(ref, share * tolerance), [False] * 12,
                                                     **SHAPE)
    # 2.75 tolerances above the first run, 1.75 above the third: one fp32 could have drawn
    assert checked(2.75)["deviation"] == pytest.approx(1.75 * tolerance)
    with pytest.raises(CheckFailed, match="the widest gap among 3 fp32 runs"):
        checked(-2.25)  # below every run by more than the tolerance and the spread


def test_a_curve_within_its_tolerance_costs_no_further_reference_run(monkeypatch):
    ref, calls = memorising(), []
    monkeypatch.setattr(trick_steps, "reference_losses",
                        lambda steps, technique, **shape: calls.append(1) or ("fp32", list(ref)))
    out = trick_steps.checked_against_reference("checkpoint", bumped(ref, 0.001), [False] * 12, **SHAPE)
    assert len(calls) == 1 and out["reference_spread"] == 0 and out["reference_runs"] == 1


def test_where_two_reference_runs_agree_a_curve_over_its_tolerance_fails(monkeypatch):
    ref = memorising()
    monkeypatch.setattr(trick_steps, "reference_losses", lambda steps, technique, **shape: ("fp32", list(ref)))
    with pytest.raises(CheckFailed, match=r"\+ 0, the widest gap among 3 fp32 runs"):
        trick_steps.checked_against_reference("checkpoint", bumped(ref, 0.003), [False] * 12, **SHAPE)
