"""The regression gate: two sets of records, case by case; exit 1 when a case got slower or
bigger, or stopped running, or went missing; exit 2 when the input cannot be trusted.

BASE and NEW are record files or folders of them. Cases are matched on (machine kind, case,
parameters): a side that mixes machine kinds, or two sides of different kinds, are refused
unless ``cross_machine`` is asked for, because a comparison across kinds compares hardware, not
code. Where a side holds a case more than once, its latest record stands for it.

Every line of both sides must be a valid record; one that is not stops the gate (exit 2,
"file:line: why"), since a comparison that skips lines it cannot read would pass a NEW that
lost its data. For the same reason a case that was ok in BASE and is missing, skipped, failed
or does not fit in NEW fails the gate, unless NEW's code no longer declares it (the case or
one of its parameter values is gone): then it is listed as retired.

Slower (``harness.report.noise`` says why each rule): NEW's median over BASE's exceeds 1 +
the case's floor, learned from the committed history of the machine kind (the within-host
floor where both records come from one host), and the difference is real: by a one-sided
Mann-Whitney test on the raw step times where both records keep them, else (records made
before raw times were kept) by the quartiles: the medians further apart than ``k`` standard
errors of their difference, each median's error read from its IQR and number of steps.

Bigger: peaks are near-deterministic (one allocator high-water mark per run), so a peak fails
when it grows by more than a byte floor, ``max(min_bytes, 2% of the peak)``: small enough that
+10% of any peak over the floor's size is caught, large enough for allocator rounding and
sampled pool levels. Peaks compare only within one record schema (schema 2 levels cover the
timed steps, schema 1 levels the whole case); set-up levels ("setup.") are not gated.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness import cases
from harness.measure.machine import host_key, machine_label
from harness.measure.outcomes import OK
from harness.measure.record import Record
from harness.measure.store import COMMITTED, load_any
from harness.measure.store import latest as store_latest
from harness.report import noise
from harness.units import MB, gb

# Memory labels that are peaks (the others are levels before the case, or a final level).
PEAK_PREFIXES = ("allocator.", "host.max_rss")
SETUP = "setup."
PEAK_REL = 0.02
HISTORY = COMMITTED / "records"
SHOWN_PROBLEMS = 10


class GateError(Exception):
    """Input the gate cannot compare; the message names the fix. Exit 2."""


@dataclass(frozen=True)
class Options:
    threshold: float = 0.0  # the least floor, for times and peaks alike
    k: float = 2.0  # without raw samples: how many standard errors apart the medians must be
    min_bytes: int = 64 * MB
    cross_machine: bool = False


@dataclass(frozen=True)
class Row:
    mark: str  # "+" slower or bigger, "-" faster, "x" lost or missing, " " same
    case: str
    params: dict
    what: str  # "time", "peak LABEL", "outcome"
    before: str
    after: str
    ratio: str
    floor: str
    verdict: str

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
    peaks_skipped: int = 0  # cases whose peaks are of two record schemas

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
    try:
        loaded = load_any(path)
    except (ValueError, RecursionError) as e:  # JSON the reader cannot parse at all (nesting, digits)
        raise GateError(f"{path}: a line could not be parsed ({e}); fix or remove it") from None
    if loaded.problems:
        first, rest = loaded.problems[0], loaded.problems[1:SHOWN_PROBLEMS]
        more = len(loaded.problems) - SHOWN_PROBLEMS
        raise GateError("\n".join([f"{first} ({side}: {len(loaded.problems)} invalid line(s); fix or remove them, "
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
        raise GateError(f"--only {pattern!r} is not a regular expression ({e}): e.g. --only 'ceilings|unified'") from None
    return [r for r in recs if rx.search(f"{r.case} {params_text(r)}")]


def one_kind(recs: list[Record], side: str, cross_machine: bool) -> str:
    kinds = sorted({noise.kind_of(r) for r in recs})
    if len(kinds) > 1 and not cross_machine:
        raise GateError(f"{side} mixes machine kinds ({', '.join(kinds)}): name one machine's folder "
                        "(results/records/<machine>), or pass --cross-machine to match on case and parameters alone")
    return kinds[0] if kinds else ""


def latest(recs: list[Record]) -> dict[tuple[str, str], Record]:
    return store_latest(recs, key=lambda r: (r.case, params_text(r)))


def peaks(rec: Record) -> dict[str, int]:
    """The peak memory figures of a record, by label, plus the device gain the benchmarks track.
    A schema 1 CuPy pool's "used" was sampled, not tracked: a level that misses short-lived
    arrays, not a peak, so it is left out."""
    out = {k: v for k, v in rec.memory.items() if k.startswith(PEAK_PREFIXES)
           and not (rec.schema < 2 and k.startswith("allocator.cupy.") and k.endswith("used"))}
    gain = rec.device_bytes()
    if gain is not None:
        out["device (gain over before)"] = gain
    return out


def seconds_text(s: float) -> str:
    return f"{s * 1e3:,.3f} ms"


def bytes_text(b: float) -> str:
    return gb(b, 2)


def declared(case: str, params: dict) -> bool:
    """Whether this checkout's code still declares the case with these parameter values."""
    try:
        cases.get(case).config(params)
    except (ValueError, TypeError):
        return False
    return True


