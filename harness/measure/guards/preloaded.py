"""A fresh process for each case, without a fresh import of torch for each.

Every what-fits probe and every case of ``harness try`` runs in a process of its own, so that a
crash, an out-of-memory or a leak in one cannot touch the next. Started as ``python -m MODULE``,
each would first import torch and ``torch._dynamo`` (torch's optimizers import it the first time
one is built): seconds of CPU a process, more than a small probe's whole work. Inside ``cases()``,
``run`` forks such a process from multiprocessing's fork server instead, which has imported them
once (``PRELOAD``). A fork is still a fresh process: its own memory, its own CUDA context (the
server never touches CUDA: importing torch does not start it; forkserver is a start method torch
supports for CUDA), its own exit status.

What ``python -m`` would give the process, the child is given here:
- the environment it is handed, whole. Torch reads some of it as it is imported (the allocator's
  backend above all), so the server is started in that environment, and a call with another one
  gets a server of its own, started afresh once no child of the first runs (else it starts cold);
- ``sys.argv``, ``__main__`` and ``sys.path`` as ``-m`` sets them (``runpy``; what ``PYTHONPATH``
  names, first);
- its stdout and stderr, written to files and handed back as text;
- a parent to die with: the child is told the server's pid (``OOMBENCH_PARENT_PID``), the parent
  it really has, which ``lifeline.bind`` binds it to; the server asks for SIGKILL when the thread
  that started it ends (``lifeline.die_with_parent``, as it imports this module). So the server
  is started from the thread that enters ``cases()``, and stopped as that block ends.

Should a preloaded library have started NVIDIA's driver in the server after all (CUDA cannot be
used across a fork once its driver is started), each child finds the driver's files open and
starts afresh in place (``execve``: the same pid, parent and output), as it would have cold.

Any other argv, or a call outside ``cases()``, runs through ``subprocess`` as it always did.
"""
from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import forkserver

from harness.measure.guards.lifeline import ORPHANED, PARENT_ENV, die_with_parent

# This module first, so that the server binds itself to its starter before anything else; then
# what every case imports and nothing in it initialises CUDA.
PRELOAD = (__name__, "torch", "torch._dynamo")
SERVER_OF = "OOMBENCH_CASE_SERVER_OF"  # the starter's pid, in the server's environment alone
DRIVER_FILES = "/dev/nvidia"  # what CUDA's driver opens as it starts: /dev/nvidiactl, /dev/nvidia0, ...


@dataclass(frozen=True)
class Finished:
    """What a case process left: its exit status (negative: the signal that ended it), its pid,
    what it wrote, and whether it ran past its time and was killed."""
    returncode: int
    pid: int
    stdout: str
    stderr: str
    timed_out: bool = False


class _Server:
    """The fork server of the current ``cases()`` block: its pid, the environment it was started
    in, and how many of its children run now."""

    def __init__(self):
        self.lock = threading.Lock()
        self.open = 0  # nested cases() blocks
        self.thread: int | None = None  # the thread that opened the outermost one
        self.pid: int | None = None
        self.env: dict | None = None
        self.children = 0

    def acquire(self, env: dict) -> int | None:
        """The pid of a server started in ``env``, counted as having one child more; None where
        none can be had now: a server in another environment has children running, another
        thread than the block's would start it (it would die with that thread), or a server this
        module did not start is up (a launch's)."""
        with self.lock:
            running = forkserver._forkserver._forkserver_pid  # no public name: one server per process
            if not (running == self.pid and env == self.env and _alive(running)):
                foreign = running is not None and running != self.pid and _alive(running)
                if self.children or foreign or threading.get_ident() != self.thread:
                    return None
                self._start(env)
            self.children += 1
            return self.pid

    def release(self) -> None:
        with self.lock:
            self.children -= 1

    def _start(self, env: dict) -> None:
        self.stop()
        forkserver.set_forkserver_preload(list(PRELOAD))
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env, **{SERVER_OF: str(os.getpid())})
        try:
            forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.pid, self.env = forkserver._forkserver._forkserver_pid, env

    def stop(self) -> None:
        """Ends this module's server (or a dead one left behind), and forgets it."""
        pid = forkserver._forkserver._forkserver_pid
        if pid is not None and (pid == self.pid or not _alive(pid)):
            end_forkserver()
        self.pid = self.env = None


