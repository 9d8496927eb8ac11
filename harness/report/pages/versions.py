"""The index's "Across library versions": whether a case's step time moved with its libraries.

Two records of one case, parameters and machine kind under two sets of library versions differ by
more than their versions: they may come from two hosts of that kind, and hosts differ (CPU, PCIe
link, NUMA placement) by more than most upgrades move a step. So a pair reads as a version effect
only where its step-time ratio passes the case's noise floor (``harness.report.noise``): the
within-host floor where both records name one host, the across-host floor otherwise. The floors
are learned from the same records with each set of versions kept apart, so the difference under
test is never counted as noise.
"""
from __future__ import annotations

import math
from collections import defaultdict

from harness.measure.instruments.machine import host_key
from harness.measure.outcomes import OK
from harness.report import noise
from harness.report.pages.fmt import fmt_params
from harness.report.model import VERSION_LIBS, Row, age, libraries, versions_of

ABSENT = "none"  # a library one side of a pair lacks


def verdict(ratio: float, floor: float, same_host: bool | None, learned: bool = True) -> str:
    """How a step-time ratio (new over base) reads against the case's noise floor ``floor``
    (``Floor.fraction``: the least rise that is not noise) of the kind ``same_host`` asked for.

    The test is symmetric in log, |log ratio| > log(1 + floor), so 1.1 and 1/1.1 are equally far
    from noise. ``same_host`` None: a record names no host, so nothing says the hosts are one.
    ``learned`` False: the floor is a stated default (no host ran the case twice under one
    stack), so a ratio past it is a possible effect until a repeat of both runs agrees."""
    if not 0 < ratio < math.inf:
        return "no ratio"
    if abs(math.log(ratio)) <= math.log1p(floor):
        if same_host:
            return "within same-host noise"
        return f"within cross-host noise ({'hosts differ' if same_host is False else 'host not recorded'})"
    slower = ratio > 1  # pragma: no mutate (>= reads alike: a ratio of 1 is within any floor, all >= 0)
    moved = f"{abs(ratio - 1):.0%} {'slower' if slower else 'faster'}"
    return (f"version effect: {moved}" if learned
            else f"possible version effect: {moved} (one run each: repeat to confirm)")


def what_differs(base: dict[str, str], new: dict[str, str]) -> str:
    """``numpy 1.26.4 → 2.4.6``: only the libraries whose versions differ (the full sets hide the
    one change among the unchanged), in ``VERSION_LIBS`` order. ``base`` and ``new`` are two
    records' ``libraries``, which name only ``VERSION_LIBS``."""
    return "; ".join(f"{k} {base.get(k, ABSENT)} → {new.get(k, ABSENT)}" for k in VERSION_LIBS
                     if base.get(k) != new.get(k)) or "same versions"


def created(row: Row) -> float:
    return row.record.created


def host(row: Row) -> str:
    return host_key(row.record.environment)


def pick(base: list[Row], new: list[Row]) -> tuple[Row, Row]:
    """One record of each side: where both ran on one host, that host's latest of each (a box
    running the suite under two interpreters compares the versions and nothing else); else
    each side's latest."""
    shared = ({host(r) for r in base} & {host(r) for r in new}) - {""}
    if not shared:
        return max(base, key=created), max(new, key=created)
    latest = max((r for r in new if host(r) in shared), key=created)
    return max((r for r in base if host(r) == host(latest)), key=created), latest


def host_text(base: Row, new: Row) -> str:
    """``same 5f34f975``, ``differs 5f34f975 → 3afbcb29``, or ``not recorded``."""
    a, b = host(base)[:8], host(new)[:8]
    if not (a and b):
        return "not recorded"
    return f"same {a}" if a == b else f"differs {a} → {b}"


def compare(base: Row, new: Row, floors: noise.Floors) -> dict:
    """One line of the table: the pair, what differs, where it ran, the ratio and its reading."""
    same = noise.same_host(base.record, new.record)
    same_host = same if host(base) and host(new) else None
    floor = floors.floor(noise.key_of(base.record), noise.pair_class(base.record, new.record), same)
    ratio = new.record.timing.median_s / base.record.timing.median_s  # a record's median is > 0: Record checks it
    text = verdict(ratio, floor.fraction, same_host, floor.learned)
    return {"base": base, "new": new, "differs": what_differs(libraries(base.record), libraries(new.record)),
            "host": host_text(base, new), "ratio": ratio, "floor": floor,
            "verdict": text, "effect": "version effect" in text}


def learned(rows: list[Row]) -> noise.Floors:
    """The noise floors of the records the pages are built from, each set of versions apart."""
    return noise.Floors([r.record for r in rows], stack=versions_of)


def comparisons(rows: list[Row], floors: noise.Floors) -> list[dict]:
    """Each case, parameters and machine kind measured under more than one set of library
    versions: every other set against the set of the newest versions (``age``), the stack the
    machine's tables show, so each line reads as the upgrade to it, base → new, with the
    step-time ratio new over base, and a stack made to compare one library differs in that one."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.record.outcome == OK and r.versions:  # an ok record has its timing: Record checks it
            groups[(r.case, fmt_params(r.record.params), r.machine)][r.versions].append(r)
    out = []
    for (case, params, machine), sets in sorted(groups.items()):
        order = sorted(sets, key=lambda v: (age(libraries(sets[v][0].record)), v))
        for versions in order[:-1]:
            line = compare(*pick(sets[versions], sets[order[-1]]), floors)
            out.append({"case": case, "params": params, "machine": machine, **line})
    return out
