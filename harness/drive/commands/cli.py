"""``python3 -m harness COMMAND``: the suite's entry points.

run       set up if needed, run the suite through asv on this box, publish the site
test      set up if needed, run the tests (on the CPU)
devices   what GPUs this box has
machine   how asv will name and describe this box
case      measure one case in this process and print its record (for debugging a case)
summary   print the records filed under results/records
table     a markdown table of filed records (one parameter down, one across)
todo      what a profile still lacks on each machine, and the --bench expression that runs it
gate      compare two sets of records; exit 1 when a case got slower or bigger
compare   measure two commits here, in one session, and gate NEW against BASE
pages     build asv's site and the project's comparison pages from results/
docs      regenerate docs/results/<family>.md, docs/headline.* and the README's headline from results/
wheelhouse  download wheels for an offline box (named Python and platform)
stack     an environment that puts other library versions (wheels) in front of this one's
mutate    how many one-line mutants of the modules behind published figures their tests catch
try       what fits each card at what speed, for a model you bring (or a built-in architecture)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from harness.drive.asv import profiles
from harness.drive.commands import bootstrap, programmes, tryout


def _refused(command: str, check) -> bool:
    """Runs ``check``, a command's checks of its arguments: each raises ``inputs.Refused`` or
    returns a message where a check fails. Where one does, prints its one line and says so: the
    command exits 2 before any work."""
    from harness.measure.guards.inputs import Refused
    try:
        problem = check()
    except Refused as e:
        problem = str(e)
    if isinstance(problem, str) and problem:
        print(f"oombench {command}: {problem}", file=sys.stderr)
        return True
    return False


def _environment_refusal() -> None:
    """The settings the harness reads from the environment, bounded (``Refused`` where not)."""
    from harness.measure.guards.inputs import host_memory_bytes
    host_memory_bytes()


def _run_refusal(args) -> str | None:
    """What is wrong with ``run``'s arguments, in one line that names the fix; None if nothing.
    Standard library only: checked before set-up, machine.json or asv are touched."""
    import math
    import os
    import re

    from harness.measure.guards.inputs import writable_folder
    if args.deadline is not None and not (math.isfinite(args.deadline) and args.deadline > 0):
        return f"--deadline takes a positive number of seconds (e.g. --deadline 3600), got {args.deadline!r}"
    if args.bench is not None and not args.bench.strip():
        return "--bench takes a regular expression over benchmark names (e.g. --bench 'tricks\\.'), got ''"
    if args.bench is not None:
        try:
            re.compile(args.bench)
        except re.error as e:
            return (f"--bench takes a regular expression over benchmark names (e.g. --bench 'tricks\\.'): "
                    f"{args.bench!r} is not one ({e})")
    from harness.measure.guards.inputs import NOT_A_RUN_ID
    if args.resume is not None and (not args.resume.strip() or NOT_A_RUN_ID.search(args.resume)):
        return (f"--resume takes one run id as `harness run` printed it (e.g. 20261123T182937-9004fb), "
                f"got {args.resume!r}")
    if args.results is not None and args.file:
        return "--file and --results both say where results go: give one of them"
    if args.todo and (args.bench is not None or args.resume is not None):
        return ("--todo chooses the benchmarks itself (what `harness todo` lists for this box): give it without "
                f"{'--bench' if args.bench is not None else '--resume'}")
    for py in args.python or []:
        if not os.access(py, os.X_OK) or os.path.isdir(py):
            return (f"--python {py} is not an executable python: pass the interpreter of an environment that has "
                    "the project's requirements, e.g. --python /path/to/venv/bin/python")
    if args.results is not None:
        writable_folder(args.results, "--results")  # as given: Path('') would read as the current folder
    else:
        writable_folder(_results(args), "the results folder")
    writable_folder(bootstrap.REPO / ".asv", "the repository's .asv folder (asv's configuration and site)")
    # asv reads the box's description from ~/.asv-machine.json, which each run writes first.
    writable_folder(os.path.expanduser("~"), "HOME (asv's machine file, ~/.asv-machine.json, goes there; "
                    "e.g. HOME=$(mktemp -d))")
    _environment_refusal()
    return None


def _results(args) -> Path:
    from harness.measure.records.store import COMMITTED, LOCAL
    return Path(args.results) if args.results is not None else COMMITTED if args.file else LOCAL


def _run(args) -> int:
    if _refused("run", lambda: _run_refusal(args) or _export_nodes(args)):
        return 2
    bootstrap.ensure("run")
    from harness.drive.asv import suite
    from harness.drive.commands import todo
    from harness.measure.guards.inputs import disk_full, disk_is_full
    if args.bench is not None and _refused("run", lambda: todo.unmatched(args.bench)):
        return 2
    if args.todo:
        args.bench = _todo_bench(args)
        if args.bench is None:
            return 0
    try:
        return suite.run(bench=args.bench, quick=args.quick, allow_oversubscription=args.allow_oversubscription,
                         publish=not args.no_publish, pythons=args.python, resume=args.resume,
                         deadline_s=args.deadline, results=_results(args), profile=args.profile,
                         wait=not args.no_wait)
    except suite.RunRefused as e:
        print(f"oombench run: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if not disk_is_full(e):
            raise
        print(f"oombench run: {disk_full(e.filename or _results(args))}; what was measured is kept: "
              "`python3 -m harness run --resume RUN_ID` (the id it printed) measures the rest", file=sys.stderr)
        return 1


def _todo_bench(args) -> str | None:
    """``run --todo``: the expression that runs what the profile still lacks on this box, read as
    ``harness todo`` reads it (``--results DIR``: that folder alone; else the committed results
    and this checkout's local runs); None, said, where nothing is left."""
    from harness.drive.asv import profiles
    from harness.drive.commands import todo
    profile = args.profile or profiles.DEFAULT
    machine = todo.this_machine()
    bench = todo.bench_left(profile, machine, todo.read_from(args.results))
    if bench is None:
        print(f"oombench run: nothing of profile {profile} is left to do on {machine} "
              f"(`python3 -m harness todo --profile {profile}` lists it)", file=sys.stderr)
    return bench


def _test(args) -> int:
    bootstrap.ensure("test")
    import os

    import pytest

    from harness.drive import bytecode
    os.chdir(bootstrap.REPO)
    # pytest's workers (xdist) are fresh processes that import torch and rewrite every test module:
    # where the environment turns bytecode off, they keep it in the harness's cache, as its cases do.
    kept = bytecode.for_children(os.environ)
    for name in set(os.environ) - set(kept):
        del os.environ[name]
    os.environ.update(kept)
    return pytest.main(["-q", *args.pytest_args])


def _mutate(args) -> int:
    from harness.drive.commands import mutate
    try:
        mutate.chosen(args.modules)  # a misspelt name is refused before any set-up
        bootstrap.ensure("mutate")
        return mutate.main(args.modules)
    except mutate.Refused as e:
        print(f"python3 -m harness mutate: {e}", file=sys.stderr)
        return 2


def _compare(args) -> int:
    bootstrap.ensure("compare")
    from harness.drive.commands import compare
    try:
        return compare.main(args.base, args.new, profile=args.profile, bench=args.bench, rounds=args.rounds,
                            results=args.results, report=args.report, threshold=args.threshold,
                            resume=args.resume, deadline_s=args.deadline, warmup=not args.no_warmup)
    except compare.CompareRefused as e:
        print(f"oombench compare: {e}", file=sys.stderr)
        return 2


def _devices(args) -> int:
    bootstrap.ensure("devices")
    from harness.measure.instruments.devices import describe, discover
    d = discover()
    print(json.dumps(d.to_dict(), indent=2) if args.json else describe(d))
    return 0


def _machine(args) -> int:
    bootstrap.ensure("machine")
    from harness.measure.instruments.environment import snapshot
    from harness.measure.instruments.machine import machine_info
    info = machine_info(snapshot())
    # --name: the one word `asv machine --machine` takes, so that asv files under harness run's name
    print(info["machine"] if args.name else json.dumps(info, indent=2))
    return 0


def parse_params(pairs: list[str]) -> dict:
    """``name=value`` strings as {name: text}; the case's config converts and checks each value.
    ValueError naming the fix where a pair is not one."""
    params = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"parameters are name=value, got {pair!r}")
        if name in params:
            raise ValueError(f"parameter {name} given twice ({name}={params[name]} and {pair}): give it once")
        params[name] = text
    return params


