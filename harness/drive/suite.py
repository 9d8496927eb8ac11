"""Drives asv over the suite: names the machine, runs the benchmarks, publishes the site.

asv does the running, the per-process isolation (``launch_method: spawn``), the bookkeeping by
commit and machine, and the HTML. This module only hands asv what it cannot find out itself:
the machine's description (its GPUs), the commit of the checkout, and where ``harness`` lives.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from harness.measure import record as records
from harness.drive.asvconf import local_config
from harness.measure.environment import snapshot
from harness.measure.machine import machine_info, register_with_asv
from harness.drive.runner import COMMIT_ENV, DEADLINE_ENV, MACHINE_ENV, REPO, RUN_ID_ENV, records_root, run_records
from harness.measure.safety import MULTICAST_OFF, OPT_IN_ENV
from harness.report.summary import table



def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("oombench: asv files results by commit, and this checkout has none: run it from a git clone "
                 f"with at least one commit ({done.stderr.strip()})")
    return done.stdout.strip()


def warn_if_dirty(commit: str) -> None:
    """asv files results under the commit; say so when the code that ran is not that commit's."""
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "harness", "benchmarks"],
                          cwd=REPO, capture_output=True, text=True)
    if done.stdout.strip():
        print(f"oombench: warning: harness/ or benchmarks/ differ from {commit[:8]}, under which asv files "
              f"these results; commit first so the results say what ran:\n{done.stdout}", file=sys.stderr)


def asv(*args: str, env=None) -> int:
    return subprocess.call([sys.executable, "-m", "asv", *args], cwd=REPO, env=env)


def asv_environment(run_id: str, commit: str, machine: str, allow_oversubscription: bool) -> dict:
    env = dict(os.environ)
    # asv drops PYTHONPATH for benchmark processes and takes ASV_PYTHONPATH in its place.
    env["ASV_PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env[RUN_ID_ENV] = run_id
    env[COMMIT_ENV] = commit
    env[MACHINE_ENV] = machine
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


def check_resumable(run_id: str, commit: str, machine: str, root: Path) -> None:
    """A run resumes only where its records are and at the commit it measured: asv files results
    by commit, and the records read back must be of the code that runs."""
    if run_records(root, machine, commit, run_id).exists():
        return
    here = sorted((root / machine).glob(f"*-{run_id}.jsonl"))
    if here:
        was = here[0].name.split("-", 1)[0]
        sys.exit(f"oombench: run {run_id} measured commit {was}, and this checkout is at {commit[:8]}: "
                 f"`git checkout {was}` to resume it, or start a new run without --resume")
    elsewhere = sorted(p.parent.name for p in root.glob(f"*/*-{run_id}.jsonl"))
    if elsewhere:
        sys.exit(f"oombench: run {run_id} was measured on {', '.join(elsewhere)}, not on this machine ({machine})")
    runs = sorted(p.stem.split("-", 1)[1] for p in (root / machine).glob(f"{commit[:8]}-*.jsonl"))
    sys.exit(f"oombench: no records of run {run_id} on {machine}; runs of {commit[:8]} here: "
             f"{', '.join(runs[-5:]) or 'none'}")


def run(bench: str | None = None, quick: bool = False, allow_oversubscription: bool = False,
        publish: bool = True, pythons: list[str] | None = None, resume: str | None = None,
        deadline_s: float | None = None) -> int:
    env = snapshot()
    info = machine_info(env)
    register_with_asv(info)
    print(f"oombench: machine {info['machine']}: {info['gpu']}; cpu {info['cpu']}", flush=True)
    commit = head_commit()
    warn_if_dirty(commit)
    if resume:
        # Each case of the run that has a record is read back from it, not measured again; a
        # what-fits search goes on from the probes its log holds.
        check_resumable(resume, commit, info["machine"], records_root())
    run_id = resume or f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    print(f"oombench: run {run_id} (if it is cut short: python3 -m harness run --resume {run_id} ...)", flush=True)
    args = ["run", "--config", str(local_config(REPO)), "--machine", info["machine"], *environments(pythons),
            "--set-commit-hash", commit, "--show-stderr"]
    if bench:
        args += ["--bench", bench]
    if quick:
        args.append("--quick")
    variables = asv_environment(run_id, commit, info["machine"], allow_oversubscription)
    if deadline_s is not None:
        variables[DEADLINE_ENV] = repr(time.time() + deadline_s)
        # The run's records file exists from the start, so that it can be resumed even if the
        # deadline left it nothing to measure.
        path = run_records(records_root(), info["machine"], commit, run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    rc = asv(*args, env=variables)
    measured = [r for r in records.load_tree(records_root()) if r.run_id == run_id]
    print("\n" + table(measured) if measured else "oombench: no record was written", flush=True)
    if publish:
        from harness.drive.asv_site import publish as publish_site
        rc = publish_site(REPO, REPO / ".asv" / "html") or rc
        print(f"oombench: site in {REPO / '.asv' / 'html'} (serve it: python -m asv preview)")
    return rc
