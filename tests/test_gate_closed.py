"""The gate fails closed: what it cannot compare is a failure with the reason unless an --allow
named in the report lets it through; what-fits records are compared by their answer and the
probe's peak at it; memory across machine kinds only like with like; the time and peak floors
(--threshold, --min-mb) each decide a verdict. Every record is planted here."""
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate_records import H100, H200, fits, record, write
from harness.drive.commands import cli
from harness.report import gate
from harness.units import MB

GB = 10**9


@pytest.fixture
def history(tmp_path):
    """No history: every floor is the stated default (GPU-bound 5% for these busy records)."""
    (tmp_path / "history").mkdir()
    return tmp_path / "history"


def run_gate(tmp_path, base: list[dict], new: list[dict], history, **kw) -> tuple[int, str]:
    return gate.gate(write(tmp_path / "base.jsonl", base), write(tmp_path / "new.jsonl", new), history=history, **kw)


def new_run(rec: dict, **fields) -> dict:
    """The same case measured again, by a later run."""
    return {**rec, "run_id": "20990102T000000-bbbbbb", "created": rec["created"] + 1, **fields}


def regressions(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:1] in "+x"]


# -- what it cannot compare -------------------------------------------------------------------------
@pytest.mark.parametrize("schema", [1, None], ids=["schema 1", "no schema"])
def test_peaks_of_another_schema_fail_unless_allowed(tmp_path, history, schema):
    base = record(memory={"host.max_rss": GB})
    new = new_run(base, memory={"host.max_rss": 10 * GB}, schema=schema)
    if schema is None:
        del new["schema"]
    rc, text = run_gate(tmp_path, [base], [new], history)
    assert rc == 1 and "unlike schemas" in text and "--allow schema" in text
    assert "FAIL: 1 regression(s) (1 unlike schemas)" in text
    rc, text = run_gate(tmp_path, [base], [new], history, allow=["schema"])
    assert rc == 0 and "allowed by --allow: schema: ceilings" in text


def test_a_peak_level_new_lacks_fails_unless_allowed(tmp_path, history):
    base = record(memory={"host.max_rss": GB, "allocator.torch.max_allocated.cuda:0": GB})
    new = new_run(base, memory={"allocator.torch.max_allocated.cuda:0": GB})
    rc, text = run_gate(tmp_path, [base], [new], history)
    assert rc == 1 and [line for line in regressions(text) if "[peak host.max_rss]" in line and "absent in NEW" in line]
    rc, text = run_gate(tmp_path, [base], [new], history, allow=["missing-level"])
    assert rc == 0 and "allowed by --allow: missing-level: ceilings" in text and "host.max_rss" in text


def test_an_unknown_allowance_is_refused(tmp_path, history):
    base = record()
    rc, text = run_gate(tmp_path, [base], [new_run(base)], history, allow=["everything"])
    assert rc == 2 and "--allow everything" in text and "schema" in text and "missing-level" in text


@pytest.mark.parametrize("with_samples", [True, False], ids=["raw steps", "quartiles only"])
def test_a_huge_rise_over_too_few_steps_is_judged_on_the_ratio(tmp_path, history, with_samples):
    base = record(median=0.01, n=2)
    slow, steady = new_run(record(median=1.13, n=2)), new_run(record(median=0.0101, n=2))
    if not with_samples:
        for r in (base, slow, steady):
            r["timing"]["samples_s"] = []
    rc, text = run_gate(tmp_path, [base], [slow], history)
    assert rc == 1 and "slower (ratio alone: 2 and 2 steps)" in text
    rc, text = run_gate(tmp_path, [base], [steady], history)
    assert rc == 0 and "same (ratio alone: 2 and 2 steps)" in text and "too few steps for a test" in text


def test_six_steps_a_side_are_judged_by_the_rank_test(tmp_path, history):
    base = record(median=0.01, n=6)
    rc, text = run_gate(tmp_path, [base], [new_run(record(median=0.02, n=6))], history)
    assert rc == 1 and "slower (rank p=" in text and "judged on the ratio of medians" not in text


