"""The learned noise floors, pinned to values computed here from their definition: the expected
range d2(n) of n standard normals in closed form, and the one-sided 99% quantile of the log
ratio of two runs, z * sqrt(2) * sigma, with sigma = log range / d2(n)."""
import math

import pytest
from scipy.stats import norm

from gate_records import record
from harness.measure.record import Record
from harness.report import noise

Z99 = norm.ppf(0.99)
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
@pytest.mark.parametrize("n, m, decides", [(5, 5, False), (6, 6, True), (1, 100, False), (2, 100, True), (0, 50, False)])
def test_a_test_can_decide_only_where_its_least_p_is_under_alpha(n, m, decides):
    assert noise.can_decide(n, m) is decides
