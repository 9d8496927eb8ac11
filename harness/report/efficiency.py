"""Each rate as a fraction of the ceiling that bounds it, measured on the same host.

Rates of one kind of box differ between hosts wherever the host is involved (page migration,
pinned copies over each host's own PCIe link), so a rate alone does not compare across hosts; its
fraction of the same host's ceiling does. A case names the ceilings probe that bounds it
(``Case.bound_by``); the ceiling is that probe's record from the same host, preferably the same
run (the same conditions), else the host's latest; where the host measured none, the same machine
kind's latest stands in, and the result says so (``same_host`` False).

The fraction compares like with like: a host-to-device ceiling is read against the bytes that
cross the link where the case counts them (``h2d_bytes``, ``migrated_bytes``), else its bytes.
A step that also copies back (``d2h_bytes``) shares the link with its own write-back, so beside its
fraction of pinned H2D it gets one of ``duplex_pinned`` (both directions at once), from the same
host only: another host's link says nothing about this one's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness import cases
from harness.measure.instruments.machine import host_key, machine_name
from harness.measure.outcomes import OK
from harness.measure.records.record import Record

CEILINGS = "ceilings"
DUPLEX = "duplex_pinned"
PAGEABLE = "pageable"
# probe -> how people name it beside a rate
PROBE_LABELS = {"h2d_pinned": "pinned H2D", "d2h_pinned": "pinned D2H", "duplex_pinned": "pinned H2D beside D2H",
                "device_copy": "device copy",
                "matmul_fp32": "fp32 matmul", "matmul_tf32": "tf32 matmul", "matmul_fp16": "fp16 matmul",
                "matmul_bf16": "bf16 matmul", "host_copy": "host copy", "cpu_matmul_fp32": "CPU fp32 matmul",
                "h2d_pageable": "pageable H2D", "d2h_pageable": "pageable D2H", "p2p_copy": "GPU-to-GPU copy"}
# probe -> the work units of a bounded record read against it, the first the record counts
UNITS = {"h2d_pinned": ("h2d_bytes", "migrated_bytes", "bytes"), "d2h_pinned": ("d2h_bytes", "bytes"),
         "duplex_pinned": ("h2d_bytes", "bytes")}
BUSY_BOUND = 0.8  # under this fraction of GPU-busy time a step is bound by the host
HOST_BOUND = "†"  # the mark of a host-bound figure, the GPU-busy share after it
HOST_BOUND_NOTE = (f"{HOST_BOUND} host-bound: the GPU was busy under {BUSY_BOUND:.0%} of the timed steps (the share "
                   "follows the mark), so the figure measures the host as much as the GPU.")


@dataclass(frozen=True)
class Efficiency:
    fraction: float
    probe: str
    unit: str  # the record's work unit the fraction was read from
    ceiling: Record
    same_host: bool
    both_ways: float | None = None  # the h2d rate as a fraction of duplex_pinned's, where it applies

    def text(self) -> str:
        """``0.39 of pinned H2D``, or ``0.80 of pinned H2D, 0.95 beside D2H``."""
        beside = "" if self.both_ways is None else f", {self.both_ways:.2f} beside D2H"
        return f"{self.fraction:.2f} of {PROBE_LABELS.get(self.probe, self.probe)}{beside}"


def units_for(probe: str) -> tuple[str, ...]:
    return UNITS.get(probe, ("flops",) if "matmul" in probe else ("bytes",))


def bound_of(rec: Record) -> str | None:
    """The probe that bounds the record's rate; None for ceilings (their own bound), for unknown
    cases, and for parameters the case does not declare (a hostile or outdated record)."""
    if rec.case in (CEILINGS, PAGEABLE) or rec.case not in cases.names():
        return None
    case = cases.get(rec.case)
    try:
        return case.bound_by(**case.config(rec.params).params)
    except (TypeError, ValueError, KeyError):
        return None


def _first_gpu_only(rec: Record) -> bool:
    """A step over several GPUs whose NVML share was read on the first alone (records before the
    share covered each GPU): its idle time may be the other GPUs' turn, not the host."""
    busy, gpus = rec.gpu_busy or {}, rec.params.get("gpus")
    return isinstance(gpus, int) and gpus > 1 and busy.get("source") == "nvml" and "gpus" not in busy


