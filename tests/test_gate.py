"""The regression gate on committed and planted records: honest pairs of hosts pass; planted
slowdowns, bigger peaks, lost and missing cases fail; input it cannot trust is refused."""
import json
import re
import shutil
from pathlib import Path

import pytest

from harness import cases
from harness.drive.commands import cli
from harness.measure.instruments.timing import Timing
from harness.measure.records import record
from harness.report import gate, markdown, noise

from conftest import FROZEN


def upgraded(rec: dict):
    """The record as every reader sees it: with the parameters its case added since (budget)."""
    return cases.upgraded(gate.Record.from_dict(rec))

RECORDS = FROZEN / "records"
H100 = RECORDS / "nvidia-h100-80gb-hbm3-x1"
H200 = RECORDS / "nvidia-h200-x1"
H100_RUN = H100 / "bfa680ee-20261124T003930-ab748b.jsonl"  # ceilings, tricks and more, one host
H100_OTHER_HOST = H100 / "c65b18ac-20261123T235654-f472de.jsonl"
H200_RUN = H200 / "bfa680ee-20261124T005204-346ecc.jsonl"
BASELINE = FROZEN / "baseline/cpu-ceilings-host.jsonl"
# The history the floors are learned from, frozen at the commits these tests were written
# against (an allowlist: records committed later move the learned floors, and must not move
# the tests, whichever commit they come from).
FROZEN = ("5bdb56dc", "65529e88", "70b74ec2", "e71e2a63", "91cf4ff0", "18e01f70", "6a1cc2fe",
          "203233bf", "d570cdd1", "e10b46f1", "c65b18ac", "bfa680ee", "c948a7fb")


def frozen_history() -> Path:
    import tempfile
    root = Path(tempfile.mkdtemp(prefix="oombench-history-"))
    for f in RECORDS.glob("*/*.jsonl"):
        if f.name.startswith(FROZEN):
            (root / f.parent.name).mkdir(exist_ok=True)
            (root / f.parent.name / f.name).symlink_to(f)
    return root


HISTORY = frozen_history()
FLOORS = noise.history_floors(HISTORY)


@pytest.fixture(autouse=True)
def _frozen_history(monkeypatch):
    monkeypatch.setattr(gate, "HISTORY", HISTORY)


def commit_set(tmp_path, machine: Path, commit: str) -> Path:
    """One commit's record files of one machine, as a folder of their own."""
    out = tmp_path / commit
    out.mkdir()
    for f in machine.glob(f"{commit}-*.jsonl"):
        shutil.copy(f, out / f.name)
    return out


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def fresh(recs: list[dict]) -> list[dict]:
    """The records as another run's: a record NEW shares with BASE is BASE's, not a new measurement."""
    return [{**r, "run_id": "20990101T000000-test00", "created": r["created"] + 1} for r in recs]


def scaled(rec: dict, factor: float) -> dict:
    t = dict(rec["timing"])
    t.update({k: v * factor for k, v in t.items() if k.endswith("_s") and k != "samples_s"})
    t["samples_s"] = [s * factor for s in t.get("samples_s", [])]
    return {**rec, "timing": t}


def with_samples(rec: dict, n: int = 20) -> dict:
    """A record's timing with raw samples spread along its quartiles (min, q25, median, q75, max)."""
    t = rec["timing"]
    marks = [t["min_s"], t["q25_s"], t["median_s"], t["q75_s"], t["max_s"]]
    samples = []
    for i in range(n):
        x = 4 * i / (n - 1)
        lo = min(int(x), 3)
        samples.append(marks[lo] + (marks[lo + 1] - marks[lo]) * (x - lo))
    return {**rec, "timing": Timing.from_samples(samples, t["warmup"]).to_dict()}  # the summary its samples give


