"""`harness table`'s cells and footnotes as a reader sees them: a "-" for a figure a record lacks, no
multiple where the base lacks the figure, what a failed case's steps cost, the rows no machine ran,
the notes under a table, and the messages that name the fix. On records planted here, never the
committed results."""
import json

import pytest

from harness.measure.instruments.environment import snapshot
from harness.measure.outcomes import FAILED, OK, SKIPPED
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report import tables
from harness.report.efficiency import HOST_BOUND_NOTE
from harness.report.model import load_rows

from conftest import fake_devices, plain

G = 10**9
H100 = snapshot(fake_devices(name="NVIDIA H100 80GB HBM3", total=81559 * 2**20))
H200 = snapshot(fake_devices(name="NVIDIA H200"))
SEED = {"device": "cuda", "workload": "resnet50_1024", "batch": 10, "budget": "16GB"}
PEAKS = {"allocator.gpu0.max_allocated": 4 * G, "device.used.gpu0": 5 * G}
GAP = {"deviation": 0.3, "tolerance": 0.01, "reference": "fp32"}  # a loss curve that left its reference's
LEFT = "failed (loss gap 0.3 from fp32, 0.01 allowed)"
DOWN = ["technique", "micro_batch"]


def record(technique="fp32", micro=10, outcome=OK, step=0.1, env=H100, memory=PEAKS, **fields) -> Record:
    """A seed 003 record; ``step=None`` for one that kept no timing."""
    timing = Timing(step, step, step, step, step, 3, 0) if step else None
    return Record(case="tricks", params={**SEED, "technique": technique, "micro_batch": micro}, outcome=outcome,
                  environment=env, timing=timing, memory=memory, **fields)


