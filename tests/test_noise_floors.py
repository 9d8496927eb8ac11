"""The learned noise floors, pinned to values computed here from their definition: the expected
range d2(n) of n standard normals in closed form, and the one-sided 99% quantile of the log
ratio of two runs, z * sqrt(2) * sigma, with sigma = log range / d2(n)."""
import math
from statistics import NormalDist

import pytest

from gate_records import record
from harness.measure.records.record import Record
from harness.report import noise

# The standard library's quantile, not scipy's: importing scipy.stats at collection costs every worker.
Z99 = NormalDist().inv_cdf(0.99)
# d2(2) = 2 / sqrt(pi) and d2(3) = 3 / sqrt(pi) exactly; d2(4) as control-chart tables give it.
D2 = {2: 2 / math.sqrt(math.pi), 3: 3 / math.sqrt(math.pi), 4: 2.058750746}


@pytest.mark.parametrize("n", sorted(D2))
def test_d2_is_the_expected_range_of_n_normals(n):
    assert noise.d2(n) == pytest.approx(D2[n], rel=1e-6)


def runs(*host_medians) -> list[Record]:
    """One record per (host, median) of one case on one machine kind."""
    return [Record.from_dict(record(median=m, host=h, created=float(i))) for i, (h, m) in enumerate(host_medians)]


def key() -> tuple:
    return noise.key_of(Record.from_dict(record()))


def test_the_floor_across_hosts_is_the_99th_quantile_of_two_hosts_log_ratio():
    floors = noise.Floors(runs(("a", 0.010), ("b", 0.011), ("c", 0.0121)))
    sigma = math.log(1.21) / D2[3]
    floor = floors.across(key(), "GPU-bound")
    assert floor.learned and floor.fraction == pytest.approx(math.expm1(Z99 * math.sqrt(2) * sigma), rel=1e-3)


def test_among_many_hosts_one_far_host_still_passes_the_floor_it_taught():
    # 29 hosts within 0.1% and one 4% slower: the range's sigma over 30 hosts puts the quantile near
    # 3.3%, under what that host's honest rerun would show, so the floor is the spread itself.
    near = [(f"h{i}", 0.010 * (1 + 0.001 * i / 28)) for i in range(29)]
    floor = noise.Floors(runs(*near, ("far", 0.0104))).across(key(), "GPU-bound")
    quantile = math.expm1(Z99 * math.sqrt(2) * math.log(1.04) / noise.d2(30))
    assert quantile < 0.035 and floor.fraction == pytest.approx(0.04) and floor.spread == pytest.approx(0.04)
    assert not floor.host_limited


def test_the_floor_within_a_host_reads_its_repeated_runs():
    floors = noise.Floors(runs(("a", 0.010), ("a", 0.0105), ("b", 0.013)))
    sigma = math.log(1.05) / D2[2]
    floor = floors.within(key(), "GPU-bound")
    assert floor.learned and floor.fraction == pytest.approx(math.expm1(Z99 * math.sqrt(2) * sigma), rel=1e-3)
    assert floors.floor(key(), "GPU-bound", same_host=True) == floor  # smaller than across the two hosts


def test_no_floor_is_below_the_least():
    floors = noise.Floors(runs(("a", 0.010), ("b", 0.0100001)))
    assert floors.across(key(), "GPU-bound").fraction == noise.MIN_FLOOR


# The least one-sided p of n against m steps is 1 / C(n + m, n): 1/252 at 5 a side, 1/924 at 6,
# 1/101 at 1 against 100, 1/5151 at 2 against 100.
@pytest.mark.parametrize("n, m, decides", [(5, 5, False), (6, 6, True), (1, 100, False), (2, 100, True),
                                            (0, 50, False)])
def test_a_test_can_decide_only_where_its_least_p_is_under_alpha(n, m, decides):
    assert noise.can_decide(n, m) is decides


def rec(**kw) -> Record:
    return Record.from_dict(record(**kw))


@pytest.mark.parametrize("fields, klass", [
    ({}, "GPU-bound"),  # busy 0.99
    ({"gpu_busy": {"fraction": 0.8, "source": "t"}}, "GPU-bound"),  # the bound itself is GPU-bound
    ({"gpu_busy": {"fraction": 0.79, "source": "t"}}, "host-bound"),
    ({"work": {"bytes": 1, "h2d_bytes": 1}}, "host-bound"),  # over the host's link, however busy
    ({"work": {"d2h_bytes": 1}}, "host-bound"),
    ({"work": {"migrated_bytes": 1}}, "host-bound"),
    ({"work": {"h2d_bytes": 0}}, "GPU-bound"),  # no bytes over the link
    ({"gpu_busy": {}}, "busy unknown"),
    ({"gpu_busy": {}, "params": {"device": "cpu"}}, "host-bound"),
    ({"gpu_busy": {}, "params": {"device": "cuda"}}, "busy unknown"),
])
def test_a_step_class_from_its_work_its_busy_fraction_or_where_it_ran(fields, klass):
    d = record()
    d.update(fields)
    assert noise.step_class(Record.from_dict(d)) == klass


