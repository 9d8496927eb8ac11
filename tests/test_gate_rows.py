"""The gate's rows, notes and verdict line, built from planted records and pinned whole: a wrong
word, count or sign in any of them is a wrong verdict on a pull request."""
import pytest

from gate_records import FITS, fits, record
from harness.measure.record import Record
from harness.report import gate, noise
from harness.units import ms


def fit(answer, **check):
    d = fits(answer=answer)
    d["check"] = {**d["check"], **check}
    return Record.from_dict(d)


def row(mark, before, after, ratio, verdict, tally="", floor="any drop", what="answer"):
    return gate.Row(mark, "fits", FITS | {"budget": "24GB"}, what, before, after, ratio, floor, verdict, tally)


def test_a_what_fits_answer_compares_by_its_size_and_names_the_axis():
    assert gate.answer_row(fit(16), fit(16)) == row(" ", "batch 16", "batch 16", "1.000", "same answer")
    assert gate.answer_row(fit(16), fit(20)) == row("-", "batch 16", "batch 20", "1.250", "fits more")
    assert gate.answer_row(fit(16), fit(12)) == row("+", "batch 16", "batch 12", "0.750",
                                                    "fits less: batch 16 -> 12", "fits less")
    stopped = fit(12, too_slow_at=13)
    assert gate.answer_row(fit(16), stopped).verdict == (
        "fits less: batch 16 -> 12 (NEW's search stopped early: its answer is a lower bound)")


@pytest.mark.parametrize("missing", [None, 0, -3, 16.0, True, "16"])
def test_an_answer_that_is_not_a_positive_count_is_absent(missing):
    assert gate.answer_row(fit(missing), fit(16)) == row("x", f"batch {gate.size(missing)}", "batch 16", "-",
                                                         "absent: BASE's search holds no max_batch to compare",
                                                         "no answer", floor="-")
    assert gate.answer_row(fit(16), fit(missing)).verdict == "absent: NEW's search holds no max_batch to compare"


def test_a_search_over_sequence_length_says_so():
    def seq(n):
        d = fits()
        d["params"] = {**d["params"], "over": "seq_len"}
        d["check"] = {**d["check"], "max_seq_len": n}
        d["check"].pop("max_batch")
        return Record.from_dict(d)
    got = gate.answer_row(seq(2048), seq(1024))
    assert (got.before, got.after, got.verdict) == ("seq_len 2048", "seq_len 1024", "fits less: seq_len 2048 -> 1024")


def test_a_lost_case_shows_its_time_before_and_what_became_of_it():
    base = Record.from_dict(record(median=0.25))
    assert gate.lost_row(base, "failed", "failed: boom", "lost") == gate.Row(
        "x", "ceilings", {"probe": "device_copy"}, "outcome", ms(0.25), "failed", "-", "-",
        "failed: boom", "lost")


def test_a_record_is_on_the_card_unless_it_ran_on_the_cpu_or_had_none():
    assert gate.on_card(Record.from_dict(record()))
    assert not gate.on_card(Record.from_dict(record(params={"probe": "device_copy", "device": "cpu"})))
    assert not gate.on_card(Record.from_dict(record(gpu=None)))


def test_a_list_shows_five_and_counts_the_rest():
    assert gate.listed("only in new", []) == []
    assert gate.listed("t", list("abcde")) == ["t: a", "t: b", "t: c", "t: d", "t: e"]
    assert gate.listed("t", list("abcdefg"), shown=2) == ["t: a", "t: b", "t: ... and 5 more"]


def test_the_verdict_line_counts_regressions_by_kind():
    report = gate.Report(compared=7, retired=["x"])
    assert gate.verdict(report) == "PASS: 0 regression(s) in 7 case(s) compared; 1 retired"
    report.rows = [row("+", "", "", "", "", "slower"), row("x", "", "", "", "", "lost"),
                   row("+", "", "", "", "", "slower"), row("-", "", "", "", "", "")]
    assert gate.verdict(report) == "FAIL: 3 regression(s) (1 lost, 2 slower) in 7 case(s) compared; 1 retired"


def test_a_refusal_is_one_line_per_line_and_bold_first_in_markdown():
    e = gate.GateError("BASE is empty\nfirst reason\nsecond <b>")
    assert gate.refusal(e, "text") == "oombench gate: BASE is empty\nfirst reason\nsecond <b>"
    md = gate.refusal(e, "markdown").splitlines()
    assert md[0] == "**oombench gate could not compare:** BASE is empty" and md[1] == ""
    assert len(md) == 4 and md[2].startswith("- first reason") and "<b>" not in md[3]
    assert gate.refusal(gate.GateError("alone"), "markdown") == "**oombench gate could not compare:** alone"


def test_the_report_names_both_sets_and_the_pattern_and_ends_where_to_read_on(tmp_path):
    path = tmp_path / "deep" / "report.md"
    gate.write_report(path, "BODY", "base.jsonl", "new.jsonl", "host_copy")
    text = path.read_text()
    assert text.startswith("## oombench gate: base\\.jsonl against new\\.jsonl (cases matching host\\_copy)\n\nBODY\n\n")
    assert text.endswith(gate.READ_MORE + "\n")
    gate.write_report(path, "BODY", "a", "b", None)
    assert path.read_text().splitlines()[0] == "## oombench gate: a against b"


