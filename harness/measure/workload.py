"""What the harness measures: one step, how to wait for it, what it does and how to check it.

A workload builder (``harness.workloads``) returns one; ``harness.drive.runner`` times its step,
reads the memory levels around it and files the record. The builder never reads a clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from harness.measure.guards.budget import Budget
from harness.measure.instruments.timing import Timing, no_prepare, no_sync

# How long one benchmark may run: asv ends one that runs longer (``timeout`` in benchmarks.common)
# and files no reason for it, so the limits inside a case (a compile, a launch) are set under this.
BENCHMARK_TIMEOUT_S = 600


@dataclass
class Workload:
    step: Callable[[], None]
    # Returns what was checked, e.g. {"rel_err": 1e-7, "tolerance": 1e-4}; raises CheckFailed.
    check: Callable[[], dict]
    work: dict
    sync: Callable[[], None] = no_sync
    # Untimed, before every step: restores the state each step must start from.
    prepare: Callable[[], None] = no_prepare
    gpus: tuple = ()
    warmup: int = 2
    repeat: int = 10
    close: Callable[[], None] = lambda: None
    # Measured elsewhere: a multi-process case times its steps inside its workers (the process
    # that calls ``step`` here only waits) and hands back that timing and each worker's peak
    # memory. The runner then files these instead of timing ``step``.
    timing: Timing | None = None
    memory: dict = field(default_factory=dict)
    # And the GPU-busy share those processes read over their steps (``harness.measure.instruments.busy``).
    busy: dict = field(default_factory=dict)
    # The budget the case resolved (``harness.measure.guards.budget.handed_back``), which its record files
    # as it is; None where it resolved none (the runner then resolves a cap or the whole card).
    budget: Budget | None = None
