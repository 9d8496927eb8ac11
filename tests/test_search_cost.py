"""What the what-fits searches cost: each cell's latest search against the one before it."""
from gate_records import H100, H200, fits

from harness.measure.records.record import Record
from harness.report import search_cost
from harness.report.model import Row


def rows(*recs: dict) -> list[Row]:
    return [Row(f"r-{i}", Record.from_dict(rec), "results/records/x.jsonl", i + 1) for i, rec in enumerate(recs)]


def search(budget, answer, seconds, run, created, gpu=H100, commit="c" * 40, predicted=False):
    rec = fits(budget, answer, median=seconds, gpu=gpu, run=run, created=created, commit=commit)
    if predicted:
        rec["check"]["prediction"] = {"largest": answer, "law": "linear"}
    return rec


def test_the_latest_search_of_a_cell_is_set_against_the_one_before_it_from_another_run():
    found = search_cost.pairs(rows(
        search("24GB", 16, 40.0, "20990101T000000-aaaaaa", 1.0),  # the oldest: not compared
        search("24GB", 16, 30.0, "20990102T000000-bbbbbb", 2.0),
        search("24GB", 16, 12.0, "20990103T000000-cccccc", 3.0, predicted=True),
        search("40GB", 28, 50.0, "20990102T000000-bbbbbb", 2.0),
        search("40GB", 27, 20.0, "20990103T000000-cccccc", 3.0),
        search("80GB", 56, 60.0, "20990103T000000-cccccc", 3.0),  # searched once: no pair
        search("24GB", 21, 25.0, "20990102T000000-bbbbbb", 2.0, gpu=H200),
        search("24GB", 21, 15.0, "20990102T000000-bbbbbb", 2.5, gpu=H200),  # the same run again: no pair
    ))
    assert list(found) == ["H100 80GB HBM3"]
    pairs = sorted(found["H100 80GB HBM3"], key=lambda p: p.latest.record.params["budget"])
    assert [p.seconds() for p in pairs] == [(30.0, 12.0), (50.0, 20.0)]
    assert [p.same_answer() for p in pairs] == [True, False]
    assert [p.predicted() for p in pairs] == [True, False]


