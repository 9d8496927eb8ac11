"""A plain-text table of records: what a run measured, in the units people quote, each rate with its
fraction of the ceiling that bounds it where the records hold that ceiling, and a host-bound mark."""
from __future__ import annotations

from harness.measure.instruments.machine import machine_name
from harness.measure.records.record import Record
from harness.report import markdown
from harness.report.efficiency import HOST_BOUND, HOST_BOUND_NOTE, Ceilings, efficiency, host_bound, rate as safe_rate
from harness.units import RATE_UNITS, ms, rate

HEADER = ("case", "parameters", "outcome", "median/step", "IQR", "rate or reason")
RIGHT = (False, False, False, True, True)  # the figures


def rate_text(rec: Record, ceilings: Ceilings | None = None) -> str:
    rates = ((safe_rate(rec, unit), unit) for unit in RATE_UNITS)
    text = ", ".join(rate(r, unit) for r, unit in rates if r is not None)
    eff = efficiency(rec, ceilings) if ceilings is not None else None
    return text + (f" ({eff.text()}{'' if eff.same_host else ', another host'})" if eff else "")


def row(rec: Record, ceilings: Ceilings | None = None) -> list[str]:
    params = " ".join(f"{k}={v}" for k, v in rec.params.items())
    if not rec.ok:
        return [rec.case, params, rec.outcome, "", "", rec.reason or ""]
    t = rec.timing
    spread = f"{100 * t.iqr_s / t.median_s:.1f}%" if t.median_s else ""
    busy = host_bound(rec)
    mark = f" {HOST_BOUND} GPU busy {busy:.0%}" if busy is not None else ""
    return [rec.case, params, rec.outcome, ms(t.median_s), spread, rate_text(rec, ceilings) + mark]


def machine_of(rec: Record) -> str:
    return machine_name(rec.environment.devices, rec.environment.cpu)


def where(rec: Record) -> list[str]:
    """The machine a record was measured on and the commit it measured (12 digits, as git shows)."""
    return [machine_of(rec), (rec.commit or "-")[:12]]


def chosen(recs: list[Record], machine: str | None = None, commit: str | None = None) -> list[Record]:
    """The records of ``machine`` (its name) and ``commit`` (a prefix of its hash), where given;
    ValueError naming what there is where none is left."""
    out = [r for r in recs if (machine is None or machine_of(r) == machine)
           and (commit is None or (r.commit or "").startswith(commit.lower()))]
    if recs and not out:
        machines = sorted({machine_of(r) for r in recs})
        raise ValueError(f"no record of "
                         f"{' and '.join(f'{k} {v}' for k, v in (('machine', machine), ('commit', commit)) if v)}"
                         f": the records' machines are {', '.join(machines)}; pass one of them, or a prefix of "
                         f"one of their commits")
    return out


def table(recs: list[Record], provenance: bool = False) -> str:
    """The records as a table; ``provenance`` adds the machine and the commit of each."""
    ceilings = Ceilings(recs)
    front = (lambda r: where(r)) if provenance else (lambda r: [])
    header, right = ((("machine", "commit") + HEADER, (False, False) + RIGHT) if provenance else (HEADER, RIGHT))
    lines = markdown.table(header, [front(r) + row(r, ceilings) for r in recs], right, markdown=False)
    text = "\n".join(lines)
    if any(host_bound(r) is not None for r in recs if r.ok):
        text += "\n\n" + HOST_BOUND_NOTE
    return text
