"""``python3 -m harness todo``: what a profile still lacks on each machine, and the ``--bench``
expression that measures just that.

A GPU lent in slices of minutes measures a profile over several runs, some cut short. Each of
the profile's benchmarks (asv's names, matched as ``--bench`` matches them) is done on a machine
when the newest record of its case and parameters filed there, from any run, is an answer: of any
outcome (a skip, a does-not-fit or a failed check is an answer too) but a process that died, code
that raised, or a record its case calls outdated (``Case.outdated``). The rest are listed, with
one expression per class of benchmarks that runs them.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from harness import cases
from harness.drive.asv import profiles
from harness.drive.asv.begun import DISK_FULL
from harness.drive.asv.catalog import Bench, benches
from harness.measure.records.store import COMMITTED, LOCAL, latest
from harness.report.model import load_rows


def selected(profile: str, all_benches: list[Bench]) -> list[Bench]:
    """The benches a profile's expressions select, as asv selects them (any of their methods)."""
    return matching(profiles.benchmarks(profile), all_benches)


def matching(exprs: list[str], all_benches: list[Bench]) -> list[Bench]:
    """The benches any of asv's ``--bench`` expressions ``exprs`` selects (none: every one)."""
    return [b for b in all_benches if not exprs or any(re.search(e, n) for e in exprs for n in b.names())]


# A case whose process ended without a measurement (killed or crashed), whose code raised or that
# found the disk full has no answer yet: running it again may give one. One the out-of-memory
# killer ended has: host memory.
NOT_ANSWERS = ("died", "raised", DISK_FULL)


def filed(results: Path) -> dict[str, set[tuple[str, str]]]:
    """machine folder -> the (case, parameters) whose newest record there is an answer today."""
    newest = latest(load_rows(results), record=lambda row: row.record,
                    key=lambda row: (Path(row.source).parts[-2], row.case,
                                     json.dumps(dict(row.record.params), sort_keys=True)))
    out: dict[str, set] = {}
    for (machine, case, params), row in newest.items():
        if row.record.check.get("ended") not in NOT_ANSWERS and not cases.outdated(row.record):
            out.setdefault(machine, set()).add((case, params))
    return out


def filed_anywhere(folders: list[Path]) -> dict[str, set[tuple[str, str]]]:
    """``filed`` over several results folders (those that hold records/): an answer in any is one."""
    out: dict[str, set] = {}
    for folder in folders:
        if (folder / "records").is_dir():
            for machine, held in filed(folder).items():
                out.setdefault(machine, set()).update(held)
    return out


def on_cpu(machine: str) -> bool:
    """Whether a machine is a box without a GPU: ``machine_name`` names those for their CPU."""
    return machine.startswith("cpu-")


def runs_on(bench: Bench, machine: str) -> bool:
    """Whether ``bench`` runs on ``machine``: every bench on a GPU box; on a CPU box only the
    classes that run on the host (``_OnHost``: they track the host's peak), as ``harness run`` does."""
    return not on_cpu(machine) or "track_peak_host_bytes" in bench.methods


def left(wanted: list[Bench], held: set[tuple[str, str]]) -> list[Bench]:
    """Of ``wanted``, the benches no (case, parameters) in ``held`` answers."""
    return [b for b in wanted if (b.case, b.params) not in held]


def missing(profile: str, machine: str, results: Path = COMMITTED,
            all_benches: list[Bench] | None = None) -> list[Bench]:
    return left(selected(profile, all_benches or benches()), filed(results).get(machine, set()))


def _literal(args: str) -> str:
    """A parameter set as a --bench pattern: brackets and dots escaped; quotes matched by ``.``, so
    that the shell quotes the whole expression plainly."""
    return re.sub(r"([().\\[\]*+?|^$])", r"\\\1", args).replace("'", ".")


