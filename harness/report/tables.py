"""Markdown tables of filed records, for the README and closing notes: one or more parameters (or
the machine) down, one across, the chosen figures in each cell. It reads what the pages read (the
latest record per case, parameters and machine), so any table quoted from results/ can be made
again from it, and a figure is never typed by hand.

    python3 -m harness table fits --down technique,machine --across budget --show check:max_batch \\
        --where over=batch
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import cases
from harness.cases import fits
from harness.cases.tricks import CASE_NAME as TRICKS
from harness.measure.instruments.machine import machine_label as label_of
from harness.measure.outcomes import DOES_NOT_FIT, HOST, OK, SKIPPED
from harness.report.efficiency import HOST_BOUND, HOST_BOUND_NOTE, Ceilings, efficiency, host_bound
from harness.report.model import Row, latest, load_rows, newest_stack
from harness.report import capable, markdown
from harness.report.markdown import one_line
from harness.report.scaling import scaling_efficiency
from harness.units import figure, gb, gbs, ms, scaled
from harness.workloads.training.trainer import LR_WIDTH
from harness.workloads.training.reference import held_to_whole_batch
from harness.workloads.training.tricks import other_rate

SHOWS = ("step", "rate", "eff", "peak", "scaling", "loss", "compile")  # and check:KEY, any value of the record's check
MACHINE = "machine"
OTHER_HOST, WHOLE_CASE, PART_CHECKED, OTHER_RATE = "§", "‡", "°", "◊"
HOST_SET, OLD_CAP, NOT_MONOTONE, PAST_CARD, NOT_THIS_CARD = "⌂", "∘", "≁", "↑", "⊘"
BEFORE_RULE = "△"
NOTES = {
    HOST_BOUND: HOST_BOUND_NOTE,
    OTHER_HOST: f"{OTHER_HOST} read against the latest ceiling of another host of the same kind: this host "
                "measured none.",
    WHOLE_CASE: f"{WHOLE_CASE} peak of the whole case (build, warm-up, steps and check): a record written before "
                "peaks covered the timed steps alone (schema 1).",
    PART_CHECKED: f"{PART_CHECKED} loss not held against fp32 on the whole batch: no such reference fit beside "
                  "the case, so what training in micro-batches changes (BatchNorm's statistics per "
                  "micro-batch) went unchecked.",
    OTHER_RATE: f"{OTHER_RATE} trained at another Adam rate than today's code gives this model (the rate now "
                f"falls with an LM's width past {LR_WIDTH}): its loss and loss check are not today's; its step "
                "and peak are.",
    HOST_SET: f"{HOST_SET} the host's memory, not the budget, set this answer: the next size kept more on the "
              "host than the share its guard allows, or the kernel killed it. A host with more memory fits more.",
    OLD_CAP: f"{OLD_CAP} searched with torch capped short of this budget, by what the driver keeps of the card "
             "(the cap was then a share of NVML's total, not of torch's): today's search may fit one size more. "
             "`python3 -m harness todo` lists it to search again.",
    BEFORE_RULE: f"{BEFORE_RULE} searched before an answer needed the two sizes after it seen not to fit: where "
                 "fitting is not monotone near the top, today's search may answer a larger size. `python3 -m harness "
                 "todo` lists it to search again.",
    NOT_MONOTONE: f"{NOT_MONOTONE} not monotone: the sizes in brackets, under the answer, did not fit where the "
                  "answer did (the allocator's blocks can leave one size's request unplaced and not a larger "
                  "one's). The answer is the largest size that fits, the two after it seen not to.",
}
ALL_WHOLE_CASE = ("Peaks here cover the whole case (build, warm-up, steps and check): these records were "
                  "written before peaks covered the timed steps alone (schema 1).")


@dataclass
class View:
    """What every cell of one table is read against, and the footnote marks its cells used."""
    ceilings: Ceilings = field(default_factory=lambda: Ceilings([]))
    mixed_schemas: bool = False
    used: set = field(default_factory=set)
    not_for_card: set = field(default_factory=set)  # why each cell marked NOT_THIS_CARD is no answer

    def mark(self, mark: str) -> str:
        self.used.add(mark)
        return mark


def machine_label(row: Row) -> str:
    return label_of(row.record.environment)


def _axis_names(case: cases.Case, names: list[str]) -> list[str]:
    known = list(case.params) + [MACHINE]
    for name in names:
        if name not in known:
            raise ValueError(f"{case.name} has no parameter {name!r}: choose from {', '.join(known)}")
    return names


def where_of(case: cases.Case, pairs: list[str], option: str = "--where") -> dict:
    """{name: value}: a parameter's value as the case declares it (16 for "16", or the error
    naming the allowed values, as a config converts it); the machine's as written. ``--where``
    takes alternatives as ``name=a|b``: a tuple of the values, any of which matches."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"{option} takes name=value, got {pair!r}")
        _axis_names(case, [name])
        if name == MACHINE:
            out[name] = value
        elif "|" in value and option == "--where":
            out[name] = tuple(case.value(name, v) for v in value.split("|"))
        else:
            out[name] = case.value(name, value)
    return out


