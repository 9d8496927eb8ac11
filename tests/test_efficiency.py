"""Efficiency: a rate as a fraction of the ceiling that bounds it, from the same host (same run
first), another host of the kind only when marked; the host-bound mark; pageable copies' best size."""
import json
from dataclasses import replace
from pathlib import Path

from harness import cases
from harness.measure.records.record import Record
from harness.report import efficiency as eff
from harness.report import noise, summary, tables
from harness.report.model import load_rows

from conftest import FROZEN, render, table

H100 = FROZEN / "records/nvidia-h100-80gb-hbm3-x1/bfa680ee-20261124T003930-ab748b.jsonl"


def base() -> dict:
    """A real H100 record, as a template."""
    return next(d for d in map(json.loads, H100.read_text().splitlines())
                if d["case"] == "ceilings" and d["params"]["probe"] == "h2d_pinned")


def record(case, params, work, median_s, run_id="run-a", uuid="GPU-a", created=1.0, busy=None) -> Record:
    d = base()
    d.update(case=case, params=params, work=work, run_id=run_id, created=created, check={}, schema=2)
    d["timing"] = dict(d["timing"], median_s=median_s, q25_s=median_s, q75_s=median_s, min_s=median_s,
                       max_s=median_s, samples_s=[])
    d["environment"]["devices"]["gpus"][0]["uuid"] = uuid
    if busy is not None:
        d["gpu_busy"] = {"fraction": busy, "source": "cuda events"}
    return Record.from_dict(d)


def ceiling(probe, gbs, **kw) -> Record:
    return record("ceilings", {"probe": probe}, {"bytes": 10**9}, 1 / gbs, **kw)


FAULT = {"allocator": "managed_pool", "placement": "fault", "pattern": "stream", "fraction": 0.1}


def test_cases_name_the_ceiling_that_bounds_them():
    unified = cases.get("unified").bound_by
    assert unified(**FAULT) == "h2d_pinned"
    assert unified(**dict(FAULT, placement="prefetch")) == "h2d_pinned"
    assert unified(**dict(FAULT, placement="resident")) == "device_copy"
    assert unified(**dict(FAULT, placement="resident", pattern="matmul")) == "matmul_fp32"
    assert cases.get("out_of_core").bound_by(pattern="stream", fraction=1.5, budget="16GB") == "h2d_pinned"
    assert cases.get("unified_seed").bound_by(fraction=0.4) == "device_copy"
    assert cases.get("unified_seed").bound_by(fraction=1.5) == "h2d_pinned"


def test_the_fraction_is_of_the_same_hosts_ceiling_the_same_run_first():
    rec = record("unified", FAULT, {"bytes": 3 * 10**9, "migrated_bytes": 10**9}, 0.1)
    same_run = ceiling("h2d_pinned", 50, created=1)
    later_same_host = ceiling("h2d_pinned", 25, run_id="run-b", created=9)
    other_host = ceiling("h2d_pinned", 100, uuid="GPU-b", created=10)
    got = eff.efficiency(rec, eff.Ceilings([same_run, later_same_host, other_host]))
    assert got.unit == "migrated_bytes" and got.same_host and abs(got.fraction - 10 / 50) < 1e-9
    assert got.text() == "0.20 of pinned H2D"
    got = eff.efficiency(rec, eff.Ceilings([later_same_host, other_host]))  # the host's latest
    assert abs(got.fraction - 10 / 25) < 1e-9 and got.same_host
    older_same_host = ceiling("h2d_pinned", 40, run_id="run-c", created=5)
    for order in ([older_same_host, later_same_host], [later_same_host, older_same_host]):
        got = eff.efficiency(rec, eff.Ceilings([*order, other_host]))  # the latest of several, in any order
        assert abs(got.fraction - 10 / 25) < 1e-9 and got.ceiling is later_same_host
    older_kind = ceiling("h2d_pinned", 20, uuid="GPU-c", created=2)
    got = eff.efficiency(rec, eff.Ceilings([other_host, older_kind]))  # the kind's latest, too
    assert got.ceiling is other_host and not got.same_host
    got = eff.efficiency(rec, eff.Ceilings([other_host]))  # only another host of the kind: marked
    assert abs(got.fraction - 0.1) < 1e-9 and not got.same_host
    assert eff.efficiency(rec, eff.Ceilings([])) is None
    assert eff.efficiency(ceiling("h2d_pinned", 50), eff.Ceilings([same_run])) is None  # its own bound