def _case(args) -> int:
    if _refused("case", lambda: _environment_refusal() or _export_nodes(args)):
        return 2
    bootstrap.ensure("case")
    from harness import cases
    from harness.drive.runner import execute
    from harness.report.summary import table
    try:
        case = cases.get(args.name)
        config = case.config(parse_params(args.params))
    except ValueError as e:
        print(f"oombench case: {e}", file=sys.stderr)
        return 2
    try:
        rec = execute(case, config)
    except ValueError as e:  # raised while measuring: the case's failure, not the command line's
        raise SystemExit(f"oombench case: {e}") from e
    print(json.dumps(rec.to_dict(), indent=2) if args.json else table([rec]))
    return 0 if rec.outcome != "failed" else 1


# ---- several nodes: torchrun's arguments, handed to the cases ---------------------------------------

def _add_launcher(p) -> None:
    """torchrun's multi-node arguments, for the parallel cases' ranks (default: SLURM's ``srun``
    environment where it spans several nodes, else this box alone)."""
    from harness.workloads.parallelism.nodes import BACKENDS
    g = p.add_argument_group("several nodes (each node runs this command; node 0 files the records)")
    g.add_argument("--nnodes", type=int, metavar="N", help="nodes in the rendezvous")
    g.add_argument("--node-rank", type=int, metavar="R", help="this node's number, 0..N-1 (static rendezvous)")
    g.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="the rendezvous, the same on every node")
    g.add_argument("--rdzv-id", metavar="ID", help="the job's name, the same on every node")
    g.add_argument("--rdzv-backend", choices=BACKENDS, default="c10d", help="as torchrun's (default: c10d)")


