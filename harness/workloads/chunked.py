"""Explicit out-of-core streaming: what experts use instead of unified memory.

The data stays in pinned host memory; chunks are copied in on one stream, computed on a second
and (if there is a result per element) copied out on a third, through two device buffers, so
that the copy of chunk i+1 overlaps the compute of chunk i. A buffer slot is reused only once
the last use of it (its compute, or its copy out) is done: events order the streams, nothing
waits on the host.

``spans`` and ``run_chunks`` are plain Python over ``Lane`` objects, so the schedule runs
under NumPy (``HostLane``: every operation done at once) in the CPU tests, and on CUDA streams
(``CudaLane``) on a GPU.
"""
from __future__ import annotations

from typing import Callable

SLOTS = 2


def spans(n: int, chunk: int) -> list[tuple[int, int]]:
    """[start, stop) pieces of range(n), in order, each ``chunk`` long but the last."""
    if n < 0 or chunk <= 0:
        raise ValueError(f"need n >= 0 and chunk > 0, got n={n}, chunk={chunk}")
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


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
        copy_in.run(lambda: load(k, s, e))
        work.wait(copy_in.record())
        work.run(lambda: compute(k, s, e))
        done = work.record()
        if store is not None:
            copy_out.wait(done)
            copy_out.run(lambda: store(k, s, e))
            done = copy_out.record()
        free[k] = done
