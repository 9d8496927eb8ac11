"""``python3 -m harness compare BASE [NEW]``: two commits measured on this box in one session,
then NEW gated against BASE.

Records of two hosts, or of one host on two days, differ by more than the regressions worth
catching (the host's link, placement and clocks, and its drift). Measured here one after the
other, as TorchBench's A/B runs do, the host drops out of the comparison. Each commit runs from
a git worktree of its own with this interpreter, each case in a fresh process through the entry
point asv's benchmarks call (``harness.drive.bench.measure``); per case the two alternate
A B B A A B ..., so that a drift of the box over the session weighs on both alike.

Which cases: those this checkout's ``benchmarks/`` select by ``--profile`` or ``--bench``, as
``harness run`` selects them. The gate (``harness.report.gate``) then judges every round of each
side (``harness.report.rounds``: the median of a side's round medians, a rank test over all its
rounds' steps), its noise floors learned from BASE's rounds alone: the within-session noise of
one code, never widened by the difference being judged. The worktrees are removed on the way
out, whether the run ends, fails or is stopped; the records stay in the compare's folder.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from harness.drive import begun, profiles, suite, todo
from harness.drive.bench import RUN_ENV
from harness.measure import lifeline
from harness.measure.environment import snapshot
from harness.measure.machine import machine_name
from harness.measure.safety import MULTICAST_OFF
from harness.measure.store import REPO, RecordStore, RunContext, load_file
from harness.report.summary import row
from harness.units import minutes

BASE, NEW = "base", "new"
LETTER = {BASE: "A", NEW: "B"}
# Three rounds give BASE three runs of each case to learn its noise from, and each side three
# votes, so that one round that landed badly does not decide the verdict.
ROUNDS = 3
# What a case's fresh process runs, with the worktree's harness first on its path.
CASE = "import json, sys; from harness.drive.bench import measure; measure(sys.argv[1], **json.loads(sys.argv[2]))"
SHOWN_OUTPUT = 1500  # characters of a process's output shown where it filed no record


class CompareRefused(Exception):
    """``harness compare`` will not start (exit 2); the message names the fix."""


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def resolve(repo: Path, rev: str, side: str) -> str:
    """The full hash of commit ``rev`` in ``repo``; CompareRefused where git knows no such commit."""
    done = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not rev.strip():
        raise CompareRefused(f"{side} {rev!r} is not a commit of {repo}: name a branch, tag or hash that "
                             "`git rev-parse` knows (fetch it first)")
    return done.stdout.strip()


def refuse_dirty(repo: Path) -> None:
    """The cases are chosen and gated by this checkout's code, and NEW is a commit: uncommitted
    edits would be in neither side's measurement and yet seem to be."""
    done = git(repo, "status", "--porcelain", "--untracked-files=no")
    if done.returncode != 0:
        raise CompareRefused(f"{repo} is not a git checkout ({done.stderr.strip()}): run compare in a clone")
    changed = done.stdout.splitlines()
    if changed:
        raise CompareRefused(f"the working tree has {len(changed)} uncommitted change(s) (e.g. {changed[0][3:]}): "
                             "compare measures commits: commit or stash them first")


def chosen(profile: str, bench: str | None) -> list[todo.Bench]:
    """One bench per (case, parameters) that ``--bench``, else the profile, selects."""
    if bench is not None:
        try:
            re.compile(bench)
        except re.error as e:
            raise CompareRefused(f"--bench takes a regular expression over benchmark names (e.g. --bench "
                                 f"'ceilings\\.Host'): {bench!r} is not one ({e})") from None
    exprs = [bench] if bench else profiles.benchmarks(profile)
    picked = {(b.case, b.params): b for b in todo.matching(exprs, todo.benches())}
    if not picked:
        what = f"--bench {bench!r}" if bench else f"--profile {profile}"
        raise CompareRefused(f"{what} selects no benchmark: see benchmarks/ for the names "
                             "(module.Class.method(parameters))")
    return list(picked.values())


def refuse_used(folder: Path) -> None:
    """A folder that holds records already would mix another compare's into this one's gate."""
    if folder.is_file() or any(folder.rglob("*.jsonl")):
        raise CompareRefused(f"--results {folder} is a file or holds records already: name a new folder")


def order(rounds: int) -> list[tuple[int, str]]:
    """(round, side) of one case's runs: A B, B A, A B, ..."""
    return [(r, side) for r in range(1, rounds + 1) for side in ((BASE, NEW) if r % 2 else (NEW, BASE))]


@contextmanager
def worktrees(repo: Path, commits: dict[str, str]):
    """side -> a detached git worktree of its commit, in a temporary folder; each removed (and
    unregistered) on the way out, however that comes."""
    root = Path(tempfile.mkdtemp(prefix="oombench-compare-"))
    trees = {}
    try:
        for side, commit in commits.items():
            path = root / side
            done = git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
            if done.returncode != 0:
                raise CompareRefused(f"git worktree add of {commit[:8]} failed ({done.stderr.strip()}): "
                                     "`git worktree prune`, then try again")
            trees[side] = path
        yield trees
    finally:
        for path in trees.values():
            git(repo, "worktree", "remove", "--force", str(path))
        shutil.rmtree(root, ignore_errors=True)
        git(repo, "worktree", "prune")


