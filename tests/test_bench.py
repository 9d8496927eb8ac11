"""How an asv benchmark's process finds its run and hands a case over (tests/test_begun.py and
test_kills.py have what is filed when a case dies or raises): the run handed over by
``harness run``, else a plain asv run's store, commit and run id; the watchdog on the harness;
the deadline to the second; the case, its parameters and this box's devices handed to the
runner; a case that raised filed with its own name before asv sees the error."""
import errno
import json

import pytest

from harness import cases
from harness.drive.asv import begun, bench, plain_asv
from harness.drive.runner import execute
from harness.measure.outcomes import FAILED
from harness.measure.records.store import RecordStore, RunContext, load_file

from conftest import fake_devices
from test_outcomes import quick

DEVICES = fake_devices(count=1)
NO_GPU = fake_devices(count=0)  # what the real runner is given here: NVML is not on this box
CASE, PARAMS = "ceilings", {"probe": "host_copy"}


def quickly(case, params, devices, run):
    """The runner on a case of the same name and parameters whose step is nothing: the wiring, not the copy."""
    fake = cases.Case(name=case.name, params={k: (v,) for k, v in params.items()}, build=lambda **_: quick())
    return execute(fake, params, devices=NO_GPU, run=run)


@pytest.fixture
def ctx(tmp_path, monkeypatch) -> RunContext:
    """A run handed over as harness run hands it, on a box of one fake GPU, with no watchdog."""
    run = RunContext(RecordStore(tmp_path / "records"), "box", run_id="20261127T000000-abcdef", commit="c" * 40,
                     parent_pid=None)
    monkeypatch.setenv(bench.RUN_ENV, run.to_json())
    monkeypatch.setattr(bench, "discover", lambda: DEVICES)
    return run


def test_the_run_handed_over_is_the_context(monkeypatch, tmp_path):
    run = RunContext(RecordStore(tmp_path), "box", run_id="r", commit="c", deadline=5.0, parent_pid=7, trace_busy=False)
    assert bench.context(DEVICES, environ={bench.RUN_ENV: run.to_json()}).to_json() == run.to_json()


