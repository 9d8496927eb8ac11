"""How every figure the suite prints is written, in one place.

Bytes are GB, 10^9 bytes, everywhere: the unit GPUs are sold in ("H100 80GB") and the one the
memory budgets use. Rates keep their datasheet units (GB/s, TFLOP/s, tokens/s).
"""
from __future__ import annotations

GB = 10**9
MB = 10**6

# work unit -> (scale, label) for a rate of that work per second, in decimal units as the
# vendors' datasheets quote them; a training step's work is what it processes.
RATE_UNITS = {"flops": (1e12, "TFLOP/s"), "bytes": (1e9, "GB/s"),
              "migrated_bytes": (1e9, "GB/s migrated"), "h2d_bytes": (1e9, "GB/s host-to-device"),
              "nodes": (1e6, "M nodes/s"), "edges": (1e6, "M edges/s"), "samples": (1e3, "k samples/s"),
              "tokens": (1e3, "k tokens/s")}


def gb(n: float | None, digits: int = 1) -> str:
    """``n`` bytes as GB (below 1 GB as MB, so small peaks do not read 0.0 GB); "-" for None.
    ``digits``: decimals of a GB figure; an MB figure has one at most."""
    return gbs([n], digits)


def gbs(ns, digits: int = 1, sep: str = " / ") -> str:
    """Several byte counts in one unit, written once: gbs([4.8e9, 5.6e9]) -> "4.8 / 5.6 GB"; the
    unit is the largest one's (MB when all are below 1 GB). None values are left out; "-" if none."""
    ns = [n for n in ns if n is not None]
    if not ns:
        return "-"
    scale, label, digits = _unit(max(abs(n) for n in ns), digits)
    return sep.join(f"{n / scale:,.{digits}f}" for n in ns) + f" {label}"


def _unit(n: float, digits: int) -> tuple[int, str, int]:
    mb_digits = min(digits, 1)
    if round(n / MB, mb_digits) < 1000:  # 999.99 MB is written 1.0 GB, not 1,000.0 MB
        return MB, "MB", mb_digits
    return GB, "GB", digits


def rate(value_per_s: float, unit: str) -> str:
    """A rate of ``unit`` per second in its datasheet unit, e.g. rate(2.5e12, "flops") -> "2.5 TFLOP/s";
    below one of the unit, three significant digits (23.5 samples/s -> "0.0235 k samples/s", not 0.0)."""
    scale, label = RATE_UNITS[unit]
    value = value_per_s / scale
    return f"{value:,.1f} {label}" if abs(value) >= 1 else f"{value:.3g} {label}"


def seconds(s: float) -> str:
    """A duration as people read step times: µs, ms or s."""
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
