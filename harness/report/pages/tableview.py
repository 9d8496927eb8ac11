"""The family table as a reader works it: one column per machine and library versions that
measured something, one line per parameter set with a figure, and every parameter set that was
only skipped or never run folded into one counted line (a CPU box's "needs 1 GPU" per row
pushed the GPUs' columns off the screen)."""
from __future__ import annotations

from collections import Counter, defaultdict

from harness.measure.outcomes import SKIPPED
from harness.report.pages.fmt import fmt_params
from harness.report.model import Row


def measured_boxes(rows: list[Row]) -> list[Row]:
    """The rows of the machines that ran at least one of them: a box that skipped them all (a CPU
    box, for GPU cases) says nothing about them and takes no column (as tables._measured_boxes)."""
    ran = {r.machine for r in rows if r.record.outcome != SKIPPED}
    return [r for r in rows if r.machine in ran]


def short_reason(row: Row) -> str:
    """The reason of a skip up to its first colon or semicolon: what a reader groups by."""
    text = " ".join((row.record.reason or "no reason given").split())
    for sep in (":", ";"):
        text = text.split(sep)[0]
    return text[:80]


def fold(table: dict[str, dict]) -> tuple[dict, dict]:
    """(shown, folded): parameter sets with a figure somewhere, and those only skipped (or not run)."""
    shown, folded = {}, {}
    for params, cells in table.items():
        measured = any(r.record.outcome != SKIPPED for r in cells.values())
        (shown if measured else folded)[params] = cells
    return shown, folded


def folded_line(folded: dict, boxes: int) -> str:
    """``12 skipped here (needs 1 GPU(s), this box has no GPU: 10; ...)``: the count and why."""
    reasons = Counter(short_reason(r) for cells in folded.values() for r in cells.values())
    why = "; ".join(f"{text}: {n}" for text, n in reasons.most_common(4))
    more = "; ..." if len(reasons) > 4 else ""
    not_run = sum(boxes - len(cells) for cells in folded.values())
    tail = f", {not_run} cell(s) not run" if not_run else ""
    return f"{len(folded)} parameter set(s) skipped here ({why}{more}){tail}"


def family_table(rows: list[Row]) -> dict:
    """Columns (machine, versions), GPU boxes before CPU boxes, shown and folded lines, and the
    counted line for the folded."""
    rows = measured_boxes(rows)
    gpus = {r.environment_key for r in rows if r.gpu_memory}
    envs = sorted({r.environment_key for r in rows}, key=lambda e: (e not in gpus, e))  # GPUs first: the answer
    table = defaultdict(dict)
    for r in rows:
        table[fmt_params(r.record.params)][r.environment_key] = r
    shown, folded = fold(dict(table))
    return {"envs": envs, "shown": shown, "folded": folded,
            "folded_line": folded_line(folded, len(envs)) if folded else ""}
