"""``harness compare`` on a clone of this repository: the sides alternate A B B A per case, each
runs at its own commit in a worktree of its own, bad input is refused before anything runs, the
worktrees go however the run ends, and the gate reads both sides' records with BASE's noise."""
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from harness.drive.commands import cli, compare
from harness.drive.asv.bench import RUN_ENV
from harness.measure.instruments.devices import Devices
from harness.measure.instruments.environment import snapshot
from harness.measure.outcomes import OK
from harness.measure.records.record import Record
from harness.measure.records.store import RecordStore, load_file
from harness.measure.instruments.timing import Timing

REPO = Path(__file__).resolve().parents[1]
HOST_COPY = r"^ceilings\.Host\.\w+\('host_copy'\)"
HOST = r"^ceilings\.Host\."  # two cases: host_copy and cpu_matmul_fp32
ENV = snapshot(Devices(reason="no NVIDIA GPU visible (test)"))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """This repository's committed HEAD, whatever this checkout holds uncommitted, less its committed
    results/ and tests/data/ (nine tenths of the tree's bytes, which each worktree of a compare would check out
    again, and which no compare reads), in two commits: HEAD~1 without them, HEAD on top of it."""
    path = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--local", "--no-hardlinks", "--no-checkout", str(REPO), str(path)],
                   check=True)
    git(path, "read-tree", "HEAD")  # the index of HEAD, its files not yet checked out
    git(path, "rm", "-r", "-q", "--cached", "results", "tests/data")
    for message in ("tests: without results/", "tests: a second commit"):
        git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message)
    git(path, "reset", "-q", "--hard")
    return path


def rendered(report: Path) -> str:
    """The report as a reader sees it: the gate backslash-escapes punctuation in the markdown."""
    return re.sub(r"\\(.)", r"\1", report.read_text())


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def timing(median: float) -> Timing:
    samples = tuple(median * (1 + (i - 10) / 2000) for i in range(21))
    return Timing(median_s=median, q25_s=samples[5], q75_s=samples[15], min_s=samples[0], max_s=samples[-1],
                  steps=len(samples), warmup=1, samples_s=samples)


def file_run(ctx, bench, median: float) -> None:
    """Files the record a case's process would, its steps around ``median``, in ``ctx``'s run."""
    rec = Record(case=bench.case, params=json.loads(bench.params), outcome=OK, environment=ENV,
                 timing=timing(median), run_id=ctx.run_id, commit=ctx.commit)
    ctx.path.parent.mkdir(parents=True, exist_ok=True)
    RecordStore.append(ctx.path, rec)


class FakeRunner:
    """Files a record per run, as the case's process would, with a step time from ``seconds``
    (side, round, case) -> s; keeps (side, round, case, the tree's checked-out commit, the tree)
    of each measured run in ``calls`` and (case, the tree's commit, the records file) of each
    warm-up in ``warmups``. Each process takes ``takes`` seconds of ``clock`` (a FakeClock)."""

    def __init__(self, seconds=lambda side, r, case: 0.01, during=None, clock=None, takes=10.0):
        self.seconds, self.during, self.calls, self.warmups = seconds, during, [], []
        self.clock, self.takes = clock, takes

    def __call__(self, tree: Path, ctx, bench):
        if self.clock:
            self.clock.now += self.takes
        if ctx.run_id.endswith("-warmup"):
            self.warmups.append((bench.case + bench.params, git(tree, "rev-parse", "HEAD"), ctx.path))
            side, r = "warmup", 1
        else:
            side = "base" if ctx.store.root.parent.name == "base" else "new"
            r = int(ctx.run_id.rsplit("-r", 1)[1])
            self.calls.append((side, r, bench.case + bench.params, git(tree, "rev-parse", "HEAD"), tree))
            if self.during:
                self.during(len(self.calls))
        file_run(ctx, bench, self.seconds(side, r, bench.params))
        return ""


def test_order_alternates_so_that_each_side_leads_every_other_round():
    assert compare.order(2) == [(1, "base"), (1, "new"), (2, "new"), (2, "base")]
    assert "".join(compare.LETTER[s] for _, s in compare.order(3)) == "ABBAAB"


