"""A plain-text table of records: what a run measured, in the units people quote."""
from __future__ import annotations

from harness.measure.record import Record
from harness.units import RATE_UNITS, rate




def rate_text(rec: Record) -> str:
    rates = ((rec.rate(unit), unit) for unit in RATE_UNITS)
    return ", ".join(rate(r, unit) for r, unit in rates if r is not None)


def row(rec: Record) -> list[str]:
    params = " ".join(f"{k}={v}" for k, v in rec.params.items())
    if not rec.ok:
        return [rec.case, params, rec.outcome, "", "", rec.reason or ""]
    t = rec.timing
    spread = f"{100 * t.iqr_s / t.median_s:.1f}%" if t.median_s else ""
    return [rec.case, params, rec.outcome, f"{t.median_s * 1e3:,.3f} ms", spread, rate_text(rec)]


def table(recs: list[Record]) -> str:
    header = ["case", "parameters", "outcome", "median/step", "IQR", "rate or reason"]
    rows = [header] + [row(r) for r in recs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)
