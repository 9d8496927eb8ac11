"""The table a run closes with and ``harness summary`` prints, cell by cell: the parameters, the
median and its spread, each rate with the fraction of the ceiling that bounds it (another host's
said so), the host-bound mark and its note, the machine and commit of each record, and the
filters' refusal."""
import dataclasses

import pytest

from harness.report import summary
from harness.report.efficiency import HOST_BOUND_NOTE

from harness.measure.records.record import Record

from test_efficiency import FAULT, ceiling, cpu_box, record

ON_A_CPU = cpu_box(ceiling("h2d_pinned", 50))  # a box with no GPU: named for its CPU
PARAMS = "allocator=managed_pool placement=fault pattern=stream fraction=0.1"


def migrated(**kw) -> Record:
    return record("unified", FAULT, {"bytes": 3 * 10**9, "migrated_bytes": 10**9}, 0.1, **kw)


def spread(rec: Record, q25: float, q75: float, median: float = 0.1) -> Record:
    return dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, q25_s=q25, q75_s=q75, median_s=median))


def test_a_row_gives_the_median_its_spread_and_every_rate():
    assert summary.row(spread(migrated(), 0.095, 0.105)) == [
        "unified", PARAMS, "ok", "100.0 ms", "10.0%", "30.0 GB/s, 10.0 GB/s migrated"]
    assert summary.row(spread(migrated(), 0.0, 0.0, median=0.0))[4] == ""  # no spread of nothing


def test_a_row_marks_a_host_bound_step_with_its_busy_share():
    rec = migrated(busy=0.43)
    assert summary.row(rec)[-1] == "30.0 GB/s, 10.0 GB/s migrated † GPU busy 43%"
    assert summary.row(migrated(busy=0.95))[-1] == "30.0 GB/s, 10.0 GB/s migrated"


def test_a_row_without_a_figure_gives_its_outcome_and_reason_and_no_timing():
    rec = dataclasses.replace(migrated(), outcome="skipped", reason="needs 2 GPU(s), this box has 1", timing=None)
    assert summary.row(rec) == ["unified", PARAMS, "skipped", "", "", "needs 2 GPU(s), this box has 1"]
    assert summary.row(dataclasses.replace(rec, reason=None)) == ["unified", PARAMS, "skipped", "", "", ""]


def test_a_rate_is_read_against_its_ceiling_another_hosts_said_so_and_none_without_ceilings():
    rec = migrated()
    assert summary.rate_text(rec, summary.Ceilings([ceiling("h2d_pinned", 50)])) == \
        "30.0 GB/s, 10.0 GB/s migrated (0.20 of pinned H2D)"
    assert summary.rate_text(rec, summary.Ceilings([ceiling("h2d_pinned", 50, uuid="GPU-b")])) == \
        "30.0 GB/s, 10.0 GB/s migrated (0.20 of pinned H2D, another host)"
    assert summary.rate_text(rec, summary.Ceilings([])) == "30.0 GB/s, 10.0 GB/s migrated"
    assert summary.rate_text(rec) == "30.0 GB/s, 10.0 GB/s migrated"


def test_where_names_the_machine_and_twelve_digits_of_the_commit():
    rec = migrated()
    assert summary.where(rec) == ["nvidia-h100-80gb-hbm3-x1", rec.commit[:12]] and len(rec.commit) > 12
    assert summary.where(dataclasses.replace(rec, commit=None))[1] == "-"


def test_a_cpu_records_machine_is_named_for_its_cpu():
    name = summary.machine_of(ON_A_CPU)
    assert name.startswith("cpu-") and "epyc" in name


def test_the_table_has_one_line_a_record_and_the_host_bound_note_only_under_a_host_bound_figure():
    pinned = ceiling("h2d_pinned", 50)
    lines = summary.table([migrated(), pinned]).splitlines()
    assert lines[0].split() == ["case", "parameters", "outcome", "median/step", "IQR", "rate", "or", "reason"]
    assert len(lines) == 3 and lines[1].startswith("unified ") and lines[1].endswith("(0.20 of pinned H2D)")
    assert lines[2].split()[:5] == ["ceilings", "probe=h2d_pinned", "ok", "20.0", "ms"]
    text = summary.table([migrated(busy=0.43), pinned])
    assert text.endswith("† GPU busy 43%\n" + lines[2] + "\n\n" + HOST_BOUND_NOTE)
    failed = dataclasses.replace(migrated(busy=0.43), outcome="failed", reason="boom", timing=None)
    assert HOST_BOUND_NOTE not in summary.table([failed, pinned])  # a mark only a figure shows


def test_provenance_puts_the_machine_and_commit_first_and_keeps_the_figures_aligned_right():
    rec, cpu = migrated(), dataclasses.replace(ON_A_CPU, commit=None)
    lines = summary.table([rec, ceiling("h2d_pinned", 50), cpu], provenance=True).splitlines()
    assert lines[0].split()[:3] == ["machine", "commit", "case"]
    width = max(len("nvidia-h100-80gb-hbm3-x1"), len(summary.machine_of(cpu)))
    assert lines[1].startswith(f"{'nvidia-h100-80gb-hbm3-x1':{width}}  {rec.commit[:12]}  unified ")
    assert lines[3].startswith(f"{summary.machine_of(cpu):{width}}  {'-':12}  ceilings ")  # names read left to right
    median_end = lines[0].index("median/step") + len("median/step")
    assert lines[1][:median_end].endswith("100.0 ms") and lines[2][:median_end].endswith("20.0 ms")


def test_chosen_keeps_a_machine_and_a_commit_prefix_and_refuses_naming_what_there_is():
    h100 = migrated()
    other = dataclasses.replace(migrated(), commit="abc" + "0" * 37)
    assert summary.chosen([h100, other], commit="ABC") == [other]
    assert summary.chosen([h100, other], machine="nvidia-h100-80gb-hbm3-x1") == [h100, other]
    assert summary.chosen([], machine="nvidia-b200-x1") == []
    cpu = ON_A_CPU
    with pytest.raises(ValueError) as e:
        summary.chosen([h100, other, cpu], machine="nvidia-b200-x1", commit="abc")
    assert str(e.value) == (f"no record of machine nvidia-b200-x1 and commit abc: the records' machines are "
                            f"{summary.machine_of(cpu)}, nvidia-h100-80gb-hbm3-x1; pass one of them, or a prefix "
                            f"of one of their commits")
