"""Figures that must not say more than was measured: the tricks' multiples, the summary's
machines and commits, a run's closing summary, and CPU-run cases' device memory. Every record
is planted here."""
import pytest

from harness.report import model
from harness.report.pages import headline
from harness.report.families import family

from test_chooser import record, rows

LM = {"device": "cuda", "workload": "lm", "batch": 64, "seq_len": 1024, "vocab": 32000, "width": 1024, "depth": 12}


def trick(technique, micro, budget="card", outcome="ok"):
    return record("tricks", {**LM, "technique": technique, "micro_batch": micro, "budget": budget}, outcome,
                  device=10**10, step=0.1)


def base_of(row, all_rows):
    bases = [r for r in all_rows if headline.is_base(r, family("tricks").baseline)]
    found = headline.base_for(row, bases)
    return found and (found.record.params["technique"], found.record.params["micro_batch"],
                      found.record.params["budget"])


def test_a_trick_is_read_against_fp32_at_its_own_micro_batch_or_against_nothing():
    planted = rows(trick("bf16_autocast", 64), trick("fp32", 1), trick("fp32", 64, outcome="does_not_fit"),
                   trick("bf16_autocast", 8, "16GB"), trick("fp32", 8))
    bf16_64, _, _, bf16_8, _ = planted
    assert base_of(bf16_64, planted) is None  # fp32 at 64 did not run: no multiple over fp32 at 1
    assert base_of(bf16_8, planted) == ("fp32", 8, "card")
    with_64 = planted + rows(trick("fp32", 64))
    assert base_of(bf16_64, with_64) == ("fp32", 64, "card")


# -- what a run prints at its end -------------------------------------------------------------------

def test_a_runs_closing_summary_shows_only_what_that_run_measured(tmp_path, capsys):
    import dataclasses

    from harness.drive.asv import suite
    from harness.measure.records.store import RecordStore
    path = tmp_path / "run.jsonl"
    old = dataclasses.replace(trick("fp32", 7), run_id="earlier")
    new = dataclasses.replace(trick("bf16_autocast", 64), run_id="now")
    for rec in (old, new):
        RecordStore.append(path, rec)
    suite.report(path, "now")
    out = capsys.readouterr().out
    assert "technique=bf16_autocast" in out and "micro_batch=7" not in out


def test_a_case_measured_in_this_run_tells_asv_so_and_a_skipped_one_does_not(monkeypatch, tmp_path, capsys):
    import dataclasses

    from harness.drive.asv import bench
    from harness.drive.asv.asv_output import THIS_RUN
    from conftest import set_run
    set_run(monkeypatch, tmp_path / "records", run_id="now", commit="abc")
    made = []
    monkeypatch.setattr(bench, "execute", lambda case, params, devices, run: made[-1])
    made.append(dataclasses.replace(trick("fp32", 64), run_id="now"))
    bench.measure("tricks", **made[-1].params)
    assert THIS_RUN in capsys.readouterr().err
    made.append(dataclasses.replace(trick("fp32", 32), run_id="now", outcome="skipped", timing=None, reason="no GPU"))
    with pytest.raises(NotImplementedError):  # asv's "skipped"
        bench.measure("tricks", **made[-1].params)
    assert THIS_RUN not in capsys.readouterr().err


# -- a case run on the CPU holds no device memory ----------------------------------------------------

def test_a_cpu_run_case_never_shows_a_device_peak_though_nvml_saw_the_card_move():
    from harness.report import tables
    rec = record("tricks", {**LM, "device": "cpu", "technique": "fp32", "micro_batch": 64, "budget": "card"},
                 device=3_400_000)
    assert rec.device_bytes() is None and model.Row("r-0", rec, "x", 1).peak_device is None
    assert tables._peak(rec, tables.View()) == "-"


def test_a_case_on_the_cpu_samples_no_gpu_while_it_runs(monkeypatch):
    from harness.drive import runner
    from harness.measure.instruments.memory import PeakMemory
    from conftest import fake_devices
    watched = []
    monkeypatch.setattr(runner, "PeakMemory", lambda gpus: watched.append(list(gpus)) or PeakMemory())
    params = dict(device="cpu", workload="lm", technique="fp32", budget="card", batch=2, micro_batch=2, vocab=128,
                  width=32, depth=2, seq_len=16)
    monkeypatch.setattr("harness.cases.tricks.checked_against_reference", lambda *a, **k: {})
    rec = runner.execute("tricks", params, devices=fake_devices(count=1))
    assert watched == [[]] and rec.device_bytes() is None


# -- harness summary: whose figures, and filtered by them ---------------------------------------------

def test_summary_names_each_records_machine_and_commit_and_filters_by_them(tmp_path, capsys):
    import dataclasses

    from harness.drive.commands import cli
    from harness.measure.records.store import RecordStore
    from harness.report.summary import machine_of
    from test_chooser import ENV
    from conftest import fake_devices
    other = snapshot_of(fake_devices(name="NVIDIA H200", total=143771 * 2**20))
    recs = [dataclasses.replace(trick("fp32", 64), commit="abc123" + "0" * 34),
            dataclasses.replace(trick("fp32", 32), commit="def456" + "0" * 34, environment=other)]
    for rec in recs:
        RecordStore.append(tmp_path / "r.jsonl", rec)
    h100, h200 = machine_of(recs[0]), machine_of(recs[1])
    assert h100 != h200 and recs[0].environment == ENV
    assert cli.main(["summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["machine", "commit"] and h100 in out and "abc1230" in out
    assert cli.main(["summary", str(tmp_path), "--machine", h200]) == 0
    out = capsys.readouterr().out
    assert "micro_batch=32" in out and "micro_batch=64" not in out
    assert cli.main(["summary", str(tmp_path), "--commit", "abc1"]) == 0
    out = capsys.readouterr().out
    assert "micro_batch=64" in out and "micro_batch=32" not in out
    assert cli.main(["summary", str(tmp_path), "--machine", "nvidia-b200-x1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and h100 in err and h200 in err
    assert cli.main(["summary", str(tmp_path), "--commit", "main"]) == 2
    assert "not a commit hash" in capsys.readouterr().err


def snapshot_of(devices):
    from harness.measure.instruments.environment import snapshot
    return snapshot(devices)
