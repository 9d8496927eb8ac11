"""The run a plain ``asv run`` makes, as a benchmark process sees it: its commit and its id.

``python3 -m harness run`` hands each benchmark its run (``bench.RUN_ENV``); a plain ``asv run``
hands it nothing of the kind. Its records still name the commit asv measured and a run id of the
same form as a harness run's, so they are filed as ``<commit>-<run id>.jsonl`` and a benchmark's
second figure reads back the first one's record instead of measuring the case again:

- the commit: ``ASV_COMMIT``, which asv sets in the environments it builds; in an existing
  environment (``--python=same``, ``-E existing:...``), where asv sets none, the checkout's HEAD,
  which is what such a run measures;
- the run id: from the ``asv run`` process every benchmark of the run descends from, its start
  time and a hash of its pid and start, so each process of one run finds the same id.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import psutil

# asv's commands that run benchmarks, as they appear after `asv` on its command line.
RUNNING = {"run", "continuous", "find"}


def commit(repo: Path, environ=None) -> str | None:
    environ = os.environ if environ is None else environ
    if environ.get("ASV_COMMIT"):
        return environ["ASV_COMMIT"]
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def is_asv_run(cmdline: list[str]) -> bool:
    """``asv run ...``, ``python -m asv run ...``, ``python .../bin/asv run ...`` (options before
    the command allowed): the first argument named asv, then a command that runs benchmarks."""
    for i, arg in enumerate(cmdline):
        if Path(arg).name == "asv":
            return any(a in RUNNING for a in cmdline[i + 1:])  # past options and their values
    return False


def asv_process(proc: psutil.Process | None = None) -> psutil.Process | None:
    """The nearest ancestor of ``proc`` (this process) that is an ``asv run``."""
    try:
        for parent in (proc or psutil.Process()).parents():
            if is_asv_run(parent.cmdline()):
                return parent
    except psutil.Error:
        pass
    return None


def run_id(proc: psutil.Process | None = None) -> str | None:
    """The id of the ``asv run`` this process belongs to, or None outside one."""
    asv = asv_process(proc)
    if asv is None:
        return None
    try:
        started = asv.create_time()
    except psutil.Error:
        return None
    tag = hashlib.sha256(f"{asv.pid}-{started}".encode()).hexdigest()[:6]
    return f"{time.strftime('%Y%m%dT%H%M%S', time.localtime(started))}-{tag}"
