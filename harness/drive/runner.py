"""Measures one (case, parameters) in this process and turns how it ended into a Record.

asv gives each (benchmark, parameters) a fresh process (``harness.drive.asv.bench``), so one case's
allocations and caches never reach another's peak; ``python3 -m harness case`` calls this
directly, for debugging a case.
"""
from __future__ import annotations

from harness import cases
from harness.cases.base import Case, Config
from harness.measure.guards import budget
from harness.measure.instruments.busy import Sampled, gpu_busy
from harness.measure.instruments.devices import Devices, discover, visible_indices
from harness.measure.instruments.environment import snapshot
from harness.measure.instruments.memory import PeakMemory
from harness.measure.outcomes import (DOES_NOT_FIT, FAILED, OK, SKIPPED, CheckFailed, Skip, as_does_not_fit,
                                      is_out_of_memory)
from harness.measure.records.record import Record
from harness.measure.records.store import RunContext
from harness.measure.instruments.timing import time_steps
from harness.measure.guards.workingset import card_total


def execute(case: Case | str, config: Config | dict, *, devices: Devices | None = None,
            run: RunContext | None = None) -> Record:
    """``config``: the case's ``Config``, taken as it is, or a plain dict of its parameters, made
    into one here: the one validation, before anything is built."""
    case = case if isinstance(case, Case) else cases.get(case)
    if not (isinstance(config, Config) and config.case == case.name):
        config = case.config(config)  # a dict is validated here; another case's Config is refused
    params = config.params
    devices = devices if devices is not None else discover()
    run_id, commit = (run.run_id, run.commit) if run else (None, None)
    common = dict(case=case.name, params=dict(params), run_id=run_id, commit=commit)

    def filed(ended=None, **fields) -> Record:  # the budget as the case handed it back with how it ended
        return Record(**fields, **common, budget=_budget(case, params, devices, budget.handed(ended)))
    # A case that keeps files of its own (the what-fits probes) keeps them beside the run's records.
    extra = {"run_file": run.path if run and run.run_id else None} if case.keeps_files else {}
    # A case on the CPU holds no device memory: the GPUs' levels would be other processes'.
    peak = PeakMemory(gpus=visible_indices(devices) if params.get("device") != "cpu" else ())
    timing, work, workload = None, {}, None
    try:
        with peak:
            workload = case.build(**params, **extra)
            try:
                # NVML sampled beside the timed steps (where this process runs them).
                with Sampled(() if workload.timing else workload.gpus) as timed:
                    timing = workload.timing or time_steps(workload.step, sync=workload.sync, prepare=workload.prepare,
                                                           warmup=workload.warmup, repeat=workload.repeat,
                                                           begin=lambda: (peak.steps_begin(), timed.begin()))
                    timed.end()
                    peak.steps_end()
                    work = workload.work
                    check = workload.check()
                    busy = gpu_busy(workload, timing.median_s, timed, trace=run.trace_busy if run else True)
            finally:
                workload.close()
    except Skip as e:
        return filed(workload or e, outcome=SKIPPED, reason=str(e), environment=snapshot(devices))
    except CheckFailed as e:
        # Steps that did their work and trained another curve keep what they cost beside the verdict:
        # a reader may still weigh that price. A wrong answer keeps no time (of work perhaps not done).
        priced = dict(timing=timing, work=work) if e.priced else {}
        return filed(workload or e, outcome=FAILED, reason=str(e), memory=peak.bytes, check=e.details,
                     environment=snapshot(devices), **priced)
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        dnf = as_does_not_fit(e, case.declared_bytes(**params))
        return filed(workload or e, outcome=DOES_NOT_FIT, reason=str(dnf), requested_bytes=dnf.requested_bytes,
                     check={"short_of": dnf.memory}, memory=peak.bytes, environment=snapshot(devices))
    return filed(workload, outcome=OK, timing=timing, work=work, memory={**peak.bytes, **workload.memory},
                 check=check, gpu_busy=busy, environment=snapshot(devices))


def _budget(case: Case, params, devices: Devices, resolved: budget.Budget | None) -> dict:
    """The emulated card a case with a ``budget`` parameter runs under, for its record whatever its
    outcome: the one it ``resolved`` and handed back; empty where it has none. A case that ended
    before resolving one: a named card is empty (its overhead is read only once its library warmed
    up, in the case), another as it resolves on this card, empty where there is none (it skips)."""
    if "budget" not in params:
        return {}
    if resolved is not None:
        return resolved.to_dict()
    if params["budget"] in budget.CARDS:
        return {}
    try:
        return budget.resolve(params["budget"], card_total(devices), case.allocator(**params)).to_dict()
    except Skip:
        return {}
