"""The caching allocator replayed on paper (``harness.workloads.search.simulator``): its rules one by
one, each on a programme small enough to work out by hand, and a programme read from torch's trace
and grown to another size."""
import pytest

from harness.workloads.search.simulator import (
    ALLOC, FREE, RELEASED, Request, Unlike, grown, programme, replay, round_size, segment_size)

MB = 2**20
ENOUGH = 10**15


def alloc(block, size, stream=0):
    return Request(ALLOC, block, size, stream)


def free(block, stream=0):
    return [Request(RELEASED, block, 0, stream), Request(FREE, block, 0, stream)]


def test_requests_round_to_512_bytes_and_reserve_2_20_or_their_own_size_in_2_mib():
    assert [round_size(s) for s in (1, 512, 513, 1000)] == [512, 512, 1024, 1024]
    assert segment_size(MB) == 2 * MB  # the small pool's largest request
    assert segment_size(MB + 512) == segment_size(10 * MB - 512) == 20 * MB
    assert segment_size(10 * MB) == 10 * MB and segment_size(10 * MB + 1) == 12 * MB


def test_small_requests_share_a_2_mib_segment_and_a_large_one_takes_a_segment_of_its_own():
    out = replay([alloc(0, 4000), alloc(1, 600_000), alloc(2, 30 * MB)], ENOUGH)
    assert out.peak_reserved == 2 * MB + 30 * MB
    assert out.peak_allocated == 4096 + 600_064 + 30 * MB


def test_a_large_block_is_split_only_where_more_than_1_mib_is_left():
    # 15 MiB reserves a 16 MiB segment; 1 MiB left is not split off: the request holds all 16
    whole = replay([alloc(0, 15 * MB)], ENOUGH)
    assert (whole.peak_reserved, whole.peak_allocated) == (16 * MB, 16 * MB)
    # a 12 MiB request in a freed 16 MiB block leaves 4 MiB, split off, and a later 4 MiB takes it
    split = replay([alloc(0, 15 * MB), *free(0), alloc(1, 12 * MB), alloc(2, 4 * MB - 512)], ENOUGH)
    assert split.peak_reserved == 16 * MB and split.peak_allocated == 16 * MB


def test_a_request_takes_the_smallest_free_block_that_holds_it():
    # free blocks of 40 and 24 MiB: 22 MiB goes into the 24 (2 MiB left: split), so a 40 MiB request
    # still finds its block and nothing more is reserved
    steps = [alloc(0, 40 * MB), alloc(1, 24 * MB), *free(0), *free(1), alloc(2, 22 * MB), alloc(3, 40 * MB)]
    assert replay(steps, ENOUGH).peak_reserved == 64 * MB


def test_free_neighbours_merge_and_serve_a_request_neither_holds_alone():
    # one 40 MiB segment split into 20 + 20: both freed, they merge and hold a 40 MiB request
    steps = [alloc(0, 40 * MB), *free(0), alloc(1, 20 * MB), alloc(2, 20 * MB), *free(1), *free(2), alloc(3, 40 * MB)]
    assert replay(steps, ENOUGH).peak_reserved == 40 * MB


def test_past_the_cap_every_wholly_free_segment_is_released_then_the_request_retried():
    steps = [alloc(0, 30 * MB), *free(0), alloc(1, 40 * MB)]  # the 30 MiB block cannot hold 40
    assert replay(steps, ENOUGH).peak_reserved == 70 * MB
    capped = replay(steps, 40 * MB)  # 30 + 40 passes 40: the 30 MiB segment goes, then 40 fits
    assert capped.fits and capped.peak_reserved == 40 * MB
    short = replay(steps, 40 * MB - 1)
    assert not short.fits and short.oom_request == 3


def test_a_segment_with_a_block_still_allocated_is_kept_and_the_request_runs_out():
    steps = [alloc(0, 20 * MB), alloc(1, 20 * MB), *free(0), alloc(2, 30 * MB)]  # 0 and 1: two segments
    assert replay(steps, ENOUGH).peak_reserved == 70 * MB
    out = replay(steps, 50 * MB)  # 0's segment is released, 1's is not: 20 + 30 = 50 fits exactly
    assert out.fits and out.peak_reserved == 50 * MB
    assert not replay(steps, 50 * MB - 1).fits


