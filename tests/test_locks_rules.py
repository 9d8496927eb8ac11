"""The locks' rules, each in one process and at once (tests/test_locks.py has the processes that
wait on each other): where the locks live, what a GPU's lock is called, what a holder says of
itself and what a second taker is told, and the one order in which several GPUs are taken."""
import json
import os
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock

from harness.measure.guards import locks

from conftest import fake_devices


def test_the_lock_folder_is_the_variable_else_the_runtime_folder_else_the_users_temporary_one(tmp_path):
    mine = tmp_path / "not" / "yet" / "mine"
    assert locks.lock_dir({locks.LOCK_DIR_ENV: str(mine), "XDG_RUNTIME_DIR": str(tmp_path)}) == mine
    assert mine.is_dir() and (mine.stat().st_mode & 0o777) == 0o700
    assert locks.lock_dir({"XDG_RUNTIME_DIR": str(tmp_path)}) == tmp_path / "oombench"
    assert locks.lock_dir({locks.LOCK_DIR_ENV: "", "XDG_RUNTIME_DIR": str(tmp_path)}) == tmp_path / "oombench"
    fallback = Path(tempfile.gettempdir()) / f"oombench-{os.getuid()}"
    assert locks.lock_dir({"XDG_RUNTIME_DIR": ""}) == fallback and fallback.is_dir()


def test_the_lock_folder_defaults_to_this_processs_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path / "env"))
    assert locks.lock_dir() == tmp_path / "env"


def test_a_gpus_lock_is_named_for_its_uuid_with_only_safe_characters(tmp_path):
    env = {locks.LOCK_DIR_ENV: str(tmp_path)}
    assert locks.gpu_lock("GPU-1a2b_3.c", env) == tmp_path / "gpu-GPU-1a2b_3.c.lock"
    assert locks.gpu_lock("MIG-x/../y z", env) == tmp_path / "gpu-MIG-x_.._y_z.lock"


def test_a_results_folders_lock_is_made_with_its_folder(tmp_path):
    assert locks.results_lock(tmp_path / "new" / "results") == tmp_path / "new" / "results" / ".lock"
    assert (tmp_path / "new" / "results").is_dir()
    assert locks.results_lock(tmp_path / "new" / "results") == tmp_path / "new" / "results" / ".lock"  # again


@pytest.mark.parametrize("written, said", [
    (None, "another process (it wrote no pid)"),
    ("not json", "another process (it wrote no pid)"),
    ("[1, 2]", "another process (it wrote no pid)"),
    (json.dumps({"argv": ["x"]}), "another process (it wrote no pid)"),
    (json.dumps({"pid": 42}), "pid 42 (command unknown)"),
    (json.dumps({"pid": 42, "argv": ["python3", "-m", "harness", "run", 7]}), "pid 42 (python3 -m harness run 7)"),
    (json.dumps({"pid": 42, "argv": ["x" * 400]}), "pid 42 (" + "x" * 300 + ")"),
])
def test_the_holder_is_described_by_what_it_wrote_of_itself(tmp_path, written, said):
    lock = tmp_path / ".lock"
    if written is not None:
        locks.holder_file(lock).write_text(written)
    assert locks.describe_holder(lock) == said
    assert locks.holder_file(lock) == tmp_path / ".lock.holder"


def test_a_holder_writes_who_it_is_while_it_holds_and_nothing_after(tmp_path, monkeypatch):
    lock = tmp_path / ".lock"
    monkeypatch.setattr(locks.sys, "argv", ["harness", "run"])
    with locks.held(lock, "the results folder") as got:
        assert got == lock
        mine = locks.holder(lock)
        assert mine["pid"] == os.getpid() and mine["argv"] == ["harness", "run"]
        assert mine["what"] == "the results folder"
        assert mine["since"] > 0
    assert not locks.holder_file(lock).exists()
    with FileLock(str(lock)).acquire(timeout=0):  # released: another taker gets it at once
        pass


def test_a_taker_that_will_not_wait_is_told_who_holds_it_and_the_fix(tmp_path):
    lock = tmp_path / ".lock"
    other = FileLock(str(lock))
    other.acquire()
    locks.holder_file(lock).write_text(json.dumps({"pid": 7, "argv": ["other", "run"]}))
    try:
        with pytest.raises(locks.Busy) as e:
            with locks.held(lock, "results folder r", wait=False):
                pass
    finally:
        other.release()
    assert str(e.value) == ("results folder r is in use by pid 7 (other run): wait for it to end or stop it, "
                            "or leave out --no-wait to wait")
    assert locks.holder(lock) == {"pid": 7, "argv": ["other", "run"]}  # the holder's own words left as they were


def test_several_gpus_are_taken_once_each_in_uuid_order(tmp_path, monkeypatch):
    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(tmp_path))
    taken = []
    real = locks.held

    def spy(lock, what, wait=True, out=None):
        taken.append((Path(lock).name, what, wait))
        return real(lock, what, wait, out)
    monkeypatch.setattr(locks, "held", spy)
    with locks.gpus_held(["GPU-b", "GPU-a", "GPU-b"], wait=False):
        assert {p.name for p in tmp_path.glob("*.holder")} == {"gpu-GPU-a.lock.holder", "gpu-GPU-b.lock.holder"}
    assert taken == [("gpu-GPU-a.lock", "GPU GPU-a", False), ("gpu-GPU-b.lock", "GPU GPU-b", False)]
    assert not list(tmp_path.glob("*.holder"))


def test_the_gpus_locked_are_those_this_process_sees(monkeypatch):
    asked = []
    monkeypatch.setattr("harness.measure.instruments.devices.discover",
                        lambda: asked.append(1) or fake_devices(count=2))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert locks.visible_gpu_uuids([1, 0, 5]) == ["GPU-1", "GPU-0"]
    assert len(asked) == 1  # NVML asked once, not once an ordinal
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert locks.visible_gpu_uuids([0, 1]) == ["GPU-1"]
    monkeypatch.setattr("harness.measure.instruments.devices.discover", lambda: fake_devices(count=0))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert locks.visible_gpu_uuids([0]) == []  # a CPU box locks nothing


def test_a_taker_that_waits_says_for_whom_then_holds_it(tmp_path):
    import io
    import threading
    lock = tmp_path / ".lock"
    taken, done = threading.Event(), threading.Event()

    def other():  # another thread: filelock refuses to wait on a lock of its own thread
        with FileLock(str(lock)):
            locks.holder_file(lock).write_text(json.dumps({"pid": 7, "argv": ["other"]}))
            taken.set()
            done.wait(0.3)
    thread = threading.Thread(target=other)
    thread.start()
    taken.wait(5)
    out = io.StringIO()
    with locks.held(lock, "GPU GPU-0", out=out):
        assert locks.holder(lock)["pid"] == os.getpid()
    thread.join()
    assert out.getvalue() == "oombench: waiting: GPU GPU-0 is in use by pid 7 (other)\n"
