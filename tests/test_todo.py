"""What a profile still lacks: a benchmark is done on a machine once the newest record of its case
and parameters filed there (any run) is an answer (any outcome but a process that died or code that
raised), and the printed --bench runs exactly the rest."""
import json
import re
from pathlib import Path

import pytest

from harness.drive.commands import cli, todo
from harness.measure.guards import budget
from harness.workloads.search.fits import LIMITS

from conftest import FROZEN

FITS_RECORD = FROZEN / "records/nvidia-h200-x1/1f1ac8ea-20261124T195405-8d7e30.jsonl"
BENCHES = todo.benches()


def bench(cls: str, args: str) -> todo.Bench:
    return next(b for b in BENCHES if b.cls == cls and b.args == args)


def plant(results: Path, machine: str, benches_and_outcomes, name: str = "0123abcd-20261124T000000-aaaaaa",
          created: float | None = None) -> Path:
    """A results folder whose machine holds one record per (bench, outcome[, check]), made from a real record."""
    template = json.loads(FITS_RECORD.read_text().splitlines()[0])
    # as today's search files it (it stopped at an older limit, capped torch at a fraction of NVML's
    # total and kept no failures under its answer, any of which would make it still to do)
    template["check"] = dict(template["check"], search_limit=LIMITS["seq_len"], failed_below=[])
    template["budget"] = dict(template["budget"], enforced=budget.ENFORCED["torch"])
    folder = results / "records" / machine
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(dict(template, case=b.case, params=json.loads(b.params), outcome=outcome,
                             check=check[0] if check else template["check"],
                             created=created or template["created"]))
             for b, outcome, *check in benches_and_outcomes]
    (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return results


def test_a_filed_record_of_any_outcome_takes_its_bench_off_that_machines_list_only(tmp_path):
    done, skipped = bench("WhatFitsSequence", "('fp32', '16GB')"), bench("WhatFitsSequence", "('fp32', '24GB')")
    results = plant(tmp_path / "results", "box", [(done, "ok"), (skipped, "skipped")])
    plant(tmp_path / "results", "other", [])
    left = todo.missing("budget", "box", results, BENCHES)
    assert done not in left and skipped not in left
    assert bench("WhatFitsSequence", "('fp32', '40GB')") in left
    assert len(left) == len(todo.selected("budget", BENCHES)) - 2
    assert done in todo.missing("budget", "other", results, BENCHES)


def test_a_case_whose_newest_record_died_or_raised_is_left_and_a_later_answer_takes_it_off(tmp_path):
    died, raised, killed, failed, again = (bench("WhatFitsSequence", f"('fp32', '{b}')")
                                           for b in ("16GB", "24GB", "40GB", "80GB", "card"))
    results = plant(tmp_path / "results", "box", [
        (died, "failed", {"ended": "died"}), (raised, "failed", {"ended": "raised", "error": "KeyError"}),
        (killed, "failed", {"ended": "oom_killed"}),  # host memory ran out: an answer
        (failed, "failed", {"deviation": 0.5, "tolerance": 0.002}),  # a failed check: an answer
        (again, "failed", {"ended": "died"})])
    left = todo.missing("budget", "box", results, BENCHES)
    assert died in left and raised in left and again in left
    assert killed not in left and failed not in left
    later = json.loads(FITS_RECORD.read_text().splitlines()[0])["created"] + 60
    plant(results, "box", [(again, "ok"), (died, "failed", {"ended": "died"})], "0123abcd-20261124T010000-bbbbbb",
          later)
    left = todo.missing("budget", "box", results, BENCHES)
    assert again not in left and died in left
    plant(results, "box", [(again, "failed", {"ended": "died"})], "0123abcd-20261124T020000-cccccc", later + 60)
    assert again in todo.missing("budget", "box", results, BENCHES)  # the newest record is the one that counts


def test_a_what_fits_answer_that_stopped_at_a_limit_lower_than_todays_is_still_to_do(tmp_path):
    # the H200's card held 2**16 tokens, where a sequence's search then stopped; today's goes further
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    (folder / FITS_RECORD.name).write_text(FITS_RECORD.read_text())
    exact = bench("WhatFitsSequence", "('fp32', '16GB')")
    plant(tmp_path / "results", "box", [(exact, "ok", {"max_seq_len": 9856, "failed_below": []})])  # under it
    left = todo.missing("budget", "box", tmp_path / "results", BENCHES)
    assert bench("WhatFitsSequence", "('fp32', 'card')") in left and exact not in left


def test_the_printed_expression_selects_exactly_what_is_left_of_each_class(tmp_path):
    # every other set of the profile filed, so each class's expression must leave out its neighbours
    wanted = todo.selected("budget", BENCHES)
    results = plant(tmp_path / "results", "box", [(b, "ok") for b in wanted[::2]])
    left = todo.missing("budget", "box", results, BENCHES)
    # two classes may declare one measurement (the same case and parameters): filed once, done for both
    filed = {(b.case, b.params) for b in wanted[::2]}
    assert set(left) == {b for b in wanted[1::2] if (b.case, b.params) not in filed}
    assert any(b.cls == f.cls for b in left for f in wanted[::2])  # classes half filed, half left
    for group in ({b.cls for b in left}):
        mine = [b for b in left if b.cls == group]
        expr = todo.expression(mine)
        hit = {b for b in BENCHES if any(re.search(expr, n) for n in b.names())}
        assert hit == set(mine), group
    everything = todo.expression(left)
    assert {b for b in BENCHES if any(re.search(everything, n) for n in b.names())} == set(left)


def test_a_profile_selects_as_asv_does():
    budget = todo.selected("budget", BENCHES)
    assert bench("WhatFitsSequence", "('checkpoint', 'card')") in budget
    assert bench("Techniques", "('lm', 'fp32')") not in budget  # the standard profile's, not budget's
    assert len(todo.selected("full", BENCHES)) == len(BENCHES)


def test_a_machine_without_records_that_is_not_this_box_is_refused_naming_those_there(capsys):
    assert cli.main(["todo", "--machine", "nvidia-h100-typo", "--results", str(FROZEN)]) == 2
    err = capsys.readouterr().err
    assert "no records of nvidia-h100-typo" in err and "nvidia-h200-x1" in err


@pytest.mark.parametrize("profile", ["budget", "standard"])
def test_the_report_counts_what_is_filed_and_lists_the_rest_with_its_command(profile, capsys):
    assert cli.main(["todo", "--profile", profile, "--machine", "nvidia-h200-x1", "--results", str(FROZEN)]) == 0
    out = capsys.readouterr().out
    wanted = len(todo.selected(profile, BENCHES))
    left = todo.missing(profile, "nvidia-h200-x1", FROZEN, BENCHES)
    assert out.startswith(f"nvidia-h200-x1: {wanted - len(left)} of {wanted} parameter sets of profile {profile} filed")
    assert out.count("python3 -m harness run --file --bench ") == len({b.cls for b in left})


def test_a_record_its_case_calls_outdated_is_still_to_do(tmp_path):
    # one sequence at width 2048, trained at Adam's 1e-3 before the rate fell with width: its
    # losses are not today's, so the set is measured again
    source = FROZEN / "records/nvidia-h100-80gb-hbm3-x1/80ceb4a4-20261125T014609-dbc1ce.jsonl"
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    wide, narrow = bench("LongSequence", "('fp32', 2048, 2048)"), bench("LongSequence", "('fp32', 1024, 4096)")
    (folder / source.name).write_text(source.read_text())
    left = todo.missing("budget", "box", tmp_path / "results", BENCHES)
    assert wide in left and narrow not in left
    recs = [json.loads(line) for line in source.read_text().splitlines()]
    for rec in recs:
        rec["check"]["lr"] = 5e-4 if rec["params"]["width"] == 2048 else 1e-3  # today's rates
    (folder / source.name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert wide not in todo.missing("budget", "box", tmp_path / "results", BENCHES)


def test_a_loss_check_failure_filed_without_its_steps_time_is_still_to_do(tmp_path):
    # accumulation in micro-batches of 2 at 40GB failed its loss check (BatchNorm) before a failed
    # check kept its steps' time: today's run would price it, so the set is measured again
    source = FROZEN / "records/nvidia-h200-x1/8001cb6b-20261125T043847-06b84a.jsonl"
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    (folder / source.name).write_text(source.read_text())
    failed = bench("Seed003Accumulation", "('resnet50_2048', 2, '40GB')")
    assert failed in todo.missing("budget", "box", tmp_path / "results", BENCHES)
    rec = json.loads(source.read_text())
    assert rec["outcome"] == "failed" and rec["timing"] is None
    rec["timing"] = {"median_s": 1.2, "q25_s": 1.2, "q75_s": 1.2, "min_s": 1.2, "max_s": 1.2, "steps": 10, "warmup": 2}
    (folder / source.name).write_text(json.dumps(rec) + "\n")
    assert failed not in todo.missing("budget", "box", tmp_path / "results", BENCHES)
    rec["timing"], rec["check"] = None, {"ended": "raised"}  # no verdict: another rule lists it
    (folder / source.name).write_text(json.dumps(rec) + "\n")
    assert failed in todo.missing("budget", "box", tmp_path / "results", BENCHES)


def test_a_what_fits_answer_whose_probes_capped_torch_short_of_its_budget_is_still_to_do(tmp_path):
    # checkpoint at 40GB on the H100, searched while torch's cap was a fraction of NVML's total:
    # a few hundred MB under 40 GB, so its answer may be a size under today's
    source = FROZEN / "records/nvidia-h100-80gb-hbm3-x1/0586d386-20261125T153851-dfded6.jsonl"
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    recs = [json.loads(line) for line in source.read_text().splitlines()]
    searched = bench("WhatFits", "('checkpoint', '40GB')")

    def write(*records):
        (folder / source.name).write_text("".join(json.dumps(r) + "\n" for r in records))
        return todo.missing("budget", "box", tmp_path / "results", BENCHES)

    (fit,) = [r for r in recs if r["case"] == "fits"]
    assert fit["budget"]["enforced"] == "torch.cuda.set_per_process_memory_fraction"
    assert searched in write(*recs)
    ruled = dict(fit, check=dict(fit["check"], failed_below=[]))  # searched under today's rule as well
    today = dict(ruled, budget=dict(fit["budget"], enforced=budget.ENFORCED["torch"]))
    assert searched not in write(today)
    whole = bench("WhatFits", "('checkpoint', 'card')")  # the whole card was never capped
    assert whole not in write(dict(ruled, params=dict(fit["params"], budget="card"),
                                   budget=dict(fit["budget"], name="card")))
    skipped = dict(fit, outcome="skipped", budget={}, check={}, reason="no GPU")  # a search that never ran
    assert searched not in write(skipped)


def test_a_what_fits_answer_searched_before_the_two_sizes_after_it_had_to_fail_is_still_to_do(tmp_path):
    # bf16 autocast at 16GB on the H100, under today's cap: 13 fit and 14 did not, and the search
    # stopped there; today's also probes 15, and moves past a size after 13 that fits
    source = FROZEN / "records/nvidia-h100-80gb-hbm3-x1/9009c493-20261125T171513-718970.jsonl"
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    (fit,) = [r for r in map(json.loads, source.read_text().splitlines()) if r["case"] == "fits"
              and r["params"]["technique"] == "bf16_autocast" and r["params"]["budget"] == "16GB"]
    searched = bench("WhatFits", "('bf16_autocast', '16GB')")

    def missing(**changes):
        (folder / source.name).write_text(json.dumps(dict(fit, **changes)) + "\n")
        return todo.missing("budget", "box", tmp_path / "results", BENCHES)

    assert fit["budget"]["enforced"] == budget.ENFORCED["torch"] and "failed_below" not in fit["check"]
    assert searched in missing()
    assert searched not in missing(check=dict(fit["check"], failed_below=[]))  # today's rule: no failure under it
    assert searched not in missing(check=dict(fit["check"], host_short_at=14))  # the host set it: 15 fails too
    assert searched not in missing(check=dict(fit["check"], too_slow_at=14))  # stopped before a probe too slow
    assert searched not in missing(outcome="does_not_fit", check={})  # no size fit: nothing after it to probe


def test_an_answer_the_hosts_memory_set_under_the_old_cap_is_not_to_do_again(tmp_path):
    # save_on_cpu at 24GB on the H100, under the old cap: 32 fit, and 33 kept more pinned host memory
    # than its guard allows. A larger cap on the device changes nothing the host decided.
    source = FROZEN / "records/nvidia-h100-80gb-hbm3-x1/57d3f76e-20261125T134147-8f2f7a.jsonl"
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    (fit,) = [r for r in map(json.loads, source.read_text().splitlines())
              if r["case"] == "fits" and r["params"]["budget"] == "24GB"]
    searched = bench("WhatFits", "('save_on_cpu', '24GB')")

    def missing(check):
        (folder / source.name).write_text(json.dumps(dict(fit, check=dict(fit["check"], **check))) + "\n")
        return todo.missing("budget", "box", tmp_path / "results", BENCHES)

    assert fit["budget"]["enforced"] != budget.ENFORCED["torch"] and fit["check"]["max_batch"] == 32
    assert searched not in missing({"host_short_at": 33})
    assert searched in missing({"host_short_at": 40})  # the device stopped 33: the cap may have
    assert searched in missing({"host_short_at": None})


@pytest.fixture
def run_seen(monkeypatch):
    """``harness run``'s arguments as the suite would get them, on a box named ``box``, set-up skipped."""
    from harness.drive.asv import suite
    from harness.drive.commands import bootstrap
    seen = []
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    monkeypatch.setattr(suite, "run", lambda **kw: seen.append(kw) or 0)
    monkeypatch.setattr(todo, "this_machine", lambda: "box")
    return seen


def test_run_todo_runs_exactly_what_todo_lists_for_this_box_from_the_results_folder(tmp_path, run_seen):
    wanted = todo.selected("budget", BENCHES)
    results = plant(tmp_path / "results", "box", [(b, "ok") for b in wanted[1:]])
    plant(results, "other", [(wanted[0], "ok")])  # another box's answer does not count here
    assert cli.main(["run", "--todo", "--profile", "budget", "--results", str(results)]) == 0
    [kw] = run_seen
    left = todo.missing("budget", "box", results, BENCHES)
    assert wanted[0] in left and kw["results"] == results
    assert {b for b in BENCHES if any(re.search(kw["bench"], n) for n in b.names())} == set(left)


def test_run_todo_with_nothing_left_runs_nothing_and_says_so(tmp_path, run_seen, capsys):
    results = plant(tmp_path / "results", "box", [(b, "ok") for b in todo.selected("budget", BENCHES)])
    assert cli.main(["run", "--todo", "--profile", "budget", "--results", str(results)]) == 0
    assert run_seen == [] and "nothing of profile budget is left to do on box" in capsys.readouterr().err


@pytest.mark.parametrize("extra, named", [(["--bench", "tricks"], "--bench"), (["--resume", "20261123T182937-9004fb"],
                                                                                "--resume")])
def test_run_todo_refuses_a_bench_or_a_resume_before_set_up(run_seen, capsys, extra, named):
    assert cli.main(["run", "--todo", *extra]) == 2
    err = capsys.readouterr().err
    assert run_seen == [] and "--todo chooses the benchmarks itself" in err and f"without {named}" in err