def test_provenance_names_machines_commits_libraries_and_hosts():
    a = record(host="host-b", commit="0123456789abcdef")
    b = record(host="host-a", commit=None, gpu=None)
    b["environment"]["libraries"] = {"numpy": "2.0", "scipy": "1.0", "torch": "2.11.0"}
    text = gate.provenance([Record.from_dict(a), Record.from_dict(b)])
    machines, commits, libs, hosts = text.split(" | ")
    assert machines.split("; ")[0].startswith("CPU ") and machines.split("; ")[0].endswith(" x16")
    assert commits == "commit 01234567, none"
    assert libs == "numpy 2.0, torch 2.11.0 / torch 2.11.0"
    assert hosts == "host host-a, host-b"


def test_each_refusal_names_the_side_and_the_fix(tmp_path):
    from gate_records import write
    h100 = write(tmp_path / "h100.jsonl", [record()])
    cpu = write(tmp_path / "cpu.jsonl", [record(gpu=None)])
    other = write(tmp_path / "other.jsonl", [record(params={"probe": "host_copy"})])
    missing = tmp_path / "none"
    kind = gate.noise.kind_of(Record.from_dict(record()))
    cpu_kind = gate.noise.kind_of(Record.from_dict(record(gpu=None)))
    assert gate.gate(h100, h100, history=missing) == (2, (
        f"oombench gate: --history {missing} does not exist: pass a folder of records to learn the noise floors "
        "from, or leave --history out for results/records"))
    rc, text = gate.gate(missing, h100)
    assert rc == 2 and text.startswith(f"oombench gate: BASE {missing} does not exist")
    rc, text = gate.gate(h100, missing)
    assert rc == 2 and text.startswith(f"oombench gate: NEW {missing} does not exist")
    assert gate.gate(h100, cpu, history=h100) == (2, (
        f"oombench gate: BASE is {kind} and NEW is {cpu_kind}: compare records of one machine kind, or pass "
        "--cross-machine to match on case and parameters alone"))
    assert gate.gate(h100, other, history=h100) == (2, (
        "oombench gate: no case is in both sets, so nothing was compared: check that BASE and NEW measured the "
        "same cases (e.g. `python3 -m harness run --bench ceilings.Host` for the CPU cases), or widen --only"))
    rc, text = gate.gate(h100, cpu, history=h100, cross_machine=True)
    assert rc == 0 and f"floors are those of BASE's kind ({kind})" in text


def test_a_report_that_cannot_be_written_says_why_and_where(tmp_path):
    from gate_records import write
    h100 = write(tmp_path / "h100.jsonl", [record()])
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc, text = gate.gate(h100, h100, history=h100, report=blocker / "report.md")
    assert rc == 2 and text.splitlines()[-1].startswith(f"oombench gate: the report could not be written to {blocker / 'report.md'} (")
    assert text.endswith("): pass --report a file in a folder you can write") and "(None)" not in text


def planted(*host_medians, probe="device_copy") -> list[Record]:
    return [Record.from_dict(record(params={"probe": probe}, median=m, host=h, run=f"20990101T00000{i}-aaaaaa",
                                    created=float(i))) for i, (h, m) in enumerate(host_medians)]


def test_across_hosts_a_case_whose_hosts_differ_past_the_aim_is_listed_with_harness_compare_named():
    wide = planted(("a", 0.010), ("b", 0.0106), ("c", 0.0103))
    close = planted(("a", 0.010), ("b", 0.0101), probe="matmul_fp32")
    floors = noise.Floors(wide + close)
    new = [Record.from_dict(record(params={"probe": p}, median=0.0104, host="d", run="20991231T000000-bbbbbb",
                                   created=9.0)) for p in ("device_copy", "matmul_fp32")]
    report = gate.compare([wide[0], close[0]], new, floors)
    listed = 'host-limited: ceilings {"probe": "device_copy"}: floor 12.0%, learned across 3 hosts up to 6.0% apart'
    assert gate.notes(report, gate.Options(), "kind")[1:] == [
        "across hosts, a slowdown under the floor cannot be told from the host: 1 case(s) with a floor past 5%; "
        "measure both commits on one box in one session, python3 -m harness compare BASE NEW", listed]
    steady = gate.compare([close[0]], new[1:], floors)
    assert len(steady.rows) == 1 and gate.notes(steady, gate.Options(), "kind")[1:] == []


def test_a_pair_on_one_host_is_not_listed_where_its_own_runs_differ_more_than_its_hosts():
    history = planted(("a", 0.010), ("a", 0.012), ("b", 0.0107), ("c", 0.010))
    floors = noise.Floors(history)
    assert floors.floor(noise.key_of(history[0]), "GPU-bound", same_host=True).host_limited  # across: the narrower
    new = Record.from_dict(record(median=0.0105, host="a", run="20991231T000000-bbbbbb", created=9.0))
    assert gate.compare([history[0]], [new], floors).host_limited == []
