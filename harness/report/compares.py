"""The compares on file, as ``docs/results/compares.md``: each folder under
``results/compare/<machine>/`` that ``harness compare`` filled, one line each.

A line says which commits the compare measured (A/A where BASE is NEW, the check that the gate
stays quiet on its own noise), how many of its planned runs are on record, on which hosts, how
long it measured against one side's round (a fresh process a case, as one plain run of the cases
takes), and the verdict of this checkout's gate over its records, judged as a compare judges them
(every round of each side, floors learned from BASE's rounds, a host-bound step's at least its
widest scatter on one host in the other compares on file). The verdict is made again from the
records rather than read from the folder's report, so a page never shows a verdict its records do
not give; a compare whose runs are not all on record is marked not finished and judged on the
cases measured whole so far.

``compare.json`` (``harness.drive.commands.compare_state``) is read as data, for the figures only the
compare kept (its plan, measuring time and rounds' times); a folder without one, from before the
state was kept, is described from its records alone.
"""
from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.measure.guards.inputs import MAX_LINE_BYTES, open_regular
from harness.measure.instruments.machine import host_key
from harness.measure.records.record import Record
from harness.report import markdown
from harness.report.gate import INVALID, GateError, Options, judged, load_set, params_text
from harness.report.gate import verdict as gate_verdict
from harness.units import minutes

COMPARES = "results/compare"
SIDES = ("base", "new")
STATE = "compare.json"
INTERIM = "interim-report.md"  # gated over a compare in progress (``harness.drive.commands.compare.so_far``)
REPORTS = ("report.md", INTERIM)  # the compare's own, and the interim one
# A gate report's verdict line: bold, its punctuation escaped (``harness.report.gate.render``).
_VERDICT = re.compile(r"^\*\*((?:PASS|FAIL)\\?:.*?)\*\*$", re.M)
FLAGGED_SHOWN = 5
# Runs of each case a side: enough to learn BASE's noise from; more is a typo that would run for days.
MAX_ROUNDS = 50
# The least relative rise that can fail: 1.0 lets NEW take twice BASE's time; past that no gate is left.
MAX_THRESHOLD = 1.0
# A state is a few kB per hundred cases; a longer file is none of a compare's.
MAX_STATE_BYTES = 64 * MAX_LINE_BYTES
# What reading one folder can raise where its files are not as a compare wrote them.
BAD_FOLDER = (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError, ArithmeticError)


@dataclass(frozen=True)
class Compare:
    machine: str
    name: str
    commits: tuple[str, str]  # BASE's and NEW's full hashes
    cases: int
    rounds: int
    runs: int  # on record, both sides
    planned: int  # cases x rounds x 2 where the state says, else the runs on record
    hosts: tuple[str, ...]
    measured_s: float | None  # over all sittings; None where the state kept none
    round_s: tuple[float, float] | None  # the quickest and slowest round of a side; None where not kept
    shared_runs: int
    verdict: str
    flagged: tuple[str, ...]  # what the gate called regressions, one line each
    reported: str  # the verdict line of the folder's own report (an interim one's marked so), or ""
    compared: int  # cases the gate judged (0 where it could not compare)
    span: tuple[float, float]  # the first and last of its records' filing times

    @property
    def a_a(self) -> bool:
        return self.commits[0] == self.commits[1]

    @property
    def done(self) -> bool:
        return self.runs >= self.planned


def beside(c: Compare, others: list[Compare]) -> list[Compare]:
    """The other compares measured on one of ``c``'s hosts while it measured: their runs shared
    the host's cores, memory and link with its runs (compares made before a compare counted its
    runs beside other GPU work say so only here)."""
    return [o for o in others if o is not c and set(o.hosts) & set(c.hosts)
            and o.span[0] <= c.span[1] and c.span[0] <= o.span[1]]


def find(results: Path) -> list[Compare]:
    """Every compare under ``results/compare``, by machine and folder name."""
    root = Path(results) / "compare"
    folders = sorted(p.parent for p in root.glob(f"*/*/{SIDES[0]}"))  # pragma: no mutate (read() needs both sides)
    found = []
    for folder in folders:
        try:
            found.append(read(folder))
        except BAD_FOLDER as e:  # one folder's bad file leaves the others' lines
            print(f"oombench: skipped the compare in {folder}: {markdown.one_line(f'{type(e).__name__}: {e}')[:300]}",
                  file=sys.stderr)
    return [c for c in found if c is not None]


