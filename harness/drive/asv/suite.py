"""Drives asv over the suite: names the machine, runs the benchmarks, publishes the site.

asv does the running, the per-process isolation (``launch_method: spawn``), the bookkeeping by
commit and machine, and the HTML. This module only hands asv what it cannot find out itself:
the machine's description (its GPUs), the commit of the checkout, and where ``harness`` lives.

A run holds its results folder's lock for its whole life (``harness.measure.guards.locks``), names its
process and what it measures beside its records (``--resume`` of a live run is refused; one of a
stopped run goes on with that run's own cases), and ends asv and all it
started when SIGTERM, SIGINT or SIGHUP reaches it; every benchmark watches this process's pid,
so not even ``kill -9`` leaves one measuring (``harness.measure.guards.lifeline``).
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness.cases.ceilings import GPU_PROBES
from harness.drive import bytecode
from harness.drive.asv import begun, profiles
from harness.drive.asv.asv_output import fold
from harness.drive.asv.asvconf import private_config
from harness.drive.asv.bench import RUN_ENV
from harness.measure.guards import lifeline, locks
from harness.measure.instruments.environment import snapshot
from harness.measure.instruments.machine import MachineFileError, host_key, machine_info, register_with_asv
from harness.measure.outcomes import SKIPPED
from harness.measure.guards.safety import MULTICAST_OFF, OPT_IN_ENV
from harness.measure.guards.signals import handlers
from harness.measure.records.store import (LOCAL, REPO, RecordStore, RunContext, StoreError, load_file,
                                           refuse_unwritable)
from harness.report.efficiency import Ceilings
from harness.report.summary import table


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("oombench: asv files results by commit, and this checkout has none: run it from a git clone "
                 f"with at least one commit ({done.stderr.strip()})")
    return done.stdout.strip()


def hidden_edits(repo: Path, *paths: str) -> list[str]:
    """Tracked files whose edits ``git status`` does not show, because they are marked
    skip-worktree or assume-unchanged (``git ls-files -v``: ``S`` or a lowercase tag): those whose
    content differs from the index's, or, marked assume-unchanged, that are gone."""
    listed = subprocess.run(["git", "ls-files", "-v", "-s", "-z", "--", *paths], cwd=repo, capture_output=True,
                            text=True)
    marked = {}
    for entry in filter(None, listed.stdout.split("\0")):
        meta, _, path = entry.partition("\t")
        tag, _mode, blob, _stage = meta.split()
        if tag == "S" or tag.islower():
            marked[path] = (tag, blob)
    here = [p for p in marked if (Path(repo) / p).is_file()]
    now = dict(zip(here, subprocess.run(["git", "hash-object", "--", *here], cwd=repo, capture_output=True,
                                        text=True).stdout.split())) if here else {}
    # A skip-worktree file that is absent is a sparse checkout's, not an edit.
    return sorted(p for p, (tag, blob) in marked.items()
                  if (p in now and now[p] != blob) or (p not in now and tag != "S"))


def warn_if_dirty(commit: str) -> None:
    """asv files results under the commit; say so when the code that ran is not that commit's."""
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "harness", "benchmarks"],
                          cwd=REPO, capture_output=True, text=True)
    hidden = "".join(f" M {p} (marked unchanged in git's index)\n" for p in hidden_edits(REPO, "harness", "benchmarks"))
    if done.stdout.strip() or hidden:
        print(f"oombench: warning: harness/ or benchmarks/ differ from {commit[:8]}, under which asv files "
              f"these results; commit first so the results say what ran:\n{done.stdout}{hidden}", file=sys.stderr)


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class RunRefused(Exception):
    """``harness run`` will not start (exit 2); the message names the fix."""


class Interrupted(BaseException):
    """SIGTERM, SIGINT or SIGHUP reached ``harness run``."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def signals_stop_the_run():
    """The first of ``SIGNALS`` raises ``Interrupted`` wherever the run is, so that every
    ``finally`` on the way out (asv's whole tree ended, the lock released) runs; later ones
    wait for that clean-up rather than cut it short."""
    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)
    with handlers(dict.fromkeys(SIGNALS, handler)):
        yield


def asv_run(*args: str, env=None) -> int:
    """``asv run``, its output shown as it comes with the skips folded (harness.drive.asv.asv_output).

    asv runs in a session of its own and dies with this process (``lifeline.preexec``); it
    puts each benchmark in a process group of its own, so on the way out, however it comes,
    everything asv started is found by descent and by session and ended (``lifeline.end_tree``)."""
    proc = subprocess.Popen([sys.executable, "-m", "asv", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True,
                            preexec_fn=lifeline.preexec(os.getpid()))
    try:
        for line in fold(line.rstrip("\n") for line in proc.stdout):
            print(line, flush=True)
        return proc.wait()
    finally:
        lifeline.end_tree(proc.pid)
        proc.wait()


def asv_environment(ctx: RunContext, allow_oversubscription: bool) -> dict:
    env = bytecode.for_children(os.environ)
    # asv drops PYTHONPATH for benchmark processes and takes ASV_PYTHONPATH in its place.
    env["ASV_PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env[RUN_ENV] = ctx.to_json()
    env.update(MULTICAST_OFF)
    if allow_oversubscription:
        env[OPT_IN_ENV] = "1"
    return env


def environments(pythons: list[str] | None) -> list[str]:
    """asv's -E arguments: this interpreter, or each named one (two venvs with different library
    releases, say), all run in one go. asv names each result file for its python's path."""
    chosen = pythons or [sys.executable]
    for py in chosen:
        if not os.access(py, os.X_OK):
            sys.exit(f"oombench: {py} is not an executable python: pass the interpreter of an environment "
                     "that has the project's requirements, e.g. --python /path/to/venv/bin/python")
    return [a for py in chosen for a in ("-E", f"existing:{py}")]


