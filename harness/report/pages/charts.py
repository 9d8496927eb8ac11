"""Throughput against peak memory, one chart per workload and GPU, drawn in the reader's browser.

The library is Chart.js 4 (MIT), vendored minified under ``vendor/`` with its licence and copied
beside the pages: scatter charts, tooltips on hover and tap, and click events are built in, it is
one file of about 200 KB with no dependency, and it is well kept (frequent releases, wide use).
uPlot is smaller, but hovering a point of its scatter mode is a demo to copy by hand; ECharts and
plotly.js do what is needed here at a megabyte or more.

A page opened from ``file://`` can fetch nothing, so each chart's data travel as JSON inside the
page, every text in them computed here with the pages' own formatters. Each technique has its own
colour and marker; the key is a list under the canvas, never over a point, each line a link to
the record as its point is. Both axes start at zero: a window fitted to the points would show a
0.1% difference as the chart's whole height."""
from __future__ import annotations

import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from harness.measure.outcomes import OK
from harness.report.families import memory_name
from harness.report.pages.headline import leading
from harness.report.pages.fmt import fmt_params
from harness.report.model import Row, pareto
from harness.units import GB, figure, gb

VENDORED = Path(__file__).parent / "vendor" / "chart.umd.min.js"
SCRIPT = "chart.umd.min.js"  # the file name beside the pages
# Ten colours (matplotlib's tab10), then the next marker: forty techniques of one chart never look
# alike. A marker is filled on the Pareto frontier and hollow off it, in the key as on the canvas.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MARKERS = (("circle", "●", "○"), ("rect", "■", "□"), ("rectRot", "◆", "◇"), ("triangle", "▲", "△"))
WRAP = 30  # characters a tooltip line holds: a 390 px screen shows it whole
MOST = 12  # points a chart holds: past a dozen, its markers and key are a puzzle, not an answer


@dataclass(frozen=True)
class Point:
    row: Row
    name: str  # what tells this technique from the others of its chart
    peak: int  # bytes
    rate: float
    front: bool  # on the Pareto frontier
    colour: str
    marker: str  # Chart.js's point style
    glyph: str  # the same mark as text, for the key


def legend_names(techniques: list[dict]) -> list[str]:
    """Each technique named by what differs within its chart: "budget=card micro_batch=8" on
    every point would push the one word that tells them apart out of the key."""
    keys = [k for k in dict.fromkeys(k for t in techniques for k in t)
            if len({str(t.get(k)) for t in techniques}) > 1]
    return [fmt_params({k: t.get(k) for k in keys}) if keys else fmt_params(t) for t in techniques]


def points(rows: list[Row]) -> list[Point]:
    """One point per row (rows of one rate unit), styled by its place in the chart."""
    xy = [(r.peak(), r.rate()[0]) for r in rows]
    out = []
    for i, (row, name, (peak, rate), front) in enumerate(zip(rows, legend_names([r.technique for r in rows]),
                                                             xy, pareto(xy))):
        shape, filled, hollow = MARKERS[(i // len(COLOURS)) % len(MARKERS)]
        out.append(Point(row, name, peak, rate, front, COLOURS[i % len(COLOURS)], shape, filled if front else hollow))
    return out


def charts_for(case: str, rows: list[Row]) -> list[dict]:
    """One chart per workload and GPU (machine and library versions): a frontier drawn across
    16k to 2M nodes, or across two cards, compares nothing. A workload of more than ``MOST``
    points is split (``split``), each part a chart titled by what holds it apart; in the order
    of the answer's tables (``headline.leading``)."""
    groups = defaultdict(list)
    for r in rows:
        if r.record.outcome == OK and r.peak() is not None:
            groups[(fmt_params(r.workload), r.environment_key)].append(r)
    memory = memory_name(case)
    out = []
    for (workload, env), wrows in sorted(groups.items(), key=lambda kv: leading(kv[0], kv[1])):
        unit = wrows[0].rate()[1]
        title = f"{case} on {env[0]}: {workload}" if workload != "(none)" else f"{case} on {env[0]}"
        for part, rs in split([r for r in wrows if r.rate()[1] == unit]):
            pts = points(rs)
            out.append({"workload": workload, "env": env, "unit": unit, "title": f"{title}{part}", "points": pts,
                        "x_label": f"{memory} (GB)", "y_label": unit, "memory": memory,
                        "frontier": [p.row for p in pts if p.front]})
    return out


def split(rows: list[Row]) -> list[tuple[str, list[Row]]]:
    """(what holds a part apart, its rows), each part of ``MOST`` rows at most: by the value of
    the technique's parameter that makes the fewest parts (a budget, the precision), again within
    a part still too big; where no parameter groups rows, in runs of like size by peak. A part's
    words ("", ", budget=16GB") go after its chart's title."""
    if len(rows) <= MOST:
        return [("", rows)]
    keys = [k for k in dict.fromkeys(k for r in rows for k in r.technique)
            if len({str(r.technique.get(k)) for r in rows}) > 1]
    # a parameter that leaves two points a chart on average or more: one that names each point
    # (technique alone) would draw a chart a point
    parts = [p for p in (_by(rows, k) for k in keys) if 1 < len(p) <= len(rows) // 2]
    if not parts:
        ordered = sorted(rows, key=lambda r: r.peak())
        n = -(-len(ordered) // MOST)
        size = -(-len(ordered) // n)
        runs = [ordered[i:i + size] for i in range(0, len(ordered), size)]
        return [(f", peaks {gb(run[0].peak())} to {gb(run[-1].peak())}", run) for run in runs]
    best = min(parts, key=lambda p: (len(p), max(len(rs) for rs in p.values())))
    return [(f", {label}{more}", rs2) for label, rs in best.items() for more, rs2 in split(rs)]


def _by(rows: list[Row], key: str) -> dict[str, list[Row]]:
    out = defaultdict(list)
    for r in rows:
        out[fmt_params({key: r.technique.get(key)})].append(r)
    return dict(out)


def title_lines(name: str) -> list[str]:
    """A point's name in lines of ``WRAP`` characters, broken between words only (never inside a
    word or at a hyphen): a word longer than a line has one of its own."""
    return textwrap.wrap(name, WRAP, break_long_words=False, break_on_hyphens=False) or [name]


def spec(chart: dict, link) -> dict:
    """What the page's script draws, as JSON: ``link(row)`` is the address of a row's record."""
    pts = chart["points"]
    return {"x_label": chart["x_label"], "y_label": chart["y_label"],
            "points": [{"x": p.peak / GB, "y": p.rate, "title": title_lines(p.name),
                        "lines": [f"{figure(p.rate)} {chart['unit']}", f"{gb(p.peak)} {chart['memory']}"]
                        + (["on the Pareto frontier"] if p.front else []),
                        "href": link(p.row), "colour": p.colour, "marker": p.marker, "front": p.front}
                       for p in pts],
            "frontier": [{"x": p.peak / GB, "y": p.rate} for p in sorted(pts, key=lambda p: (p.peak, -p.rate))
                         if p.front]}
