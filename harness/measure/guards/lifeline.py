"""Every process the suite starts dies with the process that started it.

A probe, a distributed worker or a benchmark that outlives its parent keeps measuring and keeps
its GPU memory, on a card other people may share. So each child is bound to a parent named by
pid (passed in, never guessed from ``getppid() == 1``, which a child subreaper such as systemd
--user, ``tini -s`` or a CI agent makes false):

- ``bind(expected)``, first thing in a child: the kernel's parent-death signal, then a check
  that its parent is still ``expected`` (it may have died before the signal was asked for),
  then ``watch(expected)``;
- ``watch(pid)``: a daemon thread that ends this process, and what it started, once ``pid``
  is gone; for processes that are not our direct children (asv starts the benchmarks), where
  no parent-death signal can name the harness;
- ``preexec(expected)``: the same binding for a child started with ``subprocess.Popen``, set
  between fork and exec, so no window is left open at all;
- ``end_tree(pid)``: what the harness does on SIGTERM, SIGINT or SIGHUP: the process, its
  descendants and everything left in its session, asked to stop, then killed.

Standard library and psutil only: a probe imports this before anything else.
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

PARENT_ENV = "OOMBENCH_PARENT_PID"
PR_SET_PDEATHSIG = 1
POLL_S = 0.5
ORPHANED = 70  # the exit status of a process whose parent was gone
_LIBC = None


def _libc():
    """libc, loaded once in the parent: a dlopen between fork and exec can deadlock."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
        except OSError:  # not Linux (glibc): the pid checks and the watchdog still hold
            _LIBC = False
    return _LIBC


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Asks the kernel for ``sig`` when the thread that started this process ends."""
    libc = _libc()
    return bool(libc) and libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def parent_from_env(environ=None) -> int | None:
    value = (os.environ if environ is None else environ).get(PARENT_ENV, "")
    return int(value) if value.isdigit() else None


def bind(expected: int | None) -> None:
    """For a direct child, before its payload: die with the parent, and exit now if the parent
    is already not ``expected`` (re-parented: it died before the signal was set)."""
    if expected is None:
        return
    die_with_parent()
    if os.getppid() != expected:
        os._exit(ORPHANED)
    watch(expected)


def preexec(expected: int):
    """``preexec_fn`` for Popen: ``bind`` without the thread (none may be started there)."""
    _libc()

    def setup():
        die_with_parent()
        if os.getppid() != expected:
            os._exit(ORPHANED)
    return setup


def alive(pid: int) -> bool:
    """``pid`` runs and started before this process did (else the number was reused)."""
    import psutil
    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and \
            proc.create_time() <= psutil.Process().create_time()
    except psutil.Error:
        return False


def watch(pid: int | None, poll_s: float = POLL_S) -> threading.Thread | None:
    """A daemon thread that ends this process and its descendants once ``pid`` is gone; this
    process exits at once where it is gone already."""
    if pid is None:
        return None
    if not alive(pid):
        _orphaned()

    def loop():
        while alive(pid):
            time.sleep(poll_s)
        _orphaned()
    thread = threading.Thread(target=loop, name=f"oombench-lifeline-{pid}", daemon=True)
    thread.start()
    return thread


def _orphaned() -> None:
    kill_all(descendants(os.getpid()))
    os._exit(ORPHANED)


def descendants(pid: int) -> list:
    import psutil
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def session_members(sid: int) -> list:
    """Processes left in session ``sid``: re-parented ones are no one's descendants any more."""
    import psutil
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and os.getsid(proc.pid) == sid:
                out.append(proc)
        except (OSError, psutil.Error):
            continue
    return out


def kill_all(procs, sig: int = signal.SIGKILL) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except Exception:  # gone already, or not ours
            continue


def end_tree(pid: int, grace_s: float = 2.0) -> list:
    """SIGTERM to ``pid``, its descendants and its session (``pid`` leads one: started with
    ``start_new_session``), SIGKILL to whatever is left after ``grace_s``; returns survivors."""
    import psutil
    try:
        root = [psutil.Process(pid)]
    except psutil.Error:
        root = []
    procs = {p.pid: p for p in root + descendants(pid) + session_members(pid)}
    kill_all(procs.values(), signal.SIGTERM)
    _, left = psutil.wait_procs(list(procs.values()), timeout=grace_s)
    kill_all(left)
    _, left = psutil.wait_procs(left, timeout=grace_s)
    return left