def test_each_case_runs_its_rounds_alternating_each_side_at_its_commit(clone, tmp_path):
    runner = FakeRunner()
    rc = compare.main("HEAD~1", "HEAD", bench=HOST, rounds=3, results=tmp_path / "out", repo=clone, measure=runner)
    assert rc == 0
    cases = list(dict.fromkeys(c[2] for c in runner.calls))
    assert len(cases) == 2
    for case in cases:
        assert ["".join(compare.LETTER[s] for s, _, c, *_ in runner.calls if c == case)] == ["ABBAAB"]
        assert [r for _, r, c, *_ in runner.calls if c == case] == [1, 1, 2, 2, 3, 3]
    heads = {side: {commit for s, _, _, commit, _ in runner.calls if s == side} for side in ("base", "new")}
    assert heads == {"base": {git(clone, "rev-parse", "HEAD~1")}, "new": {git(clone, "rev-parse", "HEAD")}}
    assert worktrees(clone) == [f"worktree {clone}"] and not any(c[4].exists() for c in runner.calls)
    # Each round's records are filed under their side, named with their commit and run id.
    names = sorted(p.name for p in (tmp_path / "out/base/records").rglob("*.jsonl"))
    assert len(names) == 3 and all(n.startswith(git(clone, "rev-parse", "HEAD~1")[:8]) for n in names)


def test_a_slower_new_fails_the_gate_against_the_noise_of_base_alone(clone, tmp_path):
    # BASE's three rounds agree within 0.4%: NEW 8% slower is a regression. Were NEW's rounds
    # part of the noise, their 8% would widen the floor past it, and it would pass.
    base = {1: 0.0100, 2: 0.01004, 3: 0.01002}
    runner = FakeRunner(lambda side, r, params: base[r] * (1.08 if side == "new" and "host_copy" in params else 1))
    report = tmp_path / "pr.md"
    rc = compare.main("HEAD", bench=HOST, results=tmp_path / "out", report=report, repo=clone, measure=runner)
    text = rendered(report)
    assert rc == 1 and "FAIL: 1 regression(s) (1 slower) in 2 case(s) compared" in text
    assert text.startswith("## oombench compare:") and "A B B A A B" in text
    slower = [line for line in text.splitlines() if "slower" in line and line.startswith("| +")]
    assert len(slower) == 1 and "host_copy" in slower[0]


def test_honest_rounds_pass(clone, tmp_path):
    runner = FakeRunner(lambda side, r, params: 0.01 * (1 + r / 1000))
    assert compare.main("HEAD", bench=HOST, rounds=2, results=tmp_path / "out", repo=clone, measure=runner) == 0
    assert "PASS: 0 regression(s) in 2 case(s) compared" in rendered(tmp_path / "out/report.md")


def test_a_compare_beside_other_gpu_processes_says_how_many_runs_began_so(clone, tmp_path, monkeypatch, capsys):
    """Between two runs none of the compare's own processes holds a GPU: any that does is a
    neighbour's, whose use of the host is in the runs' times. Idle GPUs, or none NVML can list, say nothing."""
    answers = iter([{0: 0, 1: 0}, None, {0: 0, 1: 2}, {0: 0, 1: 0}, {0: 1, 1: 2}] + [{0: 0}] * 20)
    monkeypatch.setattr(compare, "gpu_processes", lambda: next(answers))
    runner = FakeRunner()
    assert compare.main("HEAD", bench=HOST, results=tmp_path / "out", repo=clone, measure=runner) == 0
    text = rendered(tmp_path / "out/report.md")
    assert "**The box was shared:** 2 run(s) began while other processes held its GPUs" in text
    out = capsys.readouterr().out
    assert out.count("other processes hold this box's GPUs (gpu1: 2)") == 1  # said once, at the first
    assert json.loads((tmp_path / "out/compare.json").read_text())["shared_runs"] == 2
    monkeypatch.setattr(compare, "gpu_processes", lambda: {0: 0})
    assert compare.main("HEAD", bench=HOST, results=tmp_path / "quiet", repo=clone, measure=FakeRunner()) == 0
    assert "shared" not in rendered(tmp_path / "quiet/report.md")


