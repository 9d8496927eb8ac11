"""Locks: a second run on the same results folder or GPU waits, naming the holder, or is refused
with that name under --no-wait; --resume of a run whose process is alive is refused; the
what-fits search holds the GPU's lock (the launcher's: tests/test_launch.py, whose launches
it shares)."""
import sys
import time

import pytest

from harness.drive.asv import suite
from harness.drive.commands import bootstrap, cli
from harness.measure.guards import locks
from harness.measure.records.store import RecordStore
from harness.workloads.search import fits

from lock_holder import hold


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path / "locks"))
    return tmp_path / "locks"


@pytest.fixture
def holder(request):
    procs = []
    yield lambda lock, seconds=30: procs.append(hold(lock, seconds)) or procs[-1]
    for p in procs:
        p.kill()
        p.wait()


def test_a_held_lock_refuses_without_waiting_and_names_the_holders_pid_and_command(tmp_path, holder):
    lock = tmp_path / "x.lock"
    other = holder(lock)
    with pytest.raises(locks.Busy, match=rf"in use by pid {other.pid} \(.*the-holder.*\).*--no-wait"):
        with locks.held(lock, "x", wait=False):
            pass


def test_a_second_taker_waits_saying_for_whom_then_gets_the_lock(tmp_path, holder, capsys):
    lock = tmp_path / "x.lock"
    other = holder(lock, seconds=1.0)
    t0 = time.monotonic()
    with locks.held(lock, "results folder R"):
        assert locks.holder(lock)["argv"] == sys.argv  # now ours
    assert time.monotonic() - t0 > 0.3
    assert f"waiting: results folder R is in use by pid {other.pid}" in capsys.readouterr().err
    assert not locks.holder_file(lock).exists()  # nothing left to mislead the next taker


def test_run_no_wait_on_a_held_results_folder_exits_2_naming_the_holder(tmp_path, holder, monkeypatch, capsys):
    """Two runs on one folder lost the first run's figures from asv's files: now the second waits or,
    under --no-wait, is refused before anything runs."""
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    monkeypatch.setattr(suite, "machine_info", lambda *a: pytest.fail("ran though the folder was held"))
    other = holder(locks.results_lock(tmp_path / "res"))
    assert cli.main(["run", "--results", str(tmp_path / "res"), "--no-wait"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"pid {other.pid}" in err and "the-holder" in err


def test_resume_of_a_run_whose_process_is_alive_is_refused(tmp_path, holder, monkeypatch, capsys):
    """--resume ID was accepted while run ID still ran, and cases were measured twice at once."""
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    monkeypatch.setattr(suite, "machine_info", lambda *a: pytest.fail("ran though the run is alive"))
    store = RecordStore.of_results(tmp_path / "res")
    run_file = store.run_file("box", "ab" * 20, "20261123T170800-28da03")
    alive = holder(tmp_path / "unrelated.lock")  # stands in for the running `harness run`
    import json

    import psutil
    run_file.parent.mkdir(parents=True)
    started = psutil.Process(alive.pid).create_time()
    store.run_state(run_file).write_text(json.dumps({"pid": alive.pid, "started": started,
                                                     "argv": ["python3", "-m", "harness", "run"]}))
    assert cli.main(["run", "--results", str(tmp_path / "res"), "--resume", "20261123T170800-28da03"]) == 2
    assert f"still running as pid {alive.pid}" in capsys.readouterr().err
    alive.kill()
    alive.wait()
    assert store.live_run("20261123T170800-28da03") is None  # once it is gone, it can be resumed


def test_the_what_fits_search_holds_the_gpus_lock(monkeypatch, holder, capfd):
    monkeypatch.setattr(locks, "visible_gpu_uuids", lambda ordinals: ["GPU-test-0"])
    other = holder(locks.gpu_lock("GPU-test-0"), seconds=1.0)
    probe = "import json, os; print(json.dumps({'fits': True, 'pid': os.getpid()}))"
    prober = fits.SubprocessProber(lambda n: [sys.executable, "-S", "-c", probe])
    assert prober.many([1, 2]) == [True, True]
    assert f"GPU GPU-test-0 is in use by pid {other.pid}" in capfd.readouterr().err


def test_several_gpus_are_locked_in_one_order(monkeypatch):
    taken = []
    monkeypatch.setattr(locks, "held", lambda lock, what, wait=True: taken.append(lock.name) or _nothing())
    with locks.gpus_held(["GPU-b", "GPU-a", "GPU-b"]):
        pass
    assert taken == ["gpu-GPU-a.lock", "gpu-GPU-b.lock"]


def _nothing():
    from contextlib import nullcontext
    return nullcontext()