def read(folder: Path) -> Compare | None:
    """The compare in ``folder``; None where a side holds no record (nothing was measured). A
    side's records are read from under its folder: ``records/<machine>/``, or straight under it in
    compares filed before they had a store of their own."""
    try:
        sides = [load_set(folder / side) for side in SIDES]
    except GateError as e:
        first = str(e).splitlines()[0]
        if INVALID in first:  # not merely nothing measured yet: a file that is no record's (a FIFO, a link, a line)
            print(f"oombench: skipped the compare in {folder}: {markdown.one_line(first)[:300]}", file=sys.stderr)
        return None
    state, (base, new) = _state(folder), sides
    every = base + new
    cases = len(state["benches"]) if state else len(_cases(base))
    rounds = state["rounds"] if state else len(base) // len(_cases(base))
    verdict, flagged, compared = _verdict(folder, state)
    return Compare(
        machine=folder.parent.name, name=folder.name, commits=(_commit(base), _commit(new)),
        cases=cases, rounds=rounds, runs=len(every), planned=cases * rounds * 2 if state else len(every),
        hosts=tuple(sorted({host_key(r.environment) for r in every} - {""})),
        measured_s=state.get("measured_s") if state else None, round_s=round_span((state or {}).get("round_s"), rounds),
        shared_runs=state.get("shared_runs", 0) if state else 0, verdict=verdict, flagged=flagged,
        reported=reported(folder), compared=compared,
        span=(min(r.created for r in every), max(r.created for r in every)))


def state_text(path: Path) -> str:
    """A compare's state file, read only where it is a regular file of a state's length (a FIFO
    is refused, never waited on); FileNotFoundError where there is none."""
    with open_regular(path) as f:
        raw = f.read(MAX_STATE_BYTES + 1)
    if len(raw) > MAX_STATE_BYTES:
        raise ValueError(f"{path} is longer than {MAX_STATE_BYTES} bytes: no compare's state is")
    return raw.decode("utf-8")


def _state(folder: Path) -> dict | None:
    """The folder's state as data; None where it has none (a compare from before the state was
    kept) or one not as a compare writes it (said on stderr, naming the folder): the folder is
    then described from its records alone, and nothing of the file is trusted."""
    try:
        state = json.loads(state_text(folder / STATE))
        bad = _unlike_a_state(state)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:  # a FIFO, a device, bytes that are not JSON
        bad = f"{type(e).__name__}: {e}"
    if bad:
        print(f"oombench: {markdown.one_line(bad)[:300]} in {folder / STATE}: the compare is described from its "
              "records alone", file=sys.stderr)
        return None
    return state


def _unlike_a_state(state) -> str:
    """Why ``state`` is not a compare's state as ``harness compare`` writes one; "" where it is."""
    if not (isinstance(state, dict) and isinstance(state.get("benches"), list)):
        return "no list of benches"
    rounds, threshold = state.get("rounds"), state.get("threshold") or 0.0
    if not (type(rounds) is int and 1 <= rounds <= MAX_ROUNDS):
        return f"rounds not a whole number from 1 to {MAX_ROUNDS}"
    if not (type(threshold) in (int, float) and math.isfinite(threshold) and 0 <= threshold <= MAX_THRESHOLD):
        return f"threshold not a number from 0 to {MAX_THRESHOLD:g}"
    return ""


def _cases(recs: list[Record]) -> set[tuple[str, str]]:
    return {(r.case, params_text(r)) for r in recs}


def _commit(recs: list[Record]) -> str:
    """The commit a side measured (one per side: a compare's worktree is one commit)."""
    return max(r.commit for r in recs)


def round_span(round_s: dict | None, rounds: int) -> tuple[float, float] | None:
    """The quickest and slowest of a compare's rounds (``State.round_s``: a case's process each,
    summed over its sittings), where every round of both sides kept its time; one round is what
    one plain run of the cases takes near enough."""
    kept = round_s or {}
    if len(kept) < 2 * rounds:
        return None
    return min(kept.values()), max(kept.values())


def between(lo: str, hi: str) -> str:
    """Two figures as a span, or one where they read the same."""
    return lo if lo == hi else f"{lo} to {hi}"


def _verdict(folder: Path, state: dict | None) -> tuple[str, tuple[str, ...], int]:
    threshold = float((state or {}).get("threshold") or 0.0)
    base = folder / SIDES[0]
    try:
        j = judged(base, folder / SIDES[1], Options(threshold=threshold, rounds=True), history=base,
                   prior=folder.parent.parent)
    except GateError as e:
        return f"not comparable: {str(e).splitlines()[0]}", (), 0
    flagged = tuple(f"{row.name}: {row.what} {row.before} → {row.after} ({row.verdict})"
                    for row in j.report.regressions)
    return gate_verdict(j.report).split(";")[0], flagged, j.report.compared


