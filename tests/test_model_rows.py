"""The rows every page and table reads: a record's rates in datasheet units (the primary first),
its peaks and card, the library versions that name its stack, where it came from, the latest and
newest-stack rows, the Pareto front and the cases a budget decides. On records planted here, never
the committed results."""
import dataclasses
import hashlib
import json

import pytest

from harness.measure.instruments.environment import snapshot
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK, SKIPPED
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report.model import (age, latest, libraries, load_rows, newest_stack, pareto, record_id, release,
                                        versions_of, what_fits)

from conftest import fake_devices

G = 10**9
H100 = snapshot(fake_devices(name="NVIDIA H100 80GB HBM3", total=80 * G))
H200 = snapshot(fake_devices(name="NVIDIA H200", total=141 * G))
LM = {"device": "cuda", "batch": 8, "depth": 2, "width": 64, "seq_len": 128}
SOURCE = "results/records/planted/planted.jsonl"


def stack(env, **libs):
    """``env`` with only these library versions (``cupy_cuda13x`` for cupy-cuda13x)."""
    return dataclasses.replace(env, libraries={k.replace("_", "-"): v for k, v in libs.items()})


def lm(strategy="single", outcome=OK, step=0.5, work=None, env=H100, created=1.0, memory=None, **params) -> Record:
    timing = Timing(step, step, step, step, step, 3, 0) if step else None
    return Record(case="parallel_lm", params={**LM, **params, "strategy": strategy, "gpus": 1},
                  outcome=outcome, environment=env, timing=timing, created=created, memory=memory or {},
                  work={"samples": 8, "tokens": 1024} if work is None else work)


