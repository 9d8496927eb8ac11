"""A side's rounds of one case, read as one record: how ``harness compare`` judges on every round.

A compare measures each case several times a side (rounds, each a fresh process), alternating
A B B A, on one box. Judging only the last round of each side throws away what the others say,
and lets one unlucky process decide the verdict. The rule here, for each side of a case:

- its time is the median of its rounds' medians: a round whose process landed badly (a clock
  that had not settled, a neighbour on the host) is one vote of three and cannot move it, while a
  change that slows every round moves every vote;
- its raw steps are all its rounds' steps pooled, as asv pools the samples of its rounds, so the
  rank test (``harness.report.noise.rank_p``) says whether NEW's steps are slower at all;
- the gate fails a case only where both say so: the ratio of the two medians of medians is past
  the floor, and the pooled steps differ beyond chance. The floor is learned from BASE's rounds
  alone (their spread is the session's noise of one code, never widened by the difference being
  judged), so a slowdown that shifts every NEW round by more than BASE's rounds scatter fails.

A round that did not end ok (lost, failed, did not fit) stands for its side: a case that fails
once in three is not a pass.
"""
from __future__ import annotations

import dataclasses
import json
import statistics

from harness.measure.outcomes import OK
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing


def pooled(recs: list[Record]) -> dict[tuple[str, str], Record]:
    """(case, parameters) -> one record standing for all of a side's rounds of it."""
    by: dict[tuple[str, str], list[Record]] = {}
    for rec in recs:
        by.setdefault((rec.case, json.dumps(rec.params, sort_keys=True)), []).append(rec)
    return {key: one(rounds) for key, rounds in by.items()}


def one(rounds: list[Record]) -> Record:
    """The newest round, carrying the timing of all (``timing``) and the rounds' GPU-busy share
    (``busy``); the newest round that did not end ok where there is one."""
    ordered = sorted(rounds, key=lambda r: r.created)
    lost = [r for r in ordered if r.outcome != OK or r.timing is None]
    if lost:
        return lost[-1]
    if len(ordered) == 1:
        return ordered[0]
    return dataclasses.replace(ordered[-1], timing=timing([r.timing for r in ordered]), gpu_busy=busy(ordered))


def busy(ordered: list[Record]) -> dict:
    """The GPU-busy share of the newest round that traced one, else of the newest that read one
    (NVML, coarser), else the newest round's: a compare traces each side's first round only."""
    read = [r.gpu_busy for r in ordered if (r.gpu_busy or {}).get("fraction") is not None]
    traced = [b for b in read if b.get("source") == "cupti"]
    return (traced or read or [ordered[-1].gpu_busy])[-1]


def timing(rounds: list[Timing]) -> Timing:
    """The median of the rounds' medians, with every round's steps pooled (their quartiles, for
    records made before raw steps were kept, the median of the rounds' quartiles)."""
    middle = statistics.median(t.median_s for t in rounds)
    if all(t.samples_s for t in rounds):
        steps = Timing.from_samples([s for t in rounds for s in t.samples_s], rounds[0].warmup)
        return dataclasses.replace(steps, median_s=middle)
    return Timing(median_s=middle, q25_s=statistics.median(t.q25_s for t in rounds),
                  q75_s=statistics.median(t.q75_s for t in rounds), min_s=min(t.min_s for t in rounds),
                  max_s=max(t.max_s for t in rounds), steps=sum(t.steps for t in rounds), warmup=rounds[0].warmup)
