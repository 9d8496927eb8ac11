"""The regression gate: two sets of records, case by case; exit 1 when a case got slower or
bigger, fits less, stopped running, went missing, or cannot be compared; exit 2 when the input
cannot be trusted or holds nothing to compare.

BASE and NEW are record files or folders of them. Cases are matched on (case, parameters) within
one machine kind: a side that mixes kinds, or two sides of different kinds, are refused unless
``cross_machine`` is asked for, because a comparison across kinds compares hardware, not code.
Where a side holds a case more than once, its latest record stands for it (all of them, where each
side holds the rounds of one ``harness compare`` session: ``all_rounds``, ``harness.report.rounds``);
with ``cross_machine``, NEW's latest record of BASE's own kind stands for it wherever NEW has one,
however much newer NEW's records of other kinds are.

The gate fails closed. Every line of both sides must be a valid record (else exit 2, "file:line:
why"). A case ok in BASE fails when in NEW it is missing, skipped, failed or does not fit (unless
NEW's code no longer declares it: then it is listed as retired); when NEW holds BASE's very
record instead of a measurement of its own (two sides holding only the same records are refused,
exit 2); when its two records are of two schemas (memory levels changed meaning); or when NEW
lacks a peak level BASE has. The last two pass only where ``allow`` names them (``--allow
schema``, ``--allow missing-level``), and the report then lists what they let through.

Slower (``harness.report.noise`` says why each rule): NEW's median over BASE's exceeds 1 + the
case's floor (raised to ``threshold`` where that is higher), learned from the committed history of
the machine kind (the within-host floor where both records come from one host), and the
difference is real: by a one-sided Mann-Whitney test on the raw step times (p < ``noise.ALPHA``,
as asv compare) where both records keep them, else (records made before raw times were kept) by
the quartiles: the medians further apart than ``k`` standard errors of their difference, each
median's error read from its IQR and number of steps. Where the steps are too few for a test to
reach ``noise.ALPHA`` at all (five a side or fewer), nothing can vouch for "same", so the ratio of
medians against the floor decides alone: the floor is what two honest runs exceed once in a
hundred, so a rise past it fails whatever the spread, and a hundredfold rise over two steps can
never read "same". A median past the floor whose steps the test cannot tell apart reads "same:
not told from the steps' scatter": more steps, or the rounds of ``harness compare``, can tell.
Faster is read the same way, mirrored. Where BASE and NEW come from two hosts
and the floor the case's hosts teach is past ``noise.CROSS_HOST_AIM`` (the device ceilings, whose
figure is the host's; steps paced by the host's page faults), a slowdown under it is not one a
verdict can see: the report lists those cases and names ``harness compare``, which measures both
commits on one box.

Bigger: peaks are near-deterministic (one allocator high-water mark per run), so a peak fails
when it grows by more than a byte floor, ``max(min_bytes, max(2%, threshold) of the peak)``:
small enough that +10% of any peak over the floor's size is caught, large enough for allocator
rounding and sampled pool levels. Set-up levels ("setup.") are not peaks, so are not gated.

What fits: a what-fits record's one timed "step" is a whole search, whose wall time says what the
search cost (how many probes, which earlier runs it started from), not how fast anything trains,
so it is not gated. Its result is its answer, the largest size that fits the budget: the case
fails when the answer drops by one size or more, and where the answer is the same, the peak the
probe at that size allocated is compared as a peak. The search process's own memory levels are
not compared: its device level adds up probes run side by side in other processes.

Across machine kinds (``cross_machine``), memory is compared only like with like: under the same
emulated budget, or where no card took part (CPU cases). A case that ran on the whole card, or
whose what-fits answer the host's memory set, has its time compared alone (a what-fits record
then nothing), and NVML's device level, which holds the CUDA context of that card and driver, is
never compared across kinds.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness import cases
from harness.cases import fits
from harness.measure.guards.budget import CARD, is_whole_card
from harness.measure.instruments.machine import host_key, machine_label
from harness.measure.guards.inputs import write_whole
from harness.measure.outcomes import OK
from harness.measure.records.record import Record
from harness.measure.records.store import COMMITTED, load_any
from harness.measure.records.store import latest as store_latest
from harness.report import markdown, noise, rounds
from harness.units import MB, gb, ms

# Memory labels that are peaks (the others are levels before the case, or a final level).
PEAK_PREFIXES = ("allocator.", "host.max_rss")
DEVICE = "device (gain over before)"
PROBE_PEAK = "allocated by the probe at the answer"
PEAK_REL = 0.02
HISTORY = COMMITTED / "records"
COMPARES = COMMITTED / "compare"  # earlier compares: how far a host-bound step's processes scatter on one host
SHOWN_PROBLEMS = 10
INVALID = "invalid line(s)"  # what load_set says of a set holding lines or files that are no records
RATIO_ALONE = "ratio alone"
# What the gate otherwise fails, each let through only where ``--allow`` names it.
ALLOW = {"schema": "BASE and NEW records of two schemas: compare their times, not their peaks",
         "missing-level": "a peak level BASE has and NEW lacks: list it instead of failing"}


class GateError(Exception):
    """Input the gate cannot compare; the message names the fix. Exit 2."""


@dataclass(frozen=True)
class Options:
    threshold: float = 0.0  # the least floor, for times and peaks alike
    k: float = 2.0  # without raw samples: how many standard errors apart the medians must be
    min_bytes: int = 64 * MB
    cross_machine: bool = False
    allow: frozenset = frozenset()  # keys of ALLOW
    # Each side's records are rounds of one session (``harness compare``): every round of a case
    # is judged (``harness.report.rounds``), not its latest alone.
    rounds: bool = False


@dataclass(frozen=True)
class Row:
    mark: str  # "+" slower, bigger or fits less, "-" faster or fits more, "x" lost, missing or not comparable, " " same
    case: str
    params: dict
    what: str  # "time", "answer", "peak LABEL", "outcome", "peaks"
    before: str
    after: str
    ratio: str
    floor: str
    verdict: str
    tally: str = ""  # what a regression counts as in the verdict line

    @property
    def name(self) -> str:
        return " ".join([self.case, *(f"{k}={v}" for k, v in self.params.items())])

    @property
    def regression(self) -> bool:
        return self.mark in "+x"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    compared: int = 0
    common: int = 0
    retired: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)
    defaults: int = 0  # cases whose floor is a default: too little history
    few_steps: int = 0  # cases judged on the ratio alone: too few steps for a test
    allowed: list[str] = field(default_factory=list)  # what an --allow let through
    memory_apart: list[str] = field(default_factory=list)  # cross-machine: memory not like with like
    host_limited: list[str] = field(default_factory=list)  # across hosts: under its floor, the host

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regression]

    @property
    def ok(self) -> bool:
        return not self.regressions


def load_set(path: Path, side: str = "set") -> list[Record]:
    """Every record of a file or folder; GateError naming each line that is not a valid record."""
    path = Path(path)
    if not path.exists():
        raise GateError(f"{side} {path} does not exist: pass a record file (.jsonl) or a folder of them, "
                        "e.g. results/records/<machine>")
    loaded = load_any(path)  # a line it cannot parse at all (nesting, digits) is a problem it names
    if loaded.problems:
        first, rest = loaded.problems[0], loaded.problems[1:SHOWN_PROBLEMS]
        more = len(loaded.problems) - SHOWN_PROBLEMS
        raise GateError("\n".join([f"{first} ({side}: {len(loaded.problems)} {INVALID}; fix or remove them, "
                                   "or re-run those cases)", *rest] + ([f"... and {more} more"] if more > 0 else [])))
    if not loaded.records:
        raise GateError(f"no record in {side} {path}: run `python3 -m harness run` first, or name the folder "
                        "results/records/<machine>")
    return [cases.upgraded(r) for r in loaded.records]


def params_text(rec: Record) -> str:
    return json.dumps(rec.params, sort_keys=True)


def only(recs: list[Record], pattern: str | None) -> list[Record]:
    if not pattern:
        return recs
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise GateError(f"--only {pattern!r} is not a regular expression ({e}): "
                        "e.g. --only 'ceilings|unified'") from None
    return [r for r in recs if rx.search(f"{r.case} {params_text(r)}")]


def one_kind(recs: list[Record], side: str, cross_machine: bool) -> str:
    kinds = sorted({noise.kind_of(r) for r in recs})
    if len(kinds) > 1 and not cross_machine:
        raise GateError(f"{side} mixes machine kinds ({', '.join(kinds)}): name one machine's folder "
                        "(results/records/<machine>), or pass --cross-machine to match on case and parameters alone")
    return kinds[0] if kinds else ""


def latest(recs: list[Record]) -> dict[tuple[str, str], Record]:
    return store_latest(recs)  # keyed by (case, parameters as params_text writes them)


def pairs(base: list[Record], new: list[Record], all_rounds: bool
          ) -> dict[tuple[str, str], tuple[Record | None, Record | None]]:
    """(case, parameters) -> (BASE's record, NEW's record): each side's latest, NEW's of BASE's
    record's own machine kind wherever NEW has one (only a cross-machine NEW mixes kinds); with
    ``all_rounds``, each side's rounds of the case read as one (``rounds.pooled``)."""
    if all_rounds:
        b, n = rounds.pooled(base), rounds.pooled(new)
        return {key: (b.get(key), n.get(key)) for key in sorted(set(b) | set(n))}
    b, n = latest(base), latest(new)
    same_kind = store_latest(new, key=lambda r: (noise.kind_of(r), r.case, params_text(r)))
    out = {}
    for key in sorted(set(b) | set(n)):
        old = b.get(key)
        cur = same_kind.get((noise.kind_of(old), *key)) if old is not None else None
        out[key] = (old, cur or n.get(key))
    return out


