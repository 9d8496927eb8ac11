"""The regression gate: two sets of records, case by case; a case that got slower or bigger fails.

BASE and NEW are record files or folders of them (two commits, two environments, two machines).
Cases are matched on (case, parameters). When a set holds the same case more than once (several
runs in one folder), its latest record stands for it.

Seconds per step: a case regresses when the new median exceeds the base median by more than
``max(threshold × base median, k × combined IQR)``, the IQRs combined as independent spreads
(root of the sum of squares). A noisy case therefore needs a larger change to fail than a steady
one, and a steady one still gets the relative threshold as a floor.

Peak bytes have no spread (one peak per run): they regress past the relative threshold, and only
when the growth also exceeds ``min_bytes``, so a few pages of allocator or RSS jitter never fail.
A case that ran in BASE and no longer fits or computes a wrong answer in NEW regresses too.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from harness.measure.store import latest as store_latest
from harness.measure.store import load_any
from harness.measure.machine import machine_label
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK
from harness.measure.record import Record
from harness.units import MB, gb

# Memory labels that are peaks (the others are levels before the case, or a final level).
PEAK_PREFIXES = ("allocator.", "host.max_rss")


def load_set(path: Path) -> list[Record]:
    path = Path(path)
    if not path.exists():
        raise SystemExit(f"oombench gate: {path} does not exist: pass a record file (.jsonl) or a folder "
                         "of them, e.g. results/records/<machine>")
    recs = load_any(path).warn().records
    if not recs:
        raise SystemExit(f"oombench gate: no record in {path}: run `python3 -m harness run` first, or name "
                         "the folder results/records/<machine>")
    return recs


def key(rec: Record) -> tuple[str, str]:
    return rec.case, json.dumps(rec.params, sort_keys=True)


def latest(recs: list[Record]) -> dict[tuple[str, str], Record]:
    return store_latest(recs, key=key)


def peaks(rec: Record) -> dict[str, int]:
    """The peak memory figures of a record, by label, plus the device gain the benchmarks track."""
    out = {k: v for k, v in rec.memory.items() if k.startswith(PEAK_PREFIXES)}
    gain = rec.device_bytes()
    if gain is not None:
        out["device (gain over before)"] = gain
    return out


@dataclass(frozen=True)
class Finding:
    case: str
    params: dict
    metric: str
    base: float | None
    new: float | None
    allowed: float | None  # the largest rise that still passes, in the metric's unit
    text: str

    def line(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.case} {params}: {self.metric}: {self.text}"


def seconds_text(s: float) -> str:
    return f"{s * 1e3:,.3f} ms"


def bytes_text(b: float) -> str:
    return gb(b, 2)


def compare_time(base: Record, new: Record, threshold: float, k: float) -> Finding | None:
    b, n = base.timing, new.timing
    allowed = max(threshold * b.median_s, k * math.hypot(b.iqr_s, n.iqr_s))
    if n.median_s - b.median_s <= allowed:
        return None
    rise = n.median_s / b.median_s - 1
    return Finding(base.case, base.params, "seconds per step (median)", b.median_s, n.median_s, allowed,
                   f"{seconds_text(b.median_s)} (IQR {seconds_text(b.iqr_s)}) -> {seconds_text(n.median_s)} "
                   f"(IQR {seconds_text(n.iqr_s)}): +{100 * rise:.1f}%, allowed +{100 * allowed / b.median_s:.1f}%")


def compare_bytes(base: Record, new: Record, threshold: float, min_bytes: int) -> list[Finding]:
    found = []
    new_peaks = peaks(new)
    for label, b in peaks(base).items():
        n = new_peaks.get(label)
        if n is None:
            continue
        allowed = max(threshold * b, min_bytes)
        if n - b > allowed:
            found.append(Finding(base.case, base.params, f"peak bytes {label}", b, n, allowed,
                                 f"{bytes_text(b)} -> {bytes_text(n)}: +{bytes_text(n - b)}, "
                                 f"allowed +{bytes_text(allowed)}"))
    return found


@dataclass
class Report:
    regressions: list[Finding]
    compared: int
    only_base: list[tuple]
    only_new: list[tuple]
    not_compared: list[str]

    @property
    def ok(self) -> bool:
        return not self.regressions


def compare(base: list[Record], new: list[Record], threshold: float = 0.10, k: float = 2.0,
            min_bytes: int = 64 * MB) -> Report:
    b, n = latest(base), latest(new)
    report = Report([], 0, sorted(set(b) - set(n)), sorted(set(n) - set(b)), [])
    for kk in sorted(set(b) & set(n)):
        old, cur = b[kk], n[kk]
        if old.outcome != OK:
            report.not_compared.append(f"{kk[0]} {kk[1]}: base is {old.outcome}")
            continue
        if cur.outcome in (DOES_NOT_FIT, FAILED):
            report.regressions.append(Finding(old.case, old.params, "outcome", None, None, None,
                                              f"ok -> {cur.outcome}: {cur.reason}"))
            continue
        if cur.outcome != OK:
            report.not_compared.append(f"{kk[0]} {kk[1]}: new is {cur.outcome} ({cur.reason})")
            continue
        report.compared += 1
        slower = compare_time(old, cur, threshold, k)
        report.regressions += ([slower] if slower else []) + compare_bytes(old, cur, threshold, min_bytes)
    return report


def provenance(recs: list[Record]) -> str:
    """Which machine(s), commit(s) and library versions a set is: the gate's output says what it compared."""
    machines = sorted({describe_machine(r) for r in recs})
    commits = sorted({(r.commit or "no commit")[:8] for r in recs})
    libs = sorted({", ".join(f"{k} {v}" for k, v in sorted(r.environment.libraries.items())
                             if k in ("torch", "numpy", "cupy-cuda13x", "cupy-cuda12x", "chainer")) for r in recs})
    return f"{'; '.join(machines)} | commit {', '.join(commits)} | {' / '.join(libs)}"


