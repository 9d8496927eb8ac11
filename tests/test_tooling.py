"""The tooling case: its made-up records are the same every time and all valid, and its check
fails a command that did not do its work."""
import subprocess
from pathlib import Path

import pytest

from harness.cases import tooling
from harness.measure.instruments.machine import machine_name
from harness.measure.instruments.devices import GPU, Devices
from harness.measure.outcomes import CheckFailed
from harness.measure.records.store import RecordStore
from harness.workloads import synthetic


def test_the_made_up_records_are_the_same_every_time_and_each_one_loads(tmp_path):
    n = 2 * len(synthetic.CONFIGS) + 5
    a, b = synthetic.write(tmp_path / "a", n), synthetic.write(tmp_path / "b", n)
    assert [f.read_bytes() for f in a] == [f.read_bytes() for f in b]
    loaded = RecordStore.of_results(tmp_path / "a").load()
    assert len(loaded.records) == n and not loaded.problems
    assert len({r.run_id for r in loaded.records}) == len(a) == 3


def test_the_check_fails_a_command_that_exits_badly_or_writes_nothing(tmp_path, monkeypatch):
    for probe, out in (("gate_50k", ""), ("pages_50k", "")):
        monkeypatch.setattr(tooling, "_harness", lambda *a: subprocess.CompletedProcess(a, 2, "", "oombench: no\n"))
        w = tooling.tool(probe, n=40)
        w.step()
        with pytest.raises(CheckFailed, match="exited 2: oombench: no"):
            w.check()
        monkeypatch.setattr(tooling, "_harness", lambda *a, out=out: subprocess.CompletedProcess(a, 0, out, ""))
        w.step()
        with pytest.raises(CheckFailed):
            w.check()  # no verdict printed, or no pages written
        w.close()


def test_a_machine_is_named_alike_whether_its_devices_can_be_cached_or_not():
    gpu = GPU(0, "NVIDIA H200", 141 * 2**30, 140 * 2**30, "9.0", "GPU-1")
    hashable, listed = Devices(gpus=(gpu,)), Devices(gpus=[gpu], peer=[[True]])
    assert machine_name(hashable) == machine_name(listed) == "nvidia-h200-x1"


def test_the_commands_timed_are_this_checkouts_whatever_else_is_installed(monkeypatch):
    seen = {}
    monkeypatch.setattr(tooling.subprocess, "run", lambda argv, **kw: seen.update(argv=argv, **kw))
    tooling._harness("gate", "a", "b")
    assert seen["argv"][1:] == ["-m", "harness", "gate", "a", "b"]
    # python -m imports from its working folder first: the harness beside this file, not an installed one
    assert (Path(seen["cwd"]) / "harness" / "cases" / "tooling.py").resolve() == Path(tooling.__file__).resolve()
