"""How every figure the suite prints is written, in one place: bytes, rates and times.

One digit rule for every kind (``figure``): at least three significant digits, and at least one
decimal, so that a figure never reads 0.0 and two figures of one column read alike:
1,234.5 / 12.3 / 1.23 / 0.123 / 0.0235.

Bytes are GB, 10^9 bytes, everywhere: the unit GPUs are sold in ("H100 80GB") and the one the
memory budgets use; below 1 GB they are MB, so small peaks do not read 0.0 GB. Rates keep their
datasheet units (GB/s, TFLOP/s, tokens/s). A step time is in milliseconds whatever its size, so a
column of them compares at a glance; a wall time of many steps (a profile, a session) in minutes.
"""
from __future__ import annotations

import math

GB = 10**9
MB = 10**6
# Binary sizes, what buffers are cut in (a probe's copy, a sweep's sizes); figures are still written in GB.
MiB, GiB = 2**20, 2**30

# work unit -> (scale, label) for a rate of that work per second, in decimal units as the
# vendors' datasheets quote them; a training step's work is what it processes.
RATE_UNITS = {"flops": (1e12, "TFLOP/s"), "bytes": (1e9, "GB/s"),
              "migrated_bytes": (1e9, "GB/s migrated"), "h2d_bytes": (1e9, "GB/s host-to-device"),
              "nodes": (1e6, "M nodes/s"), "edges": (1e6, "M edges/s"), "samples": (1e3, "k samples/s"),
              "tokens": (1e3, "k tokens/s")}


def decimals(value: float) -> int:
    """The decimals ``figure`` writes ``value`` with: one from 10 up (and for 0), else as many as
    three significant digits need."""
    size = abs(value)
    if size == 0 or not math.isfinite(size):
        return 1
    return max(1, 2 - math.floor(math.log10(size)))


def figure(value: float) -> str:
    """``value`` by the one digit rule, thousands separated: figure(1234.5) -> "1,234.5",
    figure(1.234) -> "1.23", figure(0.0235) -> "0.0235"."""
    places = decimals(value)
    places = min(places, decimals(round(value, places)))  # 9.996 rounds to 10: written "10.0", as 10 is, not "10.00"
    return f"{value:,.{places}f}"


def gb(n: float | None) -> str:
    """``n`` bytes as GB (below 1 GB as MB); "-" for None."""
    return gbs([n])


def gbs(ns, sep: str = " / ") -> str:
    """Several byte counts in one unit, written once: gbs([4.8e9, 5.6e9]) -> "4.80 / 5.60 GB"; the
    unit is the largest one's (MB when all are below 1 GB). None values are left out; "-" if none."""
    ns = [n for n in ns if n is not None]
    if not ns:
        return "-"
    scale, label = _unit(max(abs(n) for n in ns))
    return sep.join(figure(n / scale) for n in ns) + f" {label}"


def _unit(n: float) -> tuple[int, str]:
    if round(n / MB, 1) < 1000:  # as written near 1000 MB: 999.96 MB is 1.00 GB, not 1,000.0 MB
        return MB, "MB"
    return GB, "GB"


def rate(value_per_s: float, unit: str) -> str:
    """A rate of ``unit`` per second in its datasheet unit: rate(2.5e12, "flops") -> "2.50 TFLOP/s"."""
    scale, label = RATE_UNITS[unit]
    return scaled(value_per_s / scale, label)


def scaled(value: float, label: str) -> str:
    """A figure already in the unit ``label`` names (a rate ``Row.rates`` scaled): "2.50 TFLOP/s"."""
    return f"{figure(value)} {label}"


def ms(seconds: float) -> str:
    """A step time, in milliseconds: ms(0.0123) -> "12.3 ms"."""
    return scaled(seconds * 1e3, "ms")


def minutes(seconds: float) -> str:
    """A wall time of many steps, in minutes: minutes(750) -> "12.5 min"."""
    return scaled(seconds / 60, "min")