def check_allow(allow) -> frozenset:
    unknown = sorted(set(allow) - set(ALLOW))
    if unknown:
        known = "; ".join(f"{k} ({v})" for k, v in ALLOW.items())
        raise GateError(f"--allow {unknown[0]} is not one the gate knows: pass one of {known}")
    return frozenset(allow)


# -- time -------------------------------------------------------------------------------------------
def declared(case: str, params: dict) -> bool:
    """Whether this checkout's code still declares the case with these parameter values."""
    try:
        cases.get(case).config(params)
    except (ValueError, TypeError):
        return False
    return True


def median_se(t) -> float:
    """The standard error of a median of ``t.steps`` steps, its spread read from the IQR (that of
    a normal sample: sigma = IQR / 1.349, and a median's error is 1.2533 sigma / sqrt(n))."""
    return 1.2533 * t.iqr_s / 1.349 / math.sqrt(t.steps)


def evidence(base: Record, new: Record, k: float) -> tuple[bool, bool, str]:
    """(slower, faster, by what): whether NEW's steps differ from BASE's in each direction beyond
    chance. Where the steps are too few for any test to reach ``noise.ALPHA``, both are True and
    the ratio of medians against the floor decides alone."""
    b, n = base.timing, new.timing
    if b.samples_s and n.samples_s and noise.can_decide(len(b.samples_s), len(n.samples_s)):
        up = noise.rank_p(b.samples_s, n.samples_s, "greater")  # pragma: no mutate (rank_p's default, any case)
        down = noise.rank_p(b.samples_s, n.samples_s, "less")  # pragma: no mutate (scipy reads it in any case)
        return up < noise.ALPHA, down < noise.ALPHA, f"rank p={up:.2g}"  # pragma: no mutate (p = ALPHA: no tie seen)
    if not (b.samples_s and n.samples_s) and noise.can_decide(b.steps, n.steps):
        gap, se = n.median_s - b.median_s, k * math.hypot(median_se(b), median_se(n))
        return gap > se, -gap > se, "quartiles"  # pragma: no mutate (a tie is measure zero)
    return True, True, f"{RATIO_ALONE}: {b.steps} and {n.steps} steps"


