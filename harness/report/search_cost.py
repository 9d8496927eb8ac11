"""What the what-fits searches cost in device time: each cell searched more than once, its latest
search against the one before it, and whether both answered the same; and, where one box searched a
cell from nothing and again aimed by the replay (each in a results folder of its own), the two.

A search's record times the whole search (its probes, each a fresh process, side by side or not)
as its one sample. Two searches of one cell on two boxes of one kind differ with the host as any
step does; the table says which runs and commits it compares, never why they differ.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from harness.cases.fits import outdated, search_unit
from harness.measure.instruments.machine import host_key
from harness.report import markdown
from harness.report.gate import answer_key
from harness.report.model import Row
from harness.report.tables import machine_label

HEADER = ["GPU", "cells searched again", "same answer", "earlier searches", "latest searches", "latest / earlier",
          "latest from the predictor", "latest commits"]
FRESH_HEADER = ["GPU", "cells", "same answer", "from nothing", "aimed by the replay", "aimed / from nothing",
                "commits"]


@dataclass(frozen=True)
class Pair:
    earlier: Row
    latest: Row

    def seconds(self) -> tuple[float, float]:
        return _seconds(self.earlier), _seconds(self.latest)

    def same_answer(self) -> bool:
        return _answer(self.earlier) == _answer(self.latest)

    def predicted(self) -> bool:
        return bool(self.latest.record.check.get("prediction"))

    def one_step_apart(self) -> bool:
        """Whether the two answers are one search step apart, along the axis the latest searched."""
        rec, a, b = self.latest.record, _answer(self.earlier), _answer(self.latest)
        return a is not None and b is not None and abs(a - b) == search_unit(rec.check, rec.params.get("over", "batch"))


def _seconds(row: Row) -> float:
    return float(row.record.timing.median_s)


def _answer(row: Row) -> int | None:
    """The search's answer, along the axis it searched (a batch, or one sequence's length)."""
    key = answer_key(row.record)
    return row.record.check.get(key) if key else None


def _searched(row: Row) -> bool:
    rec = row.record
    return rec.outcome == "ok" and _answer(row) is not None and rec.timing is not None


def _alone(row: Row) -> bool:
    """A search that saw no earlier run's probes (its results folder held none): it searched
    anew, not again. Records from before searches counted earlier runs say nothing: not alone."""
    return row.record.check.get("earlier_runs") == [0, 0]


def _by_replay(row: Row) -> bool:
    return (row.record.check.get("prediction") or {}).get("by") == "replay"


def pairs(rows: list[Row]) -> dict[str, list[Pair]]:
    """For each GPU, one pair a cell that two runs or more searched: the latest search and the one
    before it, from another run."""
    runs = defaultdict(list)
    for row in rows:
        if _searched(row):
            runs[(machine_label(row), row.params_key)].append(row)
    found = defaultdict(list)
    for (gpu, _), searched in sorted(runs.items()):
        searched.sort(key=lambda r: r.record.created)
        again = [r for r in searched if not _alone(r)]  # a search from nothing is set against its own kind
        if not again:
            continue
        latest = again[-1]
        earlier = [r for r in searched
                   if r.record.run_id != latest.record.run_id and r.record.created < latest.record.created]
        if earlier:
            found[gpu].append(Pair(earlier[-1], latest))
    return dict(found)


def fresh_pairs(rows: list[Row]) -> dict[str, list[Pair]]:
    """For each GPU, one pair a cell that one host searched from nothing twice: aimed by the replay
    (``latest``) and not (``earlier``), the latest of each kind, each in a folder with no earlier run."""
    kinds = defaultdict(dict)
    for row in sorted((r for r in rows if _searched(r) and _alone(r)), key=lambda r: r.record.created):
        kinds[(machine_label(row), host_key(row.record.environment), row.params_key)][_by_replay(row)] = row
    found = defaultdict(list)
    for (gpu, _, _), kind in sorted(kinds.items()):
        if True in kind and False in kind:
            found[gpu].append(Pair(kind[False], kind[True]))
    return dict(found)


def _sums(gpu: str, found: list[Pair]) -> list[str]:
    before = sum(p.seconds()[0] for p in found)
    after = sum(p.seconds()[1] for p in found)
    return [gpu, str(len(found)), f"{sum(p.same_answer() for p in found)} of {len(found)}", f"{before:,.0f} s",
            f"{after:,.0f} s", f"{after / before:.2f}" if before else "-"]


def _commits(rows: list[Row]) -> str:
    return ", ".join(sorted({r.record.commit[:8] for r in rows}))


def _line(gpu: str, found: list[Pair]) -> list[str]:
    return [*_sums(gpu, found), f"{sum(p.predicted() for p in found)} of {len(found)}",
            _commits([p.latest for p in found])]


AGAIN = ("Each cell that two runs or more searched: its latest search against the one before it (another run), in "
         "device seconds a search takes (its probes included), summed over the cells; \"from the predictor\": the "
         "latest search's record keeps the prediction it started from. Host-bound probes differ between boxes of "
         "one kind as any host-bound step does.")
DIFFER = ("Where a cell's two searches answered otherwise, {gpu}: {n} cells; in {outdated} the earlier search is one "
          "`harness todo` lists again (made before today's rule, cap or search limit); in {step} the two answers are "
          "one search step apart.")
NONE_AGAIN = "No cell has been searched by two runs yet."
FRESH = ("A search from nothing against one aimed by the replay: the cells one host searched both ways, each in a "
         "results folder with no earlier run (`--results` a new folder), without and with this GPU's recorded "
         "programmes, in device seconds a search takes:")


def differ(found: dict[str, list[Pair]]) -> str | None:
    """Per GPU whose pairs did not all answer the same, why they may not: how many set an answer
    ``harness todo`` lists again (``harness.cases.fits.outdated``) against today's, and how many
    are a search step apart; None where every pair answered the same."""
    said = []
    for gpu in sorted(found):
        other = [p for p in found[gpu] if not p.same_answer()]
        if other:
            said.append(DIFFER.format(gpu=gpu, n=len(other), outdated=sum(outdated(p.earlier.record) for p in other),
                                      step=sum(p.one_step_apart() for p in other)))
    return " ".join(said) or None


def tables(rows: list[Row]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(text, header, lines) of what the section shows: the cells searched again (no lines, and
    a sentence that says so, where none was), why their answers differ where some do (a sentence
    alone), then the searches from nothing against those aimed by the replay, where a host made
    both; the last column the commits, plain."""
    found, fresh = pairs(rows), fresh_pairs(rows)
    out = [(AGAIN, HEADER, [_line(gpu, found[gpu]) for gpu in sorted(found)]) if found else (NONE_AGAIN, HEADER, [])]
    said = differ(found)
    if said:
        out.append((said, [], []))  # a sentence, no table
    if fresh:
        out.append((FRESH, FRESH_HEADER, [[*_sums(gpu, fresh[gpu]),
                                           _commits([r for p in fresh[gpu] for r in (p.earlier, p.latest)])]
                                          for gpu in sorted(fresh)]))
    return out


def section(rows: list[Row]) -> list[str]:
    """The markdown section: a line a GPU, or a sentence where no cell was searched twice; then
    the searches from nothing against those aimed by the replay, where a host made both."""
    lines = ["## What the searches cost", ""]
    for text, head, body in tables(rows):
        lines += [text, ""]
        if body:
            coded = [[*line[:-1], ", ".join(markdown.inline(c) for c in line[-1].split(", "))] for line in body]
            lines += [*markdown.table(head, coded), ""]
    return lines
