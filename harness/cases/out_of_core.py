"""Explicit out-of-core streaming from pinned host memory: the baseline experts use in place of
unified memory (``harness.workloads.chunked`` holds the schedule).

The working set lives in pinned host memory and never needs to fit on the card, so fractions
above 1 need no opt-in: only host memory. Each step streams it through two device buffers:
``stream`` computes out = x + y chunk by chunk and copies each result back; ``reduce`` sums x.
Work per step: ``bytes`` as the on-device pattern counts them (so the figures compare with the
``unified`` case), ``h2d_bytes`` and ``d2h_bytes`` over the host link; the h2d rate is read
against the pinned host-to-device ceiling.
"""
from __future__ import annotations

import numpy as np

from harness.workloads.chunked import CudaLane, run_chunks, spans
from harness.workloads.kernels import MOD_X, MOD_Y, check_reduce, check_stream
from harness.measure.requirements import need_gpus
from harness.measure.workingset import FRACTIONS, card_total, need_host, working_set_bytes
from harness.cases.base import Case
from harness.measure.workload import Workload
from harness.cases.unified import need_cupy

PATTERNS = ("stream", "reduce")
CHUNK = 2**25  # elements: 256 MiB of float64 per buffer, long enough to hide each launch


def pinned(cupy, n: int, dtype=np.float64) -> np.ndarray:
    mem = cupy.cuda.alloc_pinned_memory(n * np.dtype(dtype).itemsize)
    return np.frombuffer(mem, dtype, n)


def fill_pinned(cupy, host: np.ndarray, value) -> None:
    """host[i] = value(i), computed on the GPU a chunk at a time and copied down."""
    for s, e in spans(host.size, CHUNK):
        value(cupy.arange(s, e, dtype=cupy.int64)).astype(host.dtype).get(out=host[s:e])


def build(pattern: str, fraction: float) -> Workload:
    devices = need_gpus(1)
    cupy = need_cupy()
    nbytes = working_set_bytes(fraction, card_total(devices))
    need_host(nbytes, "the pinned host copy of the working set")
    per_element = 24 if pattern == "stream" else 8
    n = nbytes // per_element
    x = pinned(cupy, n)
    fill_pinned(cupy, x, lambda i: i % MOD_X)
    pieces = spans(n, CHUNK)
    lanes = tuple(CudaLane(cupy) for _ in range(3))
    xb = [cupy.empty(CHUNK, dtype=cupy.float64) for _ in range(2)]

    def load_x(k, s, e):
        xb[k][:e - s].set(x[s:e], stream=lanes[0].stream)

    if pattern == "stream":
        y, out = pinned(cupy, n), pinned(cupy, n)
        fill_pinned(cupy, y, lambda i: i % MOD_Y)
        out.fill(np.nan)
        yb = [cupy.empty(CHUNK, dtype=cupy.float64) for _ in range(2)]
        ob = [cupy.empty(CHUNK, dtype=cupy.float64) for _ in range(2)]

        def load(k, s, e):
            load_x(k, s, e)
            yb[k][:e - s].set(y[s:e], stream=lanes[0].stream)

        def compute(k, s, e):
            cupy.add(xb[k][:e - s], yb[k][:e - s], out=ob[k][:e - s])

        def store(k, s, e):
            ob[k][:e - s].get(stream=lanes[2].stream, out=out[s:e], blocking=False)

        step = lambda: run_chunks(pieces, load, compute, store, lanes=lanes)  # noqa: E731
        check = lambda: check_stream(np, out, n)  # noqa: E731
        work = {"bytes": 24 * n, "h2d_bytes": 16 * n, "d2h_bytes": 8 * n}
    else:
        partials = cupy.full(len(pieces), np.nan)

        def compute(k, s, e):
            cupy.sum(xb[k][:e - s], out=partials[s // CHUNK])

        step = lambda: run_chunks(pieces, load_x, compute, lanes=lanes)  # noqa: E731
        check = lambda: check_reduce(partials.sum(), n)  # noqa: E731
        work = {"bytes": 8 * n, "h2d_bytes": 8 * n, "d2h_bytes": 0}

    work["working_set_bytes"] = n * per_element
    return Workload(step=step, check=check, work=work, sync=cupy.cuda.runtime.deviceSynchronize, gpus=(0,),
                    warmup=1, repeat=5)


# Every chunk crosses the pinned host-to-device link; the overlap hides the compute behind it.
CASE = Case(name="out_of_core", params={"pattern": PATTERNS, "fraction": FRACTIONS}, build=build,
            bound_by=lambda pattern, fraction: "h2d_pinned", doc=__doc__)
