"""``python3 -m harness programmes``: the allocator's programmes that the replay estimator grows.

``record`` (on a GPU): the what-fits probe (``harness.cases.fits_probe``) of each way at each size,
several side by side, each recording its allocator's requests; filed as one file under
``results/programmes/<machine>/`` (``harness.measure.records.programmes``) with the environment
and commit, as records are. ``--check`` files them as a test of the replay instead: the replay
never grows from them, and ``score`` sets its grown programme's answer at each of their sizes,
under their cap (``--budget``), beside what the probe measured.

``score`` (on the CPU): every committed what-fits cell (``harness.report.estimates.cells``) whose
GPU recorded its way's programmes, answered by the replay (``harness.workloads.search.replayed``):
the largest size under the cell's cap and the reserved peak at the measured answer, written to
``results/replays.json``, which the error table reads, with each recorded programme replayed as
recorded beside the peaks its own probe measured (the replay's check against the allocator), and
the grown programme at every size and cap the GPU's searches probed, beside what the device held.
Replaying takes a minute on the CPU, so the figures are written once, as the other estimators'
are, not worked out at every ``docs``.
"""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.measure.guards.budget import BUDGETS, CAPS, CARD, size_bytes
from harness.measure.guards.inputs import Refused
from harness.measure.records.store import COMMITTED

FILE = "replays.json"
SHAPE = {"device": "cuda", "workload": "lm", "vocab": 32000, "width": 1024, "depth": 12, "seq_len": 1024}
CAP = "40GB"  # the recording probes' cap: far above what the sizes they grow from reserve, so it never binds
TIMEOUT_S = 300


def add_parser(sub) -> None:
    p = sub.add_parser("programmes", help="record the allocator's programmes on a GPU, or score the replay on the CPU")
    p.add_argument("action", metavar="record|score", help="record on a GPU, or score on the CPU")
    p.add_argument("--over", choices=("batch", "seq_len"), default="batch", help="what the sizes grow (record)")
    p.add_argument("--sizes", default="4,8", help="comma-separated sizes to record each way at (record)")
    p.add_argument("--ways", default="", help="comma-separated ways, as the fits case names them (record)")
    p.add_argument("--side-by-side", type=int, default=6, help="probes at once (record)")
    p.add_argument("--budget", default=CAP, help=f"the probes' cap, one of {', '.join(CAPS)}, or {CARD}: the "
                                                 "whole card, as a what-fits search of it caps (record)")
    p.add_argument("--check", action="store_true",
                   help="file the probes as a test of the replay at their sizes, not as sizes it grows from (record)")
    p.add_argument("--results", default=str(COMMITTED), metavar="DIR", help="the results folder (default results/)")
    p.set_defaults(func=main)


def main(args) -> int:
    try:
        if args.action not in ("record", "score"):
            raise Refused(f"say record (on a GPU) or score (on the CPU), got {args.action!r}")
        if args.action == "score":
            print(score(Path(args.results)))
            return 0
        jobs = _jobs(args.ways, args.over, args.sizes, args.budget)
        path, failed = record(jobs, Path(args.results), args.side_by_side, args.check)
        for error in failed:
            print(f"python3 -m harness programmes: {error}", file=sys.stderr)
        print(path or "nothing recorded")
        return 1 if failed else 0
    except Refused as e:
        print(f"python3 -m harness programmes: {e}", file=sys.stderr)
        return 2


def _jobs(ways: str, over: str, sizes: str, budget: str = CAP) -> list[tuple[str, str, int, str]]:
    """(way, axis, size, budget) to record, the budget by name (the whole card's bytes are the GPU's,
    read where it runs); refused before anything runs where an argument is wrong."""
    from harness.workloads.training.ways import parse
    names = [w for w in ways.split(",") if w]
    if not names:
        raise Refused("--ways names no way: give e.g. --ways fp32,checkpoint")
    for name in names:
        try:
            parse(name)
        except ValueError as e:
            raise Refused(f"--ways: {e}") from None
    try:
        ns = [int(s) for s in sizes.split(",")]
    except ValueError:
        raise Refused(f"--sizes takes whole numbers separated by commas, got {sizes!r}") from None
    if not ns or min(ns) < 1:
        raise Refused(f"--sizes takes whole numbers from 1, got {sizes!r}")
    if budget not in BUDGETS:
        raise Refused(f"--budget takes one of {', '.join(CAPS)} or {CARD}, got {budget!r}")
    return [(name, over, n, budget) for name in names for n in ns]


