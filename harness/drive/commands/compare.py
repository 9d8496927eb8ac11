"""``python3 -m harness compare BASE [NEW]``: two commits measured on this box in one session,
then NEW gated against BASE.

Records of two hosts, or of one host on two days, differ by more than the regressions worth
catching (the host's link, placement and clocks, and its drift). Measured here one after the
other, as TorchBench's A/B runs do, the host drops out of the comparison. Each commit runs from
a git worktree of its own with this interpreter, each case in a fresh process through the entry
point asv's benchmarks call (``harness.drive.asv.bench.measure``); per case the two alternate
A B B A A B ..., so that a drift of the box over the session weighs on both alike.

Which cases: those this checkout's ``benchmarks/`` select by ``--profile`` or ``--bench``, as
``harness run`` selects them. The gate (``harness.report.gate``) then judges every round of each
side (``harness.report.rounds``: the median of a side's round medians, a rank test over all its
rounds' steps), its noise floors learned from BASE's rounds alone: the within-session noise of
one code, never widened by the difference being judged. A host-bound step's floor is at least the
widest its fresh processes scattered on one host in the compares committed under results/compare
(``harness.report.noise.SessionFloors``): a few rounds cannot show a host-paced step's lumpy
scatter. The worktrees are removed on the way
out, whether the run ends, fails or is stopped; the records stay in the compare's folder, and so
does the report (``--report`` names a file it is also written to; nothing read from the folder is
used as a path, so a copied folder never writes the original's).

Each side's processes import the project from its own worktree alone (``own_code``): with the
project installed editable, the installer's hook would hand a module the commit lacks from the
checkout, and a commit that cannot import would be measured with code that is not its own.

A compare may take longer than one sitting on a box (a lent GPU box runs a command for minutes).
The unit that must not be split is a case: both sides' rounds of it compared on one host, in one
stretch of time. ``--deadline`` starts no case past it (a case begun runs its rounds to the end);
stopped there (exit ``STOPPED``, 75), by a signal (128 + it) or killed, the compare keeps what it
filed, and ``--resume FOLDER`` measures the cases not on record yet, then gates all of them: what
it goes on with is read from the state file written at the start (``harness.drive.commands.compare_state``).
A case a stopped sitting left with only some of its rounds is measured whole again; the rounds it
had are moved to ``interrupted/`` in the folder, kept but not judged. A folder is measured by one
process at a time (its lock). Stopped at its deadline, a compare judges the cases it has measured
so far, each whole, into ``interim-report.md`` in its folder and prints that verdict in a line,
so that a long compare shows early what it is finding; its own report comes with its last case,
and the interim one is removed then.

The host drops out only where the compare has the box to itself: a run that begins while another
process holds one of the box's GPUs (NVML, between runs) is counted, and the report says how many
did (``State.shared_runs``).

Only each side's first round traces the GPU-busy share (``RunContext.trace_busy``): the trace
runs extra steps after the timed ones, seconds of a model's process, for a share the next rounds
would repeat; the verdict reads times. The later rounds keep NVML's share of their timed steps
where it read them.

Each sitting begins with a warm-up: one process of the first case from BASE's worktree whose
record is not kept. The first process of a session on a box runs slow (the driver loaded, the
clocks raised, the page cache filled); measured, it would be BASE's first round, and would widen
the floor learned from BASE's rounds past the slowdowns the compare exists to catch.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

from harness.drive import bytecode, scratch
from harness.drive.asv import begun, profiles, suite
from harness.drive.commands import own_code, todo
from harness.drive.asv.bench import RUN_ENV
from harness.drive.commands.compare_state import MAX_ROUNDS, MAX_THRESHOLD, STATE, CompareRefused, State
from harness.measure.guards import lifeline, locks
from harness.measure.instruments.devices import gpu_processes
from harness.measure.instruments.environment import snapshot
from harness.measure.instruments.machine import machine_name
from harness.measure.guards.inputs import Refused, output_file, writable_folder, write_whole
from harness.measure.guards.safety import MULTICAST_OFF
from harness.measure.records.store import (REPO, RecordStore, RunContext, load_file, record_key, refuse_unwritable,
                                           write_records)
from harness.report.compares import INTERIM, between, round_span
from harness.report import markdown
from harness.report.gate import COMPARES, gate
from harness.report.summary import row
from harness.units import minutes

BASE, NEW = "base", "new"
REPORT = "report.md"  # in the compare's folder, whatever --report also names
LETTER = {BASE: "A", NEW: "B"}
# Three rounds give BASE three runs of each case to learn its noise from, and each side three
# votes, so that one round that landed badly does not decide the verdict.
ROUNDS = 3
# What a case's fresh process runs, with the worktree's harness first on its path.
# A worktree of a commit from before drive's rooms has its bench one package up, in harness.drive.
CASE = ("import json, sys\n"
        "try:\n    from harness.drive.asv.bench import measure\n"
        "except ModuleNotFoundError as missing:\n"
        "    if missing.name != 'harness.drive.asv':\n        raise\n"
        "    from harness.drive import bench\n    measure = bench.measure\n"
        "measure(sys.argv[1], **json.loads(sys.argv[2]))")
SHOWN_OUTPUT = 1500  # characters of a process's output shown where it filed no record
# The exit status of a compare its --deadline stopped: sysexits' EX_TEMPFAIL ("try again later").
# 0 to 2 are the gate's answers and 128 + N a signal's stop. ``harness run`` stopped at its
# deadline exits with asv's status (the cases past it are skips, not failures); a compare stopped
# there has no verdict yet, and no script may read one from its status.
STOPPED = os.EX_TEMPFAIL


def clock() -> float:
    """Seconds for deadlines and measuring time (monotonic: the wall clock may be set meanwhile)."""
    return time.monotonic()


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
    changed = done.stdout.splitlines() + [f" M {p}" for p in suite.hidden_edits(repo)]
    if changed:
        raise CompareRefused(f"the working tree has {len(changed)} uncommitted change(s) (e.g. {changed[0][3:]}): "
                             "compare measures commits: commit or stash them first")


def chosen(profile: str, bench: str | None) -> list[todo.Bench]:
    """One bench per (case, parameters) that ``--bench``, else the profile, selects."""
    if bench is not None:
        if not bench.strip():
            raise CompareRefused(f"--bench takes a regular expression over benchmark names, got {bench!r}: name one "
                                 "(e.g. --bench 'ceilings\\.Host'), or leave --bench out for the profile")
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
    if (folder / STATE).exists():
        raise CompareRefused(f"--results {folder} is the folder of a compare that began already: "
                             f"`{resume_command(folder)}` goes on with it, or name a new folder")
    if folder.is_file() or any(folder.rglob("*.jsonl")):
        raise CompareRefused(f"--results {folder} is a file or holds records already: name a new folder")


def resume_command(folder: Path) -> str:
    return shlex.join(["python3", "-m", "harness", "compare", "--resume", str(folder)])


def order(rounds: int) -> list[tuple[int, str]]:
    """(round, side) of one case's runs: A B, B A, A B, ..."""
    return [(r, side) for r in range(1, rounds + 1) for side in ((BASE, NEW) if r % 2 else (NEW, BASE))]