def time_row(base: Record, new: Record, floors: noise.Floors, opts: Options) -> tuple[Row, noise.Floor]:
    floor = floors.floor(noise.key_of(base), noise.pair_class(base, new), noise.same_host(base, new))
    least = max(floor.fraction, opts.threshold)
    ratio = new.timing.median_s / base.timing.median_s
    slower, faster, test = evidence(base, new, opts.k)
    slower = slower or not math.isfinite(ratio)  # past any floor, whatever the steps' scatter
    alone = f" ({test})" if test.startswith(RATIO_ALONE) else ""
    past = ratio > (1 + least) * (1 + 1e-9)  # pragma: no mutate (the 1e-9 takes the tie)
    if slower and past:
        mark, verdict = "+", f"slower ({test})"
    elif faster and ratio * (1 + least) < 1 - 1e-9:  # pragma: no mutate (the 1e-9 takes the tie)
        mark, verdict = "-", f"faster{alone}"
    elif past:  # past the floor, but the steps scatter too much to tell
        mark, verdict = " ", f"same: not told from the steps' scatter ({test})"
    else:
        mark, verdict = " ", f"same{alone}"
    code = "w" if "within" in floor.how else "a" if floor.learned else "d"
    return Row(mark, base.case, base.params, "time", ms(base.timing.median_s),
               ms(new.timing.median_s), f"{ratio:.3f}", f"{least:.1%} {code}", verdict,
               "slower" if mark == "+" else ""), floor


