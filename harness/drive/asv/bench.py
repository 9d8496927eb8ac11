"""What an asv benchmark calls: the record of its case, measured in this process or read back
from earlier in the same run, with skips and does-not-fit turned into asv's own "skipped".

asv starts a fresh process per (benchmark, parameters) and passes it nothing of the run, so
``python3 -m harness run`` hands the run's context over in one environment variable, read here
and nowhere else. A benchmark class may track several figures of one measurement (seconds,
bytes), each in its own process: within one run the case is measured once and the other figures
are read back from its record.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from harness import cases
from harness.drive.asv import begun, plain_asv
from harness.drive.asv.asv_output import THIS_RUN
from harness.drive.runner import execute
from harness.measure.instruments.devices import discover
from harness.measure.instruments.environment import snapshot
from harness.measure.guards.inputs import disk_full, disk_is_full
from harness.measure.guards.lifeline import die_with_parent, watch
from harness.measure.instruments.machine import machine_name
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, SKIPPED
from harness.measure.records.record import Record
from harness.measure.records.store import LOCAL, REPO, RecordStore, RunContext, this_interpreters

RUN_ENV = "OOMBENCH_RUN"
SKIP_MARK = "oombench: "


def context(devices, fallback_results: Path = LOCAL, environ=None) -> RunContext:
    """The run this process belongs to; under a plain ``asv run``, records go to the local store,
    named for the commit asv measured and the asv run (``plain_asv``)."""
    environ = os.environ if environ is None else environ
    if environ.get(RUN_ENV):
        return RunContext.from_json(environ[RUN_ENV])
    return RunContext(RecordStore.of_results(fallback_results), machine_name(devices, snapshot(devices).cpu),
                      run_id=plain_asv.run_id(), commit=plain_asv.commit(REPO, environ))


def measure(case_name: str, fallback_results: Path = LOCAL, **params) -> Record:
    """For asv benchmarks: the case's record, measured in this process or earlier in this run."""
    devices = discover()
    ctx = context(devices, fallback_results)
    _watch_harness(ctx)
    rec = _earlier(ctx, case_name, params) if ctx.run_id else None
    if rec is None:
        _before_deadline(ctx)
        _not_died_before(ctx, case_name, params)
        with disk_full_named(ctx):
            if ctx.run_id:
                begun.begin(ctx, case_name, params)
            try:
                rec = execute(cases.get(case_name), params, devices=devices, run=ctx)
            except Exception as e:
                RecordStore.append(ctx.path, begun.raised(ctx, case_name, params, e, snapshot(devices)))
                raise
            RecordStore.append(ctx.path, rec)
    if ctx.run_id and rec.ok:  # asv prints other sets' figures from earlier runs: these are this run's
        print(THIS_RUN, file=sys.stderr)
    return for_asv(rec)


class DiskFull(RuntimeError):
    """The disk the run files into has no space left; the message names it and the way on."""


@contextmanager
def disk_full_named(ctx: RunContext):
    """A write that found the disk full (ENOSPC) raises ``DiskFull`` naming the disk, which asv
    shows, instead of a bare OSError. The case's failed record says the same where it fits."""
    try:
        yield
    except OSError as e:
        if not disk_is_full(e):
            raise
        raise DiskFull(disk_full(ctx.path.parent, ctx.run_id)) from e


def _watch_harness(ctx: RunContext) -> None:
    """asv, not the harness, starts this process, so no parent-death signal can name the
    harness: a watchdog ends this process (and its probes and workers) once the harness is
    gone, and the kernel ends it with asv, its parent. Under a plain ``asv run``, neither."""
    if ctx.parent_pid is not None:
        die_with_parent()
        watch(ctx.parent_pid)


def _before_deadline(ctx: RunContext) -> None:
    """Past the run's deadline a case is not started, and no record says it ran: asv lists it as
    skipped and goes on to the end, where it writes its results file with all that was measured
    (a run killed at a time limit writes none). ``--resume`` measures what was left."""
    if ctx.deadline is not None and time.time() > ctx.deadline:
        raise NotImplementedError(f"not started: the run's deadline had passed; `python3 -m harness run --resume "
                                  f"{ctx.run_id}` measures it")


def _not_died_before(ctx: RunContext, case: str, params: dict) -> None:
    """A case whose process died earlier in this run is not run again for the benchmark's next
    figure: it would most likely die the same way, after as long."""
    entry = begun.died(ctx, case, params) if ctx.run_id else None
    if entry is not None:
        raise RuntimeError(f"not measured again: {begun.reason(entry, kills_now=begun.oom_kills())}")


def _earlier(ctx: RunContext, case: str, params: dict) -> Record | None:
    for rec in this_interpreters(ctx.path):
        if rec.run_id == ctx.run_id and rec.case == case and rec.params == params:
            return rec
    return None


def for_asv(rec: Record) -> Record:
    if rec.outcome in (SKIPPED, DOES_NOT_FIT):
        # asv reports NotImplementedError from setup as "skipped"; the reason reaches its output
        # through stderr (--show-stderr), where ``harness run`` folds repeats into one line.
        print(f"{SKIP_MARK}{rec.outcome}: {rec.reason}", file=sys.stderr)
        raise NotImplementedError(rec.reason)
    if rec.outcome == FAILED:
        raise RuntimeError(rec.reason)
    return rec
