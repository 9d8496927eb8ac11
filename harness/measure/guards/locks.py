"""Locks: one per results folder, one per GPU.

Two runs filing into one results folder at once lose records from asv's files and measure cases
twice; two runs on one GPU measure each other. So ``harness run`` holds its results folder's
lock (``<results>/.lock``) for its whole life, and the launcher and the what-fits search hold
the lock of each GPU they use (``gpu-<uuid>.lock`` in a per-user runtime folder: a GPU is the
host's, whichever checkout runs on it). A second taker waits, saying who holds the lock (pid
and command, written beside it in ``<lock>.holder``), or with ``wait=False`` gets ``Busy`` with
that message. The locks are ``filelock``'s (flock): the kernel releases them when their holder
dies, however it dies.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from harness.measure.guards.inputs import write_whole

LOCK_DIR_ENV = "OOMBENCH_LOCK_DIR"


class Busy(RuntimeError):
    """The lock is held and the caller chose not to wait; the message names the holder."""


def lock_dir(environ=None) -> Path:
    """Per user: ``$OOMBENCH_LOCK_DIR``, else ``$XDG_RUNTIME_DIR/oombench``, else a folder of
    this user's under the temporary folder."""
    environ = os.environ if environ is None else environ
    path = environ.get(LOCK_DIR_ENV) or (
        os.path.join(environ["XDG_RUNTIME_DIR"], "oombench") if environ.get("XDG_RUNTIME_DIR")
        else os.path.join(tempfile.gettempdir(), f"oombench-{os.getuid()}"))
    Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)
    return Path(path)


def results_lock(results) -> Path:
    Path(results).mkdir(parents=True, exist_ok=True)
    return Path(results) / ".lock"


def gpu_lock(uuid: str, environ=None) -> Path:
    return lock_dir(environ) / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', uuid)}.lock"


def holder_file(lock: Path) -> Path:
    return Path(str(lock) + ".holder")


def holder(lock: Path) -> dict:
    """What the holder wrote of itself ({} where nothing readable is there)."""
    try:
        found = json.loads(holder_file(lock).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def describe_holder(lock: Path) -> str:
    h = holder(lock)
    if not h.get("pid"):
        return "another process (it wrote no pid)"
    return f"pid {h['pid']} ({' '.join(map(str, h.get('argv', [])))[:300] or 'command unknown'})"


def _write_holder(lock: Path, what: str) -> None:
    mine = {"pid": os.getpid(), "argv": sys.argv, "what": what, "since": time.time()}
    write_whole(holder_file(lock), json.dumps(mine))


@contextmanager
def held(lock: Path, what: str, wait: bool = True, out=None):
    """Holds ``lock`` (a path) for the block: at once if free, else after saying who holds it."""
    lock = Path(lock)
    flock = FileLock(str(lock))
    try:
        flock.acquire(timeout=0)
    except Timeout:
        busy = f"{what} is in use by {describe_holder(lock)}"
        if not wait:
            raise Busy(f"{busy}: wait for it to end or stop it, or leave out --no-wait to wait") from None
        print(f"oombench: waiting: {busy}", file=out or sys.stderr, flush=True)
        flock.acquire()
    try:
        _write_holder(lock, what)
        yield lock
    finally:
        holder_file(lock).unlink(missing_ok=True)
        flock.release()


@contextmanager
def gpus_held(uuids, wait: bool = True):
    """The locks of several GPUs, always taken in one order (by UUID), so two takers never hold
    one each while waiting for the other's."""
    with ExitStack() as stack:
        for uuid in sorted(set(uuids)):
            stack.enter_context(held(gpu_lock(uuid), f"GPU {uuid}", wait=wait))
        yield


def visible_gpu_uuids(ordinals) -> list[str]:
    """UUIDs of these CUDA device ordinals, as this process sees them (``CUDA_VISIBLE_DEVICES``
    honoured); those this box does not have are left out, so a CPU box locks nothing."""
    from harness.measure.instruments.devices import cuda_gpu, discover
    devices = discover()
    out = []
    for ordinal in ordinals:
        gpu = cuda_gpu(ordinal, devices)
        if gpu is not None:
            out.append(gpu.uuid)
    return out