def test_a_step_that_copies_back_is_also_read_against_the_same_hosts_duplex_ceiling():
    stream = {"pattern": "stream", "fraction": 0.1, "budget": "card"}
    rec = record("out_of_core", stream, {"bytes": 3 * 10**9, "h2d_bytes": 2 * 10**9, "d2h_bytes": 10**9}, 0.05)
    duplex = record("ceilings", {"probe": "duplex_pinned"},
                    {"bytes": 3 * 10**9, "h2d_bytes": 2 * 10**9, "d2h_bytes": 10**9}, 2 / 45)
    got = eff.efficiency(rec, eff.Ceilings([ceiling("h2d_pinned", 50), duplex]))
    assert abs(got.fraction - 40 / 50) < 1e-9 and abs(got.both_ways - 40 / 45) < 1e-9
    assert got.text() == "0.80 of pinned H2D, 0.89 beside D2H"
    other_hosts = record("ceilings", {"probe": "duplex_pinned"}, duplex.work, 2 / 45, uuid="GPU-b")
    assert eff.efficiency(rec, eff.Ceilings([ceiling("h2d_pinned", 50), other_hosts])).both_ways is None
    one_way = record("out_of_core", dict(stream, pattern="reduce"), {"bytes": 10**9, "h2d_bytes": 10**9,
                                                                     "d2h_bytes": 0}, 0.025)
    got = eff.efficiency(one_way, eff.Ceilings([ceiling("h2d_pinned", 50), duplex]))
    assert got.both_ways is None and got.text() == "0.80 of pinned H2D"


def test_a_hostile_record_has_no_efficiency_and_no_error():
    nothing = record("unified", FAULT, {"migrated_bytes": 0}, 0.1)
    odd = record("unified", dict(FAULT, fraction="../../x"), {"migrated_bytes": 10**9}, 0.1)
    unknown = record("no_such_case", FAULT, {"migrated_bytes": 10**9}, 0.1)
    boundless = record("unified", FAULT, {"migrated_bytes": 1e300}, 1e-300)  # a rate that overflows
    found = eff.Ceilings([ceiling("h2d_pinned", 50)])
    assert all(eff.efficiency(r, found) is None for r in (nothing, odd, unknown, boundless))


def test_host_bound_is_under_80_percent_busy():
    assert eff.host_bound(record("unified", FAULT, {"bytes": 1}, 0.1, busy=0.43)) == 0.43
    assert eff.host_bound(record("unified", FAULT, {"bytes": 1}, 0.1, busy=0.95)) is None
    assert eff.host_bound(record("unified", FAULT, {"bytes": 1}, 0.1)) is None  # older records say nothing


def test_a_step_over_several_gpus_read_on_the_first_alone_is_not_called_host_bound():
    mp = {"strategy": "naive_mp", "gpus": 2, "image_size": 1024}
    first_only = replace(record("parallel_resnet50", mp, {"samples": 10}, 0.1),
                         gpu_busy={"fraction": 0.43, "source": "nvml"})
    each = replace(first_only, gpu_busy={"fraction": 0.6, "source": "nvml", "gpus": [0.3, 0.3]})
    assert eff.host_bound(first_only) is None and eff.host_bound(each) == 0.6
    one = replace(first_only, params=dict(mp, strategy="single", gpus=1))
    assert eff.host_bound(one) == 0.43  # one GPU: its share is the step's


def planted(tmp_path, recs) -> Path:
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    return tmp_path / "results"


def test_tables_show_efficiency_beside_the_rate_and_mark_host_bound_steps(tmp_path):
    recs = [record("unified", FAULT, {"bytes": 3 * 10**9, "migrated_bytes": 10**9}, 0.1, busy=0.43),
            ceiling("h2d_pinned", 50)]
    rows = load_rows(planted(tmp_path, recs))
    text = table(rows, "unified", ["placement"], "machine", ["rate"])
    assert "| fault | 30.0 GB/s (migrated 0.20 of pinned H2D) †43% |" in text
    assert "† host-bound" in text
    eff_only, _ = render(rows, "unified", ["placement"], "machine", ["rate", "eff"])
    assert "| fault | 30.0 GB/s, migrated 0.20 of pinned H2D †43% |" in eff_only
    assert "10.0 GB/s migrated (0.20 of pinned H2D) † GPU busy 43%" in summary.table(recs)


def test_a_share_of_a_rate_counted_in_no_primary_unit_names_its_unit(tmp_path):
    recs = [record("unified", FAULT, {"migrated_bytes": 10**9}, 0.1), ceiling("h2d_pinned", 50)]  # no "bytes"
    text = table(load_rows(planted(tmp_path, recs)), "unified", ["placement"], "machine", ["eff"])
    assert "| fault | migrated 0.20 of pinned H2D |" in text