def test_the_same_records_on_both_sides_are_refused(tmp_path, history):
    path = write(tmp_path / "run.jsonl", [record(), record(params={"probe": "host_copy"})])
    folder = tmp_path / "folder"
    folder.mkdir()
    copy = folder / "copy.jsonl"
    shutil.copy(path, copy)
    for base, new in ((path, path), (path, copy), (folder, copy)):
        rc, text = gate.gate(base, new, history=history)
        assert rc == 2 and text == ("oombench gate: BASE and NEW hold the same 2 record(s): the gate compares two "
                                    "measurements; pass the records of the run to judge as NEW (e.g. a fresh "
                                    "--results folder)"), (base, new)


def test_a_case_new_did_not_measure_again_fails(tmp_path, history):
    a, b = record(), record(params={"probe": "host_copy"})
    rc, text = run_gate(tmp_path, [a, b], [a, new_run(b)], history)
    assert rc == 1 and "copied: NEW holds BASE's own record" in text and "(1 not measured again)" in text


def test_cross_machine_keeps_new_record_of_base_kind(tmp_path, history):
    base = record(median=0.01, gpu=H100)
    same_kind_slower = new_run(record(median=0.03, gpu=H100, host="host-b"))
    other_kind_newer = {**new_run(record(median=0.01, gpu=H200, host="host-c")), "created": 99.0}
    rc, text = run_gate(tmp_path, [base], [same_kind_slower, other_kind_newer], history, cross_machine=True)
    assert rc == 1 and "slower" in text
    rc, text = run_gate(tmp_path, [base], [other_kind_newer], history, cross_machine=True)
    assert rc == 0, text  # where NEW has no record of BASE's kind, its other kind stands in


