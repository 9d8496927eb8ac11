"""Kills of a parallel case's ranks at random moments, under a child subreaper: the case's process
killed by SIGTERM or SIGKILL, a rank that hangs past the launch's deadline, a rank that starts a
child and fails. After 5 s no rank, no rank's child and no helper of the launch is left. (Kills of
`harness run` and of a what-fits search: tests/test_kills.py.)"""
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from test_kills import GONE_WITHIN_S, REPO


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

# Each scenario runs REPEATS times: once by default (each launch imports torch anew, the most of a
# scenario's time); OOMBENCH_KILL_REPEATS=50 for the 50 runs without a failure.
REPEATS = int(os.environ.get("OOMBENCH_KILL_REPEATS", "1"))
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
    (its keeper, the fork server the ranks forked from) is left (a kill of the case, under a child
    subreaper, left them running once)."""
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