def record(jobs: list[tuple[str, str, int, str]], results: Path, width: int,
           check: bool = False) -> tuple[Path | None, list[str]]:
    """Each job's probe, ``width`` at once with the GPU locked, filed as one recording (a test of
    the replay where ``check``): (its file, None where no probe ran to its end; what went wrong
    with each probe that did not). A broken probe costs only its own programme."""
    import tempfile

    from harness.drive.asv.suite import head_commit
    from harness.measure.guards import locks
    from harness.measure.guards.workingset import card_total
    from harness.measure.instruments.devices import discover
    from harness.measure.instruments.environment import snapshot
    from harness.measure.instruments.machine import machine_name
    from harness.measure.records import programmes
    devices = discover()
    if not devices.gpus:
        raise Refused("recording programmes needs a CUDA GPU: run it on a GPU box")
    commit = head_commit()  # a checkout without one is refused before any probe runs
    # Each budget's bytes as the what-fits case's ``resolve`` has them: the whole card caps at its total.
    total = card_total(devices)
    jobs = [(way, over, n, size_bytes(budget, total)) for way, over, n, budget in jobs]
    with tempfile.TemporaryDirectory() as tmp, locks.gpus_held(locks.visible_gpu_uuids([0])), \
            ThreadPoolExecutor(max(1, width)) as pool:
        done = list(pool.map(lambda job: _caught(job, Path(tmp)), jobs))
    probes, failed = [d for d in done if isinstance(d, dict)], [d for d in done if isinstance(d, str)]
    if not probes:
        return None, failed
    return programmes.write(results, machine_name(devices), commit, snapshot(devices).to_dict(), probes,
                            programmes.CHECK if check else programmes.GROW), failed


def _caught(job: tuple[str, str, int, int], tmp: Path) -> dict | str:
    """The probe's recording, or what went wrong with it."""
    try:
        return _probe(job, tmp)
    except RuntimeError as e:
        return str(e)


def _probe(job: tuple[str, str, int, int], tmp: Path) -> dict:
    """One recording probe in its own process: its key, size, cap, answer and programme."""
    import gzip

    from harness.cases.fits import probe_config
    from harness.measure.guards import preloaded
    from harness.measure.guards.lifeline import PARENT_ENV
    from harness.workloads.search import fits
    from harness.workloads.training import allocator as settings
    way, over, n, cap = job
    params = dict(SHAPE, technique=way)
    path = tmp / f"{way}-{over}-{n}-{cap}.json.gz"
    argv = fits.probe_argv(probe_config(params), cap, over)(n) + [str(path)]
    env = dict(settings.environ_with("default", fits.probe_env()), **{PARENT_ENV: str(os.getpid())})
    done = preloaded.run(argv, env, TIMEOUT_S)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines or not path.exists():
        raise RuntimeError(f"the probe of {way} at {over}={n} failed (exit {done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")
    with gzip.open(path, "rt") as f:
        recorded = json.load(f)
    return {"key": dict(params, over=over), "n": n, "cap": cap, "result": json.loads(lines[-1]), "programme": recorded}


def _probed(rec, cell, n: int) -> bool | None:
    """Whether the GPU was seen to fit the replay's size ``n`` under the cell's cap and not the size
    after it: by probes recorded to test the replay, or, where ``n`` is not the search's answer, by
    any search of that GPU under the cap (``estimates.Cell.seen``); None where neither probed both."""
    from harness.workloads.search import replayed
    tested = replayed.probed(rec, n, cell.cap, cell.unit)
    at, after = cell.seen.get(n), cell.seen.get(n + cell.unit)
    if tested is not None or n == cell.measured or at is None or after is None:
        return tested
    return at and not after


def _checked(rec, probes: list[dict]) -> dict:
    """A recording's tests: its programmes replayed as recorded, the grown programme at the sizes
    recorded to test it, and at every size its GPU's searches probed (``probes``)."""
    from harness.workloads.search import replayed
    return {"gpu": rec.gpu, "key": rec.key, "commits": sorted(rec.commits), "probes": replayed.checked(rec),
            "foreseen": replayed.foreseen(rec), "searched": replayed.searched(rec, probes)}


def score(results: Path) -> Path:
    """The replay's answer for every committed cell whose GPU recorded its programmes, to FILE."""
    from harness.measure.guards.inputs import write_whole
    from harness.measure.records import programmes
    from harness.report import estimates
    from harness.report.model import load_rows
    from harness.workloads.search import fits, replayed, simulator
    try:
        found = replayed.recorded(programmes.read(results))
    except programmes.UNREADABLE as e:
        raise Refused(f"a recording under {results / programmes.DIR} cannot be read ({type(e).__name__}: {e}): "
                      "remove it, or record it again with `python3 -m harness programmes record`") from None
    rows = load_rows(results)
    out = []
    for cell in estimates.cells(rows, results):
        rec = found.get((cell.gpu, json.dumps(cell.key, sort_keys=True)))
        if rec is None or not rec.programmes:  # only tested, never grown
            continue
        entry = {"gpu": cell.gpu, "key": cell.key, "budget": cell.budget, "measured": cell.measured,
                 "sizes": sorted(rec.programmes), "commits": sorted(rec.commits)}
        try:
            top = fits.LIMITS[cell.over] if cell.host_short is None else cell.host_short - 1
            entry.update(largest=replayed.largest(rec, cell.cap, cell.unit, top, cell.host_limit),
                         peak=replayed.peak(rec, cell.measured, cell.cap))
            entry["probed"] = _probed(rec, cell, entry["largest"])
            if entry["largest"] > cell.measured + cell.unit:
                entry["stops_at_measured"] = replayed.stops_at(rec, cell.measured, cell.cap, cell.unit)
        except simulator.Unlike as e:
            entry["refused"] = str(e)
        out.append(entry)
    probes = estimates.searched(rows, results)
    checks = [_checked(rec, probes.get((rec.gpu, json.dumps(rec.key, sort_keys=True)), [])) for rec in found.values()]
    path = Path(results) / FILE
    write_whole(path, json.dumps({"cells": out, "recordings": checks}, indent=1, sort_keys=True) + "\n")
    return path
