"""The third hostile pass's reproductions against ``harness compare``, the gate and the writers of
records: paths resolved before any child starts, nothing read from a compare folder used as a
path, writers refusing what readers refuse, each side importing its own tree alone, nothing
compared never a pass, self-contradicting records refused, and kills leaving nothing behind.

Most run no case's process: the compare's sides are two commits of a small repository of the
test's own, its cases this checkout's, measured by ``FakeRunner`` (``tests/test_compare.py``)."""
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate_records import record, write
from harness.drive.commands import cli, compare, own_code
from harness.drive.commands.compare_state import STATE, CompareRefused, State
from harness.drive.commands.todo import Bench
from harness.measure.guards.inputs import Refused
from harness.measure.instruments.timing import Timing
from harness.measure.records.record import MAX_STEP_S, Record
from harness.measure.records.store import RecordStore, RunContext, StoreError, append_line, repair
from harness.report import compares, gate
from test_compare import HOST, ENV, FakeRunner, git, rendered, worktrees
from test_compare_resume import a_state, repo  # noqa: F401 (a fixture)
from test_inputs_hostile import alarm

HOST_COPY = r"^ceilings\.Host\.\w+\('host_copy'\)"


within = alarm  # a block that would hang fails instead (test_inputs_hostile's)


class InTree(FakeRunner):
    """Files its record where a case's process would: that process runs with its worktree as its
    working folder, so a relative path in its run's context is read from there."""

    def __call__(self, tree: Path, ctx, bench):
        seen = RunContext.from_json(ctx.to_json())
        return super().__call__(tree, dataclasses.replace(seen, store=RecordStore(tree / seen.store.root)), bench)


def finished(repo: Path, out: Path) -> Path:  # noqa: F811 (repo: the fixture's value)
    """A whole compare of HEAD~1 against HEAD, one round of the host_copy case."""
    assert compare.main("HEAD~1", "HEAD", bench=HOST_COPY, rounds=1, results=out, warmup=False, repo=repo,
                        measure=FakeRunner()) == 0
    return out


def on_record(folder: Path) -> int:
    return len(RecordStore(folder).load().records)


