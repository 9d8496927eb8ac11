"""The gate's rows, notes and verdict line, built from planted records and pinned whole: a wrong
word, count or sign in any of them is a wrong verdict on a pull request."""
import dataclasses

import pytest

from gate_records import FITS, fits, record
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report import gate, markdown, noise
from harness.units import ms

GB = 10**9


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
    path = tmp_path / "deep" / "er" / "report.md"
    gate.write_report(path, "BODY", "base.jsonl", "new.jsonl", "host_copy")
    text = path.read_text()
    assert text.startswith("## oombench gate: base\\.jsonl against new\\.jsonl (cases matching host\\_copy)\n\n"
                           "BODY\n\n")
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
    assert not machines.split("; ")[1].startswith("CPU ")  # a GPU machine by its card
    c = record(host="", gpu=None)  # a record of a CPU box made before hosts were kept
    c["environment"]["libraries"] = {"cupy-cuda13x": "14", "cupy-cuda12x": "13", "chainer": "7", "scipy": "1"}
    assert gate.provenance([Record.from_dict(c)]).split(" | ")[2:] == ["chainer 7, cupy-cuda12x 13, cupy-cuda13x 14",
                                                                       "host unknown"]


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


def test_every_note_reads_so():
    report = gate.Report(defaults=2, few_steps=1, allowed=["schema: a"], memory_apart=["b"], retired=list("cdefgh"),
                         not_compared=["i"], only_new=["j"])
    opts = gate.Options(threshold=0.05, k=3.0, min_bytes=128 * 10**6, cross_machine=True, rounds=True)
    assert gate.notes(report, opts, "H100") == [
        "rule: slower when the median ratio exceeds 1 + floor and the steps differ (one-sided Mann-Whitney "
        f"p < {gate.noise.ALPHA} on raw step times, else medians more than 3 standard errors apart, each read from its "
        "IQR; with too few steps for either test, the ratio alone); floor a = learned across hosts, w = within one "
        "host, d = default; bigger when a peak grows by more than max(128.0 MB, 5%); a what-fits search by its answer "
        "and the peak of the probe at it, never its wall time",
        "rounds: each side's time is the median of its rounds' medians, the rank test over all its rounds' steps; "
        "floors learned from BASE's rounds alone, at least 1.5%, a host-bound step's at least its widest scatter on "
        "one host in earlier compares",
        "cross-machine: matched on case and parameters alone, NEW's record of BASE's kind first; floors are those of "
        "BASE's kind (H100)",
        "history too thin (fewer than 2 hosts) for 2 case(s): default floors used (GPU-bound 5%, host-bound 25%, "
        "busy unknown 10%)",
        f"too few steps for a test (under {gate.noise.ALPHA} unreachable) in 1 case(s): judged on the ratio of medians "
        "against the floor alone",
        "allowed by --allow: schema: a",
        "memory not compared across machine kinds (not under one budget, or the card or host set it): b",
        *[f"retired (NEW's code no longer declares it): {c}" for c in "cdefg"],
        "retired (NEW's code no longer declares it): ... and 1 more",
        "not compared: i", "only in new: j"]
    assert gate.notes(gate.Report(), gate.Options(), "H100")[1:] == []


def test_text_ends_with_the_verdict_and_markdown_starts_with_it():
    a, b = Record.from_dict(record()), Record.from_dict(record(gpu=None, host="host-b"))
    report = gate.Report(rows=[gate.lost_row(a, "missing", "missing", "missing")], compared=1, only_new=["j"])
    opts = gate.Options(cross_machine=True)
    text = gate.render(report, [a], [b], opts, "H100", "text").splitlines()
    assert text[:2] == [f"base: {gate.provenance([a])}", f"new:  {gate.provenance([b])}"]
    assert text[2].split() == ["before", "after", "ratio", "floor", "verdict", "case"]
    assert text[-3:] == [gate.notes(report, opts, "H100")[1], "only in new: j", gate.verdict(report)]
    md = gate.render(report, [a], [b], opts, "H100", "markdown").splitlines()
    assert md[:5] == [r"**FAIL\: 1 regression\(s\) \(1 missing\) in 1 case\(s\) compared\; 0 retired**", "",
                      f"- base\\: {markdown.escape(gate.provenance([a]))}",
                      f"- new\\: {markdown.escape(gate.provenance([b]))}", ""]
    assert md[5].split()[:3] == ["|", "|", "before"] and md[7].startswith("| x  |") and md[8] == ""
    assert md[-2:] == ["- " + markdown.escape("cross-machine: matched on case and parameters alone, NEW's record of "
                                              "BASE's kind first; floors are those of BASE's kind (H100)"),
                       "- only in new\\: j"]


