"""Kills at random moments leave nothing measuring: `harness run` stopped by SIGTERM or SIGKILL,
a what-fits search killed, a parallel case's ranks killed, hung or failed (under a child subreaper
too). After 5 s no process of theirs is left; the records are valid JSON lines; --resume completes
with no duplicates and no gaps."""
import json
import os
import random
import select
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_leaves_nothing_measuring_and_resumes_without_gaps_or_duplicates(tmp_path, sig):
    """asv was started with a plain subprocess call: after a kill it went on measuring under PID 1."""
    proc = harness_run(tmp_path)
    seen = tree_until(psutil.Process(proc.pid), measuring)
    time.sleep(random.uniform(0, 1.0))
    seen.update({p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)})
    proc.send_signal(sig)
    out = proc.communicate(timeout=GONE_WITHIN_S)[0]
    assert gone_within(seen.values()) == [], out
    run_id = out.split("oombench: run ", 1)[1].split(",", 1)[0]
    before, problems = records_of(tmp_path)
    assert problems == []
    time.sleep(1)  # a straggler would append now
    assert len(records_of(tmp_path)[0]) == len(before)
    done = harness_run(tmp_path, "--resume", run_id, select=())  # as the skips say: the run's own cases
    assert done.wait(timeout=120) == 0, done.stdout.read()
    records, problems = records_of(tmp_path)
    assert problems == [] and {r.run_id for r in records} == {run_id}
    assert sorted(r.params["probe"] for r in records) == ["cpu_matmul_fp32", "host_copy"]


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


# ---- the ranks of a parallel case ------------------------------------------------------------------

# A middle process that adopts orphans (PR_SET_CHILD_SUBREAPER, as systemd --user, tini -s or a CI
# agent does), imports torch and the launcher once, and for each scenario asked on its stdin forks
# a case (torch imported before its launch, as a real case has it) that launches two ranks. It
# waits until both ranks (and the child each starts) have noted their pids, then kills the case or
# lets it fail, and answers with what is left of every process it saw, the ranks' children
# included, GONE_WITHIN_S after the case ended. One middle serves every scenario: a fresh process
# importing torch for each case would cost more than the rest of the scenario.
MIDDLE = """
import ctypes, json, os, signal, sys, time, traceback
import psutil
ctypes.CDLL("libc.so.6").prctl(36, 1, 0, 0, 0)
import torch
sys.path.insert(0, "tests")
import launch_workers
from harness.workloads.parallelism.launch import launch

def case_of(pid_dir, worker, timeout_s, out):
    # The case, forked: a fresh process's stdio (its output in a file of its own), launch, and
    # the exit code of a Python process that raised or returned.
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        launch(getattr(launch_workers, worker), 2, (pid_dir,), timeout_s=timeout_s)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

def children():
    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}

def running(p):
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline())
    except psutil.Error:
        return False

def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return

def scenario(pid_dir, scenario, worker, timeout_s, gone_within_s):
    earlier = set(children())  # orphans of an earlier scenario, on their way out
    out = os.path.join(pid_dir, ".case-output")
    case = case_of(pid_dir, worker, timeout_s, out)
    seen, noted, code = {}, set(), None
    def look():
        seen.update({pid: p for pid, p in children().items() if pid != case and pid not in earlier})
        noted.update(n for n in os.listdir(pid_dir) if not n.startswith("."))
    def ended():
        nonlocal code
        if code is None:
            pid, status = os.waitpid(case, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
        return code is not None
    deadline = time.time() + timeout_s + 120
    while len(noted) < 4 and not ended() and time.time() < deadline:
        look()
        time.sleep(0.05)
    look()
    if scenario in ("sigterm", "sigkill") and not ended():
        os.kill(case, signal.SIGTERM if scenario == "sigterm" else signal.SIGKILL)
    if scenario == "hangs_past_the_timeout" and not ended():
        os.kill(case, signal.SIGALRM)  # the deadline's alarm, once the ranks hang
    deadline = time.time() + timeout_s + 120
    while not ended():
        if time.time() > deadline:
            raise TimeoutError("the case did not end")
        time.sleep(0.05)
    for name in noted:
        pid = int(open(os.path.join(pid_dir, name)).read())
        try:
            seen.setdefault(pid, psutil.Process(pid))
        except psutil.Error:
            pass
    end = time.time() + gone_within_s
    left = [p for p in seen.values() if running(p)]
    while left and time.time() < end:
        time.sleep(0.1)
        left = [p for p in left if running(p)]
    names = []
    for p in left:
        try:
            names.append(" ".join(p.cmdline())[:100])
            p.kill()
        except psutil.Error:
            pass
    reap()
    with open(out, errors="replace") as f:
        err = f.read()
    return {"left": names, "noted": sorted(noted), "code": code, "stderr": err[-3000:]}

for line in sys.stdin:
    pid_dir, name, worker, timeout_s, gone_within_s = json.loads(line)
    print(json.dumps(scenario(pid_dir, name, worker, float(timeout_s), gone_within_s)), flush=True)
"""

