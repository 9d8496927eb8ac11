"""Kills at random moments leave nothing measuring: `harness run` stopped by SIGTERM or SIGKILL,
a what-fits search killed. After 5 s no process of theirs is left; the records are valid JSON
lines; --resume completes with no duplicates and no gaps. (A parallel case's ranks killed, hung or
failed: tests/test_kills_ranks.py.)"""
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.measure.records.store import BEGUN_SUFFIX, load_file, read_lines

REPO = Path(__file__).resolve().parents[1]
GONE_WITHIN_S = 5


def gone_within(procs, seconds=GONE_WITHIN_S) -> list:
    """Those of ``procs`` still running (zombies count as gone) after ``seconds``."""
    deadline = time.monotonic() + seconds
    left = list(procs)
    while left and time.monotonic() < deadline:
        left = [p for p in left if _running(p)]
        time.sleep(0.1)
    return [" ".join(p.cmdline())[:120] for p in left if _running(p)]


def _running(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree_until(root: psutil.Process, ready, timeout_s=60) -> dict:
    """Every descendant of ``root`` seen, polling until ``ready(descendants)``."""
    seen, deadline = {}, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = root.children(recursive=True)
        seen.update({p.pid: p for p in kids})
        if ready(kids):
            return seen
        time.sleep(0.05)
    pytest.fail("the process tree never got ready")


def _cmd(p) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


# ---- harness run, end to end ------------------------------------------------------------------

# What the kills are about (processes, records, resuming) does not depend on how much the host's
# probes move or compute: asv's benchmark processes (under PYTHONPATH, as asv's ASV_PYTHONPATH
# hands it on) build them smaller than the case does. A host copy of 64 MiB rather than 512 MiB
# and a matrix product of 1024 rather than 2048 still take long enough to be caught measuring.
SMALLER_PROBES = """
import sys
if sys.argv[0].endswith("benchmark.py") and sys.argv[1:2] == ["run"]:
    from functools import partial
    from harness.cases import ceilings
    ceilings.BUILDERS.update(host_copy=partial(ceilings.host_copy, 64 << 20),
                             cpu_matmul_fp32=partial(ceilings.cpu_matmul, 1024))
"""


def harness_run(tmp_path, *extra, select=("--bench", "ceilings.Host", "--quick")) -> subprocess.Popen:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SMALLER_PROBES)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, HOME=str(tmp_path), OOMBENCH_LOCK_DIR=str(tmp_path / "locks"), OOMBENCH_BOOTSTRAPPED="1",
               PYTHONPATH=path)
    return subprocess.Popen([sys.executable, "-m", "harness", "run", *select, "--no-publish", "--results",
                             str(tmp_path / "res"), *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def measuring(kids) -> bool:
    return any("benchmark.py" in _cmd(p) and "ceilings.Host" in _cmd(p) for p in kids)


def records_of(tmp_path) -> tuple[list, list]:
    files = sorted((tmp_path / "res" / "records").rglob("*.jsonl"))
    assert len(files) == 1, files
    loaded = load_file(files[0])
    return loaded.records, loaded.problems


def test_a_killed_run_leaves_nothing_measuring_and_resumes_without_gaps_or_duplicates(tmp_path):
    """asv was started with a plain subprocess call: after a kill it went on measuring under PID 1.
    The run is stopped by SIGTERM (its handler ends what it started), its resume by SIGKILL (no
    handler runs: what it started dies with it), and a second resume measures what is left."""
    run_id = None
    for sig, within_s in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 0.3)):  # the resume may have one case left
        proc = harness_run(tmp_path, "--resume", run_id, select=()) if run_id else harness_run(tmp_path)
        out = _killed_while_measuring(proc, sig, within_s)
        run_id = run_id or out.split("oombench: run ", 1)[1].split(",", 1)[0]
        before, problems = records_of(tmp_path)
        assert problems == [] and {r.run_id for r in before} <= {run_id}, out
        time.sleep(1)  # a straggler would append now
        assert len(records_of(tmp_path)[0]) == len(before)
    done = harness_run(tmp_path, "--resume", run_id, select=())  # as the skips say: the run's own cases
    assert done.wait(timeout=120) == 0, done.stdout.read()
    records, problems = records_of(tmp_path)
    assert problems == [] and {r.run_id for r in records} == {run_id}
    assert sorted(r.params["probe"] for r in records) == ["cpu_matmul_fp32", "host_copy"]


