"""The what-fits search on fake memory models: the exact boundary whatever the guess, hints and
known bounds, the estimate's line, the sizes probed at once, and the probes each search runs,
pinned (each probe of a real search is a process that loads a model). Nothing here starts one."""
from fractions import Fraction

import pytest

from harness.units import GB
from harness.workloads.search import fits


@pytest.mark.parametrize("boundary", [1, 2, 3, 37, 64, 65, 1000, 4097])
def test_search_returns_the_exact_boundary_of_a_fake_memory_model(boundary):
    per_sample, fixed, budget = 3_000_000, 500_000_000, None
    budget = fixed + boundary * per_sample  # batch `boundary` fits exactly, one more does not
    search = fits.largest_fitting(lambda n: fixed + n * per_sample <= budget)
    assert search.largest == boundary
    assert (boundary, True) in search.probed and (boundary + 1, False) in search.probed
    assert len({n for n, _ in search.probed}) == search.probes  # no batch probed twice


def test_search_reports_zero_when_nothing_fits_and_stops_at_the_limit():
    assert fits.largest_fitting(lambda n: False).largest == 0
    assert fits.largest_fitting(lambda n: True, limit=100).largest == 100


def _memory_model(boundary, per_sample=3_000_000, fixed=500_000_000):
    """Peak bytes at batch n, and the cap under which exactly ``boundary`` fits."""
    return (lambda n: fixed + n * per_sample), fixed + boundary * per_sample

@pytest.mark.parametrize("boundary", [2, 3, 37, 64, 65, 1000, 4097])
def test_a_guess_from_the_measured_peaks_finds_the_boundary_in_six_probes(boundary):
    peak, cap = _memory_model(boundary)
    measured = []

    def probe(n):
        ok = peak(n) <= cap
        if ok:
            measured.append((n, peak(n)))
        return ok

    search = fits.largest_fitting(probe, estimate=lambda: fits.linear_estimate(measured, cap))
    assert search.largest == boundary
    assert search.probes <= 6 and (boundary + 1, False) in search.probed  # 1, 2, 4, guess, guess + 1 and + 2

@pytest.mark.parametrize("boundary", [1, 2, 5, 37, 1000])
@pytest.mark.parametrize("error", [-900, -30, -3, -1, 0, 1, 2, 17, 500, 10**6])
def test_a_wrong_guess_costs_probes_but_never_the_exact_answer(boundary, error):
    search = fits.largest_fitting(lambda n: n <= boundary, estimate=lambda: boundary + error, limit=5000)
    assert search.largest == boundary
    assert len({n for n, _ in search.probed}) == search.probes  # no batch probed twice
    assert search.probes <= 2 * (abs(error) + 1).bit_length() + 4  # logarithmic in the guess's error

def test_a_guess_past_the_limit_stops_there():
    search = fits.largest_fitting(lambda n: True, estimate=lambda: 10**9, limit=100)
    assert search.largest == 100 and max(n for n, _ in search.probed) == 100

def test_the_linear_estimate_waits_for_a_span_of_four_and_reads_the_line_near_the_top():
    assert fits.linear_estimate([(1, 10), (2, 20)], cap=100) is None
    assert fits.linear_estimate([(1, 10), (2, 20), (4, 40)], cap=100) == 10
    assert fits.linear_estimate([(1, 10), (2, 20), (4, 40), (5, 50)], cap=100) == 10  # 5 and 2 (<= 3/4 of 5)
    assert fits.linear_estimate([(1, 10), (2, 10), (4, 10)], cap=100) is None  # no growth: no line to read

def test_with_sizes_measured_either_side_of_the_cap_the_estimate_reads_the_line_between_them():
    # a larger budget's peaks (another run's, or this one's) past the cap: the answer lies between
    squared = [(n, n * n) for n in (1, 2, 4, 8, 16, 32)]
    assert fits.linear_estimate(squared, cap=100) == 9  # 8 (64) and 16 (256): 8 + 36 x 8 / 192
    assert fits.linear_estimate([(n, m) for n, m in squared if m <= 100], cap=100) == 11  # past 8 it overshoots 10
    assert fits.linear_estimate([(1, 10), (2, 20), (3, 200)], cap=100) == 2  # 2 and 3 bracket it, a span of four or not
    # a point out of order is passed by
    assert fits.linear_estimate([(1, 10), (2, 20), (4, 40), (3, 500)], cap=100) == 10