def reported(folder: Path) -> str:
    """What the folder's own report said: its verdict line, "(interim)" where the report was gated
    over a compare in progress; "" where the folder holds no report with a verdict."""
    for name, mark in zip(REPORTS, ("", " (interim)")):
        try:
            found = _VERDICT.search((folder / name).read_text(encoding="utf-8"))  # pragma: no mutate (as above)
        except (OSError, UnicodeDecodeError):
            continue
        if found:
            return re.sub(r"\\(.)", r"\1", found.group(1)).split(";")[0] + mark
    return ""


# -- the page ------------------------------------------------------------------------------------

INTRO = (
    "Each line is one `python3 -m harness compare BASE NEW` filed under `results/compare/<machine>/<folder>/`: "
    "both commits measured on one box in one session, case by case in the order A B B A A B (A: BASE), each run "
    "a fresh process. A/A compares (BASE is NEW) show what the gate says of the box's own noise: every one "
    "should pass. The verdict is this checkout's gate over the folder's records, judged as `harness compare` "
    "judges them now; a compare with runs still to measure (`--resume FOLDER` measures them) is judged on the cases "
    "measured whole so far. *Measuring* is the compare's time over all its sittings; *one round* is one side's "
    "round, a fresh process a case, which is what one plain `harness run` of the same cases takes near enough. "
    "*Its report said* is the verdict of the folder's own `report.md`, made by the gate of the commit that ran "
    "the compare: where the two differ, the gate has changed since (a compare made before the gate judged every "
    "round judged each side's last round alone).")
HEADER = ("folder", "BASE → NEW", "cases × rounds", "runs on record", "hosts", "measuring", "one round", "verdict",
          "its report said")
RIGHT = (False, False, True, True, False, True, True)


def page(compares: list[Compare], generated: str) -> str:
    """The markdown page of ``compares``, a table per machine kind."""
    parts = ["# Compares on one box: A/A and planted regressions", generated, INTRO]
    if not compares:
        return "\n\n".join(parts + ["No compare is on file yet."]) + "\n"
    for machine in sorted({c.machine for c in compares}):
        mine = [c for c in compares if c.machine == machine]
        rows = [_row(c, beside(c, compares)) for c in mine]
        parts += [f"## {markdown.escape(machine)}", a_a_tally(mine, compares),
                  "\n".join(markdown.table(HEADER, rows, RIGHT))]
        parts += [t for t in (_flagged(c) for c in mine) if t]
    return "\n\n".join(parts) + "\n"


def a_a_tally(mine: list[Compare], every: list[Compare]) -> str:
    """How often the gate cried wolf on this kind: the lines A/A compares flagged, counted apart
    for compares that had their host to themselves."""
    a_a = [c for c in mine if c.a_a]
    alone = [c for c in a_a if not beside(c, every)]
    groups = (("with the host to themselves", alone), ("beside other compares on their host",
                                                       [c for c in a_a if c not in alone]))
    said = [f"A/A compares {how}: {len(group)}, over {sum(c.compared for c in group)} case verdict(s), "
            f"{sum(len(c.flagged) for c in group)} line(s) flagged" for how, group in groups if group]
    return "; ".join(said) + "." if said else "No A/A compare on this kind yet."


def _row(c: Compare, near: list[Compare]) -> list:
    base, new = (h[:8] for h in c.commits)
    pair = f"{base} → {new} (A/A)" if c.a_a else f"{base} → {new}"
    runs = f"{c.runs}" if c.done else f"{c.runs} of {c.planned} (not finished)"
    hosts = ", ".join(c.hosts) + (f"; {c.shared_runs} run(s) beside other GPU work" if c.shared_runs else "")
    hosts += f"; measured beside {len(near)} other compare(s) on this host" if near else ""
    return [markdown.code(c.name), pair, f"{c.cases} × {c.rounds}", runs, hosts,
            minutes(c.measured_s) if c.measured_s is not None else "not kept",
            between(*map(minutes, c.round_s)) if c.round_s else "not kept", c.verdict, c.reported or "no report"]


def _flagged(c: Compare) -> str:
    if not c.flagged:
        return ""
    lines = [f"- {markdown.escape(f)}" for f in c.flagged[:FLAGGED_SHOWN]]
    more = [f"- ... and {len(c.flagged) - FLAGGED_SHOWN} more"] if len(c.flagged) > FLAGGED_SHOWN else []
    return "\n".join([f"{markdown.code(c.name)} flagged:", *lines, *more])