def test_under_a_plain_asv_run_records_go_to_the_local_store_named_for_asvs_commit_and_run(monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(plain_asv, "run_id", lambda: "20261127T000000-asv123")
    monkeypatch.setattr(plain_asv, "commit", lambda repo, environ: asked.append((repo, environ)) or "d" * 40)
    monkeypatch.setattr(bench, "snapshot", lambda devices: type("E", (), {"cpu": f"cpu of {devices.count} GPU box"}))
    monkeypatch.setattr(bench, "machine_name", lambda devices, cpu: f"named {devices.count} {cpu}")
    environ = {"ASV_COMMIT": "d" * 40}
    got = bench.context(DEVICES, tmp_path / "local", environ=environ)
    assert got.store.root == RecordStore.of_results(tmp_path / "local").root
    assert got.machine == "named 1 cpu of 1 GPU box"
    assert (got.run_id, got.commit, got.parent_pid, got.deadline) == ("20261127T000000-asv123", "d" * 40, None, None)
    assert asked == [(bench.REPO, environ)]
    monkeypatch.setenv("ASV_COMMIT", "e" * 40)
    bench.context(DEVICES, tmp_path / "local")
    assert asked[-1][1]["ASV_COMMIT"] == "e" * 40  # this process's environment by default


def test_a_case_under_the_harness_is_watched_and_under_plain_asv_is_not(monkeypatch, tmp_path):
    did = []
    monkeypatch.setattr(bench, "die_with_parent", lambda: did.append("die_with_parent"))
    monkeypatch.setattr(bench, "watch", lambda pid: did.append(("watch", pid)))
    bench._watch_harness(RunContext(RecordStore(tmp_path), "box", parent_pid=4242))
    assert did == ["die_with_parent", ("watch", 4242)]
    bench._watch_harness(RunContext(RecordStore(tmp_path), "box", parent_pid=None))
    assert len(did) == 2


def test_a_case_starts_up_to_the_deadline_itself(monkeypatch, tmp_path):
    run = RunContext(RecordStore(tmp_path), "box", run_id="r", deadline=1000.0)
    monkeypatch.setattr(bench.time, "time", lambda: 1000.0)
    bench._before_deadline(run)
    monkeypatch.setattr(bench.time, "time", lambda: 1000.5)
    with pytest.raises(NotImplementedError, match="deadline had passed; `python3 -m harness run --resume r`"):
        bench._before_deadline(run)


def test_the_runner_is_handed_the_case_its_parameters_this_box_and_the_run(ctx, monkeypatch):
    handed = []
    monkeypatch.setattr(bench, "execute", lambda case, params, devices, run: handed.append((case, params, devices, run))
                        or quickly(case, params, devices, run))
    rec = bench.measure(CASE, **PARAMS)
    ((case, params, devices, run),) = handed
    assert case is cases.get(CASE) and params == PARAMS and devices is DEVICES and run.to_json() == ctx.to_json()
    assert [(r.case, r.params) for r in load_file(ctx.path).records] == [(CASE, PARAMS)] and rec.params == PARAMS
    entries = [json.loads(line) for line in RecordStore.begun_log(ctx.path).read_text().splitlines()]
    assert [(e["case"], e["params"]) for e in entries] == [(CASE, PARAMS)]  # begun before it ran


def test_a_case_that_raises_is_filed_as_itself_then_the_error_reaches_asv(ctx, monkeypatch):
    def boom(*_, **__):
        raise KeyError("a bug in the case")
    monkeypatch.setattr(bench, "execute", boom)
    with pytest.raises(KeyError, match="a bug in the case"):
        bench.measure(CASE, **PARAMS)
    (rec,) = load_file(ctx.path).records
    assert (rec.case, rec.params, rec.outcome, rec.run_id) == (CASE, PARAMS, FAILED, ctx.run_id)
    assert rec.check["ended"] == "raised" and rec.environment.devices == DEVICES


def test_a_case_that_died_before_is_not_run_again_and_another_parameter_set_is(ctx, monkeypatch):
    monkeypatch.setattr(begun, "died",
                        lambda run, case, params: {"pid": 1} if (case, params) == (CASE, PARAMS) else None)
    monkeypatch.setattr(begun, "oom_kills", lambda: 3)
    monkeypatch.setattr(begun, "reason",
                        lambda entry, kills_now: f"its process {entry['pid']} died ({kills_now} kills)")
    ran = []
    monkeypatch.setattr(bench, "execute", lambda case, params, devices, run: ran.append(params) or
                        quickly(case, params, devices, run))
    with pytest.raises(RuntimeError, match="^not measured again: its process 1 died \\(3 kills\\)$"):
        bench.measure(CASE, **PARAMS)
    bench.measure(CASE, probe="matmul_fp32")
    assert ran == [{"probe": "matmul_fp32"}]


def test_a_plain_asv_run_files_into_its_local_store_and_never_reads_back_nor_skips(tmp_path, monkeypatch):
    monkeypatch.delenv(bench.RUN_ENV, raising=False)
    monkeypatch.setattr(bench, "discover", lambda: NO_GPU)
    monkeypatch.setattr(plain_asv, "run_id", lambda: None)  # asv's own process not found: no run id
    monkeypatch.setattr(plain_asv, "commit", lambda repo, environ: None)
    monkeypatch.setattr(begun, "died", lambda *a: {"pid": 1})  # no run, so no earlier death of it
    ran = []
    monkeypatch.setattr(bench, "execute", lambda case, params, devices, run: ran.append(devices) or
                        quickly(case, params, devices, run))
    bench.measure(CASE, tmp_path / "local", **PARAMS)
    bench.measure(CASE, tmp_path / "local", **PARAMS)  # measured again: a plain run has no run to read back
    assert ran == [NO_GPU, NO_GPU]
    (path,) = (tmp_path / "local").rglob("asv-direct.jsonl")
    assert len(load_file(path).records) == 2


def test_a_full_disk_is_named_with_the_runs_folder(ctx, monkeypatch):
    def full(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(bench, "execute", full)
    monkeypatch.setattr(RecordStore, "append", staticmethod(full))
    with pytest.raises(bench.DiskFull) as e:
        bench.measure(CASE, **PARAMS)
    assert str(ctx.path.parent) in str(e.value) and ctx.run_id in str(e.value)