def test_pools_are_kept_per_stream():
    steps = [alloc(0, 20 * MB, stream=1), *free(0, stream=1), alloc(1, 20 * MB, stream=0)]
    assert replay(steps, ENOUGH).peak_reserved == 40 * MB
    assert replay([*steps[:3], alloc(1, 20 * MB, stream=1)], ENOUGH).peak_reserved == 20 * MB


def test_a_block_let_go_counts_as_allocated_no_more_but_is_reused_only_once_taken_back():
    steps = [alloc(0, 20 * MB), Request(RELEASED, 0), alloc(1, 20 * MB), Request(FREE, 0)]
    out = replay(steps, ENOUGH)  # 1 could not take 0's block: a segment of its own
    assert out.peak_allocated == 20 * MB and out.peak_reserved == 40 * MB
    assert replay([*steps, alloc(2, 20 * MB)], ENOUGH).peak_reserved == 40 * MB  # 2 takes it


def trace(*entries):
    return [dict(zip(("action", "addr", "size", "stream"), e)) for e in entries]


def test_a_trace_reads_as_requests_naming_each_block_by_the_order_it_was_asked_for():
    got = programme(trace(("segment_alloc", 100, 20 * MB, 0), ("alloc", 100, 5000, 0), ("free_requested", 100, 5000, 0),
                          ("free_completed", 100, 5000, 0), ("alloc", 100, 7000, 0), ("oom", None, 30 * MB, 0)))
    # the request torch could not serve is asked of the replay too, which must run out there as well
    assert got == [alloc(0, 5000), Request(RELEASED, 0), Request(FREE, 0), alloc(1, 7000), alloc(2, 30 * MB)]
    assert not replay(got, 21 * MB).fits and replay(got, 50 * MB).fits


def test_two_runs_of_one_programme_read_alike_whatever_their_stream_handles_and_order_of_give_backs():
    def run(side, order):
        entries = [("alloc", 1, 4000, 0), ("alloc", 2, 4000, side), ("alloc", 3, 4000, 0)]
        entries += [(action, addr, 4000, stream) for addr, stream in order
                    for action in ("free_requested", "free_completed")]
        return programme(trace(*entries, ("alloc", 4, 9000, side)))
    one = run(0x2FB85E00, [(1, 0), (3, 0), (2, 0x2FB85E00)])
    other = run(0x4768BDF0, [(2, 0x4768BDF0), (3, 0), (1, 0)])  # another handle; autocast's cache order
    assert one == other
    assert [r.stream for r in one if r.action == ALLOC] == [0, 1, 0, 1]
    assert [(r.action, r.block) for r in one[3:9]] == [(RELEASED, 0), (FREE, 0), (RELEASED, 1), (FREE, 1),
                                                       (RELEASED, 2), (FREE, 2)]
    # a give-back after an allocation stays after it: only a run between two allocations is sorted
    late = programme(trace(("alloc", 1, 4000, 0), ("alloc", 2, 4000, 0), ("free_requested", 2, 4000, 0),
                           ("alloc", 3, 4000, 0), ("free_requested", 1, 4000, 0)))
    assert [(r.action, r.block) for r in late] == [(ALLOC, 0), (ALLOC, 1), (RELEASED, 1), (ALLOC, 2), (RELEASED, 0)]


def test_a_programme_grows_on_the_law_its_recorded_sizes_draw_and_refuses_one_that_is_not_grown():
    at = {n: [alloc(0, 1000 + 300 * n), alloc(1, 64), *free(0)] for n in (1, 2, 4)}
    assert [r.size for r in grown(at, 10)] == [4000, 64, 0, 0]
    with pytest.raises(Unlike, match="request 0 asks 1,300 bytes at 1, off its law through"):
        grown({**at, 4: [alloc(0, 2203), alloc(1, 64), *free(0)]}, 10)
    with pytest.raises(Unlike, match="requests differ"):
        grown({**at, 4: [alloc(0, 2200), *free(0)]}, 10)
    square = {n: [alloc(0, 7 * n * n + 5)] for n in (1, 2, 4)}
    assert grown(square, 8, degree=2)[0].size == 7 * 64 + 5