def test_history_that_does_not_exist_is_refused(tmp_path, capsys):
    base = record()
    paths = [str(write(tmp_path / "b.jsonl", [base])), str(write(tmp_path / "n.jsonl", [new_run(base)]))]
    assert cli.main(["gate", *paths, "--history", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert "--history" in err and "does not exist" in err
    assert "history too thin" not in err


def test_a_report_that_cannot_be_written_exits_2_even_on_a_pass(tmp_path, history):
    base = record()
    rc, text = run_gate(tmp_path, [base], [new_run(base)], history)
    assert rc == 0
    rc, text = run_gate(tmp_path, [base], [new_run(base)], history, report=history)  # a folder
    assert rc == 2 and "the report could not be written" in text and not list(tmp_path.glob("**/.*.tmp"))


# -- what fits --------------------------------------------------------------------------------------
def test_what_fits_with_the_same_answer_passes_whatever_its_search_time_and_device_level(tmp_path, history):
    base = fits(answer=16, median=31.0, device_level=24 * GB)
    new = new_run(fits(answer=16, median=62.0, device_level=67 * GB, peak=20_467_567_104 + 65_536))
    rc, text = run_gate(tmp_path, [base], [new], history)
    assert rc == 0 and "same answer" in text, text
    assert regressions(text) == [] and "[peak device" not in text and " ms" not in text  # no time row


def test_what_fits_whose_answer_drops_by_one_size_fails(tmp_path, history):
    rc, text = run_gate(tmp_path, [fits(answer=16)], [new_run(fits(answer=15))], history)
    assert rc == 1 and "fits less: batch 16 -> 15" in text and "(1 fits less)" in text


def test_what_fits_with_a_bigger_peak_at_the_same_answer_fails(tmp_path, history):
    rc, text = run_gate(tmp_path, [fits(answer=16, peak=20 * GB)], [new_run(fits(answer=16, peak=22 * GB))], history)
    assert rc == 1 and [line for line in regressions(text) if "[peak allocated by the probe at the answer]" in line]


def test_what_fits_that_fits_more_passes(tmp_path, history):
    rc, text = run_gate(tmp_path, [fits(answer=16, peak=20 * GB)], [new_run(fits(answer=17, peak=22 * GB))], history)
    assert rc == 0 and "fits more" in text


def test_what_fits_across_machines_compares_answers_under_one_budget_only(tmp_path, history):
    base = [fits("24GB", 16, gpu=H100), fits("card", 60, gpu=H100)]
    same = [new_run(fits("24GB", 16, gpu=H200, host="h200")), new_run(fits("card", 110, gpu=H200, host="h200"))]
    rc, text = run_gate(tmp_path, base, same, history, cross_machine=True)
    assert rc == 0 and "same answer" in text and "budget=24GB" in text
    assert "not compared: fits" in text and "the card is the limit" in text
    less = [new_run(fits("24GB", 15, gpu=H200, host="h200")), same[1]]
    rc, text = run_gate(tmp_path, base, less, history, cross_machine=True)
    assert rc == 1 and "fits less: batch 16 -> 15" in text


def test_a_host_bound_answer_is_not_compared_across_machines(tmp_path, history):
    base = fits("24GB", 16)
    base["check"]["host_short_at"] = 17
    rc, text = run_gate(tmp_path, [base], [new_run(fits("24GB", 12, gpu=H200, host="h200"))], history,
                        cross_machine=True)
    # Its one case not compared, nothing was: no verdict (exit 2), the reason named.
    assert rc == 2 and "no case was compared" in text and "the host's memory set the answer" in text
    assert "fits less" not in text


# -- memory across machine kinds --------------------------------------------------------------------
def test_memory_on_the_whole_card_is_not_compared_across_kinds(tmp_path, history):
    peak = "allocator.torch.max_allocated.cuda:0"
    base = record(memory={peak: GB})
    new = new_run(record(memory={peak: 3 * GB}, gpu=H200, host="h200"))
    rc, text = run_gate(tmp_path, [base], [new], history, cross_machine=True)
    assert rc == 0 and "or the card or host set it): ceilings {\"probe\": \"device_copy\"}" in text
    rc, text = run_gate(tmp_path, [base], [new], history)
    assert rc == 2  # without --cross-machine two kinds are refused outright


def test_memory_under_one_budget_is_compared_across_kinds_but_never_the_device_level(tmp_path, history):
    peak = "allocator.torch.max_allocated.cuda:0"
    budget = {"name": "16GB", "limit_bytes": 16 * GB, "card_bytes": 1, "enforced": "torch"}
    base = record("toy", {"budget": "16GB"}, memory={peak: GB, "device.used.gpu0": GB}, budget=budget)
    new = new_run(record("toy", {"budget": "16GB"}, gpu=H200, host="h200", budget=budget,
                         memory={peak: 3 * GB, "device.used.gpu0": 9 * GB}))
    rc, text = run_gate(tmp_path, [base], [new], history, cross_machine=True)
    bigger = [line for line in regressions(text) if "bigger" in line]
    assert rc == 1 and len(bigger) == 1 and f"[peak {peak}]" in bigger[0]


def test_host_memory_of_cpu_cases_is_compared_across_kinds(tmp_path, history):
    base = record(params={"probe": "host_copy"}, gpu=None, memory={"host.max_rss": GB})
    new = new_run(record(params={"probe": "host_copy"}, gpu=None, host="other-cpu", memory={"host.max_rss": 2.1 * GB}))
    new["environment"]["cpu"] = "Another CPU"
    new["memory"]["host.max_rss"] = int(new["memory"]["host.max_rss"])
    rc, text = run_gate(tmp_path, [base], [new], history, cross_machine=True, threshold=1.0)
    assert rc == 1 and "[peak host.max_rss]" in text


# -- the floors that decide (each is pinned: dropping it turns a verdict) ---------------------------
def test_threshold_raises_the_time_floor(tmp_path, history):
    base = record(median=0.01)
    slower = new_run(record(median=0.015))
    assert run_gate(tmp_path, [base], [slower], history)[0] == 1  # +50% over the 5% default floor
    rc, text = run_gate(tmp_path, [base], [slower], history, threshold=1.0)
    assert rc == 0 and "100.0% d" in text
    assert run_gate(tmp_path, [base], [new_run(record(median=0.025))], history, threshold=1.0)[0] == 1


def test_threshold_raises_the_peak_floor(tmp_path, history):
    base = record(memory={"host.max_rss": 4 * GB})
    grown = new_run(base, memory={"host.max_rss": 6 * GB})
    assert run_gate(tmp_path, [base], [grown], history)[0] == 1
    assert run_gate(tmp_path, [base], [grown], history, threshold=1.0)[0] == 0


@pytest.mark.parametrize("grown_mb, rc", [(50, 0), (70, 1)])
def test_a_peak_grows_by_at_least_64_mb_before_it_fails(tmp_path, history, grown_mb, rc):
    base = record(memory={"host.max_rss": GB})  # 2% of it is 20 MB: the 64 MB floor decides
    grown = new_run(base, memory={"host.max_rss": GB + grown_mb * MB})
    assert run_gate(tmp_path, [base], [grown], history)[0] == rc
    assert run_gate(tmp_path, [base], [grown], history, min_bytes=0)[0] == 1


@pytest.mark.parametrize("answer", [None, "16", True, 0])
def test_what_fits_without_an_answer_to_compare_fails(tmp_path, history, answer):
    new = new_run(fits(answer=16))
    new["check"]["max_batch"] = answer
    rc, text = run_gate(tmp_path, [fits(answer=16)], [new], history)
    assert rc == 1 and "absent: NEW's search holds no max_batch" in text and "(1 no answer)" in text


LEVELS = ("host.max_rss", "allocator.torch.max_allocated.cuda:0", "allocator.torch.max_reserved.cuda:0",
          "device.used.gpu0")


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from([2, 1, None]), st.sets(st.sampled_from(LEVELS)), st.sets(st.sampled_from(sorted(gate.ALLOW))),
       st.sampled_from([1.0, 10.0]))
def test_schema_and_level_mismatches_fail_unless_allowed(tmp_path, history, schema, dropped, allow, growth):
    base = record(memory={label: GB for label in LEVELS})
    new = new_run(base, memory={label: int(GB * growth) for label in LEVELS if label not in dropped}, schema=schema)
    if schema is None:
        del new["schema"]
    if schema != 2:
        fails, names = "schema" not in allow, "--allow schema"
    else:
        fails = (bool(dropped) and "missing-level" not in allow) or (growth > 1 and len(dropped) < len(LEVELS))
        names = "--allow missing-level" if dropped and "missing-level" not in allow else "bigger"
    rc, text = run_gate(tmp_path, [base], [new], history, allow=sorted(allow))
    assert rc == (1 if fails else 0), text
    assert not fails or names in text


def test_an_unknown_allow_is_refused_naming_each_the_gate_knows(tmp_path, history):
    base = record()
    rc, text = run_gate(tmp_path, [base], [new_run(base)], history, allow=("nope",))
    assert rc == 2 and text == ("oombench gate: --allow nope is not one the gate knows: pass one of schema (BASE and "
                                "NEW records of two schemas: compare their times, not their peaks); missing-level "
                                "(a peak level BASE has and NEW lacks: list it instead of failing)")


def test_a_report_path_with_no_file_name_is_refused_by_its_reason(tmp_path, history):
    base = record()
    rc, text = run_gate(tmp_path, [base], [new_run(base)], history, report=Path("/"))
    assert rc == 2 and text.splitlines()[-1] == ("oombench gate: the report could not be written to / (PosixPath('/') "
                                                 "has an empty name): pass --report a file in a folder you can write")


def test_old_records_without_raw_steps_on_one_side_are_judged_by_their_quartiles(tmp_path, history):
    base = record(median=0.010, n=20)
    new = new_run(record(median=0.012, n=20))
    del new["timing"]["samples_s"]
    rc, text = run_gate(tmp_path, [base], [new], history)
    assert rc == 1 and "slower (quartiles)" in text
