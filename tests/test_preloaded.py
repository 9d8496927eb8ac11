"""Cases forked from a server that has their imports preloaded: each still a process of its own,
given what ``python -m`` would give it, and none outliving what started it."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from harness.measure.guards import preloaded
from harness.measure.guards.lifeline import PARENT_ENV

pytest.importorskip("torch")

# What a case sees of itself: printed as one JSON line, then a line on stderr, then its exit.
ECHO = """\
import json, os, sys
seen = {"before_me": [m for m in ("torch", "torch._dynamo", "echo_marker") if m in sys.modules],
        "argv": sys.argv[1:], "main": __name__, "only_in_env": os.environ.get("ONLY_IN_ENV"),
        "not_in_env": os.environ.get("NOT_IN_ENV"), "told": os.environ.get("OOMBENCH_PARENT_PID"),
        "parent": os.getppid(), "pid": os.getpid(), "path0": sys.path[0]}
print(json.dumps(seen), flush=True)
print("to stderr", file=sys.stderr)
if sys.argv[1] == "sleep":
    import time; time.sleep(60)
sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else 0)
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("echo")
    (folder / "echo_case.py").write_text(ECHO)
    (folder / "echo_marker.py").write_text("")
    return folder


@pytest.fixture
def echo(folder, monkeypatch):
    """The environment of the echo case. Its server preloads a module of nothing: a server that
    imports torch takes seconds to start."""
    monkeypatch.syspath_prepend(str(folder))  # the server's path is its starter's
    monkeypatch.setattr(preloaded, "PRELOAD", (preloaded.__name__, "echo_marker"))
    monkeypatch.delenv("NOT_IN_ENV", raising=False)
    return dict(os.environ, PYTHONPATH=str(folder), ONLY_IN_ENV="yes", **{PARENT_ENV: str(os.getpid())})


def seen(done: preloaded.Finished) -> dict:
    return json.loads(done.stdout.splitlines()[0])


ARGV = [sys.executable, "-m", "echo_case"]


def test_a_case_in_a_block_is_forked_with_the_preload_imported_and_sees_what_python_m_would_give_it(echo, monkeypatch):
    # A stand-in preload: a case forked from a server with torch itself imported is the what-fits
    # probe's forked run in test_fits.py, which trains.
    monkeypatch.setenv("NOT_IN_ENV", "the caller's alone")
    with preloaded.cases():
        first = preloaded.run([*ARGV, "3", "x y"], echo, timeout=60)
        again = preloaded.run([*ARGV, "0"], echo, timeout=60)
    one, two = seen(first), seen(again)
    assert first.returncode == 3 and again.returncode == 0 and not first.timed_out
    assert one["before_me"] == ["echo_marker"] and one["argv"] == ["3", "x y"]
    assert one["main"] == "__main__" and one["only_in_env"] == "yes" and one["not_in_env"] is None
    assert first.stderr.strip() == "to stderr" and one["pid"] == first.pid != os.getpid()
    # its parent is the server, which it is told (lifeline binds it there); one server for both
    assert one["parent"] == two["parent"] == int(one["told"]) != os.getpid()
    assert one["path0"] == echo["PYTHONPATH"]
    assert not psutil.pid_exists(one["parent"]) or psutil.Process(one["parent"]).status() == psutil.STATUS_ZOMBIE


def test_outside_a_block_or_for_another_argv_a_case_starts_cold(echo):
    cold = seen(preloaded.run([*ARGV, "0"], echo, timeout=60))
    assert cold["before_me"] == [] and cold["parent"] == os.getpid() == int(cold["told"])
    with preloaded.cases():
        here = "import sys, os; print(os.getppid(), 'echo_marker' in sys.modules)"
        script = preloaded.run([sys.executable, "-c", here], echo, timeout=60)
    assert script.stdout.split() == [str(os.getpid()), "False"]


def test_another_environment_gets_a_server_of_its_own_started_in_it(echo):
    # torch reads some of its environment when it is imported (the allocator's backend): a server
    # started in one environment cannot stand for another
    with preloaded.cases():
        first = seen(preloaded.run([*ARGV, "0"], echo, timeout=60))
        other = seen(preloaded.run([*ARGV, "0"], dict(echo, ONLY_IN_ENV="other"), timeout=60))
    assert other["only_in_env"] == "other" and other["before_me"] == ["echo_marker"]
    assert other["parent"] != first["parent"]