def _export_nodes(args) -> str | None:
    """The nodes the arguments (or SLURM) describe, put in the environment that asv hands each
    case's fresh process; a one-line refusal where they do not add up."""
    import os

    from harness.workloads.parallelism.nodes import Nodes, unresolved
    try:
        nodes = Nodes.of_launcher(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id, args.rdzv_backend)
    except ValueError as e:
        return str(e)
    problem = unresolved(nodes.endpoint) if nodes is not None else None  # once, bounded: not torch's 100 s of retries
    if problem:
        return problem
    if nodes is not None:
        os.environ.update(nodes.to_env())
    return None


def _summary(args) -> int:
    from harness.measure.guards.inputs import readable
    path = args.path if args.path is not None else Path(_reading("summary", None)) / "records"
    if _refused("summary", lambda: _hex_prefix(args.commit)) or _refused(
            "summary", lambda: readable(path, "PATH", "any", "a record file (.jsonl) or a folder of them")):
        return 2
    bootstrap.ensure("summary")
    from harness.measure.records.store import load_any
    from harness.report.summary import chosen, table
    recs = load_any(Path(path)).warn().records
    try:
        recs = chosen(recs, args.machine, args.commit)
    except ValueError as e:
        print(f"oombench summary: {e}", file=sys.stderr)
        return 2
    print(table(recs, provenance=True) if recs else "no records")
    return 0


def _hex_prefix(commit: str | None) -> str | None:
    if commit is not None and not re.fullmatch(r"[0-9a-fA-F]{1,40}", commit):
        return f"--commit {commit!r} is not a commit hash: pass its first hex digits, as git log shows them"
    return None


