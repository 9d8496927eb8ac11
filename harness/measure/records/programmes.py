"""Recorded programmes: the caching allocator's requests of the what-fits probe's training step, at a
few sizes of a (way, axis), recorded on a GPU (``python3 -m harness programmes``) and filed one
recording a file::

    <root>/programmes/<machine>/<commit[:8]>-<YYYYmmddTHHMMSS>.json.gz

Each file holds the environment it was recorded in (as a record's), the commit, and per probe its
key (the search's parameters and axis, as the fits case logs its probes), its size, its cap, the
probe's own answer (its peaks) and its programme (``harness.workloads.search.simulator.dump``),
and its purpose: sizes the replay estimator (``harness.workloads.search.replayed``) grows its
programmes from, or sizes that test it (set apart, so that no test is also an input). A file is
written whole or not at all.
"""
from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

DIR = "programmes"
SUFFIX = ".json.gz"
GROW, CHECK = "grow", "check"  # a recording's purpose: the replay grows from it, or it tests the replay
# What reading a recording raises where its file is not one (cut short, not gzip, not JSON, or JSON
# of another shape): the errors whoever reads recordings names the file's fix for.
UNREADABLE = (OSError, EOFError, ValueError, KeyError, TypeError)


def write(root: Path, machine: str, commit: str, environment: dict, probes: list[dict], purpose: str = GROW) -> Path:
    """One recording's file under ``root`` (``results``): written beside its place, then moved there."""
    folder = Path(root) / DIR / machine
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{commit[:8]}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    body = {"commit": commit, "created": time.time(), "environment": environment, "probes": probes,
            "purpose": purpose}
    tmp = folder / f".{stem}.{os.getpid()}.tmp"
    with gzip.open(tmp, "wt") as f:
        json.dump(body, f, separators=(",", ":"))
    try:
        return _linked(tmp, folder, stem)
    finally:
        tmp.unlink()


def _linked(tmp: Path, folder: Path, stem: str) -> Path:
    """``tmp`` linked under the first free name of ``stem``: a link never replaces a file, so two
    recordings filed in one second both stay."""
    for i in range(1, 1000):
        path = folder / f"{stem}{'' if i == 1 else f'-{i}'}{SUFFIX}"
        try:
            os.link(tmp, path)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: no free name for {stem}")


def read(root: Path, machine: str = "*") -> list[dict]:
    """Every recording filed under ``root`` (``machine``'s alone where named), the oldest first (a
    later one of a size replaces it)."""
    return sorted((_load(path) for path in (Path(root) / DIR).glob(f"{machine}/*{SUFFIX}")),
                  key=lambda recording: recording["created"])


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)
