"""The gate as ``harness compare`` calls it: every round of each side judged, floors from BASE's
rounds. A shift of every NEW round past BASE's scatter fails; one bad round does not decide."""
from pathlib import Path

from gate_records import record, write
from harness.report import gate

BASE_ROUNDS = (0.0100, 0.01001, 0.00999)  # three rounds that agree within 0.2%


def side(folder: Path, medians, commit: str, *, outcome: str = "ok", traced_first_only: bool = False) -> Path:
    """One side of a compare: a round file per median, the rounds in the order run. ``traced_first_only``:
    as a compare runs them, only the first round read the GPU-busy share."""
    folder.mkdir(parents=True)
    for r, median in enumerate(medians, 1):
        rec = record(median=median, n=20, run=f"20990101T000000-abcdef-r{r}", created=float(r), commit=commit)
        if traced_first_only and r > 1:
            rec["gpu_busy"] = {"source": "none", "reason": "cupti: not traced in this run (no extra step)"}
        if outcome != "ok" and r == len(medians):
            rec = {**rec, "outcome": outcome, "reason": "planted", "timing": None}
        write(folder / f"{commit}-r{r}.jsonl", [rec])
    return folder


def judged(tmp_path, new_medians, **kw) -> tuple[int, str]:
    base = side(tmp_path / "base", BASE_ROUNDS, "aaaaaaaa")
    new = side(tmp_path / "new", new_medians, "bbbbbbbb", **kw)
    return gate.gate(base, new, history=base, all_rounds=True)


def test_two_percent_on_every_new_round_fails_against_tight_base_rounds(tmp_path):
    rc, text = judged(tmp_path, [m * 1.02 for m in BASE_ROUNDS])
    assert rc == 1 and "FAIL: 1 regression(s) (1 slower)" in text
    assert "1.020" in text and "1.0% w" in text  # the floor BASE's rounds taught, at its least


def test_one_noisy_new_round_among_three_does_not_decide(tmp_path):
    # The noisy round is the last: the latest round alone would read 15% slower and fail.
    rc, text = judged(tmp_path, [0.01, 0.010005, 0.0115])
    assert rc == 0 and "PASS: 0 regression(s) in 1 case(s) compared" in text


def test_a_against_a_passes(tmp_path):
    rc, text = judged(tmp_path, [0.010005, 0.009995, 0.01001])
    assert rc == 0 and "PASS" in text and "rounds: each side's time is the median of its rounds' medians" in text


def test_a_round_that_did_not_end_ok_stands_for_its_side(tmp_path):
    rc, text = judged(tmp_path, BASE_ROUNDS, outcome="failed")
    assert rc == 1 and "ok -> failed: planted" in text


def test_the_plain_gate_still_reads_each_sides_latest_record(tmp_path):
    base = side(tmp_path / "base", BASE_ROUNDS, "aaaaaaaa")
    new = side(tmp_path / "new", [0.01, 0.010005, 0.0115], "bbbbbbbb")
    rc, text = gate.gate(base, new, history=base)
    assert rc == 1 and "slower" in text


def test_a_case_whose_later_rounds_were_not_traced_is_judged_by_its_first_rounds_busy_share(tmp_path):
    """A compare traces the GPU-busy share in each side's first round only. The case stays GPU-bound,
    its floor capped at that class's default (5%) where BASE's rounds scatter more: read as "busy
    unknown" (10%), an 8% slowdown of every round would pass."""
    scattered = (0.0100, 0.0107, 0.0100)
    base = side(tmp_path / "base", scattered, "aaaaaaaa", traced_first_only=True)
    new = side(tmp_path / "new", [m * 1.08 for m in (0.0100, 0.0100, 0.0100)], "bbbbbbbb", traced_first_only=True)
    rc, text = gate.gate(base, new, history=base, all_rounds=True)
    assert rc == 1 and "FAIL: 1 regression(s) (1 slower)" in text and "5.0% d" in text


def test_the_rounds_busy_share_is_the_traced_one_before_nvmls_coarser_reading():
    from harness.measure.record import Record
    from harness.report import rounds
    shares = [{"fraction": 0.98, "source": "cupti"}, {"fraction": 0.61, "source": "nvml"},
              {"source": "none", "reason": "not traced"}]
    recs = [Record.from_dict(record(run=f"r{r}", created=float(r), gpu_busy=b)) for r, b in enumerate(shares, 1)]
    assert rounds.one(recs).gpu_busy == shares[0]
    assert rounds.one(recs[1:]).gpu_busy == shares[1]  # no traced round: NVML's
    assert rounds.one(recs[2:] * 2).gpu_busy == shares[2]  # none read: the newest round's reason