@contextmanager
def worktrees(repo: Path, commits: dict[str, str]):
    """side -> a detached git worktree of its commit, in a temporary folder named for this process
    (``scratch``: a killed compare's folder is removed by the next one, and its registration with
    it); each removed (and unregistered) on the way out, however that comes."""
    trees = {}
    try:
        with scratch.private_dir("compare") as root:
            git(repo, "worktree", "prune")  # the registrations of worktrees a killed compare left, swept above
            for side, commit in commits.items():
                path = root / side
                done = git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
                if done.returncode != 0:
                    raise CompareRefused(f"git worktree add of {commit[:8]} failed ({done.stderr.strip()}): "
                                         "`git worktree prune`, then try again")
                trees[side] = path
            try:
                yield trees
            finally:
                for path in trees.values():
                    git(repo, "worktree", "remove", "--force", str(path))
    finally:
        git(repo, "worktree", "prune")


def measure_in(tree: Path, ctx: RunContext, bench: todo.Bench) -> str:
    """Measures ``bench``'s case in a fresh process of this interpreter running ``tree``'s code,
    which files its record in ``ctx``'s run; returns the process's output. The process and all
    it starts end with this one, and are ended on the way out."""
    site = own_code.site_folder(Path(tree).parent)  # beside the worktrees, in the compare's own scratch folder
    env = {**own_code.environ(tree, site, bytecode.for_children(os.environ)), RUN_ENV: ctx.to_json(), **MULTICAST_OFF}
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