def _reading(command: str, results: str | None) -> str:
    """The results folder a reading command reads: ``--results``; else this checkout's local runs
    (.asv/results, where `harness run` files them) where they hold records, newest first as every
    table reads; else the committed results/. A default is said in one line, with how to read the other."""
    if results is not None:
        return results
    from harness.measure.records.store import COMMITTED, LOCAL
    if any((LOCAL / "records").glob("*/*.jsonl")):
        print(f"oombench {command}: reading this checkout's local runs in {LOCAL} (--results {COMMITTED} for the "
              "committed ones)", file=sys.stderr)
        return str(LOCAL)
    print(f"oombench {command}: reading the committed {COMMITTED}: no local run in {LOCAL} yet (`harness run` "
          "files one there, read first from then on)", file=sys.stderr)
    return str(COMMITTED)


def _read_results(command: str, results: str | None) -> bool:
    """``--results``, a folder of records to read, refused (True) where it is not one."""
    from harness.measure.guards.inputs import results_folder
    from harness.measure.records.store import COMMITTED
    return _refused(command, lambda: results_folder(COMMITTED if results is None else results))


def _table(args) -> int:
    results = _reading("table", args.results)
    if _read_results("table", results):
        return 2
    bootstrap.ensure("table")
    from harness.report.tables import main
    return main(results, args.case, args.down, args.across, args.show, args.where,
                args.versus, args.rank, args.card)


def _todo(args) -> int:
    if _read_results("todo", args.results):
        return 2
    bootstrap.ensure("todo")
    from harness.drive.commands import todo
    return todo.main(args.profile, args.machine, args.results)


def _gate_refusal(args) -> None:
    """--history and --report; BASE and NEW are the gate's to judge (its report says why it could not compare)."""
    from harness.measure.guards.inputs import output_file, readable
    if args.history is not None:
        readable(args.history, "--history", "any")
    if args.report is not None:
        output_file(args.report, "--report")


def _history_refusal(history: str | None) -> str | None:
    """A --history that holds no record would leave every floor a default, said only as "too thin":
    refused by name instead."""
    if history is None:
        return None
    from harness.measure.records.store import load_any
    if not load_any(Path(history)).records:
        return (f"--history {history} holds no records (harness's .jsonl files): pass a folder of records to learn "
                "the noise floors from, e.g. --history results/records, or leave --history out for results/records")
    return None


def _gate(args) -> int:
    if _refused("gate", lambda: _gate_refusal(args)):
        return 2
    bootstrap.ensure("gate")
    if _refused("gate", lambda: _history_refusal(args.history)):
        return 2
    from harness.report import gate as gating
    from harness.units import MB
    history = args.base if args.rounds and args.history is None else args.history  # a compare's floors: BASE's rounds
    rc, text = gating.gate(args.base, args.new, threshold=args.threshold, k=args.standard_errors,
                           min_bytes=int(args.min_mb * MB), pattern=args.only, cross_machine=args.cross_machine,
                           fmt=args.format, history=history, report=args.report, allow=args.allow,
                           all_rounds=args.rounds, prior=gating.COMPARES if args.rounds else None)
    # A refusal (the gate's last line on exit 2, e.g. a report it could not write) goes to stderr,
    # as every command's refusal does; the comparison before it, if any, stays on stdout.
    body, _, last = text.rpartition("\n")
    if rc == 2 and last.startswith("oombench gate:"):
        if body:
            print(body)
        print(last, file=sys.stderr)
    else:
        print(text)
    return rc


def _pages(args) -> int:
    bootstrap.ensure("pages")
    from harness.drive.asv import asv_site
    from harness.report.pages import build
    # Bad arguments exit 2 before anything is written (asv's site included).
    results = _reading("pages", args.results)
    problem = build.check_args(results, args.out)
    if problem:
        print(f"oombench pages: {problem}", file=sys.stderr)
        return 2
    # asv's site (.asv/html) is the repository's: made from the folder the comparison pages read where
    # that is the repository's own (its local runs, as `harness run` publishes them, or results/), so
    # pages after run keeps what run measured; another folder leaves it as it is.
    from harness.measure.records.store import COMMITTED, LOCAL
    own = Path(results).resolve() in (COMMITTED.resolve(), LOCAL.resolve())
    skip_asv = args.no_asv or not own
    if not skip_asv and _refused("pages", lambda: _asv_site_refusal()):
        return 2
    if not own and not args.no_asv:
        print("oombench pages: asv's site is left as it is: it is the repository's and --results names another "
              "folder (pass --no-asv to say so)", file=sys.stderr)
    rc = 0 if skip_asv else asv_site.publish(bootstrap.REPO, bootstrap.REPO / ".asv" / "html", Path(results))
    if rc != 0:
        print("oombench pages: asv publish failed (above); the comparison pages are built anyway. "
              "Fix: check results/ holds asv result files, or pass --no-asv", file=sys.stderr)
    elif not skip_asv:
        print(f"oombench: asv's site in {bootstrap.REPO / '.asv' / 'html'}")
    return build.main(results=results, out=args.out) or rc