def test_a_failing_runner_leaves_no_worktree(clone, tmp_path):
    def fails(count):
        if count == 3:
            raise RuntimeError("the case's process could not start")
    runner = FakeRunner(during=fails)
    with pytest.raises(RuntimeError, match="could not start"):
        compare.main("HEAD", bench=HOST, results=tmp_path / "out", repo=clone, measure=runner)
    assert worktrees(clone) == [f"worktree {clone}"] and not any(c[4].exists() for c in runner.calls)


def test_sigterm_stops_the_compare_removes_the_worktrees_and_keeps_what_was_measured(clone, tmp_path, capsys):
    runner = FakeRunner(during=lambda count: count == 3 and os.kill(os.getpid(), signal.SIGTERM))
    rc = compare.main("HEAD", bench=HOST, results=tmp_path / "out", report=tmp_path / "pr.md", repo=clone,
                      measure=runner)
    assert rc == 128 + signal.SIGTERM and len(runner.calls) == 3
    assert worktrees(clone) == [f"worktree {clone}"] and not any(c[4].exists() for c in runner.calls)
    assert len(list((tmp_path / "out").rglob("*.jsonl"))) == 2  # the first case's A and B
    assert not (tmp_path / "pr.md").exists()  # no verdict on half a compare
    said = capsys.readouterr().out.splitlines()[-1]
    assert "stopped by SIGTERM" in said and f"python3 -m harness compare --resume {tmp_path / 'out'}" in said


@pytest.mark.parametrize("change, args, says", [
    (None, ("no-such-commit-xyz",), "BASE 'no-such-commit-xyz' is not a commit"),
    (None, ("HEAD", "v999-none"), "NEW 'v999-none' is not a commit"),
    ("README.md", ("HEAD",), "1 uncommitted change(s) (e.g. README.md)"),
])
def test_a_dirty_tree_or_an_unknown_commit_is_refused_before_anything_runs(clone, tmp_path, change, args, says):
    runner = FakeRunner()
    if change:
        (clone / change).write_text((clone / change).read_text() + "edited\n")
    try:
        with pytest.raises(compare.CompareRefused) as refused:
            compare.main(*args, bench=HOST, results=tmp_path / "out", repo=clone, measure=runner)
    finally:
        git(clone, "checkout", "--", ".")
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert runner.calls == [] and not (tmp_path / "out").exists() and worktrees(clone) == [f"worktree {clone}"]


def test_a_results_folder_holding_records_is_refused(clone, tmp_path):
    (tmp_path / "out/base/records/m").mkdir(parents=True)
    (tmp_path / "out/base/records/m/x.jsonl").write_text("")
    with pytest.raises(compare.CompareRefused, match="holds records already: name a new folder"):
        compare.main("HEAD", bench=HOST, results=tmp_path / "out", repo=clone, measure=FakeRunner())