# Each scenario runs REPEATS times: a few by default; OOMBENCH_KILL_REPEATS=50 for the 50
# runs without a failure.
REPEATS = int(os.environ.get("OOMBENCH_KILL_REPEATS", "2"))
# The launch's deadline is a real-time timer (SIGALRM): the middle process raises that alarm itself
# once both ranks and their children have started, rather than waiting out a deadline long enough
# for the ranks' start on a busy box; test_the_deadline_s_alarm_comes_once_the_time_is_past checks
# that the timer does raise it.
TIMEOUT_S = 300
SCENARIOS = {  # scenario: (worker, the launch's timeout, what the case's error must say)
    "sigterm": ("hangs_with_a_child", 300, None),
    "sigkill": ("hangs_with_a_child", 300, None),
    "hangs_past_the_timeout": ("hangs_with_a_child", TIMEOUT_S, f"ranks ran past {TIMEOUT_S} s"),
    "forks_a_child_and_fails": ("forks_a_child_and_raises", 300, "boom after starting a child"),
}


@pytest.fixture(scope="module")
def middle(tmp_path_factory):
    """The middle process, started once for this file's scenarios; its own errors go to a file."""
    locks, err = tmp_path_factory.mktemp("locks"), tmp_path_factory.mktemp("middle") / "stderr"
    with open(err, "w") as stderr:
        env = dict(os.environ, OOMBENCH_LOCK_DIR=str(locks))
        proc = subprocess.Popen([sys.executable, "-c", MIDDLE], cwd=REPO, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
    yield proc, err
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def ask(middle, *request, timeout_s) -> str:
    """The middle's answer to one scenario, or "" if it died or ran past ``timeout_s``."""
    proc, _ = middle
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    ready = select.select([proc.stdout], [], [], timeout_s)[0]
    return proc.stdout.readline().strip() if ready else ""


@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_rank_nor_what_it_started_outlives_the_case(tmp_path, middle, scenario, repeat):
    """SIGTERM or SIGKILL of the case's process, a rank that hangs past the launch's deadline, a rank
    that starts a child and fails: after each, no rank, no rank's child and no helper of the launch
    is left (a kill of the case, under a child subreaper, left them running once)."""
    worker, timeout_s, says = SCENARIOS[scenario]
    (tmp_path / "pids").mkdir()
    answer = ask(middle, str(tmp_path / "pids"), scenario, worker, timeout_s, GONE_WITHIN_S, timeout_s=timeout_s + 300)
    assert answer, middle[1].read_text()  # the middle process itself failed: say how
    report = json.loads(answer)
    assert report["noted"] == ["0", "0-child", "1", "1-child"], report["stderr"]  # the ranks did start
    assert report["left"] == [], report["stderr"]
    assert report["code"] != 0
    if says:
        assert says in report["stderr"]


def test_the_deadline_s_alarm_comes_once_the_time_is_past():
    """The launch's deadline fires on its own (the scenario above raises its alarm early): not before
    ``timeout_s``, as the error naming it, and the handlers it replaced are back afterwards."""
    from harness.workloads.parallelism.launch import LaunchError, _deadline
    before = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    with pytest.raises(LaunchError, match="ranks ran past 1 s"), _deadline(1.0):
        time.sleep(30)
    assert 1.0 <= time.monotonic() - start < 20
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
