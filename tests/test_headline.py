"""The answer first: per GPU, each technique's rate and peak as a multiple of its family's baseline,
as the pages and the README's headline show them, with the host-bound and failed-check marks. On
records planted here, never the committed results."""
import dataclasses
import json


from harness.measure.instruments.devices import Devices
from harness.measure.instruments.environment import snapshot
from harness.measure.instruments.machine import machine_name
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK, SKIPPED
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report import families
from harness.report.pages import headline
from harness.units import gb
from harness.report.model import load_rows, versions_of

from conftest import fake_devices

G = 10**9
H100 = snapshot(fake_devices(name="NVIDIA H100 80GB HBM3", total=81559 * 2**20))
H200 = snapshot(fake_devices(name="NVIDIA H200"))
CPU = snapshot(Devices(reason="no NVIDIA GPU visible (test)"))
LM = {"device": "cuda", "workload": "lm", "batch": 64, "seq_len": 1024, "vocab": 32000, "width": 1024, "depth": 12}
WORKLOAD = "device=cuda workload=lm batch=64 seq_len=1024 vocab=32000 width=1024 depth=12"
TOKENS = {"tokens": 1000}  # 2.00 k tokens/s at a 0.5 s step: every multiple here is exact
FP32 = "technique=fp32 micro_batch=64 budget=card"
BF16 = "technique=bf16_autocast micro_batch=64 budget=card"
DEVICE = "peak device memory gain"  # the family's one memory figure, as its table and chart name it


def memory(allocated=None, device=None, host=None) -> dict:
    levels = {"allocator.gpu0.max_allocated": allocated, "device.used.gpu0": device, "host.max_rss": host}
    return {k: v for k, v in levels.items() if v is not None}


def trick(technique="fp32", micro=64, budget="card", outcome=OK, step=0.5, work=TOKENS, env=H100, busy=None,
          allocated=None, device=None, host=None, **params) -> Record:
    """A tricks record on the LM; ``step=None`` for one that kept no timing."""
    timing = Timing(step, step, step, step, step, 3, 0) if step else None
    return Record(case="tricks", params={**LM, **params, "technique": technique, "micro_batch": micro,
                                         "budget": budget},
                  outcome=outcome, environment=env, timing=timing, work=work,
                  memory=memory(allocated, device, host), gpu_busy=busy or {})


def parallel(strategy, gpus=1, outcome=OK, **params) -> Record:
    fixed = {"device": "cuda", "batch": 16, "image_size": 1024, "micro_batches": 1, "nodes": 1, "transport": "fast"}
    return Record(case="parallel_resnet50", params={**fixed, **params, "strategy": strategy, "gpus": gpus},
                  outcome=outcome, environment=H100, timing=Timing(0.5, 0.5, 0.5, 0.5, 0.5, 3, 0),
                  work={"samples": 16})


