""""Which way out?": for a card and a workload, the ways out that fit, cheapest first, from the records.

The rule lives in ``fits`` and ``choose``, pure functions of ``Trial`` (one record, reduced to what
the rule reads), so it is unit-tested without a page. ``trials`` and ``workloads`` turn page rows
into trials; the template only lays out what ``view`` returns.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

from harness.measure.budget import budget_bytes
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK, Skip
from harness.report.tables import allocated_peak
from harness.units import GB, gb

RULE = ("A way out fits a card of X GB when it ran ok under an emulated budget of at most X GB, or, with no "
        "does-not-fit record under a budget of X GB or more, when it ran ok on a larger budget with an "
        "allocator peak of at most X GB; a way whose check failed on a machine is not offered for it.")
CARDS_GB = (16, 24, 40, 80, 141)  # the cards a reader may hold: the emulated budgets, and an H200's 141 GB


@dataclass(frozen=True)
class Trial:
    """One record as the rule reads it: a way, on a machine, under a budget (bytes), and what came of it."""
    way: str
    machine: str
    budget: int
    outcome: str
    allocated: int | None = None  # the allocator's peak, bytes: what the way itself held
    step_s: float | None = None
    row: object = None  # the page row it came from, for links; the rule never reads it


def fits(tried: list[Trial], card: int) -> Trial | None:
    """The trial that shows one way (on one machine) fits a card of ``card`` bytes, else None."""
    if any(t.outcome == FAILED for t in tried):
        return None  # a wrong answer is no way out, whatever memory it took
    under = [t for t in tried if t.outcome == OK and t.budget <= card]
    if under:
        return max(under, key=lambda t: t.budget)  # the closest emulation of this card
    if any(t.outcome == DOES_NOT_FIT and t.budget >= card for t in tried):
        return None  # measured not to fit this card (or a larger one)
    larger = [t for t in tried if t.outcome == OK and t.budget > card and t.allocated is not None
              and t.allocated <= card]
    return min(larger, key=lambda t: t.budget) if larger else None


def choose(tried: list[Trial], card: int, machine: str | None = None) -> list[Trial]:
    """Per (way, machine): the trial that shows it fits ``card``, cheapest step first; ``machine``
    keeps one machine's trials (a measured GPU's own answer)."""
    groups = defaultdict(list)
    for t in tried:
        if machine is None or t.machine == machine:
            groups[(t.way, t.machine)].append(t)
    found = [f for f in (fits(ts, card) for ts in groups.values()) if f is not None and f.step_s is not None]
    return sorted(found, key=lambda t: (t.step_s, t.way, t.machine))


# -- from page rows ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    key: str  # the section id's part: a plain word
    label: str
    case: str
    match: dict  # the parameters a record must hold to be this workload


# The reader's workloads: named by the parameters the records hold, never by a figure, so that a
# name stays true whatever a later run measures.
WORKLOADS = (
    Workload("lm", "the LM (tricks: workload=lm, batch 16, seq_len 1024)", "tricks",
             {"workload": "lm", "batch": 16, "seq_len": 1024, "device": "cuda"}),
    Workload("resnet50_1024", "ResNet50 at seed 003's size, 1024 px (tricks: batch 10)", "tricks",
             {"workload": "resnet50_1024", "batch": 10, "device": "cuda"}),
    Workload("resnet50_2048", "ResNet50 at seed 003's size, 2048 px (tricks: batch 10)", "tricks",
             {"workload": "resnet50_2048", "batch": 10, "device": "cuda"}),
    Workload("seed000", "seed 000's arrays (seed000)", "seed000", {}),
    Workload("chainer_gcn", "the GCN (chainer_gcn on the GPU)", "chainer_gcn", {"device": "cuda"}),
)


def trial(row, workload: Workload) -> Trial | None:
    """``row`` as a trial of ``workload``, or None where it is not one or ran on no GPU."""
    params = row.record.params
    if row.case != workload.case or any(params.get(k) != v for k, v in workload.match.items()) or not row.gpu_memory:
        return None
    try:
        budget = budget_bytes(str(params.get("budget", "card")), row.gpu_memory)
    except (ValueError, Skip):
        return None  # a budget this build does not know, or larger than the card: no evidence either way
    way = {k: v for k, v in params.items() if k not in workload.match and k != "budget"}
    timing = row.record.timing
    return Trial(json.dumps(way, sort_keys=True), row.machine, budget, row.record.outcome, allocated_peak(row.record),
                 timing.median_s if row.record.outcome == OK and timing else None, row)


def shared(tried: list[Trial]) -> set[str]:
    """The parameters every trial of the workload holds at one value (they name no way)."""
    ways = [json.loads(w) for w in {t.way for t in tried}]
    names = {k for w in ways for k in w}
    return {k for k in names if len({json.dumps(w.get(k)) for w in ways}) == 1}


def way_label(way: str, same: set[str]) -> str:
    """The way's parameters, less those in ``same`` (``shared``)."""
    params = json.loads(way)
    return " ".join(f"{k}={v}" for k, v in params.items() if k not in same) or "(one way)"


def cards(rows) -> list[tuple[str, str, int, str | None]]:
    """(key, label, bytes, machine or None): the sizes, then each measured GPU with its own records."""
    out = [(f"{n}gb", f"a {n} GB card", n * GB, None) for n in CARDS_GB]
    for machine, memory in sorted({(r.machine, r.gpu_memory) for r in rows if r.gpu_memory}):
        out.append((f"m{len(out)}", f"{machine} ({gb(memory)}, its own records)", memory, machine))
    return out


def view(rows) -> dict:
    """Every (card, workload) section's answer, for the template."""
    sections = []
    card_list = cards(rows)
    for wl in WORKLOADS:
        tried = [t for t in (trial(r, wl) for r in rows) if t is not None]
        same = shared(tried)
        for key, label, size, machine in card_list:
            answer = choose(tried, size, machine)
            labelled = [(t, way_label(t.way, same)) for t in answer]
            # Not offered on any machine of this pick: a way offered on one box is no "left" way.
            left = sorted({way_label(t.way, same) for t in tried if machine is None or t.machine == machine}
                          - {label for _, label in labelled})
            sections.append({"id": f"{key}--{wl.key}", "card": label, "workload": wl.label,
                             "size": size, "answer": labelled, "left": left})
    return {"rule": RULE, "cards": [(k, label) for k, label, *_ in card_list],
            "workloads": [(w.key, w.label) for w in WORKLOADS], "sections": sections}
