"""``python3 -m harness pages``: asv's own site (history by commit) and the project's comparison
pages, static, from the committed results/. Data flows one way: records -> rows -> views -> HTML."""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from jinja2.bccache import Bucket, BytecodeCache
from markupsafe import Markup, escape

from harness.measure.guards import owned
from harness.measure.guards.inputs import Refused, writable_folder
from harness.measure.instruments.devices import describe
from harness.measure.outcomes import DOES_NOT_FIT, OK
from harness.measure.records.store import COMMITTED, REPO
from harness.report.efficiency import Ceilings, best_pageable, efficiency, host_bound
from harness.report import estimates, search_cost
from harness.report.pages import charts, chooser, headline, versions
from harness.report.families import family, memory_name
from harness.report.pages.names import Names, UnsafePath, inside, names
from harness.report.pages.fmt import fmt_params, fmt_times
from harness.report.pages.tableview import family_table
from harness.report.model import Row, latest, load_rows, newest_stack, what_fits
from harness.report.selection import expression
from harness.report.specs import FITS_BATCH, FITS_SEQUENCE, HEADLINE, PREDICT, SEEDS, SEEDS_INTRO
from harness.report.tables import (ALL_WHOLE_CASE, BEFORE_RULE, HOST_BOUND, HOST_SET, NOT_MONOTONE, NOTES, OLD_CAP,
                                   WHOLE_CASE, does_not_fit)
from harness.units import figure, gb

MARK = ".oombench-pages"  # lists what a build wrote: a folder holding only that, a build may replace whole
BUILDING, OLD = "building", "old"  # the temporary folders beside --out: the new pages, the old ones going
ASV_SITE = "../html/index.html"  # where asv's own site sits, from the pages' folder
FITS_OPEN = 12  # a "what fits" table of more parameter sets than this starts folded: a screen of it is enough


# -- views: plain dicts and lists for the templates --------------------------------------------

def environments(rows: list[Row]) -> list[tuple[str, str]]:
    return sorted({r.environment_key for r in rows})


def ceiling_rows(rows: list[Row], machine: str, probes: tuple) -> list[tuple[str, Row]]:
    """(label, row): the latest ceiling of each probe on a machine, whatever library versions
    measured it; then the pageable copies' best buffer size, where a sweep was measured."""
    mine = [r for r in rows if r.case == "ceilings" and r.machine == machine and r.record.outcome == OK
            and (not probes or r.record.params.get("probe") in probes)]
    by_probe = {}
    for r in sorted(mine, key=lambda r: r.record.created):
        by_probe[str(r.record.params.get("probe"))] = r
    out = list(by_probe.items())
    if not probes or {"h2d_pageable", "d2h_pageable"} & set(probes):
        by_rec = {id(r.record): r for r in rows}
        for (kind, direction), rec in sorted(best_pageable(r.record for r in rows).items()):
            if kind == machine:
                size = rec.params.get("size_mib")
                out.append((f"pageable {direction} (best of the sweep: {gb(size * 2**20)} buffers)", by_rec[id(rec)]))
    return out


def family_view(case: str, rows: list[Row], all_rows: list[Row]) -> dict:
    fam = family(case)
    ft = family_table(rows)
    sections = answer_sections(case, newest_stack(rows)) if fam.pareto else []
    envs = ft["envs"]
    schemas = {r.record.schema for r in rows if r.record.outcome == OK}
    return {"case": case, "family": fam, "envs": envs, "table": ft["shown"], "folded": ft["folded"],
            "folded_line": ft["folded_line"],
            "host_bound": any(host_bound(r.record) is not None for r in rows if r.record.outcome == OK),
            "whole_case": (NOTES[WHOLE_CASE] if len(schemas) > 1 else ALL_WHOLE_CASE) if 1 in schemas else "",
            "mixed_schemas": len(schemas) > 1,
            "sections": sections, "words": headline.in_words(sections[0]) if sections else "",
            "memory": memory_name(case),
            "baseline": fmt_params(dict(fam.baseline)) if fam.baseline else "",
            "ceilings": {m: ceiling_rows(all_rows, m, fam.ceilings) for m in dict.fromkeys(e[0] for e in envs)},
            "fits": fits_view(case, rows) if case in what_fits(rows) else None,
            "answers": answers_view(fam.answer, rows) if fam.answer else None}


def answer_sections(case: str, rows: list[Row]) -> list[dict]:
    return gpu_sections(headline.gpu_tables(rows), charts.charts_for(case, rows))


def gpu_sections(tables: list[dict], figures: list[dict]) -> list[dict]:
    """One section per GPU (machine and library versions): its answer table, then its charts, so
    whoever reads one GPU reads one block; in the tables' order, a GPU with charts and no table last."""
    by_env = defaultdict(list)
    for ch in figures:
        by_env[ch["env"]].append(ch)
    sections = [{**t, "charts": by_env.pop(t["env"], [])} for t in tables]
    return sections + [{"env": env, "lines": [], "budget_lines": [], "charts": chs} for env, chs in by_env.items()]


