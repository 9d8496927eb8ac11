"""Markdown tables of filed records, for the README and closing notes: one or more parameters (or
the machine) down, one across, the chosen figures in each cell. It reads what the pages read (the
latest record per case, parameters and machine), so any table quoted from results/ can be made
again from it, and a figure is never typed by hand.

    python3 -m harness table fits --down technique,machine --across budget --show check:max_batch \\
        --where over=batch
"""
from __future__ import annotations

from pathlib import Path

from harness import cases
from harness.measure.machine import machine_label as label_of
from harness.measure.outcomes import DOES_NOT_FIT, OK, SKIPPED
from harness.report.pages.model import Row, latest, load_rows
from harness.units import gb, gbs

SHOWS = ("step", "rate", "peak", "loss")  # and check:KEY, any value of the record's check
MACHINE = "machine"


def machine_label(row: Row) -> str:
    return label_of(row.record.environment)


def _axis_names(case: cases.Case, names: list[str]) -> list[str]:
    known = list(case.params) + [MACHINE]
    for name in names:
        if name not in known:
            raise ValueError(f"{case.name} has no parameter {name!r}: choose from {', '.join(known)}")
    return names


def _where(case: cases.Case, pairs: list[str]) -> dict:
    """{name: value}: a parameter's value as the case declares it (16 for "16", or the error
    naming the allowed values, as a config converts it); the machine's as written."""
    where = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--where takes name=value, got {pair!r}")
        _axis_names(case, [name])
        where[name] = value if name == MACHINE else case.value(name, value)
    return where


def _value(row: Row, name: str):
    return machine_label(row) if name == MACHINE else row.record.params.get(name)


def _allocated(rec) -> int | None:
    peaks = [v for k, v in rec.memory.items() if k.startswith("allocator.") and ".max_" in k and "reserved" not in k]
    return max(peaks) if peaks else None


def _peak(rec) -> str:
    allocated, device = _allocated(rec), rec.device_bytes()
    return gbs([allocated or None, device or None])  # "4.8 / 5.6 GB": allocated / device


def _rate(row: Row) -> str:
    rates = row.rates()  # in datasheet units, the primary first
    if not rates:
        return "-"
    value, label = rates[0]
    digits = 1 if value >= 10 else 2 if value >= 1 else 3  # three figures at least
    return f"{value:,.{digits}f} {label}"


def _ratio(row: Row, base: Row | None, what: str) -> str:
    """`` (0.73x)``: the figure as a multiple of the base record's, where both have it."""
    if base is None or base.record.outcome != OK or base is row:
        return ""
    rec, ref = row.record, base.record
    if what == "step":
        pair = rec.timing.median_s, ref.timing.median_s
    elif what == "rate":
        pair = tuple(r[0][0] if r else None for r in (row.rates(), base.rates()))
    elif what == "peak":
        pair = (_allocated(rec), _allocated(ref)) if _allocated(ref) else (rec.device_bytes(), ref.device_bytes())
    else:
        return ""
    return f" ({pair[0] / pair[1]:.2f}x)" if all(pair) else ""


def _show(row: Row, what: str, base: Row | None = None) -> str:
    rec = row.record
    if what.startswith("check:"):
        value = rec.check.get(what[len("check:"):])
        return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
    if what == "step":
        return f"{rec.timing.median_s * 1e3:,.1f} ms" + _ratio(row, base, what)
    if what == "rate":
        return _rate(row) + _ratio(row, base, what)
    if what == "peak":
        return _peak(rec) + _ratio(row, base, what)
    if what == "loss":
        return f"{rec.check['loss_last']:.3f}" if "loss_last" in rec.check else "-"
    raise ValueError(f"unknown figure {what!r}: choose from {', '.join(SHOWS)} or check:KEY")


def cell(row: Row | None, shows: list[str], base: Row | None = None) -> str:
    if row is None:
        return "not run"
    rec = row.record
    if rec.outcome == DOES_NOT_FIT:
        asked = f" (a {gb(rec.requested_bytes, 2)} request failed)" if rec.requested_bytes else ""
        return "does not fit" + asked
    if rec.outcome == SKIPPED:
        return "skipped"
    if rec.outcome != OK:
        return rec.outcome
    return ", ".join(_show(row, s, base) for s in shows)