@pytest.mark.parametrize("case, params, klass", [
    ("ceilings", {"probe": "device_copy"}, "GPU-bound"),
    ("ceilings", {"probe": "matmul_bf16"}, "GPU-bound"),
    ("ceilings", {"probe": "h2d_pinned"}, "host-bound"),  # the host's link, however busy the copy engines
    ("ceilings", {"probe": "d2h_pinned"}, "host-bound"),
    ("ceilings", {"probe": "host_copy"}, "host-bound"),
    ("pageable", {"direction": "h2d", "size_mib": 64}, "host-bound"),
    ("unified_seed", {"fraction": 0.4}, "host-bound"),  # its pages faulted in through the driver
    ("ceilings", {"probe": "no_such_probe"}, "GPU-bound"),  # undeclared: read from its busy share
    ("no_such_case", {}, "GPU-bound"),
])
def test_a_step_its_case_calls_paced_by_the_host_is_host_bound_however_busy_the_gpu(case, params, klass):
    assert noise.step_class(rec(case=case, params=params)) == klass  # every one of them 99% busy


def test_a_step_without_a_gpu_or_with_its_gpu_work_elsewhere_is_host_bound():
    assert noise.step_class(rec(gpu=None)) == "host-bound"
    probes = dict(record(case="fits", params={"model": "gpt2-tiny", "budget": "24GB"}),
                  gpu_busy={"fraction": 0.99, "source": "t"})
    assert noise.step_class(Record.from_dict(probes)) == "host-bound"


@pytest.mark.parametrize("a, b, klass", [
    ("GPU-bound", "GPU-bound", "GPU-bound"), ("GPU-bound", "host-bound", "host-bound"),
    ("busy unknown", "GPU-bound", "busy unknown"), ("busy unknown", "host-bound", "host-bound"),
])
def test_a_pair_is_read_as_its_noisier_record(monkeypatch, a, b, klass):
    first, second = rec(host="a"), rec(host="b")
    classes = {id(first): a, id(second): b}
    monkeypatch.setattr(noise, "step_class", lambda r: classes[id(r)])
    assert noise.pair_class(first, second) == noise.pair_class(second, first) == klass


def test_one_host_only_where_both_name_the_same_one():
    assert noise.same_host(rec(host="a"), rec(host="a"))
    assert not noise.same_host(rec(host="a"), rec(host="b"))
    assert not noise.same_host(rec(host="", gpu=None), rec(host="", gpu=None))  # neither names one


def test_the_rank_test_is_one_sided_mann_whitney_and_silent_on_too_few_steps():
    base, slower = tuple(range(1, 7)), tuple(range(7, 13))
    assert noise.rank_p(base, slower) == pytest.approx(1 / 924)  # every new step slower: the least p
    assert noise.rank_p(slower, base) == pytest.approx(1.0)
    assert noise.rank_p(slower, base, alternative="less") == pytest.approx(1 / 924)
    assert noise.rank_p(base[:5], slower[:5]) is None and noise.rank_p((), slower) is None


def test_the_history_is_read_from_a_folder_or_a_file_and_again_once_it_changed(tmp_path):
    from gate_records import write
    folder = tmp_path / "records"
    (folder / "m").mkdir(parents=True)
    f = write(folder / "m" / "a.jsonl", [record(median=0.010, host="a"), record(median=0.011, host="b")])
    floors = noise.history_floors(folder)
    assert floors.hosts(key()) == 2 and noise.history_floors(folder) is floors  # learned once
    assert noise.history_floors(f).hosts(key()) == 2
    write(folder / "m" / "b.jsonl", [record(median=0.012, host="c")])
    assert noise.history_floors(folder).hosts(key()) == 3
    assert noise.history_floors(tmp_path / "none").runs == {}


def test_a_key_is_the_machine_kind_the_case_and_its_parameters_in_any_order():
    one = rec(params={"probe": "device_copy", "size": 1})
    other_order = dict(record(), params={"size": 1, "probe": "device_copy"})
    assert noise.key_of(one) == noise.key_of(Record.from_dict(other_order))
    assert noise.key_of(one)[1:] == ("ceilings", '{"probe": "device_copy", "size": 1}')
    cpu_a, cpu_b = record(gpu=None), record(gpu=None)
    cpu_b["environment"]["cpu"] = "Other CPU"
    assert noise.kind_of(Record.from_dict(cpu_a)) != noise.kind_of(Record.from_dict(cpu_b))


def test_thin_history_gives_the_stated_defaults_and_says_why():
    floors = noise.Floors(runs(("a", 0.010)))
    for klass in noise.DEFAULT_ACROSS:
        assert floors.across(key(), klass) == noise.Floor(
            noise.DEFAULT_ACROSS[klass], f"default ({klass}): history has 1 host(s)", False)
        assert floors.within(key(), klass) == noise.Floor(
            noise.DEFAULT_WITHIN[klass], f"default ({klass}): no host ran it twice", False)
    assert noise.Floors([]).across(key(), "host-bound").how == "default (host-bound): history has 0 host(s)"