def holds(have, wanted) -> bool:
    """Whether a record's value ``have`` is the value ``wanted`` (a tuple: one of its alternatives)."""
    return any(str(have) == str(w) for w in wanted) if isinstance(wanted, tuple) else str(have) == str(wanted)


def _value(row: Row, name: str):
    """The value on an axis: the machine's label, or the parameter's (a string, number, boolean or
    None: a record holding any other is refused as it is read, so each value can key a cell)."""
    return machine_label(row) if name == MACHINE else row.record.params.get(name)


def allocated_peak(rec) -> int | None:
    peaks = [v for k, v in rec.memory.items() if k.startswith("allocator.") and ".max_" in k and "reserved" not in k]
    return max(peaks) if peaks else None


def _peak(rec, view: View) -> str:
    allocated, device = allocated_peak(rec), rec.device_bytes()
    if not allocated and not device and rec.host_bytes():
        return f"{gb(rec.host_bytes())} host"  # a case on the CPU: the host's peak, the one asv tracks
    text = gbs([allocated or None, device or None])  # "4.8 / 5.6 GB": allocated / device
    whole = rec.schema < 2 and text != "-" and view.mixed_schemas
    return text + (view.mark(WHOLE_CASE) if whole else "")


def _rate(row: Row) -> str:
    rates = row.rates()  # in datasheet units, the primary first
    return scaled(*rates[0]) if rates else "-"


def _eff(row: Row, view: View) -> str:
    """``0.39 of pinned H2D``: the rate as a fraction of the ceiling that bounds it; where the
    fraction is of another rate than the primary one (bytes over the host link), that rate is named."""
    eff = efficiency(row.record, view.ceilings)
    if eff is None:
        return "-"
    primary = next((u for u in ("flops", "bytes") if row.record.work.get(u)), None)
    which = "" if eff.unit == primary else eff.unit.replace("_bytes", "") + " "
    return which + eff.text() + ("" if eff.same_host else view.mark(OTHER_HOST))


def _ratio(row: Row, base: Row | None, what: str) -> str:
    """`` (0.73x)``: the figure (``what``: step, rate or peak) as a multiple of the base record's,
    where both have it."""
    if base is None or base.record.outcome != OK or base is row or base.record.timing is None:
        return ""
    rec, ref = row.record, base.record
    if what == "step":
        pair = rec.timing.median_s, ref.timing.median_s
    elif what == "rate":
        pair = tuple(r[0][0] if r else None for r in (row.rates(), base.rates()))
    elif what == "peak":  # the allocator's where the base kept one, else the device's
        mine, theirs = allocated_peak(rec), allocated_peak(ref)
        pair = (mine, theirs) if theirs else (rec.device_bytes(), ref.device_bytes())
        if not any(pair):  # both on the CPU: the host's peaks
            pair = (rec.host_bytes(), ref.host_bytes())
    else:
        raise ValueError(f"no multiple of {what!r}: only of step, rate and peak")
    return f" ({pair[0] / pair[1]:.2f}x)" if all(pair) else ""


def loss(check: dict):
    """The loss after the last step: ``loss_last`` where a check keeps the trajectory's ends, else ``loss``."""
    value = check.get("loss_last", check.get("loss"))
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# Check keys whose values are bytes (the context probes' device levels): written as bytes are.
BYTES_CHECKS = ("context.",)


def _check_value(value, key: str) -> str:
    if value is None:
        return "-"
    if not isinstance(value, int) or isinstance(value, bool):
        return one_line(value)
    return gb(value) if key.startswith(BYTES_CHECKS) else f"{value:,}"