def answers_view(column: str, rows: list[Row]) -> dict:
    """The sizes each check found (``max_*``), one row per machine and remaining parameters, one
    column per value of ``column`` (the budget), in the order the case declares them; each cell
    (row, key, size, whether the size is where the search stopped: a lower bound, whether the
    host's memory set it, whether it was searched under the old, short cap, whether before today's
    rule, which smaller sizes did not fit where it did: None where none was seen)."""
    from harness import cases
    from harness.cases.fits import before_rule, host_bound, lower_bound, not_monotone, old_cap
    values = {r.record.params[column] for r in rows if column in r.record.params}
    columns = (cases.get(rows[0].case).ordered(column, values) if rows and rows[0].case in cases.names()
               else sorted(values, key=str))
    table = defaultdict(dict)
    for r in rows:
        rest = {k: v for k, v in r.record.params.items() if k != column}
        found = {k: v for k, v in (r.record.check or {}).items() if k.startswith("max_")}
        key, value = next(iter(found.items()), (None, None))
        table[(r.machine, fmt_params(rest))][r.record.params.get(column)] = (
            r, key, value, lower_bound(r.case, r.record.check, key), host_bound(r.case, r.record.check, key),
            old_cap(r.record, key), before_rule(r.record, key), not_monotone(r.case, r.record.check, key))
    return {"column": column, "columns": columns, "table": dict(table)}


def fits_view(case: str, rows: list[Row]) -> dict:
    """Per GPU memory budget: which parameters fit, from ok and does-not-fit records."""
    budgets = sorted({(r.machine, r.gpu_memory) for r in rows if r.gpu_memory})
    table = defaultdict(dict)
    for r in rows:
        if r.record.outcome in (OK, DOES_NOT_FIT) and r.gpu_memory:
            table[fmt_params(r.record.params)][(r.machine, r.gpu_memory)] = r
    return {"budgets": budgets, "table": dict(table), "open": len(table) <= FITS_OPEN}


def seeds_view(rows: list[Row]) -> list[dict]:
    """Each seed's table as the docs print it (``harness.report.specs.SEEDS``), its cells linked to
    their records. A table these records cannot make (two records in one cell, in a folder of local
    runs) says why in its place, and the other seeds' tables still show."""
    out = []
    for spec in SEEDS:
        try:
            made, why = spec.grid(rows), None
        except ValueError as e:
            made, why = None, str(e)
        slug = re.sub(r"[^a-z0-9]+", "-", spec.title.lower()).strip("-")[:60]
        out.append({"id": f"seed-{len(out)}-{slug}", "title": spec.title, "text": spec.text,
                    "command": spec.command(), "bench": expression(spec.bench), "grid": made, "why": why})
    return out


def predict_view(rows: list[Row], results: Path) -> dict:
    """The what-fits estimators against the measured answers, the tables of
    ``docs/results/predict.md`` (``harness.report.estimates``): the score per GPU, the suite's per
    axis, and cell by cell, and what the searches cost (``harness.report.search_cost``); empty tables
    where no what-fits search is on file."""
    found = estimates.cells(rows, results)
    return {"title": PREDICT.title, "text": PREDICT.text, "bench": expression(FITS_BATCH.bench + FITS_SEQUENCE.bench),
            "tables": estimates.tables(found) if found else [], "checks": estimates.replay_checks(results),
            "marks": (estimates.PROBED_MARK, estimates.STOPPED_MARK, estimates.RULE_MARK,
                      estimates.REFUSED_MARK) if found else (),
            "ruled": estimates.under_the_rule(found),
            "refused": estimates.refusals(found), "costs": search_cost.tables(rows) if found else []}


def headline_view(rows: list[Row]) -> dict | None:
    """The README's headline table (``specs.HEADLINE``) as the seeds' tables are shown, or None
    where these records hold none of it (a folder of local runs)."""
    try:
        made = HEADLINE.grid(rows)
    except ValueError:  # two records in one cell: the family page still shows each
        return None
    return None if made is None else {"grid": made, "command": HEADLINE.command(),
                                      "where": " ".join(HEADLINE.where), "case": HEADLINE.case}


def runs(items: list[dict], key: str) -> list[tuple]:
    """(value, items) for each run of like ``key``, in the order given: Jinja's groupby sorts by
    the value, which would put the answer's leading workload wherever its name sorts."""
    return [(value, list(group)) for value, group in itertools.groupby(items, key=lambda item: item[key])]


def code_spans(text: str) -> Markup:
    """A spec's text with its `backtick` spans as <code>, everything escaped."""
    parts = str(text).split("`")
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts))