def gpu_bound(rec: dict) -> bool:
    p = rec["params"]
    return rec["outcome"] == "ok" and (
        (rec["case"] == "ceilings" and p["probe"] in ("device_copy", "matmul_fp32", "matmul_fp16"))
        or (rec["case"] == "tricks" and p["device"] == "cuda" and p["workload"] == "lm"
            and p["technique"] != "cpu_embedding"))


def rows_of(report, mark="+"):
    return [r for r in report.rows if r.mark == mark]


# -- honest pairs ---------------------------------------------------------------------------------
def test_two_honest_h100_hosts_have_no_slower_or_bigger_case(tmp_path):
    base, new = commit_set(tmp_path, H100, "e71e2a63"), commit_set(tmp_path, H100, "70b74ec2")
    report = gate.compare(gate.load_set(base), gate.load_set(new), FLOORS)
    assert report.compared == 59 and rows_of(report) == []
    new_keys = {(r["case"], json.dumps(r["params"], sort_keys=True)) for f in new.iterdir() for r in read(f)}
    missing = [r for r in report.rows if r.verdict.startswith("missing")]
    # only what 70b74ec2 never ran
    assert missing and all((r.case, json.dumps(r.params, sort_keys=True)) not in new_keys for r in missing)


def test_two_honest_h200_hosts_have_no_slower_case_in_ceilings_and_unified(tmp_path):
    base, new = commit_set(tmp_path, H200, "91cf4ff0"), commit_set(tmp_path, H200, "bfa680ee")
    rc, text = gate.gate(base, new, pattern="^(ceilings|unified) ")
    report = gate.compare(gate.only(gate.load_set(base), "^(ceilings|unified) "),
                          gate.only(gate.load_set(new), "^(ceilings|unified) "), FLOORS)
    assert report.compared == 14 and rows_of(report) == [], text
    assert rc == 1 and "missing" in text  # the rerun measured 3 of the unified cases: the rest are missing


def test_the_ci_gate_line_passes_an_honest_run_of_another_session():
    earlier = RECORDS / "cpu-amd-epyc" / "bfa680ee-20261124T003859-187d27.jsonl"  # not the baseline's run
    rc, text = gate.gate(BASELINE, earlier, threshold=1.0, pattern="host_copy", cross_machine=True)
    assert rc == 1 and "unlike schemas" in text  # that run's records are of the schema before
    rc, text = gate.gate(BASELINE, earlier, threshold=1.0, pattern="host_copy", cross_machine=True, allow=["schema"])
    assert rc == 0, text
    assert "cross-machine: matched on case and parameters alone" in text
    assert "allowed by --allow: schema: ceilings" in text


def test_the_ci_gate_line_compares_peaks_and_fails_one_that_doubles(tmp_path):
    # A baseline of an older schema has its peaks skipped (their levels meant something else), so
    # CI would pass any memory growth: its baseline must be of the records' current schema.
    base = read(BASELINE)
    assert {r.get("schema") for r in base} == {record.SCHEMA}
    doubled = [{**r, "memory": {k: int(2.1 * v) for k, v in r["memory"].items()}} for r in base]
    rc, text = gate.gate(BASELINE, write(tmp_path / "new.jsonl", doubled), threshold=1.0, pattern="host_copy",
                         cross_machine=True)
    assert rc == 1 and "peaks not compared" not in text, text


# -- planted slowdowns ----------------------------------------------------------------------------
def test_gpu_bound_floors_learned_across_hosts_are_under_five_percent():
    for rec in filter(gpu_bound, read(H100_RUN) + read(H200_RUN)):
        r = upgraded(rec)
        floor = FLOORS.across(noise.key_of(r), "GPU-bound")
        assert floor.learned and floor.fraction < 0.05, (rec["case"], rec["params"], floor)