def _show(row: Row, what: str, base: Row | None, view: View, shows: list[str]) -> str:
    """One figure of a cell; a rate with its share of the ceiling that bounds it, unless ``eff``
    is shown beside it."""
    if what == "rate":
        eff = "" if "eff" in shows else _eff(row, view)
        return _rate(row) + ("" if eff in ("", "-") else f" ({eff})") + _ratio(row, base, what)
    return _figure(row, what, base, view)


def _figure(row: Row, what: str, base: Row | None, view: View) -> str:
    """Any figure but the rate: none reads what else the cell shows."""
    rec = row.record
    if what.startswith("check:"):
        key = what[len("check:"):]
        return _answer(rec, key, view)
    if what == "step":
        return ms(rec.timing.median_s) + _ratio(row, base, what)
    if what == "eff":
        return _eff(row, view)
    if what == "peak":
        return _peak(rec, view) + _ratio(row, base, what)
    if what == "scaling":
        eff = None if base is None or base is row else scaling_efficiency(base.record, rec)
        return "-" if eff is None else f"{eff:.2f} of linear"
    if what == "compile":
        return _compile(rec)
    if what == "loss":
        value = loss(rec.check)
        unchecked = rec.case == "tricks" and "reference" in rec.check and not held_to_whole_batch(rec.check)
        return "-" if value is None else f"{value:.3f}" + (view.mark(PART_CHECKED) if unchecked else "") + \
            _other_rate(rec, view)
    raise ValueError(f"unknown figure {what!r}: choose from {', '.join(SHOWS)} or check:KEY")


def _compile(rec) -> str:
    """What the first step spent compiling (``compile_s``, apart from the timed steps); "" for a way
    that compiles nothing, so that its cell shows no figure it has no use for."""
    seconds = (rec.check or {}).get("compile_s")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        return f"{figure(seconds)} s to compile"
    way = capable.registered(rec.params.get("technique"))
    return "compile time not kept" if way is not None and way.compiles else ""


def _answer(rec, key: str, view: View) -> str:
    """Any value of a record's check; a what-fits answer with what bounds it marked."""
    text = _check_value(rec.check.get(key), key)
    if fits.lower_bound(rec.case, rec.check, key):
        text = f"≥ {text}"  # where the search stopped: more may fit
    elif fits.host_bound(rec.case, rec.check, key):
        text += view.mark(HOST_SET)
    text += view.mark(OLD_CAP) if fits.old_cap(rec, key) else ""
    text += view.mark(BEFORE_RULE) if fits.before_rule(rec, key) else ""
    also = fits.not_monotone(rec.case, rec.check, key)
    return text + (f" ({also}){view.mark(NOT_MONOTONE)}" if also else "")


def cell(row: Row | None, shows: list[str], base: Row | None = None, view: View | None = None) -> str:
    if row is None:
        return "not run"
    rec, view = row.record, view or View()
    if rec.outcome == DOES_NOT_FIT:
        return does_not_fit(rec)
    if rec.outcome == SKIPPED:
        return "skipped" + _not_for_card(rec, view)
    if rec.outcome != OK:
        return (one_line(rec.outcome) + _why_failed(rec.check) + _other_rate(rec, view)
                + _cost_of_failed(row, shows, base, view))
    text = ", ".join(t for t in (_show(row, s, base, view, shows) for s in shows) if t)
    busy = host_bound(rec)
    return text + (f" {view.mark(HOST_BOUND)}{busy:.0%}" if busy is not None and shows else "")


def _not_for_card(rec, view: View) -> str:
    """The mark of a record run under the emulation of a named card that cannot run its way (read as
    skipped: ``capable.as_read``), its reason kept for the footnote; "" for any other."""
    why = capable.not_for_its_card(rec.params)
    if why is None:
        return ""
    view.not_for_card.add(why)
    return view.mark(NOT_THIS_CARD)