# -- memory -----------------------------------------------------------------------------------------
def answer_key(rec: Record) -> str | None:
    """The check field holding a what-fits search's answer (``max_batch``, ``max_seq_len``); None
    for a case whose timed step is a step."""
    return f"max_{rec.params.get('over', 'batch')}" if rec.case == fits.NAME else None


def peaks(rec: Record) -> dict[str, int]:
    """The peak memory figures of a record, by label, plus the device gain the benchmarks track.
    A schema 1 CuPy pool's "used" was sampled, not tracked: a level that misses short-lived
    arrays, not a peak, so it is left out. A what-fits search's own levels are not the case's
    (its probes run in processes of their own): its one peak is the probe's at the answer."""
    if answer_key(rec):
        at = size(rec.check.get("peak_allocated_at_max"))
        return {PROBE_PEAK: at} if at else {}
    out = {k: v for k, v in rec.memory.items() if k.startswith(PEAK_PREFIXES)
           and not (rec.schema < 2 and k.startswith("allocator.cupy.") and k.endswith("used"))}
    gain = rec.device_bytes()
    if gain is not None:
        out[DEVICE] = gain
    return out


def on_card(rec: Record) -> bool:
    return bool(rec.environment.devices.gpus) and rec.params.get("device") != "cpu"


def apart(base: Record, new: Record, opts: Options) -> str | None:
    """Why the two records' memory is not like with like (None where it is): only across machine
    kinds, where a case on the whole card, or a what-fits answer the host's memory set, says as
    much of the machine as of the code."""
    if not opts.cross_machine or noise.kind_of(base) == noise.kind_of(new) or not (on_card(base) or on_card(new)):
        return None
    whole_card = is_whole_card(base.params.get("budget", CARD))
    if whole_card or base.budget.get("limit_bytes") != new.budget.get("limit_bytes"):
        return "memory not compared across machine kinds: not under one emulated budget (the card is the limit)"
    key = answer_key(base)
    if key and (fits.host_bound(base.case, base.check, key) or fits.host_bound(new.case, new.check, key)):
        return "memory not compared across machine kinds: the host's memory set the answer"
    return None


def size(value) -> int | None:
    """A what-fits answer or peak as the count it must be; None for anything else a check holds."""
    return value if type(value) is int and value > 0 else None


def answer_row(base: Record, new: Record) -> Row:
    key = answer_key(base)
    b, n = size(base.check.get(key)), size(new.check.get(key))
    axis = key.removeprefix("max_")
    if b is None or n is None:
        side = "BASE's" if b is None else "NEW's"
        return Row("x", base.case, base.params, "answer", f"{axis} {b}", f"{axis} {n}", "-", "-",
                   f"absent: {side} search holds no {key} to compare", "no answer")
    ratio = f"{n / b:.3f}"
    if n < b:
        early = (" (NEW's search stopped early: its answer is a lower bound)"
                 if fits.lower_bound(new.case, new.check, key) else "")
        return Row("+", base.case, base.params, "answer", f"{axis} {b}", f"{axis} {n}", ratio, "any drop",
                   f"fits less: {axis} {b} -> {n}{early}", "fits less")
    mark, verdict = ("-", "fits more") if n > b else (" ", "same answer")
    return Row(mark, base.case, base.params, "answer", f"{axis} {b}", f"{axis} {n}", ratio, "any drop", verdict)


