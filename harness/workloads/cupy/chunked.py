"""Explicit out-of-core streaming: what experts use instead of unified memory.

The data stays in pinned host memory; chunks are copied in on one stream, computed on a second
and (if there is a result per element) copied out on a third, through two device buffers, so
that the copy of chunk i+1 overlaps the compute of chunk i. A buffer slot is reused only once
the last use of it (its compute, or its copy out) is done: events order the streams, nothing
waits on the host.

``spans`` and ``run_chunks`` are plain Python over ``Lane`` objects, so the schedule runs
under NumPy (``HostLane``: every operation done at once) in the CPU tests, and on CUDA streams
(``CudaLane``) on a GPU.

``chunk_elements`` sizes the chunks from the working set. The first copy in and the last compute
and copy out overlap nothing, so a step costs about one chunk more than its copies alone: with a
fixed 256 MiB chunk a set of a few chunks spends much of its step filling and draining the
pipeline. Cutting every set into at least ``TARGET_CHUNKS`` pieces keeps that to about 1/17 of the
step; the floor keeps each copy long against its launch, the ceiling keeps the device buffers
small, and the device bytes (a budget) bound what the buffers may take.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

SLOTS = 2
TARGET_CHUNKS = 16
MIN_CHUNK_BYTES = 8 * 2**20  # a copy this long dwarfs the few microseconds of its launch
MAX_CHUNK_BYTES = 256 * 2**20


def spans(n: int, chunk: int) -> list[tuple[int, int]]:
    """[start, stop) pieces of range(n), in order, each ``chunk`` long but the last."""
    if n < 0 or chunk <= 0:
        raise ValueError(f"need n >= 0 and chunk > 0, got n={n}, chunk={chunk}")
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


def chunk_elements(n: int, itemsize: int, buffers: int, device_bytes: int | None = None,
                   slots: int = SLOTS) -> int:
    """Elements per chunk for streaming ``n`` elements of ``itemsize`` bytes through ``buffers``
    device buffers per slot: ``n / TARGET_CHUNKS``, held between MIN_CHUNK_BYTES and
    MAX_CHUNK_BYTES, no more than ``n``, and small enough that ``slots x buffers`` chunks fit in
    ``device_bytes`` (None: no bound)."""
    if n < 1 or itemsize < 1 or buffers < 1 or slots < 1:
        raise ValueError(f"need n, itemsize, buffers and slots >= 1, got n={n}, itemsize={itemsize}, "
                         f"buffers={buffers}, slots={slots}")
    want = -(-n // TARGET_CHUNKS) * itemsize
    chunk_bytes = min(max(want, MIN_CHUNK_BYTES), MAX_CHUNK_BYTES)
    if device_bytes is not None:
        room = device_bytes // (slots * buffers)
        if room < itemsize:
            raise ValueError(f"{slots * buffers} device buffers of one {itemsize}-byte element each do not fit in "
                             f"{device_bytes} bytes: give the stream a larger device budget")
        chunk_bytes = min(chunk_bytes, room)
    return max(1, min(n, chunk_bytes // itemsize))


class HostLane:
    """Runs each operation as it is given; nothing to order."""

    stream = None

    def run(self, fn: Callable[[], None]) -> None:
        fn()

    def record(self):
        return None

    def wait(self, event) -> None:
        pass


class CudaLane:
    """A CuPy stream: operations queue on it; events order it after another lane."""

    def __init__(self, cupy):
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def run(self, fn: Callable[[], None]) -> None:
        with self.stream:
            fn()

    def record(self):
        return self.stream.record()

    def wait(self, event) -> None:
        if event is not None:
            self.stream.wait_event(event)


def run_chunks(pieces, load, compute, store=None, *, lanes, slots: int = SLOTS) -> None:
    """For each piece (s, e), in order: ``load(slot, s, e)`` on the copy-in lane, then
    ``compute(slot, s, e)`` on the compute lane, then ``store(slot, s, e)`` on the copy-out lane.
    ``lanes`` is (copy_in, compute, copy_out)."""
    copy_in, work, copy_out = lanes
    free = [None] * slots  # per slot: the event after which its buffers may be overwritten
    for i, (s, e) in enumerate(pieces):
        k = i % slots
        copy_in.wait(free[k])
        copy_in.run(partial(load, k, s, e))
        work.wait(copy_in.record())
        work.run(partial(compute, k, s, e))
        done = work.record()
        if store is not None:
            copy_out.wait(done)
            copy_out.run(partial(store, k, s, e))
            done = copy_out.record()
        free[k] = done