def test_a_median_s_standard_error_is_read_from_its_iqr():
    # sigma = IQR / 1.349 for a normal sample; a median of n steps errs by 1.2533 sigma / sqrt(n)
    from types import SimpleNamespace
    assert gate.median_se(SimpleNamespace(iqr_s=1.349 * 2, steps=16)) == pytest.approx(1.2533 * 2 / 4)
    assert gate.size(1) == 1 and gate.size(0) is None


def test_one_kind_names_what_a_side_mixes():
    a, b = Record.from_dict(record()), Record.from_dict(record(gpu=None))
    assert gate.one_kind([], "BASE", False) == ""
    assert gate.one_kind([a, b], "NEW", True) == min(gate.noise.kind_of(a), gate.noise.kind_of(b))
    with pytest.raises(gate.GateError) as e:
        gate.one_kind([a, b], "NEW", False)
    kinds = ", ".join(sorted([gate.noise.kind_of(a), gate.noise.kind_of(b)]))
    assert str(e.value) == (f"NEW mixes machine kinds ({kinds}): name one machine's folder "
                            "(results/records/<machine>), or pass --cross-machine to match on case and parameters "
                            "alone")


def test_floors_from_base_itself_are_at_least_the_session_floor_only_for_rounds(tmp_path, monkeypatch):
    from gate_records import write
    recs = [Record.from_dict(record())]
    path = write(tmp_path / "base.jsonl", [record()])
    assert gate.history_floors(path, path, recs).least == gate.noise.MIN_FLOOR
    assert gate.history_floors(path, path, recs, session=True).least == gate.noise.SESSION_MIN_FLOOR
    seen = []
    real = gate.history_floors
    monkeypatch.setattr(gate, "history_floors", lambda *a: seen.append(a[3]) or real(*a))
    new = write(tmp_path / "new.jsonl", [record(run="20990102T000000-bbbbbb", created=2.0)])
    assert gate.gate(path, new, history=path, all_rounds=True)[0] == 0
    assert gate.gate(path, new, history=path)[0] == 0
    assert seen == [True, False]


def test_a_side_left_empty_by_the_pattern_or_mixing_kinds_is_named(tmp_path):
    from gate_records import write
    h100 = write(tmp_path / "h100.jsonl", [record(), record(params={"probe": "host_copy"})])
    mixed = write(tmp_path / "mixed.jsonl", [record(run="20990102T000000-bbbbbb", created=2.0),
                                             record(params={"probe": "host_copy"}, gpu=None)])
    one = write(tmp_path / "one.jsonl", [record()])
    cpu = gate.noise.kind_of(Record.from_dict(record(gpu=None)))
    rc, text = gate.gate(one, mixed, history=h100, pattern="host_copy")
    assert (rc, text.split(":")[1]) == (2, f" BASE is empty and NEW is {cpu}")
    rc, text = gate.gate(mixed, one, history=h100, pattern="host_copy")
    assert (rc, text.split(":")[1]) == (2, f" BASE is {cpu} and NEW is empty")
    rc, text = gate.gate(h100, mixed, history=h100)
    assert rc == 2 and text.startswith("oombench gate: NEW mixes machine kinds")
    rc, text = gate.gate(mixed, h100, history=h100, cross_machine=True)
    assert rc == 0 and "only in new" not in text  # BASE may mix kinds across machines
    rc, text = gate.gate(h100, mixed, history=h100, pattern="device_copy")
    assert rc == 0 and "only in new" not in text  # the pattern keeps NEW's other case out too
    assert gate.gate(h100, h100, history="")[1].startswith("oombench gate: --history does not exist")
    assert gate.refusal(gate.GateError(""), "text") == "oombench gate:"