# Peak reserved bytes of the fp32 LM (width 1024, 12 layers, 1024 tokens) on the H200, from the
# probe log of 203233b, and the largest batch each budget's search found there.
H200_RESERVED = {1: 4.57e9, 2: 5.69e9, 8: 13.11e9, 9: 14.64e9, 14: 22.26e9, 15: 23.79e9, 16: 23.21e9,
                 24: 34.44e9, 26: 37.24e9, 27: 38.64e9, 56: 79.14e9}
H200_ANSWERS = {24e9: (9, 16), 80e9: (27, 56), 150.8e9: (56, 106)}  # cap: (largest known before, answer)

@pytest.mark.parametrize("cap", list(H200_ANSWERS))
def test_on_measured_peaks_the_estimate_lands_on_the_answer(cap):
    known, answer = H200_ANSWERS[cap]
    points = [(n, m) for n, m in H200_RESERVED.items() if n <= known]
    assert fits.linear_estimate(points, cap) in (answer, answer + 1)  # the probe of answer + 1 settles it

@pytest.mark.parametrize("fit_at,fail_at", [(5, None), (5, 6), (None, 6), (None, 1)])
def test_a_search_never_probes_what_is_known(fit_at, fail_at):
    known = {n: n == fit_at for n in (fit_at, fail_at) if n is not None}
    search = fits.largest_fitting(lambda n: n <= 5, known=known, limit=100)
    assert search.largest == (0 if fail_at == 1 else 5)
    assert not {fit_at, fail_at} & {n for n, _ in search.probed}
    if fit_at and fail_at:
        assert search.probed == [(7, False)]  # only the size after the answer's failing one


@pytest.mark.parametrize("boundary", [0, 1, 5, 37, 1000])
@pytest.mark.parametrize("hint", [(37, 38), (5, 6), (1000, 1001), (4, 9), (None, 38), (37, None), (600, 2000), (0, 1)])
@pytest.mark.parametrize("unit", [1, 128])
def test_a_hint_from_another_run_is_probed_first_and_never_costs_the_exact_answer(boundary, hint, unit):
    hint = tuple(None if h is None else h * unit for h in hint)
    search = fits.largest_fitting(lambda n: n <= boundary * unit, hint=hint, limit=5000 * unit, unit=unit,
                                  estimate=lambda: None)
    assert search.largest == boundary * unit
    assert len({n for n, _ in search.probed}) == search.probes  # no size probed twice
    if hint == (boundary * unit, (boundary + 1) * unit) and boundary:  # three probes, no start
        assert search.probed == [(boundary * unit, True), ((boundary + 1) * unit, False),
                                 ((boundary + 2) * unit, False)]

@pytest.mark.parametrize("boundary", [0, 1, 2, 3, 4, 5, 37])
@pytest.mark.parametrize("high", [None, 3, 4, 50])
def test_side_by_side_a_cold_start_asks_for_three_sizes_at_once_and_keeps_the_exact_answer(boundary, high):
    rounds = []

    def many(sizes):
        rounds.append(list(sizes))
        return [n <= boundary for n in sizes]

    # a size known not to fit (under a larger cap) is one this table fails at: a spike where the boundary is past it
    search = fits.largest_fitting(lambda n: n <= boundary and n != high, known={} if high is None else {high: False},
                                  probe_many=many, limit=1000)
    assert search.largest == (boundary - 1 if boundary == high else boundary)
    assert rounds[0] == [n for n in (1, 2, 4) if high is None or n < high]
    assert len({n for n, _ in search.probed}) == search.probes  # no size probed twice