def test_a_request_that_stopped_growing_stays_where_it_stopped_and_grows_on_its_law_under_it():
    # a workspace of 8 bytes a sample up to 132 bytes (it stops between 16 and 17) beside an
    # activation of 10 bytes a sample, recorded at 4, 8, 17 and 18
    at = {n: [alloc(0, min(8 * n, 132)), alloc(1, 10 * n)] for n in (4, 8, 17, 18)}
    assert [(n, [r.size for r in grown(at, n)]) for n in (6, 16, 17, 40)] == [
        (6, [48, 60]), (16, [128, 160]), (17, [132, 170]), (40, [132, 400])]
    # along a sequence (degree 2): stopped at the two largest, whatever the parabola through all three
    seq = {n: [alloc(0, 128 if n == 4096 else 132)] for n in (4096, 8192, 16384)}
    assert grown(seq, 51456, degree=2)[0].size == 132
    # recorded at two sizes only, it cannot be told from a request that grows: it grows on
    assert grown({n: at[n] for n in (4, 8)}, 40)[0].size == 320
    with pytest.raises(Unlike, match="request 0 asks 100 bytes at 4"):  # it shrank first: on no law
        grown({**at, 4: [alloc(0, 100), alloc(1, 40)]}, 20)


def test_a_probe_writes_the_allocator_s_trace_as_the_programme_the_simulator_reads(tmp_path):
    import gzip
    import json
    from types import SimpleNamespace

    from harness.workloads.search import fits_probe, simulator
    recorded = trace(("segment_alloc", 7, 2 * MB, 0), ("alloc", 7, 100, 0), ("free_requested", 7, 100, 0),
                     ("free_completed", 7, 100, 0))
    stopped = []
    memory = SimpleNamespace(_snapshot=lambda: {"device_traces": [recorded]},
                             _record_memory_history=lambda enabled: stopped.append(enabled))
    torch = SimpleNamespace(cuda=SimpleNamespace(memory=memory))
    fits_probe._recorded(torch, str(tmp_path / "p.json.gz"))
    with gzip.open(tmp_path / "p.json.gz", "rt") as f:
        assert simulator.load(json.load(f)) == programme(recorded) == [alloc(0, 100), *free(0)]
    assert stopped == [None]  # recording stops once written
    fits_probe._recorded(torch, None)  # nothing asked, nothing written
    assert len(list(tmp_path.iterdir())) == 1


def test_the_largest_size_is_the_last_whose_grown_programme_runs_under_the_cap():
    from harness.workloads.search.simulator import largest
    # 100 MiB and 50 MiB a sample in one block, 10 MiB a sample in another: 100 + 60 n MiB
    at = {n: [alloc(0, 100 * MB + 50 * MB * n), alloc(1, 10 * MB * n)] for n in (1, 2, 4)}
    assert largest(at, 1, 1000 * MB) == 15 and largest(at, 1, 1000 * MB - 1) == 14
    assert largest(at, 1, 1000 * MB, unit=4) == 12 and largest(at, 1, 1000 * MB, top=9) == 9
    assert largest(at, 1, 150 * MB) == 0  # not even one sample


def test_a_tie_between_free_blocks_of_one_size_goes_to_the_newest_segment_whose_address_is_lowest():
    # two 64 MiB segments, the older then the newer, each a 48 MiB block and 16 MiB free: a tie
    two = [alloc(0, 64 * MB), *free(0), alloc(1, 48 * MB), alloc(2, 64 * MB), *free(2), alloc(3, 48 * MB)]
    # 16 MiB takes the newer segment's (cudaMalloc hands each segment out below the last); the older
    # empties, is released under the cap, and 100 MiB fits in its place
    out = replay([*two, alloc(4, 16 * MB), *free(1), alloc(5, 100 * MB)], 164 * MB)
    assert out.fits and out.peak_reserved == 164 * MB and out.peak_allocated == 48 * MB + 16 * MB + 100 * MB
    # the older segment's taken instead, neither would empty: nothing to release, and 100 MiB fails
    assert replay([*two, alloc(4, 16 * MB), *free(3), alloc(5, 100 * MB)], 164 * MB).fits is False