def test_the_markdown_report_names_base_kind_across_machines(tmp_path):
    from gate_records import write
    h100 = write(tmp_path / "h100.jsonl", [record()])
    h200 = write(tmp_path / "h200.jsonl", [record(gpu="NVIDIA H200", run="20990102T000000-bbbbbb", created=2.0)])
    kind = gate.noise.kind_of(Record.from_dict(record()))
    gate.gate(h100, h200, history=h100, cross_machine=True, report=tmp_path / "r.md")
    assert markdown.escape(f"floors are those of BASE's kind ({kind})") in (tmp_path / "r.md").read_text()


def test_a_report_that_cannot_be_written_says_why_and_where(tmp_path):
    from gate_records import write
    h100 = write(tmp_path / "h100.jsonl", [record()])
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc, text = gate.gate(h100, h100, history=h100, report=blocker / "report.md")
    assert rc == 2 and text.splitlines()[-1].startswith(
        f"oombench gate: the report could not be written to {blocker / 'report.md'} (")
    assert text.endswith(" (File exists): pass --report a file in a folder you can write")


def test_gate_passes_its_options_through(tmp_path):
    from gate_records import write
    base = write(tmp_path / "base.jsonl", [record()])
    new = write(tmp_path / "new.jsonl", [record(run="20990102T000000-bbbbbb", created=2.0)])
    rc, text = gate.gate(base, new, history=base, pattern="device", all_rounds=True, report=tmp_path / "r.md")
    assert rc == 0 and "else medians more than 2 standard errors apart" in text and "\nrounds: " in text
    assert (tmp_path / "r.md").read_text().startswith(f"## oombench gate: {markdown.escape(base)} against "
                                                      f"{markdown.escape(new)} (cases matching device)")


def peak_row(mark, label, before, after, ratio, floor, verdict, tally):
    return gate.Row(mark, "ceilings", {"probe": "device_copy"}, f"peak {label}", before, after, ratio, floor, verdict,
                    tally)


def test_a_peak_row_says_how_much_it_grew_against_its_floor_or_that_it_is_absent():
    label = "allocator.torch.max_allocated.cuda:0"
    base = Record.from_dict(record(memory={label: 10**9, "host.max_rss": 0}))
    grown = Record.from_dict(record(memory={label: 10**9 + 64 * 10**6 + 1, "host.max_rss": 65 * 10**6}))
    at_floor = Record.from_dict(record(memory={label: 10**9 + 64 * 10**6, "host.max_rss": 0}))
    lacking = Record.from_dict(record(memory={"host.max_rss": 0}))
    opts = gate.Options(min_bytes=64 * 10**6)
    assert gate.peak_rows(base, grown, opts, gate.Report()) == [
        peak_row("+", label, "1.00 GB", "1.06 GB", "1.064", "+64.0 MB", "bigger", "bigger"),
        peak_row("+", "host.max_rss", "0.0 MB", "65.0 MB", "-", "+64.0 MB", "bigger", "bigger")]
    assert gate.peak_rows(base, at_floor, opts, gate.Report()) == []  # exactly the floor is not past it
    assert gate.peak_rows(base, lacking, opts, gate.Report()) == [peak_row(
        "x", label, "1.00 GB", "absent", "-", "-",
        "absent in NEW: a level BASE has (rerun NEW, or --allow missing-level to list it)", "level absent")]


def test_across_kinds_only_the_device_level_is_skipped():
    mem = {"allocator.torch.max_allocated.cuda:0": 10**9, "host.max_rss": 10**9,
           "device.used.gpu0": 10**9, "device.used_before.gpu0": 0}
    base = Record.from_dict(record(memory=mem))
    new = Record.from_dict(record(gpu="NVIDIA H200", memory={k: 5 * v for k, v in mem.items()}))
    rows = gate.peak_rows(base, new, gate.Options(cross_machine=True), gate.Report())
    assert [r.what for r in rows] == ["peak allocator.torch.max_allocated.cuda:0", "peak host.max_rss"]


