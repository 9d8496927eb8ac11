"""Each command its own asv configuration and temporary folders: two side by side never read each
other's results folder, and what a command made is gone when it ends, by a signal or a kill -9
(then the next command of the kind removes it)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from asv.config import Config

from harness.drive import scratch
from harness.drive.asv import asvconf
from harness.measure.guards.owned import pid_alive

REPO = Path(__file__).resolve().parents[1]


def test_two_commands_side_by_side_each_read_their_own_results_folder(tmp_path):
    """`pages` published while `run --results DIR` ran: both wrote .asv/local.conf.json, and the
    run's asv results went into the pages' copy."""
    with asvconf.private_config(REPO, tmp_path / "run") as run, \
            asvconf.private_config(REPO, tmp_path / "pages") as pages:
        assert run != pages
        assert Config.load(str(run)).results_dir == str(tmp_path / "run")
        assert Config.load(str(pages)).results_dir == str(tmp_path / "pages")
    assert not run.exists() and not pages.exists()


def test_the_config_holds_the_repository_s_paths_wherever_it_lies():
    with asvconf.private_config(REPO) as path:
        conf = Config.load(str(path))
        assert Path(conf.benchmark_dir) == REPO / "benchmarks" and Path(conf.results_dir) == REPO / ".asv" / "results"
        assert Path(conf.repo) == REPO


# A command started from a terminal: SIGTERM and SIGHUP at their defaults, whatever started the
# tests (under nohup SIGHUP comes ignored, and the command rightly leaves it so); SIGINT turned into
# KeyboardInterrupt, which Python does only where the process did not inherit it ignored, as a job
# started in the background of a script does. Set in the command itself: a preexec_fn runs Python
# in a child forked from a worker with threads, which Python's documentation warns against. Python
# runs a handler between bytecodes: a signal that arrives after the last check and before one long
# C call (a 300 s sleep) would wait for that call to end, so the command sleeps in short steps.
HOLD = """
import faulthandler, signal, sys, time
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it hangs, if it ever does
from pathlib import Path
from harness.drive import scratch
from harness.drive.asv import asvconf
with scratch.private_dir("asv") as tmp, asvconf.private_config(Path(sys.argv[1]), tmp) as conf:
    print(tmp, conf.parent, flush=True)
    for _ in range(3000):  # short sleeps: a signal that lands just before one is handled when it ends
        time.sleep(0.1)
"""


def stacks_of(proc: subprocess.Popen) -> str:
    """How a hung HOLD holds its signals (the kernel's masks) and what its threads were doing (its
    faulthandler's dump); then it is killed."""
    masks = [line for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
             if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))]
    proc.send_signal(signal.SIGUSR1)
    try:
        dump = proc.communicate(timeout=5)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        dump = proc.communicate()[1]
    return "\n".join([*masks, dump])


def test_a_signal_removes_the_command_s_folders(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(REPO))
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(REPO)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        made = [Path(p) for p in proc.stdout.readline().split()]
        assert len(made) == 2 and all(p.is_dir() for p in made)
        proc.send_signal(sig)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{sig!r} left the command running; its signals and stacks then:\n{stacks_of(proc)}")
        assert proc.returncode != 0 and not any(p.exists() for p in made), sig


def test_leftovers_of_dead_processes_are_swept_and_nothing_else(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        names = {"dead": f"oombench-asv-{dead.pid}-x1", "live": f"oombench-asv-{live.pid}-x2",
                 "foreign": "oombench-asv-thesis", "other kind": f"oombench-asv-conf-{dead.pid}-x3"}
        for name in names.values():
            (tmp_path / name).mkdir()
        with scratch.private_dir("asv", tmp_path) as mine:
            assert mine.name.startswith(f"oombench-asv-{os.getpid()}-")
            left = {p.name for p in tmp_path.iterdir()}
        assert left == set(names.values()) - {names["dead"]} | {mine.name}
        assert not mine.exists()
    finally:
        live.kill()
        live.wait()


def test_a_kill_9_leaves_a_folder_the_next_command_removes(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(REPO)], env=env, stdout=subprocess.PIPE, text=True)
    tmp, conf = (Path(p) for p in proc.stdout.readline().split())
    proc.kill()
    proc.wait()
    assert tmp.exists() and conf.exists()  # nothing runs on SIGKILL
    deadline = time.monotonic() + 10
    while pid_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with scratch.private_dir("asv", tmp_path), asvconf.private_config(REPO):
        assert not tmp.exists() and not conf.exists()