def report(path: Path, run_id: str) -> None:
    """The cases run ``run_id`` measured, from its records file, as a table (a file may hold an
    earlier run's records too: those are not this run's figures); the skipped ones as a count
    (their reasons came above)."""
    records = [r for r in load_file(path).warn().records if r.run_id == run_id]
    shown = [r for r in records if r.outcome != SKIPPED]
    print("\n" + table(shown) if shown else "oombench: nothing was measured", flush=True)
    if len(shown) < len(records):
        print(f"oombench: {len(records) - len(shown)} case(s) skipped here, each reason once above", flush=True)


# Run beside a chosen subset on a GPU host with no device ceilings of its own: every rate is read
# against its own host's link and peaks (harness.report.efficiency), and another host's differ.
CEILINGS_BENCH = r"^ceilings\.Device\."
CEILING_PROBE_NAME = "ceilings.Device.track_seconds_per_step"


def with_ceilings(store: RecordStore, env, bench: str | None) -> list[str]:
    """asv's --bench regexes for ``bench``: none where it is None (the profile's have the
    ceilings); ``bench``, and the device ceilings where it does not match them and this host has
    GPUs but no device ceiling on file."""
    if bench is None or re.search(bench, CEILING_PROBE_NAME):
        return [bench] if bench else []
    me = host_key(env)
    on_file = Ceilings(store.load().records).by_probe  # the ceilings the reports can read rates against
    known = any(host_key(c.environment) == me for probe in GPU_PROBES for c in on_file.get(probe, []))
    if not env.devices.gpus or not me or known:
        return [bench]
    print(f"oombench: this host ({me}) has no device ceilings on file: they join the run, so that its rates "
          "are read against its own", flush=True)
    return [bench, CEILINGS_BENCH]


def refuse_live(store: RecordStore, resume: str) -> None:
    """``--resume`` of a run whose process still runs would measure its cases twice at once."""
    live = store.live_run(resume)
    if live:
        command = " ".join(map(str, live.get("argv", [])))[:200]
        raise RunRefused(f"run {resume} is still running as pid {live['pid']} ({command}): "
                         f"wait for it to end, or stop it (kill {live['pid']}), then --resume {resume}")


def resumable(store: RecordStore, resume: str, machine: str, commit: str) -> Path:
    try:
        return store.resumable(resume, machine, commit)
    except StoreError as e:
        raise RunRefused(str(e)) from None


@dataclass(frozen=True)
class Selection:
    """The options that choose a run's cases, kept beside its records so that a resume measures
    the rest of the same cases, not of the default profile's."""
    bench: str | None = None
    profile: str | None = None  # None: the default profile, "standard"
    quick: bool = False
    python: tuple[str, ...] = ()

    def flags(self) -> str:
        chosen = ["--bench", self.bench] if self.bench else ["--profile", self.profile or profiles.DEFAULT]
        pythons = [a for py in self.python for a in ("--python", py)]
        return shlex.join([*chosen, *(["--quick"] if self.quick else []), *pythons])

    @classmethod
    def of(cls, d: dict) -> "Selection | None":
        """From a run's state; None where it is not one ``asdict`` wrote."""
        python = d.get("python") or []
        sel = cls(d.get("bench"), d.get("profile"), d.get("quick", False), tuple(python))
        if (isinstance(sel.bench, (str, type(None))) and isinstance(sel.profile, (str, type(None)))
                and isinstance(sel.quick, bool) and isinstance(python, list)
                and all(isinstance(py, str) for py in python)):
            return sel
        return None


def resumed(store: RecordStore, run_file: Path, resume: str, asked: Selection) -> Selection:
    """The cases run ``resume`` chose, which its resume goes on with; an option given that would
    choose others is refused, naming the run's own."""
    stored = store.selection(run_file)
    earlier = Selection.of(stored) if stored is not None else None
    if earlier is None:
        print(f"oombench: run {resume} does not say which cases it measures (its state is missing or older): "
              f"going on with this command's, {asked.flags()}", flush=True)
        return asked
    for name in ("bench", "profile", "quick", "python"):
        given = getattr(asked, name)
        if given and given != getattr(earlier, name):
            raise RunRefused(f"run {resume} measures {earlier.flags()}, and a resume goes on with the same cases: "
                             f"leave --{name} out, or start a new run without --resume")
    return earlier


