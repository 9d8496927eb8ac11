"""Access patterns over a working set, generic over the array module (NumPy or CuPy).

Each pattern allocates its arrays through ``xp`` (so through whatever allocator CuPy has been
given), fills them on the device with values whose results are known in closed form, counts
the bytes and operations one step must move or do, and checks its result against a reference:
a closed form over every element, plus NumPy on a sample. Outputs are poisoned (NaN) first,
so a step that writes nothing fails its check. Values are small integers, so every sum below is
exact in float64 and every product exact in float32 (also under TF32), and checks are equalities.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from harness.measure.outcomes import CheckFailed

PATTERNS = ("stream", "reduce", "matmul", "gather")
FILL_CHUNK = 2**25  # elements per fill chunk: bounds the temporaries a fill makes
MOD_X, MOD_Y = 1021, 1019
MATMUL_K = 1024  # A (m x K) @ B (K x K): K/4 FLOP per byte, compute-bound on any GPU here
GATHER_COUNT = 2**24
SAMPLE = 4096


def to_host(xp, a) -> np.ndarray:
    return xp.asnumpy(a) if hasattr(xp, "asnumpy") else np.asarray(a)


def fill(a, xp, value: Callable, chunk: int = FILL_CHUNK) -> None:
    """a.flat[i] = value(i) for every i, chunk by chunk, on the array's own device."""
    flat = a.reshape(-1)
    for s in range(0, flat.size, chunk):
        e = min(s + chunk, flat.size)
        flat[s:e] = value(xp.arange(s, e, dtype=xp.int64)).astype(flat.dtype)


def sum_mod(n: int, m: int) -> int:
    """sum(i % m for i in range(n)), in closed form."""
    q, r = divmod(n, m)
    return q * m * (m - 1) // 2 + r * (r - 1) // 2


def poisoned(xp, shape, dtype):
    return xp.full(shape, np.nan, dtype=dtype)


def require(name: str, ok: bool, detail: str) -> None:
    if not ok:
        raise CheckFailed(f"{name}: {detail}")


@dataclass
class Pattern:
    name: str
    step: Callable[[], None]
    check: Callable[[], dict]
    # What the kernel must move or do per step ("bytes", "flops"), and what it holds.
    work: dict
    arrays: list = field(default_factory=list)  # every array of the working set
    inputs: list = field(default_factory=list)  # those the step only reads

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)


def samples(n: int, count: int = SAMPLE) -> np.ndarray:
    return np.unique(np.random.default_rng(1).integers(0, n, size=min(count, n)))


def check_stream(xp, out, n: int) -> dict:
    """out[i] = i % MOD_X + i % MOD_Y: every element through the sum, a sample one by one."""
    total = float(out.sum())
    expected = sum_mod(n, MOD_X) + sum_mod(n, MOD_Y)
    require("stream", total == expected, f"sum of the output is {total}, expected {expected}")
    at = samples(n)
    got = to_host(xp, out[xp.asarray(at)])
    require("stream", np.array_equal(got, at % MOD_X + at % MOD_Y), "sampled elements differ from NumPy")
    return {"exact": True, "elements": n}


def check_reduce(total, n: int) -> dict:
    got = float("nan") if total is None else float(total)
    require("reduce", got == sum_mod(n, MOD_X), f"sum is {got}, expected {sum_mod(n, MOD_X)}")
    return {"exact": True, "elements": n}


def stream_inputs(xp, n: int):
    x = xp.empty(n, dtype=xp.float64)
    y = xp.empty(n, dtype=xp.float64)
    fill(x, xp, lambda i: i % MOD_X)
    fill(y, xp, lambda i: i % MOD_Y)
    return x, y


def stream(xp, nbytes: int) -> Pattern:
    """out = x + y: reads two arrays and writes one, each element once."""
    n = nbytes // 24
    x, y = stream_inputs(xp, n)
    out = poisoned(xp, n, xp.float64)
    return Pattern("stream", lambda: xp.add(x, y, out=out), lambda: check_stream(xp, out, n), {"bytes": 24 * n},
                   arrays=[x, y, out], inputs=[x, y])


def reduce(xp, nbytes: int) -> Pattern:
    """The sum of one array: reads each element once."""
    n = nbytes // 8
    x = xp.empty(n, dtype=xp.float64)
    fill(x, xp, lambda i: i % MOD_X)
    result = {}

    def step():
        result["sum"] = x.sum()

    return Pattern("reduce", step, lambda: check_reduce(result.get("sum"), n), {"bytes": 8 * n},
                   arrays=[x], inputs=[x])


def _a_value(i):
    return i % 7 - 3


def _b_value(i):
    return i % 5 - 2


def matmul(xp, nbytes: int, k: int = MATMUL_K) -> Pattern:
    """C = A @ B in float32, A and C (m x k) taking the working set: compute-bound."""
    m = max(1, (nbytes - 4 * k * k) // (8 * k))
    a = xp.empty((m, k), dtype=xp.float32)
    b = xp.empty((k, k), dtype=xp.float32)
    fill(a, xp, _a_value)
    fill(b, xp, _b_value)
    c = poisoned(xp, (m, k), xp.float32)

    def check():
        # Every element: sum(C) = colsum(A) . rowsum(B), by other kernels, exact in float64.
        total = float(c.sum(dtype=xp.float64))
        expected = float((a.sum(axis=0, dtype=xp.float64) * b.sum(axis=1, dtype=xp.float64)).sum())
        require("matmul", total == expected, f"sum of C is {total}, expected {expected}")
        rows = samples(m, 64)
        a_rows = _a_value(rows[:, None] * k + np.arange(k)).astype(np.float64)
        b_host = _b_value(np.arange(k * k).reshape(k, k)).astype(np.float64)
        got = to_host(xp, c[xp.asarray(rows)])
        require("matmul", np.array_equal(got, a_rows @ b_host), "sampled rows differ from NumPy")
        return {"exact": True, "m": m, "k": k}

    return Pattern("matmul", lambda: xp.matmul(a, b, out=c), check,
                   {"flops": 2 * m * k * k, "bytes": 4 * (2 * m * k + k * k)},
                   arrays=[a, b, c], inputs=[a, b])


def gather(xp, nbytes: int, count: int = GATHER_COUNT) -> Pattern:
    """out = table[idx] for random idx: the table is the working set, as an embedding is."""
    count = min(count, max(1, nbytes // 64))
    n = max(1, (nbytes - 16 * count) // 8)
    table = xp.empty(n, dtype=xp.float64)
    fill(table, xp, lambda i: i)  # table[i] = i: exact in float64 below 2**53
    idx = xp.asarray(np.random.default_rng(2).integers(0, n, size=count, dtype=np.int64))
    out = poisoned(xp, count, xp.float64)

    def check():
        require("gather", bool((out == idx.astype(xp.float64)).all()), "an element is not table[idx]")
        return {"exact": True, "gathered": count, "table_elements": n}

    # Useful bytes: each index read, each value read and each result written once.
    return Pattern("gather", lambda: xp.take(table, idx, out=out), check, {"bytes": 24 * count},
                   arrays=[table, idx, out], inputs=[table, idx])


BUILDERS = {"stream": stream, "reduce": reduce, "matmul": matmul, "gather": gather}
assert set(BUILDERS) == set(PATTERNS)


def build(name: str, xp, nbytes: int) -> Pattern:
    return BUILDERS[name](xp, nbytes)