def measure_in(tree: Path, ctx: RunContext, bench: todo.Bench) -> str:
    """Measures ``bench``'s case in a fresh process of this interpreter running ``tree``'s code,
    which files its record in ``ctx``'s run; returns the process's output. The process and all
    it starts end with this one, and are ended on the way out."""
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, RUN_ENV: ctx.to_json(), **MULTICAST_OFF}
    proc = subprocess.Popen([sys.executable, "-c", CASE, bench.case, bench.params], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lifeline.preexec(os.getpid()))
    try:
        return proc.communicate()[0]
    finally:
        lifeline.end_tree(proc.pid)
        proc.wait()


def filed(path: Path) -> list:
    return load_file(path).records if path.exists() else []


def told(recs: list, bench: todo.Bench, output: str | None) -> str:
    """What one run filed, in a line of the run's table; its output's end where it filed nothing."""
    if recs:
        return "  ".join(row(recs[-1]))
    return f"{bench.case} {bench.params}: no record; its output ended:\n{(output or '')[-SHOWN_OUTPUT:]}"


def measure_all(benches, trees: dict[str, Path], runs: dict[tuple[str, int], RunContext], rounds: int,
                measure, env) -> None:
    """Every case, its sides in ``order``; one line per run saying what it filed."""
    steps = [(b, r, side) for b in benches for r, side in order(rounds)]
    for i, (b, r, side) in enumerate(steps, 1):
        ctx = runs[side, r]
        before = len(filed(ctx.path))
        output = measure(trees[side], ctx, b)
        begun.file_lost(ctx, env)  # a process that died without a record gets one saying so
        print(f"oombench compare: [{i}/{len(steps)}] {side} round {r}: {told(filed(ctx.path)[before:], b, output)}",
              flush=True)


def session(repo: Path, commits: dict[str, str], benches, runs, rounds: int, measure, env,
            folder: Path) -> int | None:
    """Both sides measured from their worktrees; 128 + the signal where one stopped it, else None."""
    with suite.signals_stop_the_run():
        try:
            with worktrees(repo, commits) as trees:
                measure_all(benches, trees, runs, rounds, measure, env)
        except suite.Interrupted as e:
            print(f"oombench compare: stopped by {e}; the worktrees are removed, the records measured are in "
                  f"{folder}", flush=True)
            return 128 + e.signum
    return None


def judge(folder: Path, report: Path, threshold: float) -> int:
    """The gate of NEW's records against BASE's, with floors learned from BASE's rounds."""
    from harness.report.gate import gate
    base, new = folder / BASE / "records", folder / NEW / "records"
    rc, text = gate(base, new, threshold=threshold, history=base, report=report, all_rounds=True)
    print(text, file=sys.stderr if rc == 2 else sys.stdout)
    return rc


def headed(report: Path, lines: list[str]) -> None:
    """Puts the compare's own lines above the gate's report, written whole or not at all."""
    text = "\n".join(lines) + "\n\n" + (report.read_text(encoding="utf-8") if report.exists() else "")
    tmp = report.with_name(f".{report.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, report)


def heading(commits: dict[str, str], revs: tuple[str, str], machine: str, seconds: float, cases: int,
            rounds: int) -> list[str]:
    return [f"## oombench compare: `{commits[BASE][:8]}` ({revs[0]}) against `{commits[NEW][:8]}` ({revs[1]})",
            f"Both measured on {machine} in one session, {minutes(seconds)}: {cases} case(s), {rounds} round(s) "
            f"a side in the order {' '.join(LETTER[s] for _, s in order(rounds))} per case (A: BASE), each run in "
            "a fresh process; the gate judges every round of each side (the median of its rounds' medians), its floors "
            "learned from BASE's rounds."]


def main(base_rev: str, new_rev: str = "HEAD", *, profile: str = "standard", bench: str | None = None,
         rounds: int = ROUNDS, results: str | Path | None = None, report: str | Path | None = None,
         threshold: float = 0.0, repo: Path = REPO, measure=measure_in) -> int:
    """Exit status: the gate's (0 pass, 1 regressions, 2 nothing to compare), 128 + a signal that
    stopped it; CompareRefused before anything runs. ``measure``: how one case is run (tests)."""
    commits = {BASE: resolve(repo, base_rev, "BASE"), NEW: resolve(repo, new_rev, "NEW")}
    benches = chosen(profile, bench)
    refuse_dirty(repo)
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    folder = Path(results) if results else repo / ".asv" / "compare" / run_id
    refuse_used(folder)
    report = Path(report) if report else folder / "report.md"
    env = snapshot()
    machine = machine_name(env.devices, env.cpu)
    runs = {(side, r): RunContext(RecordStore.of_results(folder / side), machine, f"{run_id}-r{r}", commits[side],
                                  parent_pid=os.getpid()) for r in range(1, rounds + 1) for side in commits}
    print(f"oombench compare: {len(benches)} case(s), {rounds} round(s) a side, BASE {commits[BASE][:8]} and NEW "
          f"{commits[NEW][:8]} on {machine}; records in {folder}", flush=True)
    started = time.time()
    stopped = session(repo, commits, benches, runs, rounds, measure, env, folder)
    if stopped is not None:
        return stopped
    rc = judge(folder, report, threshold)
    headed(report, heading(commits, (base_rev, new_rev), machine, time.time() - started, len(benches), rounds))
    print(f"oombench compare: report in {report}")
    return rc