def _asv_site_refusal() -> None:
    """asv's site goes to .asv/html: the folder must take it (a read-only .asv is refused by name)."""
    from harness.measure.guards.inputs import writable_folder
    writable_folder(bootstrap.REPO / ".asv", "the repository's .asv folder (asv's site goes to .asv/html; "
                    "--no-asv leaves it out)")


def _docs(args) -> int:
    bootstrap.ensure("pages")
    from harness.report import docs
    return docs.main(repo=bootstrap.REPO, out=args.out)


def _package_refusal(packages: list[str]) -> str | None:
    """pip reads a requirement that starts with '-' as one of its options (--index-url, -r FILE):
    each --package must be a requirement."""
    for req in packages:
        if not req.strip() or req.lstrip().startswith("-"):
            return (f"--package takes a requirement such as torch==2.11.0, got {req!r}: pip's own options are not "
                    "passed through")
    return None


def _wheelhouse(args) -> int:
    from harness.measure.guards.inputs import writable_folder
    if _refused("wheelhouse", lambda: _package_refusal(args.package) or writable_folder(args.dest, "DEST")):
        return 2
    bootstrap.ensure("wheelhouse")
    from harness.drive.commands.wheelhouse import build
    return build(Path(args.dest), args.python, args.platform or ["manylinux_2_28_x86_64"], args.package)


def _stack(args) -> int:
    from harness.measure.guards.inputs import writable_folder
    if _refused("stack", lambda: writable_folder(args.dest, "DEST")):
        return 2
    bootstrap.ensure("stack")
    from harness.drive.commands import stack
    return stack.main(args.dest, args.wheel)