def _cost_of_failed(row: Row, shows: list[str], base: Row | None, view: View) -> str:
    """What the steps of a case whose loss curve left its reference's cost, of the step and peak
    asked: they did their work and trained another curve, a price a reader may still weigh. Only
    what was measured (no step where none was kept); nothing for a wrong answer, a death or an error."""
    if _loss_gap(row.record.check) is None:
        return ""
    measured = {"step": row.record.timing is not None,
                "peak": bool(allocated_peak(row.record) or row.record.device_bytes() or row.record.host_bytes())}
    costs = [_figure(row, s, base, view) for s in shows if measured.get(s)]
    return ": " + ", ".join(costs) if costs else ""


def _other_rate(rec, view: View) -> str:
    """The mark of a tricks record trained at another Adam rate than today's code trains its model
    at: its loss, and its loss check's verdict, are not today's (its step and peak are)."""
    return view.mark(OTHER_RATE) if rec.case == TRICKS and other_rate(rec.params, rec.check) else ""


def does_not_fit(rec) -> str:
    """Which memory ran short, and the bytes the case asked of it where known."""
    known = isinstance(rec.requested_bytes, int)
    if rec.short_of() == HOST:
        return "does not fit in host memory" + (f" ({gb(rec.requested_bytes)} asked)" if known else "")
    return "does not fit" + (f" (a {gb(rec.requested_bytes)} request failed)" if known else "")


def _why_failed(check: dict) -> str:
    """Why a case failed: its process died or raised, or its loss curve left its reference's
    tolerance (and the widest gap among runs of the reference, where measured)."""
    check = check or {}
    if check.get("ended") == "died":
        return " (its process died: killed or crashed)"
    if check.get("ended") == "oom_killed":
        return " (host memory ran out: the kernel's out-of-memory killer ended it)"
    if check.get("ended") == "disk_full":
        return " (the disk it files into was full)"
    if check.get("ended") == "raised":
        return f" ({one_line(check.get('error'))})"
    if isinstance(check.get("falls"), (int, float)) and isinstance(check.get("fell"), (int, float)):
        # held to a falling loss of its own (``reference.held_to_falling``), not to fp32's curve
        return f" (loss fell {check['fell']:.2g} of its first, {check['falls']:g} asked)"
    verdict = _loss_gap(check)
    if verdict is None:
        return ""
    gap, allowed = _apart(*verdict)
    return f" (loss gap {gap} from {one_line(check.get('reference') or 'fp32')}, {allowed} allowed)"


def _apart(gap: float, allowed: float) -> tuple[str, str]:
    """The gap and the allowance to two significant digits, or as many more as it takes to tell them
    apart, up to six: a failed check must not read "gap 0.014, 0.014 allowed"; one within a millionth
    of its allowance reads as it."""
    for digits in range(2, 7):
        shown = f"{gap:.{digits}g}", f"{allowed:.{digits}g}"
        if shown[0] != shown[1]:
            break
    return shown


def _loss_gap(check: dict | None) -> tuple[float, float] | None:
    """(the gap, what was allowed) of a loss curve held to its reference's; None for any other check."""
    check = check or {}
    gap, allowed, spread = check.get("deviation"), check.get("tolerance"), check.get("reference_spread", 0)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (gap, allowed, spread))
    if check.get("ended") or not numbers:
        return None
    return gap, allowed + check.get("spread_factor", 1) * spread  # records before the factor allowed the gap once


def _check_request(case: cases.Case, down: list[str], across: str, shows: list[str], versus, where: dict,
                   rank: bool) -> None:
    _axis_names(case, down + [across])
    for name, _ in versus or ():
        if name not in down + [across] + list(where):
            raise ValueError(f"--versus {name}=... needs {name} down or across the table, or fixed by --where")
    if rank and "step" not in shows:
        raise ValueError("--rank orders the rows by the step of their cell in the first column: add step to --show")
    for s in shows:
        if s not in SHOWS and not s.startswith("check:"):
            raise ValueError(f"unknown figure {s!r}: choose from {', '.join(SHOWS)} or check:KEY")
    if "scaling" in shows and not versus:
        raise ValueError("--show scaling reads each strategy against the one-GPU run of its workload: name that "
                         "run with --versus (--versus strategy=single,gpus=1,micro_batches=1)")


def _check_keys(grid: dict, case_name: str, shows: list[str]) -> None:
    """A check:KEY that no record in the table holds is a typo, not a column of dashes."""
    held = {k for r in grid.values() for k in (r.record.check or {})}
    for s in shows:
        if s.startswith("check:") and s[len("check:"):] not in held:
            raise ValueError(f"no record of {case_name} here holds check key {s[len('check:'):]!r}: "
                             f"its records hold {', '.join(sorted(map(str, held))) or 'no check keys'}")


