"""``harness compare`` over several sittings: a deadline stops it with what it measured kept,
``--resume`` measures just the runs left and reports as one compare would, a resume that would
not be the same compare is refused before anything runs, one folder is measured by one process
at a time, and each sitting's warm-up is run once and never judged.

The sides are two commits of a small repository of the test's own (worktrees of it are quick to
make); the cases are this checkout's, run by ``FakeRunner``, whose processes each take ten
seconds of a fake clock."""
import json
import os
import re
import signal
from pathlib import Path

import pytest

from harness.drive.commands import cli, compare
from harness.drive.commands.compare_state import STATE, CompareRefused, State
from harness.drive.commands.todo import Bench
from harness.measure.records.store import RecordStore
from test_compare import HOST, FakeRunner, git, rendered

BASE_TIMES = {1: 0.0100, 2: 0.01004, 3: 0.01002}


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(compare, "clock", fake)
    return fake


def commit(repo: Path, text: str) -> None:
    (repo / "a.txt").write_text(text)
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", text)


@pytest.fixture
def repo(tmp_path) -> Path:
    """Two commits of a small repository: BASE is HEAD~1, NEW HEAD."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    commit(path, "one")
    commit(path, "two")
    return path


def slower_new(side, r, params):
    """BASE's rounds within 0.4% of each other; NEW's host_copy 8% slower: a regression."""
    return BASE_TIMES[r] * (1.08 if side == "new" and "host_copy" in params else 1)


def every_run(runner_calls) -> list[tuple[str, int, str]]:
    return [(side, r, case) for side, r, case, *_ in runner_calls]


def records_in(folder: Path) -> list:
    return RecordStore(folder).load().records


def stopped_at_deadline(repo, out, clock, runs_before_deadline=3, warmup=False, seconds=slower_new):
    """A compare of HEAD~1 against HEAD whose deadline passes after ``runs_before_deadline`` runs
    (within the first case: it runs to its end, and the compare stops before the second)."""
    runner = FakeRunner(seconds, clock=clock)
    deadline = 10 * (runs_before_deadline + warmup) - 5
    rc = compare.main("HEAD~1", "HEAD", bench=HOST, rounds=3, results=out, deadline_s=deadline, warmup=warmup,
                      repo=repo, measure=runner)
    return rc, runner


def test_a_deadline_stops_the_compare_keeping_the_runs_it_started_and_naming_the_resume(repo, tmp_path, clock,
                                                                                          capsys):
    out = tmp_path / "out"
    rc, runner = stopped_at_deadline(repo, out, clock, runs_before_deadline=3)
    assert rc == compare.STOPPED == 75
    case = runner.calls[0][2]
    # The case begun before the deadline runs all its rounds: a case is compared in one stretch.
    assert every_run(runner.calls) == [(side, r, case) for r, side in compare.order(3)]
    assert len(records_in(out)) == 6
    state = json.loads((out / STATE).read_text())
    assert state["commits"] == {"base": git(repo, "rev-parse", "HEAD~1"), "new": git(repo, "rev-parse", "HEAD")}
    assert (state["rounds"], state["bench"], state["harness"]) == (3, HOST, git(repo, "rev-parse", "HEAD"))
    assert [b["case"] + b["params"] for b in state["benches"]][0] == case and len(state["benches"]) == 2
    said = capsys.readouterr().out.splitlines()
    assert said[-2].startswith("oombench compare: stopped at its deadline with 6 of 12 run(s) left")
    assert f"python3 -m harness compare --resume {out}" in said[-2]
    assert not (out / "report.md").exists()  # the compare's own verdict waits for its last case


def all_slower(side, r, params):
    return BASE_TIMES[r] * (1.08 if side == "new" else 1)


def the_same(side, r, params):
    return BASE_TIMES[r]


@pytest.mark.parametrize("seconds, so_far, at_end, rc_end", [
    (all_slower, "FAIL: 1 regression(s) (1 slower) in 1 case(s) compared",
     "FAIL: 2 regression(s) (2 slower) in 2 case(s) compared", 1),
    (the_same, "PASS: 0 regression(s) in 1 case(s) compared", "PASS: 0 regression(s) in 2 case(s) compared", 0),
])
def test_a_deadline_stop_judges_the_cases_measured_so_far_until_the_compares_own_report_replaces_it(
        repo, tmp_path, clock, capsys, seconds, so_far, at_end, rc_end):
    out = tmp_path / "out"
    rc, _ = stopped_at_deadline(repo, out, clock, runs_before_deadline=3, seconds=seconds)
    said = capsys.readouterr().out.splitlines()
    interim = rendered(out / compare.INTERIM)
    assert rc == compare.STOPPED and so_far in interim
    assert f"\n\n**Interim:** 6 of 12 run(s) on record, each case with all its rounds; `python3 -m harness compare " \
           f"--resume {out}` measures the rest, and its report judges every case.\n" in interim  # a paragraph
    assert said[-1] == f"oombench compare: so far {so_far}; 0 retired (interim, in {out / compare.INTERIM})"
    assert compare.main(resume=out, warmup=False, repo=repo, measure=FakeRunner(seconds, clock=clock)) == rc_end
    assert at_end in rendered(out / "report.md") and not (out / compare.INTERIM).exists()


def test_a_deadline_before_any_case_or_a_signal_leaves_no_interim_report(repo, tmp_path, clock, capsys):
    out = tmp_path / "out"
    runner = FakeRunner(clock=clock)
    rc = compare.main("HEAD~1", "HEAD", bench=HOST, rounds=3, results=out, deadline_s=5, repo=repo, measure=runner)
    assert rc == compare.STOPPED and runner.calls == [] and len(runner.warmups) == 1
    assert not (out / compare.INTERIM).exists()
    assert capsys.readouterr().out.splitlines()[-1].startswith("oombench compare: no interim verdict: ")

    def stop_after_a_case(count):
        if count == 7:
            raise compare.suite.Interrupted(signal.SIGTERM)
    stopped = FakeRunner(clock=clock, during=stop_after_a_case)
    assert compare.main(resume=out, warmup=False, repo=repo, measure=stopped) == 128 + signal.SIGTERM
    assert len(records_in(out)) == 6 and not (out / compare.INTERIM).exists()


def test_a_resume_measures_just_the_runs_left_and_reports_as_one_uninterrupted_compare(repo, tmp_path, clock,
                                                                                        capsys):
    out, whole = tmp_path / "out", tmp_path / "whole"
    stopped_at_deadline(repo, out, clock, runs_before_deadline=3)
    resumed = FakeRunner(slower_new, clock=clock)
    rc = compare.main(resume=out, warmup=False, repo=repo, measure=resumed)
    once = FakeRunner(slower_new, clock=clock)
    assert compare.main("HEAD~1", "HEAD", bench=HOST, rounds=3, results=whole, warmup=False, repo=repo,
                        measure=once) == rc == 1
    assert every_run(resumed.calls) == every_run(once.calls)[6:]  # the second case's 6, in their order
    assert len(records_in(out)) == len(records_in(whole)) == 12
    ours, theirs = (rendered(f / "report.md").replace(str(f), "FOLDER").splitlines() for f in (out, whole))
    assert ours[2:] == theirs[2:] and "FAIL: 1 regression(s) (1 slower) in 2 case(s)" in "\n".join(ours)
    # Ten seconds a run: 6 in the first sitting and 6 in the second, not the clock between them.
    assert f"in 2 sittings, {compare.minutes(120)} of measuring in all" in ours[1]
    assert f"in one session, {compare.minutes(120)}" in theirs[1]
    # Each side's round: its 2 processes, 20 s, summed over the sittings, against the 120 s in all.
    for heading in (ours[1], theirs[1]):
        assert heading.endswith(f"One side's round (a fresh process a case, as one plain run of the cases): "
                                f"{compare.minutes(20)}; the compare's measuring took 6.0 times one.")
    assert f"measured in 2 sittings, {compare.minutes(120)}" in capsys.readouterr().out


def test_a_resume_of_a_finished_compare_measures_nothing_and_gates_again(repo, tmp_path, clock):
    out = tmp_path / "out"
    compare.main("HEAD~1", "HEAD", bench=HOST, rounds=2, results=out, warmup=False, repo=repo,
                 measure=FakeRunner(clock=clock))
    (out / "report.md").unlink()
    again = FakeRunner(clock=clock)
    assert compare.main(resume=out, repo=repo, measure=again) == 0
    assert again.calls == again.warmups == [] and (out / "report.md").exists()


def test_each_sitting_warms_up_once_from_base_and_the_warm_up_is_never_judged(repo, tmp_path, clock, capsys):
    out = tmp_path / "out"
    base = git(repo, "rev-parse", "HEAD~1")

    def slow_warm_up(side, r, params):  # the session's first process: twice as slow, as a cold box's
        return 0.02 if side == "warmup" else 0.01 * (1 + r / 1000)
    rc, first = stopped_at_deadline(repo, out, clock, runs_before_deadline=2, warmup=True, seconds=slow_warm_up)
    assert rc == compare.STOPPED and len(first.calls) == 6
    assert [(case, commit) for case, commit, _ in first.warmups] == [(first.calls[0][2], base)]
    second = FakeRunner(slow_warm_up, clock=clock, during=lambda n: n == 1 and said.append(len(second.warmups)))
    said = []
    assert compare.main(resume=out, repo=repo, measure=second) == 0
    assert said == [1]  # before the sitting's first measured run
    assert [(case, commit) for case, commit, _ in second.warmups] == [(second.calls[0][2], base)]
    for _, _, path in first.warmups + second.warmups:
        assert out not in path.parents and not path.exists()
    kept = records_in(out)
    assert len(kept) == 12 and not any(r.run_id.endswith("-warmup") or r.timing.median_s == 0.02 for r in kept)
    assert sum("warm-up (base, not kept)" in line for line in capsys.readouterr().out.splitlines()) == 2
    assert "PASS: 0 regression(s) in 2 case(s)" in rendered(out / "report.md")


def test_no_warmup_runs_none(repo, tmp_path, clock):
    runner = FakeRunner(clock=clock)
    assert compare.main("HEAD~1", bench=HOST, rounds=1, results=tmp_path / "out", warmup=False, repo=repo,
                        measure=runner) == 0
    assert runner.warmups == [] and len(runner.calls) == 4


def test_a_second_resume_of_a_folder_being_measured_is_refused(repo, tmp_path, clock):
    out = tmp_path / "out"
    stopped_at_deadline(repo, out, clock)
    inner, refused = FakeRunner(clock=clock), []

    def resume_again(count):
        if count == 1:
            with pytest.raises(compare.CompareRefused) as e:
                compare.main(resume=out, repo=repo, measure=inner)
            refused.append(str(e.value))
    outer = FakeRunner(slower_new, clock=clock, during=resume_again)
    assert compare.main(resume=out, warmup=False, repo=repo, measure=outer) == 1
    assert len(refused) == 1 and f"being measured by pid {os.getpid()}" in refused[0] and "\n" not in refused[0]
    assert inner.calls == inner.warmups == [] and len(outer.calls) == 6 and len(records_in(out)) == 12


def change_head(repo, out):
    commit(repo, "three")


def edit(repo, out):
    (repo / "a.txt").write_text("edited")


def elsewhere(repo, out):
    state = json.loads((out / STATE).read_text())
    (out / STATE).write_text(json.dumps({**state, "machine": "nvidia-h100-80gb-hbm3-x1"}))


@pytest.mark.parametrize("setup, args, kwargs, says", [
    (None, ("HEAD",), {}, "BASE 'HEAD' is not the commit the compare in"),
    (None, ("HEAD~1", "HEAD~1"), {}, "NEW 'HEAD~1' is not the commit the compare in"),
    (None, (), {"rounds": 2}, "--rounds is the resumed compare's own"),
    (None, (), {"bench": HOST}, "--bench is the resumed compare's own"),
    (edit, (), {}, "1 uncommitted change(s) (e.g. a.txt)"),
    (change_head, (), {}, "whose code chose and gates its runs: `git checkout"),
    (elsewhere, (), {}, "measures on nvidia-h100-80gb-hbm3-x1, and this box is"),
])
def test_a_resume_that_would_not_be_the_same_compare_is_refused_before_anything_runs(repo, tmp_path, clock, setup,
                                                                                    args, kwargs, says):
    out = tmp_path / "out"
    stopped_at_deadline(repo, out, clock)
    if setup:
        setup(repo, out)
    state = (out / STATE).read_text()
    runner = FakeRunner(clock=clock)
    with pytest.raises(compare.CompareRefused) as refused:
        compare.main(*args, resume=out, repo=repo, measure=runner, **kwargs)
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert runner.calls == runner.warmups == [] and (out / STATE).read_text() == state
    assert len(records_in(out)) == 6


def test_a_folder_without_a_state_file_is_refused_and_a_begun_one_is_not_begun_again(repo, tmp_path, clock):
    with pytest.raises(compare.CompareRefused, match=f"holds no {STATE}, so no compare began there"):
        compare.main(resume=tmp_path, repo=repo, measure=FakeRunner())
    out = tmp_path / "out"
    stopped_at_deadline(repo, out, clock, runs_before_deadline=1)
    with pytest.raises(compare.CompareRefused, match=re.escape(f"--resume {out}` goes on with it")):
        compare.main("HEAD~1", bench=HOST, results=out, repo=repo, measure=FakeRunner())


@pytest.mark.parametrize("argv, says", [
    (["compare"], "name BASE, the commit to compare against, or --resume FOLDER"),
    (["compare", "--resume", "{tmp}"], "holds no compare.json"),
    (["compare", "HEAD", "--deadline", "0"], "--deadline: takes a positive number of seconds"),
    (["compare", "HEAD", "--deadline", "nan"], "--deadline: takes a positive number of seconds"),
])
def test_the_command_line_refuses_in_one_line_with_status_2(tmp_path, capsys, argv, says):
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_the_help_names_the_deadline_stop_status():
    text = re.sub(r"\s+", " ", cli.parser()._subparsers._group_actions[0].choices["compare"].format_help())
    assert f"{compare.STOPPED} stopped at --deadline" in text and "--no-warmup" in text


def test_a_case_a_stopped_sitting_left_part_measured_is_measured_whole_again_its_runs_kept_apart(repo, tmp_path,
                                                                                                 clock, capsys):
    """Both sides' rounds of a case are compared on one host in one stretch: the runs a killed
    sitting left of a case are moved to interrupted/ (kept, never judged), and the case runs whole."""
    out, whole = tmp_path / "out", tmp_path / "whole"

    def stop_at_third(count):
        if count == 3:
            raise compare.suite.Interrupted(signal.SIGTERM)
    first = FakeRunner(slower_new, clock=clock, during=stop_at_third)
    rc = compare.main("HEAD~1", "HEAD", bench=HOST, rounds=3, results=out, warmup=False, repo=repo, measure=first)
    assert rc == 128 + signal.SIGTERM and len(records_in(out / "base") + records_in(out / "new")) == 2
    second = FakeRunner(slower_new, clock=clock)
    assert compare.main(resume=out, warmup=False, repo=repo, measure=second) == 1
    once = FakeRunner(slower_new, clock=clock)
    compare.main("HEAD~1", "HEAD", bench=HOST, rounds=3, results=whole, warmup=False, repo=repo, measure=once)
    assert every_run(second.calls) == every_run(once.calls)  # both cases whole, the first again
    aside = sorted((out / "interrupted").glob("*.jsonl"))
    assert [p.name for p in aside] == ["base-r1.jsonl", "new-r1.jsonl"]
    assert sum(len(p.read_text().splitlines()) for p in aside) == 2
    assert len(records_in(out / "base") + records_in(out / "new")) == 12
    ours, theirs = (rendered(f / "report.md").replace(str(f), "FOLDER").splitlines() for f in (out, whole))
    assert ours[2:] == theirs[2:]
    assert "2 run(s) of cases a stopped sitting left part-measured moved to" in capsys.readouterr().out


def a_state() -> State:
    bench = Bench(family="ceilings", cls="Device", methods=("track_seconds_per_step",), args="('device_copy')",
                  case="ceilings", params='{"probe": "device_copy"}')
    return State(commits={"base": "a" * 40, "new": "b" * 40}, revs=["HEAD~1", "HEAD"], rounds=3, benches=[bench],
                 profile=None, bench="ceilings", harness="c" * 40, run_id="20990101T000000-aaaaaa",
                 machine="nvidia-h200-x1", report="/tmp/report.md", threshold=0.0, measured_s=12.5, sittings=2,
                 round_s={"base r1": 4.0, "new r1": 4.5})


def test_a_compare_s_state_reads_back_as_saved_one_field_a_line(tmp_path):
    """Committed beside the records, the state shows in a diff what each sitting changed."""
    state = a_state()
    state.save(tmp_path)
    assert State.read(tmp_path) == state
    text = (tmp_path / STATE).read_text()
    assert text.endswith("}\n") and '\n "sittings": 2,\n' in text and '\n "measured_s": 12.5,\n' in text


@pytest.mark.parametrize("text, why", [
    ("{", "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"rounds": 3}', "KeyError: 'benches'"),
    ('{"benches": [], "unknown": 1}', "TypeError: ")])
def test_a_state_that_cannot_be_read_is_refused_naming_why_and_the_fix(tmp_path, text, why):
    fix = "name the folder that `harness compare` printed, or start a new compare without --resume"
    with pytest.raises(CompareRefused) as e:
        State.read(tmp_path)
    assert str(e.value) == f"--resume {tmp_path} holds no {STATE}, so no compare began there: {fix}"
    (tmp_path / STATE).write_text(text)
    with pytest.raises(CompareRefused) as e:
        State.read(tmp_path)
    said = str(e.value)
    assert said.startswith(f"--resume {tmp_path}: {STATE} is unreadable ({why}") and said.endswith(f"): {fix}")


# -- the bookkeeping, function by function ------------------------------------------------------

def test_each_case_s_runs_alternate_a_b_then_b_a():
    assert compare.order(1) == [(1, "base"), (1, "new")]
    assert compare.order(4) == [(1, "base"), (1, "new"), (2, "new"), (2, "base"), (3, "base"), (3, "new"),
                                (4, "new"), (4, "base")]


def test_each_side_and_round_files_into_its_own_run_only_the_first_traced(tmp_path):
    runs = compare.contexts(tmp_path, a_state())
    assert sorted(runs) == [("base", 1), ("base", 2), ("base", 3), ("new", 1), ("new", 2), ("new", 3)]
    for (side, r), ctx in runs.items():
        assert ctx.store.root == tmp_path / side / "records" and ctx.machine == "nvidia-h200-x1"
        assert (ctx.run_id, ctx.commit) == (f"20990101T000000-aaaaaa-r{r}", ("a" if side == "base" else "b") * 40)
        assert ctx.parent_pid == os.getpid() and ctx.trace_busy == (r == 1)


def test_a_deadline_has_passed_only_once_the_clock_is_beyond_it(clock):
    assert not compare.past(None) and not compare.past(clock.now) and compare.past(clock.now - 0.001)


def records_planted(folder):
    (folder / "base" / "records").mkdir(parents=True)
    (folder / "base" / "records" / "r.jsonl").write_text("")


@pytest.mark.parametrize("make", [lambda f: f.write_text("x"), records_planted])
def test_a_results_folder_that_is_a_file_or_holds_records_is_refused(tmp_path, make):
    folder = tmp_path / "out"
    make(folder)
    with pytest.raises(CompareRefused) as e:
        compare.refuse_used(folder)
    assert str(e.value) == f"--results {folder} is a file or holds records already: name a new folder"


def test_a_results_folder_of_a_compare_begun_names_its_resume(tmp_path):
    (tmp_path / STATE).write_text("{}")
    with pytest.raises(CompareRefused) as e:
        compare.refuse_used(tmp_path)
    assert str(e.value) == (f"--results {tmp_path} is the folder of a compare that began already: "
                            f"`python3 -m harness compare --resume {tmp_path}` goes on with it, or name a new folder")


def test_a_results_folder_without_records_is_taken(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "report.md").write_text("")
    compare.refuse_used(tmp_path)
    compare.refuse_used(tmp_path / "new")


def test_a_stopped_case_s_runs_are_moved_aside_from_every_round_file_and_counted(tmp_path):
    from gate_records import record
    from harness.measure.records.record import Record
    state = a_state()
    runs = compare.contexts(tmp_path, state)
    stopped, whole = {"probe": "device_copy"}, {"probe": "matmul_bf16"}
    held = {}
    for key, params in ((("base", 1), [whole, stopped]), (("new", 1), [whole]), (("new", 2), [stopped])):
        recs = [Record.from_dict(record(params=p, run=runs[key].run_id)) for p in params]
        held[key] = recs
        for rec in recs:
            RecordStore.append(runs[key].path, rec)
    steps = [(b, r, side) for b in state.benches for r, side in compare.order(3)]
    assert compare.set_aside(tmp_path, steps, runs, held) == 2
    left = {key: [r.params for r in RecordStore(runs[key].store.root).load().records if r.run_id == runs[key].run_id]
            for key in held}
    assert left == {("base", 1): [whole], ("new", 1): [whole], ("new", 2): []}
    aside = {p.name: [json.loads(line)["params"] for line in p.read_text().splitlines()]
             for p in (tmp_path / "interrupted").iterdir()}
    assert aside == {"base-r1.jsonl": [stopped], "new-r2.jsonl": [stopped]}


def test_the_report_says_when_the_box_was_shared_and_what_a_round_took():
    state = a_state()
    assert compare.shared(state) == []
    state.shared_runs = 2
    assert compare.shared(state) == [
        "**The box was shared:** 2 run(s) began while other processes held its GPUs. Their use of the host's cores, "
        "memory and link is in those runs' times, and a verdict may be theirs: compare on a box of its own."]
    state.round_s = {}
    assert compare.one_round(state) == ""
