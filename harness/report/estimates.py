"""How far each estimator of what fits lands from the measured answer, cell by cell: every
(way, axis, budget, GPU) the committed what-fits searches answered, its latest record.

The suite's predictor (``harness.workloads.search.predict.prediction``) is fed what a search under that
budget had seen before it answered, and nothing near its answer that it had not (``seen_before``):
the three sizes of a cold start (one round side by side), and the probes of the searches of the
same case under smaller budgets, which a run makes first (its budgets run from the smallest up),
in runs filed no later than the cell's; never a probe under the cell's own budget or a larger one
past the cold start. The other estimators are read
from ``results/estimators.json`` (``harness.workloads.search.estimators``, run on the CPU). Each is
scored where it applies: the largest size against the measured one, in search steps; the peak
at the measured answer against the reserved peak its probe measured.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from harness.cases.fits import before_the_rule, exact_cap, search_unit
from harness.measure.records.store import PROBES_SUFFIX, RecordStore, read_lines
from harness.report import markdown, search_cost
from harness.report.model import Row
from harness.report.tables import machine_label
from harness.units import gb
from harness.workloads.search import fits, predict
from harness.workloads.search.estimators import FILE, SHAPE
from harness.workloads.search.probe_log import device_answer

STEP_BAR, PEAK_BAR = 1, 0.03  # the bar: within one search step, and the peak within 3%
COLD = 3  # a cold search's first sizes: its start, the double and the quadruple, one round side by side
NONE = "-"
REPLAYS = "replays.json"  # the replay estimator's answers (``harness.drive.commands.programmes.score``)
# The cell table's marks, said under it wherever it is shown (the docs' page and the site's).
PROBED_MARK = ("² probed (by `programmes record --check`, or, where the replay's size is not the answer, by a search "
               "of that GPU under the same cap): the replay's size fits under this cap and the size after it does "
               "not, as the replay has them; where the replay's size is the larger, more than the search's answer "
               "trains under the cap.")
STOPPED_MARK = ("³ the replay stops where the search did: it runs the measured size and runs out at the two sizes "
                "after it, as the GPU did; its own answer is a larger size past them that it runs, which a search "
                "climbing from under them does not reach (probed only where ² says so).")
RULE_MARK = ("⁴ searched before today's rule: the search stopped at the first size after its answer that did not "
             "fit, without probing the next, so where fitting is not monotone near the top its answer is the top of "
             "the run of fitting sizes its path met (`harness todo` lists it again).")
REFUSED_MARK = "¹ the suite's predictor refused:"


@dataclass(frozen=True)
class Cell:
    gpu: str
    technique: str
    over: str
    budget: str
    allocator: str
    measured: int  # the largest size the search found
    unit: int
    peak: int | None  # the reserved peak its probe at the answer measured
    suite: predict.Fit | None
    refused: str | None  # why the suite's predictor made no prediction
    cap: int
    others: dict  # estimators.json's figures for this shape, {} where it has none
    predicted: int | None = None  # the suite's largest size (``predict.prediction``)
    key: dict = field(default_factory=dict)  # the search's parameters and axis, as its probes are logged
    host_short: int | None = None  # the smallest size the host was seen not to hold (``predict.host_short``)
    replay: dict = field(default_factory=dict)  # the replay's answer (``REPLAYS``), {} where none was scored
    host_limit: int | None = None  # the host's share the way's guard allowed, where its search read it
    seen: dict = field(default_factory=dict)  # size -> whether it fit, for this GPU's probes of the key under the cap
    ruled: bool = True  # its search kept today's rule (``harness.cases.fits.before_the_rule``)


def _key(record) -> dict:
    params, over = record.params, record.params.get("over", "batch")
    allocator = params.get("allocator") or "default"
    return {**{k: params[k] for k in ("device", "workload", "technique", "vocab", "width", "depth", "seq_len")},
            "over": over, **({} if allocator == "default" else {"allocator": allocator})}


@cache
def _log(path: Path) -> tuple:
    """A probe log's entries, each with what torch's out-of-memory message says of the device
    where the entry does not say it itself (logs from before probes reported it)."""
    return tuple({**predict.told(obj.get("reason")), **obj} for _, obj in read_lines(path)[0]) if path.exists() else ()


def cold_sizes(key: dict) -> list[int]:
    """The sizes a cold search probes first: its start (one sample, or the case's sequence) doubled."""
    start = 1 if key["over"] == "batch" else key["seq_len"]
    return [start * 2**i for i in range(COLD)]


def _default(key: dict) -> dict:
    return {k: v for k, v in key.items() if k != "allocator"}


def seen_before(here, elsewhere, key: dict, cap: int) -> tuple[list[dict], list[dict]]:
    """(every probe the predictor is fed, the ones of this machine) for the search of ``key`` under
    ``cap``: the cold start's sizes, from this machine's logs, else (a setting never searched
    before is aimed from the default's probes, as the fits case aims it) the default allocator's,
    else another machine's (a budget caps the same bytes on every card); and this machine's probes
    under smaller caps, of ``key`` or, where it has none, of the default's. ``here``, ``elsewhere``:
    the logs' entries."""
    cold = cold_sizes(key)
    sources = [(here, key), (here, _default(key)), (elsewhere, key), (elsewhere, _default(key))]
    start = next(([e for e in entries if e["key"] == k and e["n"] in cold] for entries, k in sources
                  if {e["n"] for e in entries if e["key"] == k and e["fits"]} >= set(cold)), [])
    below = [e for e in here if e["key"] == key and e["cap"] < cap] or \
        [e for e in here if e["key"] == _default(key) and e["cap"] < cap]
    return start + below, [e for e in start if e in here] + below


def _logs(results: Path, row: Row) -> tuple[list, list]:
    """(this machine's probes, other machines'), from the runs filed no later than ``row``'s."""
    run = RecordStore.probe_log(Path(results).parent / row.source)
    stamp = _stamp(run)
    earlier = [p for p in sorted(run.parent.parent.glob("*/*" + PROBES_SUFFIX)) if _stamp(p) <= stamp]
    return ([e for p in earlier if p.parent == run.parent for e in _log(p)],
            [e for p in earlier if p.parent != run.parent for e in _log(p)])


def _stamp(log: Path) -> str:
    """When a run began, from its file's name (COMMIT-YYYYmmddTHHMMSS-id): runs sort by it."""
    return log.name.split("-")[1]


def cells(rows: list[Row], results: Path) -> list[Cell]:
    """One cell per searched (GPU, way, axis, budget, allocator, shape): its latest record's."""
    latest = {}
    for row in rows:
        rec = row.record
        if rec.case != "fits" or rec.outcome != "ok" or rec.check.get("budget_bytes") is None:
            continue
        ident = (machine_label(row), json.dumps(_key(rec), sort_keys=True), rec.params["budget"])
        if ident not in latest or rec.created > latest[ident].record.created:
            latest[ident] = row
    figures, replays = _estimators(results), _replays(results)
    return sorted((_cell(row, results, figures, replays.get(ident, {})) for ident, row in latest.items()),
                  key=lambda c: (c.gpu, c.over, c.technique, c.allocator, c.cap))


def _estimators(results: Path) -> dict:
    path = Path(results) / FILE
    table = json.loads(path.read_text())["cases"] if path.exists() else []
    return {json.dumps(case["shape"], sort_keys=True): case for case in table}


def _replays_file(results: Path) -> dict:
    """What ``python3 -m harness programmes score`` wrote: its cells and its recordings' checks."""
    path = Path(results) / REPLAYS
    return json.loads(path.read_text()) if path.exists() else {}


def _replays(results: Path) -> dict:
    """The replay's answers, by (GPU, key, budget), as ``cells`` names a cell."""
    return {(c["gpu"], json.dumps(c["key"], sort_keys=True), c["budget"]): c
            for c in _replays_file(results).get("cells", [])}


def replay_checks(results: Path) -> list[str]:
    """Per GPU, how the replay of each recorded programme, as recorded, compares with the peaks its
    own probe measured (``harness.drive.commands.programmes.score``): [] where none was recorded."""
    recordings = _replays_file(results).get("recordings", [])
    lines = []
    for gpu in sorted({r["gpu"] for r in recordings}):
        mine = [r for r in recordings if r["gpu"] == gpu]
        probes = [p for r in mine for p in r["probes"]]
        ran = [p for p in probes if p["fits"] and p["replayed_fits"]]
        same = sum(p["replayed_reserved"] == p["peak_reserved"] and p["replayed_allocated"] == p["peak_allocated"]
                   for p in ran)
        worst = max((abs(p["replayed_reserved"] / p["peak_reserved"] - 1) for p in ran), default=None)
        agree = sum(p["fits"] == p["replayed_fits"] for p in probes)
        lines.append(f"- {gpu}: {len(probes)} recorded probes; the replay runs out where the probe did in {agree}; "
                     f"of the {len(ran)} that ran in both, {same} reserve and allocate the very bytes their probe "
                     f"measured, the worst reserved peak {_pct(worst)} off.")
        lines += _foreseen(gpu, [t for r in mine for t in r.get("foreseen", [])])
        lines += _searched(gpu, [dict(t, key=r["key"]) for r in mine for t in r.get("searched", [])])
    return lines


def _foreseen(gpu: str, tests: list[dict]) -> list[str]:
    """How the grown programme did at sizes recorded to test it (``programmes record --check``)."""
    if not tests:
        return []
    agree = sum(t["fits"] == t["replayed_fits"] for t in tests)
    ran = [t for t in tests if t["fits"] and t["replayed_fits"]]
    worst = max((abs(t["replayed_reserved"] / t["peak_reserved"] - 1) for t in ran), default=None)
    return [f"- {gpu}, grown: {len(tests)} probes recorded to test the replay, at sizes and caps it did not grow "
            f"from; the grown programme runs out where the probe did in {agree}"
            + (f"; of the {len(ran)} that ran in both, the worst reserved peak {_pct(worst)} off." if ran else ".")]


SHOWN_MISSES = 6  # the replay's disagreements with the searches' probes named on the page; the rest counted


def _searched(gpu: str, tests: list[dict]) -> list[str]:
    """How the grown programme did at every size and cap the GPU's searches probed: [] where none."""
    if not tests:
        return []
    missed = [t for t in tests if t["fits"] != t["replayed_fits"]]
    # one size probed by several searches is named once, with how many
    kinds = Counter((t["key"]["technique"], t["key"]["over"], t["n"], t["cap"], t["fits"]) for t in missed)
    named = [f"{way} at {over} {n:,} under {gb(cap)} ({'fit' if fit else 'ran out'}"
             + (f", {count} probes)" if count > 1 else ")")
             for (way, over, n, cap, fit), count in list(kinds.items())[:SHOWN_MISSES]]
    more = f" and {len(kinds) - SHOWN_MISSES} more" if len(kinds) > SHOWN_MISSES else ""
    tail = f"; not: {'; '.join(named)}{more}." if missed else "."
    return [f"- {gpu}, searched: {len(tests)} probes of its what-fits searches under their budget's own bytes, "
            f"each a size the device held or ran out at; the grown programme runs where the probe fit and runs out "
            f"where it ran out in {len(tests) - len(missed)}{tail}"]


def _cell(row: Row, results: Path, figures: dict, replay: dict) -> Cell:
    rec, key = row.record, _key(row.record)
    over, check = key["over"], rec.check
    answer, cap, unit = check[f"max_{over}"], check["budget_bytes"], search_unit(check, over)
    here, elsewhere = _logs(results, row)
    at = [e for e in here if e["key"] == key and e["n"] == answer and e["fits"] and e.get("peak_reserved")]
    fed, mine = seen_before(here, elsewhere, key, cap)
    try:
        made, refused = predict.prediction(fed, cap, over, unit, fits.LIMITS[over], here=mine, strict=True), None
    except predict.Refused as e:
        made, refused = None, str(e)
    shape = json.dumps({k: rec.params[k] for k in SHAPE}, sort_keys=True)
    return Cell(gpu=machine_label(row), technique=key["technique"], over=over, budget=rec.params["budget"],
                allocator=key.get("allocator", "default"), measured=answer, unit=unit,
                peak=at[-1]["peak_reserved"] if at else None, refused=refused, cap=cap, others=figures.get(shape, {}),
                suite=None if made is None else made.law, predicted=None if made is None else made.largest,
                key=key, host_short=predict.host_short(fed), replay=replay, host_limit=check.get("host_limit_bytes"),
                seen=_seen(here, key, cap), ruled=not before_the_rule(rec))


def _seen(here: list[dict], key: dict, cap: int) -> dict:
    """Size -> whether it fit, for this machine's probes of ``key`` under ``cap`` (any run up to the
    cell's); a size seen both ways is left out. Not ``ProbeLog.answers``: there a failure outweighs
    a fit, which bounds a search safely but would mark a size probed whose next size is the
    search's own answer (where one run failed it)."""
    outcomes = {}
    for e in here:
        if e["key"] == key and e["cap"] == cap:
            outcomes.setdefault(e["n"], set()).add(bool(e["fits"]))
    return {n: got.pop() for n, got in outcomes.items() if len(got) == 1}


def searched(rows: list[Row], results: Path) -> dict:
    """(GPU, key as sorted JSON) -> every probe the filed what-fits searches ran that says what the
    device held (``probe_log.device_answer``): each search's own, from its run's log, of its key
    under its cap, where that cap was its budget's bytes (``fits.exact_cap``; a probe capped short
    tests no replay at the cap it names). Each probe once, whichever records of its run name it."""
    found, taken = {}, set()
    for row in rows:
        rec = row.record
        if rec.case != "fits" or rec.check.get("budget_bytes") is None or not exact_cap(rec):
            continue
        log, key, cap = RecordStore.probe_log(Path(results).parent / row.source), _key(rec), rec.check["budget_bytes"]
        named = json.dumps(key, sort_keys=True)
        if (log, named, cap) in taken:
            continue
        taken.add((log, named, cap))
        mine = [e for e in _log(log) if e["key"] == key and e["cap"] == cap and device_answer(e) is not None]
        found.setdefault((machine_label(row), named), []).extend(mine)
    return found


def _steps(cell: Cell, predicted: int | None) -> str:
    return NONE if predicted is None else f"{(predicted - cell.measured) // cell.unit:+d}"


def _error(cell: Cell, predicted_peak: float | None) -> float | None:
    return None if predicted_peak is None or not cell.peak else predicted_peak / cell.peak - 1


def _pct(error: float | None) -> str:
    return NONE if error is None else f"{round(100 * error, 1) + 0.0:+.1f}%"  # + 0.0: no "-0.0%"


def _megatron(cell: Cell) -> predict.Fit | None:
    coef = cell.others.get("megatron", {}).get(cell.over)
    return None if coef is None else predict.Fit(cell.over, len(coef) - 1, (), {predict.BINDS: tuple(coef)})


def scores(cell: Cell) -> dict:
    """Each estimator's (largest size or None, peak error at the measured answer or None)."""
    limit = fits.LIMITS[cell.over]
    out = {}
    if cell.suite is not None:
        out["suite"] = (cell.predicted, _error(cell, cell.suite.peak(cell.measured)))
    else:
        out["suite"] = (None, None)
    for name in ("accelerate", "deepspeed"):
        out[name] = (None, _error(cell, cell.others.get(name)))
    replay = cell.replay if cell.replay.get("measured") == cell.measured else {}  # scored against this answer
    out["replay"] = (replay.get("largest"), _error(cell, replay.get("peak")))
    law = _megatron(cell)
    out["megatron"] = (None, None) if law is None else (law.largest(cell.cap, cell.unit, limit),
                                                          _error(cell, law.peak(cell.measured)))
    return out


def _replay_marks(cell: Cell, largest: int | None) -> str:
    """² where the replay's size was probed as it has it, ³ where it stops where the search did."""
    if largest is None:
        return ""
    return (" ²" if cell.replay.get("probed") else "") + (" ³" if cell.replay.get("stops_at_measured") else "")


HEADER = ["GPU", "way", "over", "budget", "allocator", "measured", "suite", "suite peak", "replay", "replay peak",
          "accelerate peak",
          "DeepSpeed peak", "Megatron", "Megatron peak"]


def rows_of(found: list[Cell]) -> list[list[str]]:
    body = []
    for cell in found:
        s = scores(cell)
        body.append([cell.gpu, cell.technique, cell.over, cell.budget, cell.allocator,
                     f"{cell.measured:,}" + ("" if cell.ruled else " ⁴"),
                     _steps(cell, s["suite"][0]) + ("" if cell.suite else " ¹"), _pct(s["suite"][1]),
                     _steps(cell, s["replay"][0]) + _replay_marks(cell, s["replay"][0]), _pct(s["replay"][1]),
                     _pct(s["accelerate"][1]), _pct(s["deepspeed"][1]), _steps(cell, s["megatron"][0]),
                     _pct(s["megatron"][1])])
    return body


SCORE_HEADER = ["GPU", "estimator", "cells", "largest within one step", "peak within 3%", "refused"]
AXIS_HEADER = ["GPU", "over", "cells", "largest within one step", "peak within 3%", "refused", "median size error"]


def summary(found: list[Cell]) -> list[list[str]]:
    """Per GPU and estimator: its cells, the share of those it sized within one step, the share
    whose peak at the measured answer is within 3%, and (the suite's) the cells it refused, which
    neither share counts: a refusal is no answer, and says so where a guess would not; (the replay's)
    the cells whose recorded programmes were no one programme grown."""
    body = []
    for gpu in sorted({c.gpu for c in found}):
        mine = [c for c in found if c.gpu == gpu]
        for name in ("suite", "replay", "accelerate", "deepspeed", "megatron"):
            near, peaks, _ = _tally(mine, name)
            refused = {"suite": str(sum(c.refused is not None for c in mine)),
                       "replay": str(sum("refused" in c.replay for c in mine))}.get(name, NONE)
            body.append([gpu, name, str(len(mine)), near, peaks, refused])
    return body


def by_axis(found: list[Cell]) -> list[list[str]]:
    """The suite's predictor per GPU and axis: its cells, the share it sized within one step, the
    share whose peak is within 3%, its refusals, and the median of its size errors relative to the
    measured size (a step is a far smaller share of a long sequence than of a batch)."""
    body = []
    for gpu, over in sorted({(c.gpu, c.over) for c in found}):
        mine = [c for c in found if (c.gpu, c.over) == (gpu, over)]
        near, peaks, errors = _tally(mine, "suite")
        body.append([gpu, over, str(len(mine)), near, peaks, str(sum(c.refused is not None for c in mine)),
                     _pct_of(_median(errors))])
    return body


def _tally(mine: list[Cell], name: str) -> tuple[str, str, list[float]]:
    """Estimator ``name`` over ``mine``: the share it sized within one step, the share whose peak is
    within 3%, and its size errors relative to the measured sizes."""
    got = [scores(c)[name] for c in mine]
    sized = [(c, n) for c, (n, _) in zip(mine, got) if n is not None]
    peaks = [e for _, e in got if e is not None]
    near = sum(abs(n - c.measured) <= STEP_BAR * c.unit for c, n in sized)
    return (_share(near, len(sized)), _share(sum(abs(e) <= PEAK_BAR for e in peaks), len(peaks)),
            [abs(n - c.measured) / c.measured for c, n in sized])


def under_the_rule(found: list[Cell]) -> str:
    """The replay's share within one step over the cells whose latest search kept today's rule, per
    GPU: the answers a search makes today, which ``RULE_MARK``'s may not be. "" where it sized none."""
    shares = []
    for gpu in sorted({c.gpu for c in found}):
        near = _tally([c for c in found if c.gpu == gpu and c.ruled], "replay")[0]
        if near != NONE:
            shares.append(f"{gpu} {near}")
    if not shares:
        return ""
    return ("Where the latest search kept today's rule (the two sizes after its answer seen not to fit; ⁴ marks the "
            f"others), the replay sized the answer within one step: {'; '.join(shares)}.")


def tables(found: list[Cell]) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of the score per GPU and estimator, the suite's per axis, and cell by cell:
    what the docs' page and the site's show."""
    return [(SCORE_HEADER, summary(found)), (AXIS_HEADER, by_axis(found)), (HEADER, rows_of(found))]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _pct_of(share: float | None) -> str:
    return NONE if share is None else f"{100 * share:.1f}%"


def _share(part: int, whole: int) -> str:
    return NONE if not whole else f"{part}/{whole} ({100 * part / whole:.0f}%)"


def refusals(found: list[Cell]) -> list[str]:
    """Each reason the suite's predictor gave for refusing a cell, once: what the ¹ mark points to."""
    return sorted({c.refused for c in found if c.refused})


def page(rows: list[Row], results: Path, title: str, text: str) -> str:
    found = cells(rows, results)
    if not found:
        return f"# {title}\n\n{text}\n\nNo what-fits record yet.\n"
    score, axis, cell = tables(found)
    lines = [f"# {title}", "", text, "", "## Score", ""]
    lines += markdown.table(*score)
    ruled = under_the_rule(found)
    lines += ["", ruled] if ruled else []
    lines += ["", "The suite's predictor by axis, with the median of its size errors relative to the measured "
              "size:", ""]
    lines += markdown.table(*axis)
    checks = replay_checks(results)
    if checks:
        lines += ["", "The replay against the allocator: each recorded programme replayed as recorded, under its "
                  "probe's cap, beside the peaks its probe measured; (grown) the programme grown from them to "
                  "sizes recorded apart to test it (`programmes record --check`), under those probes' caps; and "
                  "(searched) grown to every size the GPU's what-fits searches probed, under each probe's cap, "
                  "beside whether the device held it:", "", *checks]
    lines += ["", *search_cost.section(rows), "## Cell by cell", ""]
    lines += markdown.table(*cell)
    refused = refusals(found)
    lines += ["", "Sizes are the predicted largest size less the measured one, in search steps (one sample, or "
              "128 tokens); peaks are the estimate at the measured answer against the reserved peak its probe "
              "measured. accelerate and DeepSpeed count model states alone: they name a peak, no size (-). The "
              "Megatron formula counts every layer's activations kept for backward, attention's s x s scores "
              "among them, as a step without recomputation and without a fused attention kernel holds them. "
              "- where an estimator has no figure: no estimators.json entry for the shape, or no probe at the answer. "
              "Where the suite's predictor misses: the caching allocator's reserve (reserved less allocated bytes) "
              "moves with the size in jumps, as which freed block a request splits changes, and a search step is a "
              "small share of a budget (one sample of a batch, 128 tokens of a long sequence): a law read at "
              "smaller sizes cannot place the answer within one step where the reserve jumps between them; under "
              "a cap the allocator frees its cached blocks and tries again before it fails, so a size whose "
              "reserve passes the cap unpressed may still fit; and from the cold start alone (the smallest budget) "
              "the law is read far from the answer. "
              "The replay (`python3 -m harness programmes`) does what the allocator does instead: the programme of "
              "requests its GPU recorded at a few sizes (two batches, or three sequence lengths), each request "
              "grown on its own law, is run through the caching allocator's rules under the cap, and its answer is the "
              "largest size that runs there, each size tried down from the last whose blocks alone fit, and "
              "where the way keeps what the forward saves on the host and its recording names those tensors, "
              "under the host's share its guard allows, each tensor grown on its own law and pinned in a "
              "power-of-two block (read by the search, as its probes read it); - where "
              "that GPU recorded no programme of the way, or for another allocator setting. "
              f"{PROBED_MARK} {STOPPED_MARK} {RULE_MARK} {REFUSED_MARK}", ""]
    lines += [f"- {markdown.code(reason)}" for reason in refused]
    return "\n".join(lines) + "\n"