class UsageError(Exception):
    """A command line argparse refused; main prints it on one line and returns 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage and exits from inside parse_args; one line that names the fix
    # reads better in a terminal and lets main() return 2 like every other refusal.
    def error(self, message):
        hint = " (a value that starts with '-' goes as --NAME=VALUE)" if "expected one argument" in message else ""
        raise UsageError(f"{self.prog}: {message}{hint}; see {self.prog} --help")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python3 -m harness", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_inspect, _add_table, _add_todo, _add_gate, _add_compare, _add_publish,
                _add_environments, _add_try):
        add(sub)
    return p


def _add_run(sub) -> None:
    r = sub.add_parser("run", help="run the suite through asv and publish the site")
    r.add_argument("--bench", "-b", help="regular expression: only the benchmarks it matches")
    r.add_argument("--quick", action="store_true", help="one sample per benchmark (asv --quick)")
    r.add_argument("--allow-oversubscription", action="store_true",
                   help="let managed memory go past the free device memory; never on a shared GPU")
    r.add_argument("--no-publish", action="store_true", help="skip asv publish")
    r.add_argument("--python", action="append", metavar="PATH",
                   help="measure in this interpreter's environment (repeat for several: asv -E existing:PATH each)")
    r.add_argument("--resume", metavar="RUN_ID",
                   help="go on with a run that was cut short, at its commit, over the cases it chose (its --bench or "
                        "--profile, --quick, --python): what it measured is read back, not measured again")
    r.add_argument("--deadline", type=float, metavar="SECONDS",
                   help="start no case after this many seconds; asv still writes what was measured (then --resume)")
    r.add_argument("--profile", choices=tuple(profiles.PROFILES),
                   help="how much to run: quick (one value per family), standard (what the pages compare; "
                        "the default), budget (past emulated 16 to 80 GB cards), full (everything); "
                        "--bench overrides it; a --resume goes on with its run's own")
    r.add_argument("--todo", action="store_true",
                   help="only what the profile still lacks on this box, as `harness todo` lists it: a GPU lent in "
                        "slices measures a profile over several runs")
    r.add_argument("--file", action="store_true",
                   help="file the results into results/ (for committing); by default they go to .asv/results/")
    r.add_argument("--results", metavar="DIR", help="file the results into DIR (asv's files and records/)")
    r.add_argument("--no-wait", action="store_true",
                   help="where another run holds the results folder, exit (status 2) naming it instead of waiting")
    _add_launcher(r)
    r.set_defaults(func=_run)


def _add_inspect(sub) -> None:
    """The commands that look at this box or at one case: test, devices, machine, case, summary."""
    # Its arguments are pytest's, options included: parse() hands it whatever argparse does not know.
    t = sub.add_parser("test", help="run the tests; every argument goes to pytest (e.g. -k gate -x)",
                       usage="python3 -m harness test [PYTEST ARGUMENTS ...]",
                       description="Runs the tests (on the CPU). Every argument goes to pytest, options included: "
                                   "python3 -m harness test -k gate -x")
    t.set_defaults(func=_test, pytest_args=[])
    d = sub.add_parser("devices", help="what GPUs this box has")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_devices)
    m = sub.add_parser("machine", help="how asv will name and describe this box")
    m.add_argument("--name", action="store_true", help="print the name alone (for `asv machine --machine`)")
    m.set_defaults(func=_machine)
    c = sub.add_parser("case", help="measure one case here and print its record")
    c.add_argument("name")
    c.add_argument("params", nargs="*", help="name=value")
    c.add_argument("--json", action="store_true")
    _add_launcher(c)
    c.set_defaults(func=_case)
    s = sub.add_parser("summary", help="print filed records, with the machine and commit of each")
    s.add_argument("path", nargs="?")
    s.add_argument("--machine", metavar="NAME", help="only this machine's records (its results/ folder's name)")
    s.add_argument("--commit", metavar="HASH", help="only records of commits starting with HASH")
    s.set_defaults(func=_summary)


def _add_table(sub) -> None:
    tb = sub.add_parser("table", help="a markdown table of filed records, for the README and notes")
    tb.add_argument("case")
    tb.add_argument("--down", required=True, help="parameters down the side, comma-separated (or machine)")
    tb.add_argument("--across", default="machine", help="the parameter across the top (default: machine)")
    tb.add_argument("--show", default="step,rate,peak",
                    help="figures per cell, comma-separated: step, rate, eff, peak, scaling (with --versus: the "
                         "one-GPU run), loss, compile (what the first step spent compiling, apart from the step), "
                         "check:KEY")
    tb.add_argument("--where", action="append", default=[], metavar="NAME=VALUE", help="only these records")
    tb.add_argument("--versus", metavar="NAME=VALUE",
                    help="step, rate and peak also as a multiple of the record holding these values, "
                         "comma-separated (technique=fp32; technique=fp32,budget=card), or a value other "
                         "than --where's (--where budget=16GB --versus budget=card)")
    tb.add_argument("--rank", action="store_true",
                    help="rows by the step of their cell in the first column, fastest first (needs step in "
                         "--show); then the rows that did not fit or failed there, then those not run or "
                         "skipped there, each in the usual order")
    tb.add_argument("--card", metavar="NAME", help="a named card (p100-16gb, ...): leave out the ways its compute "
                    "capability cannot run, named in a footnote; with --rank, the ways whose device peak is past "
                    "its total rank after the others, marked")
    tb.add_argument("--results", default=None,
                    help="results folder (default: the local runs in .asv/results where there are any, else results/)")
    tb.set_defaults(func=_table)


def _add_todo(sub) -> None:
    td = sub.add_parser("todo", help="what a profile still lacks on each machine, and the --bench that runs it")
    td.add_argument("--profile", choices=tuple(profiles.PROFILES), default=profiles.DEFAULT,
                    help=f"the profile to check (default: {profiles.DEFAULT}, as for run)")
    td.add_argument("--machine", action="append", metavar="NAME",
                    help="a machine folder of results/records (repeat for several; default: this box)")
    td.add_argument("--results", default=None,
                    help="results folder (default: results/ and this checkout's local runs in .asv/results together)")
    td.set_defaults(func=_todo)


def _finite_non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


class _Renamed(argparse.Action):
    """An option's old spelling: taken as the new one (``dest``), with a line on stderr naming it."""

    def __call__(self, parser, namespace, values, option_string=None):
        new = "--" + self.dest.replace("_", "-")
        print(f"oombench: {option_string} is now {new}; {option_string} still works, under that name", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _add_gate(sub) -> None:
    g = sub.add_parser("gate", help="exit 1 when a case in NEW is slower or bigger than in BASE")
    g.add_argument("base", help="record file (.jsonl) or folder of them")
    g.add_argument("new", help="record file (.jsonl) or folder of them")
    g.add_argument("--threshold", type=_finite_non_negative, default=0.0,
                   help="the least relative rise that can fail, for times and peaks (1.0 = twice as slow); "
                        "raises the floors learned from history, never lowers them")
    g.add_argument("--standard-errors", type=_finite_non_negative, default=2.0, metavar="K",
                   help="for records without raw step times: medians fewer than K standard errors of their "
                        "difference apart (each error read from an IQR and a number of steps) are noise")
    g.add_argument("--iqr-factor", type=_finite_non_negative, dest="standard_errors", action=_Renamed,
                   help=argparse.SUPPRESS)  # its first name: it never was a factor of the IQR
    g.add_argument("--min-mb", type=_finite_non_negative, default=64,
                   help="peak-memory growth below this many MB (10^6 bytes) is never a regression")
    g.add_argument("--only", metavar="REGEX", help='gate only cases whose "case {params}" matches (both sides)')
    g.add_argument("--cross-machine", action="store_true",
                   help="compare sets of different machine kinds, matching on case and parameters alone")
    g.add_argument("--format", choices=("text", "markdown"), default="text",
                   help="markdown: the same table for a pull-request comment")
    g.add_argument("--report", metavar="FILE", default=None,
                   help="also write the comparison as a markdown report to FILE, for a pull-request comment "
                        "(written whatever the verdict)")
    g.add_argument("--allow", metavar="WHAT", action="append", default=[],
                   help="let through what the gate otherwise fails, and list it in the report: schema (records "
                        "of two schemas: times compared, peaks not), missing-level (a peak level NEW lacks)")
    g.add_argument("--history", metavar="DIR", default=None,
                   help="records the noise floors are learned from (default: results/records; with --rounds, BASE)")
    g.add_argument("--rounds", action="store_true",
                   help="BASE and NEW are the base/ and new/ of a `harness compare` folder: judge every round "
                        "as the compare does (floors from BASE's rounds, a host-bound step's at least its scatter "
                        "in the compares under results/compare), e.g. to judge a compare again with this gate")
    g.set_defaults(func=_gate)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"takes a positive number of seconds (e.g. --deadline 540), got {text!r}")
    return value