def host_bound(rec: Record) -> float | None:
    """The GPU-busy fraction where it is under ``BUSY_BOUND`` (the step waited on the host), else
    None; None too for a case whose GPU work runs in other processes (its older records hold a
    share read in the process that only waited)."""
    if cases.gpu_work_elsewhere(rec.case):
        return None
    if _first_gpu_only(rec):
        return None
    if not rec.work:
        return None  # a probe that reads levels and times no work (ceilings' context): nothing it waited on
    busy = (rec.gpu_busy or {}).get("fraction")
    if isinstance(busy, (int, float)) and not isinstance(busy, bool) and 0 <= busy < BUSY_BOUND:
        return float(busy)
    return None


class Ceilings:
    """The ok ceiling records among ``records``, found by probe, host, run and machine kind."""

    def __init__(self, records):
        # by probe, by (probe, host) and by (probe, machine kind), each in the order of ``records``
        self.by_probe: dict[str, list[Record]] = {}
        self.by_host: dict[tuple[str, str], list[Record]] = {}
        self.by_kind: dict[tuple[str, str], list[Record]] = {}
        for rec in records:
            probe = rec.params.get("probe") if rec.case == CEILINGS else None
            if rec.outcome == OK and isinstance(probe, str) and rate(rec, _unit(rec, probe)):
                self.by_probe.setdefault(probe, []).append(rec)
                self.by_host.setdefault((probe, host_key(rec.environment)), []).append(rec)
                self.by_kind.setdefault((probe, _kind(rec)), []).append(rec)

    def find(self, rec: Record, probe: str) -> tuple[Record, bool] | None:
        """(the ceiling, whether it came from the record's own host), or None."""
        host = host_key(rec.environment)
        mine = self.by_host.get((probe, host), []) if host else []
        same_run = [c for c in mine if rec.run_id and c.run_id == rec.run_id]
        if same_run or mine:
            return max(same_run or mine, key=lambda c: c.created), True
        alike = self.by_kind.get((probe, _kind(rec)))
        return (max(alike, key=lambda c: c.created), False) if alike else None


def _kind(rec: Record) -> str:
    return machine_name(rec.environment.devices, rec.environment.cpu)


def _unit(rec: Record, probe: str) -> str | None:
    return next((u for u in units_for(probe) if rec.work.get(u)), None)


def rate(rec: Record, unit: str | None) -> float | None:
    """``rec.rate(unit)`` where it is a finite positive number, else None (for no unit too): a record
    read from a file may hold a zero median or work that is not a number, and no report may fail on it."""
    try:
        value = rec.rate(unit)
    except (TypeError, ZeroDivisionError, OverflowError):
        return None
    return value if isinstance(value, (int, float)) and value > 0 and math.isfinite(value) else None


def efficiency(rec: Record, ceilings: Ceilings) -> Efficiency | None:
    """The record's rate as a fraction of its bounding ceiling; None where it has no rate or no bound
    was measured on a box of its kind."""
    probe = bound_of(rec)
    unit = _unit(rec, probe) if probe and rec.outcome == OK else None
    mine = rate(rec, unit)
    found = ceilings.find(rec, probe) if mine else None
    if found is None:
        return None
    ceiling, same_host = found
    top = rate(ceiling, _unit(ceiling, probe))  # never None: Ceilings keeps only records with a rate
    return Efficiency(mine / top, probe, unit, ceiling, same_host, _both_ways(rec, probe, unit, ceilings))


def _both_ways(rec: Record, probe: str, unit: str, ceilings: Ceilings) -> float | None:
    """The record's h2d rate over the same host's duplex ceiling, for a step that copies both ways."""
    if probe != "h2d_pinned" or unit != "h2d_bytes" or not rec.work.get("d2h_bytes"):
        return None
    found = ceilings.find(rec, DUPLEX)
    if found is None or not found[1]:
        return None
    top = rate(found[0], "h2d_bytes")
    return rate(rec, unit) / top if top else None


def best_pageable(records) -> dict[tuple[str, str], Record]:
    """(machine kind, direction) -> the pageable-copy record of the best rate over the buffer sizes:
    pageable rates depend on the size, so the best size is the ceiling and the sweep the detail."""
    best: dict[tuple[str, str], Record] = {}
    for rec in records:
        if rec.case != PAGEABLE or rec.outcome != OK or not rate(rec, "bytes"):
            continue
        key = (_kind(rec), str(rec.params.get("direction")))
        if key not in best or rate(rec, "bytes") > rate(best[key], "bytes"):
            best[key] = rec
    return best