def run(bench: str | None = None, quick: bool = False, allow_oversubscription: bool = False,
        publish: bool = True, pythons: list[str] | None = None, resume: str | None = None,
        deadline_s: float | None = None, results: Path = LOCAL, profile: str | None = None,
        wait: bool = True) -> int:
    """One run under the results folder's lock (waits for it, or ``RunRefused`` with
    ``wait=False``); returns asv's exit status, or 128 + the signal that stopped it."""
    try:
        re.compile(bench or "")
    except re.error as e:
        raise RunRefused(f"--bench takes a regular expression, and {bench!r} is not one ({e})") from None
    store = RecordStore.of_results(results)
    chosen = Selection(bench, profile, quick, tuple(pythons or ()))
    if resume is not None:
        refuse_live(store, resume)
        # Checked before the lock too, which makes the results folder: a refused resume leaves nothing.
        chosen = resumed(store, resumable(store, resume, machine_info(snapshot())["machine"], head_commit()),
                         resume, chosen)
    chosen = replace(chosen, profile=chosen.profile or profiles.DEFAULT)
    with signals_stop_the_run():
        try:
            with locks.held(locks.results_lock(results), f"results folder {results}", wait=wait):
                return _locked_run(store, chosen, allow_oversubscription, publish, resume, deadline_s, results)
        except locks.Busy as e:
            raise RunRefused(str(e)) from None
        except Interrupted as e:
            print(f"oombench: stopped by {e}: asv and every process it started were ended", flush=True)
            return 128 + e.signum


def _locked_run(store, chosen: Selection, allow_oversubscription, publish, resume, deadline_s, results) -> int:
    env = snapshot()
    info = machine_info(env)
    try:
        register_with_asv(info)
    except MachineFileError as e:
        raise RunRefused(str(e)) from None
    print(f"oombench: machine {info['machine']}: {info['gpu']}; cpu {info['cpu']}", flush=True)
    commit = head_commit()
    warn_if_dirty(commit)
    if resume is not None:
        # Each case of the run that has a record is read back from it, not measured again; a
        # what-fits search goes on from the probes its log holds.
        resumable(store, resume, info["machine"], commit)
        refuse_live(store, resume)
    run_id = resume or f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    deadline = time.time() + deadline_s if deadline_s is not None else None
    ctx = RunContext(store, info["machine"], run_id, commit, deadline, parent_pid=os.getpid())
    print(f"oombench: run {run_id}, results in {results} (if it is cut short: python3 -m harness run --resume "
          f"{run_id})", flush=True)
    # The run's records file exists from the start, so that it can be resumed even if a deadline
    # or a kill left it nothing measured; beside it, which process runs it.
    ctx.path.parent.mkdir(parents=True, exist_ok=True)
    try:
        refuse_unwritable(ctx.path)
    except ValueError as e:  # inputs.Refused: a link or a FIFO where its records would go
        raise RunRefused(str(e)) from None
    ctx.path.touch()
    store.claim(ctx.path, asdict(chosen))
    try:
        regexes = with_ceilings(store, env, chosen.bench) or profiles.benchmarks(chosen.profile)
        return _measure(ctx, regexes, chosen.quick, allow_oversubscription, publish, list(chosen.python), results)
    except Interrupted:
        report(ctx.path, run_id)
        print(f"oombench: run {run_id} was stopped; what it measured is kept: python3 -m harness run --resume "
              f"{run_id} measures the rest", flush=True)
        raise


def _measure(ctx: RunContext, regexes, quick, allow_oversubscription, publish, pythons, results) -> int:
    args = ["--machine", ctx.machine, *environments(pythons), "--set-commit-hash", ctx.commit, "--show-stderr",
            *[a for regex in regexes for a in ("--bench", regex)], *(["--quick"] if quick else [])]
    env = bytecode.seeded(asv_environment(ctx, allow_oversubscription))
    with private_config(REPO, results) as conf:
        rc = asv_run("run", "--config", str(conf), *args, env=env)
    for rec in begun.file_lost(ctx, snapshot()):
        print(f"oombench: {rec.case} {rec.params}: failed, {rec.reason}", flush=True)
    report(ctx.path, ctx.run_id)
    if publish:
        from harness.drive.asv.asv_site import publish as publish_site
        site = REPO / ".asv" / "html"
        rc = publish_site(REPO, site, results) or rc
        print(f"oombench: site in {site} (serve it: {preview_command(site)})")
    return rc


def preview_command(site: Path) -> str:
    """asv's preview of ``site`` under the interpreter that has asv (this one: under the system
    python3, ``python -m asv`` finds no asv when set-up put it in .venv)."""
    return shlex.join([sys.executable, "-m", "asv", "preview", "--config", str(REPO / "asv.conf.json"),
                       "--html-dir", str(site)])