def cells_at(rows: list[Row], case_name: str, down: list[str], across: str, where: dict) -> dict:
    """(values down, value across) -> the row there."""
    picked = _measured_boxes(_matching(rows, case_name, where))
    if not picked:
        raise ValueError(f"no records of {case_name} match {where or 'anything'}: run the case first, "
                         f"or check --where against `python3 -m harness summary`")
    grid: dict = {}
    # Where one machine ran a case under several library stacks (a stack made to compare versions,
    # say), the cell shows its newest releases: the older stacks are read against it on the pages'
    # versions table, not in its place. Oldest first, so a cell's newest record wins.
    for r in sorted(newest_stack(picked), key=lambda r: r.record.created):
        at = (tuple(_value(r, d) for d in down), _value(r, across))
        if at in grid:
            _one_case_per_cell(grid[at], r)
        grid[at] = r
    return grid


def _matching(rows: list[Row], case_name: str, where: dict) -> list[Row]:
    return [r for r in newest_runs(latest(rows), case_name)
            if r.case == case_name and all(holds(_value(r, k), v) for k, v in where.items())]


def newest_runs(rows: list[Row], case_name: str) -> list[Row]:
    """``rows``, less those of ``case_name`` from a run whose every answer to a question (the case's
    ``answer_of``) a newer run on the same machine gave again (all of them, where the case names none)."""
    answer_of = cases.get(case_name).answer_of if case_name in cases.MODULES else None
    if answer_of is None:
        return rows
    answers: dict = {}  # (machine, question) -> run id -> what that run answered
    for r in rows:
        if r.case == case_name:
            asked, answer = answer_of(r.record.params)
            answers.setdefault((r.machine, asked), {}).setdefault(r.record.run_id or "", set()).add(answer)

    def replaced(r: Row) -> bool:
        runs = answers[(r.machine, answer_of(r.record.params)[0])]
        gave = runs[r.record.run_id or ""]
        return any(run > (r.record.run_id or "") and gave <= again for run, again in runs.items())
    return [r for r in rows if r.case != case_name or not replaced(r)]


def _versus_cells(rows: list[Row], case_name: str, down: list[str], across: str, where: dict, versus, at: dict) -> dict:
    """The cells ``--versus``'s base is read from: the table's own (``at``), or, where it names a value
    other than the one --where fixes (budget=card beside --where budget=16GB), the cells of the records
    that hold that value instead; none (no multiples) where no record does."""
    # an equal value would read the same cells again
    moved = {n: v for n, v in versus or () if n in where and str(v) != str(where[n])}  # pragma: no mutate (as said)
    if not moved:
        return at
    there = {**where, **moved}
    return cells_at(rows, case_name, down, across, there) if _matching(rows, case_name, there) else {}


# A row's place under --rank, first to last: by its step where it ran one (with a card: those whose
# device peak is past the card's total after those within it); ran without one; not run.
STEP, PAST, NO_STEP, NOT_RUN = 0, 1, 2, 3


def past(rec, card) -> bool:
    """Whether ``rec``'s device peak is past named card ``card``'s total (None: no card), by the
    chooser's rule: a way fits a card when its device peak, context included, is within the total."""
    return card is not None and (rec.device_bytes() or 0) > card.total_bytes


def ranked(keys: list[tuple], at: dict, col, card=None) -> list[tuple]:
    """``keys`` (in their usual order) by the step of their cell in column ``col``, fastest first, those
    whose device peak is past ``card``'s total (a named ``Card``; None: none) after those within it; then
    the rows that ran there without a step to rank (did not fit, failed), then those that did not run
    there (not run, skipped), each in their usual order, as ties are (``sorted`` is stable)."""
    def place(key: tuple) -> tuple:
        row = at.get((key, col))
        rec = row.record if row else None
        if rec is None or rec.outcome == SKIPPED:
            return (NOT_RUN,)
        if rec.outcome != OK or rec.timing is None:
            return (NO_STEP,)
        return PAST if past(rec, card) else STEP, rec.timing.median_s
    return sorted(keys, key=place)


