"""Recorded programmes: the caching allocator's requests of the what-fits probe's training step, at a
few sizes of a (way, axis), recorded on a GPU (``python3 -m harness programmes``) and filed one
recording a file::

    <root>/programmes/<machine>/<commit[:8]>-<YYYYmmddTHHMMSS>.json.gz

Each file holds the environment it was recorded in (as a record's), the commit, and per probe its
key (the search's parameters and axis, as the fits case logs its probes), its size, its cap, the
probe's own answer (its peaks) and its programme (``harness.workloads.search.simulator.dump``).
The replay estimator (``harness.workloads.search.replayed``) reads them back. A file is written
whole or not at all.
"""
from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

DIR = "programmes"
SUFFIX = ".json.gz"


def write(root: Path, machine: str, commit: str, environment: dict, probes: list[dict]) -> Path:
    """One recording's file under ``root`` (``results``): written beside its place, then moved there."""
    folder = Path(root) / DIR / machine
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{commit[:8]}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}{SUFFIX}"
    body = {"commit": commit, "created": time.time(), "environment": environment, "probes": probes}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(body, f, separators=(",", ":"))
    os.replace(tmp, path)
    return path


def read(root: Path) -> list[dict]:
    """Every recording filed under ``root``, the oldest first (a later one of a size replaces it)."""
    return sorted((_load(path) for path in (Path(root) / DIR).glob(f"*/*{SUFFIX}")),
                  key=lambda recording: recording["created"])


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)