def contexts(folder: Path, state: State) -> dict[tuple[str, int], RunContext]:
    """(side, round) -> where its runs file their records: the same files in every sitting. Only
    the first round traces the GPU-busy share (``RunContext.trace_busy``): the verdict reads times,
    and the trace's extra steps cost a model's process seconds, for a share each round would repeat."""
    return {(side, r): RunContext(RecordStore.of_results(folder / side), state.machine, f"{state.run_id}-r{r}",
                                  commit, parent_pid=os.getpid(), trace_busy=r == 1)
            for r in range(1, state.rounds + 1) for side, commit in state.commits.items()}


def foreign(folder: Path, state: State, runs: dict[tuple[str, int], RunContext]) -> None:
    """CompareRefused where the folder's records are not all this compare's own: each side's
    records in its round files alone, each carrying its side's commit and its round's run id. A
    folder whose sides were swapped, or given a file or record of another run, would be judged
    as a compare of commits it did not measure."""
    for ctx in runs.values():
        try:
            refuse_unwritable(ctx.path)
        except Refused as e:
            raise CompareRefused(f"the compare in {folder}: {e}") from None
    for side in (BASE, NEW):
        own = {ctx.path: ctx for (s, _), ctx in runs.items() if s == side}
        for path in sorted((folder / side / "records").rglob("*.jsonl")):
            ctx = own.get(path)
            if ctx is None:
                raise CompareRefused(f"{path} is not a round file of the compare in {folder} (its {side} rounds are "
                                     f"{runs[side, 1].path.name[:-len('-r1.jsonl')]}-rN.jsonl): move it out of the "
                                     "folder, then resume")
            for rec in filed(path):
                if (rec.commit, rec.run_id) != (ctx.commit, ctx.run_id):
                    raise CompareRefused(f"{path} holds a record of commit {str(rec.commit)[:8]}, run "
                                         f"{str(rec.run_id)[:40]!r}, and the compare in {folder} measures "
                                         f"{side.upper()} at {ctx.commit[:8]} in run {ctx.run_id}: restore the folder "
                                         "as the compare wrote it, or start a new compare")


def remaining(state: State, held: dict[tuple[str, int], list]) -> list[tuple[todo.Bench, int, str]]:
    """(bench, round, side) of every run, in order, of the cases whose rounds are not all on record
    in ``held`` ((side, round) -> its file's records; a failed run counts: its process ran): each
    such case whole, in its A B B A order."""
    keys = [{record_key(rec) for rec in recs} for recs in held.values()]
    done = {(b.case, b.params) for b in state.benches if all((b.case, b.params) in k for k in keys)}
    return [(b, r, side) for b in state.benches if (b.case, b.params) not in done for r, side in order(state.rounds)]


def set_aside(folder: Path, steps, runs: dict[tuple[str, int], RunContext], held: dict[tuple[str, int], list]) -> int:
    """Moves the records of the cases about to be measured again (a stopped sitting left some of
    their rounds) out of the round files into ``interrupted/``, where the gate does not read them:
    kept, but a case is compared on one host in one stretch of time. Returns how many moved."""
    again = {(b.case, b.params) for b, _, _ in steps}
    moved = 0
    for (side, r), recs in held.items():
        out = [rec for rec in recs if record_key(rec) in again]
        if not out:
            continue
        aside = folder / "interrupted" / f"{side}-r{r}.jsonl"
        for rec in out:
            RecordStore.append(aside, rec)
        write_records(runs[side, r].path, [rec for rec in recs if record_key(rec) not in again])
        moved += len(out)
    return moved


def past(deadline: float | None) -> bool:
    return deadline is not None and clock() > deadline


class Timer:
    """Adds the sitting's measuring time to the state file after each process, so that a sitting
    that is killed counts up to its last process."""

    def __init__(self, folder: Path, state: State):
        self.folder, self.state, self.since = folder, state, clock()

    def tick(self) -> None:
        now = clock()
        self.state.measured_s += now - self.since
        self.since = now
        self.state.save(self.folder)