def test_probes_run_side_by_side_only_where_memory_holds_each_cap_and_its_context():
    assert fits.side_by_side(16 * GB, 80 * GB) == 3
    assert fits.side_by_side(40 * GB, 85 * GB) == 1
    assert fits.side_by_side(40 * GB, 3 * (40 * GB + fits.PROBE_OVERHEAD)) == 3

@pytest.mark.parametrize("boundary", [1024, 1100, 8999, 12600])
def test_one_sequence_is_searched_in_steps_of_128_tokens_and_answers_to_them(boundary):
    """A token-exact answer costs seven probes more; the guess from the first peaks (12672 tokens,
    the line through 1024, 2048 and 4096 on the H100 under 16GB) overshoots a sequence's boundary."""
    asked = []

    def probe(n):
        asked.append(n)
        return n <= boundary
    search = fits.largest_fitting(probe, start=1024, limit=2**20, unit=128, estimate=lambda: 12672,
                                  known={1024: True})
    assert search.largest == boundary // 128 * 128
    assert all(n % 128 == 0 for n in asked) and [n for n, _ in search.probed] == asked and 1024 not in asked
    assert search.probes <= 12

def test_a_known_bound_between_two_steps_rounds_toward_what_was_seen():
    """A size known to fit says only that the steps under it fit (rounded down); one known not to
    fit, that the steps over it do not (rounded up): never an answer nobody probed."""
    asked = []

    def probe(n):
        asked.append(n)
        return n <= 1000
    search = fits.largest_fitting(probe, start=128, limit=2**20, unit=128, known={1000: True, 1024: False})
    assert search.largest == 896 and asked == [1152]  # 7 steps fit, 8 did not: only the size after 8 is left
    asked.clear()
    search = fits.largest_fitting(probe, start=128, limit=2**20, unit=128, known={1000: True, 1100: False})
    assert search.largest == 896 and asked == [1024]  # 9 steps do not fit; 8 had to be probed

def test_a_sequence_too_slow_to_wait_for_is_named_in_tokens():
    def probe(n):
        if n > 6000:
            raise fits.TooSlow(n, 1.0)
        return True
    slow = fits.largest_fitting(probe, start=1024, limit=2**20, unit=128)
    assert (slow.largest, slow.too_slow) == (4096, 8192)  # doubling 1024, 2048, 4096, then 8192 ran too long
    assert type(slow.too_slow) is int and type(slow.largest) is int  # whole counts of tokens, steps of 128

def test_a_size_known_too_slow_bounds_the_search_and_an_answer_below_it_keeps_it():
    asked = []

    def probe(n):
        asked.append(n)
        return n <= 100
    search = fits.largest_fitting(probe, limit=4096, slow=8)
    assert (search.largest, search.too_slow) == (7, 8) and max(asked) == 7
    roomy = fits.largest_fitting(lambda n: n <= 5, limit=4096, slow=8)
    assert (roomy.largest, roomy.too_slow) == (5, None)  # memory, not time, set this answer
    tokens = fits.largest_fitting(lambda n: n <= 10**6, start=1024, limit=2**20, unit=128, slow=8192)
    assert (tokens.largest, tokens.too_slow) == (8064, 8192)