def peak_rows(base: Record, new: Record, opts: Options, report: Report) -> list[Row]:
    """A row for each peak that grew past its floor, and for each BASE has and NEW lacks."""
    rows, new_peaks = [], peaks(new)
    across = noise.kind_of(base) != noise.kind_of(new)  # only ever so under cross_machine
    for label, b in sorted(peaks(base).items()):
        n = new_peaks.get(label)
        if across and label == DEVICE:
            continue
        if n is None and "missing-level" in opts.allow:
            report.allowed.append(f"missing-level: {base.case} {params_text(base)} has no {label} in NEW")
        elif n is None:
            rows.append(Row("x", base.case, base.params, f"peak {label}", gb(b), "absent", "-", "-",
                            "absent in NEW: a level BASE has (rerun NEW, or --allow missing-level to list it)",
                            "level absent"))
        elif n - b > (allowed := max(opts.min_bytes, max(PEAK_REL, opts.threshold) * b)):
            rows.append(Row("+", base.case, base.params, f"peak {label}", gb(b), gb(n),
                            f"{n / b:.3f}" if b else "-", f"+{gb(allowed)}", "bigger", "bigger"))
    return rows


def memory_rows(base: Record, new: Record, opts: Options, report: Report) -> list[Row]:
    if answer_key(base) is None and base.schema != new.schema:
        if "schema" in opts.allow:
            report.allowed.append(f"schema: {base.case} {params_text(base)}: peaks not compared "
                                  f"(schema {base.schema} -> {new.schema})")
            return []
        return [Row("x", base.case, base.params, "peaks", f"schema {base.schema}", f"schema {new.schema}", "-", "-",
                    "unlike schemas: memory levels changed meaning (rerun BASE at NEW's schema, "
                    "or --allow schema to compare times alone)", "unlike schemas")]
    return peak_rows(base, new, opts, report)


# -- one case, all cases ----------------------------------------------------------------------------
def lost_row(base: Record, after: str, verdict: str, tally: str) -> Row:
    return Row("x", base.case, base.params, "outcome", ms(base.timing.median_s), after, "-", "-", verdict, tally)


def compare_one(report: Report, old: Record, cur: Record, floors: noise.Floors, opts: Options) -> None:
    name = f"{old.case} {params_text(old)}"
    if old.outcome != OK:
        report.not_compared.append(f"{name}: base is {old.outcome}, new is {cur.outcome}")
        return
    if cur.outcome != OK:
        report.rows.append(lost_row(old, cur.outcome, f"ok -> {cur.outcome}: {cur.reason or 'no reason given'}",
                                    "lost"))
        return
    if cur == old:
        report.rows.append(lost_row(old, "BASE's record", "copied: NEW holds BASE's own record, not a "
                                    "measurement of its own", "not measured again"))
        return
    why = apart(old, cur, opts)
    if answer_key(old) and why:
        report.not_compared.append(f"{name}: {why}")
        return
    report.compared += 1
    if answer_key(old):
        report.rows.append(answer_row(old, cur))
        if report.rows[-1].mark != " ":
            return  # the peak at another size is not the same probe's
    else:
        row, floor = time_row(old, cur, floors, opts)
        report.rows.append(row)
        report.defaults += not floor.learned
        report.few_steps += RATIO_ALONE in row.verdict
        if floor.host_limited and not noise.same_host(old, cur):
            report.host_limited.append(f"{name}: floor {floor.fraction:.1%}, {floor.how} "
                                       f"up to {floor.spread:.1%} apart")
    if why:
        report.memory_apart.append(name)
        return
    report.rows += memory_rows(old, cur, opts, report)