def test_the_section_sums_each_gpus_pairs_and_names_the_latest_commits():
    lines = search_cost.section(rows(
        search("24GB", 16, 30.0, "20990102T000000-bbbbbb", 2.0, commit="a" * 40),
        search("24GB", 16, 12.0, "20990103T000000-cccccc", 3.0, commit="b" * 40, predicted=True),
        search("40GB", 28, 50.0, "20990102T000000-bbbbbb", 2.0, commit="a" * 40),
        search("40GB", 27, 20.0, "20990103T000000-cccccc", 3.0, commit="b" * 40),
    ))
    [line] = [row for row in lines if row.startswith("| H100")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["H100 80GB HBM3", "2", "1 of 2", "80 s", "32 s", "0.40", "1 of 2", "bbbbbbbb"]


def test_without_a_cell_searched_twice_the_section_says_so():
    lines = search_cost.section(rows(search("24GB", 16, 30.0, "20990102T000000-bbbbbb", 2.0)))
    assert "No cell has been searched by two runs yet." in lines and not any(r.startswith("| ") for r in lines)


def alone(rec: dict, replay: int | None = None) -> dict:
    """``rec`` searched in a results folder with no earlier run; aimed by the replay at ``replay``."""
    rec["check"]["earlier_runs"] = [0, 0]
    if replay is not None:
        rec["check"]["prediction"] = {"by": "replay", "largest": replay}
    return rec


def test_a_search_from_nothing_filed_last_is_not_taken_for_a_search_again():
    again = search("24GB", 16, 12.0, "20990103T000000-cccccc", 3.0)
    again["check"]["earlier_runs"] = [1, 0]
    found = search_cost.pairs(rows(
        search("24GB", 16, 30.0, "20990102T000000-bbbbbb", 2.0), again,
        alone(search("24GB", 16, 90.0, "20990104T000000-dddddd", 4.0)),
        alone(search("24GB", 16, 9.0, "20990105T000000-eeeeee", 5.0), replay=16)))
    assert [p.seconds() for p in found["H100 80GB HBM3"]] == [(30.0, 12.0)]


def test_one_hosts_searches_from_nothing_are_set_against_its_searches_aimed_by_the_replay():
    found = search_cost.fresh_pairs(rows(
        alone(search("24GB", 16, 45.0, "20990104T000000-dddddd", 4.0)),
        alone(search("24GB", 16, 11.0, "20990105T000000-eeeeee", 5.0), replay=16),
        alone(search("40GB", 28, 50.0, "20990104T000000-dddddd", 4.0)),
        alone(search("40GB", 27, 10.0, "20990105T000000-eeeeee", 5.0), replay=27),
        alone(search("80GB", 56, 60.0, "20990104T000000-dddddd", 4.0)),  # never aimed: no pair
        alone(search("16GB", 11, 20.0, "20990104T000000-dddddd", 4.0)),
        alone(fits("16GB", 11, median=5.0, host="host-b", run="20990105T000000-eeeeee", created=5.0), replay=11),
        search("24GB", 16, 3.0, "20990106T000000-ffffff", 6.0, predicted=True),  # aimed by earlier runs: not alone
    ))
    pairs = sorted(found["H100 80GB HBM3"], key=lambda p: p.latest.record.params["budget"])
    assert [p.seconds() for p in pairs] == [(45.0, 11.0), (50.0, 10.0)]
    assert [p.same_answer() for p in pairs] == [True, False]


def test_the_section_sums_the_searches_from_nothing_and_aimed_even_where_none_was_searched_again():
    lines = search_cost.section(rows(
        alone(search("24GB", 16, 45.0, "20990104T000000-dddddd", 4.0, commit="a" * 40)),
        alone(search("24GB", 16, 11.0, "20990105T000000-eeeeee", 5.0, commit="b" * 40), replay=16),
        alone(search("40GB", 28, 55.0, "20990104T000000-dddddd", 4.0, commit="a" * 40)),
        alone(search("40GB", 28, 10.0, "20990105T000000-eeeeee", 5.0, commit="b" * 40), replay=28)))
    assert "No cell has been searched by two runs yet." in lines
    [line] = [row for row in lines if row.startswith("| H100")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["H100 80GB HBM3", "2", "2 of 2", "100 s", "21 s", "0.21", "aaaaaaaa, bbbbbbbb"]


def along_the_sequence(rec: dict) -> dict:
    """``rec`` searched one sequence's length: its answer filed under ``max_seq_len``."""
    rec["params"]["over"] = "seq_len"
    rec["check"]["max_seq_len"] = rec["check"].pop("max_batch") * 128
    return rec


def test_searches_along_the_sequence_are_costed_beside_those_over_the_batch():
    found = search_cost.fresh_pairs(rows(
        alone(search("24GB", 16, 45.0, "20990104T000000-dddddd", 4.0)),
        alone(search("24GB", 16, 11.0, "20990105T000000-eeeeee", 5.0), replay=16),
        along_the_sequence(alone(search("24GB", 120, 30.0, "20990104T000000-dddddd", 4.0))),
        along_the_sequence(alone(search("24GB", 121, 6.0, "20990105T000000-eeeeee", 5.0), replay=121 * 128)),
    ))
    pairs = sorted(found["H100 80GB HBM3"], key=lambda p: p.latest.record.params.get("over", "batch"))
    assert [p.seconds() for p in pairs] == [(45.0, 11.0), (30.0, 6.0)]
    assert [p.same_answer() for p in pairs] == [True, False]  # 15,360 tokens against 15,488


def ruled(rec: dict) -> dict:
    """``rec`` searched under today's rule: the two sizes after its answer seen not to fit."""
    rec["check"]["failed_below"] = [rec["check"]["max_batch"] + 1, rec["check"]["max_batch"] + 2]
    return rec


def test_the_answers_that_differ_are_told_apart_by_an_outdated_earlier_search_and_by_one_step():
    lines = search_cost.section(rows(
        ruled(search("16GB", 11, 30.0, "20990102T000000-bbbbbb", 2.0)),  # today's, one step under: differs
        ruled(search("16GB", 12, 12.0, "20990103T000000-cccccc", 3.0)),
        search("24GB", 16, 30.0, "20990102T000000-bbbbbb", 2.0),  # before the rule, answered the same
        ruled(search("24GB", 16, 12.0, "20990103T000000-cccccc", 3.0)),
        search("40GB", 25, 50.0, "20990102T000000-bbbbbb", 2.0),  # before the rule, three steps under
        ruled(search("40GB", 28, 20.0, "20990103T000000-cccccc", 3.0)),
        ruled(search("24GB", 21, 25.0, "20990102T000000-bbbbbb", 2.0, gpu=H200)),
        ruled(search("24GB", 21, 15.0, "20990103T000000-cccccc", 3.0, gpu=H200))))
    said = [line for line in lines if line.startswith("Where a cell's two searches answered otherwise")]
    assert said == ["Where a cell's two searches answered otherwise, H100 80GB HBM3: 2 cells; in 1 the earlier "
                    "search is one `harness todo` lists again (made before today's rule, cap or search limit); "
                    "in 1 the two answers are one search step apart."]


def test_a_step_along_the_sequence_is_its_search_unit():
    earlier = along_the_sequence(search("24GB", 120, 30.0, "20990102T000000-bbbbbb", 2.0))
    latest = along_the_sequence(search("24GB", 121, 6.0, "20990103T000000-cccccc", 3.0))
    latest["check"]["search_unit"] = 128  # 15,360 tokens against 15,488
    far = along_the_sequence(search("24GB", 122, 6.0, "20990103T000000-cccccc", 3.0))
    far["check"]["search_unit"] = 128
    [near] = search_cost.pairs(rows(earlier, latest))["H100 80GB HBM3"]
    [two] = search_cost.pairs(rows(earlier, far))["H100 80GB HBM3"]
    assert near.one_step_apart() and not two.one_step_apart()
    del latest["check"]["search_unit"]  # filed before records kept it: a sequence's step all the same
    [older] = search_cost.pairs(rows(earlier, latest))["H100 80GB HBM3"]
    assert older.one_step_apart()