def test_the_probes_a_search_runs_are_pinned():
    """A search's cost is its probes (each one a process that loads a model): these sequences are
    the doubling, the gallop down from a guess, the batch of sizes at once and the steps of 128,
    each ending with the second size after the answer where it had not probed it."""
    def fits_up_to(boundary):
        return lambda n: n <= boundary

    def many(sizes):
        return [n <= 1000 for n in sizes]
    assert fits.largest_fitting(fits_up_to(37), limit=4096).probed == [
        (1, True), (2, True), (4, True), (8, True), (16, True), (32, True), (64, False), (48, False), (40, False),
        (36, True), (38, False), (37, True), (39, False)]
    assert fits.largest_fitting(fits_up_to(37), limit=4096, estimate=lambda: 100).probed == [
        (1, True), (100, False), (99, False), (97, False), (93, False), (85, False), (43, False), (22, True),
        (32, True), (37, True), (40, False), (38, False), (39, False)]
    tokens = fits.largest_fitting(fits_up_to(1000), start=128, limit=2**20, unit=128, estimate=lambda: 5000)
    assert tokens.probed == [(128, True), (4992, False), (4864, False), (4608, False), (4096, False), (2048, False),
                             (1024, False), (512, True), (768, True), (896, True), (1152, False)]
    at_once = fits.largest_fitting(fits_up_to(1000), start=128, limit=2**20, unit=128, probe_many=many)
    assert at_once.probed == [(128, True), (256, True), (512, True), (1024, False), (768, True), (896, True),
                              (1152, False)]
    known = fits.largest_fitting(fits_up_to(1000), start=128, limit=2**20, unit=128, known={256: True}, probe_many=many)
    assert known.probed == [(512, True), (1024, False), (768, True), (896, True), (1152, False)]
    assert fits.largest_fitting(fits_up_to(4), start=4, limit=16).probed == [(4, True), (8, False), (6, False),
                                                                             (5, False)]
    assert fits.largest_fitting(fits_up_to(16), start=4, limit=16).probed == [(4, True), (8, True), (16, True)]

def test_sizes_answered_at_once_narrow_the_bracket_only_as_far_as_they_agree_with_what_is_known():
    assert fits._bracket({}, 5, None) == (5, None)
    assert fits._bracket({6: True, 8: False, 7: True}, 5, None) == (7, 8)
    assert fits._bracket({3: True}, 1, 3) == (1, 3)  # a fit where a failure is known is not believed
    assert fits._bracket({3: False, 4: True}, None, None) == (None, 3)


def test_a_gallop_down_steps_while_its_step_is_under_an_eighth_of_the_bracket():
    asked = []

    def never(n):
        asked.append(n)
        return False
    assert fits._down(never, 0, 16, 2) == (0, 16) and asked == []  # 2 is an eighth of 16: bisect instead
    assert fits._down(never, 0, 17, 2) == (0, 15) and asked == [15]
    assert fits._down(never, 10, 20, 1) == (10, 19) and asked == [15, 19]


def asking(boundary):
    asked = []

    def probe(n):
        asked.append(n)
        return n <= boundary
    return probe, asked


def test_a_gallop_up_doubles_its_step_to_the_top_or_an_eighth_of_the_bracket():
    probe, asked = asking(10**6)
    assert fits._up(probe, 0, None, 20, 1) == (20, None) and asked == [1, 3, 7, 15, 20]
    probe, asked = asking(10**6)
    assert fits._up(probe, 0, 100, 99, 1) == (15, 100) and asked == [1, 3, 7, 15]
    probe, asked = asking(10**6)
    assert fits._up(probe, 0, 8, 99, 1) == (0, 8) and asked == []  # 1 is an eighth of 8: bisect instead
    probe, asked = asking(10**6)
    assert fits._up(probe, 10, 30, 99, 1) == (13, 30) and asked == [11, 13]
    probe, asked = asking(5)
    assert fits._up(probe, 0, None, 99, 1) == (3, 7) and asked == [1, 3, 7]


def test_a_gallop_starts_at_the_guess_held_inside_the_bracket():
    probe, asked = asking(37)
    assert fits._gallop(probe, 100, 0, 50, 4096) == (0, 42) and asked == [49, 48, 46, 42]
    probe, asked = asking(37)
    assert fits._gallop(probe, 0, 10, None, 4096) == (26, 42) and asked == [11, 12, 14, 18, 26, 42]
    probe, asked = asking(37)
    assert fits._gallop(probe, 20, 0, 40, 4096) == (23, 40) and asked == [20, 21, 23]


def test_a_start_between_two_steps_rounds_up_to_the_next():
    probe, asked = asking(1000)
    assert fits.largest_fitting(probe, start=100, limit=2**20, unit=128).largest == 896 and asked[0] == 128


def _gallop_side_by_side(boundary, guess, low, high, confirm=False):
    probe, asked = asking(boundary)
    rounds = []

    def many(sizes):
        rounds.append(list(sizes))
        return [n <= boundary for n in sizes]
    return fits._gallop(probe, guess, low, high, 4096, many, confirm=confirm), asked, rounds