def test_a_pool_s_used_level_is_a_peak_from_schema_2_on():
    mem = {"allocator.cupy.used": 10**9, "allocator.cupy.held": 2 * 10**9, "allocator.torch.used": 3 * 10**9}
    assert set(gate.peaks(Record.from_dict(record(memory=mem, schema=1)))) == {"allocator.cupy.held",
                                                                                 "allocator.torch.used"}
    assert set(gate.peaks(Record.from_dict(record(memory=mem)))) == set(mem)
    assert gate.peaks(fit(16, peak_allocated_at_max=None)) == {}
    assert gate.peaks(fit(16)) == {gate.PROBE_PEAK: 20_467_567_104}


# -- the time rule, row by row ------------------------------------------------------------------------
class Stub:
    """Floors that give every case one floor."""
    def __init__(self, fraction=0.05, how="learned across 3 hosts", learned=True):
        self.floor_ = gate.noise.Floor(fraction, how, learned)

    def floor(self, key, klass, same_host):
        return self.floor_


def timed(median, n=10, samples=True, iqr=None):
    d = record(median=median, n=n)
    if not samples:
        d["timing"]["samples_s"] = []
    if iqr is not None:
        d["timing"].update(q25_s=median - iqr / 2, q75_s=median + iqr / 2, min_s=median - iqr, max_s=median + iqr)
    return Record.from_dict(d)


def time_row(base, new, floors=None, **opts):
    return gate.time_row(base, new, floors or Stub(), gate.Options(**opts))[0]


def test_the_time_rule_marks_slower_faster_and_same_with_its_test():
    slower = time_row(timed(0.01), timed(0.02))
    assert (slower.mark, slower.ratio, slower.floor, slower.verdict, slower.tally) == (
        "+", "2.000", "5.0% a", "slower (rank p=9.1e-05)", "slower")
    faster = time_row(timed(0.02), timed(0.01))
    assert (faster.mark, faster.verdict, faster.tally) == ("-", "faster", "")
    assert time_row(timed(0.01), timed(0.01)).verdict == "same"
    # by the quartiles, without raw steps: the same either way
    assert time_row(timed(0.01, samples=False), timed(0.02, samples=False)).verdict == "slower (quartiles)"
    assert time_row(timed(0.02, samples=False), timed(0.01, samples=False)).mark == "-"
    # too few steps for a test: the ratio decides alone, either way
    few = time_row(timed(0.02, n=3), timed(0.01, n=3))
    assert (few.mark, few.verdict) == ("-", "faster (ratio alone: 3 and 3 steps)")
    assert time_row(timed(0.01, n=3), timed(0.0101, n=3)).verdict == "same (ratio alone: 3 and 3 steps)"


def test_a_ratio_exactly_at_the_floor_is_same_either_way():
    assert time_row(timed(1.0, n=3), timed(1.05, n=3)).mark == " "  # 1.05 / 1.0 is 1 + 5%: not over it
    assert time_row(timed(1.05, n=3), timed(1.0, n=3)).mark == " "
    assert time_row(timed(1.0, n=3), timed(0.5, n=3), Stub(0.0)).mark == "-"


def test_the_quartile_rule_needs_k_standard_errors_of_the_difference_of_both_medians():
    # each median errs by 1.2533 * IQR / 1.349 / sqrt(10); k = 2 of the difference's (sqrt(2) of one)
    se = 1.2533 * 0.01 / 1.349 / 10**0.5
    gap = 1.2 * 2 * se  # over k errors of one median, under k errors of the difference
    rows = [time_row(timed(1.0, samples=False, iqr=0.01), timed(1.0 + sign * gap, samples=False, iqr=0.01), Stub(0.0))
            for sign in (1, -1)]
    assert [r.mark for r in rows] == [" ", " "]
    rows = [time_row(timed(1.0, samples=False, iqr=0.01), timed(1.0 + sign * 1.5 * gap, samples=False, iqr=0.01),
                     Stub(0.0)) for sign in (1, -1)]
    assert [r.mark for r in rows] == ["+", "-"]


