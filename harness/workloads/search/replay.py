"""A what-fits search run again on paper: each probe answered from a committed run's probe log
(``probe_log.ProbeLog``'s entries), so that two ways of searching are counted against the same
answers without a GPU. A size the log cannot answer stops the replay (``Unprobed``): a replay
never guesses what a probe would have said.

What the log answers under a cap: a size that fit under that cap or a smaller one fits (the
allocator makes the same requests whatever its cap), one that failed under it or a larger one
does not (``ProbeLog.answers``); and a size that fit under a larger cap without ever reserving
more than this one fits too, since the cap never came into play.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.measure.outcomes import OK
from harness.measure.records.store import PROBES_SUFFIX, load_paths, read_lines
from harness.workloads.search import fits, predict
from harness.workloads.search.probe_log import ProbeLog


class Unprobed(Exception):
    """The replayed search asked for a size the log does not answer under its cap."""

    def __init__(self, n: int):
        super().__init__(f"size {n:,} was never probed under this cap: the log cannot answer it")
        self.n = n


class Oracle:
    """``probe(n)`` and ``many(sizes)`` answered from ``entries`` under ``cap``; ``results`` keeps
    each answer as the probe would have reported it (its peaks), in order; ``rounds`` counts the
    calls (probes side by side are one round of device time)."""

    def __init__(self, entries: list[dict], key: dict, cap: int):
        log = ProbeLog()
        log.kept = [e for e in entries if e["key"] == key]
        self.known = log.answers(key, cap)
        self.peaks = {}
        for e in log.kept:
            if e["fits"] and e.get("peak_reserved"):
                self.peaks.setdefault(e["n"], e)
                if e["peak_reserved"] <= cap:
                    self.known.setdefault(e["n"], True)
        self.results: list[dict] = []
        self.rounds = 0

    def _answer(self, n: int) -> bool:
        if n not in self.known:
            raise Unprobed(n)
        ok = self.known[n]
        self.results.append(dict(self.peaks.get(n, {}), n=n, fits=ok) if ok else {"n": n, "fits": False})
        return ok

    def __call__(self, n: int) -> bool:
        self.rounds += 1
        return self._answer(n)

    def many(self, sizes) -> list[bool]:
        self.rounds += 1
        return [self._answer(n) for n in sizes]


@dataclass(frozen=True)
class Replayed:
    largest: int | None  # None where the log could not answer a probe
    probes: int | None
    rounds: int | None
    unprobed: int | None = None  # the size the log could not answer


def replay(entries: list[dict], key: dict, cap: int, over: str, side_by_side: int = 1, new: bool = True,
           hint: tuple = (None, None)) -> Replayed:
    """The search of ``key`` under ``cap`` with nothing known but ``hint`` (an earlier run's
    bracket, as a record's ``earlier_bracket`` keeps it; none: a cold start), answered from
    ``entries``: ``new``, guesses from ``predict.guess`` confirmed with the sizes after them;
    else the search before it (``fits.linear_estimate``'s guesses between their neighbours)."""
    oracle = Oracle(entries, key, cap)
    unit, limit = fits.UNITS[over], fits.LIMITS[over]
    start = key["seq_len"] if over == "seq_len" else 1

    def estimate():
        if not new:
            return fits.linear_estimate([(r["n"], r["peak_reserved"]) for r in oracle.results
                                         if r["fits"] and r.get("peak_reserved")], cap)
        return predict.guess(oracle.results, cap, over, unit, limit)

    try:
        found = fits.largest_fitting(oracle, start=start, limit=limit, estimate=estimate, unit=unit,
                                     probe_many=oracle.many if side_by_side > 1 else None, confirm=new,
                                     hint=tuple(hint))
    except Unprobed as e:
        return Replayed(None, None, None, unprobed=e.n)
    return Replayed(found.largest, found.probes, oracle.rounds)


# Where a replayed search starts: from nothing, or from the earlier run's bracket its record kept.
MODES = {"cold": lambda check: (None, None),
         "hinted": lambda check: tuple(check.get("earlier_bracket") or (None, None))}


def committed(results: Path) -> dict:
    """Every committed what-fits search under ``results`` replayed both ways, from a cold start and
    from the hint its record kept, against the probes its machine's runs logged (all of them: one
    run's alone seldom holds the sizes another path asks for): machine -> mode -> totals over the
    searches both ways could replay, and how many there were."""
    out = {}
    for machine in sorted(p for p in (Path(results) / "records").iterdir() if p.is_dir()):
        entries = [obj for log in sorted(machine.glob("*" + PROBES_SUFFIX)) for _, obj in read_lines(log)[0]]
        records = [r for r in load_paths(sorted(machine.glob("*.jsonl"))).records
                   if r.case == "fits" and r.outcome == OK]
        if records:
            out[machine.name] = {mode: _totals(entries, records, hint) for mode, hint in MODES.items()}
    return out


def _totals(entries, records, hint_of) -> dict:
    totals = {"searches": 0, "replayed": 0, "same_answer": 0, "probes_before": 0, "probes_now": 0,
              "rounds_before": 0, "rounds_now": 0}
    for record in records:
        params, check = record.params, record.check
        over, allocator = params.get("over", "batch"), params.get("allocator") or "default"
        key = {**{k: params[k] for k in ("device", "workload", "technique", "vocab", "width", "depth", "seq_len")},
               "over": over, **({} if allocator == "default" else {"allocator": allocator})}
        width, hint = check.get("side_by_side") or 1, hint_of(check)
        before = replay(entries, key, check["budget_bytes"], over, width, new=False, hint=hint)
        now = replay(entries, key, check["budget_bytes"], over, width, new=True, hint=hint)
        totals["searches"] += 1
        if before.largest is None or now.largest is None:
            continue
        totals["replayed"] += 1
        totals["same_answer"] += before.largest == now.largest
        for name, found in (("before", before), ("now", now)):
            totals[f"probes_{name}"] += found.probes
            totals[f"rounds_{name}"] += found.rounds
    return totals


if __name__ == "__main__":
    import json
    import sys
    if len(sys.argv) != 2:
        sys.exit("usage: python -m harness.workloads.search.replay RESULTS_DIR")
    print(json.dumps(committed(Path(sys.argv[1])), indent=1))
