"""A side's rounds of one case read as one record (harness.report.rounds), field by field: the
numbers a compare's verdict is computed from."""
import dataclasses
import statistics

from gate_records import record
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report import rounds


def rnd(samples, *, created: float, warmup: int = 2, busy: dict | None = None, **fields) -> Record:
    rec = Record.from_dict(record(run=f"20990101T000000-abcdef-r{int(created)}", created=created, **fields))
    rec = dataclasses.replace(rec, timing=Timing.from_samples(samples, warmup))
    return dataclasses.replace(rec, gpu_busy=busy) if busy is not None else rec


def test_a_sides_time_is_the_median_of_its_rounds_medians_not_of_their_pooled_steps():
    fast, middle, slow = [1.0] * 3, [2.0] * 3, [10.0] * 7  # pooled, the slow round's many steps would decide
    t = rounds.timing([Timing.from_samples(s, w) for s, w in ((fast, 2), (middle, 5), (slow, 5))])
    assert t.median_s == 2.0 and statistics.median(fast + middle + slow) == 10.0
    assert t.samples_s == tuple(fast + middle + slow) and t.steps == 13 and (t.min_s, t.max_s) == (1.0, 10.0)
    assert t.warmup == 2  # the first round's


def test_rounds_without_raw_steps_keep_the_median_of_each_quartile_and_the_extremes_of_all():
    old = [Timing(median_s=m, q25_s=m - 0.1, q75_s=m + q, min_s=m - 0.5, max_s=m + x, steps=s, warmup=w)
           for m, q, x, s, w in ((1.0, 0.2, 1.0, 10, 3), (2.0, 0.4, 2.0, 20, 4), (3.0, 0.6, 3.0, 30, 5))]
    t = rounds.timing(old)
    assert dataclasses.astuple(t) == dataclasses.astuple(Timing(
        median_s=2.0, q25_s=1.9, q75_s=2.4, min_s=0.5, max_s=6.0, steps=60, warmup=3))


def test_one_round_stands_as_it_is_and_several_are_carried_by_the_newest():
    only = rnd([1.0, 1.1], created=1.0)
    assert rounds.one([only]) is only
    newest, middle, oldest = (rnd([m] * 4, created=c) for m, c in ((3.0, 30.0), (1.0, 20.0), (2.0, 10.0)))
    side = rounds.one([middle, newest, oldest])
    assert (side.run_id, side.created) == (newest.run_id, 30.0) and side.timing.median_s == 2.0


def test_a_round_that_did_not_end_ok_stands_for_its_side_even_with_a_timing():
    ok = [rnd([1.0] * 4, created=c) for c in (1.0, 3.0)]
    failed = dataclasses.replace(rnd([1.0] * 4, created=2.0), outcome="failed", reason="loss went nan")
    assert rounds.one([*ok, failed]) is failed


def test_where_no_round_read_a_busy_share_the_newest_rounds_reason_is_kept():
    said = [{"source": "none", "reason": f"round {i}"} for i in (1, 2, 3)]
    recs = [rnd([1.0] * 4, created=float(i), busy=b) for i, b in enumerate(said, 1)]
    assert rounds.one(recs[::-1]).gpu_busy == said[2]


def test_rounds_are_pooled_by_case_and_parameters_whatever_order_the_parameters_came_in():
    a = rnd([1.0] * 4, created=1.0, params={"probe": "x", "size": 1})
    a_again = rnd([3.0] * 4, created=2.0, params={"size": 1, "probe": "x"})
    b = rnd([5.0] * 4, created=3.0, params={"probe": "y", "size": 1})
    other_case = rnd([7.0] * 4, created=4.0, case="pageable", params={"probe": "x", "size": 1})
    sides = rounds.pooled([a, b, a_again, other_case])
    assert sorted(s.timing.median_s for s in sides.values()) == [2.0, 5.0, 7.0]
    assert ("ceilings", '{"probe": "x", "size": 1}') in sides