def test_learned_floors_name_their_hosts_and_a_pair_on_one_host_takes_the_smaller():
    floors = noise.Floors(runs(("a", 0.010), ("a", 0.0105), ("b", 0.013), ("c", 0.012)))
    assert floors.across(key(), "GPU-bound").how == "learned across 3 hosts"
    assert floors.within(key(), "GPU-bound").how == "learned within 1 host(s)"
    steady = noise.Floors(runs(("a", 0.010), ("b", 0.0100001)))  # across: the least; within: a default
    across = steady.across(key(), "busy unknown")
    assert steady.floor(key(), "busy unknown", same_host=True) == across == steady.floor(key(), "busy unknown", False)
    assert steady.within(key(), "busy unknown").fraction > across.fraction


def test_only_ok_timed_records_that_name_a_host_teach_a_floor():
    failed = dict(record(host="c"), outcome="failed", reason="boom")
    hostless = record(host="", gpu=None)
    floors = noise.Floors([*runs(("a", 0.010), ("b", 0.011))] + [Record.from_dict(d) for d in (failed, hostless)])
    assert floors.hosts(key()) == 2 and floors.hosts(noise.key_of(Record.from_dict(hostless))) == 0


def test_each_stack_is_its_own_spread_and_its_hosts_count_once():
    def on(torch, host, median):
        d = record(host=host, median=median)
        d["environment"]["libraries"] = {"torch": torch}
        return Record.from_dict(d)
    history = [on("2.11", "a", 0.010), on("2.11", "b", 0.011), on("2.12", "a", 0.020), on("2.12", "b", 0.022),
               on("2.12", "c", 0.020 * 1.1 ** 0.5)]
    by_stack = noise.Floors(history, stack=lambda r: r.environment.libraries["torch"])
    sigma = (math.log(1.1) / noise.d2(2) + math.log(1.1) / noise.d2(3)) / 2
    floor = by_stack.across(key(), "GPU-bound")
    assert floor.fraction == pytest.approx(noise.quantile_floor(sigma), rel=1e-6)
    assert floor.how == "learned across 3 hosts"
    assert floor.spread == pytest.approx(0.1)  # each stack's own; across them, twice as far
    assert noise.Floors(history).across(key(), "GPU-bound").fraction > 3 * floor.fraction  # versions taken for noise
    assert [sorted(s) for s in by_stack.stacks(key())] == [["a", "b"], ["a", "b", "c"]]
    assert by_stack.stacks(("no", "such", "key")) == []


def test_one_step_against_many_can_decide_and_a_least_p_of_alpha_itself_cannot():
    assert noise.can_decide(1, 1000) and noise.can_decide(1000, 1)
    assert not noise.can_decide(499, 1)  # its least p is 1/500, ALPHA itself
    assert not noise.can_decide(0, 1000) and not noise.can_decide(1000, 0)


def test_a_pair_on_one_host_prefers_the_within_floor_on_a_tie_and_defaults_follow_the_class():
    floors = noise.Floors([])
    tie = floors.floor(key(), "busy unknown", same_host=True)
    assert tie.how == "default (busy unknown): no host ran it twice"  # 0.10 either way
    assert floors.floor(key(), "host-bound", same_host=False).fraction == noise.DEFAULT_ACROSS["host-bound"]


def test_a_history_file_is_read_again_once_it_changed(tmp_path):
    from gate_records import write
    f = write(tmp_path / "a.jsonl", [record(median=0.010, host="a")])
    assert noise.history_floors(f).hosts(key()) == 1
    write(f, [record(median=0.010, host="a"), record(median=0.011, host="b")])
    assert noise.history_floors(f).hosts(key()) == 2


def test_a_floor_across_hosts_keeps_how_far_apart_its_widest_stack_is_and_past_the_aim_says_so():
    wide = noise.Floors(runs(("a", 0.010), ("b", 0.0106), ("c", 0.0103))).across(key(), "GPU-bound")
    assert wide.spread == pytest.approx(0.06) and wide.fraction > noise.CROSS_HOST_AIM and wide.host_limited
    close = noise.Floors(runs(("a", 0.010), ("b", 0.0101))).across(key(), "GPU-bound")
    assert close.spread == pytest.approx(0.01) and not close.host_limited
    one = noise.Floors(runs(("a", 0.010), ("a", 0.013), ("b", 0.010)))
    assert one.within(key(), "GPU-bound").spread is None and not one.within(key(), "GPU-bound").host_limited
    assert not noise.Floors([]).across(key(), "host-bound").host_limited  # a default: no hosts to be apart
    two = noise.Floors(runs(("a", 0.010), ("b", 0.0102), ("a", 0.020), ("b", 0.0212)),
                       stack=lambda r: r.timing.median_s > 0.015)
    assert two.across(key(), "GPU-bound").spread == pytest.approx(0.06)  # the wider stack's