def distinct(base: Record, new: Record, k: float, alternative: str) -> tuple[bool, str]:
    """Whether NEW's steps differ from BASE's in that direction, and by which test."""
    b, n = base.timing, new.timing
    p = noise.rank_p(b.samples_s, n.samples_s, alternative)
    if p is not None:
        return p < noise.ALPHA, f"rank p={p:.2g}"
    gap = (n.median_s - b.median_s) * (1 if alternative == "greater" else -1)
    return gap > k * math.hypot(median_se(b), median_se(n)), "quartiles"


def median_se(t) -> float:
    """The standard error of a median of ``t.steps`` steps, its spread read from the IQR (that of
    a normal sample: sigma = IQR / 1.349, and a median's error is 1.2533 sigma / sqrt(n))."""
    return 1.2533 * t.iqr_s / 1.349 / math.sqrt(t.steps)


def time_row(base: Record, new: Record, floors: noise.Floors, opts: Options) -> tuple[Row, noise.Floor]:
    floor = floors.floor(noise.key_of(base), noise.pair_class(base, new), noise.same_host(base, new))
    least = max(floor.fraction, opts.threshold)
    ratio = new.timing.median_s / base.timing.median_s
    slower, test = distinct(base, new, opts.k, "greater")
    faster, _ = distinct(base, new, opts.k, "less")
    if slower and ratio > (1 + least) * (1 + 1e-9):
        mark, verdict = "+", f"slower ({test})"
    elif faster and ratio * (1 + least) < 1 - 1e-9:
        mark, verdict = "-", "faster"
    else:
        mark, verdict = " ", "same"
    code = "w" if "within" in floor.how else "a" if floor.learned else "d"
    return Row(mark, base.case, base.params, "time", seconds_text(base.timing.median_s),
               seconds_text(new.timing.median_s), f"{ratio:.3f}", f"{least:.1%} {code}", verdict), floor


def peak_rows(base: Record, new: Record, opts: Options) -> list[Row]:
    rows, new_peaks = [], peaks(new)
    for label, b in sorted(peaks(base).items()):
        n = new_peaks.get(label)
        if n is None or label.startswith(SETUP):
            continue
        allowed = max(opts.min_bytes, max(PEAK_REL, opts.threshold) * b)
        if n - b > allowed:
            rows.append(Row("+", base.case, base.params, f"peak {label}", bytes_text(b), bytes_text(n),
                            f"{n / b:.3f}" if b else "-", f"+{bytes_text(allowed)}", "bigger"))
    return rows


def lost_row(base: Record, after: str, verdict: str) -> Row:
    return Row("x", base.case, base.params, "outcome", seconds_text(base.timing.median_s), after, "-", "-", verdict)


