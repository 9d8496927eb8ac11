"""``python3 -m harness pages``: asv's own site (history by commit) and the project's comparison
pages, static, from the committed results/. Data flows one way: records -> rows -> views -> HTML."""
from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from harness.measure.devices import describe
from harness.measure.outcomes import DOES_NOT_FIT, OK
from harness.measure.store import COMMITTED, REPO
from harness.report.pages import charts
from harness.report.pages.families import family
from harness.report.pages.model import Row, latest, load_rows, pareto, what_fits
from harness.units import GB, gb



# -- formatting: one rule per kind of figure, shared by every page (bytes: harness.units.gb) ------

def fmt_rate(v: float) -> str:
    return f"{v:,.1f}" if v >= 10 else f"{v:,.2f}" if v >= 1 else f"{v:,.3f}"


def fmt_params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(none)"


# -- views: plain dicts and lists for the templates --------------------------------------------

def environments(rows: list[Row]) -> list[tuple[str, str]]:
    return sorted({r.environment_key for r in rows})


def ceiling_rows(rows: list[Row], machine: str, probes: tuple) -> list[Row]:
    """The latest ceiling of each probe on a machine, whatever library versions measured it."""
    mine = [r for r in rows if r.case == "ceilings" and r.machine == machine and r.record.outcome == OK
            and (not probes or r.record.params.get("probe") in probes)]
    by_probe = {}
    for r in sorted(mine, key=lambda r: r.record.created):
        by_probe[r.record.params.get("probe")] = r
    return list(by_probe.values())


def family_view(case: str, rows: list[Row], all_rows: list[Row]) -> dict:
    fam = family(case)
    envs = environments(rows)
    table = defaultdict(dict)
    for r in rows:
        table[fmt_params(r.record.params)][r.environment_key] = r
    return {"case": case, "family": fam, "envs": envs, "table": dict(table),
            "charts": charts_for(case, rows) if fam.pareto else [],
            "ceilings": {m: ceiling_rows(all_rows, m, fam.ceilings) for m in sorted({e[0] for e in envs})},
            "fits": fits_view(case, rows) if case in what_fits(rows) else None,
            "answers": answers_view(fam.answer, rows) if fam.answer else None}


def answers_view(column: str, rows: list[Row]) -> dict:
    """The sizes each check found (``max_*``), one row per machine and remaining parameters, one
    column per value of ``column`` (the budget), in the order the case declares them."""
    from harness import cases
    values = {r.record.params[column] for r in rows if column in r.record.params}
    columns = (cases.get(rows[0].case).ordered(column, values) if rows and rows[0].case in cases.names()
               else sorted(values, key=str))
    table = defaultdict(dict)
    for r in rows:
        rest = {k: v for k, v in r.record.params.items() if k != column}
        found = {k: v for k, v in (r.record.check or {}).items() if k.startswith("max_")}
        table[(r.machine, fmt_params(rest))][r.record.params.get(column)] = (r, *next(iter(found.items()), (None, None)))
    return {"column": column, "columns": columns, "table": dict(table)}


def charts_for(case: str, rows: list[Row]) -> list[dict]:
    by_workload = defaultdict(list)
    for r in rows:
        if r.record.outcome == OK and r.peak() is not None:
            by_workload[fmt_params(r.workload)].append(r)
    out = []
    for workload, wrows in sorted(by_workload.items()):
        unit = wrows[0].rate()[1]
        series = []
        for env in environments(wrows):
            pts = [r for r in wrows if r.environment_key == env and r.rate()[1] == unit]
            xy = [(r.peak() / GB, r.rate()[0]) for r in pts]
            front = pareto(xy)
            series.append({"label": f"{env[0]} ({env[1]})",
                           "points": [(x, y, fmt_params(r.technique), on) for (x, y), r, on in zip(xy, pts, front)],
                           "frontier": [r for r, on in zip(pts, front) if on]})
        memory = "peak device memory gain" if family(case).memory == "device" else "peak host RSS"
        svg = charts.pareto_svg(series, f"{memory} (GB)", unit, f"{case}: {workload}")
        out.append({"workload": workload, "svg": svg, "series": series, "unit": unit})
    return out