def test_a_schema_1_peak_beside_a_step_peak_is_marked(tmp_path):
    new = record("unified", FAULT, {"bytes": 10**9}, 0.1)
    d = new.to_dict()
    d.update(params=dict(FAULT, placement="prefetch"), memory={"allocator.gpu0.max_allocated": 10**9})
    d.pop("schema")
    old = Record.from_dict(d)
    text = table(load_rows(planted(tmp_path, [dict_record(new, memory={"allocator.gpu0.max_allocated": 10**9}),
                                                     old])), "unified", ["placement"], "machine", ["peak"])
    assert "| prefetch | 1.00 GB‡ |" in text and "| fault | 1.00 GB |" in text and tables.NOTES["‡"] in text


def dict_record(rec: Record, **changes) -> Record:
    d = rec.to_dict()
    d.update(changes)
    return Record.from_dict(d)


def test_the_pageable_ceiling_is_the_best_size_of_the_sweep():
    sweep = [record("pageable", {"direction": "h2d", "size_mib": s}, {"bytes": 10**9}, 1 / r)
             for s, r in ((64, 8.0), (512, 14.0), (2048, 11.0))]
    (best,) = eff.best_pageable(sweep).values()
    assert best.params["size_mib"] == 512
    assert eff.best_pageable([]) == {}


FITS = {"device": "cuda", "workload": "lm", "technique": "fp32", "budget": "card", "over": "seq_len",
        "vocab": 32000, "width": 1024, "depth": 12, "seq_len": 1024}


def test_a_search_whose_gpu_work_ran_in_other_processes_is_never_marked_host_bound(tmp_path):
    # Records filed before the search stopped reading a busy share hold the waiting process's.
    search = record("fits", FITS, {}, 74.3, busy=0.002)
    assert eff.host_bound(search) is None
    assert noise.step_class(search) == "host-bound"  # its time is processes starting, on any host
    search = dict_record(search, check={"max_seq_len": 65536, "probes": 4})
    text = table(load_rows(planted(tmp_path, [search])), "fits", ["technique"], "budget", ["check:max_seq_len"])
    assert "| fp32 | ≥ 65,536 |" in text and "†" not in text  # filed before search_limit: it searched to 2**16


def test_an_answer_below_the_search_limit_is_exact_and_one_at_it_a_lower_bound(tmp_path):
    def answer(n, limit):
        rec = dict_record(record("fits", FITS, {}, 1.0), check={"max_seq_len": n, "search_limit": limit,
                                                                "failed_below": []})  # as today's search files it
        rows = load_rows(planted(tmp_path / f"{n}-{limit}", [rec]))
        return table(rows, "fits", ["technique"], "budget", ["check:max_seq_len"]).splitlines()[2]
    assert answer(65536, 2**20) == "| fp32 | 65,536 |"
    assert answer(2**20, 2**20) == "| fp32 | ≥ 1,048,576 |"


def test_a_failed_loss_check_says_how_far_the_curve_left_its_reference(tmp_path):
    params = {"workload": "lm", "technique": "fp32", "micro_batch": 2}
    failed = dict_record(record("tricks", params, {}, 1.0), outcome="failed", timing=None, reason="loss off",
                         check={"deviation": 0.0151, "tolerance": 0.002, "reference_spread": 0.0002,
                                "reference": "fp32 with checkpointing"})
    text = table(load_rows(planted(tmp_path, [failed])), "tricks", ["micro_batch"], "machine", ["step"])
    assert "| 2 | failed (loss gap 0.015 from fp32 with checkpointing, 0.0022 allowed) |" in text


def test_each_probe_reads_its_own_units_first():
    assert eff.units_for("h2d_pinned") == ("h2d_bytes", "migrated_bytes", "bytes")
    assert eff.units_for("matmul_bf16") == eff.units_for("cpu_matmul_fp32") == ("flops",)
    assert eff.units_for("device_copy") == eff.units_for("p2p_copy") == ("bytes",)


def test_a_probe_without_a_label_is_named_as_it_is():
    e = eff.Efficiency(0.5, "new_probe", "bytes", ceiling("new_probe", 1), True)
    assert e.text() == "0.50 of new_probe"


def test_a_rate_is_a_finite_positive_number_or_none():
    slow = record("unified", FAULT, {"bytes": 1}, 4.0)
    assert eff.rate(slow, "bytes") == 0.25  # under one: still a rate
    assert eff.rate(slow, None) is None and eff.rate(slow, "flops") is None
    assert eff.rate(record("unified", FAULT, {"bytes": 0}, 1.0), "bytes") is None
    assert eff.rate(record("unified", FAULT, {"bytes": 1e300}, 1e-300), "bytes") is None  # overflows to inf