def _measured_boxes(rows: list[Row]) -> list[Row]:
    """The rows of the machines that ran at least one of them: a box that skipped them all (a
    CPU box, for GPU cases) says nothing about them and takes no column."""
    ran = {machine_label(r) for r in rows if r.record.outcome != SKIPPED}
    return [r for r in rows if machine_label(r) in ran]


def _rows_run(keys: list[tuple], cols: list, at: dict) -> tuple[list[tuple], list[str]]:
    """The rows some machine ran (as a box that skipped a whole table takes no column), and for
    each row that none ran (every key has a cell, so a box skipped it), its name and why: a
    parameter set the case declares and cannot run (channels_last on a model without images)
    says nothing in every column."""
    def ran(k: tuple) -> bool:
        return any(at.get((k, c)) is not None and at[(k, c)].record.outcome != SKIPPED for c in cols)
    unrun = [f"{markdown.inline(', '.join(map(str, k)))} (skipped: {markdown.inline(_skip_reason(k, cols, at))})"
             for k in keys if not ran(k)]
    return [k for k in keys if ran(k)], unrun


def _skip_reason(k: tuple, cols: list, at: dict) -> str:
    return next(at[(k, c)].record.reason or "no reason kept" for c in cols if (k, c) in at)


def _one_case_per_cell(was: Row, row: Row) -> None:
    """Two records in one cell must be the same case on the same machine (the newer wins); two
    machines or parameters folded into one cell would show one of them as if it were all."""
    names = sorted({MACHINE} | set(was.record.params) | set(row.record.params))
    differ = [n for n in names if _value(was, n) != _value(row, n)]
    if differ:
        pairs = ", ".join(f"{n} {_value(was, n)} and {_value(row, n)}" for n in differ)
        raise ValueError(f"one cell would hold records that differ in {pairs}: add "
                         f"{' or '.join(differ)} to --down, or pick one with --where {differ[0]}=VALUE")


def versus_pairs(case: cases.Case, text: str | None) -> tuple:
    """``--versus`` as ((name, value), ...): "technique=fp32" or several, "technique=fp32,budget=card"."""
    return tuple(where_of(case, text.split(","), "--versus").items()) if text else ()


def _base(grid: dict, down: list[str], across: str, versus, key: tuple, col):
    """The row that differs from (key, col) only in holding ``versus``'s values, or None."""
    if not versus:
        return None
    want = {name: str(value) for name, value in versus}

    def matches(k, c) -> bool:
        downs = all(str(v) == want[d] if d in want else v == key[i] for i, (d, v) in enumerate(zip(down, k)))
        return downs and (str(c) == want[across] if across in want else c == col)
    return next((r for (k, c), r in grid.items() if matches(k, c)), None)


@dataclass
class Grid:
    """A table as cells: its header, one line per label down (the label, then each cell's text and
    the row it shows, None where nothing ran), and the footnotes its marks need. Texts are plain
    (one line each); ``markdown`` escapes them."""
    head: list[str]
    lines: list[tuple[str, list[tuple[str, Row | None]]]]
    notes: list[str]

    def markdown(self) -> str:
        body = [[label, *(text for text, _ in cells)] for label, cells in self.lines]
        return "\n".join(markdown.table(self.head, body))


