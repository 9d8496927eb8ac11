"""Scaling efficiency of a parallel strategy, from two records: the single-device baseline and
the strategy on k devices, the same workload and global batch. With the global batch fixed,
perfect scaling divides the step time by k, so efficiency = t_single / (k x t_strategy)."""
from __future__ import annotations

from harness.measure.records.record import Record


def scaling_efficiency(base: Record, rec: Record) -> float | None:
    """``rec``'s efficiency against ``base``, the one-device run of its workload; None where
    either was not measured."""
    if not (base.ok and rec.ok) or base.timing is None or rec.timing is None:
        return None
    return base.timing.median_s / (rec.params.get("gpus", 1) * rec.timing.median_s)
