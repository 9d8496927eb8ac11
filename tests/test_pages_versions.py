"""The index's "Across library versions": a step-time ratio reads as a version effect only past the
case's noise floor, the within-host floor for two records of one host and the across-host floor
for two hosts; each line names only the libraries that differ."""
import copy
import json
import re

import pytest

from harness.measure.records.record import Record
from harness.report import noise
from harness.report import model
from harness.report.pages import build, versions
from harness.report.pages.versions import verdict
from test_pages import RESULTS

TEMPLATE = RESULTS / "records/nvidia-h100-80gb-hbm3-x1/bfa680ee-20261124T003930-ab748b.jsonl"
OLD = {"torch": "2.11.0", "numpy": "2.5.2", "cupy-cuda13x": "13.6.0"}
NEW = {**OLD, "cupy-cuda13x": "14.2.0"}
SAME = "within same-host noise"
DIFFER = "within cross-host noise (hosts differ)"


def record(libs: dict, host: str, median: float, created: float = 0.0) -> dict:
    """The template's device-copy ceiling, GPU-bound, with these library versions, host and median step."""
    rec = copy.deepcopy(next(d for d in map(json.loads, TEMPLATE.read_text().splitlines())
                             if d["case"] == "ceilings" and d["outcome"] == "ok"))
    rec["environment"]["libraries"] = dict(libs)
    rec["environment"]["host"] = {"id": host}
    rec["gpu_busy"] = {"fraction": 0.97}
    rec["created"] = 1795480000.0 + created
    scale = median / rec["timing"]["median_s"]
    rec["timing"] = {k: v * scale if k.endswith("_s") else v for k, v in rec["timing"].items()}
    return rec


def rows_of(recs: list[dict]) -> list[model.Row]:
    return [model.Row(f"r-{i:010x}", Record.from_dict(d), "results/records/x.jsonl", i + 1)
            for i, d in enumerate(recs)]


def lines(recs: list[dict]) -> list[dict]:
    rows = rows_of(recs)
    return versions.comparisons(rows, versions.learned(rows))


# -- the rule --------------------------------------------------------------------------------------

def test_past_the_floor_is_a_version_effect_and_within_it_is_noise_of_the_hosts_kind():
    assert verdict(1.5, 0.03, True) == "version effect: 50% slower"
    assert verdict(1.02, 0.03, True) == SAME
    assert verdict(1.2, 0.25, False) == DIFFER
    assert verdict(1.4, 0.25, False) == "version effect: 40% slower"
    assert verdict(1.2, 0.25, None) == "within cross-host noise (host not recorded)"
    assert verdict(float("nan"), 0.05, True) == "no ratio"


def test_faster_and_slower_are_equally_far_from_noise_in_log():
    # 0.78 is 22% below 1 (under a 25% floor), yet 1 / 0.78 = 1.28 is past it: as the gate reads a speed-up.
    assert verdict(0.78, 0.25, False) == "version effect: 22% faster"
    assert verdict(1 / 1.2, 0.25, False) == DIFFER


# -- the table, from records -----------------------------------------------------------------------

def test_one_host_and_a_big_ratio_is_a_version_effect_possible_until_a_repeat_learns_the_floor():
    (line,) = lines([record(OLD, "aaaaaaaaaaaa", 0.010), record(NEW, "aaaaaaaaaaaa", 0.015)])
    assert line["verdict"] == "possible version effect: 50% slower (one run each: repeat to confirm)"
    assert line["effect"] and not line["floor"].learned
    repeated = lines([record(OLD, "aaaaaaaaaaaa", 0.010), record(OLD, "aaaaaaaaaaaa", 0.0100, 1),
                      record(NEW, "aaaaaaaaaaaa", 0.015, 2)])
    assert repeated[0]["verdict"] == "version effect: 50% slower" and repeated[0]["floor"].learned
    assert line["host"] == "same aaaaaaaa" and line["ratio"] == pytest.approx(1.5)


def test_a_ratio_that_one_host_calls_an_effect_is_noise_across_two_hosts():
    # No host ran it twice: GPU-bound defaults, 3% within one host and 5% across hosts.
    same = lines([record(OLD, "aaaaaaaaaaaa", 0.0100), record(NEW, "aaaaaaaaaaaa", 0.0104)])
    two = lines([record(OLD, "aaaaaaaaaaaa", 0.0100), record(NEW, "bbbbbbbbbbbb", 0.0104)])
    assert same[0]["verdict"].startswith("possible version effect: 4% slower")
    assert two[0]["verdict"] == DIFFER and not two[0]["effect"]
    assert two[0]["host"] == "differs aaaaaaaa → bbbbbbbb"


