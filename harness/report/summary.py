"""A plain-text table of records: what a run measured, in the units people quote, each rate with its
fraction of the ceiling that bounds it where the records hold that ceiling, and a host-bound mark."""
from __future__ import annotations

from harness.measure.record import Record
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


def table(recs: list[Record]) -> str:
    ceilings = Ceilings(recs)
    lines = markdown.table(HEADER, [row(r, ceilings) for r in recs], RIGHT, markdown=False)
    text = "\n".join(lines)
    if any(host_bound(r) is not None for r in recs if r.ok):
        text += "\n\n" + HOST_BOUND_NOTE
    return text