@pytest.mark.parametrize("samples", [False, True], ids=["quartiles", "rank-test"])
def test_five_percent_on_gpu_bound_cases_is_caught_between_two_hosts(tmp_path, samples):
    other_env = read(H100_OTHER_HOST)[0]["environment"]  # another H100 host
    base = [with_samples(r) if samples and r["timing"] else r for r in read(H100_RUN)]
    new = [{**(scaled(r, 1.05) if gpu_bound(r) else r), "environment": other_env} for r in base]
    report = gate.compare(gate.load_set(write(tmp_path / "base.jsonl", base)),
                          gate.load_set(write(tmp_path / "new.jsonl", new)), FLOORS)
    planted = sorted(json.dumps([r.case, r.params]) for r in map(upgraded, base) if gpu_bound(r.to_dict()))
    slower = sorted(json.dumps([r.case, r.params]) for r in rows_of(report))
    assert len(planted) == 11 and slower == planted
    assert all(r.floor.endswith(" a") for r in rows_of(report))  # the across-hosts floor
    if samples:
        assert all("rank p=" in r.verdict for r in rows_of(report))


HOST_INVOLVED = [("ceilings", {"probe": "h2d_pageable"}), ("ceilings", {"probe": "d2h_pageable"}),
                 ("ceilings", {"probe": "cpu_matmul_fp32"}),
                 ("chainer_mlp", {"batch": 256, "device": "cpu", "pool": "numpy"}),
                 ("torch_gcn", {"device": "cpu", "features": 128, "nodes": 16384})]


def test_twenty_percent_on_host_involved_cases_is_caught_on_one_host(tmp_path):
    base = read(H200_RUN)
    hit = [r for r in base if (r["case"], r["params"]) in HOST_INVOLVED]
    new = fresh([scaled(r, 1.2) if r in hit else r for r in base])
    report = gate.compare(gate.load_set(H200_RUN), gate.load_set(write(tmp_path / "new.jsonl", new)), FLOORS)
    assert len(hit) == len(HOST_INVOLVED)
    assert sorted((r.case, json.dumps(r.params)) for r in rows_of(report)) == \
        sorted((r.case, json.dumps(r.params)) for r in map(upgraded, hit))
    across = [FLOORS.across(noise.key_of(upgraded(r)), "busy unknown").fraction for r in hit]
    assert max(across) > 0.2  # between two hosts the same +20% would be noise


def test_a_record_that_exceeds_its_floor_but_not_its_spread_passes(tmp_path):
    base = read(H100_RUN)
    new = [{**r, "timing": {**r["timing"], "median_s": r["timing"]["q75_s"] * 1.0001,
                            "q75_s": r["timing"]["q75_s"] * 1.5, "max_s": r["timing"]["max_s"] * 1.5}}
           if r["params"].get("probe") == "matmul_tf32" else r for r in base]
    report = gate.compare(gate.load_set(H100_RUN), gate.load_set(write(tmp_path / "n.jsonl", fresh(new))), FLOORS)
    assert rows_of(report) == [] and rows_of(report, "x") == []


# -- peaks, outcomes, missing, retired ------------------------------------------------------------
def test_ten_percent_more_on_a_peak_fails(tmp_path):
    label = "allocator.torch.max_allocated.cuda:0"
    new = [{**r, "memory": {**r["memory"], label: int(r["memory"][label] * 1.1)}}
           if r["params"].get("probe") == "device_copy" else r for r in read(H100_RUN)]
    rc, text = gate.gate(H100_RUN, write(tmp_path / "n.jsonl", fresh(new)))
    bigger = [line for line in text.splitlines() if line.startswith("+")]
    assert rc == 1 and len(bigger) == 1 and f"[peak {label}]" in bigger[0] and "ceilings probe=device_copy" in bigger[0]
    assert "4.83 GB" in bigger[0] and "5.32 GB" in bigger[0]