def _add_compare(sub) -> None:
    c = sub.add_parser("compare", help="measure BASE and NEW here, alternating per case, and gate NEW against BASE",
                       description="Exit status: 0 no regression, 1 regressions, 2 refused or nothing to compare, "
                                   "75 stopped at --deadline, 128+N stopped by signal N; a compare stopped or killed "
                                   "keeps what it measured, and --resume FOLDER measures the rest.")
    c.add_argument("base", nargs="?", help="the commit to compare against (a branch, tag or hash)")
    c.add_argument("new", nargs="?", help="the commit under test (default: HEAD)")
    c.add_argument("--profile", choices=tuple(profiles.PROFILES),
                   help="which cases, as for run (default: standard); --bench overrides it")
    c.add_argument("--bench", "-b", help="regular expression: only the benchmarks it matches")
    c.add_argument("--rounds", type=_positive_int,
                   help="runs of each case a side, 1 to 50, alternating A B B A A B ... (default: 3)")
    c.add_argument("--results", metavar="DIR",
                   help="a new folder for the records of both sides (default: .asv/compare/<run id>)")
    c.add_argument("--report", metavar="FILE",
                   help="also write the markdown report to FILE (it is always report.md in the results folder)")
    c.add_argument("--threshold", type=_finite_non_negative,
                   help="the least relative rise that can fail, 0 to 1, as for gate (for a box shared with other "
                        "work)")
    c.add_argument("--deadline", type=_positive_seconds, metavar="SECONDS",
                   help="start no case after this many seconds (one begun runs all its rounds); what was measured "
                        "is kept, the cases measured so far are gated into interim-report.md in the results folder, "
                        "and the compare exits 75 naming the --resume command that measures the rest")
    c.add_argument("--resume", metavar="FOLDER",
                   help="go on with the compare whose records are in FOLDER: its commits, rounds and cases, the runs "
                        "not measured yet, then the gate over all (same checkout commit, clean tree, one at a time)")
    c.add_argument("--no-warmup", action="store_true",
                   help="skip the warm-up: one run of the first case from BASE, not kept, before the first measured "
                        "one of each sitting, whose process would run slow (driver, clocks, page cache) and widen "
                        "BASE's noise floor")
    c.set_defaults(func=_compare)