def compare_one(report: Report, old: Record, cur: Record, floors: noise.Floors, opts: Options) -> None:
    name = f"{old.case} {params_text(old)}"
    if old.outcome != OK:
        report.not_compared.append(f"{name}: base is {old.outcome}, new is {cur.outcome}")
        return
    if cur.outcome != OK:
        report.rows.append(lost_row(old, cur.outcome, f"ok -> {cur.outcome}: {cur.reason or 'no reason given'}"))
        return
    report.compared += 1
    row, floor = time_row(old, cur, floors, opts)
    report.rows.append(row)
    report.defaults += not floor.learned
    if old.schema != cur.schema:
        report.peaks_skipped += 1
        return
    report.rows += peak_rows(old, cur, opts)


def compare(base: list[Record], new: list[Record], floors: noise.Floors | None = None,
            opts: Options = Options()) -> Report:
    floors = floors if floors is not None else noise.history_floors(HISTORY)
    b, n = latest(base), latest(new)
    report = Report(common=len(set(b) & set(n)))
    for key in sorted(set(b) | set(n)):
        old, cur = b.get(key), n.get(key)
        if old is None:
            report.only_new.append(f"{key[0]} {key[1]}")
        elif cur is not None:
            compare_one(report, old, cur, floors, opts)
        elif old.outcome == OK and not declared(old.case, old.params):
            report.retired.append(f"{key[0]} {key[1]}")
        elif old.outcome == OK:
            report.rows.append(lost_row(old, "missing", "missing: ok in base, not measured in new"))
    return report


def provenance(recs: list[Record]) -> str:
    """Which machine(s), commit(s), library versions and hosts a set is."""
    machines = sorted({describe_machine(r) for r in recs})
    commits = sorted({(r.commit or "no commit")[:8] for r in recs})
    libs = sorted({", ".join(f"{k} {v}" for k, v in sorted(r.environment.libraries.items())
                             if k in ("torch", "numpy", "cupy-cuda13x", "cupy-cuda12x", "chainer")) for r in recs})
    hosts = sorted({host_key(r.environment) or "unknown" for r in recs})
    return (f"{'; '.join(machines)} | commit {', '.join(commits)} | {' / '.join(libs)} | "
            f"host {', '.join(hosts)}")


def describe_machine(rec: Record) -> str:
    env = rec.environment
    return machine_label(env) if env.devices.gpus else f"CPU {machine_label(env)} x{env.num_cpu}"


HEADER = ("", "before", "after", "ratio", "floor", "verdict", "case")


def cells(row: Row) -> tuple:
    what = "" if row.what == "time" else f" [{row.what}]"
    return row.mark, row.before, row.after, row.ratio, row.floor, row.verdict, row.name + what


def table(rows: list[Row], markdown: bool) -> list[str]:
    body = [HEADER] + [cells(r) for r in rows]
    if markdown:
        esc = [[str(c).replace("|", "\\|") for c in line] for line in body]
        return ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(HEADER)] + ["| " + " | ".join(r) + " |" for r in esc[1:]]
    widths = [max(len(str(line[i])) for line in body) for i in range(len(HEADER))]
    right = (False, True, True, True, True, False, False)
    return ["  ".join(str(c).rjust(w) if r else str(c).ljust(w) for c, w, r in zip(line, widths, right)).rstrip()
            for line in body]


def notes(report: Report, opts: Options, kind: str) -> list[str]:
    out = [f"rule: slower when the median ratio exceeds 1 + floor and the steps differ (one-sided Mann-Whitney "
           f"p < {noise.ALPHA} on raw step times, else medians more than {opts.k:g} standard errors apart, "
           f"each read from its IQR); "
           f"floor a = learned across hosts, w = within one host, d = default; bigger when a peak grows by more "
           f"than max({bytes_text(opts.min_bytes)}, {max(PEAK_REL, opts.threshold):.0%})"]
    if opts.cross_machine:
        out.append(f"cross-machine: matched on case and parameters alone; floors are those of BASE's kind ({kind})")
    if report.defaults:
        d = ", ".join(f"{k} {v:.0%}" for k, v in noise.DEFAULT_ACROSS.items())
        out.append(f"history too thin (fewer than 2 hosts) for {report.defaults} case(s): default floors used ({d})")
    if report.peaks_skipped:
        out.append(f"peaks not compared for {report.peaks_skipped} case(s): BASE and NEW records are of two schemas "
                   "(memory levels changed meaning)")
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
        word = r.verdict.split(" ")[0].split(":")[0]
        word = "lost (ok -> not ok)" if word == "ok" else word
        counts[word] = counts.get(word, 0) + 1
    detail = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    head = "FAIL" if report.regressions else "PASS"
    return (f"{head}: {len(report.regressions)} regression(s){f' ({detail})' if detail else ''} in "
            f"{report.compared} case(s) compared; {len(report.retired)} retired")