def warm_up(tree: Path, state: State, bench: todo.Bench, measure, timer: Timer) -> None:
    """One process of ``bench`` from BASE's worktree, its record filed in a folder of its own and
    removed: the box's first process of the session, kept out of what is judged."""
    with scratch.private_dir("compare-warmup") as tmp:
        ctx = RunContext(RecordStore(tmp / "records"), state.machine, f"{state.run_id}-warmup", state.commits[BASE],
                         parent_pid=os.getpid())
        output = measure(tree, ctx, bench)
        timer.tick()
        print(f"oombench compare: warm-up (base, not kept): {told(filed(ctx.path), bench, output)}", flush=True)


def measure_all(steps, trees: dict[str, Path], runs: dict[tuple[str, int], RunContext], measure, env,
                deadline: float | None, timer: Timer) -> int:
    """Each (bench, round, side) of ``steps`` in turn, one line per run saying what it filed, no
    case started past ``deadline`` (one begun runs all its rounds); returns how many runs were left
    then (0: all ran)."""
    for i, (b, r, side) in enumerate(steps):
        if (i == 0 or steps[i - 1][0] != b) and past(deadline):
            return len(steps) - i
        neighbours(timer.state)
        ctx = runs[side, r]
        before, began = len(filed(ctx.path)), clock()
        output = measure(trees[side], ctx, b)
        took = clock() - began
        timer.state.round_s[f"{side} r{r}"] = timer.state.round_s.get(f"{side} r{r}", 0.0) + took
        timer.tick()
        begun.file_lost(ctx, env)  # a process that died without a record gets one saying so
        print(f"oombench compare: [{i + 1}/{len(steps)}] {side} round {r} ({took:.1f} s): "
              f"{told(filed(ctx.path)[before:], b, output)}", flush=True)
    return 0


def neighbours(state: State) -> None:
    """Counts a run that begins while another process holds a GPU of this box (between runs, none
    of the compare's own does), and says so at the first: the compare takes the host out of the
    comparison only where it has the box to itself. Its neighbours' processes share the host's
    cores, memory and link, at moments that fall on one side's rounds as likely as on the other's."""
    held = {i: n for i, n in (gpu_processes() or {}).items() if n}
    if not held:
        return
    state.shared_runs += 1
    if state.shared_runs == 1:
        where = ", ".join(f"gpu{i}: {n}" for i, n in sorted(held.items()))
        print(f"oombench compare: other processes hold this box's GPUs ({where}): a compare beside them "
              "measures them too; its report says how many runs began so", flush=True)


def session(repo: Path, folder: Path, state: State, steps, runs, measure, env, deadline_s: float | None,
            warmup: bool) -> int | None:
    """The runs of ``steps`` measured from the sides' worktrees, after a warm-up where ``warmup``;
    None where all ran, else the exit status of the stop (``STOPPED``, 128 + a signal), its line
    naming the command that goes on."""
    timer = Timer(folder, state)
    deadline = None if deadline_s is None else clock() + deadline_s
    with suite.signals_stop_the_run():
        try:
            with worktrees(repo, state.commits) as trees:
                if warmup and not past(deadline):
                    warm_up(trees[BASE], state, steps[0][0], measure, timer)
                left = measure_all(steps, trees, runs, measure, env, deadline, timer)
        except suite.Interrupted as e:
            print(f"oombench compare: stopped by {e}; the worktrees are removed, the records measured are in "
                  f"{folder}: `{resume_command(folder)}` measures the rest", flush=True)
            return 128 + e.signum
        finally:
            timer.tick()
    if left:
        print(f"oombench compare: stopped at its deadline with {left} of {len(steps)} run(s) left; those measured "
              f"are in {folder}: `{resume_command(folder)}` measures the rest", flush=True)
        return STOPPED
    return None


def gated(folder: Path, report: Path, threshold: float) -> tuple[int, str]:
    """The gate of NEW's records against BASE's, with floors learned from BASE's rounds, its
    markdown written to ``report``."""
    base, new = folder / BASE / "records", folder / NEW / "records"
    return gate(base, new, threshold=threshold, history=base, report=report, all_rounds=True, prior=COMPARES)