def words(text) -> Markup:
    """Text whose hyphenated words are kept whole ("nvidia-h100-80gb-hbm3-x1", "cupy-cuda13x"): a
    table squeezed by the screen breaks its lines between words, never at a hyphen inside a value."""
    return Markup(" ").join(Markup('<span class="word">{}</span>').format(w) if "-" in w else escape(w)
                            for w in str(text).split(" "))


def machines_view(rows: list[Row], results: Path) -> list[dict]:
    out = []
    for machine in sorted({r.machine for r in rows}):
        info = results / machine / "machine.json"
        mine = [r for r in rows if r.machine == machine]
        out.append({"name": machine, "records": len(mine),
                    "commits": sorted({str(r.record.commit or "none")[:8] for r in mine}),
                    "asv": _json(info),
                    "env": mine[-1].record.environment,
                    "gpu": describe(mine[-1].record.environment.devices)})  # asv's "gpu" keeps MiB
    return out


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# -- rendering -----------------------------------------------------------------------------------

class _Compiled(BytecodeCache):
    """The templates compiled once a process: each build makes its own environment (its rows'
    ceilings, its page names), which would otherwise compile every template again."""

    def __init__(self):
        self.codes = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        if bucket.key in self.codes:
            bucket.bytecode_from_string(self.codes[bucket.key])

    def dump_bytecode(self, bucket: Bucket) -> None:
        self.codes[bucket.key] = bucket.bytecode_to_string()


COMPILED = _Compiled()