def test_an_idle_gpu_is_host_bound_and_the_bound_itself_is_not():
    assert eff.host_bound(record("unified", FAULT, {"bytes": 1}, 0.1, busy=0)) == 0.0
    assert eff.host_bound(record("unified", FAULT, {"bytes": 1}, 0.1, busy=eff.BUSY_BOUND)) is None
    no_gpus_param = replace(record("unified", FAULT, {"bytes": 1}, 0.1), gpu_busy={"fraction": 0.5, "source": "nvml"})
    assert eff.host_bound(no_gpus_param) == 0.5  # one GPU unless the parameters say more


def test_only_ok_ceiling_records_with_a_rate_are_ceilings():
    ok = ceiling("h2d_pinned", 50)
    failed = dict_record(ceiling("h2d_pinned", 90, created=5), outcome="failed", reason="boom")
    not_a_ceiling = record("unified", dict(FAULT, probe="h2d_pinned"), {"bytes": 10**9}, 0.01)
    found = eff.Ceilings([ok, failed, not_a_ceiling])
    assert found.by_probe == {"h2d_pinned": [ok]}
    rec = record("unified", FAULT, {"bytes": 3 * 10**9, "migrated_bytes": 10**9}, 0.1)
    assert eff.efficiency(rec, found).ceiling is ok


def test_the_pageable_ceiling_is_kept_per_machine_kind_and_direction():
    def pageable(direction, size, gbs, **changes):
        return dict_record(record("pageable", {"direction": direction, "size_mib": size}, {"bytes": 10**9}, 1 / gbs),
                           **changes)
    first, tie = pageable("h2d", 64, 14.0), pageable("h2d", 512, 14.0)
    d2h = pageable("d2h", 64, 9.0)
    failed = pageable("h2d", 2048, 99.0, outcome="failed", reason="boom")
    other_case = record("unified", FAULT, {"bytes": 10**9}, 1 / 99)
    best = eff.best_pageable([first, other_case, failed, tie, d2h])
    assert sorted(direction for _, direction in best) == ["d2h", "h2d"]
    assert {d: r for (_, d), r in best.items()} == {"h2d": first, "d2h": d2h}  # a tie keeps the first


def test_only_a_step_counted_in_h2d_bytes_that_copies_back_is_read_beside_d2h():
    duplex = record("ceilings", {"probe": "duplex_pinned"},
                    {"bytes": 3 * 10**9, "h2d_bytes": 2 * 10**9, "d2h_bytes": 10**9}, 2 / 45)
    migrated = record("unified", FAULT, {"bytes": 3 * 10**9, "migrated_bytes": 10**9, "d2h_bytes": 10**9}, 0.1)
    got = eff.efficiency(migrated, eff.Ceilings([ceiling("h2d_pinned", 50), duplex]))
    assert got.unit == "migrated_bytes" and got.both_ways is None  # faults, not copies: no duplex link to share
    stream = {"pattern": "stream", "fraction": 0.1, "budget": "card"}
    copies = record("out_of_core", stream, {"bytes": 3 * 10**9, "h2d_bytes": 2 * 10**9, "d2h_bytes": 10**9}, 0.05)
    bytes_only = record("ceilings", {"probe": "duplex_pinned"}, {"bytes": 3 * 10**9}, 2 / 45)
    got = eff.efficiency(copies, eff.Ceilings([ceiling("h2d_pinned", 50), bytes_only]))
    assert got.fraction == 0.8 and got.both_ways is None  # a duplex ceiling that split no direction out


def cpu_box(rec: Record) -> Record:
    """``rec`` as from a box with no GPU that kept no host id: nothing names its host."""
    d = rec.to_dict()
    d["environment"].update(cpu="AMD EPYC 7B13", host={})
    d["environment"]["devices"]["gpus"] = []
    return Record.from_dict(d)


def test_records_that_name_no_host_are_never_the_same_host():
    rec, top = cpu_box(record("unified", FAULT, {"migrated_bytes": 10**9}, 0.1)), cpu_box(ceiling("h2d_pinned", 50))
    got = eff.efficiency(rec, eff.Ceilings([top]))
    assert got.ceiling == top and not got.same_host  # found by kind, and marked so


def test_a_box_without_a_gpu_is_kept_under_its_cpu():
    found = eff.Ceilings([cpu_box(ceiling("host_copy", 20))])
    assert list(found.by_kind) == [("host_copy", "cpu-amd-epyc-7b13")]


def test_a_case_whose_gpu_work_runs_elsewhere_is_never_host_bound_even_with_work():
    assert eff.host_bound(record("fits", FITS, {"bytes": 10**9}, 74.3, busy=0.002)) is None
    assert eff.host_bound(record("unified", FAULT, {"bytes": 10**9}, 74.3, busy=0.002)) == 0.002
