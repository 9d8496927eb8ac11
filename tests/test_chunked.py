"""The out-of-core schedule: every element once, in order, and no buffer overwritten early."""
import numpy as np
import pytest

from harness.workloads.cupy.chunked import (MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, TARGET_CHUNKS, HostLane, chunk_elements,
                                     run_chunks, spans)


@pytest.mark.parametrize("n", [0, 1, 9, 10, 11, 99, 100, 1001])
@pytest.mark.parametrize("chunk", [1, 3, 10, 64, 5000])
def test_spans_cover_every_element_exactly_once_in_order(n, chunk):
    pieces = spans(n, chunk)
    covered = [i for s, e in pieces for i in range(s, e)]
    assert covered == list(range(n))
    assert all(0 < e - s <= chunk for s, e in pieces)
    assert all(e - s == chunk for s, e in pieces[:-1])


def test_bad_spans_are_refused():
    with pytest.raises(ValueError):
        spans(10, 0)


@pytest.mark.parametrize("n,chunk", [(1000, 64), (1000, 1000), (1001, 7), (5, 8)])
def test_double_buffered_stream_and_reduce_give_the_whole_answer(n, chunk):
    x, y = np.arange(n, dtype=np.float64), np.arange(n, dtype=np.float64) % 7
    out = np.full(n, np.nan)
    xb, yb, ob = (np.empty((2, chunk)) for _ in range(3))
    pieces = spans(n, chunk)
    partials = np.full(len(pieces), np.nan)

    def load(k, s, e):
        xb[k, :e - s], yb[k, :e - s] = x[s:e], y[s:e]

    def compute(k, s, e):
        np.add(xb[k, :e - s], yb[k, :e - s], out=ob[k, :e - s])
        partials[s // chunk] = xb[k, :e - s].sum()

    def store(k, s, e):
        out[s:e] = ob[k, :e - s]

    run_chunks(pieces, load, compute, store, lanes=(HostLane(), HostLane(), HostLane()))
    assert np.array_equal(out, x + y)
    assert partials.sum() == x.sum()


class RecordingLane:
    """Keeps what was asked of it, with each event numbered."""
    counter = 0

    def __init__(self, name, log):
        self.name, self.log = name, log

    def run(self, fn):
        fn()

    def record(self):
        RecordingLane.counter += 1
        self.log.append((self.name, "record", RecordingLane.counter))
        return RecordingLane.counter

    def wait(self, event):
        self.log.append((self.name, "wait", event))


def test_a_slot_is_loaded_again_only_after_its_last_store():
    log, ops = [], []
    lanes = tuple(RecordingLane(n, log) for n in ("in", "compute", "out"))

    def op(name):
        return lambda k, s, e: (ops.append((name, k, s)), log.append((name, k, s)))

    run_chunks(spans(50, 10), op("load"), op("compute"), op("store"), lanes=lanes)
    stored_event = {}  # chunk start -> event recorded on the copy-out lane right after its store
    for i, entry in enumerate(log):
        if entry[0] == "store":
            stored_event[entry[2]] = log[i + 1][2]
        if entry[0] == "load" and entry[2] >= 20:  # slots in use twice over
            waited = log[i - 1]
            assert waited[:2] == ("in", "wait") and waited[2] == stored_event[entry[2] - 20]
    assert [k for name, k, s in ops if name == "load"] == [0, 1, 0, 1, 0]


GiB = 2**30


@pytest.mark.parametrize("set_bytes", [2**29, int(0.02 * 80 * GiB), int(0.1 * 141 * GiB), 48 * 10**9, 200 * GiB])
@pytest.mark.parametrize("buffers", [1, 3])
def test_chunks_scale_with_the_set_so_fill_and_drain_stay_small(set_bytes, buffers):
    n = set_bytes // (8 * buffers)
    chunk = chunk_elements(n, 8, buffers)
    assert MIN_CHUNK_BYTES <= 8 * chunk <= MAX_CHUNK_BYTES
    # At least TARGET_CHUNKS pieces: the chunk the pipeline cannot overlap is <= 1/17 of the step.
    assert len(spans(n, chunk)) >= TARGET_CHUNKS


def test_a_small_set_keeps_the_floor_and_a_tiny_one_is_one_chunk():
    assert chunk_elements(2**22, 8, 1) == MIN_CHUNK_BYTES // 8  # 32 MiB: 4 chunks, not 16 of 2 MiB
    assert chunk_elements(1000, 8, 3) == 1000


@pytest.mark.parametrize("device_bytes", [6 * 8 * 1000, 16 * 10**9, 10**9])
def test_the_device_buffers_fit_the_budget(device_bytes):
    n = 10**10  # 80 GB of float64 per array
    chunk = chunk_elements(n, 8, 3, device_bytes)
    assert 2 * 3 * 8 * chunk <= device_bytes
    assert chunk == min(MAX_CHUNK_BYTES, device_bytes // 6) // 8


def test_a_budget_too_small_for_one_element_per_buffer_names_the_fix():
    with pytest.raises(ValueError, match="larger device budget"):
        chunk_elements(100, 8, 3, device_bytes=40)
    with pytest.raises(ValueError, match="need n"):
        chunk_elements(0, 8, 1)