def expression(todo: list[Bench]) -> str:
    """One ``--bench`` expression selecting ``todo``: per class, its parameter sets."""
    by_class: dict[tuple[str, str], list[str]] = {}
    for b in todo:
        by_class.setdefault((b.family, b.cls), []).append(b.args)
    parts = []
    for (family, cls), args in by_class.items():
        sets = [_literal(a) for a in args if a]
        parts.append(rf"^{family}\.{cls}\.\w+" + (f"({'|'.join(sets)})$" if sets else "$"))
    return "|".join(parts)


def report(profile: str, machines: list[str], held: dict[str, set[tuple[str, str]]]) -> str:
    """Per machine: how much of the profile is filed (``held``, as ``filed`` reads it), and per
    class of benchmarks what is not, with the ``--bench`` expression that runs it."""
    every = selected(profile, benches())
    lines = []
    for machine in machines:
        wanted = [b for b in every if runs_on(b, machine)]
        todo = left(wanted, held.get(machine, set()))
        kind = " (no GPU: the sets that run on the CPU)" if on_cpu(machine) else ""
        lines.append(f"{machine}: {len(wanted) - len(todo)} of {len(wanted)} parameter sets of profile "
                     f"{profile}{kind} filed, {len(todo)} to go")
        by_class: dict[str, list[Bench]] = {}
        for b in todo:
            by_class.setdefault(f"{b.family}.{b.cls}", []).append(b)
        for name, group in by_class.items():
            lines.append(f"  {name}: {len(group)} to go: {', '.join(b.args or '()' for b in group)}")
            lines.append(f"    python3 -m harness run --file --bench {shlex.quote(expression(group))}")
    return "\n".join(lines)


def this_machine() -> str:
    from harness.measure.instruments.environment import snapshot
    from harness.measure.instruments.machine import machine_name
    env = snapshot()
    return machine_name(env.devices, env.cpu)


def read_from(results: str | None) -> list[Path]:
    """The results folders a todo reads: ``results`` alone where given, else the committed results
    and this checkout's local runs."""
    return [Path(results)] if results else [COMMITTED, LOCAL]


def bench_left(profile: str, machine: str, folders: list[Path]) -> str | None:
    """The one ``--bench`` expression that runs what ``profile`` still lacks on ``machine``, as
    ``report`` lists it from ``folders`` (an answer in any is one); None where nothing is left."""
    wanted = [b for b in selected(profile, benches()) if runs_on(b, machine)]
    todo = left(wanted, filed_anywhere(folders).get(machine, set()))
    return expression(todo) if todo else None


def unmatched(bench: str, all_benches: list[Bench] | None = None) -> str | None:
    """Why ``--bench`` would run nothing (the fix named), or None where it selects a benchmark.
    asv matches a benchmark's name alone or followed by its parameter set; so does this."""
    names = {n for b in all_benches or benches() for full in b.names() for n in (full, full.removesuffix(b.args))}
    if any(re.search(bench, n) for n in names):
        return None
    return (f"--bench {bench!r} matches no benchmark: benchmarks are named family.Class.method(params), e.g. "
            f"{min(names)}, the classes those of benchmarks/*.py")


def main(profile: str, machines: list[str] | None, results: str | None) -> int:
    """This box by default, read from the committed results and this checkout's local runs
    together (``results``: that folder alone). A name given must be a machine with records there or
    this box's own (a box that filed nothing yet has everything to go); any other is a typo, refused."""
    folders = read_from(results)
    folder = folders[0]
    held = filed_anywhere(folders)
    known = sorted(held)
    if not machines:
        machines = [this_machine()]
        others = [m for m in known if m not in machines]
        print(f"oombench todo: this box ({machines[0]}), from {' and '.join(str(f) for f in folders)}"
              + (f"; --machine NAME for another: {', '.join(others)}" if others else ""), file=sys.stderr)
    unknown = [m for m in machines or () if m not in known]
    if unknown:
        here = this_machine()
        if unknown != [here]:
            print(f"oombench todo: no records of {', '.join(unknown)} under {folder / 'records'}; machines "
                  f"there: {', '.join(known) or 'none'}, and this box is {here}", file=sys.stderr)
            return 2
    print(report(profile, machines, held))
    return 0