def _add_publish(sub) -> None:
    pg = sub.add_parser("pages", help="build asv's site and the comparison pages from results/")
    pg.add_argument("--results", default=None,
                    help="results folder (default: the local runs in .asv/results where there are any, else results/)")
    pg.add_argument("--out", default=None, help="where the comparison pages go (default: .asv/pages)")
    pg.add_argument("--no-asv", action="store_true", help="skip asv publish")
    pg.set_defaults(func=_pages)
    dc = sub.add_parser("docs", help="regenerate docs/ and the README's headline from the committed records")
    dc.add_argument("--out", default=None,
                    help="write docs/ and README.md under this folder instead (default: the repository)")
    dc.set_defaults(func=_docs)


def _add_environments(sub) -> None:
    w = sub.add_parser("wheelhouse", help="download wheels for a box without internet")
    w.add_argument("dest", help="folder for the wheels")
    w.add_argument("--python", required=True, help="the offline box's Python, e.g. 3.12")
    w.add_argument("--platform", action="append", help="wheel platform tag (default manylinux_2_28_x86_64; repeatable)")
    w.add_argument("--package", action="append", default=[], metavar="REQ",
                   help="more requirements, e.g. --package torch==2.11.0 --package numpy==1.26.4")
    w.set_defaults(func=_wheelhouse)
    st = sub.add_parser("stack", help="an environment that puts other library versions in front of this one's")
    st.add_argument("dest", help="new folder for the environment")
    st.add_argument("wheel", nargs="+",
                    help="wheel files, e.g. cupy_cuda13x-13.6.0-cp312-cp312-manylinux2014_x86_64.whl")
    st.set_defaults(func=_stack)
    m = sub.add_parser("mutate", help="mutation score of the modules behind published figures and verdicts")
    m.add_argument("modules", nargs="*", metavar="MODULE", help="e.g. harness/report/gate.py (default: all)")
    m.set_defaults(func=_mutate)


def _try(args) -> int:
    bootstrap.ensure("try")
    return tryout.main(args)


def _add_try(sub) -> None:
    tryout.add_parser(sub)
    sub.choices["try"].set_defaults(func=_try)
    programmes.add_parser(sub)
    sub.choices["programmes"].set_defaults(func=_programmes)


def _programmes(args) -> int:
    bootstrap.ensure("programmes")
    return programmes.main(args)


def parse(argv=None) -> argparse.Namespace:
    """The command line as a namespace: arguments no parser knows go to ``test``'s pytest (a
    leading ``--`` dropped), and are refused for any other command."""
    p = parser()
    args, rest = p.parse_known_args(argv)
    if not hasattr(args, "pytest_args") and rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if hasattr(args, "pytest_args"):
        args.pytest_args = rest[1:] if rest[:1] == ["--"] else rest
    return args


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