def test_the_floor_says_where_it_was_learned():
    within = Stub(0.03, "learned within 1 host(s)")
    default = Stub(0.1, "default (busy unknown): history has 1 host(s)", learned=False)
    assert time_row(timed(0.01), timed(0.01), within).floor == "3.0% w"
    assert time_row(timed(0.01), timed(0.01), default).floor == "10.0% d"
    assert time_row(timed(0.01), timed(0.01), default, threshold=0.2).floor == "20.0% d"


# -- what is compared, case by case -------------------------------------------------------------------
def later(rec: dict, **fields) -> dict:
    return {**rec, "run_id": "20990102T000000-bbbbbb", "created": rec["created"] + 1, **fields}


def test_compare_lists_each_case_it_could_not_compare_as_it_was_and_fails_each_lost_one():
    from harness.measure.outcomes import FAILED
    skipped_base = record(params={"probe": "host_copy"}, outcome="skipped", timing=None, reason="no card")
    failed = record(params={"probe": "matmul_fp32"})
    copied = record(params={"probe": "matmul_tf32"})
    missing = record(params={"probe": "matmul_fp16"})
    retired = record("ceilings", {"probe": "no_such_probe"})
    base = [skipped_base, failed, copied, missing, retired]
    new = [later(skipped_base), later(failed, outcome=FAILED, timing=None, reason=None), copied,
           record(params={"probe": "matmul_bf16"}), later(record(median=0.02))]
    report = gate.compare([Record.from_dict(r) for r in base + [record()]], [Record.from_dict(r) for r in new],
                          Stub(), gate.Options())
    by_case = {r.params["probe"]: r for r in report.rows}
    assert by_case["matmul_fp32"] == gate.lost_row(Record.from_dict(failed), "failed", "ok -> failed: no reason given",
                                                   "lost")
    assert by_case["matmul_tf32"] == gate.lost_row(
        Record.from_dict(copied), "BASE's record",
        "copied: NEW holds BASE's own record, not a measurement of its own", "not measured again")
    assert by_case["matmul_fp16"] == gate.lost_row(Record.from_dict(missing), "missing",
                                                   "missing: ok in base, not measured in new", "missing")
    assert by_case["device_copy"].mark == "+"
    assert report.not_compared == ['ceilings {"probe": "host_copy"}: base is skipped, new is skipped']
    assert report.retired == ['ceilings {"probe": "no_such_probe"}']
    assert report.only_new == ['ceilings {"probe": "matmul_bf16"}']
    assert (report.compared, report.common) == (1, 4)


def test_compare_counts_cases_judged_on_the_ratio_alone_and_on_default_floors():
    base = [record(params={"probe": p}, n=3) for p in ("a", "b", "c")]
    report = gate.compare([Record.from_dict(r) for r in base], [Record.from_dict(later(r)) for r in base],
                          Stub(learned=False), gate.Options())
    assert (report.few_steps, report.defaults, report.compared) == (3, 3, 3)


def test_a_case_of_two_schemas_fails_with_both_named():
    base = Record.from_dict(record(memory={"host.max_rss": GB}, schema=1))
    new = Record.from_dict(later(record(memory={"host.max_rss": GB})))
    assert gate.memory_rows(base, new, gate.Options(), gate.Report()) == [gate.Row(
        "x", "ceilings", {"probe": "device_copy"}, "peaks", "schema 1", f"schema {new.schema}", "-", "-",
        "unlike schemas: memory levels changed meaning (rerun BASE at NEW's schema, or --allow schema to compare "
        "times alone)", "unlike schemas")]


def test_params_are_written_with_sorted_keys_and_a_search_without_over_searched_the_batch():
    assert gate.params_text(Record.from_dict(record(params={"b": 1, "a": 2}))) == '{"a": 2, "b": 1}'
    d = fits()
    del d["params"]["over"]
    assert gate.answer_key(Record.from_dict(d)) == "max_batch"


