"""The what-fits predictor on probes drawn from known laws (the answer recovered to the size), its
refusals, and the replay of a search from a hand-made probe log: the rule's answer with fewer
rounds of probes than the search before it. Nothing here starts a probe."""
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from harness.workloads.search import fits, predict, replay

GiB = 2**30


def probes(law, sizes):
    """Probe results as ``fits_probe.probe`` reports them, each peak on ``law`` (whole bytes)."""
    return [{"n": n, "fits": True, "peak_allocated": law(n) - 2**20, "peak_reserved": law(n)} for n in sizes]


@settings(max_examples=30, deadline=None)
@given(fixed=st.integers(GiB, 8 * GiB), per=st.integers(2**25, 2 * GiB), cap=st.integers(9 * GiB, 150 * 10**9))
def test_a_linear_law_from_two_probes_gives_the_largest_batch_under_the_cap_exactly(fixed, per, cap):
    law = predict.fit(probes(lambda n: fixed + per * n, [1, 2]), "batch")
    expected = (cap - fixed) // per  # the largest n with fixed + per * n <= cap
    assert law.largest(cap) == expected
    assert law.degree == 1 and law.peak(expected) == pytest.approx(fixed + per * expected, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(a=st.integers(2**10, 2**16), b=st.integers(2**18, 2**22), cap=st.integers(20 * GiB, 150 * 10**9))
def test_a_square_law_along_a_sequence_is_chosen_by_the_third_probe_and_recovered_to_the_step(a, b, cap):
    fixed = 4 * GiB
    curve = lambda n: fixed + b * n + a * n * n  # noqa: E731  attention's scores grow as the square
    law = predict.fit(probes(curve, [1024, 2048, 4096]), "seq_len")
    steps = [n for n in range(128, 2**20, 128) if curve(n) <= cap]
    assert law.degree == 2 and law.largest(cap, unit=128, limit=2**20) == max(steps)


def test_a_third_probe_on_the_line_keeps_the_line_and_a_batch_never_takes_the_square():
    line = predict.fit(probes(lambda n: GiB + 3 * 2**20 * n, [1024, 2048, 4096]), "seq_len")
    assert line.degree == 1
    curved = probes(lambda n: GiB + 2**24 * n * n, [1, 2, 4])
    assert predict.fit(curved, "batch").degree == 1  # a batch's samples are independent: linear by law


def test_it_refuses_in_one_line_with_fewer_than_two_sizes_or_peaks_that_do_not_grow():
    with pytest.raises(predict.Refused, match="two sizes at least, got 1: probe another size"):
        predict.fit(probes(lambda n: GiB * n, [4, 4]), "batch")
    with pytest.raises(predict.Refused, match="got 0"):
        predict.fit([{"n": 4, "fits": False}], "batch")
    falling = probes(lambda n: 10 * GiB - GiB * n, [1, 2, 4])
    with pytest.raises(predict.Refused, match="does not grow with batch") as refused:
        predict.fit(falling, "batch")
    assert "\n" not in str(refused.value)
    with pytest.raises(predict.Refused, match="over 'width'"):
        predict.fit(probes(lambda n: GiB * n, [1, 2]), "width")


def test_a_rise_within_the_reserves_jitter_is_flat_and_no_guess_is_made_from_it():
    # The optimizer's step sets the peak at the smallest batches (the activations hide under it):
    # the reserve moves by a segment, not by a slope, and a line through it would guess thousands.
    plateau = [{"n": n, "fits": True, "peak_allocated": 4_434_535_424, "peak_reserved": r}
               for n, r in ((1, 4_573_888_512), (2, 4_575_985_664), (4, 4_575_985_664))]
    with pytest.raises(predict.Refused, match=r"flat from 1 to 4 \(within one allocator segment, "):
        predict.fit(plateau, "batch")
    assert predict.guess(plateau, 24 * 10**9, "batch") is None
    # One size past the plateau draws no line: the backward's law runs under the plateau's edge.
    risen = plateau + [{"n": 8, "fits": True, "peak_allocated": 4_700_000_000, "peak_reserved": 4_900_000_000}]
    with pytest.raises(predict.Refused, match=r"peak_allocated is flat from 1 to 4 \(the model's states set it\): "
                                              r"1 size past it shows how the step grows; probe a larger batch"):
        predict.fit(risen, "batch")
    assert predict.guess(risen, 24 * 10**9, "batch") is None
    twice = risen + [{"n": 16, "fits": True, "peak_allocated": 4_966_000_000, "peak_reserved": 5_166_000_000}]
    assert predict.fit(twice, "batch").sizes == (8, 16)  # the law through the two past it, none on the plateau
    assert predict.guess(twice, 24 * 10**9, "batch") == 16 + (24 * 10**9 - 5_166_000_000) // 33_250_000


def test_the_largest_size_stays_under_a_limit_and_is_zero_where_nothing_fits():
    law = predict.fit(probes(lambda n: GiB + GiB * n, [1, 2]), "batch")
    assert law.largest(100 * GiB, limit=16) == 16 and law.largest(GiB) == 0
    assert law.largest(5 * GiB) == 4  # a peak at the cap fits it
    assert predict.cards(law, {"16GB": 16 * 10**9, "24GB": 24 * 10**9}) == {"16GB": 13, "24GB": 21}
    kept = law.to_dict(5 * GiB)
    assert kept["largest"] == 4 and kept["law"] == "linear" and kept["peak_reserved"] == 5 * GiB


def test_the_search_guess_is_read_from_the_probes_nearest_the_cap():
    # small sizes carry the allocator's fixed share: the line through the three nearest the cap is the one read
    bent = {1: 5 * GiB, 2: 6 * GiB, 4: 7 * GiB, 40: 44 * GiB, 41: 45 * GiB, 42: 46 * GiB}
    results = [{"n": n, "fits": True, "peak_reserved": p, "peak_allocated": p} for n, p in bent.items()]
    assert predict.near(results, 50 * GiB, "batch").largest(50 * GiB) == 46
    assert predict.guess(results, 50 * GiB, "batch") == 46
    assert predict.near(results[:1], 50 * GiB, "batch") is None  # one size: no guess yet
    assert predict.guess(results[:1], 50 * GiB, "batch") is None


KEY = {"workload": "lm", "over": "batch", "seq_len": 1024}
CAP = 40 * 10**9


def hand_made_log(boundary=30, per=GiB, fixed=4 * GiB):
    """A committed run's probe log of ``KEY`` under ``CAP``: the cold start, sizes around the
    answer and the ones an earlier search probed, each with the peaks a linear law gives."""
    def entry(n):
        peak = fixed + per * n
        fit = peak <= CAP
        return {"key": KEY, "cap": CAP, "n": n, "fits": fit,
                **({"peak_reserved": peak, "peak_allocated": peak} if fit else {})}
    return [entry(n) for n in (1, 2, 4, 8, 16, 24, 28, 29, 30, 31, 32, 33, 34, 35, 36, 38, 40, 44, 48, 52)]


def test_a_replay_reproduces_the_rules_answer_in_fewer_rounds_than_the_search_before():
    log = hand_made_log()
    old = replay.replay(log, KEY, CAP, "batch", side_by_side=3, new=False)
    new = replay.replay(log, KEY, CAP, "batch", side_by_side=3, new=True)
    assert old.largest == new.largest == 33  # 4 + 33 GiB under 40e9 bytes; 34 and 35 over it
    assert new.rounds < old.rounds and new.probes <= old.probes


def test_a_replay_says_which_size_the_log_never_answered():
    log = [e for e in hand_made_log() if e["n"] != 34]
    found = replay.replay(log, KEY, CAP, "batch", side_by_side=3, new=True)
    assert found.largest is None and found.unprobed == 34


def test_a_size_that_fit_under_a_larger_cap_without_reaching_this_one_fits_here():
    roomy = 80 * 10**9
    log = [{"key": KEY, "cap": roomy, "n": n, "fits": True, "peak_reserved": (4 + n) * GiB} for n in (33, 34)]
    oracle = replay.Oracle(log, KEY, CAP)
    assert oracle(33) is True and oracle.results[-1]["peak_reserved"] == 37 * GiB
    with pytest.raises(replay.Unprobed, match="34 was never probed under this cap"):
        oracle(34)  # it reserved past this cap under the larger one: what this cap does there, no log says


def test_a_cells_prediction_sees_the_cold_start_and_the_smaller_budgets_never_its_own_or_a_larger():
    from harness.report import estimates
    small, large = 16 * 10**9, 80 * 10**9
    log = hand_made_log() + [{"key": KEY, "cap": small, "n": 10, "fits": True, "peak_reserved": 14 * GiB},
                             {"key": KEY, "cap": small, "n": 11, "fits": False},
                             {"key": KEY, "cap": large, "n": 50, "fits": True, "peak_reserved": 54 * GiB}]
    fed, mine = estimates.seen_before(log, [], KEY, CAP)
    # the cold start's 1, 2 and 4 under this cap, and the 16 GB search's; nothing else probed under 40 GB or 80 GB
    assert sorted((e["n"], e["cap"]) for e in fed) == [(1, CAP), (2, CAP), (4, CAP), (10, small), (11, small)]
    assert mine == fed
    # a setting never searched before: the default's cold start and smaller budgets aim it
    tuned = dict(KEY, allocator="expandable")
    assert sorted(e["n"] for e in estimates.seen_before(log, [], tuned, CAP)[0]) == [1, 2, 4, 10, 11]
    # no cold start on this machine: another machine's, which says nothing of this device
    fed, mine = estimates.seen_before([e for e in log if e["n"] > 4], log, KEY, CAP)
    assert sorted(e["n"] for e in fed) == [1, 2, 4, 10, 11] and sorted(e["n"] for e in mine) == [10, 11]


def test_a_plateau_at_the_smallest_sizes_leaves_the_fit_and_the_backwards_law_is_recovered():
    # the optimizer's states peak at 5 GiB whatever the batch; the backward's at 2 GiB + 2 GiB a sample
    plateau = lambda n: max(5 * GiB, 2 * GiB + 2 * GiB * n)  # noqa: E731
    law = predict.fit(probes(plateau, [1, 2, 4]), "batch")
    assert law.sizes == (2, 4) and law.largest(40 * GiB) == 19  # (40 - 2) / 2: the plateau's batch 1 left out
    # a third probe within the reserve's jitter of the line stays in it
    jitter = lambda n: 2 * GiB + 2 * GiB * n + (GiB // 200 if n == 1 else 0)  # noqa: E731
    assert predict.fit(probes(jitter, [1, 2, 4]), "batch").sizes == (1, 2, 4)
    # a square law needs no negative coefficient: it stays, fitted through all three
    assert predict.fit(probes(lambda n: GiB + 2**18 * n + 2**10 * n * n, [1024, 2048, 4096]), "seq_len").degree == 2


MiB = 2**20


def reserved(allocated, overhead, segment=20 * MiB):
    """The caching allocator's reserve over ``allocated`` bytes: what it strands beside them
    (``overhead``), in whole segments of the large pool."""
    return -(-(allocated + overhead) // segment) * segment


def step(fixed, per, stranded):
    """Probe results of a step whose tensors peak at ``fixed + per * n`` and whose reserve strands
    ``stranded(n)`` beside them, rounded up to whole segments."""
    def at(sizes):
        return [{"n": n, "fits": True, "peak_allocated": fixed + per * n,
                 "peak_reserved": reserved(fixed + per * n, stranded(n))} for n in sizes]
    return at


def truth(fixed, per, stranded, cap):
    """The largest batch whose reserve stays under ``cap``, by walking up from 1."""
    n = 0
    while reserved(fixed + per * (n + 1), stranded(n + 1)) <= cap:
        n += 1
    return n


@settings(max_examples=25, deadline=None)
@given(per=st.integers(GiB, 4 * GiB), share=st.floats(0.05, 0.5), cap=st.sampled_from([40, 80]))
def test_a_linear_law_with_a_segment_rounded_reserve_is_read_to_the_size_from_a_smaller_budgets_probes(
        per, share, cap):
    # the allocator strands a share of the step's largest tensors: the reserve grows faster than they
    # do. Read from three sizes a step apart, a segment's rounding moves the line's slope by up to
    # half a segment a size: a step's bytes of a GiB or more keep that within one size at twice the
    # budget (smaller steps over longer reaches are where the predictor can miss, as it says)
    fixed, stranded = 4 * GiB, lambda n: int(share * per * n)  # noqa: E731
    small = truth(fixed, per, stranded, 24 * 10**9)
    seen = step(fixed, per, stranded)([1, 2, 4, small - 2, small - 1, small])
    made = predict.prediction(seen, cap * 10**9, "batch", limit=fits.LIMIT, strict=True)
    assert abs(made.largest - truth(fixed, per, stranded, cap * 10**9)) <= 1
    # the tensors alone bound it from above, whatever the packing
    assert made.bound >= max(made.largest, truth(fixed, per, stranded, cap * 10**9))


def test_the_reserves_overhead_counts_where_the_tensors_alone_would_answer_sizes_too_large():
    fixed, per, stranded = 4 * GiB, GiB, lambda n: int(0.3 * GiB * n)  # noqa: E731
    seen = step(fixed, per, stranded)([1, 2, 4, 15, 16, 17])
    made = predict.prediction(seen, 80 * 10**9, "batch", limit=fits.LIMIT, strict=True)
    assert made.largest == truth(fixed, per, stranded, 80 * 10**9) == 54  # 4 + 1.3 GiB a sample, in segments
    assert made.bound == 70  # (80e9 bytes - 4 GiB) of tensors at a GiB a sample: 16 sizes too many


def test_no_line_is_read_across_a_change_of_the_allocators_packing():
    # up to 21 the allocator strands a third of the step's tensors; from 22 it packs them, stranding
    # a tenth: the sizes either side lie on two laws, and the answer on the second's
    fixed, per = 4 * GiB, GiB
    stranded = lambda n: per * n // (3 if n < 22 else 10)  # noqa: E731
    seen = step(fixed, per, stranded)([1, 2, 4, 20, 21, 22, 23])
    cap = 80 * 10**9
    made = predict.prediction(seen, cap, "batch", limit=fits.LIMIT, strict=True)
    assert made.law.sizes == (22, 23) and abs(made.largest - truth(fixed, per, stranded, cap)) <= 1
    # one size on the new packing: the allocated law, the overhead at that size in proportion to it
    alone = predict.prediction(seen[:-1], cap, "batch", limit=fits.LIMIT, strict=True)
    assert abs(alone.largest - truth(fixed, per, stranded, cap)) <= 1
    assert alone.law.peak(60) == pytest.approx(fixed + per * 60 + stranded(22) / 22 * 60, rel=1e-3)


def test_the_answer_never_passes_the_size_whose_tensors_alone_pass_the_reach():
    # the overhead shrinks as the size grows (less than half nowhere, so one packing): the reserve's
    # line is flatter than the tensors', and alone would place the answer past what they can hold
    fixed, per = 4 * GiB, GiB
    stranded = lambda n: 6 * GiB - n * GiB // 4  # noqa: E731
    seen = step(fixed, per, stranded)([1, 2, 4, 8, 12, 16])
    made = predict.prediction(seen, 40 * GiB, "batch", limit=fits.LIMIT, strict=True)
    assert made.law.largest(40 * GiB) > made.bound  # the reserve's line alone
    assert made.largest == made.bound == 36  # (40 - 4) GiB of tensors at a GiB a sample


def seq_step(sizes, per_token=MiB):
    """Probe results of one sequence whose tensors take ``per_token`` a token over 4 GiB, the reserve
    rounded up to the large pool's 2 MiB."""
    return [{"n": n, "fits": True, "peak_allocated": 4 * GiB + per_token * n,
             "peak_reserved": reserved(4 * GiB + per_token * n, 0, segment=2 * MiB)} for n in sizes]


def test_where_the_rounding_alone_leaves_the_answer_more_than_a_step_wide_no_answer_is_said():
    cap, unit, limit = 80 * 10**9, 128, fits.LIMITS["seq_len"]
    exact = (cap - 4 * GiB) // MiB // unit * unit  # the longest sequence, to the step
    # three sizes a step apart, the answer some five hundred steps on: 2 MiB at either end moves it by several
    close = seq_step([8192, 8320, 8448])
    with pytest.raises(predict.Refused, match=r"rounding of the probes' reserves \(up to 2\.10 MB each\) leaves "
                                              r"the answer anywhere from [0-9,]+ to [0-9,]+, more than a step from"):
        predict.prediction(close, cap, "seq_len", unit, limit, strict=True)
    aim = predict.prediction(close, cap, "seq_len", unit, limit)  # a search's aim all the same
    assert aim.among[0] <= exact <= aim.among[1] and aim.among[1] - aim.among[0] > 2 * unit
    # sizes further apart carry the rounding no further than a step
    apart = predict.prediction(seq_step([8192, 32768, 49152]), cap, "seq_len", unit, limit, strict=True)
    assert abs(apart.largest - exact) <= unit and apart.among[1] - apart.among[0] <= 2 * unit


def test_on_the_whole_card_the_device_binds_before_the_cap_and_the_host_bounds_every_cap():
    law = lambda n: GiB + GiB * n  # noqa: E731
    seen = probes(law, [1, 2])
    card = 85 * GiB
    assert predict.guess(seen, card, "batch") == 84  # nothing says what the device holds: the cap
    device = [dict(seen[0], device_total=80 * GiB, context_bytes=GiB)]
    assert predict.reachable(card, device) == 79 * GiB and predict.reachable(40 * GiB, device) == 40 * GiB
    assert predict.guess(seen, card, "batch", here=device) == 78  # 79 GiB reachable, less the fixed GiB
    host = seen + [{"n": 30, "fits": False, "short_of": "host"}, {"n": 20, "fits": False}]
    assert predict.host_short(host) == 30 and predict.guess(host, card, "batch") == 29  # no device cap moves it
    assert predict.guess(host, 16 * GiB, "batch") == 15  # under it the device's law still decides


def test_torchs_out_of_memory_message_says_the_devices_total_and_the_context_beside_the_pool():
    capped = ("CUDA out of memory. Tried to allocate 2.44 GiB. GPU 0 has a total capacity of 79.18 GiB of which "
              "53.61 GiB is free. Including non-PyTorch memory, this process has 22.57 GiB memory in use. Process "
              "3441 has 1.56 GiB memory in use. 22.22 GiB allowed; Of the allocated memory 21.84 GiB is allocated by "
              "PyTorch, and 71.15 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
              "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
    got = predict.told(capped)
    assert got["device_total"] == round(79.18 * GiB)
    assert got["context_bytes"] == round(22.57 * GiB - 21.84 * GiB - 71.15 * 2**20)  # the process less its pool
    assert predict.told("Allocation on device 0 would exceed allowed memory. (out of memory)") == {}
    assert predict.told(None) == {}


def test_a_cell_is_scored_in_search_steps_and_by_its_peak_at_the_measured_answer():
    from harness.report import estimates
    suite = predict.fit(probes(lambda n: 4 * GiB + GiB * n, [1, 2]), "batch")
    cell = estimates.Cell(gpu="H100", technique="fp32", over="batch", budget="40GB", allocator="default",
                          measured=30, unit=1, peak=34 * GiB, suite=suite, refused=None, cap=CAP,
                          others={"accelerate": 17 * GiB, "megatron": {"batch": [4 * GiB, 2 * GiB]}},
                          predicted=suite.largest(CAP))
    got = estimates.scores(cell)
    assert got["suite"][0] == 33 and got["suite"][1] == pytest.approx(0, abs=1e-9)  # 3 steps over; its peak at 30 is
    # the measured one
    assert got["accelerate"] == (None, -0.5) and got["deepspeed"] == (None, None)
    assert got["megatron"][0] == 16 and got["megatron"][1] == pytest.approx(64 / 34 - 1)
    assert got["replay"] == (None, None)  # no programme recorded for it
    assert estimates.rows_of([cell])[0][6:] == ["+3", "+0.0%", "-", "-", "-50.0%", "-", "-14", "+88.2%"]
    # the replay's answer counts where it was scored against this measured answer, and only then
    replayed = dataclasses.replace(cell, replay={"measured": 30, "largest": 29, "peak": 35 * GiB})
    assert estimates.scores(replayed)["replay"] == (29, pytest.approx(35 / 34 - 1))
    assert estimates.rows_of([replayed])[0][8:10] == ["-1", "+2.9%"]
    stale = dataclasses.replace(cell, replay={"measured": 31, "largest": 29, "peak": 35 * GiB})
    assert estimates.scores(stale)["replay"] == (None, None)
    # probed as the replay has it: marked, and only where its answer is scored
    probed = dataclasses.replace(cell, replay={"measured": 30, "largest": 33, "peak": 34 * GiB, "probed": True})
    assert estimates.rows_of([probed])[0][8] == "+3 ²"
    assert estimates.rows_of([dataclasses.replace(stale, replay={**stale.replay, "probed": True})])[0][8] == "-"
    # stopping where the search did, beside either mark or alone; not where the answer is not scored
    stops = dict(probed.replay, probed=None, stops_at_measured=True)
    assert estimates.rows_of([dataclasses.replace(cell, replay=stops)])[0][8] == "+3 ³"
    assert estimates.rows_of([dataclasses.replace(cell, replay={**stops, "probed": True})])[0][8] == "+3 ² ³"
    assert estimates.rows_of([dataclasses.replace(stale, replay={**stale.replay, "stops_at_measured": True})])[0][8] \
        == "-"


def test_an_answer_searched_before_today_s_rule_is_marked_and_left_out_of_the_rule_s_share():
    from harness.report import estimates

    def cell(gpu, measured, largest, ruled=True):
        return estimates.Cell(gpu=gpu, technique="fp32", over="batch", budget="40GB", allocator="default",
                              measured=measured, unit=1, peak=None, suite=None, refused="-", cap=CAP, others={},
                              replay={"measured": measured, "largest": largest}, ruled=ruled)
    found = [cell("H100", 30, 31), cell("H100", 30, 35), cell("H100", 30, 40, ruled=False),
             cell("H200", 30, 40, ruled=False), cell("H200", 20, 20)]
    assert [row[5] for row in estimates.rows_of(found)] == ["30", "30", "30 ⁴", "30 ⁴", "20"]
    assert estimates.summary(found)[1][3] == "1/3 (33%)"  # the score counts every cell
    assert estimates.under_the_rule(found) == (
        "Where the latest search kept today's rule (the two sizes after its answer seen not to fit; ⁴ marks the "
        "others), the replay sized the answer within one step: H100 1/2 (50%); H200 1/1 (100%).")
    assert estimates.under_the_rule([cell("H100", 30, 40, ruled=False)]) == ""


def test_the_score_counts_the_suites_refusals_apart_from_its_shares():
    from harness.report import estimates
    suite = predict.fit(probes(lambda n: 4 * GiB + GiB * n, [1, 2]), "batch")

    def cell(measured, refused=None):
        return estimates.Cell(gpu="H100", technique="fp32", over="batch", budget="40GB", allocator="default",
                              measured=measured, unit=1, peak=(4 + measured) * GiB, suite=None if refused else suite,
                              refused=refused, cap=CAP, others={}, predicted=None if refused else suite.largest(CAP))
    found = [cell(33), cell(30), cell(33, refused="peak_allocated is flat from 1 to 2")]
    row = estimates.summary(found)[0]
    assert row[:2] == ["H100", "suite"] and row[2] == "3"
    # 33 is the law's answer, 30 three steps under it; the law's peak at either is the one measured
    assert row[3:] == ["1/2 (50%)", "2/2 (100%)", "1"]
    assert estimates.summary(found)[1][1::4] == ["replay", "0"]  # no programme refused: none recorded
    assert estimates.summary(found)[2][5] == "-"  # the others name no refusal


def test_the_suites_score_by_axis_counts_each_axis_apart_with_its_median_size_error():
    from harness.report import estimates
    suite = predict.fit(probes(lambda n: 4 * GiB + GiB * n, [1, 2]), "batch")

    def cell(over, measured, unit=1, refused=None):
        return estimates.Cell(gpu="H100", technique="fp32", over=over, budget="40GB", allocator="default",
                              measured=measured, unit=unit, peak=None, suite=None if refused else suite,
                              refused=refused, cap=CAP, others={}, predicted=None if refused else suite.largest(CAP))
    # the law answers 33 wherever it is asked: a batch of 33 and of 30 (3 steps, 10% off); along a
    # sequence of 128-token steps, 32 (3% off) and 44 (25% off), each within one step; and one refusal
    found = [cell("batch", 33), cell("batch", 30), cell("seq_len", 32, unit=128), cell("seq_len", 44, unit=128),
             cell("seq_len", 40, unit=128, refused="flat")]
    assert estimates.by_axis(found) == [["H100", "batch", "2", "1/2 (50%)", "-", "0", "5.0%"],
                                        ["H100", "seq_len", "3", "2/2 (100%)", "-", "1", "14.1%"]]


def test_the_estimators_run_on_the_same_model_on_the_cpu():
    pytest.importorskip("accelerate")
    pytest.importorskip("deepspeed")
    from harness.workloads.search import estimators
    shape = dict(workload="lm", vocab=64, width=64, depth=2, seq_len=16)
    got = estimators.estimate(technique="fp32", **shape)
    model = estimators._model(technique="fp32", **shape)
    params = sum(p.numel() for p in model.parameters())
    assert got["parameters"] == params  # not one tensor's count, as storage on the meta device would give
    assert got["accelerate"] == 4 * 4 * params  # fp32: the step holds four times the weights
    assert got["deepspeed"] == 20 * params  # ZeRO-2 on one GPU: 16-bit weights, then 18 bytes a parameter
    heads = 1  # 64 wide: one head of 64
    assert got["megatron"]["batch"][1] == 2 * 16 * 64 * (34 + 5 * heads * 16 / 64)
    offloaded = estimators.estimate(technique="cpu_offload", **shape)
    assert offloaded["deepspeed"] == 2 * params  # offloaded: the 16-bit weights alone stay on the GPU


def test_each_budget_no_larger_than_the_card_gets_its_answer_a_named_card_less_its_context():
    from harness.measure.guards.budget import CARDS
    law = predict.fit(probes(lambda n: GiB + GiB * n, [1, 2]), "batch")
    card = 85 * 10**9
    without = predict.budgets(law, card)
    assert without == {"16GB": 13, "24GB": 21, "40GB": 36, "80GB": 73, "card": 78}  # no context: no named card
    charged = predict.budgets(law, card, context=GiB)
    p100 = CARDS["p100-16gb"].total_bytes
    assert charged["p100-16gb"] == (p100 - GiB - GiB) // GiB  # the card less its context, less the fixed GiB
    assert "h200" not in charged and charged["16GB"] == 13  # larger than this card: left out; a cap charges none


@pytest.mark.parametrize("processes,expected", [([(1, 10), ("self", 900 * 2**20)], 600 * 2**20),
                                                ([(1, 10)], None), (None, None)])
def test_a_probe_reads_its_context_off_nvmls_figure_for_its_own_process_alone(monkeypatch, processes, expected):
    import os
    from types import SimpleNamespace
    from test_budget import fake_nvml
    from harness.workloads.search import fits_probe
    fake_nvml(monkeypatch, [2**30], processes and [(os.getpid() if p == "self" else p, n) for p, n in processes])
    torch = SimpleNamespace(cuda=SimpleNamespace(memory_reserved=lambda device: 300 * 2**20))
    # the device's used memory would count the probes beside it: without its own figure, no context
    assert fits_probe.context_bytes(torch) == expected


class LawProber:
    """A fake probe of a step whose reserved peak is ``law(n)`` under ``cap``: it answers as
    ``fits_probe.probe`` does (peaks where it fit) and keeps each round of sizes asked at once."""

    def __init__(self, law, cap):
        self.law, self.cap, self.results, self.rounds = law, cap, [], []

    def one(self, n):
        return self.many([n])[0]

    def many(self, sizes):
        self.rounds.append(list(sizes))
        got = [{"n": n, "fits": self.law(n) <= self.cap, "peak_reserved": self.law(n),
                "peak_allocated": self.law(n)} for n in sizes]
        self.results += got
        return [r["fits"] for r in got]

    def search(self, unit=1, start=1, over="batch"):
        def estimate():
            return predict.guess(self.results, self.cap, over, unit, fits.LIMITS[over])
        return fits.largest_fitting(self.one, start=start, limit=fits.LIMITS[over], estimate=estimate, unit=unit,
                                    probe_many=self.many, confirm=True)


def test_a_search_from_a_right_prediction_costs_the_cold_start_and_one_round_the_rule_needs():
    cap = 40 * 10**9
    prober = LawProber(lambda n: 4 * GiB + GiB * n, cap)
    found = prober.search()
    answer = max(n for n in range(1, 100) if 4 * GiB + GiB * n <= cap)
    assert found.largest == answer
    # the prediction from the cold start's three sizes is the answer: it and the two after it, at once
    assert prober.rounds == [[1, 2, 4], [answer, answer + 1, answer + 2]]


@settings(max_examples=40, deadline=None)
@given(fixed=st.integers(GiB, 8 * GiB), per=st.integers(2**26, 2 * GiB), bend=st.integers(0, 2**22),
       spike=st.integers(2, 400), cap=st.integers(16 * 10**9, 80 * 10**9))
def test_a_prediction_that_misses_costs_rounds_never_the_rules_answer(fixed, per, bend, spike, cap):
    # the allocator's share grows faster than the batch (``bend``) and one size spikes past the cap: the line
    # from the first probes misses, and the answer is still the largest size with the two after it failing
    def law(n):
        return fixed + per * n + bend * n * n + (cap if n == spike else 0)
    prober = LawProber(law, cap)
    fit = [n for n in range(1, 2**12) if law(n) <= cap]
    top = next((n for n in fit if n + 1 not in fit and n + 2 not in fit), 0) if fit and 1 in fit else 0
    assert prober.search().largest == top