def test_side_by_side_a_confirming_gallop_asks_the_guess_and_the_two_after_it():
    case = _gallop_side_by_side
    assert case(20, 20, 0, None, True) == ((20, 21), [], [[20, 21, 22]])  # right: the rule's proof in one round
    assert case(37, 20, 0, None, True) == ((36, 52), [24, 28, 36, 52], [[20, 21, 22]])  # all fit: up by 2, 4...
    assert case(21, 20, 0, None, True) == ((21, 22), [], [[20, 21, 22]])  # one short: bracketed all the same
    assert case(100, 100, 0, 30, True) == ((29, 30), [], [[29]])  # held under the size known not to fit


def test_side_by_side_a_gallop_asks_the_guess_and_its_neighbours_then_goes_on_only_past_all_three():
    case = _gallop_side_by_side
    assert case(37, 20, 0, None) == ((35, 51), [23, 27, 35, 51], [[19, 20, 21]])  # all three fit: up by 2, 4...
    assert case(5, 20, 10, None) == ((10, 19), [], [[19, 20, 21]])  # none fit, and 19 is near 10: bisect
    assert case(5, 20, 0, None) == ((0, 17), [17], [[19, 20, 21]])  # none fit: down by 2, 4...
    assert case(37, 11, 10, None)[2] == [[11, 12]]  # never the size known to fit
    assert case(20, 20, 0, None) == ((20, 21), [], [[19, 20, 21]])
    assert case(100, 100, 0, 30) == ((29, 30), [], [[28, 29]])  # held under the size known not to fit


def test_the_estimate_reads_the_highest_peak_of_a_size_and_the_line_a_quarter_below_the_top():
    assert fits.linear_estimate([(1, 10), (4, 40), (4, 30)], 100) == 10  # 4's higher peak: 10 bytes a size
    assert fits.linear_estimate([(1, 10), (4, 40)], 40) == 4  # a peak at the cap fits it
    assert fits.linear_estimate([(1, 10), (2, 20)], 10) == 1  # 1 is under the cap and 2 over it: no span needed
    assert fits.linear_estimate([(2, 20), (4, 40)], 100) is None  # a span of two: wait for four
    assert fits.linear_estimate([(1, 10), (3, 20), (4, 40)], 100) == 7  # through 3 and 4, not 1
    assert fits.linear_estimate([(1, 100), (4, 102)], 110) == 16  # a shallow line still rises
    assert fits.side_by_side(40 * GB, 3 * (40 * GB + fits.PROBE_OVERHEAD) - 1) == 1
    assert fits._cold_start(lambda sizes: [True] * len(sizes), 1, None, 4) == (4, None)  # 4 is within the limit


def test_a_guess_never_sends_a_probe_past_the_limit_or_onto_what_is_known():
    probe, asked = asking(10**6)
    late = lambda: 10 if len(asked) >= 3 else None  # a guess only once 1, 2 and 4 are probed
    assert fits.largest_fitting(probe, limit=4, estimate=late).largest == 4 and asked == [1, 2, 4]
    probe, asked = asking(5)
    assert fits.largest_fitting(probe, known={5: True, 6: False}, estimate=lambda: 10).largest == 5 and asked == [7]
    probe, asked = asking(7)
    assert fits.largest_fitting(probe, known={5: True, 9: False}, estimate=lambda: 20).largest == 7
    assert 5 not in asked and 9 not in asked and max(asked) < 11


def recording(boundary):
    """A probe and a ``probe_many`` that fit up to ``boundary``, with the sizes each was asked."""
    asked, rounds = [], []

    def probe(n):
        asked.append(n)
        return n <= boundary

    def many(sizes):
        rounds.append(list(sizes))
        return [n <= boundary for n in sizes]
    return probe, many, asked, rounds


def test_a_start_known_not_to_fit_answers_zero_without_a_probe_whatever_fits_over_it():
    probe, many, asked, rounds = recording(5)
    search = fits.largest_fitting(probe, known={1: False, 5: True}, probe_many=many)
    assert (search.largest, search.probed, asked, rounds) == (0, [], [], [])