def test_memory_is_apart_only_across_kinds_and_where_a_card_took_part():
    h100, h200 = Record.from_dict(record()), Record.from_dict(record(gpu="NVIDIA H200"))
    cpu = Record.from_dict(record(gpu=None))
    across = gate.Options(cross_machine=True)
    card = "memory not compared across machine kinds: not under one emulated budget (the card is the limit)"
    assert gate.apart(h100, h200, gate.Options()) is None
    assert gate.apart(h100, h200, across) == card and gate.apart(h100, cpu, across) == card
    assert gate.apart(h100, h100, across) is None
    on_host = fit(16, host_short_at=17)
    other = Record.from_dict({**fits(gpu="NVIDIA H200"), "check": {**fits()["check"]}})
    host = "memory not compared across machine kinds: the host's memory set the answer"
    assert gate.apart(other, on_host, across) == host and gate.apart(on_host, other, across) == host
    assert gate.apart(other, fit(16), across) is None


def test_each_side_s_rounds_are_paired_by_case():
    a, b = record(params={"probe": "a"}), record(params={"probe": "b"})
    pairs = gate.pairs([Record.from_dict(a)], [Record.from_dict(later(a)), Record.from_dict(b)], all_rounds=True)
    assert [(k[1], [r is not None for r in v]) for k, v in pairs.items()] == [('{"probe": "a"}', [True, True]),
                                                                             ('{"probe": "b"}', [False, True])]
    latest = gate.pairs([Record.from_dict(a)], [Record.from_dict(later(a))], all_rounds=False)
    assert latest[("ceilings", '{"probe": "a"}')][1].created == 2.0


def test_a_set_that_is_not_all_records_is_refused_with_each_line(tmp_path):
    from gate_records import write
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(gate.GateError) as e:
        gate.load_set(empty)
    assert str(e.value) == (f"no record in set {empty}: run `python3 -m harness run` first, or name the folder "
                            "results/records/<machine>")
    with pytest.raises(gate.GateError) as e:
        gate.load_set(tmp_path / "none")
    assert str(e.value).endswith("pass a record file (.jsonl) or a folder of them, e.g. results/records/<machine>")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join("{}\n" for _ in range(12)))
    with pytest.raises(gate.GateError) as e:
        gate.load_set(bad, "NEW")
    lines = str(e.value).splitlines()
    assert len(lines) == 11
    assert lines[0].endswith(" (NEW: 12 invalid line(s); fix or remove them, or re-run those cases)")
    assert lines[1].startswith(f"{bad}:2:") and lines[-1] == "... and 2 more"
    write(bad, [{} for _ in range(10)])
    with pytest.raises(gate.GateError) as e:
        gate.load_set(bad)
    assert len(str(e.value).splitlines()) == 10  # all ten shown, no "and 0 more"
    write(bad, [{} for _ in range(11)])
    with pytest.raises(gate.GateError) as e:
        gate.load_set(bad)
    assert str(e.value).splitlines()[-1] == "... and 1 more"



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


def stepped(times, host="host-a") -> Record:
    rec = Record.from_dict(record(host=host))
    return dataclasses.replace(rec, timing=Timing.from_samples(times, warmup=2))


@pytest.mark.parametrize("base, factor, verdict", [
    ([0.010, 0.012] * 5, 1.06, "same: not told from the steps' scatter (rank p=0.028)"),  # past the floor, steps apart
    ([0.010, 0.0101] * 5, 1.06, "slower (rank p=5.7e-05)"),  # the same rise over steady steps
    ([0.010, 0.012] * 5, 1.02, "same"),  # under the floor: nothing to tell
])
def test_a_rise_past_the_floor_that_the_steps_scatter_hides_says_so(base, factor, verdict):
    new = [t * factor for t in base]
    row, _ = gate.time_row(stepped(base), stepped(new), noise.Floors([]), gate.Options())
    assert (row.mark, row.verdict) == (" " if verdict.startswith("same") else "+", verdict)