def _check_request(case: cases.Case, down: list[str], across: str, shows: list[str], versus) -> None:
    _axis_names(case, down + [across])
    if versus and versus[0] not in down + [across]:
        raise ValueError(f"--versus {versus[0]}=... needs {versus[0]} down or across the table")
    for s in shows:
        if s not in SHOWS and not s.startswith("check:"):
            raise ValueError(f"unknown figure {s!r}: choose from {', '.join(SHOWS)} or check:KEY")


def _grid(rows: list[Row], case_name: str, down: list[str], across: str, where: dict) -> dict:
    """(values down, value across) -> the row there."""
    picked = _measured_boxes([r for r in latest(rows) if r.case == case_name
                              and all(str(_value(r, k)) == str(v) for k, v in where.items())])
    if not picked:
        raise ValueError(f"no records of {case_name} match {where or 'anything'}: run the case first, "
                         f"or check --where against `python3 -m harness summary`")
    grid: dict = {}
    # Oldest first, so that where two environments of one machine ran a case the newest shows.
    for r in sorted(picked, key=lambda r: r.record.created):
        at = (tuple(_value(r, d) for d in down), _value(r, across))
        if at in grid:
            _one_case_per_cell(grid[at], r)
        grid[at] = r
    return grid


def _measured_boxes(rows: list[Row]) -> list[Row]:
    """The rows of the machines that ran at least one of them: a box that skipped them all (a
    CPU box, for GPU cases) says nothing about them and takes no column."""
    ran = {machine_label(r) for r in rows if r.record.outcome != SKIPPED}
    return [r for r in rows if machine_label(r) in ran]


def _one_case_per_cell(was: Row, row: Row) -> None:
    """Two records in one cell must be the same case on the same machine (the newer wins); two
    machines or parameters folded into one cell would show one of them as if it were all."""
    names = sorted({MACHINE} | set(was.record.params) | set(row.record.params))
    differ = [n for n in names if _value(was, n) != _value(row, n)]
    if differ:
        pairs = ", ".join(f"{n} {_value(was, n)} and {_value(row, n)}" for n in differ)
        raise ValueError(f"one cell would hold records that differ in {pairs}: add "
                         f"{' or '.join(differ)} to --down, or pick one with --where {differ[0]}=VALUE")


def _base(grid: dict, down: list[str], across: str, versus, key: tuple, col):
    """The row that differs from (key, col) only in holding ``versus``'s value, or None."""
    if not versus:
        return None
    name, value = versus
    if name == across:
        return next((r for (k, c), r in grid.items() if k == key and str(c) == str(value)), None)
    i = down.index(name)
    return next((r for (k, c), r in grid.items()
                 if c == col and str(k[i]) == str(value) and k[:i] + k[i + 1:] == key[:i] + key[i + 1:]), None)


def table(rows: list[Row], case_name: str, down: list[str], across: str, shows: list[str],
          where: dict | None = None, versus: tuple[str, str] | None = None) -> str:
    """``versus=(parameter, value)``: step, rate and peak also as a multiple of the record that
    differs only in holding that value (``("technique", "fp32")``: each trick against fp32)."""
    case = cases.get(case_name)
    _check_request(case, down, across, shows, versus)
    grid = _grid(rows, case_name, down, across, where or {})
    orders = [case.ordered(d, {k[i] for k, _ in grid}) for i, d in enumerate(down)]
    keys = sorted({k for k, _ in grid}, key=lambda k: tuple(o.index(v) for o, v in zip(orders, k)))
    cols = case.ordered(across, {c for _, c in grid})
    lines = [f"| {', '.join(down)} | " + " | ".join(f"{across} {c}" for c in cols) + " |",
             "| --- |" + " --- |" * len(cols)]
    for k in keys:
        cells = [cell(grid.get((k, c)), shows, _base(grid, down, across, versus, k, c)) for c in cols]
        lines.append(f"| {', '.join(map(str, k))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(results: str | Path, case: str, down: str, across: str, show: str, where: list[str],
         versus: str | None = None) -> int:
    try:
        c = cases.get(case)
        against = tuple(_where(c, [versus]).items())[0] if versus else None
        text = table(load_rows(Path(results)), case, down.split(","), across, show.split(","), _where(c, where), against)
    except ValueError as e:
        raise SystemExit(f"oombench: {e}")
    print(text)
    return 0