def render(report: Report, base: list[Record], new: list[Record], opts: Options, kind: str,
           fmt: str = "text") -> str:
    md = fmt == "markdown"
    lines = [f"base: {provenance(base)}", f"new:  {provenance(new)}"]
    lines = [f"- {line}" for line in lines] if md else lines
    lines += [""] if md else []
    lines += table(report.rows, md)
    lines += [""] if md else []
    lines += [f"- {t}" if md else t for t in notes(report, opts, kind)]
    lines.append(f"**{verdict(report)}**" if md else verdict(report))
    return "\n".join(lines)


def gate(base_path: Path, new_path: Path, threshold: float = 0.0, k: float = 2.0, min_bytes: int = 64 * MB,
         pattern: str | None = None, cross_machine: bool = False, fmt: str = "text",
         history: Path | None = None, report: Path | None = None) -> tuple[int, str]:
    """(exit code, text): 0 pass, 1 regressions, 2 input that cannot be compared (the text says why).
    ``report``: a markdown file for a pull-request comment, written whatever the outcome."""
    opts = Options(threshold, k, min_bytes, cross_machine)
    try:
        rc, text, markdown = _gate(base_path, new_path, opts, pattern, fmt, history)
    except GateError as e:
        rc, text, markdown = 2, f"oombench gate: {e}", f"**oombench gate could not compare:** {e}"
    if report is not None:
        write_report(Path(report), markdown, base_path, new_path, pattern)
    return rc, text


# Where a reader of the pull request goes next: paths in the repository, which every host of it
# renders, and the command that builds the comparison pages (their address is the deployment's).
READ_MORE = ("Per-family tables: [docs/results/](docs/results/); each seed's case: "
             "[docs/results/seeds.md](docs/results/seeds.md); the comparison pages: "
             "`python3 -m harness pages`, then `.asv/pages/index.html`.")


def write_report(path: Path, markdown: str, base_path, new_path, pattern) -> None:
    """The pull-request report: what was compared, the gate's table and verdict, where to read on;
    written whole or not at all, so a poster never reads half of one."""
    scope = f" (cases matching `{pattern}`)" if pattern else ""
    text = "\n\n".join([f"## oombench gate: `{base_path}` against `{new_path}`{scope}", markdown, READ_MORE]) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _gate(base_path, new_path, opts: Options, pattern, fmt, history) -> tuple[int, str, str]:
    base = only(load_set(base_path, "BASE"), pattern)
    new = only(load_set(new_path, "NEW"), pattern)
    kinds = one_kind(base, "BASE", opts.cross_machine), one_kind(new, "NEW", opts.cross_machine)
    if not opts.cross_machine and kinds[0] != kinds[1]:
        raise GateError(f"BASE is {kinds[0] or 'empty'} and NEW is {kinds[1] or 'empty'}: compare records of one "
                        "machine kind, or pass --cross-machine to match on case and parameters alone")
    floors = noise.history_floors(Path(history) if history else HISTORY)
    report = compare(base, new, floors, opts)
    text = render(report, base, new, opts, kinds[0], fmt)
    markdown = render(report, base, new, opts, kinds[0], "markdown")
    if report.common == 0:
        nothing = ("oombench gate: no case is in both sets, so nothing was compared: check that BASE and "
                   "NEW measured the same cases (e.g. `python3 -m harness run --bench ceilings.Host` for the "
                   "CPU cases), or widen --only")
        return 2, text + "\n" + nothing, markdown + "\n\n" + nothing
    return (1 if report.regressions else 0), text, markdown