def test_a_case_past_its_time_is_killed_and_said_to_be(echo):
    with preloaded.cases():
        began = time.monotonic()
        done = preloaded.run([*ARGV, "sleep"], echo, timeout=1)
    assert done.timed_out and done.returncode == -signal.SIGKILL and time.monotonic() - began < 30
    assert not psutil.pid_exists(done.pid) and seen(done)["before_me"] == ["echo_marker"]


def test_a_thread_other_than_the_block_s_starts_no_server_that_would_die_with_it(echo):
    out = {}
    with preloaded.cases():
        worker = threading.Thread(target=lambda: out.update(before=seen(preloaded.run([*ARGV, "0"], echo, 60))))
        worker.start()
        worker.join()
        assert preloaded.ready(ARGV, echo)  # started here, in the block's thread: other threads use it
        worker = threading.Thread(target=lambda: out.update(after=seen(preloaded.run([*ARGV, "0"], echo, 60))))
        worker.start()
        worker.join()
    assert out["before"]["before_me"] == [] and out["before"]["parent"] == os.getpid()
    assert out["after"]["before_me"] == ["echo_marker"] and out["after"]["parent"] != os.getpid()


def test_a_server_is_readied_only_for_what_run_would_fork_from_it(echo):
    cold = [sys.executable, "-S", "-c", "print(1)"]  # a command run would start cold
    with preloaded.cases():
        assert not preloaded.ready(cold, echo) and preloaded._SERVER.pid is None
        assert preloaded.run(cold, echo, timeout=60).stdout == "1\n" and preloaded._SERVER.pid is None
        assert preloaded.ready(ARGV, echo) and psutil.pid_exists(preloaded._SERVER.pid)
    assert not preloaded.ready(ARGV, echo)  # outside a block nothing is readied


KILLED = """\
import json, os, sys
from harness.measure.guards import preloaded
preloaded.PRELOAD = (preloaded.__name__, "echo_marker")
env = dict(os.environ, OOMBENCH_PARENT_PID=str(os.getpid()))
with preloaded.cases():
    preloaded.run([sys.executable, "-m", "echo_case", "0"], env, 60)  # the server, started
    print(preloaded._SERVER.pid, flush=True)
    preloaded.run([sys.executable, "-m", "echo_case", "sleep"], env, 60)
"""


def test_nothing_outlives_a_starter_killed_while_its_case_runs(echo, tmp_path):
    """SIGKILL runs nothing in the starter: the server dies with it, and the case with the server."""
    out = tmp_path / "out"
    with open(out, "w") as sink:
        starter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED)], env=echo, stdout=sink,
                                   cwd=os.getcwd())
    try:
        deadline = time.monotonic() + 60
        while not (lines := out.read_text().splitlines()) or len(psutil.Process(int(lines[0])).children()) < 1:
            assert starter.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
        server = psutil.Process(int(lines[0]))
        left = [server, *server.children(recursive=True)]
        starter.kill()
        starter.wait()
    finally:
        starter.kill()
    gone, alive = psutil.wait_procs(left, timeout=20)
    assert not alive and len(gone) == 2


def test_where_the_server_started_nvidias_driver_each_case_starts_afresh_in_its_own_process(echo, folder,
                                                                                            monkeypatch):
    """CUDA cannot be used across a fork once its driver is started: a case forked from a server
    holding the driver's files open (here a stand-in file) runs as a fresh interpreter instead,
    keeping its pid, its parent and what it writes."""
    standin = folder / "nvidiactl"
    (folder / "driver_standin.py").write_text(
        "from harness.measure.guards import preloaded\n"
        f"preloaded.DRIVER_FILES = {str(standin)!r}\n"
        "HELD = open(preloaded.DRIVER_FILES, 'w')\n")
    monkeypatch.setattr(preloaded, "PRELOAD", (preloaded.__name__, "echo_marker", "driver_standin"))
    with preloaded.cases():
        done = preloaded.run([*ARGV, "4"], echo, timeout=60)
    got = seen(done)
    assert done.returncode == 4 and done.stderr.strip() == "to stderr" and got["argv"] == ["4"]
    assert got["before_me"] == [] and got["pid"] == done.pid  # afresh, in the process forked
    assert got["parent"] == int(got["told"]) != os.getpid()  # still the server's child, bound to it