def jinja(rows: list[Row], pages: Names, linked: set | None = None) -> Environment:
    """The templates' environment; ``rows`` hold the ceilings each rate is read against, ``pages``
    the file of each case's records; ``linked`` gathers the id of each record a page links to."""
    env = Environment(loader=PackageLoader("harness.report.pages", "templates"), autoescape=select_autoescape(["html"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, bytecode_cache=COMPILED)
    env.filters.update(rate=figure, times=fmt_times, bytes=gb, params=fmt_params, code=code_spans, words=words,
                       does_not_fit=does_not_fit, runs=runs)  # worded as the tables word it
    ceilings = Ceilings(r.record for r in rows)

    def eff(row: Row) -> str:
        e = efficiency(row.record, ceilings)
        return "" if e is None else e.text() + ("" if e.same_host else ", another host's ceiling")

    def busy(row: Row) -> str:
        b = host_bound(row.record)
        return "" if b is None else f"{b:.0%}"

    def prov(row: Row) -> str:
        if linked is not None:
            linked.add(row.rid)
        return f"{pages.provenance[row.case]}#{row.rid}"

    # the marks' notes are the markdown tables' own, so a page and a table explain a mark in the same words
    env.globals.update(prov=prov, chart_spec=lambda chart: charts.spec(chart, prov), chart_script=charts.SCRIPT,
                       OK=OK, DOES_NOT_FIT=DOES_NOT_FIT, eff=eff, busy=busy, WHOLE_CASE=WHOLE_CASE,
                       HOST_BOUND_NOTE=NOTES[HOST_BOUND], HOST_SET_NOTE=NOTES[HOST_SET][2:],
                       OLD_CAP_NOTE=NOTES[OLD_CAP][2:], BEFORE_RULE_NOTE=NOTES[BEFORE_RULE][2:],
                       NOT_MONOTONE_NOTE=NOTES[NOT_MONOTONE][2:])
    return env


def write_pages(results: Path, into: Path) -> list[Path]:
    """Every page into ``into``, each path checked to stay inside it and to be no other page's."""
    all_rows = load_rows(results)
    if not all_rows:
        raise ValueError(f"no record under {results / 'records'}: run `python3 -m harness run` first, or pass "
                         "--results with the folder that holds records/")
    shown = latest(all_rows)
    cases = sorted({r.case for r in shown})
    by_case = defaultdict(list)
    for r in all_rows:
        by_case[r.case].append(r)
    pages = names(by_case)
    linked = set()  # the records a figure links to: the provenance pages hold those, written last
    env = jinja(all_rows, pages, linked)  # each rate's ceiling is its own host's, though a later host measured one
    common = {"cases": cases, "pages": pages.page, "prov_pages": pages.provenance, "asv_site": asv_link(into),
              "local": local_label(results)}
    written, claimed = [], set()

    def claim(name: str) -> Path:
        path = inside(into, name)
        if str(path).casefold() in claimed:
            raise UnsafePath(f"two pages of one build would be written to {path}: a bug in the page names")
        claimed.add(str(path).casefold())
        return path

    def write(name: str, template: str, **ctx):
        path = claim(name)
        path.write_text(env.get_template(template).render(**common, **ctx), encoding="utf-8", errors="replace")
        written.append(path)

    shutil.copyfile(Path(__file__).parent / "templates" / "style.css", claim("style.css"))
    shutil.copyfile(charts.VENDORED, claim(charts.SCRIPT))
    shown_of = defaultdict(list)
    for r in shown:
        shown_of[r.case].append(r)
    write("index.html", "index.html", machines=machines_view(all_rows, results), headline=headline_view(all_rows),
          counts={c: len(shown_of[c]) for c in cases},
          versions=versions.comparisons(all_rows, versions.learned(all_rows)), fits_cases=what_fits(shown))
    write("chooser.html", "chooser.html", c=chooser.view(newest_stack(shown)))
    write("seeds.html", "seeds.html", intro=SEEDS_INTRO, sections=seeds_view(all_rows))
    write("predict.html", "predict.html", p=predict_view(all_rows, results))
    for case in cases:
        write(pages.page[case], "family.html", v=family_view(case, shown_of[case], shown))
    shown_by_case = {c: [r for r in rs if r.rid in linked] for c, rs in by_case.items()}
    write("provenance.html", "provenance_index.html", counts={c: len(rs) for c, rs in shown_by_case.items()},
          totals={c: len(rs) for c, rs in by_case.items()})
    for case, rs in sorted(shown_by_case.items()):
        write(pages.provenance[case], "provenance.html", rows=rs, case=case, total=len(by_case[case]))
    return written


def asv_link(into: Path) -> str:
    """The address of asv's site beside the pages (``harness pages`` publishes it to ../html), or ""
    where none is there (a ``--no-asv`` build, another --out): a page never links to nothing."""
    return ASV_SITE if (Path(into).parent / ASV_SITE.removeprefix("../")).is_file() else ""


def local_label(results: Path) -> str:
    """"" for the committed results/; else the folder named, so a local run never passes for a
    committed one (the pages show committed results unless --results asks for another folder)."""
    return "" if Path(results).resolve() == COMMITTED.resolve() else f"local results from {results}"


def build_pages(results: Path, out: Path) -> list[Path]:
    """Builds into a new folder beside ``out`` and puts it in place at the end: a build that fails
    leaves the old pages whole, and a folder holding anything a build did not make is refused."""
    out = Path(out).absolute()
    problem = owned.refusal(out, MARK, "--out")
    if problem:
        raise ValueError(problem)
    out.parent.mkdir(parents=True, exist_ok=True)
    owned.remove_stale(out, (BUILDING, OLD))
    tmp = Path(tempfile.mkdtemp(prefix=owned.temp_name(out, BUILDING), dir=out.parent))
    try:
        written = write_pages(Path(results), tmp)
        owned.mark(tmp, MARK, "python3 -m harness pages, which replaces this folder whole")
        owned.open_as_umask(tmp)
        _swap(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out / p.relative_to(tmp.resolve()) for p in written]


def _swap(new: Path, out: Path) -> None:
    """``new`` in place of ``out``, checked again just before: the old folder goes only if a build made it all."""
    problem = owned.refusal(out, MARK, "--out")
    if problem:
        raise ValueError(problem)
    old = Path(tempfile.mkdtemp(prefix=owned.temp_name(out, OLD), dir=out.parent)) / out.name
    try:
        if out.exists():
            os.replace(out, old)
        try:
            os.replace(new, out)
        except OSError:
            if old.exists():
                os.replace(old, out)
            raise
    finally:
        shutil.rmtree(old.parent, ignore_errors=True)


def check_args(results: str | None, out: str | None) -> str | None:
    """Why the arguments cannot make pages (the fix named), or None: checked before anything is written."""
    results_dir = Path(results) if results else COMMITTED
    out_dir = Path(out) if out else REPO / ".asv" / "pages"
    if not (results_dir / "records").is_dir():
        return f"{results_dir} holds no records/ folder: pass --results with the folder that holds records/"
    if out == "":
        return "--out '' names no folder: name one, e.g. --out pages, or leave --out out for .asv/pages"
    try:
        writable_folder(out_dir.parent, f"--out {out_dir}: the folder it goes in")  # not under a file, writable
    except Refused as e:
        return str(e)
    return owned.refusal(out_dir.absolute(), MARK, "--out")


def main(results: str | None = None, out: str | None = None) -> int:
    """0 with the pages built; 2 with a one-line message (and the old pages untouched) where they cannot be."""
    results_dir = Path(results) if results else COMMITTED
    out_dir = Path(out) if out else REPO / ".asv" / "pages"
    try:
        problem = check_args(results, out)
        if problem:
            raise ValueError(problem)
        written = build_pages(results_dir, out_dir)
    except (ValueError, OSError) as e:
        print(f"oombench pages: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"oombench: comparison pages in {out_dir} ({len(written)} pages); open {out_dir / 'index.html'}")
    return 0
