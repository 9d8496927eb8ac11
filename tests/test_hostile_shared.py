"""asv's per-user machine file (~/.asv-machine.json), shared by every run of the user: runs side
by side each register their box while asv reads it, and none reads it half written or loses an
entry; a HOME that cannot be written is one line naming the fix, before anything runs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.measure.instruments import machine

REPO = Path(__file__).resolve().parents[1]
# One run's registering, many times over, beside a reader doing what `asv run --machine` does.
WRITER = """
import sys
from harness.measure.instruments.machine import register_with_asv
for i in range(25):
    register_with_asv({"machine": sys.argv[1], "os": "Linux", "i": str(i), "pad": "x" * 20000})
"""
READER = """
import sys
from asv.machine import MachineCollection
bad = 0
for i in range(300):
    try:
        MachineCollection.load("box-0")
    except Exception as e:  # asv's own read: a half-written file is a JSON error, a missing entry another
        bad += 1
print(bad)
"""


def test_runs_side_by_side_never_lose_or_tear_the_machine_file(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    machine_file = tmp_path / ".asv-machine.json"
    subprocess.run([sys.executable, "-c", WRITER, "box-0"], env=env, check=True, timeout=60)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, f"box-{n}"], env=env) for n in range(4)]
    reader = subprocess.run([sys.executable, "-c", READER], env=env, capture_output=True, text=True, timeout=120)
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    assert reader.stdout.strip() == "0", reader.stderr[-2000:]
    saved = json.loads(machine_file.read_text())
    assert sorted(k for k in saved if k != "version") == [f"box-{n}" for n in range(4)]
    assert all(saved[f"box-{n}"]["i"] == "24" for n in range(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".asv-machine.json", ".asv-machine.json.lock"]


def test_a_machine_file_left_unreadable_is_rewritten(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".asv-machine.json").write_text('{"box": {"machine": "bo')  # torn by an in-place write
    machine.register_with_asv({"machine": "box", "os": "Linux"})
    assert json.loads((tmp_path / ".asv-machine.json").read_text())["box"] == {"machine": "box", "os": "Linux"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only folder")
def test_a_home_that_cannot_be_written_is_one_line_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(machine.MachineFileError, match=r"set HOME to a folder you can write") as e:
            machine.register_with_asv({"machine": "box", "os": "Linux"})
    finally:
        tmp_path.chmod(0o700)
    assert "\n" not in str(e.value) and ".asv-machine.json" in str(e.value)


def test_a_home_that_is_not_a_folder_is_one_line_naming_the_fix(monkeypatch, tmp_path):
    (tmp_path / "home").write_text("a file\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(machine.MachineFileError, match=r"cannot write asv's machine file .*set HOME to a folder"):
        machine.register_with_asv({"machine": "box", "os": "Linux"})


def test_run_refuses_a_home_that_cannot_take_the_machine_file_before_set_up(monkeypatch, tmp_path, capsys):
    from harness.drive.commands import bootstrap, cli
    monkeypatch.setattr(bootstrap, "ensure", lambda command: pytest.fail("set-up began"))
    (tmp_path / "home").write_text("a file\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cli.main(["run", "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "HOME" in err and "takes a folder" in err and len(err.strip().splitlines()) == 1, err
