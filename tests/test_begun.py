"""A case whose measuring process dies or raises leaves a ``failed`` record saying so, and is
not measured again for the benchmark's next figure; a resumed run measures what a stopped one
left. (The end-to-end kill of a measuring process under ``harness run``: tests/test_kills.py.)"""
import os
import subprocess
import sys

import pytest

from harness.drive import begun, bench
from harness.measure.environment import snapshot
from harness.measure.store import RecordStore, append_line, load_file, read_lines
from harness.report import tables
from harness.report.pages.model import Row
from tests.conftest import set_run

CASE, PARAMS = "ceilings", {"probe": "host_copy"}


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    child.wait()
    return child.pid


def cell_of(rec) -> str:
    return tables.cell(Row("r", rec, "records/x.jsonl", 1), ["step"])


def begun_by(ctx, pid, harness_pid):
    append_line(RecordStore.begun_log(ctx.path), {"case": CASE, "params": PARAMS, "pid": pid,
                                                  "harness_pid": harness_pid, "began": 0})


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    return set_run(monkeypatch, tmp_path / "records", run_id="20261124T000000-abcdef", commit="c" * 40,
                   parent_pid=4242)


def test_a_case_whose_process_died_is_filed_failed_once_and_not_measured_again(ctx, monkeypatch):
    ctx.path.parent.mkdir(parents=True)
    begun_by(ctx, dead_pid(), harness_pid=ctx.parent_pid)
    monkeypatch.setattr(bench, "execute", lambda *a, **k: pytest.fail("a case that died was measured again"))
    monkeypatch.setattr(bench, "_watch_harness", lambda ctx: None)
    with pytest.raises(RuntimeError, match="not measured again: its process .* ended while measuring"):
        bench.measure(CASE, **PARAMS)
    filed = begun.file_lost(ctx, snapshot())
    assert [(r.case, r.params, r.outcome, r.check) for r in filed] == [(CASE, PARAMS, "failed", {"ended": "died"})]
    assert "out-of-memory killer" in filed[0].reason and "GB here" in filed[0].reason
    assert begun.file_lost(ctx, snapshot()) == []  # filed once
    assert [r.outcome for r in load_file(ctx.path).records] == ["failed"]
    # a later figure of the benchmark reads the failure back, as asv's "failed"
    with pytest.raises(RuntimeError, match="ended while measuring"):
        bench.measure(CASE, **PARAMS)
    assert cell_of(load_file(ctx.path).records[0]) == "failed (its process died: killed or crashed)"


def test_what_another_harness_process_began_is_measured_again_on_resume(ctx):
    """A stopped run files nothing; its --resume (another harness process) measures those cases."""
    ctx.path.parent.mkdir(parents=True)
    begun_by(ctx, dead_pid(), harness_pid=ctx.parent_pid + 1)
    assert begun.died(ctx, CASE, PARAMS) is None
    assert begun.file_lost(ctx, snapshot()) == []


def test_a_case_still_measuring_is_not_lost(ctx):
    ctx.path.parent.mkdir(parents=True)
    begun_by(ctx, os.getpid(), harness_pid=ctx.parent_pid)
    assert begun.died(ctx, CASE, PARAMS) is None and begun.file_lost(ctx, snapshot()) == []


def test_a_case_that_raises_is_filed_failed_with_the_error_before_asv_sees_it(ctx, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("the case is broken")

    monkeypatch.setattr(bench, "execute", broken)
    monkeypatch.setattr(bench, "_watch_harness", lambda ctx: None)
    with pytest.raises(ValueError, match="the case is broken"):
        bench.measure(CASE, **PARAMS)
    (rec,) = load_file(ctx.path).records
    assert (rec.outcome, rec.reason, rec.check) == ("failed", "ValueError: the case is broken",
                                                    {"ended": "raised", "error": "ValueError"})
    assert [e["pid"] for _, e in read_lines(RecordStore.begun_log(ctx.path))[0]] == [os.getpid()]
    assert begun.file_lost(ctx, snapshot()) == []  # it has its record
    assert cell_of(rec) == "failed (ValueError)"


def test_the_begun_log_is_not_read_as_records(ctx):
    ctx.path.parent.mkdir(parents=True)
    begun_by(ctx, os.getpid(), harness_pid=ctx.parent_pid)
    assert not RecordStore.begun_log(ctx.path).name.endswith(".jsonl")
    assert ctx.store.files() == []


def test_a_case_the_oom_killer_ended_is_filed_as_host_memory_running_out(ctx, tmp_path, monkeypatch):
    events = tmp_path / "memory.events"
    monkeypatch.setattr(begun, "OOM_EVENTS", (str(tmp_path / "absent"), str(events)))
    events.write_text("low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\n")  # cgroup v2's layout
    assert begun.oom_kills() == 2
    ctx.path.parent.mkdir(parents=True)
    append_line(RecordStore.begun_log(ctx.path), {"case": CASE, "params": PARAMS, "pid": dead_pid(),
                                                  "harness_pid": ctx.parent_pid, "began": 0, "oom_kills": 2})
    events.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")  # v1's layout, one kill later
    filed = begun.file_lost(ctx, snapshot())
    assert [r.check for r in filed] == [{"ended": "oom_killed"}]
    assert "out-of-memory killer" in filed[0].reason and "host with more memory" in filed[0].reason
    assert cell_of(filed[0]) == "failed (host memory ran out: the kernel's out-of-memory killer ended it)"


def test_a_death_without_a_new_oom_kill_or_a_count_to_read_says_only_that_it_died(tmp_path, monkeypatch):
    entry = {"pid": 7, "oom_kills": 4}
    assert not begun.oom_killed(entry, 4) and begun.oom_killed(entry, 5)
    assert not begun.oom_killed({"pid": 7}, 5) and not begun.oom_killed(entry, None)
    assert "killed or crashed" not in begun.reason(entry, kills_now=5)
    assert "crashed in native code" in begun.reason(entry, kills_now=4)
    monkeypatch.setattr(begun, "OOM_EVENTS", (str(tmp_path / "absent"),))
    assert begun.oom_kills() is None
