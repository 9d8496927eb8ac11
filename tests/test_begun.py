"""A case whose measuring process dies or raises leaves a ``failed`` record saying so, and is
not measured again for the benchmark's next figure; a resumed run measures what a stopped one
left. (The end-to-end kill of a measuring process under ``harness run``: tests/test_kills.py.)"""
import errno
import os
import subprocess
import sys
import time

import pytest

from harness.drive.asv import begun, bench
from harness.measure.instruments.environment import snapshot
from harness.measure.guards.inputs import disk_full
from harness.measure.records.store import RecordStore, append_line, load_file, read_lines
from harness.report import tables
from harness.report.model import Row

from conftest import set_run

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
    assert begun.reason(entry, kills_now=4) == (
        "its process (pid 7) ended while measuring, without a record: killed (by asv at the benchmark's timeout, or by "
        "the kernel's out-of-memory killer when host memory runs out) or crashed in native code; asv's output of the "
        "run says which")  # no host size known: none said
    monkeypatch.setattr(begun, "OOM_EVENTS", (str(tmp_path / "absent"),))
    assert begun.oom_kills() is None


def test_a_case_begins_with_its_process_its_run_s_harness_and_the_oom_kills_so_far(ctx, tmp_path, monkeypatch):
    events = tmp_path / "memory.events"
    events.write_text("oom 1\noom_kill 1\n")
    monkeypatch.setattr(begun, "OOM_EVENTS", (str(events),))
    before = time.time()
    begun.begin(ctx, CASE, PARAMS)
    ((n, entry),) = read_lines(RecordStore.begun_log(ctx.path))[0]
    assert before <= entry.pop("began") <= time.time()
    assert entry == {"case": CASE, "params": PARAMS, "pid": os.getpid(), "harness_pid": 4242, "oom_kills": 1}


@pytest.mark.parametrize("text, kills", [("oom_kill 7\n", 7), ("oom_kill_disable 0\noom_kill 0\n", 0),
                                         ("oom_kill x\n", None), ("oom_kill 1 2\n", None), ("oom_kills 3\n", None),
                                         ("", None)])
def test_the_oom_kill_count_is_read_only_from_its_own_line(tmp_path, monkeypatch, text, kills):
    events = tmp_path / "memory.events"
    events.write_text(text)
    monkeypatch.setattr(begun, "OOM_EVENTS", (str(events),))
    assert begun.oom_kills() == kills


def test_each_case_lost_is_filed_once_with_its_run_and_commit(ctx):
    ctx.path.parent.mkdir(parents=True)
    other = {"probe": "cpu_matmul_fp32"}
    for params in (PARAMS, dict(reversed(list({"probe": "host_copy", "n": 1}.items()))), other,
                   {"n": 1, "probe": "host_copy"}, PARAMS):
        append_line(RecordStore.begun_log(ctx.path), {"case": CASE, "params": params, "pid": dead_pid(),
                                                      "harness_pid": ctx.parent_pid, "began": 0})
    assert begun.died(ctx, CASE, other)["params"] == other
    assert begun.died(ctx, CASE, {"probe": "elsewhere"}) is None and begun.died(ctx, "other", PARAMS) is None
    filed = begun.file_lost(ctx, snapshot())
    assert [r.params for r in filed] == [PARAMS, {"n": 1, "probe": "host_copy"}, other]  # one per case and parameters
    assert {(r.run_id, r.commit) for r in filed} == {(ctx.run_id, ctx.commit)}


def test_a_plain_asv_run_has_no_run_to_file_lost_cases_into(tmp_path, monkeypatch):
    ctx = set_run(monkeypatch, tmp_path / "records", run_id=None, commit="c" * 40, parent_pid=4242)
    ctx.path.parent.mkdir(parents=True)
    begun_by(ctx, dead_pid(), harness_pid=ctx.parent_pid)
    assert RecordStore.begun_log(ctx.path).exists()
    assert begun.died(ctx, CASE, PARAMS) is None and begun.file_lost(ctx, snapshot()) == []


@pytest.mark.parametrize("oom", [False, True])
def test_a_case_lost_while_the_disk_was_full_is_said_to_have_died_of_it_unless_the_oom_killer_did(
        ctx, tmp_path, monkeypatch, oom):
    events = tmp_path / "memory.events"
    monkeypatch.setattr(begun, "OOM_EVENTS", (str(events),))
    monkeypatch.setattr(begun, "disk_nearly_full", lambda path: path == ctx.path.parent)
    ctx.path.parent.mkdir(parents=True)
    pid = dead_pid()
    append_line(RecordStore.begun_log(ctx.path), {"case": CASE, "params": PARAMS, "pid": pid,
                                                  "harness_pid": ctx.parent_pid, "began": 0, "oom_kills": 2})
    events.write_text(f"oom_kill {3 if oom else 2}\n")
    (rec,) = begun.file_lost(ctx, snapshot())
    if oom:
        assert rec.check == {"ended": "oom_killed"} and "out-of-memory killer" in rec.reason
    else:
        assert rec.check == {"ended": begun.DISK_FULL}
        assert rec.reason == f"its process (pid {pid}) ended without a record: {disk_full(ctx.path.parent, ctx.run_id)}"
    assert (rec.case, rec.params, rec.outcome, rec.run_id, rec.commit) == (CASE, PARAMS, "failed", ctx.run_id,
                                                                           ctx.commit)


def test_a_case_that_raised_is_filed_with_its_error_or_as_the_disk_being_full(ctx):
    env = snapshot()
    full = begun.raised(ctx, CASE, PARAMS, OSError(errno.ENOSPC, "No space left on device"), env)
    assert (full.case, full.params, full.outcome, full.check, full.run_id, full.commit, full.environment) == \
        (CASE, PARAMS, "failed", {"ended": begun.DISK_FULL}, ctx.run_id, ctx.commit, env)
    assert full.reason == disk_full(ctx.path.parent, ctx.run_id) and ctx.run_id in full.reason
    long = begun.raised(ctx, CASE, PARAMS, ValueError("x" * 3000), env)
    assert (long.case, long.params, long.outcome, long.run_id, long.commit, long.environment) == \
        (CASE, PARAMS, "failed", ctx.run_id, ctx.commit, env)
    assert long.reason == ("ValueError: " + "x" * 3000)[:2000]
    assert long.check == {"ended": "raised", "error": "ValueError"}