def describe_machine(rec: Record) -> str:
    env = rec.environment
    return machine_label(env) if env.devices.gpus else f"CPU {machine_label(env)} x{env.num_cpu}"


def render(report: Report, base: list[Record], new: list[Record], threshold: float, k: float) -> str:
    lines = [f"base: {provenance(base)}", f"new:  {provenance(new)}",
             f"rule: slower when new median - base median > max({threshold:.0%} of base, {k:g} x combined IQR); "
             f"bigger when a peak grows by more than {threshold:.0%} (and the byte floor)"]
    for text in report.not_compared:
        lines.append(f"not compared: {text}")
    for kk in report.only_base:
        lines.append(f"only in base: {kk[0]} {kk[1]}")
    for kk in report.only_new:
        lines.append(f"only in new: {kk[0]} {kk[1]}")
    for f in report.regressions:
        lines.append(f"REGRESSION {f.line()}")
    verdict = "FAIL" if report.regressions else "PASS"
    lines.append(f"{verdict}: {len(report.regressions)} regression(s) in {report.compared} case(s) compared")
    return "\n".join(lines)


def only(recs: list[Record], pattern: str | None) -> list[Record]:
    import re
    return [r for r in recs if not pattern or re.search(pattern, f"{r.case} {json.dumps(r.params, sort_keys=True)}")]


def gate(base_path: Path, new_path: Path, threshold: float = 0.10, k: float = 2.0,
         min_bytes: int = 64 * MB, pattern: str | None = None) -> tuple[int, str]:
    base, new = only(load_set(base_path), pattern), only(load_set(new_path), pattern)
    report = compare(base, new, threshold, k, min_bytes)
    if report.compared == 0 and not report.regressions:
        return 2, render(report, base, new, threshold, k) + (
            "\noombench gate: no case ran in both sets, so nothing was compared: check that BASE and NEW "
            "measured the same cases (e.g. `python3 -m harness run --bench ceilings.Host` for the CPU cases)")
    return (1 if report.regressions else 0), render(report, base, new, threshold, k)