def test_ok_then_does_not_fit_fails(tmp_path):
    recs = read(H100_RUN)
    recs[0].update(outcome="does_not_fit", reason="CUDA out of memory", timing=None)
    rc, text = gate.gate(H100_RUN, write(tmp_path / "dnf.jsonl", fresh(recs)))
    assert rc == 1 and "ok -> does_not_fit: CUDA out of memory" in text
    assert "FAIL: 1 regression(s) (1 lost) in 48 case(s) compared" in text


def test_ok_then_missing_fails_and_a_retired_case_does_not(tmp_path):
    recs = read(H100_RUN)
    gone = [{**recs[0], "params": {"probe": "no_such_probe"}}, {**recs[0], "case": "no_such_case"}]
    base = write(tmp_path / "base.jsonl", recs + gone)
    rc, text = gate.gate(base, write(tmp_path / "again.jsonl", fresh(recs)))
    assert rc == 0 and text.count("retired (NEW's code no longer declares it)") == 2, text
    rc, text = gate.gate(base, write(tmp_path / "new.jsonl", fresh(recs[1:])))
    assert rc == 1 and "missing: ok in base, not measured in new" in text and "ceilings probe=device_copy" in text


def test_a_side_that_mixes_machines_is_refused_unless_asked(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(H100_RUN, mixed / "a.jsonl")
    shutil.copy(H200_RUN, mixed / "b.jsonl")
    rc, text = gate.gate(mixed, H100_RUN)
    assert rc == 2 and "BASE mixes machine kinds" in text and "--cross-machine" in text
    rc, text = gate.gate(H100_RUN, H200_RUN)
    assert rc == 2 and "compare records of one machine kind, or pass --cross-machine" in text
    rc, text = gate.gate(H100_RUN, H200_RUN, cross_machine=True)
    assert rc in (0, 1) and "cross-machine" in text


HOSTILE = {
    "binary garbage": lambda line: "\x00\xff\xfe garbage \x89PNG",
    "memory null": lambda line: json.dumps({**json.loads(line), "memory": None}),
    "string median": lambda line: json.dumps({**json.loads(line),
                                              "timing": {**json.loads(line)["timing"], "median_s": "1.0"}}),
    "NaN median": lambda line: json.dumps({**json.loads(line),
                                           "timing": {**json.loads(line)["timing"], "median_s": float("nan")}}),
    "infinite q75": lambda line: json.dumps({**json.loads(line),
                                             "timing": {**json.loads(line)["timing"], "q75_s": float("inf")}}),
    "zero median": lambda line: json.dumps({**json.loads(line),
                                            "timing": {**json.loads(line)["timing"], "median_s": 0}}),
    "negative peak": lambda line: json.dumps({**json.loads(line), "memory": {"host.max_rss": -5}}),
    "float peak": lambda line: json.dumps({**json.loads(line), "memory": {"host.max_rss": 1.5}}),
    "NaN sample": lambda line: json.dumps({**json.loads(line),
                                           "timing": {**json.loads(line)["timing"], "steps": 1,
                                                      "samples_s": [float("nan")]}}),
    "busy over 1": lambda line: json.dumps({**json.loads(line), "gpu_busy": {"fraction": 1.5}}),
    "devices a list": lambda line: json.dumps({**json.loads(line),
                                               "environment": {**json.loads(line)["environment"], "devices": []}}),
    "params a list": lambda line: json.dumps({**json.loads(line), "params": ["probe"]}),
    "huge int": lambda line: json.dumps({**json.loads(line), "work": {"bytes": 10**400}}),
    "cut mid-line": lambda line: line[:len(line) // 2],
}


@pytest.mark.parametrize("side", ["base", "new"])
@pytest.mark.parametrize("how", sorted(HOSTILE))
def test_an_invalid_record_exits_2_naming_file_and_line(tmp_path, capsys, side, how):
    lines = H100_RUN.read_text().splitlines()
    lines[2] = HOSTILE[how](lines[2])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    args = [str(bad), str(H100_RUN)] if side == "base" else [str(H100_RUN), str(bad)]
    assert cli.main(["gate", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oombench gate: {bad}:3: ") and "Traceback" not in err


# -- input and output -----------------------------------------------------------------------------
def cells_of(line: str) -> list[str]:
    """A markdown table row's cells, stripped (escaped pipes stay inside their cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_markdown_writes_the_verdict_first_then_the_same_rows_as_a_table(tmp_path, capsys):
    again = write(tmp_path / "again.jsonl", fresh(read(H100_RUN)))
    assert cli.main(["gate", str(H100_RUN), str(again), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == r"**PASS\: 0 regression\(s\) in 49 case\(s\) compared\; 0 retired**"
    rows = [cells_of(line) for line in out.splitlines() if line.startswith("|")]
    assert rows[0] == ["", "before", "after", "ratio", "floor", "verdict", "case"]
    assert ["", "1.48 ms", "1.48 ms", "1.000", "2.0% a", "same", "ceilings probe=device_copy"] in rows


def test_the_report_file_holds_the_markdown_table_the_verdict_and_where_to_read_on(tmp_path, capsys):
    slow = write(tmp_path / "slow.jsonl", fresh([scaled(r, 2.0) if r["outcome"] == "ok" and r["timing"] else r
                                                for r in read(H100_RUN)]))
    report = tmp_path / "pr" / "gate.md"
    assert cli.main(["gate", str(H100_RUN), str(slow), "--report", str(report)]) == 1
    text = report.read_text()
    head, verdict = text.splitlines()[:3:2]
    assert head == f"## oombench gate: {markdown.escape(H100_RUN)} against {markdown.escape(slow)}"
    assert verdict.startswith(r"**FAIL\: ")
    rows = [cells_of(line) for line in text.splitlines() if line.startswith("|")]
    assert ["+", "1.48 ms", "2.95 ms", "2.000", "2.0% a", "slower (quartiles)", "ceilings probe=device_copy"] in rows
    assert "[docs/results/seeds.md](docs/results/seeds.md)" in text
    assert "ratio" in capsys.readouterr().out  # the terminal still gets the text table


def test_the_report_is_written_when_the_gate_cannot_compare(tmp_path):
    report = tmp_path / "gate.md"
    assert cli.main(["gate", str(tmp_path / "missing.jsonl"), str(H100_RUN), "--report", str(report)]) == 2
    text = report.read_text()
    assert "**oombench gate could not compare:**" in text and "does not exist" in text
    assert not list(tmp_path.glob(".*.tmp"))  # written whole, through a temporary file


def test_thin_history_says_so_and_uses_the_stated_default(tmp_path):
    (tmp_path / "history").mkdir()
    again = write(tmp_path / "again.jsonl", fresh(read(H100_RUN)))
    rc, text = gate.gate(H100_RUN, again, history=tmp_path / "history")
    assert rc == 0 and "history too thin (fewer than 2 hosts) for 49 case(s): default floors used" in text
    assert "GPU-bound 5%, host-bound 25%, busy unknown 10%" in text


def test_nothing_in_common_is_an_error_not_a_pass(tmp_path):
    other = write(tmp_path / "other.jsonl", [{**read(H100_RUN)[0], "case": "something_else"}])
    rc, text = gate.gate(H100_RUN, other)
    assert rc == 2 and "nothing was compared" in text


@pytest.mark.parametrize("args, says", [
    (["nope", "nope"], "does not exist: pass a record file"),
    ([str(H100_RUN), str(H100_RUN), "--only", "("], "is not a regular expression"),
])
def test_unusable_arguments_exit_2_naming_the_fix(capsys, args, says):
    assert cli.main(["gate", *args]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "-1", "inf", "x"])
def test_gate_numbers_must_be_finite_and_not_negative(capsys, value):
    assert cli.main(["gate", "a", "b", "--threshold", value]) == 2
    err = capsys.readouterr().err
    assert "must be a finite number >= 0" in err and len(err.strip().splitlines()) == 1