def compare(base: list[Record], new: list[Record], floors: noise.Floors, opts: Options = Options()) -> Report:
    matched = pairs(base, new, opts.rounds)
    common = {key: p for key, p in matched.items() if None not in p}
    if common and all(old == cur for old, cur in common.values()):
        raise GateError(f"BASE and NEW hold the same {len(common)} record(s): the gate compares two measurements; "
                        "pass the records of the run to judge as NEW (e.g. a fresh --results folder)")
    report = Report(common=len(common))
    for key, (old, cur) in matched.items():
        if old is None:
            report.only_new.append(f"{key[0]} {key[1]}")
        elif cur is not None:
            compare_one(report, old, cur, floors, opts)
        elif old.outcome == OK and not declared(old.case, old.params):
            report.retired.append(f"{key[0]} {key[1]}")
        elif old.outcome == OK:
            report.rows.append(lost_row(old, "missing", "missing: ok in base, not measured in new", "missing"))
    return report


def provenance(recs: list[Record]) -> str:
    """Which machine(s), commit(s), library versions and hosts a set is."""
    machines = sorted({describe_machine(r) for r in recs})
    commits = sorted({r.commit[:8] if r.commit else "none" for r in recs})
    libs = sorted({", ".join(f"{k} {v}" for k, v in sorted(r.environment.libraries.items())
                             if k in ("torch", "numpy", "cupy-cuda13x", "cupy-cuda12x", "chainer")) for r in recs})
    hosts = sorted({host_key(r.environment) or "unknown" for r in recs})
    return (f"{'; '.join(machines)} | commit {', '.join(commits)} | {' / '.join(libs)} | "
            f"host {', '.join(hosts)}")


def describe_machine(rec: Record) -> str:
    env = rec.environment
    return machine_label(env) if env.devices.gpus else f"CPU {machine_label(env)} x{env.num_cpu}"


HEADER = ("", "before", "after", "ratio", "floor", "verdict", "case")
RIGHT = (False, True, True, True, True, False, False)


def cells(row: Row) -> tuple:
    what = "" if row.what == "time" else f" [{row.what}]"
    return row.mark, row.before, row.after, row.ratio, row.floor, row.verdict, row.name + what


def notes(report: Report, opts: Options, kind: str) -> list[str]:
    out = [f"rule: slower when the median ratio exceeds 1 + floor and the steps differ (one-sided Mann-Whitney "
           f"p < {noise.ALPHA} on raw step times, else medians more than {opts.k:g} standard errors apart, "
           f"each read from its IQR; with too few steps for either test, the ratio alone); "
           f"floor a = learned across hosts, w = within one host, d = default; bigger when a peak grows by more "
           f"than max({gb(opts.min_bytes)}, {max(PEAK_REL, opts.threshold):.0%}); a what-fits search "
           "by its answer and the peak of the probe at it, never its wall time"]
    if opts.rounds:
        out.append("rounds: each side's time is the median of its rounds' medians, the rank test over all its "
                   f"rounds' steps; floors learned from BASE's rounds alone, at least {noise.SESSION_MIN_FLOOR:.1%}, "
                   "a host-bound step's at least its widest scatter on one host in earlier compares")
    if opts.cross_machine:
        out.append(f"cross-machine: matched on case and parameters alone, NEW's record of BASE's kind first; "
                   f"floors are those of BASE's kind ({kind})")
    if report.defaults:
        d = ", ".join(f"{k} {v:.0%}" for k, v in noise.DEFAULT_ACROSS.items())
        out.append(f"history too thin (fewer than 2 hosts) for {report.defaults} case(s): default floors used ({d})")
    if report.few_steps:
        out.append(f"too few steps for a test (under {noise.ALPHA} unreachable) in {report.few_steps} case(s): "
                   "judged on the ratio of medians against the floor alone")
    if report.host_limited:
        out.append(f"across hosts, a slowdown under the floor cannot be told from the host: "
                   f"{len(report.host_limited)} case(s) with a floor past {noise.CROSS_HOST_AIM:.0%}; "
                   "measure both commits on one box in one session, python3 -m harness compare BASE NEW")
    out += listed("host-limited", report.host_limited)
    out += listed("allowed by --allow", report.allowed)
    out += listed("memory not compared across machine kinds (not under one budget, or the card or host set it)",
                  report.memory_apart)
    out += listed("retired (NEW's code no longer declares it)", report.retired)
    out += listed("not compared", report.not_compared)
    out += listed("only in new", report.only_new)
    return out


