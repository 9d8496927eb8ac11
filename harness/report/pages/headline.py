"""The answer first: per GPU (machine and library versions), each technique's rate and peak as a
multiple of the family's baseline, with the host-bound
and failed-check marks. Only rows with a figure or an outcome a reader acts on are here; the
skipped stay in the folded line below."""
from __future__ import annotations

from collections import defaultdict

from harness.measure.guards.budget import CARD, is_whole_card
from harness.measure.outcomes import FAILED, OK, SKIPPED
from harness.report.efficiency import host_bound
from harness.report.families import family, memory_name
from harness.report.pages.fmt import fmt_params, fmt_times
from harness.report.model import Row
from harness.report.specs import HEADLINE
from harness.units import figure as fig, gb


def peak_of(row: Row) -> tuple[int | None, str]:
    """The peak a line and its multiple read, and its name: the family's one memory figure (the
    device's gain, or host RSS), the one its charts put across. The allocator's own peak would hide
    what an allocator setting changes (reserved, cached, fragmented memory) and name another
    figure than the chart's beside it."""
    return row.peak(), memory_name(row.case)


def times(mine: float | None, theirs: float | None) -> float | None:
    return mine / theirs if mine and theirs else None


def is_base(row: Row, pairs: tuple) -> bool:
    return bool(pairs) and all(str(row.record.params.get(k)) == str(v) for k, v in pairs)


def base_for(row: Row, candidates: list[Row]) -> Row | None:
    """Of the baseline rows measured on the same GPU and workload, the one sharing most of this
    row's other parameters (a budget); None where none holds the row's own values of the family's
    ``matched`` parameters (the tricks' micro-batch: a multiple over another micro-batch would
    charge the technique with what accumulation changes)."""
    def shared(b: Row) -> int:
        return sum(b.record.params.get(k) == v for k, v in row.technique.items())
    matched = family(row.case).matched
    ok = [b for b in candidates if b.record.outcome == OK
          and all(b.record.params.get(k) == row.record.params.get(k) for k in matched)]
    return max(ok, key=shared, default=None)


def line(row: Row, base: Row | None) -> dict:
    """One technique's line: its figures, and the ratios where both sides have them."""
    rate = row.rate()
    peak, kind = peak_of(row)
    base_rate = base.rate() if base is not None else None
    base_peak = peak_of(base)[0] if base is not None else None
    same_unit = rate and base_rate and rate[1] == base_rate[1]
    return {"row": row, "technique": fmt_params(row.technique), "base": base, "rate": rate,
            "peak": peak, "peak_kind": kind,
            "rate_x": times(rate[0], base_rate[0]) if same_unit else None,
            "peak_x": times(peak, base_peak) if rate else None,
            "host_bound": host_bound(row.record) if row.record.outcome == OK else None,
            "failed": row.record.outcome == FAILED}


def gpu_tables(rows: list[Row]) -> list[dict]:
    """One table per machine and library versions, lines grouped by workload."""
    pairs = family(rows[0].case).baseline if rows else ()
    groups = defaultdict(list)
    for r in rows:
        if r.record.outcome != SKIPPED:
            groups[(r.environment_key, fmt_params(r.workload))].append(r)
    tables = defaultdict(list)
    for (env, workload), rs in sorted(groups.items(), key=lambda kv: leading(*kv)):
        bases = [r for r in rs if is_base(r, pairs)]
        for r in rs:
            tables[env].append({"workload": workload, **line(r, base_for(r, bases))})  # a baseline reads 1.00x
    order = sorted(tables.items(), key=lambda kv: says_most(*kv))
    return [{"env": env, **split_by_budget(lines)} for env, lines in order]


def headline_group(rows: list[Row]) -> bool:
    """Whether ``rows`` are the README's headline workload."""
    return all(HEADLINE.matches(r) for r in rows)


def leading(key: tuple, rows: list[Row]) -> tuple:
    """The order of a GPU's workloads, the answer first: the README's headline workload, then the
    workload that measured the most ways (the one that compares most), then by name."""
    return not headline_group(rows), -sum(r.record.outcome == OK for r in rows), key


def says_most(env: tuple, lines: list[dict]) -> tuple:
    """Orders GPUs so that the page opens on the one that compares most: GPUs first (a CPU box's
    figures are the footnote, not the answer), then the most techniques measured (a 2-GPU box
    that ran ddp and fsdp says more than a 1-GPU box that could only run single)."""
    measured = {ln["technique"] for ln in lines if ln["row"].record.outcome == OK}
    return not any(ln["row"].gpu_memory for ln in lines), -len(measured), env


def split_by_budget(lines: list[dict]) -> dict:
    """``lines`` on the GPU as it is, and ``budget_lines`` under an emulated smaller card: those
    repeat most techniques once per budget, so they sit folded beneath (the seeds' tables read them
    budget by budget)."""
    on_card = [is_whole_card(ln["row"].record.params.get("budget", CARD)) for ln in lines]
    return {"lines": [ln for ln, whole in zip(lines, on_card) if whole],
            "budget_lines": [ln for ln, whole in zip(lines, on_card) if not whole]}


def in_words(section: dict) -> str:
    """The answer of one GPU's table in a sentence: of its leading workload's lines that ran, the
    one with the least memory and the fastest, each with its multiple of the baseline where it has
    one. "" where no line has both a rate and a peak."""
    lines = section.get("lines") or section.get("budget_lines") or []
    first = [ln for ln in lines if ln["workload"] == lines[0]["workload"]] if lines else []  # the leading one
    ran = [ln for ln in first if ln["rate"] and ln["peak"] and ln["row"].record.outcome == OK]
    if not ran:
        return ""
    least = min(ran, key=lambda ln: (ln["peak"], -ln["rate"][0]))
    fastest = max(ran, key=lambda ln: (ln["rate"][0], -ln["peak"]))
    kind = ran[0]["peak_kind"]

    def said(ln: dict, what: str) -> str:
        x = ln["peak_x"] if what == "peak" else ln["rate_x"]
        figure = gb(ln["peak"]) if what == "peak" else f"{fig(ln['rate'][0])} {ln['rate'][1]}"
        return f"{ln['technique']} ({figure}{f', {fmt_times(x)} the baseline' if x else ''})"
    where = "" if first[0]["workload"] == "(none)" else f", {first[0]['workload']}"
    return (f"On {section['env'][0]}{where}: the least {kind} is {said(least, 'peak')}; "
            f"the fastest is {said(fastest, 'rate')}.")