def rows_of(tmp_path, *records: Record) -> list:
    folder = tmp_path / "results" / "records" / "planted"
    folder.mkdir(parents=True)
    (folder / "planted.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return load_rows(tmp_path / "results")


def cells(rows, shows, versus=(), down=DOWN, across="machine") -> dict:
    """{row label: its cells}, as the command prints them."""
    lines = plain(tables.render(rows, "tricks", down, across, shows, {}, versus)[0]).splitlines()[2:]
    return {line.split(" | ")[0][2:]: line[:-2].split(" | ")[1:] for line in lines}


def test_a_figure_a_record_lacks_is_a_dash_without_a_mark(tmp_path):
    """No rate (no work counted), no loss, no peak: "-", and a schema 1 record's missing peak takes no ‡."""
    rows = rows_of(tmp_path, record(), record("tf32", memory={}, schema=1))
    assert cells(rows, ["rate", "peak", "loss"]) == {"fp32, 10": ["-, 4.00 / 5.00 GB, -"], "tf32, 10": ["-, -, -"]}
    assert tables.table(rows, "tricks", DOWN, "machine", ["peak"]).count("‡") == 0


def test_no_multiple_is_shown_where_the_base_lacks_the_figure(tmp_path):
    base = record(work={}, memory={"device.used.gpu0": 5 * G})  # no rate; the device's peak, not the allocator's
    rows = rows_of(tmp_path, base, record("tf32", work={"samples": 10}, memory={**PEAKS, "device.used.gpu0": 2 * G}))
    # no rate to read it against; the peak against the base's device peak, as the base kept no other
    assert cells(rows, ["rate", "peak"], (("technique", "fp32"),))["tf32, 10"] == \
        ["0.100 k samples/s, 4.00 / 2.00 GB (0.40x)"]


def test_a_failed_case_costs_the_peak_it_measured_with_either_memory(tmp_path):
    allocator_only = record(outcome=FAILED, step=None, memory={"allocator.gpu0.max_allocated": 4 * G}, check=GAP)
    device_only = record("tf32", outcome=FAILED, step=None, memory={"device.used.gpu0": 5 * G}, check=GAP)
    nothing = record("bf16_autocast", outcome=FAILED, step=None, memory={}, check=GAP)
    assert cells(rows_of(tmp_path, allocator_only, device_only, nothing), ["step", "peak"]) == {
        "fp32, 10": [f"{LEFT}: 4.00 GB"], "tf32, 10": [f"{LEFT}: 5.00 GB"], "bf16_autocast, 10": [LEFT]}


def test_a_failed_cases_cost_is_read_against_the_base_and_marked_as_any_figure_is(tmp_path):
    rows = rows_of(tmp_path, record(step=0.1), record(micro=5, outcome=FAILED, step=0.3, check=GAP, schema=1),
                   record("tf32", schema=1))
    got = cells(rows, ["step", "peak"], (("micro_batch", 10),))
    assert got["fp32, 5"] == [f"{LEFT}: 300.0 ms (3.00x), 4.00 / 5.00 GB‡ (1.00x)"]
    assert tables.NOTES[tables.WHOLE_CASE] in tables.render(rows, "tricks", DOWN, "machine", ["step", "peak"])[1]


def test_rows_no_machine_ran_are_named_under_the_table_each_with_its_reason(tmp_path):
    """And the table's footnotes follow it, each after a blank line."""
    rows = rows_of(tmp_path, record(work={"samples": 10}, gpu_busy={"fraction": 0.43, "source": "cuda events"}),
                   record("tf32", 5, SKIPPED, step=None, memory={}, reason="needs a newer card"),
                   record("bf16_autocast", 10, SKIPPED, step=None, memory={}))
    text = tables.table(rows, "tricks", DOWN, "machine", ["step"])
    table, *notes = text.split("\n\n")
    assert plain(table).splitlines()[2:] == ["| fp32, 10 | 100.0 ms †43% |"]
    assert notes == [HOST_BOUND_NOTE, "Left out, no machine ran them: tf32, 5 (skipped: needs a newer card); "
                                      "bf16_autocast, 10 (skipped: no reason kept)."]


def test_each_cell_of_a_grid_keeps_the_row_it_shows_and_none_where_nothing_ran(tmp_path):
    rows = rows_of(tmp_path, record(), record("tf32", env=H200))
    made = tables.grid(rows, "tricks", DOWN, "machine", ["step"], {}, (), False)
    assert made.lines == [("fp32, 10", [("100.0 ms", rows[0]), ("not run", None)]),
                          ("tf32, 10", [("not run", None), ("100.0 ms", rows[1])])]


def test_records_folded_into_one_cell_are_refused_naming_each_difference_and_the_fix(tmp_path):
    rows = rows_of(tmp_path, record(created=1.0), record(micro=5, env=H200, created=2.0))
    with pytest.raises(ValueError) as refused:
        tables.table(rows, "tricks", ["technique"], "budget", ["step"])
    assert str(refused.value) == ("one cell would hold records that differ in machine H100 80GB HBM3 and H200, "
                                  "micro_batch 10 and 5: add machine or micro_batch to --down, or pick one with "
                                  "--where machine=VALUE")


def test_a_parameter_one_record_lacks_is_a_difference_too(tmp_path):
    older = record(created=1.0)
    older.params.pop("micro_batch")  # filed before the case had it
    with pytest.raises(ValueError, match="differ in micro_batch None and 5: add micro_batch to --down"):
        tables.table(rows_of(tmp_path, older, record(micro=5, created=2.0)), "tricks", ["technique"], "budget",
                     ["step"])


def test_a_check_key_no_record_holds_is_refused_saying_they_hold_none(tmp_path):
    with pytest.raises(ValueError) as refused:
        tables.table(rows_of(tmp_path, record()), "tricks", DOWN, "machine", ["check:max_batch"])
    assert str(refused.value) == "no record of tricks here holds check key 'max_batch': its records hold no check keys"


def test_a_cell_asked_for_a_figure_it_does_not_know_names_those_it_does(tmp_path):
    (row,) = rows_of(tmp_path, record())
    with pytest.raises(ValueError) as refused:
        tables.cell(row, ["speed"])
    assert str(refused.value) == ("unknown figure 'speed': choose from step, rate, eff, peak, scaling, loss, compile "
                                  "or check:KEY")


def test_a_multiple_is_only_of_a_step_a_rate_or_a_peak(tmp_path):
    mine, base = rows_of(tmp_path, record(step=0.2), record("tf32", step=0.1))
    assert tables._ratio(mine, base, "step") == " (2.00x)"
    with pytest.raises(ValueError, match=r"^no multiple of 'loss': only of step, rate and peak$"):
        tables._ratio(mine, base, "loss")


def test_a_case_on_the_cpu_shows_the_host_peak_asv_tracked_and_its_multiple(tmp_path):
    from harness.measure.instruments.devices import Devices
    cpu = snapshot(Devices(reason="no GPU (test)"))
    recs = [record("fp32", env=cpu, memory={"host.max_rss": int(1.12 * G)}),
            record("checkpoint", env=cpu, memory={"host.max_rss": int(0.56 * G)}),
            record("tf32", env=cpu, memory={})]
    out = plain(tables.table(rows_of(tmp_path, *recs), "tricks", ["technique"], "machine", ["peak"], None,
                             (("technique", "fp32"),)))
    assert "| fp32 | 1.12 GB host |" in out and "| checkpoint | 560.0 MB host (0.50x) |" in out
    assert "| tf32 | - |" in out  # no peak of any kind: still "-"
