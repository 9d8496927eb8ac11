"""One rule per kind of figure, shared by every page (bytes go through harness.units.gb)."""
from __future__ import annotations


def fmt_rate(v: float) -> str:
    return f"{v:,.1f}" if v >= 10 else f"{v:,.2f}" if v >= 1 else f"{v:,.3f}"


def fmt_params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(none)"


def fmt_times(x: float | None) -> str:
    """A ratio to the baseline, ``0.73x``; a dash where either side has no figure."""
    return "-" if x is None else f"{x:.2f}x"
