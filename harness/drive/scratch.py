"""Temporary folders that belong to one process.

Each is named for its owner, ``oombench-<kind>-<pid>-<random>``, so that two commands never share
one, and is removed on the way out, SIGTERM and SIGHUP included (Python's default for them ends
the process without running any ``finally``). A ``kill -9`` runs no clean-up at all: the next
process that makes a folder of the same kind removes those whose owner is gone.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from harness.measure.guards.owned import pid_alive
from harness.measure.guards.signals import handlers

PREFIX = "oombench-"
# Ended by raising, so that the clean-up on the way out runs; SIGINT already raises KeyboardInterrupt.
ENDING = (signal.SIGTERM, signal.SIGHUP)


def owner(path: Path, kind: str) -> int | None:
    """The pid a folder of ``kind`` is named for, or None for a name this module did not make."""
    found = re.fullmatch(rf"{re.escape(PREFIX + kind)}-(\d+)-[^/]+", Path(path).name)
    return int(found.group(1)) if found else None


def sweep(parent: Path, kind: str) -> list[Path]:
    """Removes the folders of ``kind`` under ``parent`` whose owner is gone; returns them."""
    gone = []
    for path in Path(parent).glob(f"{PREFIX}{kind}-*"):
        pid = owner(path, kind)
        if pid is not None and pid != os.getpid() and not pid_alive(pid) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def _raise(signum, frame):
    raise SystemExit(128 + signum)


@contextmanager
def signals_end_cleanly() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` while inside, where nothing else
    handles them (``harness run`` has its own handler, left as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with handlers({sig: _raise for sig in ENDING if signal.getsignal(sig) is signal.SIG_DFL}):
        yield


@contextmanager
def private_dir(kind: str, parent: Path | None = None) -> Iterator[Path]:
    """A fresh folder of this process under ``parent`` (the system's temporary folder by default),
    removed on the way out; dead processes' leftovers of the same kind are removed first."""
    parent = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent, kind)
    with signals_end_cleanly():
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-{os.getpid()}-", dir=parent))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