def judge(folder: Path, report: Path, threshold: float) -> int:
    rc, text = gated(folder, report, threshold)
    print(text, file=sys.stderr if rc == 2 else sys.stdout)
    return rc


def so_far(folder: Path, state: State) -> None:
    """After a stop at the deadline: the gate over the cases on record, in ``INTERIM`` under its
    own heading, and its verdict in one line. Each case on record then is whole: a case begun runs
    all its rounds, and one a killed sitting left part-measured was set aside at this one's start."""
    report = folder / INTERIM
    rc, text = gated(folder, report, state.threshold)
    if rc == 2:  # nothing to compare yet (no case both sides measured), or the report not written
        report.unlink(missing_ok=True)
        print(f"oombench compare: no interim verdict: {text.splitlines()[-1]}", flush=True)
        return
    on_record = sum(len(filed(ctx.path)) for ctx in contexts(folder, state).values())
    headed(report, heading(state) + ["",
        f"**Interim:** {on_record} of {len(state.benches) * state.rounds * 2} run(s) on record, each case with all its "
        f"rounds; `{resume_command(folder)}` measures the rest, and its report judges every case."])
    print(f"oombench compare: so far {text.splitlines()[-1]} (interim, in {report})", flush=True)


def headed(report: Path, lines: list[str]) -> None:
    """Puts the compare's own lines above the gate's report, written whole or not at all."""
    text = "\n".join(lines) + "\n\n" + (report.read_text(encoding="utf-8") if report.exists() else "")
    tmp = report.with_name(f".{report.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, report)


def not_judged(cases: list[str]) -> list[str]:
    """The report's line naming the cases of the plan with a round missing on record, which no
    verdict covers; none where every case is whole."""
    if not cases:
        return []
    shown = "; ".join(cases[:5]) + ("; ..." if len(cases) > 5 else "")
    return [f"**Not judged:** {len(cases)} case(s) of the plan lack a round on record (no verdict covers them, and "
            f"the compare exits 2 where it would pass): {markdown.escape(shown)}"]


def measured(state: State) -> str:
    """How long the compare measured: the sum of its sittings', not the wall clock between them."""
    if state.sittings <= 1:
        return f"in one session, {minutes(state.measured_s)}"
    return f"in {state.sittings} sittings, {minutes(state.measured_s)} of measuring in all"


def heading(state: State) -> list[str]:
    (base_rev, new_rev), commits, rounds = state.revs, state.commits, state.rounds
    # The revs and machine are as typed or found (a state file anyone may edit): inline text, never markup.
    return [f"## oombench compare: {markdown.code(commits[BASE][:8])} ({markdown.inline(base_rev)}) against "
            f"{markdown.code(commits[NEW][:8])} ({markdown.inline(new_rev)})",
            f"Both measured on {markdown.inline(state.machine)} {measured(state)}: {len(state.benches)} case(s), "
            f"{rounds} round(s) a side in the order {' '.join(LETTER[s] for _, s in order(rounds))} per case "
            "(A: BASE), each run in a fresh process (the GPU-busy share traced in the first round of each side); "
            "the gate judges every round of each side (the median of its rounds' medians), its floors learned from "
            "BASE's rounds."
            + one_round(state)] + shared(state)


def one_round(state: State) -> str:
    """What one side's round took (a fresh process per case, as one plain run of the cases), against
    the compare's measuring time; empty where the state kept no round's time."""
    span = round_span(state.round_s, state.rounds)
    if span is None:
        return ""
    lo, hi = span
    return (f" One side's round (a fresh process a case, as one plain run of the cases): "
            f"{between(minutes(lo), minutes(hi))}; the compare's measuring took "
            f"{between(f'{state.measured_s / hi:.1f}', f'{state.measured_s / lo:.1f}')} times one.")


def shared(state: State) -> list[str]:
    if not state.shared_runs:
        return []
    return [f"**The box was shared:** {state.shared_runs} run(s) began while other processes held its GPUs. Their "
            "use of the host's cores, memory and link is in those runs' times, and a verdict may be theirs: "
            "compare on a box of its own."]


def fresh(repo: Path, base_rev: str, new_rev: str, profile: str, bench: str | None, rounds: int,
          results: Path | None, report: Path | None, threshold: float) -> tuple[Path, State, object]:
    """The folder and state of a new compare, and this box's environment; CompareRefused first."""
    commits = {BASE: resolve(repo, base_rev, "BASE"), NEW: resolve(repo, new_rev, "NEW")}
    benches = chosen(profile, bench)
    refuse_dirty(repo)
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    folder = results or Path(repo).absolute() / ".asv" / "compare" / run_id
    refuse_used(folder)
    env = snapshot()
    state = State(commits, [base_rev, new_rev], rounds, benches, None if bench else profile, bench,
                  resolve(repo, "HEAD", "HEAD"), run_id, machine_name(env.devices, env.cpu),
                  str(report or folder / REPORT), threshold)
    return folder, state, env


def resumed(repo: Path, folder: Path, base_rev: str | None, new_rev: str | None,
            fixed: dict[str, object]) -> tuple[State, object]:
    """The state of the compare in ``folder``, and this box's environment; CompareRefused where
    going on with it here would not be the same compare.

    The options that chose and judge it (``fixed``) are its own, and BASE and NEW, if named, must
    be its commits. The checkout must be clean and at the commit that started it: this checkout's
    code, not BASE's or NEW's, chose its cases, names its records' files, orders the runs and
    gates them, so a resume at another commit, or with edits, would measure and judge the runs
    left by other rules than those measured, and the report would credit its verdict to one code
    while another gave it. The box must be of the same machine kind: the gate judges one."""
    given = [f"--{name}" for name, value in fixed.items() if value is not None]
    if given:
        raise CompareRefused(f"{given[0]} is the resumed compare's own (in {folder / STATE}): leave it out")
    state = State.read(folder)
    for side, rev in ((BASE, base_rev), (NEW, new_rev)):
        name = side.upper()
        if rev is not None and resolve(repo, rev, name) != state.commits[side]:
            raise CompareRefused(f"{name} {rev!r} is not the commit the compare in {folder} measures as {name} "
                                 f"({state.commits[side][:8]}): leave {name} out, or start a new compare")
        resolve(repo, state.commits[side], name)
    refuse_dirty(repo)
    head = resolve(repo, "HEAD", "HEAD")
    if head != state.harness:
        raise CompareRefused(f"this checkout is at {head[:8]}, and the compare in {folder} was started at "
                             f"{state.harness[:8]}, whose code chose and gates its runs: `git checkout "
                             f"{state.harness[:8]}`, then resume")
    env = snapshot()
    machine = machine_name(env.devices, env.cpu)
    if machine != state.machine:
        raise CompareRefused(f"the compare in {folder} measures on {state.machine}, and this box is {machine}: "
                             "resume it on a box of that kind")
    return state, env


def locked(stack: ExitStack, folder: Path) -> None:
    """Holds the folder's lock for the compare's life: two processes measuring one folder would
    file each run twice; the second is refused, naming the first."""
    lock = locks.results_lock(folder)
    try:
        stack.enter_context(locks.held(lock, f"the compare in {folder}", wait=False))
    except locks.Busy:
        raise CompareRefused(f"the compare in {folder} is being measured by {locks.describe_holder(lock)}: "
                             f"wait for it to end (or stop it), then `{resume_command(folder)}`") from None


def absolute(value: str | Path | None, what: str, check) -> Path | None:
    """``value`` as an absolute path, checked by ``check`` (``harness.measure.guards.inputs``);
    None where not given. Made absolute here: each case's process runs in its worktree, a
    temporary folder, and would read a relative path from there."""
    if value is None:
        return None
    try:
        return Path(os.path.abspath(check(value, what)))
    except Refused as e:
        raise CompareRefused(f"{e} (or leave {what} out for the default)") from None


def bounded(rounds: int | None, threshold: float | None) -> None:
    if rounds is not None and not (type(rounds) is int and 1 <= rounds <= MAX_ROUNDS):
        raise CompareRefused(f"--rounds takes a whole number from 1 to {MAX_ROUNDS} (runs of each case a side), "
                             f"got {rounds!r}")
    if threshold is not None and not 0 <= threshold <= MAX_THRESHOLD:
        raise CompareRefused(f"--threshold takes a relative rise from 0 to {MAX_THRESHOLD:g} (1 = twice as slow), "
                             f"got {threshold!r}")


def main(base_rev: str | None = None, new_rev: str | None = None, *, profile: str | None = None,
         bench: str | None = None, rounds: int | None = None, results: str | Path | None = None,
         report: str | Path | None = None, threshold: float | None = None, resume: str | Path | None = None,
         deadline_s: float | None = None, warmup: bool = True, repo: Path = REPO, measure=measure_in) -> int:
    """Exit status: the gate's (0 pass, 1 regressions, 2 nothing to compare), ``STOPPED`` where the
    deadline stopped it, 128 + a signal that stopped it; CompareRefused before anything runs.
    ``resume``: the folder of a compare to go on with. ``report``: a file the report is also
    written to. ``measure``: how one case is run (tests)."""
    bounded(rounds, threshold)
    results = absolute(results, "--results", writable_folder)
    report = absolute(report, "--report", output_file)
    if resume is None:
        if base_rev is None:
            raise CompareRefused("name BASE, the commit to compare against, or --resume FOLDER to go on with a compare")
        folder, state, env = fresh(repo, base_rev, new_rev or "HEAD", profile or "standard", bench, rounds or ROUNDS,
                                   results, report, threshold or 0.0)
    else:
        folder = absolute(resume, "--resume", writable_folder)
        state, env = resumed(repo, folder, base_rev, new_rev, {"profile": profile, "bench": bench, "rounds": rounds,
                                                               "results": results, "threshold": threshold})
    with ExitStack() as stack:
        locked(stack, folder)
        return sit(repo, folder, state, env, measure, deadline_s, warmup, report)


def sit(repo: Path, folder: Path, state: State, env, measure, deadline_s: float | None, warmup: bool,
        also: Path | None = None) -> int:
    """One sitting: the runs not on record yet, then, where none is left, the gate over all, its
    report in the folder (never where the state file says: a copied folder would write the
    original's), and in ``also`` where given."""
    runs = contexts(folder, state)
    foreign(folder, state, runs)
    held = {key: filed(ctx.path) for key, ctx in runs.items()}  # read once: both below judge the same files
    steps = remaining(state, held)
    moved = set_aside(folder, steps, runs, held)
    if moved:
        print(f"oombench compare: {moved} run(s) of cases a stopped sitting left part-measured moved to "
              f"{folder / 'interrupted'} (kept, not judged): those cases are measured whole again", flush=True)
    state.sittings += 1
    state.save(folder)
    print(f"oombench compare: {len(state.benches)} case(s), {state.rounds} round(s) a side, BASE "
          f"{state.commits[BASE][:8]} and NEW {state.commits[NEW][:8]} on {state.machine}: {len(steps)} of "
          f"{len(state.benches) * state.rounds * 2} run(s) to measure; records in {folder} (if this is cut short, "
          f"`{resume_command(folder)}` goes on)", flush=True)
    if steps:
        stopped = session(repo, folder, state, steps, runs, measure, env, deadline_s, warmup)
        if stopped == STOPPED:
            so_far(folder, state)
        if stopped is not None:
            return stopped
    report = folder / REPORT
    rc = judge(folder, report, state.threshold)
    left = remaining(state, {key: filed(ctx.path) for key, ctx in runs.items()})
    unjudged = sorted({markdown.one_line(f"{b.case} {b.params}") for b, _, _ in left})
    headed(report, heading(state) + not_judged(unjudged))
    if unjudged:  # a verdict over some of the cases is none over the compare
        print(f"oombench compare: {len(unjudged)} case(s) of the plan lack a round on record, and no verdict covers "
              f"them (e.g. {unjudged[0]}): `{resume_command(folder)}` measures them", file=sys.stderr)
        rc = rc or 2
    if also is not None and also != report:
        write_whole(also, report.read_text(encoding="utf-8"))
    (folder / INTERIM).unlink(missing_ok=True)  # the whole compare's report stands in its place
    print(f"oombench compare: report in {also or report}; measured {measured(state)}")
    return rc
