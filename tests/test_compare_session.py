"""One sitting of ``harness compare``, without git or processes: each run measured from its side's
worktree into its side's and round's file, a line per run saying where it stands and what it
filed, each round's seconds kept, the deadline read only between cases, a process that filed
nothing given a record saying so, the warm-up filed apart at BASE's commit, and runs that began
beside other GPU work counted and said once."""
import json
import os
from pathlib import Path

import pytest

from harness.drive.asv import begun
from harness.drive.commands import compare
from harness.drive.commands.compare_state import STATE, State
from harness.drive.commands.todo import Bench
from test_compare import file_run
from test_compare_resume import FakeClock

BENCHES = [Bench("ceilings", "Host", ("track_seconds_per_step",), f"('{p}')", "ceilings", json.dumps({"probe": p}))
           for p in ("first", "second")]
ENVIRON = {"ONLY": "this sitting's"}


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(compare, "clock", fake)
    monkeypatch.setattr(compare, "gpu_processes", dict)  # the box to itself
    return fake


@pytest.fixture
def lost(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(begun, "file_lost", lambda ctx, env: calls.append((ctx.run_id, ctx.path, env)))
    return calls


def state() -> State:
    return State(commits={"base": "a" * 40, "new": "b" * 40}, revs=["HEAD~1", "HEAD"], rounds=2, benches=BENCHES,
                 profile=None, bench=None, harness="c" * 40, run_id="20990101T000000-abcdef", machine="box",
                 report="report.md", threshold=0.0)


class Measure:
    """Stands in for a case's process: ``takes`` seconds of the clock, a record filed in the run's
    context (none where ``files`` is false), and its output returned."""

    def __init__(self, clock: FakeClock, takes: float = 10.0, files: bool = True):
        self.clock, self.takes, self.files, self.calls = clock, takes, files, []

    def __call__(self, tree: Path, ctx, bench: Bench) -> str:
        self.clock.now += self.takes
        self.calls.append((tree, ctx, bench))
        if self.files:
            file_run(ctx, bench, 0.01)
        return f"the output of {bench.params}"


def sitting(tmp_path, measure, benches=BENCHES, deadline=None):
    st = state()
    runs = compare.contexts(tmp_path / "folder", st)
    steps = [(b, r, side) for b in benches for r, side in compare.order(st.rounds)]
    trees = {"base": tmp_path / "base-tree", "new": tmp_path / "new-tree"}
    timer = compare.Timer(tmp_path / "folder", st)
    (tmp_path / "folder").mkdir()
    left = compare.measure_all(steps, trees, runs, measure, ENVIRON, deadline, timer)
    return left, st, runs, steps, trees


def test_each_run_is_measured_from_its_sides_tree_into_its_rounds_file_and_timed(tmp_path, clock, lost, capsys):
    measure = Measure(clock)
    left, st, runs, steps, trees = sitting(tmp_path, measure)
    assert left == 0
    assert [(tree, ctx, b) for tree, ctx, b in measure.calls] == [(trees[s], runs[s, r], b) for b, r, s in steps]
    assert lost == [(runs[s, r].run_id, runs[s, r].path, ENVIRON) for b, r, s in steps]
    assert st.round_s == {"base r1": 20.0, "new r1": 20.0, "new r2": 20.0, "base r2": 20.0}
    assert st.measured_s == 80.0 and json.loads((tmp_path / "folder" / STATE).read_text())["measured_s"] == 80.0
    assert capsys.readouterr().out.splitlines() == [
        f"oombench compare: [{i}/8] {s} round {r} (10.0 s): ceilings  probe={json.loads(b.params)['probe']}  ok  "
        "10.0 ms  0.5%  " for i, (b, r, s) in enumerate(steps, 1)]


def test_a_run_that_filed_nothing_shows_the_end_of_its_output(tmp_path, clock, lost, capsys):
    sitting(tmp_path, Measure(clock, files=False), benches=BENCHES[:1])
    first = capsys.readouterr().out.split("oombench compare: ")[1]
    assert first.startswith('[1/4] base round 1 (10.0 s): ceilings {"probe": "first"}: no record; its output ended:')
    assert 'the output of {"probe": "first"}' in first


def test_the_deadline_is_read_between_cases_so_a_case_begun_runs_all_its_rounds(tmp_path, clock, lost):
    measure = Measure(clock)
    left, *_ = sitting(tmp_path, measure, deadline=clock.now + 5)  # passes during the first run
    assert left == 4 and len(measure.calls) == 4 and {b for _, _, b in measure.calls} == {BENCHES[0]}


def test_each_run_that_begins_beside_other_gpu_work_is_counted(tmp_path, clock, lost, monkeypatch):
    monkeypatch.setattr(compare, "gpu_processes", lambda: {1: 1})
    _, st, *_ = sitting(tmp_path, Measure(clock), benches=BENCHES[:1])
    assert st.shared_runs == 4


def test_a_deadline_already_past_starts_nothing(tmp_path, clock, lost):
    measure = Measure(clock)
    left, st, *_ = sitting(tmp_path, measure, benches=BENCHES[:1], deadline=clock.now - 1)
    assert left == 4 and measure.calls == [] and st.round_s == {}


def test_the_warm_up_runs_at_base_s_commit_filed_apart_and_removed(tmp_path, clock, capsys):
    measure, st = Measure(clock), state()
    compare.warm_up(tmp_path / "base-tree", st, BENCHES[1], measure, compare.Timer(tmp_path, st))
    ((tree, ctx, bench),) = measure.calls
    assert (tree, bench, ctx.commit, ctx.run_id) == (tmp_path / "base-tree", BENCHES[1], "a" * 40,
                                                     f"{st.run_id}-warmup")
    assert ctx.parent_pid == os.getpid() and tmp_path not in ctx.path.parents and not ctx.path.exists()
    assert st.measured_s == 10.0
    said = capsys.readouterr().out
    assert said == "oombench compare: warm-up (base, not kept): ceilings  probe=second  ok  10.0 ms  0.5%  \n"
    compare.warm_up(tmp_path / "base-tree", st, BENCHES[1], Measure(clock, files=False),
                    compare.Timer(tmp_path, st))
    assert capsys.readouterr().out.startswith('oombench compare: warm-up (base, not kept): '
                                              'ceilings {"probe": "second"}: no record; its output ended:\n'
                                              'the output of {"probe": "second"}')


def test_runs_beside_other_gpu_work_are_counted_and_said_once(monkeypatch, capsys):
    st = state()
    monkeypatch.setattr(compare, "gpu_processes", lambda: {0: 2, 1: 0, 3: 1})
    compare.neighbours(st)
    assert st.shared_runs == 1 and capsys.readouterr().out == (
        "oombench compare: other processes hold this box's GPUs (gpu0: 2, gpu3: 1): a compare beside them measures "
        "them too; its report says how many runs began so\n")
    compare.neighbours(st)
    assert st.shared_runs == 2 and capsys.readouterr().out == ""
    for idle in ({0: 0}, None):
        monkeypatch.setattr(compare, "gpu_processes", lambda idle=idle: idle)
        compare.neighbours(st)
    assert st.shared_runs == 2 and capsys.readouterr().out == ""
