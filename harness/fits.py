"""What fits: the largest batch that trains under a memory budget, found by search.

The search is generic over ``probe(n) -> bool`` (doubling until a probe fails, then bisecting
between the last fit and the first failure), so tests can hand it a fake memory model. It
assumes fitting is monotone in ``n``: if n does not fit, nothing larger does.

For real runs every probe is a FRESH process (``SubprocessProber``, ``python -m
harness.fits_probe``): an out-of-memory error leaves the caching allocator fragmented and
the CUDA context in an unknown state, so a second probe in the same process would measure the
first one's leftovers. Each probe caps its allocator at the budget with
``torch.cuda.set_per_process_memory_fraction(budget / card total)``.

Budgets are in GB (10^9 bytes): a card sold as "N GB" holds N GiB or a little under (an H100
80GB reports 79.6 GiB), so N x 10^9 bytes fits under every such card with room left for the
CUDA context, which the allocator's cap does not count.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from .outcomes import Skip

GB = 10**9
BUDGETS = ("16GB", "24GB", "40GB", "80GB", "card")
LIMIT = 2**16  # no workload here trains a batch this large on one card: the search stops there


@dataclass
class Search:
    largest: int  # 0 when even ``start`` does not fit
    probed: list = field(default_factory=list)  # (n, fits) in the order probed

    @property
    def probes(self) -> int:
        return len(self.probed)


def largest_fitting(probe, start: int = 1, limit: int = LIMIT) -> Search:
    """The largest n in [start, limit] with ``probe(n)`` true; never probes an n twice."""
    search = Search(largest=0)

    def fits(n):
        ok = bool(probe(n))
        search.probed.append((n, ok))
        return ok

    if not fits(start):
        return search
    low, high = start, None  # low fits; high (once known) does not
    while high is None:
        if low >= limit:
            search.largest = limit
            return search
        n = min(2 * low, limit)
        if fits(n):
            low = n
        else:
            high = n
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    search.largest = low
    return search


def budget_bytes(budget: str, card_total: int) -> int:
    """Bytes of the budget on a card of ``card_total`` bytes; ``Skip`` when the card is smaller."""
    if budget == "card":
        return card_total
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    wanted = int(budget[:-2]) * GB
    if wanted > card_total:
        raise Skip(f"budget {budget} is larger than this card ({card_total / GB:.1f} GB): "
                   f"run it on a card with {budget} or more")
    return wanted


class SubprocessProber:
    """``probe(n)`` runs ``argv_of(n)`` in a new process, which prints one JSON line with at
    least ``fits`` and ``pid``. A probe that crashes (not an out-of-memory, which the probe
    reports as ``fits: false``) raises, so a broken probe is never read as "does not fit"."""

    def __init__(self, argv_of, timeout_s: float = 600, env: dict | None = None):
        self.argv_of, self.timeout_s, self.env = argv_of, timeout_s, env
        self.results: list[dict] = []

    def __call__(self, n: int) -> bool:
        done = subprocess.run(self.argv_of(n), capture_output=True, text=True, timeout=self.timeout_s,
                              env=self.env)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"probe at n={n} failed (exit {done.returncode}), fix the probe before "
                               f"reading its result: {done.stderr.strip()[-2000:]}")
        result = dict(json.loads(lines[-1]), n=n)
        self.results.append(result)
        return bool(result["fits"])


OVER = ("batch", "seq_len")  # what a search grows: the batch, or the length of one sequence


def probe_argv(params: dict, fraction: float, over: str = "batch"):
    """argv_of for ``harness.fits_probe``: the case's parameters, n, the memory fraction, and
    whether n is the batch or the sequence length."""
    if over not in OVER:
        raise ValueError(f"a search grows one of {', '.join(OVER)}, got {over!r}")
    return lambda n: [sys.executable, "-m", "harness.fits_probe", json.dumps(params), str(n), repr(fraction), over]


def probe_env() -> dict:
    """The probe imports ``harness`` from this checkout, wherever it was started from."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