def listed(title: str, items: list[str], shown: int = 5) -> list[str]:
    more = [f"{title}: ... and {len(items) - shown} more"] if len(items) > shown else []
    return [f"{title}: {t}" for t in items[:shown]] + more


def verdict(report: Report) -> str:
    counts = {}
    for r in report.regressions:
        counts[r.tally] = counts.get(r.tally, 0) + 1
    detail = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    head = "FAIL" if report.regressions else "PASS"
    return (f"{head}: {len(report.regressions)} regression(s){f' ({detail})' if detail else ''} in "
            f"{report.compared} case(s) compared; {len(report.retired)} retired")


def render(report: Report, base: list[Record], new: list[Record], opts: Options, kind: str,
           fmt: str) -> str:
    """The comparison as text (the verdict last, where a terminal leaves it in sight) or as
    markdown (the verdict first, where a pull-request reader starts); in markdown every text is
    escaped, so no record can add a line, a heading or a comment, or move a column."""
    table = markdown.table(HEADER, [cells(r) for r in report.rows], RIGHT, fmt == "markdown")
    if fmt != "markdown":
        said = [f"base: {markdown.one_line(provenance(base))}", f"new:  {markdown.one_line(provenance(new))}"]
        return "\n".join([*said, *table, *map(markdown.one_line, notes(report, opts, kind)), verdict(report)])
    said = bullets([f"base: {provenance(base)}", f"new: {provenance(new)}"])
    return "\n".join([f"**{markdown.escape(verdict(report))}**", "", *said, "", *table, "",
                      *bullets(notes(report, opts, kind))])


def bullets(texts) -> list[str]:
    return [f"- {markdown.escape(t)}" for t in texts]


def refusal(e: GateError, fmt: str) -> str:
    """A GateError's message: one line per line of it, escaped, for markdown, after one bold line."""
    first, *rest = str(e).splitlines() or [""]
    if fmt != "markdown":
        return "\n".join(markdown.one_line(line) for line in [f"oombench gate: {first}", *rest])
    return "\n".join([f"**oombench gate could not compare:** {markdown.escape(first)}", *([""] if rest else []),
                      *bullets(rest)])


def gate(base_path: Path, new_path: Path, threshold: float = 0.0, k: float = 2.0, min_bytes: int = 64 * MB,
         pattern: str | None = None, cross_machine: bool = False,
         fmt: str = "text",  # pragma: no mutate (any fmt but markdown is text)
         history: Path | None = None, report: Path | None = None, allow=(), all_rounds: bool = False,
         prior: Path | None = None) -> tuple[int, str]:
    """(exit code, text): 0 pass, 1 regressions, 2 input that cannot be compared or a report that
    cannot be written (the text says why). ``report``: a markdown file for a pull-request comment,
    written whatever the outcome. ``allow``: keys of ALLOW, what the gate then lets through.
    ``all_rounds``: each side holds rounds of one session on one box (``Options.rounds``); ``prior``:
    a folder of earlier compares, whose rounds set the least floor of a host-bound step then."""
    try:
        opts = Options(threshold, k, min_bytes, cross_machine, check_allow(allow), all_rounds)
        rc, text, md = _gate(base_path, new_path, opts, pattern, fmt, history, prior)
    except GateError as e:
        rc, text, md = 2, refusal(e, "text"), refusal(e, "markdown")  # pragma: no mutate (not markdown: text)
    if report is not None:
        try:
            write_report(Path(report), md, base_path, new_path, pattern)
        except (OSError, ValueError) as e:  # ValueError: a path with no file name
            return 2, (f"{text}\noombench gate: the report could not be written to {report} "
                       f"({getattr(e, 'strerror', None) or e}): "
                       "pass --report a file in a folder you can write")
    return rc, text