# -- 1. paths resolved and checked before work ------------------------------------------------------
def test_a_relative_results_folder_keeps_every_record_the_children_file(repo, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    rc = compare.main("HEAD~1", "HEAD", bench=HOST_COPY, rounds=2, results="rel", warmup=False, repo=repo,
                      measure=InTree())
    assert rc == 0 and on_record(tmp_path / "rel" / "base") == on_record(tmp_path / "rel" / "new") == 2
    assert "PASS: 0 regression(s) in 1 case(s) compared" in rendered(tmp_path / "rel" / "report.md")


def test_a_relative_resume_keeps_the_runs_of_its_sitting(repo, tmp_path, monkeypatch):  # noqa: F811
    out = tmp_path / "out"
    rc = compare.main("HEAD~1", "HEAD", bench=HOST, rounds=1, results=out, warmup=False, repo=repo,
                      measure=FakeRunner(during=lambda n: n == 3 and os.kill(os.getpid(), signal.SIGTERM)))
    assert rc == 128 + signal.SIGTERM and on_record(out) == 2
    monkeypatch.chdir(tmp_path)
    assert compare.main(resume="out", warmup=False, repo=repo, measure=InTree()) == 0
    assert on_record(out / "base") == on_record(out / "new") == 2  # both cases, each side
    assert "in 2 case(s) compared" in rendered(out / "report.md")


@pytest.mark.parametrize("option", ["results", "report", "resume"])
def test_an_empty_path_is_refused_not_taken_for_the_default(repo, option):  # noqa: F811
    with pytest.raises(CompareRefused) as refused:
        compare.main("HEAD~1", bench=HOST, repo=repo, measure=FakeRunner(), **{option: ""})
    assert str(refused.value).startswith(f"--{option} takes a ") and "got ''" in str(refused.value)


def test_a_copied_folder_resumed_writes_its_own_report_never_the_original_s(repo, tmp_path):  # noqa: F811
    out = finished(repo, tmp_path / "out")
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (out / "report.md").write_text("the original's")
    assert json.loads((copy / STATE).read_text())["report"] == str(out / "report.md")
    assert compare.main(resume=copy, warmup=False, repo=repo, measure=FakeRunner()) == 0
    assert (out / "report.md").read_text() == "the original's"
    assert (copy / "report.md").read_text().startswith("## oombench compare:")


@pytest.mark.parametrize("field, value, says", [
    ("run_id", "../../../../escape/x", "run_id must be a run id"),
    ("run_id", "", "run_id must be a run id"),
    ("machine", "../x", "machine must be a machine name"),
    ("rounds", 100_000_000, "rounds must be a whole number from 1 to 50"),
    ("rounds", True, "rounds must be a whole number from 1 to 50"),
    ("threshold", 1e9, "threshold must be a number from 0 to 1"),
    ("threshold", float("nan"), "threshold must be a number from 0 to 1"),
    ("commits", {"base": "--output=/tmp/x", "new": "b" * 40}, "commits must name base and new by full hash"),
    ("benches", [], "benches must list the compare's cases"),
])
def test_a_state_file_whose_fields_are_not_a_compare_s_is_refused_naming_the_field(tmp_path, field, value, says):
    a_state().save(tmp_path)
    data = json.loads((tmp_path / STATE).read_text())
    (tmp_path / STATE).write_text(json.dumps({**data, field: value}))
    with pytest.raises(CompareRefused) as refused:
        State.read(tmp_path)
    assert f"{STATE} is unreadable (ValueError: {says}" in str(refused.value) and "\n" not in str(refused.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run_id=st.text(max_size=40), machine=st.text(max_size=30))
def test_whatever_a_state_names_its_round_files_stay_in_its_folder(tmp_path, run_id, machine):
    folder = tmp_path / "f"
    folder.mkdir(exist_ok=True)
    state = dataclasses.replace(a_state(), run_id=run_id, machine=machine)
    (folder / STATE).write_text(json.dumps(dataclasses.asdict(state)))
    try:
        read = State.read(folder)
    except CompareRefused as e:
        assert "\n" not in str(e)
        return
    for ctx in compare.contexts(folder, read).values():
        assert ctx.path.resolve().parent.parent.parent.parent == folder.resolve()


def test_the_gate_names_a_missing_base_not_a_history_it_was_not_given(tmp_path):
    rc, text = gate.gate(tmp_path / "base", tmp_path / "new", history=tmp_path / "base")
    assert rc == 2 and f"BASE {tmp_path / 'base'} does not exist" in text and "--history" not in text


# -- 2. writers refuse what readers refuse ----------------------------------------------------------
def test_a_record_file_that_is_a_link_is_never_appended_to_nor_its_target_cut(tmp_path):
    target = tmp_path / "system-file"
    target.write_bytes(b"line one\nan unterminated line")
    link = tmp_path / "records.jsonl"
    link.symlink_to(target)
    with pytest.raises(Refused, match="is a symbolic link, and records are never written through one"):
        append_line(link, {"case": "x"})
    with pytest.raises(Refused, match="is a symbolic link"):
        repair(link)
    assert target.read_bytes() == b"line one\nan unterminated line" and not (tmp_path / "records.jsonl.torn").exists()


def test_a_fifo_in_a_record_file_s_place_is_refused_at_write_never_waited_on(tmp_path):
    fifo = tmp_path / "records.jsonl"
    os.mkfifo(fifo)
    with within(5), pytest.raises(Refused, match="is a FIFO, not a regular file"):
        append_line(fifo, {"case": "x"})


def test_records_are_never_filed_in_a_linked_machine_folder_no_reader_lists(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "box").symlink_to(elsewhere)
    store = RecordStore(tmp_path / "records")
    with pytest.raises(Refused, match="box is a symbolic link"):
        append_line(store.run_file("box", "a" * 40, "r"), {"case": "x"})
    assert list(elsewhere.iterdir()) == [] and store.files() == []
    (elsewhere / "a-r.jsonl").write_text(json.dumps(record()) + "\n")  # put there by hand: refused alike when read
    assert store.load().records == [] and store.load().problems == [
        f"{tmp_path / 'records' / 'box'}: a symbolic link to a folder, whose records are neither read nor written: "
        "put the folder itself there"]
    rc, text = gate.gate(tmp_path / "records", tmp_path / "records")
    assert rc == 2 and "box: a symbolic link to a folder" in text


def test_run_resume_refuses_a_run_file_that_is_a_link(tmp_path):
    store = RecordStore(tmp_path)
    path = store.run_file("box", "a" * 40, "20990101T000000-abcdef")
    path.parent.mkdir(parents=True)
    (tmp_path / "target.jsonl").write_text("")
    path.symlink_to(tmp_path / "target.jsonl")
    with pytest.raises(StoreError, match="--resume 20990101T000000-abcdef: .* is a symbolic link"):
        store.resumable("20990101T000000-abcdef", "box", "a" * 40)


@pytest.mark.parametrize("make", ["link", "fifo"])
def test_compare_resume_refuses_a_round_file_that_is_a_link_or_a_fifo(repo, tmp_path, make):  # noqa: F811
    out = finished(repo, tmp_path / "out")
    (path,) = (out / "new" / "records").rglob("*.jsonl")
    path.rename(tmp_path / "moved.jsonl")
    path.symlink_to(tmp_path / "moved.jsonl") if make == "link" else os.mkfifo(path)
    runner = FakeRunner()
    with within(5), pytest.raises(CompareRefused, match="symbolic link|is a FIFO"):
        compare.main(resume=out, warmup=False, repo=repo, measure=runner)
    assert runner.calls == [] and (tmp_path / "moved.jsonl").read_text().count("\n") == 1


def test_a_fifo_as_the_state_file_is_refused_never_waited_on(tmp_path):
    os.mkfifo(tmp_path / STATE)
    with within(5), pytest.raises(CompareRefused, match=f"{STATE} is a FIFO, not a regular file"):
        State.read(tmp_path)


# -- 3. each side runs its own code -----------------------------------------------------------------
def a_tree(root: Path, units: bool) -> Path:
    """A worktree whose case entry point imports ``harness.units``, which the tree holds or lacks."""
    tree = root / ("with" if units else "without")
    (tree / "harness" / "drive" / "asv").mkdir(parents=True)
    for package in ("harness", "harness/drive", "harness/drive/asv"):
        (tree / package / "__init__.py").write_text("")
    (tree / "harness" / "drive" / "asv" / "bench.py").write_text(
        "def measure(case, **params):\n    import harness.units\n    print('units from', harness.units.__file__)\n")
    if units:
        (tree / "harness" / "units.py").write_text("")
    return tree


def test_a_commit_that_lacks_a_module_fails_its_side_never_borrowing_the_checkout_s(tmp_path):
    ctx = RunContext(RecordStore(tmp_path / "records"), "box", "r-r1", "a" * 40)
    bench = Bench("ceilings", "Host", ("track_seconds_per_step",), "('host_copy')", "ceilings", "{}")
    lacking = compare.measure_in(a_tree(tmp_path, units=False), ctx, bench)
    assert f"No module named 'harness.units' in the worktree {(tmp_path / 'without').resolve()}" in lacking
    assert "units from" not in lacking
    holding = compare.measure_in(a_tree(tmp_path, units=True), ctx, bench)
    assert f"units from {(tmp_path / 'with').resolve() / 'harness' / 'units.py'}" in holding


def test_the_processes_a_side_starts_import_its_tree_alone_too(tmp_path):
    """A case's own children (a parallel case's ranks) inherit the environment, and the guard with it."""
    tree = a_tree(tmp_path, units=False)
    env = own_code.environ(tree, own_code.site_folder(tmp_path), dict(os.environ))
    grandchild = ("import subprocess, sys\n"
                  "sys.exit(subprocess.run([sys.executable, '-c', 'import harness.units']).returncode)")
    done = subprocess.run([sys.executable, "-c", grandchild], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "No module named 'harness.units' in the worktree" in done.stderr


# -- 4. nothing compared is not a pass --------------------------------------------------------------
@pytest.mark.parametrize("outcome, reason", [("skipped", "no NVIDIA GPU visible"), ("does_not_fit", "out of memory")])
def test_a_gate_of_records_none_of_which_was_compared_is_no_pass(tmp_path, outcome, reason):
    recs = [{**record(), "outcome": outcome, "reason": reason, "timing": None, "gpu_busy": {}}]
    base, new = write(tmp_path / "b.jsonl", recs), write(tmp_path / "n.jsonl", [{**recs[0], "created": 2.0}])
    rc, text = gate.gate(base, new, history=base)
    assert rc == 2 and "no case was compared" in text and f"base is {outcome}, new is {outcome}" in text
    assert cli.main(["gate", str(base), str(new), "--history", str(base)]) == 2


def test_a_compare_of_gpu_cases_on_a_box_without_a_gpu_is_no_pass(repo, tmp_path):  # noqa: F811
    def skipped(tree, ctx, bench):
        rec = Record(case=bench.case, params=json.loads(bench.params), outcome="skipped", environment=ENV,
                     reason="no NVIDIA GPU visible", run_id=ctx.run_id, commit=ctx.commit)
        RecordStore.append(ctx.path, rec)
        return ""
    rc = compare.main("HEAD~1", "HEAD", bench=HOST_COPY, rounds=1, results=tmp_path / "out", warmup=False, repo=repo,
                      measure=skipped)
    assert rc == 2 and "no case was compared" in (tmp_path / "out" / "report.md").read_text()


def contradicted(timing: dict, **changes) -> str:
    rec = record()
    rec["timing"] = {**timing, **changes}
    with pytest.raises(ValueError) as refused:
        Record.from_dict(rec)
    return str(refused.value)


def test_a_record_whose_summary_its_own_samples_contradict_is_refused():
    t = record()["timing"]
    assert "a summary its own steps contradict" in contradicted(t, median_s=t["median_s"] * 10,
                                                                q75_s=t["max_s"] * 10, max_s=t["max_s"] * 10)
    ten = [s * 10 for s in t["samples_s"]]
    assert "a summary its own steps contradict" in contradicted(t, samples_s=ten)
    assert "at most 604800 seconds" in contradicted(t, median_s=1e308, q75_s=1e308, max_s=1e308)


def test_the_gate_refuses_a_new_record_whose_median_is_not_its_samples(tmp_path):
    base = record()
    t = base["timing"]
    new = {**base, "created": 2.0, "timing": {**t, "median_s": t["median_s"] * 10, "q75_s": t["max_s"] * 10,
                                              "max_s": t["max_s"] * 10}}
    rc, text = gate.gate(write(tmp_path / "b.jsonl", [base]), write(tmp_path / "n.jsonl", [new]))
    assert rc == 2 and "a summary its own steps contradict" in text and "same" not in text


@settings(max_examples=80, deadline=None)
@given(samples=st.lists(st.floats(min_value=1e-9, max_value=MAX_STEP_S), min_size=1, max_size=40),
       field=st.sampled_from(["median_s", "q25_s", "q75_s", "min_s", "max_s"]), factor=st.floats(1.001, 1e6))
def test_a_summary_read_is_its_samples_own_and_any_other_is_refused(samples, field, factor):
    made = Timing.from_samples(samples, 1).to_dict()
    rec = {**record(), "timing": made}
    assert Record.from_dict(rec).timing == Timing.from_dict(made)
    forged = {**made, field: made[field] * factor}
    if forged[field] <= MAX_STEP_S:  # past it, refused as no step's length
        ordered = forged["min_s"] <= forged["q25_s"] <= forged["median_s"] <= forged["q75_s"] <= forged["max_s"]
        with pytest.raises(ValueError, match="contradict" if ordered else "min_s <= q25_s"):
            Record.from_dict({**rec, "timing": forged})


def test_a_time_ratio_past_any_number_is_slower_never_same():
    """Records without raw steps: NEW's quartiles scatter wider than the gap, but no scatter makes
    a step infinitely many times BASE's the same."""
    tiny = dict(min_s=1e-310, q25_s=1e-310, median_s=1e-310, q75_s=1e-310, max_s=1e-310, steps=1000, warmup=2)
    wide = dict(min_s=1e-9, q25_s=1e-9, median_s=6e5, q75_s=6e5, max_s=6e5, steps=3, warmup=2)
    base, new = (Record.from_dict({**record(created=c), "timing": {**t, "samples_s": []}})
                 for c, t in ((1.0, tiny), (2.0, wide)))
    row, _ = gate.time_row(base, new, gate.noise.Floors([]), gate.Options())
    assert math.isinf(new.timing.median_s / base.timing.median_s) and row.mark == "+" and "slower" in row.verdict


def test_swapped_sides_or_a_forged_round_file_are_refused_before_anything_runs(repo, tmp_path):  # noqa: F811
    out = finished(repo, tmp_path / "out")
    (out / "base").rename(tmp_path / "was-base")
    (out / "new").rename(out / "base")
    (tmp_path / "was-base").rename(out / "new")
    with pytest.raises(CompareRefused, match="is not a round file of the compare in"):  # named for NEW's commit
        compare.main(resume=out, warmup=False, repo=repo, measure=FakeRunner())
    relabelled = finished(repo, tmp_path / "relabelled")
    (path,) = (relabelled / "base" / "records").rglob("*.jsonl")
    new_commit = git(repo, "rev-parse", "HEAD")
    path.write_text(path.read_text().replace(git(repo, "rev-parse", "HEAD~1"), new_commit))
    with pytest.raises(CompareRefused, match=f"holds a record of commit {new_commit[:8]}, .* measures BASE at"):
        compare.main(resume=relabelled, warmup=False, repo=repo, measure=FakeRunner())
    other, judged = finished(repo, tmp_path / "other"), finished(repo, tmp_path / "judged")
    (forged,) = (other / "new" / "records").rglob("*.jsonl")
    shutil.copy(forged, next((judged / "new" / "records").iterdir()) / forged.name)
    with pytest.raises(CompareRefused, match="is not a round file of the compare in"):
        compare.main(resume=judged, warmup=False, repo=repo, measure=FakeRunner())


@pytest.mark.parametrize("argv, says", [
    (["compare", "HEAD", "--rounds", "100000000"], "--rounds takes a whole number from 1 to 50"),
    (["compare", "HEAD", "--threshold", "1e9"], "--threshold takes a relative rise from 0 to 1"),
    (["compare", "HEAD", "--bench", ""], "--bench takes a regular expression over benchmark names, got ''"),
    (["compare", "HEAD", "--results", ""], "--results takes a folder, got ''"),
])
def test_the_command_line_refuses_unbounded_and_empty_values_in_one_line(capsys, argv, says):
    with within(20):
        assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


# -- 5. kills leave nothing -------------------------------------------------------------------------
def test_a_killed_compare_s_worktrees_are_swept_and_unregistered_by_the_next(repo, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    stale = tmp_path / f"oombench-compare-{gone.pid}-x"
    git(repo, "worktree", "add", "--detach", "--quiet", str(stale / "base"), "HEAD")
    commits = {"base": git(repo, "rev-parse", "HEAD~1"), "new": git(repo, "rev-parse", "HEAD")}
    with compare.worktrees(repo, commits) as trees:
        assert not stale.exists() and str(stale) not in "".join(worktrees(repo))
        assert trees["base"].parent.name.startswith(f"oombench-compare-{os.getpid()}-")
    assert worktrees(repo) == [f"worktree {repo}"] and [p.name for p in tmp_path.glob("oombench-*")] == []


def test_one_bad_compare_folder_is_skipped_naming_it_and_the_others_listed(tmp_path, capsys):
    from test_compares import compare as planted
    good = planted(tmp_path, "good", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001])
    fifo = planted(tmp_path, "fifo", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001])
    (fifo / STATE).unlink()
    os.mkfifo(fifo / STATE)
    lost = planted(tmp_path, "lost", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001])
    (round_file, *_) = (lost / "new" / "records").rglob("*.jsonl")
    round_file.unlink()
    os.mkfifo(round_file)
    huge = planted(tmp_path, "huge", "a" * 40, "b" * 40, [m * 3 for m in (0.0100, 0.01001, 0.00999)],
                   state_kw={"threshold": 1e9})
    with within(10):
        found = {c.name: c for c in compares.find(tmp_path)}
    assert set(found) == {good.name, fifo.name, huge.name}
    assert found["huge"].verdict.startswith("FAIL")  # its threshold, past any gate, not taken
    err = capsys.readouterr().err
    assert f"{fifo / STATE} is a FIFO, not a regular file" in err and f"in {huge / STATE}" in err
    assert f"skipped the compare in {lost}: {round_file}: is a FIFO, not a regular file" in err


def test_a_verdict_over_some_of_the_planned_cases_says_which_were_never_judged_and_is_no_pass(repo, tmp_path,  # noqa: F811
                                                                                               capsys):
    """A case whose processes filed nothing (killed, lost) has no round on record: the PASS over
    the other case would read as the compare's."""
    runner = FakeRunner()

    def some(tree, ctx, bench):
        return runner(tree, ctx, bench) if "host_copy" in bench.params else "killed before it filed a record"
    rc = compare.main("HEAD~1", "HEAD", bench=HOST, rounds=1, results=tmp_path / "out", warmup=False, repo=repo,
                      measure=some)
    text = rendered(tmp_path / "out" / "report.md")
    assert rc == 2 and "PASS: 0 regression(s) in 1 case(s) compared" in text
    assert "**Not judged:** 1 case(s) of the plan lack a round on record" in text and "cpu_matmul_fp32" in text
    assert "1 case(s) of the plan lack a round on record" in capsys.readouterr().err
