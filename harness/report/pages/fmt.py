"""Parameters and ratios as every page writes them (bytes, rates and times go through harness.units)."""
from __future__ import annotations


def fmt_params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(none)"


def fmt_times(x: float | None) -> str:
    """A ratio to the baseline, ``0.73x``; a dash where either side has no figure."""
    return "-" if x is None else f"{x:.2f}x"