def rows_of(tmp_path, *records: Record) -> list:
    folder = tmp_path / "results" / "records" / "planted"
    folder.mkdir(parents=True)
    (folder / "planted.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return load_rows(tmp_path / "results")


# -- rates --------------------------------------------------------------------------------------------

def test_an_lm_step_reads_in_tokens_per_second_first_on_every_reader(tmp_path):
    """A step counting samples and tokens: tokens/s is the rate, and the first of the rates a table shows."""
    (row,) = rows_of(tmp_path, lm())
    assert row.rate() == (2.048, "k tokens/s")
    assert row.rates() == [(2.048, "k tokens/s"), (0.016, "k samples/s")]


def test_a_kernel_reads_in_flops_before_bytes_and_a_step_without_work_in_steps_per_second(tmp_path):
    kernel, bare = rows_of(tmp_path, lm(work={"bytes": 4 * G, "flops": 2 * 10**12}), lm(work={}, step=0.25))
    assert kernel.rate() == (4.0, "TFLOP/s")
    assert kernel.rates() == [(4.0, "TFLOP/s"), (8.0, "GB/s")]
    assert bare.rate() == (4.0, "steps/s")
    assert bare.rates() == []


@pytest.mark.parametrize("outcome", [FAILED, DOES_NOT_FIT, SKIPPED])
def test_a_record_that_did_not_run_ok_has_no_rate_even_with_its_steps_timed(tmp_path, outcome):
    (row,) = rows_of(tmp_path, lm(outcome=outcome, reason="planted"))
    assert row.rate() is None
    assert row.rates() == []


# -- peaks and the card -------------------------------------------------------------------------------

def test_a_gpu_row_peaks_on_the_device_and_a_cpu_row_has_no_device_peak_or_card(tmp_path):
    cpu = snapshot(fake_devices(count=0))
    mem = {"device.used.gpu0": 6 * G, "device.used_before.gpu0": G, "host.max_rss": 3 * G}
    gpu, host = rows_of(tmp_path, lm(memory=mem), lm(memory=mem, env=cpu, device="cpu"))
    assert (gpu.peak(), gpu.peak_device, gpu.peak_host, gpu.gpu_memory) == (5 * G, 5 * G, 3 * G, 80 * G)
    assert (host.peak_device, host.peak_host, host.gpu_memory) == (None, 3 * G, None)


# -- versions -----------------------------------------------------------------------------------------

def test_the_versions_name_the_stack_in_the_libraries_order_and_leave_others_out():
    rec = lm(env=stack(H100, numpy="2.4.6", torch="2.13.0+cpu", tabulate="0.9"))
    assert libraries(rec) == {"torch": "2.13.0+cpu", "numpy": "2.4.6"}
    assert versions_of(rec) == "torch 2.13.0+cpu, numpy 2.4.6"


@pytest.mark.parametrize("version, numbers", [("2.13.0+cpu", (2, 13, 0)), ("14.2.0", (14, 2, 0)), ("7", (7,)),
                                              ("2.1rc1", (2, 1)), ("unknown", ()), ("", ())])
def test_a_release_is_the_leading_numbers_of_a_version(version, numbers):
    assert release(version) == numbers


def test_newer_versions_and_more_libraries_are_the_newer_stack():
    assert age({"torch": "2.9.0"}) < age({"torch": "2.10.0"})
    assert age({"torch": "2.10.0", "numpy": "2.4.6"}) < age({"torch": "2.11.0", "numpy": "1.26.0"})  # torch first
    assert age({"torch": "2.10.0"}) < age({"torch": "2.10.0", "numpy": "1.26.0"})


# -- where a row came from ----------------------------------------------------------------------------

def test_a_row_names_its_file_and_line_and_an_id_made_of_them(tmp_path):
    first, second = rows_of(tmp_path, lm(), lm(strategy="dp"))
    assert [(r.source, r.line) for r in (first, second)] == [(SOURCE, 1), (SOURCE, 2)]
    assert first.rid == "r-" + hashlib.sha1(f"{SOURCE}:1".encode()).hexdigest()[:10]
    assert second.rid == record_id(SOURCE, 2) != first.rid
    assert len(first.rid) == 12


# -- which rows a page shows ---------------------------------------------------------------------------

def test_the_latest_row_of_a_box_and_stack_is_kept_per_parameters(tmp_path):
    rows = rows_of(tmp_path, lm(created=2), lm(created=1, step=0.25), lm(created=1, env=H200),
                   lm(strategy="dp", created=1))
    kept = [(r.record.params["strategy"], r.machine, r.line) for r in latest(rows)]
    assert kept == [("dp", "nvidia-h100-80gb-hbm3-x1", 4), ("single", "nvidia-h100-80gb-hbm3-x1", 1),
                    ("single", "nvidia-h200-x1", 3)]


def test_a_machine_answers_with_its_newest_stack_whichever_ran_last(tmp_path):
    old, new = stack(H100, torch="2.9.0", numpy="2.4.6"), stack(H100, torch="2.10.0", numpy="1.26.0")
    rows = rows_of(tmp_path, lm(env=new, created=1), lm(env=old, created=2), lm(env=old, created=3, strategy="dp"),
                   lm(env=stack(H200, torch="2.9.0"), created=1))
    assert [r.line for r in newest_stack(rows)] == [1, 3, 4]


def test_of_equal_versions_a_stack_naming_more_libraries_is_the_newer_and_then_the_later_record(tmp_path):
    rows = rows_of(tmp_path, lm(env=stack(H100, torch="2.9.0", numpy="2.4.6"), created=1),
                   lm(env=stack(H100, torch="2.9.0"), created=2),
                   lm(env=stack(H100, torch="2.9.0"), created=1, strategy="dp"),
                   lm(env=stack(H100, torch="2.9.0"), created=2, strategy="dp"))
    assert [r.line for r in newest_stack(rows)] == [1, 4]


def test_the_pareto_front_keeps_points_no_other_beats_on_both_memory_and_rate():
    points = [(4, 10), (2, 10), (2, 5), (6, 12), (6, 11), (1, 1), (1, 1)]
    assert pareto(points) == [False, True, False, True, False, True, True]  # equal points both stay
    assert pareto([(3, 7)]) == [True]
    assert pareto([(5, 9), (2, 3)]) == [True, True]  # less memory, or more rate: neither beats the other


def test_the_cases_a_budget_decides_are_those_with_a_does_not_fit_record(tmp_path):
    rows = rows_of(tmp_path, lm(), lm(outcome=DOES_NOT_FIT, reason="out of memory", step=None),
                   dataclasses.replace(lm(outcome=DOES_NOT_FIT, reason="out of memory", step=None),
                                       case="parallel_resnet50", params={"device": "cuda", "batch": 8,
                                                                         "image_size": 224, "strategy": "dp",
                                                                         "gpus": 1}),
                   dataclasses.replace(lm(outcome=FAILED, reason="loss", step=None), case="tricks"))
    assert what_fits(rows) == ["parallel_lm", "parallel_resnet50"]
    assert what_fits(rows[:1]) == []


def test_a_try_table_reads_each_answer_from_the_newest_run_that_gave_it_and_no_older_answer_beside_it(tmp_path):
    from harness.report import tables

    def tried(run, technique, env=H100, target="tiny", budget="card"):
        return dataclasses.replace(lm(env=env), case="try", run_id=run, params={
            "target": target, "batch": 4, "seq_len": 0, "technique": technique, "budget": budget, "device": "cuda"})
    # a run files each way it weighed on the whole card, and under a card the one it chose
    old = [tried("20261201T000000-aaaaaa", "bf16_autocast", budget="l4-24gb"), tried("20261201T000000-aaaaaa", "fp32"),
           tried("20261201T000000-aaaaaa", "bf16_autocast")]
    new = [tried("20261206T000000-bbbbbb", "bf16_params", budget="l4-24gb"), tried("20261206T000000-bbbbbb", "fp32"),
           tried("20261206T000000-bbbbbb", "bf16_autocast"), tried("20261206T000000-bbbbbb", "bf16_params")]
    # a later run that weighed other ways: its answers stand beside the newer run's
    other_ways = [tried("20261207T000000-dddddd", "qlora", budget="l4-24gb"), tried("20261207T000000-dddddd", "fp32"),
                  tried("20261207T000000-dddddd", "qlora")]
    other = [tried("20261101T000000-cccccc", "fp32", env=H200), tried("20261101T000000-cccccc", "fp32", target="big")]
    rows = rows_of(tmp_path, *old, *new, *other, *other_ways, lm())
    kept = tables.newest_runs(rows, "try")
    assert sorted((r.record.run_id or "", r.record.params["budget"] if r.case == "try" else "",
                   r.record.params.get("technique", "")) for r in kept) == [
        ("", "", ""),  # another case's row is never touched
        ("20261101T000000-cccccc", "card", "fp32"), ("20261101T000000-cccccc", "card", "fp32"),  # other machine, model
        ("20261206T000000-bbbbbb", "card", "bf16_autocast"), ("20261206T000000-bbbbbb", "card", "bf16_params"),
        ("20261206T000000-bbbbbb", "card", "fp32"), ("20261206T000000-bbbbbb", "l4-24gb", "bf16_params"),
        ("20261207T000000-dddddd", "card", "fp32"), ("20261207T000000-dddddd", "card", "qlora"),
        ("20261207T000000-dddddd", "l4-24gb", "qlora")]
    assert tables.newest_runs(rows, "parallel_lm") == rows  # a case that names no answer_of keeps every row
