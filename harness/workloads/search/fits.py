"""What fits: the largest batch that trains under a memory budget, found by search.

The search is generic over ``probe(n) -> bool`` (doubling until a probe fails, then bisecting
between the last fit and the first failure, then checking the sizes just after the answer), so
tests can hand it a fake memory model. Fitting need not be monotone in ``n``: the answer is the
largest size that fits, the sizes under it seen to fail kept beside it (``largest_fitting`` says
why, and how few probes establish it). A probe costs a process start, a model build and two steps
(seconds on a GPU), so where the probes report their peak memory an estimate from the first few
jumps close to the answer and only the last few sizes around it are probed. Where earlier runs
searched the same case (this machine's first, else another's: a budget caps the same bytes on every
card), the sizes they found either side of the answer are probed first and their peaks join the
estimate's line (``probe_log.EarlierRuns``): a search measured before costs those two probes and
the size after if nothing changed, and is exact either way, because only this run's probes bound
it.

For real runs every probe is a FRESH process (``SubprocessProber``, ``python -m
harness.cases.fits_probe``, forked with torch imported already inside a
``harness.measure.guards.preloaded.cases()`` block): an out-of-memory error leaves the caching
allocator fragmented and the CUDA context in an unknown state, so a second probe in the same
process would measure the first one's leftovers. Each probe caps its allocator at the budget's bytes exactly
(``harness.measure.guards.budget.cap_torch``), so one budget is one cap on every card.

Budgets are in GB (10^9 bytes): a card sold as "N GB" holds N GiB or a little under (an H100
80GB reports 79.6 GiB), so N x 10^9 bytes fits under every such card with room left for the
CUDA context, which the allocator's cap does not count.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.measure.guards import locks, preloaded
from harness.measure.guards.lifeline import PARENT_ENV

# What a probe holds outside its allocator's cap (the CUDA context, its modules), with room to
# spare: probes run side by side only where each can have its cap and this much more.
PROBE_OVERHEAD = 2 * 2**30
LIMIT = 2**16  # no workload here trains a batch this large on one card: the search stops there
# Where each search stops. One sequence grows memory far slower per token than a batch does per
# sample: a card holds more tokens than a batch limit would let the search try.
LIMITS = {"batch": LIMIT, "seq_len": 2**20}
# What a search steps by: one sample of a batch; 128 tokens of one sequence (an answer to the
# token would cost seven more probes, and attention kernels tile by blocks of 64 or 128).
UNITS = {"batch": 1, "seq_len": 128}


# A probe whose two steps run longer than this is a size no one trains at: the search stops there,
# and its answer is a lower bound (more may fit in memory). A long sequence's attention grows as its
# square: without a bound, one probe near 2**20 tokens would take hours.
PROBE_TIMEOUT_S = 240
HOST_KILLED = "killed by SIGKILL: the host's memory ran out (the kernel's out-of-memory killer)"


class TooSlow(Exception):
    """A probe at ``n`` ran past its time limit, fitting or not; ``answered``: the sizes probed
    beside it that did answer ({size: fits}), which its search keeps."""

    def __init__(self, n: int, seconds: float, answered: dict | None = None):
        super().__init__(f"the probe at n={n} ran past {seconds:g} s")
        self.n, self.seconds, self.answered = n, seconds, dict(answered or {})


@dataclass
class Search:
    largest: int  # 0 when even ``start`` does not fit
    probed: list = field(default_factory=list)  # (n, fits) in the order probed
    too_slow: int | None = None  # the size whose probe ran past its time limit, where the search stopped
    failed_below: list = field(default_factory=list)  # sizes under ``largest`` seen to fail, ascending

    @property
    def probes(self) -> int:
        return len(self.probed)


# The sizes over an answer that must fail before it stands: the one after it and the next
# (``largest_fitting`` says why).
CONFIRM_ABOVE = 2


def largest_fitting(probe, start: int = 1, limit: int = LIMIT, estimate=None, known=None,
                    probe_many=None, unit: int = 1, slow: int | None = None, hint: tuple = (None, None),
                    confirm: bool = False) -> Search:
    """The largest n in [start, limit] that fits, once the ``CONFIRM_ABOVE`` sizes after it are
    seen not to (or n is ``limit``); 0 where ``start`` does not fit. Never probes an n twice.

    Why this rule: memory need not grow monotonically with n. What a size allocates grows with
    it, and where that alone passes the cap nothing fits; but what the caching allocator holds
    besides (blocks split for one request and too small for the next) moves from one size to the
    next, so a size well under the top can leave a request no free block holds where larger
    sizes do not (an LM under bf16 autocast and checkpointing fails at one batch and fits at the
    next, the top a few further). A search that stops at the first failure it meets answers
    whichever boundary its path ran into, and two searches of one case under one cap answer
    apart. Such spikes can come anywhere under the top, so the size under the first failure
    would need every size under the answer probed to be sure of; a fit past a failure comes only
    near the top, where the allocations themselves near the cap, so a few probes after the
    answer pin the largest size that fits whatever the path. It is also what a reader asks of
    what fits: the largest batch that trains. The spikes the search saw under it are kept
    (``failed_below``), so that a record says where fitting was not monotone, and no reader
    takes every smaller size for granted.

    How few probes establish it: a probe is deterministic (one size, one code, the same requests
    to the allocator), so probing a failure again says nothing; its neighbours do. Once a
    boundary is bracketed (n fits, n + 1 does not: the doubling, guess, gallop and bisection
    below), the sizes up to n + ``CONFIRM_ABOVE`` are probed (side by side where ``probe_many``
    allows): a fit among them moves the search over it, and a boundary is bracketed again from
    there. It rests on one assumption: spikes come alone, and not at ``start`` (where the room
    left is widest, a failure is the case outgrowing the cap), so ``CONFIRM_ABOVE`` failures in a
    row are the top, not a spike. Under it the answer is the same whatever the path (known
    sizes, hints, guesses). The margin is a trade: each size of it is a probe more in every
    search; two see past a lone spike. Where the assumption fails (the allocator's replay,
    ``harness.workloads.search.replayed``, finds runs of failing sizes with fits past them, and
    probes at its sizes agree), the answer is the top of the run the path met, so a search aims
    at the replay's answer first where one was recorded.

    ``known`` maps sizes already answered to whether they fit, from probes already run
    (``probe_log.ProbeLog.answers``): they are never probed again, and the search brackets from
    the largest fit among them and the smallest failure over it. ``hint`` is (a size that fit,
    one that did not) as another run found them (``probe_log.EarlierRuns.bracket``), or as the
    allocator's replay predicts them (its answer and the size after it): both are probed first,
    where they lie inside what is known, so an answer that has not moved costs them and the size
    after; one that has moved costs a few more, never its exactness.

    ``estimate()``, where given, guesses the answer from the probes so far (None until it can):
    the search probes the guess, then gallops from it (one step, two, four...) until the boundary
    is bracketed, and bisects. A good guess costs about six probes in all, a bad one a few more;
    the answer is exact either way, because only probes decide it. ``probe_many(sizes)``, where
    memory allows several probes side by side, answers a cold start's first three sizes and the
    guess and its neighbours at once. A probe that raises ``TooSlow`` ends the search at the
    largest size that fit before it (a lower bound), with ``too_slow`` set. ``slow``, a size
    known too slow from probes already run (``probe_log.ProbeLog.too_slow``), bounds the search
    below it and is never waited for again; an answer just below it keeps it as ``too_slow``.

    ``unit``: the search probes multiples of it only, and its answer is exact to it (every size,
    ``known``, ``hint``, ``slow`` and the estimate included, stays in the caller's units).

    ``confirm``: side by side, a guess (the estimate's, or ``hint``'s fit) is probed with the
    ``CONFIRM_ABOVE`` sizes after it at once, which is the whole of the rule's proof where the guess
    is right: one round of probes. False probes the guess between its two neighbours, and a hint's
    sizes one at a time (the search before guesses were confirmed; ``replay`` counts both)."""
    if unit > 1:
        return _in_units(unit, probe, start, limit, estimate, known or {}, probe_many, slow, hint, confirm)
    if slow is not None and slow <= start:  # the first size is known too slow: no probe would answer in time
        return Search(largest=0, too_slow=slow)
    if slow is not None:
        limit = min(limit, slow - 1)
    probed, answers, too_slow = [], dict(known or {}), None
    fits, fits_many = _recorded(probed, answers, probe, probe_many)
    try:
        largest = _search(fits, fits_many, answers, start, limit, estimate, hint, confirm)
    except TooSlow as e:
        largest, too_slow = _top(answers, start, limit)[0] or 0, e.n
    else:
        if slow is not None and largest == limit:
            too_slow = slow
    return Search(largest=largest, probed=probed, too_slow=too_slow,
                  failed_below=sorted(n for n, ok in answers.items() if ok is False and n in range(start, largest)))


def _in_units(unit: int, probe, start, limit, estimate, known: dict, probe_many, slow, hint, confirm) -> Search:
    """``largest_fitting`` over k = n / ``unit``: fit rounds down, does-not-fit up (a size off
    the steps, which no search probes, says that much of the step beside it)."""
    def scaled(f):
        def call(k):
            try:
                return f(k * unit) if isinstance(k, int) else f([m * unit for m in k])
            except TooSlow as e:
                raise TooSlow(-(-e.n // unit), e.seconds, {n // unit: ok for n, ok in e.answered.items()}) from None
        return call

    def guess():
        n = estimate()
        return None if n is None else n // unit

    def bracket(pair):
        low, high = pair
        return None if low is None else low // unit, None if high is None else -(-high // unit)

    steps = {}
    for n, ok in known.items():  # where a fit and a failure round to one step, the failure holds
        k = n // unit if ok else -(-n // unit)
        steps[k] = steps.get(k, True) and bool(ok)
    found = largest_fitting(scaled(probe), start=-(-start // unit), limit=limit // unit,
                            estimate=guess if estimate else None, probe_many=scaled(probe_many) if probe_many else None,
                            known=steps, hint=bracket(hint), slow=None if slow is None else -(-slow // unit),
                            confirm=confirm)
    return Search(largest=found.largest * unit, probed=[(k * unit, ok) for k, ok in found.probed],
                  too_slow=None if found.too_slow is None else found.too_slow * unit,
                  failed_below=[k * unit for k in found.failed_below])


def _top(answers: dict, start: int, limit: int) -> tuple:
    """(the largest size in [start, limit] seen to fit, the smallest in it seen to fail over that,
    or from ``start`` where none fit), either None: a size past the limit bounds nothing."""
    low = max((n for n, ok in answers.items() if ok and start <= n <= limit), default=None)
    above = start if low is None else low + 1
    return low, min((n for n, ok in answers.items() if ok is False and above <= n <= limit), default=None)


def _under(high, limit: int) -> int:
    """The largest size a probe may ask for: the one under ``high`` (the smallest failure known
    over the answer, at most ``limit``), or ``limit`` where none is known."""
    return limit if high is None else high - 1


def _search(fits, fits_many, answers: dict, start: int, limit: int, estimate, hint: tuple, confirm: bool) -> int:
    """The answer, from what ``answers`` holds (each probe adds to it): a first fit (``hint``'s
    or ``start``), a boundary over the largest fit, and the sizes after it."""
    if answers.get(start) is False:
        return 0
    low, high = _top(answers, start, limit)
    if confirm and fits_many and hint[0] is not None:
        _trio(fits_many, hint[0], start - 1 if low is None else low, _under(high, limit))
    else:
        _try(fits, hint[0], above=start - 1 if low is None else low, top=_under(high, limit))
    low, high = _first_fit(fits, fits_many, start, *_top(answers, start, limit), limit)
    if low is None:
        return 0
    _try(fits, hint[1], above=low, top=_under(high, limit))
    while True:
        low, high = _top(answers, start, limit)
        if low >= limit:
            return limit
        if high is None or high - low > 1:
            _narrow(fits, fits_many, estimate, low, high, limit, confirm)
            continue
        after = [n for n in range(high, min(low + CONFIRM_ABOVE, limit) + 1) if n not in answers]
        if not after:
            return low
        fits_many(after) if fits_many else fits(after[0])


def _recorded(probed: list, answers: dict, probe, probe_many):
    """``probe`` and ``probe_many`` (None stays None) answering in bools from ``answers`` where
    they hold the size, else probing it: each probe kept in ``probed`` as (n, fits) in order and
    its answer in ``answers``; a size too slow to answer kept as (n, None). ``probe_many`` is
    never asked for no sizes (``SubprocessProber.many`` would start a pool of no processes)."""
    def fits(n):
        if n in answers:
            return answers[n]
        try:
            ok = bool(probe(n))
        except TooSlow:
            probed.append((n, None))
            raise
        probed.append((n, ok))
        answers[n] = ok
        return ok

    def fits_many(sizes):
        new = [n for n in sizes if n not in answers]
        try:
            got = [bool(ok) for ok in probe_many(new)] if new else []
        except TooSlow as e:
            kept = [(n, bool(e.answered[n])) for n in new if n in e.answered]
            probed.extend(kept + [(e.n, None)])
            answers.update(kept)
            raise
        probed.extend(zip(new, got))
        answers.update(zip(new, got))
        return [answers[n] for n in sizes]

    return fits, fits_many if probe_many else None


def _first_fit(fits, fits_many, start: int, low, high, limit: int):
    """(low, high) with ``low`` known to fit (``_top``'s, where it found one: at or above
    ``start``); (None, high) where ``start`` does not fit. With nothing known to fit, several sizes
    go at once where they can."""
    if low is not None:
        return low, high
    if fits_many:
        return _cold_start(fits_many, start, high, limit)
    return (start, high) if fits(start) else (None, high)


def _narrow(fits, fits_many, estimate, low: int, high, limit: int, confirm: bool = False) -> None:
    """Probes until a size that fits has the next one failing (or is the limit), from ``low``
    (fits) and ``high`` (does not; None: unknown): doubling until the estimate can guess,
    galloping from its guess, then bisecting. The caller reads the bracket from the answers."""
    guess = estimate() if estimate else None
    while high is None and low < limit and guess is None:
        n = min(2 * low, limit)
        low, high = (n, high) if fits(n) else (low, n)
        guess = estimate() if estimate else None
    if low >= limit:
        return
    if guess is not None:
        low, high = _gallop(fits, guess, low, high, limit, fits_many, confirm)
    if high is None:
        return
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)


def _trio(fits_many, n: int, above: int, top: int) -> dict:
    """Probes ``n`` and the ``CONFIRM_ABOVE`` sizes after it at once, those above ``above`` and at
    most ``top``: size -> fits (nothing where none lies there)."""
    sizes = [m for m in range(n, n + CONFIRM_ABOVE + 1) if above < m <= top]
    return dict(zip(sizes, fits_many(sizes))) if sizes else {}


def _try(fits, n, above: int, top: int) -> None:
    """Probes ``n`` where it lies above ``above`` and at most ``top``; nothing where it does not
    (or is None). The caller reads what it found from the answers."""
    if n is not None and above < n <= top:
        fits(n)


def _cold_start(fits_many, start: int, high, limit: int):
    """With nothing known, ``start`` and its double and quadruple at once (the span the estimate
    waits for): (the largest that fit or None, the smallest that did not or ``high``)."""
    sizes = [n for n in (start, 2 * start, 4 * start) if n <= _under(high, limit)]
    return _bracket(dict(zip(sizes, fits_many(sizes))), None, high)


def _bracket(answers: dict, low, high):
    """(low, high) narrowed by probes answered at once (size -> fits): the smallest failure, and
    the largest fit below it; either stays as it was (None included) where no answer moves it."""
    high = min([n for n, ok in answers.items() if not ok] + ([high] if high is not None else []), default=None)
    fit = [n for n, ok in answers.items() if ok and (high is None or n < high)]
    return max(fit + ([low] if low is not None else []), default=None), high


def _gallop(fits, guess: int, low: int, high: int | None, limit: int, fits_many=None, confirm: bool = False):
    """Probe ``guess`` (held strictly between low and high), then step away from it by 1, 2,
    4... in the direction it points until a probe lands on the other side: (low, high).
    ``fits_many`` probes the guess and its two neighbours at once, and the gallop goes on from
    there only if all three fell on one side (``confirm``: the guess and the two after it, the
    rule's proof where the guess is right). A bracket already closed (``high`` is ``low`` + 1)
    costs no probe: one at a time it asks for ``high``, which the search's ``fits`` answers from
    what it knows, and side by side for no size (``_recorded``)."""
    top = _under(high, limit)
    n = max(low + 1, min(guess, top))
    if fits_many is None:
        return _up(fits, n, high, top, 1) if fits(n) else _down(fits, low, n, 1)
    if confirm:
        answers = _trio(fits_many, n, low, top)
    else:
        sizes = [m for m in (n - 1, n, n + 1) if low < m <= top]
        answers = dict(zip(sizes, fits_many(sizes)))
    low, high = _bracket(answers, low, high)
    if all(answers.values()):
        return _up(fits, low, high, top, 2)
    if not any(answers.values()):
        return _down(fits, low, high, 2)
    return low, high


# A gallop goes on while its step is under 1/8 of the bracket it narrows; past that, bisecting
# the bracket costs fewer probes than galloping on (a guess far off, as the line through a long
# sequence's first peaks can be: memory grows faster than it there).
GALLOP_SPAN = 8


def _up(fits, low: int, high, top: int, step: int):
    while low < top and (high is None or GALLOP_SPAN * step < high - low):
        n = min(low + step, top)
        if not fits(n):
            return low, n
        low, step = n, 2 * step
    return low, high


def _down(fits, low: int, high: int, step: int):
    while GALLOP_SPAN * step < high - low:  # so high - step stays above low
        n = high - step
        if fits(n):
            return n, high
        high, step = n, 2 * step
    return low, high


def linear_estimate(points, cap: float):
    """The largest n whose memory stays under ``cap``, from (n, bytes) measured at sizes that fit
    (under this cap or a larger one). Where sizes measured either side of the cap are known, on
    the line between the nearest two: the answer lies between them. Else on the line through the
    largest and the largest at most 3/4 of its size, None until the sizes span a factor of four
    (1, 2, 4 from a cold start): nearest the boundary because the reserved bytes grow a little
    faster than linearly (the allocator's larger segments and workspaces come in at larger sizes); a
    quarter of the size apart because reserved bytes move in allocator segments, and two
    neighbours can even come out in the wrong order."""
    highest = {}
    for n, peak in points:  # two probes at one size (two budgets) give one point
        highest[n] = max(peak, highest.get(n, peak))
    under = [n for n, peak in highest.items() if peak <= cap]
    if under and max(highest) > max(under):  # every size over the largest under the cap is over it
        n0 = max(under)
        n1 = min(n for n in highest if n > n0)
        return _on_line(cap, (n0, highest[n0]), (n1, highest[n1]))
    if under:
        highest = {n: highest[n] for n in under}
    if not highest or max(highest) < 4 * min(highest):
        return None
    n1 = max(highest)
    n0 = max(n for n in highest if 4 * n <= 3 * n1)
    if highest[n1] <= highest[n0]:  # no growth: no line to read
        return None
    return _on_line(cap, (n1, highest[n1]), (n0, highest[n0]))


def _on_line(cap, a: tuple, b: tuple) -> int:
    """The largest n whose bytes on the rising line through ``a`` and ``b`` ((n, bytes) each)
    stay at most ``cap``, read from ``a``: exact where the bytes are whole (no slope rounded to
    a float, which can put the answer one size short)."""
    (n0, p0), (n1, p1) = a, b
    return int(n0 + (cap - p0) * (n1 - n0) // (p1 - p0))


class SubprocessProber:
    """``probe(n)`` runs ``argv_of(n)`` in a new process, which prints one JSON line with at
    least ``fits`` and ``pid``. A probe that crashes (not an out-of-memory, which the probe
    reports as ``fits: false``) raises, so a broken probe is never read as "does not fit"; one
    killed by SIGKILL ran the host out of memory (the kernel's out-of-memory killer), and does
    not fit. One that runs past ``timeout_s`` is killed, and raises ``TooSlow``.
    ``on_result(result)`` hears each answer as it comes (``probe_log.ProbeLog.add``).

    Each probe is told its parent's pid (``OOMBENCH_PARENT_PID``: this process's, or the fork
    server's that dies with it, ``preloaded.run``) and binds itself to it
    (``harness.measure.guards.lifeline.bind``): no probe outlives the search. While probes run, the
    lock of the GPU they use (CUDA device 0 here) is held, so no other run's search or launch
    measures on that card at the same time."""

    def __init__(self, argv_of, timeout_s: float = PROBE_TIMEOUT_S, env: dict | None = None, on_result=None):
        self.argv_of, self.timeout_s, self.env, self.on_result = argv_of, timeout_s, env, on_result
        self.results: list[dict] = []

    def __call__(self, n: int) -> bool:
        with self._gpu_held():
            return self._probe(n)

    def _gpu_held(self):
        return locks.gpus_held(locks.visible_gpu_uuids([0]))

    def _probe(self, n: int) -> bool:
        began = time.perf_counter()
        code, pid, out, err = self._run(n, began)
        if code == -signal.SIGKILL:
            # The kernel's out-of-memory killer: what the probe holds on the host (activations kept
            # on the CPU, offloaded state) outgrew the host's memory. No larger size fits, under any cap.
            self._answered({"fits": False, "killed": "SIGKILL", "pid": pid, "n": n,
                            "seconds": round(time.perf_counter() - began, 2), "reason": HOST_KILLED})
            return False
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if code != 0 or not lines:
            raise RuntimeError(f"probe at n={n} failed (exit {code}), fix the probe before "
                               f"reading its result: {err.strip()[-2000:]}")
        result = dict(json.loads(lines[-1]), n=n, seconds=round(time.perf_counter() - began, 2))
        self._answered(result)
        return bool(result["fits"])

    def _run(self, n: int, began: float) -> tuple[int, int, str, str]:
        """(exit status, pid, stdout, stderr) of the probe at ``n``; killed past ``timeout_s``: TooSlow."""
        done = preloaded.run(self.argv_of(n), self._environ(), self.timeout_s)
        if done.timed_out:
            self._answered({"fits": None, "too_slow": True, "pid": done.pid, "n": n,
                            "seconds": round(time.perf_counter() - began, 2)})
            raise TooSlow(n, self.timeout_s)
        return done.returncode, done.pid, done.stdout, done.stderr

    def _environ(self) -> dict:
        """A probe's environment: the one given (else this process's), and this process's pid."""
        return dict(os.environ if self.env is None else self.env, **{PARENT_ENV: str(os.getpid())})

    def _answered(self, result: dict) -> None:
        self.results.append(result)
        if self.on_result:
            self.on_result(result)

    def many(self, sizes) -> list[bool]:
        """One process per size, all at once: the caller has checked that memory holds them. Where
        one runs too slow, the smallest such size's TooSlow carries the others' answers."""
        from concurrent.futures import ThreadPoolExecutor
        if sizes:  # the fork server is started here: one started in a pool's thread would die with it
            preloaded.ready(self.argv_of(sizes[0]), self._environ())
        with self._gpu_held(), ThreadPoolExecutor(len(sizes)) as pool:
            futures = [(n, pool.submit(self._probe, n)) for n in sizes]
        answered, slow = {}, []
        for n, future in futures:
            try:
                answered[n] = future.result()
            except TooSlow as e:
                slow.append(e)
        if slow:
            first = min(slow, key=lambda e: e.n)
            raise TooSlow(first.n, first.seconds, answered)
        return [answered[n] for n in sizes]


OVER = ("batch", "seq_len")  # what a search grows: the batch, or the length of one sequence


def side_by_side(cap: int, free: int, wanted: int = 3) -> int:
    """How many probes under ``cap`` fit in ``free`` device bytes at once: ``wanted`` or 1."""
    return wanted if wanted * (cap + PROBE_OVERHEAD) <= free else 1


# The probe's entry. It reads its config back through the case registry, so it lives with the
# cases (``harness.workloads.search.fits_probe`` holds what it runs); here it is only a program to start.
PROBE_MODULE = "harness.cases.fits_probe"


def probe_argv(config, cap_bytes: int, over: str = "batch"):
    """argv_of for the probe: its own config, the ``tricks`` step the search starts from (a
    ``harness.cases.base.Config``, as its own ``to_json()`` writes it), then n, the cap in
    bytes, and what n grows (``over``, one of ``OVER``, as the fits case's config holds it)."""
    text = config.to_json()
    return lambda n: [sys.executable, "-m", PROBE_MODULE, text, str(n), str(int(cap_bytes)), over]


def probe_env() -> dict:
    """The probe imports ``harness`` from this checkout, wherever it was started from."""
    root = str(Path(__file__).resolve().parents[3])  # harness/workloads/search/fits.py -> the checkout
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