# Where a reader of the pull request goes next: paths in the repository, which every host of it
# renders, and the command that builds the comparison pages (their address is the deployment's).
READ_MORE = ("Per-family tables: [docs/results/](docs/results/); each seed's case: "
             "[docs/results/seeds.md](docs/results/seeds.md); the comparison pages: "
             "`python3 -m harness pages`, then `.asv/pages/index.html`.")


def write_report(path: Path, md: str, base_path, new_path, pattern) -> None:
    """The pull-request report: what was compared, the gate's verdict and table, where to read on;
    written whole or not at all, so a poster never reads half of one."""
    scope = f" (cases matching {markdown.escape(pattern)})" if pattern else ""
    head = f"## oombench gate: {markdown.escape(base_path)} against {markdown.escape(new_path)}{scope}"
    text = "\n\n".join([head, md, READ_MORE]) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, text)


def history_floors(history: Path, base_path: Path, base: list[Record], session: bool = False,
                   prior: Path | None = None) -> noise.Floors:
    """The floors learned from ``history``; where it is BASE's own path, from BASE's records as
    already read (a history of many records is read once): where those are rounds of one session
    (``session``), ``noise.SessionFloors``, a host-bound step's floor at least what the compares
    under ``prior`` (other than the one in BASE's folder) measured within one host."""
    if history.resolve() != base_path.resolve():
        return noise.history_floors(history)
    if not session:
        return noise.Floors(base)
    least = noise.SESSION_MIN_FLOOR
    earlier = noise.compare_floors(prior, base_path, least) if prior is not None else noise.Floors([], least=least)
    return noise.SessionFloors(base, earlier)


@dataclass(frozen=True)
class Judged:
    """What a gate judged: its report, the records of each side it compared, and BASE's kind."""
    report: Report
    base: list[Record]
    new: list[Record]
    kind: str


def judged(base_path: Path, new_path: Path, opts: Options = Options(), pattern: str | None = None,
           history: Path | None = None, prior: Path | None = None) -> Judged:
    """The gate's judgement of NEW's records against BASE's, before any rendering; GateError where
    the input cannot be compared. ``prior``: earlier compares (``history_floors``)."""
    base_all = load_set(base_path, "BASE")  # BASE first: where it is the history too, its own absence is named
    base = only(base_all, pattern)
    new = only(load_set(new_path, "NEW"), pattern)
    if history is not None and (not str(history) or not Path(history).exists()):
        raise GateError(f"--history {history} does not exist: pass a folder of records to learn the noise floors "
                        "from, or leave --history out for results/records")
    kinds = one_kind(base, "BASE", opts.cross_machine), one_kind(new, "NEW", opts.cross_machine)
    if not opts.cross_machine and kinds[0] != kinds[1]:
        raise GateError(f"BASE is {kinds[0] or 'empty'} and NEW is {kinds[1] or 'empty'}: compare records of one "
                        "machine kind, or pass --cross-machine to match on case and parameters alone")
    floors = history_floors(Path(history) if history is not None else HISTORY, Path(base_path), base_all, opts.rounds,
                            prior)
    report = compare(base, new, floors, opts)
    if report.common == 0:
        raise GateError("no case is in both sets, so nothing was compared: check that BASE and NEW measured the "
                        "same cases (e.g. `python3 -m harness run --bench ceilings.Host` for the CPU cases), "
                        "or widen --only")
    if report.compared == 0 and not report.regressions:
        raise GateError("\n".join([f"no case was compared: none of the {report.common} case(s) in both sets ended ok "
                                    "in both (a GPU case on a box without one is skipped): measure them where they "
                                    "run, or name the cases that did", *report.not_compared[:SHOWN_PROBLEMS]]))
    return Judged(report, base, new, kinds[0])


def _gate(base_path, new_path, opts: Options, pattern, fmt, history, prior) -> tuple[int, str, str]:
    j = judged(base_path, new_path, opts, pattern, history, prior)
    text = render(j.report, j.base, j.new, opts, j.kind, fmt)
    md = render(j.report, j.base, j.new, opts, j.kind, "markdown")
    return (1 if j.report.regressions else 0), text, md