def test_side_by_side_the_size_after_the_answer_goes_to_the_probes_at_once():
    probe, many, asked, rounds = recording(37)
    assert fits.largest_fitting(probe, probe_many=many, limit=4096).largest == 37
    assert rounds == [[1, 2, 4], [39]] and 39 not in asked


def test_a_hint_is_probed_only_where_it_lies_over_what_fits_and_under_what_fails_and_the_limit():
    probe, many, asked, rounds = recording(5)
    assert fits.largest_fitting(probe, start=5, hint=(4, 6), limit=4096).largest == 5
    assert asked == [5, 6, 7]  # 4 is under the start: never probed
    probe, many, asked, rounds = recording(5)
    assert fits.largest_fitting(probe, start=5, hint=(5, 6), probe_many=many, limit=4096, confirm=False).largest == 5
    assert (asked, rounds) == ([5, 6], [[7]])  # the hint's fit at the start, alone: no cold start
    probe, many, asked, rounds = recording(5)
    assert fits.largest_fitting(probe, start=5, hint=(5, 6), probe_many=many, limit=4096, confirm=True).largest == 5
    assert (asked, rounds) == ([], [[5, 6, 7]])  # confirmed: the hint's fit and the two after it, at once
    probe, many, asked, rounds = recording(12)
    assert fits.largest_fitting(probe, known={10: True}, hint=(5, None)).largest == 12 and 5 not in asked
    probe, many, asked, rounds = recording(100)
    assert fits.largest_fitting(probe, hint=(16, None), limit=16).probed == [(16, True)]  # the limit, at once
    for hint in ((17, None), (None, 17)):
        probe, many, asked, rounds = recording(100)
        assert fits.largest_fitting(probe, hint=hint, limit=16).largest == 16 and max(asked) == 16
    for hint in ((20, None), (None, 20)):  # past a size known not to fit
        for at_once in (False, True):
            probe, many, asked, rounds = recording(5)
            search = fits.largest_fitting(probe, known={10: False}, hint=hint, probe_many=many if at_once else None)
            assert search.largest == 5 and 20 not in asked + sum(rounds, [])


def test_a_size_known_not_to_fit_at_the_limit_bounds_the_search_under_it():
    probe, many, asked, rounds = recording(12)
    search = fits.largest_fitting(probe, known={3: True, 16: False}, limit=16)
    assert search.probed == [(9, True), (12, True), (14, False), (13, False)]  # bisecting from 3 and 16


def test_a_size_known_not_to_fit_past_the_limit_bounds_nothing_and_no_probe_goes_past_it():
    probe, many, asked, rounds = recording(100)
    known = {5: True, 100: False}
    assert fits.largest_fitting(probe, limit=16, known=known).probed == [(10, True), (16, True)]
    assert fits.largest_fitting(probe, limit=16, known=known, estimate=lambda: 50).probed == [(16, True)]
    search = fits.largest_fitting(probe, limit=16, known=known, estimate=lambda: 50, probe_many=many)
    assert (search.largest, rounds) == (16, [[15, 16]])


def test_in_steps_of_128_tokens_the_probes_go_side_by_side_and_a_failure_under_the_answer_is_kept():
    probe, many, asked, rounds = recording(1000)
    search = fits.largest_fitting(probe, start=128, limit=2**20, unit=128, known={384: False}, probe_many=many)
    assert (search.largest, search.failed_below) == (896, [384])
    assert rounds == [[128, 256], [512], [1152]] and asked == [1024, 768, 896]


def test_in_steps_the_search_starts_at_its_start_and_a_limit_between_two_steps_rounds_down():
    probe, many, asked, rounds = recording(10**9)
    search = fits.largest_fitting(probe, start=256, limit=1000, unit=128)
    assert search.probed == [(256, True), (512, True), (896, True)] and type(search.largest) is int