def _killed_while_measuring(proc: subprocess.Popen, sig, within_s: float) -> str:
    """What ``proc`` printed, sent ``sig`` at a random moment in the first ``within_s`` seconds a
    case measures; every process of its tree seen gone within ``GONE_WITHIN_S``."""
    seen = tree_until(psutil.Process(proc.pid), measuring)
    time.sleep(random.uniform(0, within_s))
    seen.update({p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)})
    proc.send_signal(sig)
    out = proc.communicate(timeout=GONE_WITHIN_S)[0]
    assert proc.returncode != 0, out  # stopped by the signal, not ended before it
    assert gone_within(seen.values()) == [], out
    return out


def test_a_case_killed_while_measuring_is_filed_failed_and_not_measured_again(tmp_path):
    """SIGKILL to the process measuring a case (as the kernel's out-of-memory killer sends it): the
    run goes on, files that case as failed (its process died), and asv's next figure of the same
    benchmark does not run it again."""
    proc = harness_run(tmp_path)
    victim = _stopped_while_measuring(tmp_path)
    os.kill(victim["pid"], signal.SIGKILL)
    out = proc.communicate(timeout=180)[0]
    records, problems = records_of(tmp_path)
    assert problems == [], out
    killed = [r for r in records if r.params == victim["params"]]
    assert [(r.outcome, r.check) for r in killed] == [("failed", {"ended": "died"})], out
    assert f"pid {victim['pid']}" in killed[0].reason and "failed" in out
    assert [r.outcome for r in records if r.params != victim["params"]] == ["ok"], out
    log = next((tmp_path / "res" / "records").rglob("*" + BEGUN_SUFFIX))
    assert [e["params"] for _, e in read_lines(log)[0]].count(victim["params"]) == 1, out


def _stopped_while_measuring(tmp_path, timeout_s=60) -> dict:
    """The begun entry of a case whose process is stopped (SIGSTOP) before it filed a record."""
    deadline, tried = time.monotonic() + timeout_s, set()
    while time.monotonic() < deadline:
        for log in (tmp_path / "res" / "records").rglob("*" + BEGUN_SUFFIX):
            for _, entry in read_lines(log)[0]:
                if entry["pid"] in tried:
                    continue
                tried.add(entry["pid"])
                try:
                    os.kill(entry["pid"], signal.SIGSTOP)
                except ProcessLookupError:
                    continue
                records = load_file(log.with_name(log.name.replace(BEGUN_SUFFIX, ".jsonl"))).records
                if not any(r.params == entry["params"] for r in records):
                    return entry
                os.kill(entry["pid"], signal.SIGCONT)  # it had finished: catch the next one
        time.sleep(0.005)
    pytest.fail("no case was caught while measuring")


# ---- a what-fits search -----------------------------------------------------------------------

# A probe that binds itself as the real one does, then holds on as if measuring.
SLOW_PROBE = ("import json, os, sys, time; from harness.measure.guards import lifeline; "
              "lifeline.bind(lifeline.parent_from_env()); print('probing', flush=True); time.sleep(60)")
SEARCH = ("import sys; from harness.workloads.search import fits\n"
          f"probe = {SLOW_PROBE!r}\n"
          "fits.SubprocessProber(lambda n: [sys.executable, '-c', probe, str(n)]).many([1, 2, 3])\n")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_probe_outlives_its_search(tmp_path, sig):
    """SIGTERM to the search left three probes running, each holding GPU memory on a GPU box."""
    env = dict(os.environ, OOMBENCH_LOCK_DIR=str(tmp_path))
    search = subprocess.Popen([sys.executable, "-c", SEARCH], cwd=REPO, env=env)
    seen = tree_until(psutil.Process(search.pid), lambda kids: len([p for p in kids if "probing" in _cmd(p)]) == 3)
    time.sleep(random.uniform(0, 0.5))
    search.send_signal(sig)
    search.wait(timeout=5)
    assert gone_within(seen.values()) == []
