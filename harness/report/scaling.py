"""Scaling efficiency of a parallel strategy, from two records: the single-device baseline and
the strategy on k devices, the same workload and global batch. With the global batch fixed,
perfect scaling divides the step time by k, so efficiency = t_single / (k x t_strategy)."""
from __future__ import annotations

from harness.measure.record import Record

TECHNIQUE = ("strategy", "gpus", "micro_batches")  # the rest of the parameters name the workload


def _workload(rec: Record) -> tuple:
    return rec.case, tuple(sorted((k, v) for k, v in rec.params.items() if k not in TECHNIQUE))


def _is_baseline(rec: Record) -> bool:
    return rec.params.get("strategy") == "single" and rec.params.get("gpus") == 1


def scaling_efficiency(records: list[Record]) -> list[tuple[Record, float]]:
    """Each measured parallel record with its efficiency against the baseline of its workload
    (the latest baseline where there are several); records without a baseline are left out."""
    ok = [r for r in records if r.ok and "strategy" in r.params]
    baselines = {_workload(r): r for r in sorted(ok, key=lambda r: r.created) if _is_baseline(r)}
    out = []
    for rec in ok:
        base = baselines.get(_workload(rec))
        if base is not None and not _is_baseline(rec):
            out.append((rec, base.timing.median_s / (rec.params["gpus"] * rec.timing.median_s)))
    return out