def end_forkserver() -> None:
    """Ends multiprocessing's fork server of this process, where one runs, and forgets it: the
    next ``ensure_running`` starts one afresh, with the preload and environment of that moment."""
    server = forkserver._forkserver
    if server._forkserver_pid is None:
        return
    try:
        os.kill(server._forkserver_pid, signal.SIGKILL)  # else it would wait for every child's end
    except ProcessLookupError:
        pass
    try:
        server._stop()  # closes its pipe, reaps it, forgets it
    except ChildProcessError:  # reaped already
        server._forkserver_pid = None


def bind_to_starter(variable: str) -> None:
    """In a fork server, as it imports its first preload: die with the thread that started it
    (its pid in ``variable``, in the server's environment alone, taken out of it here so that no
    child inherits it), and at once where that starter is gone already. Nothing where the
    variable is absent: any other process importing the module."""
    starter = os.environ.pop(variable, "")
    if starter.isdigit():
        die_with_parent()
        if os.getppid() != int(starter):
            os._exit(ORPHANED)


_SERVER = _Server()


@contextmanager
def cases():
    """A block whose ``run`` calls fork their cases from one preloaded server, stopped at its end."""
    if not _SERVER.open:
        _SERVER.thread = threading.get_ident()
    _SERVER.open += 1
    try:
        yield
    finally:
        _SERVER.open -= 1
        if not _SERVER.open:
            with _SERVER.lock:
                _SERVER.stop()


def ready(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Starts the server for ``env`` from this thread where it can be (see ``acquire``) and ``run``
    would fork ``argv`` from it: for a caller about to run such cases from other threads, which may
    only use one started already. Nothing is started for an argv that ``run`` starts cold."""
    if not (_SERVER.open and _module(argv)) or _SERVER.acquire(dict(env)) is None:
        return False
    _SERVER.release()
    return True


def run(argv: Sequence[str], env: Mapping[str, str], timeout: float | None = None) -> Finished:
    """``argv`` run to its end in ``env``, killed past ``timeout`` seconds: forked from the
    preloaded server where it is ``[sys.executable, "-m", MODULE, ...]`` inside ``cases()``."""
    env = dict(env)
    module = _module(argv)
    server = _SERVER.acquire(env) if module and _SERVER.open else None
    if server is None:
        return _cold(list(argv), env, timeout)
    try:
        return _forked(module, list(argv[3:]), dict(env, **{PARENT_ENV: str(server)}), timeout)
    finally:
        _SERVER.release()


def _module(argv: Sequence[str]) -> str | None:
    """MODULE where ``argv`` is ``[sys.executable, "-m", MODULE, ...]``, the one form forked."""
    return argv[2] if len(argv) > 2 and argv[0] == sys.executable and argv[1] == "-m" else None


def _alive(pid: int | None) -> bool:
    import psutil
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _cold(argv: list, env: dict, timeout: float | None) -> Finished:
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return Finished(proc.returncode, proc.pid, out, err, timed_out=True)
    return Finished(proc.returncode, proc.pid, out, err)


def _forked(module: str, args: list, env: dict, timeout: float | None) -> Finished:
    import multiprocessing
    with tempfile.TemporaryDirectory(prefix="oombench-case-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        proc = multiprocessing.get_context("forkserver").Process(target=_child, args=(module, args, env, out, err),
                                                                 name=module)
        proc.start()
        proc.join(timeout)
        timed_out = proc.exitcode is None
        if timed_out:
            proc.kill()
            proc.join()
        return Finished(proc.exitcode, proc.pid, _text(out), _text(err), timed_out)


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _child(module: str, args: list, env: dict, out: str, err: str) -> None:
    """In the forked child: ``python -m module *args`` in ``env``, its output into ``out``/``err``;
    killed with the server, its parent, whether or not the module binds itself (``lifeline``)."""
    die_with_parent()
    if str(os.getppid()) != env.get(PARENT_ENV):
        os._exit(ORPHANED)
    for stream, path in ((sys.stdout, out), (sys.stderr, err)):
        stream.flush()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    if _driver_open():
        # The server started NVIDIA's driver as it imported (a library asked what the GPU can do):
        # a fork of it cannot use CUDA. The same process starts afresh instead, as it would cold.
        os.execve(sys.executable, [sys.executable, "-m", module, *args], env)
    os.environ.clear()
    os.environ.update(env)
    # The server's path is its starter's; what PYTHONPATH adds comes first, as at a start.
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _driver_open() -> bool:
    """Whether this process holds one of NVIDIA's device files open (``DRIVER_FILES``): CUDA's
    driver was initialised in it, or in the process it was forked from."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(DRIVER_FILES):
                return True
        except OSError:  # closed meanwhile (the listing's own)
            continue
    return False


bind_to_starter(SERVER_OF)  # does nothing but in a server this module starts, which imports it first