def test_the_cross_host_floor_is_learned_from_the_records_and_a_ratio_past_it_is_an_effect():
    # Three hosts of the old versions spread 30%: the learned floor is far above 5%.
    hosts = [record(OLD, h * 12, m, t) for t, (h, m) in enumerate((("a", 0.010), ("b", 0.013), ("c", 0.010)))]
    (within,) = lines([*hosts, record(NEW, "dddddddddddd", 0.0125)])
    assert within["floor"].learned and within["floor"].fraction > 0.3
    assert within["verdict"] == DIFFER
    (beyond,) = lines([*hosts, record(NEW, "dddddddddddd", 0.030)])
    assert beyond["verdict"] == "version effect: 200% slower"


def test_a_pair_of_one_host_is_preferred_to_the_latest_of_each():
    base_here, base_newer = record(OLD, "aaaaaaaaaaaa", 0.010, 1), record(OLD, "cccccccccccc", 0.020, 5)
    (line,) = lines([base_here, base_newer, record(NEW, "aaaaaaaaaaaa", 0.010, 3)])
    assert line["host"] == "same aaaaaaaa" and line["ratio"] == pytest.approx(1.0) and line["verdict"] == SAME


def test_the_baseline_is_the_oldest_versions_whatever_the_order_and_only_what_differs_is_named():
    (line,) = lines([record(NEW, "aaaaaaaaaaaa", 0.015), record(OLD, "aaaaaaaaaaaa", 0.010)])
    assert line["differs"] == "cupy-cuda13x 13.6.0 → 14.2.0"
    assert line["base"].record.environment.libraries == OLD and line["ratio"] == pytest.approx(1.5)


def test_each_older_stack_is_read_against_the_newest_so_a_line_names_the_one_library_it_changed():
    numpy_20 = {**NEW, "numpy": "2.0.2"}
    got = lines([record(numpy_20, "aaaaaaaaaaaa", 0.012), record(OLD, "aaaaaaaaaaaa", 0.011),
                 record(NEW, "aaaaaaaaaaaa", 0.010)])
    assert sorted(line["differs"] for line in got) == ["cupy-cuda13x 13.6.0 → 14.2.0", "numpy 2.0.2 → 2.5.2"]
    assert all(line["new"].record.environment.libraries == NEW for line in got)
    assert sorted(line["ratio"] for line in got) == pytest.approx([0.010 / 0.012, 0.010 / 0.011])


def test_what_differs_names_a_library_one_side_lacks_and_orders_as_the_pages_do():
    assert versions.what_differs({"numpy": "1.26.4"}, {"torch": "2.13.0", "numpy": "2.4.6"}) == \
        "torch none → 2.13.0; numpy 1.26.4 → 2.4.6"
    assert model.age({"torch": "2.13.0+cpu"}) > model.age({"torch": "2.4.1"})  # numbers, not text


def test_floors_keep_each_set_of_versions_apart():
    # One host ran the old versions twice, alike, and the new once, 20% slower: that 20% is what
    # is under test, not noise; pooled, it would have raised the within-host floor past itself.
    recs = [record(OLD, "aaaaaaaaaaaa", 0.0100, 2), record(OLD, "aaaaaaaaaaaa", 0.0100, 1),
            record(NEW, "aaaaaaaaaaaa", 0.012, 3)]
    rows = rows_of(recs)
    key = noise.key_of(rows[0].record)
    apart = versions.learned(rows).within(key, "GPU-bound")
    pooled = noise.Floors([r.record for r in rows]).within(key, "GPU-bound")
    assert apart.fraction < 0.05 < 0.2 < pooled.fraction
    assert lines(recs)[0]["verdict"] == "version effect: 20% slower"


