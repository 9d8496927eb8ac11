"""The regression gate on real record files: a planted 20% slowdown fails, naming the case with
both figures; two honest runs of the same commit pass."""
import json
from pathlib import Path

from harness.drive import cli
from harness.report import gate

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "results/records/nvidia-h200-x1/5bdb56dc-20261122T203654-d321e2.jsonl"
CPU = sorted((REPO / "results/records/cpu-intel-r-xeon-r-processor").glob("18e01f70-*.jsonl"))


def planted(tmp_path, probe="device_copy", factor=1.2) -> Path:
    """A copy of a real record file with one case made `factor` times slower, spread and all."""
    out = tmp_path / "planted.jsonl"
    lines = []
    for line in H200.read_text().splitlines():
        rec = json.loads(line)
        if rec["params"] == {"probe": probe}:
            rec["timing"] = {k: v * factor if k.endswith("_s") else v for k, v in rec["timing"].items()}
        lines.append(json.dumps(rec))
    out.write_text("\n".join(lines) + "\n")
    return out


def test_planted_regression_fails_and_names_the_case_with_both_figures(tmp_path, capsys):
    assert cli.main(["gate", str(H200), str(planted(tmp_path))]) == 1
    out = capsys.readouterr().out
    regressed = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert len(regressed) == 1, out
    assert "ceilings probe=device_copy" in regressed[0] and "1.042 ms" in regressed[0] and "1.251 ms" in regressed[0]
    assert "+20.0%" in regressed[0]


def test_two_honest_runs_of_one_commit_pass(capsys):
    first, second = CPU[0], CPU[1]  # two runs of commit 18e01f70 in the same environment
    assert cli.main(["gate", str(first), str(second)]) == 0
    assert "PASS: 0 regression(s) in 2 case(s)" in capsys.readouterr().out


def test_a_noisy_case_needs_more_than_its_spread_to_fail(tmp_path):
    base = gate.load_set(H200)
    new = gate.load_set(planted(tmp_path, factor=1.05))  # 5%: under the 10% floor
    assert gate.compare(base, new).ok
    assert not gate.compare(base, new, threshold=0.01, k=0).ok  # with no allowance it is caught


def test_a_case_that_no_longer_fits_is_a_regression(tmp_path):
    recs = [json.loads(line) for line in H200.read_text().splitlines()]
    recs[0].update(outcome="does_not_fit", reason="CUDA out of memory", timing=None)
    path = tmp_path / "dnf.jsonl"
    path.write_text("\n".join(map(json.dumps, recs)) + "\n")
    report = gate.compare(gate.load_set(H200), gate.load_set(path))
    assert [f.metric for f in report.regressions] == ["outcome"]


def test_nothing_in_common_is_an_error_not_a_pass(tmp_path, capsys):
    other = tmp_path / "other.jsonl"
    rec = json.loads(H200.read_text().splitlines()[0])
    rec["case"] = "something_else"
    other.write_text(json.dumps(rec) + "\n")
    assert cli.main(["gate", str(H200), str(other)]) == 2
    assert "nothing was compared" in capsys.readouterr().out


def test_a_missing_path_names_the_fix(tmp_path):
    import pytest
    with pytest.raises(SystemExit, match="pass a record file"):
        gate.load_set(tmp_path / "nope")