def fits_view(case: str, rows: list[Row]) -> dict:
    """Per GPU memory budget: which parameters fit, from ok and does-not-fit records."""
    budgets = sorted({(r.machine, r.gpu_memory) for r in rows if r.gpu_memory})
    table = defaultdict(dict)
    for r in rows:
        if r.record.outcome in (OK, DOES_NOT_FIT) and r.gpu_memory:
            table[fmt_params(r.record.params)][(r.machine, r.gpu_memory)] = r
    return {"budgets": budgets, "table": dict(table)}


def version_comparisons(rows: list[Row]) -> list[dict]:
    """Cases measured on one machine under more than one set of library versions, side by side."""
    groups = defaultdict(list)
    for r in rows:
        if r.record.outcome == OK:
            groups[(r.case, fmt_params(r.record.params), r.machine)].append(r)
    out = []
    for (case, params, machine), rs in sorted(groups.items()):
        if len({r.versions for r in rs}) > 1:
            rs = sorted(rs, key=lambda r: r.versions)
            out.append({"case": case, "params": params, "machine": machine, "rows": rs,
                        "ratio": rs[-1].record.timing.median_s / rs[0].record.timing.median_s})
    return out


def machines_view(rows: list[Row], results: Path) -> list[dict]:
    out = []
    for machine in sorted({r.machine for r in rows}):
        info = results / machine / "machine.json"
        mine = [r for r in rows if r.machine == machine]
        out.append({"name": machine, "records": len(mine),
                    "commits": sorted({(r.record.commit or "none")[:8] for r in mine}),
                    "asv": json.loads(info.read_text()) if info.exists() else None,
                    "env": mine[-1].record.environment,
                    "gpu": describe(mine[-1].record.environment.devices)})  # asv's "gpu" keeps MiB
    return out


# -- rendering -----------------------------------------------------------------------------------

def jinja() -> Environment:
    env = Environment(loader=PackageLoader("harness.report.pages", "templates"), autoescape=select_autoescape(["html"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(rate=fmt_rate, bytes=lambda b: gb(b, 2), params=fmt_params)
    env.globals.update(OK=OK, DOES_NOT_FIT=DOES_NOT_FIT)
    return env


def build_pages(results: Path, out: Path) -> list[Path]:
    all_rows = load_rows(results)
    if not all_rows:
        raise SystemExit(f"oombench pages: no record under {results / 'records'}: run `python3 -m harness run` "
                         "first, or pass --results with the folder that holds records/")
    shown = latest(all_rows)
    cases = sorted({r.case for r in shown})
    env = jinja()
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).parent / "templates" / "style.css", out / "style.css")
    common = {"cases": cases, "asv_site": "../html/index.html"}
    written = []

    def write(name: str, template: str, **ctx):
        path = out / name
        path.write_text(env.get_template(template).render(**common, **ctx))
        written.append(path)

    write("index.html", "index.html", machines=machines_view(all_rows, results),
          counts={c: sum(r.case == c for r in shown) for c in cases},
          versions=version_comparisons(shown), fits_cases=what_fits(shown))
    for case in cases:
        write(f"{case}.html", "family.html", v=family_view(case, [r for r in shown if r.case == case], shown))
    write("provenance.html", "provenance.html", rows=all_rows)
    return written


def main(results: str | None = None, out: str | None = None) -> int:
    results_dir = Path(results) if results else COMMITTED
    out_dir = Path(out) if out else REPO / ".asv" / "pages"
    written = build_pages(results_dir, out_dir)
    print(f"oombench: comparison pages in {out_dir} ({len(written)} pages); open {out_dir / 'index.html'}")
    return 0