def test_the_command_line_refuses_in_one_line_with_status_2(capsys):
    assert cli.main(["compare", "no-such-commit-xyz", "--bench", HOST]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oombench compare: BASE 'no-such-commit-xyz' is not a commit") and err.count("\n") == 1
    assert cli.main(["compare", "HEAD", "--bench", "("]) == 2
    assert "is not one" in capsys.readouterr().err


# Where a worktree's bench is: today's, and a BASE's from before drive's rooms (harness/drive/).
@pytest.mark.parametrize("bench_at", ["harness/drive/asv", "harness/drive"])
def test_a_case_runs_in_a_fresh_process_with_the_worktrees_code(tmp_path, bench_at):
    # A stand-in tree whose bench.measure says what it was handed: the code that runs is the
    # tree's, not this checkout's (nor an installed one), with the run's context.
    bench_py = tmp_path / "tree" / bench_at / "bench.py"
    bench_py.parent.mkdir(parents=True)
    folders = bench_at.split("/")
    for depth in range(1, len(folders) + 1):
        (tmp_path / "tree" / "/".join(folders[:depth]) / "__init__.py").write_text("")
    bench_py.write_text("import json, os\n"
                        "def measure(case, **params):\n"
                        f"    open({str(tmp_path / 'said.json')!r}, 'w').write(json.dumps([case, params, os.getpid(), "
                        f"os.environ[{RUN_ENV!r}]]))\n"
                        "    print('measured')\n")
    bench = compare.todo.Bench("ceilings", "Host", (), "", "ceilings", json.dumps({"probe": "host_copy"}))
    ctx = compare.RunContext(RecordStore(tmp_path / "records"), "m", "run-r1", "abc")
    assert compare.measure_in(tmp_path / "tree", ctx, bench) == "measured\n"
    case, params, pid, run = json.loads((tmp_path / "said.json").read_text())
    assert (case, params, pid != os.getpid(), json.loads(run)["run_id"]) == ("ceilings", {"probe": "host_copy"}, True,
                                                                             "run-r1")


# What the compare does with host_copy (worktrees, a fresh process a run, the gate on both sides'
# records) does not depend on how much it moves: the case's processes, which run any sitecustomize
# of the user's path after the compare's own, build it at 64 MiB rather than 512 MiB.
SMALLER_COPY = """
import sys
if sys.argv[1:2] == ["ceilings"]:
    from functools import partial
    from harness.cases import ceilings
    ceilings.BUILDERS.update(host_copy=partial(ceilings.host_copy, 64 << 20))
"""


def test_a_a_compare_of_host_copy_reports_no_regression(clone, tmp_path, monkeypatch):
    """The real thing, on the CPU: HEAD against HEAD, each run a fresh process in a worktree. The
    test box is shared with other work (the suite's own workers among it): as CI's gate, it fails
    only for twice as slow, and five rounds a side, so that two rounds slowed by a neighbour are
    outvoted by the median of the side's rounds, as `harness compare` advises on a busy box."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SMALLER_COPY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path / "site"), os.environ.get("PYTHONPATH"))
                                                     if p))
    rc = compare.main("HEAD", "HEAD", bench=HOST_COPY, rounds=5, results=tmp_path / "out", repo=clone,
                      threshold=1.0, warmup=False)
    text = rendered(tmp_path / "out/report.md")
    assert rc == 0 and "PASS: 0 regression(s) in 1 case(s) compared" in text
    head = git(clone, "rev-parse", "HEAD")[:8]
    for side in ("base", "new"):
        files = sorted((tmp_path / "out" / side / "records").rglob("*.jsonl"))  # a file a round
        assert len(files) == 5 and all(f.name.startswith(head) for f in files)
        # the user's own sitecustomize ran too, after the compare's (the copy it built is the smaller one)
        assert [r.work for f in files for r in load_file(f).records] == [{"bytes": 2 * (64 << 20)}] * 5
    assert worktrees(clone) == [f"worktree {clone}"]


def test_only_each_sides_first_round_traces_the_gpu_busy_share(tmp_path):
    """The trace runs extra steps after the timed ones (seconds of a model's process); the verdict
    reads times, so the later rounds run none, and their processes are told so across the boundary."""
    state = compare.State({"base": "a" * 40, "new": "b" * 40}, ["A", "B"], 3, [], None, None, "c" * 40, "run", "m",
                          "report.md", 0.1)
    runs = compare.contexts(tmp_path, state)
    assert {key: ctx.trace_busy for key, ctx in runs.items()} == {
        (side, r): r == 1 for side in ("base", "new") for r in (1, 2, 3)}
    for ctx in runs.values():
        assert compare.RunContext.from_json(ctx.to_json()) == ctx
    # A harness that knows no such setting hands none over: its runs trace, as they always did.
    old = json.loads(runs["new", 2].to_json())
    del old["trace_busy"]
    assert compare.RunContext.from_json(json.dumps(old)).trace_busy is True


def test_the_report_quotes_the_compare_against_one_sides_round_once_every_round_is_timed():
    state = compare.State({"base": "a" * 40, "new": "b" * 40}, ["A", "B"], 2, [], None, None, "c" * 40, "run", "m",
                          "report.md", 0.1, measured_s=400.0)
    assert compare.one_round(state) == ""  # no round timed: a compare from before rounds were timed
    state.round_s = {"base r1": 60.0, "new r1": 100.0, "new r2": 80.0}
    assert compare.one_round(state) == ""  # a round missing: no figure that would undercount it
    state.round_s["base r2"] = 90.0
    assert compare.one_round(state) == (
        f" One side's round (a fresh process a case, as one plain run of the cases): {compare.minutes(60)} to "
        f"{compare.minutes(100)}; the compare's measuring took 4.0 to 6.7 times one.")