def grid(rows: list[Row], case_name: str, down: list[str], across: str, shows: list[str],
         where: dict | None, versus: tuple, rank: bool, card: str | None = None) -> Grid:
    """The table's cells. ``versus=((parameter, value), ...)``: step, rate and peak also as a
    multiple of the record that differs only in holding those values (``(("technique", "fp32"),)``:
    each trick against fp32; add ``("budget", "card")`` to read each way out under a budget against
    fp32 on the whole card; a value --where fixes may be one). ``rank``: rows by their step in the first
    column (``ranked``); with ``card`` (a named card), those whose device peak is past its total after
    the others, each such cell marked. Rates are read against ceilings from all of ``rows``."""
    case = cases.get(case_name)
    _check_request(case, down, across, shows, versus, where or {}, rank)
    at = cells_at(rows, case_name, down, across, where or {})
    bases = _versus_cells(rows, case_name, down, across, where or {}, versus, at)
    _check_keys(at, case_name, shows)
    schemas = {r.record.schema for r in at.values() if r.record.outcome == OK}
    view = View(Ceilings(r.record for r in rows), mixed_schemas=len(schemas) > 1)
    orders = [case.ordered(d, {k[i] for k, _ in at}) for i, d in enumerate(down)]
    keys = sorted({k for k, _ in at}, key=lambda k: tuple(o.index(v) for o, v in zip(orders, k)))
    cols = case.ordered(across, {c for _, c in at})
    fit = capable.card(card) if card is not None and rank else None
    keys = ranked(keys, at, cols[0], fit) if rank else keys
    keys, unrun = _rows_run(keys, cols, at)
    lines = [(one_line(", ".join(map(str, k))),
              [(_placed(at.get((k, c)), shows, _base(bases, down, across, versus, k, c), view, fit), at.get((k, c)))
               for c in cols])
             for k in keys]
    notes = [text for mark, text in NOTES.items() if mark in view.used]
    if NOT_THIS_CARD in view.used:
        notes.append(f"{NOT_THIS_CARD} no answer for the card it was emulated for, read as skipped (the record is "
                     f"kept): {'; '.join(sorted(view.not_for_card))}.")
    if PAST_CARD in view.used:
        notes.append(past_note(fit))
    if "peak" in shows and schemas == {1}:
        notes.append(ALL_WHOLE_CASE)
    if unrun:
        notes.append(f"Left out, no machine ran them: {'; '.join(unrun)}.")
    return Grid([", ".join(down)] + [one_line(f"{across} {c}") for c in cols], lines, notes)


def _placed(row: Row | None, shows: list[str], base: Row | None, view: View, card) -> str:
    """A cell, marked where its way ran with a device peak past ``card``'s total (None: no card)."""
    text = cell(row, shows, base, view)
    ran = row is not None and row.record.outcome == OK and row.record.timing is not None
    return text + (view.mark(PAST_CARD) if ran and past(row.record, card) else "")


def past_note(card) -> str:
    """The footnote of the cells whose device peak is past ``card``'s total."""
    return (f"{PAST_CARD} not shown to fit the {card.model} ({card.name}): its device peak, the second figure of "
            "its peak (the allocator's pool with the CUDA context and library workspaces), is past the card's "
            f"{gb(card.total_bytes)} total, so it ranks after the ways whose device peak is within it (the chooser's "
            "rule).")


def render(rows: list[Row], case_name: str, down: list[str], across: str, shows: list[str],
           where: dict | None = None, versus: tuple = (), rank: bool = False,
           card: str | None = None) -> tuple[str, list[str]]:
    """(the markdown table, its footnotes): ``grid``'s cells, as markdown."""
    made = grid(rows, case_name, down, across, shows, where, versus, rank, card)
    return made.markdown(), made.notes


def table(rows: list[Row], case_name: str, down: list[str], across: str, shows: list[str],
          where: dict | None = None, versus: tuple = (), rank: bool = False, card: str | None = None) -> str:
    """The table as ``harness table`` prints it: the markdown table, then its footnotes, if any.
    ``card``: a named card; the ways its compute capability cannot run are left out, in a footnote."""
    left = []
    if card is not None:
        rows, left = runnable(rows, case_name, where or {}, card)
    text, notes = render(rows, case_name, down, across, shows, where, versus, rank, card)
    return text + "".join(f"\n\n{n}" for n in [*notes, capable.note(card, left)] if n)


def runnable(rows: list[Row], case_name: str, where: dict, card: str) -> tuple[list[Row], list]:
    """``rows`` less the ways ``card`` cannot run, and those of them the table would have shown."""
    _, left = capable.runnable(_matching(rows, case_name, where), card)
    return capable.runnable(rows, card)[0], left


def main(results: str | Path, case: str, down: str, across: str, show: str, where: list[str],
         versus: str | None = None, rank: bool = False, card: str | None = None) -> int:
    """Prints the table; every bad argument exits 2 with the fix, before anything is printed."""
    results = Path(results)
    try:
        if not (results / "records").is_dir():
            raise ValueError(f"{results} holds no records/ folder: pass --results with the folder that holds "
                             "records/ (results/ by default)")
        c = cases.get(case)
        against = versus_pairs(c, versus)
        if card is not None:
            capable.card(card)  # an unknown card is refused before any record is read
        text = table(load_rows(results), case, down.split(","), across, show.split(","), where_of(c, where), against,
                     rank, card)
    except ValueError as e:
        print(f"oombench table: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0