def test_the_index_tables_each_pair_with_what_differs_its_hosts_and_verdict(tmp_path):
    folder = tmp_path / "results" / "records" / "box"
    folder.mkdir(parents=True)
    recs = [record(OLD, "aaaaaaaaaaaa", 0.010), record(NEW, "aaaaaaaaaaaa", 0.015)]
    (folder / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert build.main(results=str(tmp_path / "results"), out=str(tmp_path / "pages")) == 0
    html = (tmp_path / "pages" / "index.html").read_text()
    body = re.search(r'id="version-table".*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    (row,) = re.findall(r"<tr .*?</tr>", body, re.S)
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    assert cells[3] == "cupy-cuda13x 13.6.0 → 14.2.0" and "torch" not in cells[3]
    assert cells[4] == "same aaaaaaaa" and cells[5].startswith("1.500")
    assert cells[6].startswith("possible version effect: 50% slower")


def test_a_machines_answer_is_its_newest_stack_whatever_was_measured_last():
    numpy_20 = {**NEW, "numpy": "2.0.2"}
    rows = rows_of([record(NEW, "aaaaaaaaaaaa", 0.010, 1), record(OLD, "aaaaaaaaaaaa", 0.011, 2),
                    record(numpy_20, "aaaaaaaaaaaa", 0.012, 3)])
    (kept,) = model.newest_stack(rows)
    assert kept.record.environment.libraries == NEW


def test_the_seed_000_page_answers_once_per_gpu_from_the_committed_stacks():
    rows = model.latest(model.load_rows(RESULTS))
    seed = [r for r in rows if r.case == "seed000"]
    assert len({r.versions for r in seed if r.machine.startswith("nvidia-h100")}) == 3  # three stacks measured
    sections = build.family_view("seed000", seed, rows)["sections"]
    machines = [s["env"][0] for s in sections]
    assert machines and len(machines) == len(set(machines))
    assert all("numpy 2.5.2" in s["env"][1] and "cupy-cuda13x 14.2.0" in s["env"][1] for s in sections)


def test_a_step_over_the_host_link_is_read_against_host_bound_noise_however_busy_the_gpu():
    busy_copy = record(OLD, "aaaaaaaaaaaa", 0.010)
    assert noise.step_class(Record.from_dict(busy_copy)) == "GPU-bound"
    busy_copy["work"] = {"bytes": 3 * 10**9, "h2d_bytes": 2 * 10**9, "d2h_bytes": 10**9}
    assert noise.step_class(Record.from_dict(busy_copy)) == "host-bound"
    # so a 7% move between two stacks on one host is within that host's noise, not a version effect
    moved = dict(copy.deepcopy(busy_copy), environment={**busy_copy["environment"], "libraries": NEW})
    moved["timing"] = {k: v * 1.07 if k.endswith("_s") else v for k, v in busy_copy["timing"].items()}
    (line,) = lines([busy_copy, moved])
    assert line["verdict"] == SAME


def test_a_rise_of_exactly_the_floor_is_noise_and_no_finite_positive_ratio_is_no_ratio():
    assert verdict(1.25, 0.25, True) == SAME  # log 1.25 == log1p 0.25: the floor itself is not past it
    assert verdict(0.0, 0.05, True) == verdict(float("inf"), 0.05, True) == "no ratio"


def test_what_differs_names_a_library_the_new_side_lacks_and_one_set_against_itself_is_the_same():
    assert versions.what_differs({"torch": "2.4.1", "numpy": "1.26.4"}, {"numpy": "2.4.6"}) == \
        "torch 2.4.1 → none; numpy 1.26.4 → 2.4.6"
    assert versions.what_differs(OLD, dict(OLD)) == "same versions"


def test_a_release_with_more_digits_is_the_newer_side_not_the_earlier_text():
    (line,) = lines([record({**OLD, "numpy": "2.10.0"}, "aaaaaaaaaaaa", 0.015),
                     record({**OLD, "numpy": "2.9.0"}, "aaaaaaaaaaaa", 0.010)])
    assert line["differs"] == "numpy 2.9.0 → 2.10.0" and line["ratio"] == pytest.approx(1.5)


def test_only_ok_records_naming_a_library_are_stacks_to_compare():
    failed = dict(record(NEW, "aaaaaaaaaaaa", 0.015), outcome="skipped", reason="planted", timing=None)
    assert lines([record(OLD, "aaaaaaaaaaaa", 0.010), failed]) == []
    (line,) = lines([record({}, "aaaaaaaaaaaa", 0.020), record(OLD, "aaaaaaaaaaaa", 0.010),
                     record(NEW, "aaaaaaaaaaaa", 0.010)])
    assert line["differs"] == "cupy-cuda13x 13.6.0 → 14.2.0"


def test_the_latest_of_a_side_is_picked_on_the_shared_host_and_where_none_is_shared():
    base = record(OLD, "aaaaaaaaaaaa", 0.010)
    (shared,) = lines([base, record(NEW, "aaaaaaaaaaaa", 0.020, 1), record(NEW, "aaaaaaaaaaaa", 0.015, 2)])
    assert shared["host"] == "same aaaaaaaa" and shared["ratio"] == pytest.approx(1.5)
    (apart,) = lines([base, record(NEW, "bbbbbbbbbbbb", 0.020, 1), record(NEW, "cccccccccccc", 0.015, 2)])
    assert apart["host"] == "differs aaaaaaaa → cccccccc" and apart["ratio"] == pytest.approx(1.5)


def on_cpu(rec: dict, host: str | None) -> dict:
    """The record measured on a box without GPUs, naming ``host``, or no host (its GPUs' UUIDs
    cannot stand in for one)."""
    rec["environment"]["devices"]["gpus"] = []
    rec["environment"]["host"] = {"id": host} if host else {}
    return rec


def test_a_pair_where_one_record_names_no_host_is_read_as_host_not_recorded():
    (line,) = lines([on_cpu(record(OLD, "", 0.010), "aaaaaaaaaaaa"), on_cpu(record(NEW, "", 0.010), None)])
    assert line["host"] == "not recorded"
    assert line["verdict"] == "within cross-host noise (host not recorded)"


def test_two_records_that_name_no_host_are_not_a_shared_host():
    (line,) = lines([on_cpu(record(OLD, "", 0.010, 0), None), on_cpu(record(OLD, "", 0.010, 1), "aaaaaaaaaaaa"),
                     on_cpu(record(NEW, "", 0.010, 2), None), on_cpu(record(NEW, "", 0.010, 3), "bbbbbbbbbbbb")])
    assert line["host"] == "differs aaaaaaaa → bbbbbbbb"
