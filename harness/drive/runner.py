"""Runs one (case, parameters) and turns how it ended into a Record.

``execute`` measures in the calling process; asv gives each (benchmark, parameters) a fresh
process, so one case's allocations and caches never reach another's peak. ``measure`` is what an
asv benchmark calls: it files the record beside asv's results and turns a skip or a
does-not-fit into asv's own "skipped, with reason".

A benchmark class may track several figures of one measurement (seconds, bytes), and asv runs
each in its own process. Within one ``python -m harness run`` (one OOMBENCH_RUN_ID) the case is
measured once and the other figures are read back from its record.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import cases
from harness.measure import record as records
from harness.measure.devices import Devices, discover
from harness.measure.environment import snapshot
from harness.measure.machine import machine_name
from harness.measure.memory import PeakMemory
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK, SKIPPED, CheckFailed, Skip, as_does_not_fit, is_out_of_memory
from harness.measure.record import Record
from harness.measure.timing import time_steps

RUN_ID_ENV = "OOMBENCH_RUN_ID"
RECORDS_ENV = "OOMBENCH_RECORDS"
MACHINE_ENV = "OOMBENCH_MACHINE"
COMMIT_ENV = "OOMBENCH_COMMIT"
DEADLINE_ENV = "OOMBENCH_DEADLINE"  # seconds since the epoch after which a run starts no new case
REPO = Path(__file__).resolve().parents[2]


def execute(case: str | cases.Case, params: dict, *, devices: Devices | None = None,
            run_id: str | None = None, commit: str | None = None) -> Record:
    case = case if isinstance(case, cases.Case) else cases.get(case)
    case.validate(params)
    devices = devices if devices is not None else discover()
    common = dict(case=case.name, params=params, run_id=run_id, commit=commit)
    peak = PeakMemory(gpus=range(devices.count))
    try:
        with peak:
            workload = case.build(**params)
            try:
                timing = workload.timing or time_steps(workload.step, sync=workload.sync, prepare=workload.prepare,
                                                       warmup=workload.warmup, repeat=workload.repeat)
                check = workload.check()
            finally:
                workload.close()
    except Skip as e:
        return Record(outcome=SKIPPED, reason=str(e), environment=snapshot(devices), **common)
    except CheckFailed as e:
        return Record(outcome=FAILED, reason=str(e), memory=peak.bytes, environment=snapshot(devices), **common)
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        dnf = as_does_not_fit(e, case.declared_bytes(**params))
        return Record(outcome=DOES_NOT_FIT, reason=str(dnf), requested_bytes=dnf.requested_bytes,
                      memory=peak.bytes, environment=snapshot(devices), **common)
    return Record(outcome=OK, timing=timing, work=workload.work, memory={**peak.bytes, **workload.memory}, check=check,
                  environment=snapshot(devices), **common)


def records_root(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(RECORDS_ENV) or REPO / "results" / "records")


def run_records(root: Path, machine: str, commit: str | None, run_id: str) -> Path:
    """The file of one run's records: ``<machine>/<commit[:8]>-<run id>.jsonl``."""
    return root / machine / f"{(commit or 'nocommit')[:8]}-{run_id}.jsonl"


@dataclass(frozen=True)
class RunContext:
    """Where this process files its records. ``python -m harness run`` names the run, its commit
    and machine through OOMBENCH_* (asv passes no commit to benchmark processes); under a plain
    ``asv run`` the records go to ``asv-direct.jsonl``."""
    run_id: str | None
    commit: str | None
    path: Path

    @classmethod
    def from_env(cls, devices: Devices, environ=None) -> "RunContext":
        environ = os.environ if environ is None else environ
        root = records_root(environ)
        machine = environ.get(MACHINE_ENV) or machine_name(devices, snapshot(devices).cpu)
        run_id, commit = environ.get(RUN_ID_ENV), environ.get(COMMIT_ENV)
        path = run_records(root, machine, commit, run_id) if run_id else root / machine / "asv-direct.jsonl"
        return cls(run_id=run_id, commit=commit, path=path)


def measure(case_name: str, **params) -> Record:
    """For asv benchmarks: the case's record, measured in this process or earlier in this run."""
    devices = discover()
    ctx = RunContext.from_env(devices)
    rec = _earlier(ctx, case_name, params) if ctx.run_id else None
    if rec is None:
        _before_deadline(ctx)
        rec = execute(case_name, params, devices=devices, run_id=ctx.run_id, commit=ctx.commit)
        records.append(ctx.path, rec)
    return for_asv(rec)


def _before_deadline(ctx: RunContext) -> None:
    """Past the run's deadline a case is not started, and no record says it ran: asv lists it as
    skipped and goes on to the end, where it writes its results file with all that was measured
    (a run killed at a time limit writes none). ``--resume`` measures what was left."""
    deadline = os.environ.get(DEADLINE_ENV)
    if deadline and time.time() > float(deadline):
        raise NotImplementedError(f"not started: the run's deadline had passed; `python3 -m harness run --resume "
                                  f"{ctx.run_id}` measures it")


def _earlier(ctx: RunContext, case: str, params: dict) -> Record | None:
    # One run may cover several environments (``run --python A --python B``): only this
    # interpreter's own record stands for it.
    for rec in records.load(ctx.path):
        if (rec.run_id == ctx.run_id and rec.case == case and rec.params == params
                and rec.environment.executable in ("", sys.executable)):
            return rec
    return None


def for_asv(rec: Record) -> Record:
    if rec.outcome in (SKIPPED, DOES_NOT_FIT):
        # asv reports NotImplementedError from setup as "skipped" and shows the message.
        print(f"oombench: {rec.outcome}: {rec.reason}", file=sys.stderr)
        raise NotImplementedError(rec.reason)
    if rec.outcome == FAILED:
        raise RuntimeError(rec.reason)
    return rec