def rows_of(tmp_path, *records: Record) -> list:
    folder = tmp_path / "results" / "records" / "planted"
    folder.mkdir(parents=True)
    (folder / "planted.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return load_rows(tmp_path / "results")


def seen(line: dict) -> dict:
    """A line as a reader sees it: its figures, with its row and base named by their techniques."""
    base = line["base"]
    assert line["technique"] == headline.fmt_params(line["row"].technique)
    return {**{k: v for k, v in line.items() if k not in ("row", "base")},
            "base": base and headline.fmt_params(base.technique)}


def figures(technique, base, rate, rate_x, peak, peak_kind, peak_x, host_bound=None, failed=False) -> dict:
    return {"technique": technique, "base": base, "rate": rate, "rate_x": rate_x, "peak": peak,
            "peak_kind": peak_kind, "peak_x": peak_x, "host_bound": host_bound, "failed": failed}


def one_table(tmp_path, *records) -> dict:
    (table,) = headline.gpu_tables(rows_of(tmp_path, *records))
    return table


# -- the multiples -----------------------------------------------------------------------------------

def test_a_techniques_rate_and_device_peak_read_as_multiples_of_fp32_on_the_same_card(tmp_path):
    table = one_table(tmp_path, trick(allocated=4 * G, device=5 * G),
                      trick("bf16_autocast", step=0.25, allocated=2 * G, device=3 * G))
    assert table["env"] == ("nvidia-h100-80gb-hbm3-x1", versions_of(trick()))
    assert table["budget_lines"] == [] and [ln["workload"] for ln in table["lines"]] == [WORKLOAD] * 2
    assert [seen(ln) for ln in table["lines"]] == [
        {"workload": WORKLOAD, **figures(FP32, FP32, (2.0, "k tokens/s"), 1.0, 5 * G, DEVICE, 1.0)},
        {"workload": WORKLOAD, **figures(BF16, FP32, (4.0, "k tokens/s"), 2.0, 3 * G, DEVICE, 0.6)}]


def test_a_peak_is_read_on_the_device_on_both_sides_whether_or_not_either_reports_the_allocators(tmp_path):
    base, mine = rows_of(tmp_path, trick(device=5 * G), trick("bf16_autocast", allocated=2 * G, device=4 * G))
    assert seen(headline.line(mine, base)) == figures(BF16, FP32, (2.0, "k tokens/s"), 1.0, 4 * G, DEVICE, 0.8)
    assert seen(headline.line(base, mine)) == figures(FP32, BF16, (2.0, "k tokens/s"), 1.0, 5 * G, DEVICE, 1.25)


def test_peak_of_reads_the_familys_one_memory_figure_never_the_allocators_peak(tmp_path, monkeypatch):
    # the allocator's peak is the same under every allocator setting: what a setting changes is
    # what it reserves, which the device's figure holds (fragmentation's answer)
    both, device_only = rows_of(tmp_path, trick(allocated=2 * G, device=3 * G, host=7 * G), trick(device=5 * G))
    assert headline.peak_of(both) == (3 * G, DEVICE)
    assert headline.peak_of(device_only) == (5 * G, DEVICE)
    monkeypatch.setitem(families.FAMILIES, "tricks", dataclasses.replace(families.family("tricks"), memory="host"))
    assert headline.peak_of(both) == (7 * G, "peak host RSS")
    assert headline.peak_of(device_only) == (None, "peak host RSS")


def test_a_multiple_is_none_where_either_figure_is_missing_or_zero():
    assert headline.times(3.0, 2.0) == 1.5
    assert [headline.times(*pair) for pair in [(None, 2.0), (2.0, None), (0.0, 2.0), (2.0, 0.0)]] == [None] * 4


def test_a_rate_in_other_units_than_the_bases_has_no_multiple_but_its_peak_does(tmp_path):
    base, mine = rows_of(tmp_path, trick(work={}, device=4 * G), trick("bf16_autocast", device=3 * G))
    assert seen(headline.line(mine, base)) == figures(BF16, FP32, (2.0, "k tokens/s"), None, 3 * G, DEVICE, 0.75)
    assert seen(headline.line(base, mine)) == figures(FP32, BF16, (2.0, "steps/s"), None, 4 * G, DEVICE, 4 / 3)


def test_a_line_without_a_base_shows_its_figures_and_no_multiple(tmp_path):
    (mine,) = rows_of(tmp_path, trick("bf16_autocast", allocated=3 * G, device=4 * G))
    assert seen(headline.line(mine, None)) == figures(BF16, None, (2.0, "k tokens/s"), None, 4 * G, DEVICE, None)


def test_a_failed_check_is_marked_and_shows_neither_rate_nor_multiples(tmp_path):
    table = one_table(tmp_path, trick(device=4 * G),
                      trick("bf16_autocast", outcome=FAILED, device=2 * G, busy={"fraction": 0.5, "source": "nvml"}))
    assert seen(table["lines"][1]) == {"workload": WORKLOAD, **figures(BF16, FP32, None, None, 2 * G, DEVICE, None,
                                                                       failed=True)}


def test_a_host_bound_step_is_marked_with_its_busy_fraction_and_a_busy_one_is_not(tmp_path):
    table = one_table(tmp_path, trick(allocated=4 * G, busy={"fraction": 0.9, "source": "nvml"}),
                      trick("bf16_autocast", allocated=4 * G, busy={"fraction": 0.5, "source": "nvml"}))
    assert [ln["host_bound"] for ln in table["lines"]] == [None, 0.5]


# -- which rows, in which tables ---------------------------------------------------------------------

def test_skipped_rows_are_left_out_and_one_that_did_not_fit_stays_without_figures(tmp_path):
    table = one_table(tmp_path, trick(device=4 * G), trick("tf32", outcome=SKIPPED, step=None),
                      trick("bf16_autocast", outcome=DOES_NOT_FIT, step=None, device=80 * G))
    assert [seen(ln) for ln in table["lines"]] == [
        {"workload": WORKLOAD, **figures(FP32, FP32, (2.0, "k tokens/s"), 1.0, 4 * G, DEVICE, 1.0)},
        {"workload": WORKLOAD, **figures(BF16, FP32, None, None, 80 * G, DEVICE, None)}]


def test_a_gpu_whose_every_row_was_skipped_has_no_table_and_no_rows_make_none(tmp_path):
    assert headline.gpu_tables(rows_of(tmp_path, trick(outcome=SKIPPED, step=None))) == []
    assert headline.gpu_tables([]) == []


def test_runs_under_an_emulated_smaller_card_fold_beneath_the_whole_cards_lines(tmp_path):
    table = one_table(tmp_path, trick(device=4 * G), trick("bf16_autocast", budget="16GB", device=2 * G))
    assert [ln["technique"] for ln in table["lines"]] == [FP32]
    assert [seen(ln) for ln in table["budget_lines"]] == [
        {"workload": WORKLOAD, **figures("technique=bf16_autocast micro_batch=64 budget=16GB", FP32,
                                         (2.0, "k tokens/s"), 1.0, 2 * G, DEVICE, 0.5)}]


def test_a_case_without_a_budget_parameter_is_on_the_whole_card():
    lines = [{"row": row, "n": n} for n, row in enumerate(
        [_row(parallel("single")), _row(trick(budget="card")), _row(trick(budget="16GB"))])]
    assert headline.split_by_budget(lines) == {"lines": lines[:2], "budget_lines": lines[2:]}


def test_each_workload_reads_its_own_baseline_in_workload_order(tmp_path):
    table = one_table(tmp_path, trick(step=0.5, batch=64), trick("bf16_autocast", step=0.25, batch=64),
                      trick(step=0.25, batch=16), trick("bf16_autocast", step=0.125, batch=16))
    got = [(ln["workload"].split()[2], ln["technique"], ln["base"].record.params["batch"], ln["rate_x"])
           for ln in table["lines"]]
    assert got == [("batch=16", FP32, 16, 1.0), ("batch=16", BF16, 16, 2.0),
                   ("batch=64", FP32, 64, 1.0), ("batch=64", BF16, 64, 2.0)]


def test_a_technique_is_never_read_against_another_machines_baseline(tmp_path):
    h100, h200 = headline.gpu_tables(rows_of(tmp_path, trick(env=H200), trick("bf16_autocast", step=0.25)))
    assert h100["env"][0] == "nvidia-h100-80gb-hbm3-x1" and h200["env"][0] == "nvidia-h200-x1"
    assert [(ln["technique"], ln["base"], ln["rate_x"], ln["peak_x"])
            for ln in h100["lines"]] == [(BF16, None, None, None)]
    assert [(ln["technique"], ln["base"] is ln["row"], ln["rate_x"]) for ln in h200["lines"]] == [(FP32, True, 1.0)]


def test_gpus_open_the_page_with_the_one_that_measured_most_techniques_and_cpu_boxes_last(tmp_path):
    recs = [trick(t, env=CPU) for t in ("fp32", "tf32", "bf16_autocast")]  # three, on no GPU
    recs += [trick(env=H200), trick("tf32", env=H200), trick("tf32", env=H200, batch=16)]  # two: tf32 twice
    recs += [trick(), trick("tf32")]  # two
    a100 = snapshot(fake_devices(name="NVIDIA A100"))
    recs += [trick(env=a100), trick("tf32", env=a100, outcome=FAILED)]  # one: the failed check is none
    tables = headline.gpu_tables(rows_of(tmp_path, *recs))
    assert [t["env"][0] for t in tables] == ["nvidia-h100-80gb-hbm3-x1", "nvidia-h200-x1", "nvidia-a100-x1",
                                             machine_name(CPU.devices, CPU.cpu)]


def test_gpus_measuring_as_many_techniques_are_in_the_order_of_their_names(tmp_path):
    tables = headline.gpu_tables(rows_of(tmp_path, trick(env=H200), trick()))
    assert [t["env"][0] for t in tables] == ["nvidia-h100-80gb-hbm3-x1", "nvidia-h200-x1"]


# -- the baseline ------------------------------------------------------------------------------------

def test_a_baseline_row_holds_every_one_of_the_familys_baseline_values():
    pairs = families.family("tricks").baseline
    assert [headline.is_base(_row(r), pairs) for r in (trick(), trick("tf32"), trick(budget="16GB"))] == \
        [True, False, False]
    assert not headline.is_base(_row(trick()), ())  # a family without a baseline reads no multiples


def test_a_baseline_value_matches_the_records_value_written_as_text_or_as_a_number():
    assert headline.is_base(_row(parallel("single", gpus=1)), (("gpus", 1),))
    assert headline.is_base(_row(parallel("single", gpus=1)), (("gpus", "1"),))
    assert not headline.is_base(_row(parallel("single", gpus=2)), (("gpus", 1),))


def test_the_base_is_the_ok_baseline_sharing_most_of_the_rows_parameters():
    near, far = parallel("single", transport="fast", cut="x"), parallel("single", transport="slow", cut="y")
    mine = _row(parallel("ddp", gpus=2, transport="fast", cut="x"))
    for order in ([near, far], [far, near]):
        assert headline.base_for(mine, [_row(r) for r in order]).record is near
    assert headline.base_for(mine, [_row(far), _row(dataclasses.replace(near, outcome=FAILED))]).record is far
    assert headline.base_for(mine, []) is None


def _row(rec: Record):
    from harness.report.model import Row
    return Row("r-0", rec, "results/records/planted/planted.jsonl", 1)


# -- the answer first ---------------------------------------------------------------------------------

def test_the_readmes_workload_leads_then_the_workload_that_measured_the_most_ways(tmp_path):
    recs = [trick(t, batch=64) for t in ("fp32", "tf32", "bf16_autocast")]  # three ways
    recs += [trick(t, batch=8) for t in ("fp32", "tf32")]  # two
    recs += [trick(batch=16)]  # one, but the README's: workload=lm batch=16 seq_len=1024
    order = list(dict.fromkeys(ln["workload"].split()[2] for ln in one_table(tmp_path, *recs)["lines"]))
    assert order == ["batch=16", "batch=64", "batch=8"]


def test_a_gpus_answer_in_words_names_the_least_memory_and_the_fastest_way_of_its_leading_workload(tmp_path):
    table = one_table(tmp_path, trick(device=5 * G), trick("bf16_autocast", step=0.25, device=4 * G),
                      trick("checkpoint", step=1.0, device=2 * G), trick("tf32", outcome=FAILED, device=1 * G),
                      trick("fp32", batch=8, device=G // 2))
    assert headline.in_words(table) == (
        f"On nvidia-h100-80gb-hbm3-x1, {WORKLOAD}: the least {DEVICE} is "
        f"technique=checkpoint micro_batch=64 budget=card ({gb(2 * G)}, 0.40x the baseline); the fastest is "
        f"{BF16} (4.00 k tokens/s, 2.00x the baseline).")  # the failed check and the other workload say nothing
    assert headline.in_words({"env": ("h100", "t"), "lines": [], "budget_lines": []}) == ""


def test_allocator_settings_read_apart_by_what_they_hold_on_the_device_though_they_allocate_alike(tmp_path):
    def setting(allocator: str, device: int) -> Record:
        return dataclasses.replace(trick(allocated=10 * G, device=device), case="fragmentation",
                                   params={"device": "cuda", "workload": "lm", "allocator": allocator})
    table = one_table(tmp_path, setting("default", 40 * G), setting("expandable", 19 * G))
    assert [(ln["technique"], ln["peak"], ln["peak_kind"], ln["peak_x"]) for ln in table["lines"]] == [
        ("allocator=default draws=0 references=drop", 40 * G, DEVICE, 1.0),
        ("allocator=expandable draws=0 references=drop", 19 * G, DEVICE, 19 / 40)]  # parameters added since, filled
