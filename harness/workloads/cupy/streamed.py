"""A working set in pinned host memory, streamed through device buffers that fit a budget: the
out-of-core way, shared by the ``out_of_core`` case (a fraction of the card) and the ``beyond``
case (a set larger than an emulated card). ``chunked`` holds the schedule and sizes the chunks.

``stream`` computes out = x + y chunk by chunk and copies each result back; ``reduce`` sums x.
Work per step: ``bytes`` as the on-device pattern counts them, ``h2d_bytes`` and ``d2h_bytes``
over the host link, and the ``chunk_bytes`` and ``chunks`` used.
"""
from __future__ import annotations

import numpy as np

from harness.measure.guards import budget as budgets
from harness.measure.guards.workingset import need_host
from harness.measure.workload import Workload
from harness.workloads.cupy.chunked import CudaLane, chunk_elements, run_chunks, spans
from harness.workloads.cupy.kernels import MOD_X, MOD_Y, check_reduce, check_stream

PATTERNS = ("stream", "reduce")
# Bytes of host memory per element of the stream: x, y and out for stream; x for reduce.
PER_ELEMENT = {"stream": 24, "reduce": 8}


def pinned(cupy, n: int, dtype=np.float64) -> np.ndarray:
    mem = cupy.cuda.alloc_pinned_memory(n * np.dtype(dtype).itemsize)
    return np.frombuffer(mem, dtype, n)


def fill_pinned(cupy, host: np.ndarray, value, chunk: int) -> None:
    """host[i] = value(i), computed on the GPU a chunk at a time and copied down."""
    for s, e in spans(host.size, chunk):
        value(cupy.arange(s, e, dtype=cupy.int64)).astype(host.dtype).get(out=host[s:e])


def streamed(cupy, pattern: str, n: int, device_bytes: int | None) -> Workload:
    """``pattern`` over ``n`` float64 elements held in pinned host memory, streamed through device
    buffers that fit in ``device_bytes``."""
    chunk = chunk_elements(n, 8, PER_ELEMENT[pattern] // 8, device_bytes)
    x = pinned(cupy, n)
    fill_pinned(cupy, x, lambda i: i % MOD_X, chunk)
    pieces = spans(n, chunk)
    lanes = tuple(CudaLane(cupy) for _ in range(3))
    xb = [cupy.empty(chunk, dtype=cupy.float64) for _ in range(2)]

    def load_x(k, s, e):
        xb[k][:e - s].set(x[s:e], stream=lanes[0].stream)

    if pattern == "stream":
        y, out = pinned(cupy, n), pinned(cupy, n)
        fill_pinned(cupy, y, lambda i: i % MOD_Y, chunk)
        out.fill(np.nan)
        yb = [cupy.empty(chunk, dtype=cupy.float64) for _ in range(2)]
        ob = [cupy.empty(chunk, dtype=cupy.float64) for _ in range(2)]

        def load(k, s, e):
            load_x(k, s, e)
            yb[k][:e - s].set(y[s:e], stream=lanes[0].stream)

        def compute(k, s, e):
            cupy.add(xb[k][:e - s], yb[k][:e - s], out=ob[k][:e - s])

        def store(k, s, e):
            ob[k][:e - s].get(stream=lanes[2].stream, out=out[s:e], blocking=False)

        step = lambda: run_chunks(pieces, load, compute, store, lanes=lanes)
        check = lambda: check_stream(np, out, n)
        work = {"bytes": 24 * n, "h2d_bytes": 16 * n, "d2h_bytes": 8 * n}
    else:
        partials = cupy.full(len(pieces), np.nan)

        def compute(k, s, e):
            cupy.sum(xb[k][:e - s], out=partials[s // chunk])

        step = lambda: run_chunks(pieces, load_x, compute, lanes=lanes)
        check = lambda: check_reduce(partials.sum(), n)
        work = {"bytes": 8 * n, "h2d_bytes": 8 * n, "d2h_bytes": 0}

    work.update(working_set_bytes=n * PER_ELEMENT[pattern], chunk_bytes=8 * chunk, chunks=len(pieces))
    return Workload(step=step, check=check, work=work, sync=cupy.cuda.runtime.deviceSynchronize, gpus=(0,),
                    warmup=1, repeat=5)


def on_budget(cupy, budget: budgets.Budget, pattern: str, nbytes: int, what: str) -> Workload:
    """``streamed`` for a working set of ``nbytes``, CuPy's pool capped at ``budget``."""
    need_host(nbytes, f"the pinned host copy of {what}")
    budgets.enforce_pool(budget, cupy.get_default_memory_pool())
    return streamed(cupy, pattern, nbytes // PER_ELEMENT[pattern], budget.limit_bytes)
