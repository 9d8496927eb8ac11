"""Records -> rows for the pages, read generically: parameters, work units and memory labels.

Every figure a page shows is a ``Row``: one record, with the file and line it came from, so the
page can link each number to its provenance. Nothing here knows a case family beyond the
declarative table in ``families``.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from harness import cases
from harness.measure.instruments.machine import machine_name
from harness.measure.outcomes import DOES_NOT_FIT, OK
from harness.measure.records.record import Record
from harness.measure.records.store import RecordStore
from harness.measure.records.store import latest as store_latest
from harness.units import RATE_UNITS
from harness.report import capable
from harness.report.efficiency import rate as safe_rate
from harness.report.families import family

# The libraries whose versions identify an environment on the pages (all are kept in provenance).
VERSION_LIBS = ("torch", "numpy", "cupy-cuda13x", "cupy-cuda12x", "cupy", "chainer", "cuda-bindings")
# The rate a row is ranked by: the README's units first (tokens/s for LMs, samples/s for images),
# then arithmetic where a step does it, then bytes moved, then a graph's nodes.
PRIMARY_UNITS = ("tokens", "samples", "flops", "bytes", "nodes")
# Every rate a row shows, the primary units first in their order: an LM's step counts samples and
# tokens, and its rate reads in tokens/s on every table and page.
SHOWN_UNITS = PRIMARY_UNITS + tuple(u for u in RATE_UNITS if u not in PRIMARY_UNITS)


def libraries(rec: Record) -> dict[str, str]:
    """The versions of the libraries that identify an environment, in ``VERSION_LIBS`` order."""
    libs = rec.environment.libraries
    return {k: str(libs[k]) for k in VERSION_LIBS if k in libs}


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version: ``2.13.0+cpu`` -> (2, 13, 0)."""
    head = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(n) for n in head.group().split(".")) if head else ()


def age(libs: dict[str, str]) -> tuple:
    """Orders sets of versions oldest first, library by library in ``VERSION_LIBS`` order (torch
    first); a set without a library comes before one with it."""
    return tuple((k in libs, release(libs[k]) if k in libs else ()) for k in VERSION_LIBS)


def versions_of(rec: Record) -> str:
    return ", ".join(f"{k} {v}" for k, v in libraries(rec).items())


@dataclass(frozen=True)
class Row:
    rid: str
    record: Record
    source: str  # path of the record file, relative to the results folder's parent
    line: int

    @property
    def case(self) -> str:
        return self.record.case

    @cached_property
    def params_key(self) -> str:
        """The parameters as one text, the same for equal parameters: what readers group rows by."""
        return json.dumps(self.record.params, sort_keys=True)

    @cached_property
    def machine(self) -> str:
        env = self.record.environment
        return machine_name(env.devices, env.cpu)

    @cached_property
    def versions(self) -> str:
        return versions_of(self.record)

    @cached_property
    def environment_key(self) -> tuple[str, str]:
        return self.machine, self.versions

    @property
    def workload(self) -> dict:
        names = family(self.case).workload
        return {k: v for k, v in self.record.params.items() if k in names}

    @property
    def technique(self) -> dict:
        names = family(self.case).workload
        return {k: v for k, v in self.record.params.items() if k not in names}

    def rate(self) -> tuple[float, str] | None:
        """The primary rate in datasheet units, with its unit; steps/s where a step declares no work."""
        if self.record.outcome != OK:
            return None
        for unit in PRIMARY_UNITS:
            r = safe_rate(self.record, unit)
            if r is not None:
                scale, label = RATE_UNITS[unit]
                return r / scale, label
        return 1 / self.record.timing.median_s, "steps/s"  # an ok record's median is > 0 (Record refuses 0)

    def rates(self) -> list[tuple[float, str]]:
        """Every rate in datasheet units, the primary one (``rate``'s) first; none for a record
        that did not run ok (a failed check's steps are timed, but no rate of it is shown)."""
        if self.record.outcome != OK:
            return []
        out = []
        for unit in SHOWN_UNITS:
            r = safe_rate(self.record, unit)
            if r is not None:
                scale, label = RATE_UNITS[unit]
                out.append((r / scale, label))
        return out

    @property
    def peak_device(self) -> int | None:
        return self.record.device_bytes() if self.record.environment.devices.gpus else None

    @property
    def peak_host(self) -> int | None:
        return self.record.host_bytes()

    def peak(self) -> int | None:
        return self.peak_device if family(self.case).memory == "device" else self.peak_host

    @property
    def gpu_memory(self) -> int | None:
        gpus = self.record.environment.devices.gpus
        return gpus[0].memory_total if gpus else None


def record_id(source: str, line: int) -> str:
    return "r-" + hashlib.sha1(f"{source}:{line}".encode()).hexdigest()[:10]


def load_rows(results: Path) -> list[Row]:
    """Every valid record under results/records, with the file and line it came from, as the report
    reads it (``capable.as_read``: no answer for a card that cannot run its way)."""
    root = Path(results)
    loaded = RecordStore.of_results(root).load().warn()
    sources = {}  # each file's path, relative to the results folder's parent, made once
    for e in loaded.entries:
        if e.path not in sources:
            sources[e.path] = str(e.path.relative_to(root.parent))
    return [Row(record_id(sources[e.path], e.line), capable.as_read(cases.upgraded(e.record)), sources[e.path],
                e.line) for e in loaded.entries]


def latest(rows: list[Row]) -> list[Row]:
    """One row per (case, parameters, machine, versions): the latest, where a box ran a case more than once."""
    keep = store_latest(rows, key=lambda r: (r.case, r.params_key, r.environment_key), record=lambda r: r.record)
    return sorted(keep.values(), key=lambda r: (r.case, r.params_key))


def newest_stack(rows: list[Row]) -> list[Row]:
    """Per case, parameters and machine, the row of the newest library versions (``age``): the
    answer a machine gives is its own stack's; stacks kept to compare versions are read against it
    on the versions table, not beside it."""
    def where(r: Row) -> tuple:
        return r.case, r.params_key, r.machine

    keep = {where(r): r for r in sorted(rows, key=lambda r: (age(libraries(r.record)), r.record.created))}
    return [r for r in rows if keep[where(r)] is r]


def pareto(points: list[tuple[float, float]]) -> list[bool]:
    """For (peak bytes, rate) points: True where no other point has as little memory and as much
    rate, and strictly better in one."""
    def dominated(p, q):
        return q[0] <= p[0] and q[1] >= p[1] and (q[0] < p[0] or q[1] > p[1])
    return [not any(dominated(p, q) for q in points) for p in points]


def what_fits(rows: list[Row]) -> list[str]:
    """The cases with a does-not-fit record somewhere: those are the ones a memory budget decides."""
    return sorted({r.case for r in rows if r.record.outcome == DOES_NOT_FIT})