def test_a_unit_of_two_probes_even_sizes_only():
    probe, many, asked, rounds = recording(11)
    assert fits.largest_fitting(probe, limit=4096, unit=2).largest == 10
    assert asked == [2, 4, 8, 16, 12, 10, 14]


def test_a_first_probe_too_slow_answers_zero_and_names_it():
    def probe(n):
        raise fits.TooSlow(n, 1.0)
    search = fits.largest_fitting(probe, limit=4096)
    assert (search.largest, search.too_slow, search.probed) == (0, 1, [(1, None)])


def test_sizes_probed_at_once_that_run_too_slow_are_kept_as_not_answered():
    def many(sizes):
        raise fits.TooSlow(max(sizes), 1.0)
    search = fits.largest_fitting(lambda n: True, known={1: True, 2: True, 4: True}, estimate=lambda: 20,
                                  probe_many=many)
    assert (search.largest, search.too_slow, search.probed) == (4, 21, [(21, None)])


@pytest.mark.parametrize("at_once", [False, True])
def test_a_start_known_too_slow_answers_zero_and_names_it_without_waiting_for_it_again(at_once):
    probe, many, asked, rounds = recording(10**6)
    search = fits.largest_fitting(probe, start=8, slow=8, probe_many=many if at_once else None)
    assert (search.largest, search.too_slow, asked, rounds) == (0, 8, [], [])
    tokens = fits.largest_fitting(probe, start=1024, limit=2**20, unit=128, slow=1000)
    assert (tokens.largest, tokens.too_slow, asked) == (0, 1024, [])  # 1000 rounds up to the start's step


def test_sizes_already_answered_are_never_sent_to_the_probes_at_once_not_even_as_an_empty_round():
    probed, rounds = [], []
    _, many = fits._recorded(probed, {3: True, 4: False}, None, lambda sizes: rounds.append(sizes) or [])
    assert many([3, 4]) == [True, False] and (probed, rounds) == ([], [])


def test_with_every_peak_over_the_cap_the_line_is_read_below_them():
    assert fits.linear_estimate([(2, 20), (8, 80)], cap=15) == 1  # 10 bytes a size: 1 holds 10, 2 holds 20


def test_the_line_through_the_top_two_is_read_without_rounding_its_slope():
    assert fits.linear_estimate([(5, 1), (20, 4)], cap=5) == 25  # 25 holds 5 bytes exactly: a slope of 0.2 read 24


def test_the_line_between_sizes_either_side_of_the_cap_is_read_in_whole_numbers():
    """Exactly the largest size whose line stays under the cap: here the line meets the cap a
    197e9th of a token short of 307371 tokens, which a float quotient rounds up to."""
    (n0, p0), (n1, p1) = points = [(2048, 3_000_000_000), (2**20, 200_000_000_003)]
    cap = 60_474_459_356
    n = fits.linear_estimate(points, cap)

    def line(m):
        return p0 + Fraction(p1 - p0, n1 - n0) * (m - n0)
    assert line(n) <= cap < line(n + 1) and n == 307370


def test_a_side_by_side_probe_too_slow_keeps_the_answers_of_the_sizes_beside_it():
    """A cold start of 1, 2, 4 at once where 4 runs too slow: 1 and 2 fit, and the answer is 2."""
    def many(sizes):
        raise fits.TooSlow(4, 1.0, {n: True for n in sizes if n < 4})
    search = fits.largest_fitting(lambda n: pytest.fail("probed alone"), probe_many=many, limit=64)
    assert (search.largest, search.too_slow) == (2, 4)
    assert search.probed == [(1, True), (2, True), (4, None)]


def test_in_steps_a_probe_too_slow_keeps_the_answers_beside_it_in_the_caller_s_units():
    def many(sizes):
        raise fits.TooSlow(512, 1.0, {n: True for n in sizes if n < 512})
    search = fits.largest_fitting(lambda n: pytest.fail("probed alone"), probe_many=many, limit=4096, unit=128)
    assert (search.largest, search.too_slow) == (256, 512)
    assert search.probed == [(128, True), (256, True), (512, None)]
    assert all(type(n) is int for n, _ in search.probed)  # whole sizes, as a record writes them
