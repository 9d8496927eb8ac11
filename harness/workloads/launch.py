"""Starts one worker process per rank for torch.distributed, and leaves none behind.

A distributed worker that outlives its parent keeps its GPU memory and blocks the card for the
next case (or for everyone on a shared host). So each worker:
- runs in its own session (``os.setsid``), so that the parent can kill it together with anything
  it started (``os.killpg``);
- is bound to its parent's pid before anything else (``harness.measure.lifeline.run_bound``):
  the kernel's parent-death signal is set, and the parent checked to be the launcher, before
  its arguments are unpickled (which imports the worker's modules), and a watchdog follows the
  parent's pid; so even a parent killed by asv's time-out, under a child subreaper, leaves no
  orphan;
- reports its result, or its traceback, through a queue.
The launcher holds the lock of each GPU the ranks use (``harness.measure.locks``): another run
on those GPUs waits for the launch to end.
The parent waits for every rank up to a deadline; on the first error, exit or time-out it kills
every worker's group and raises ``LaunchError`` naming the rank and what it said.
"""
from __future__ import annotations

import os
import pickle
import queue as queues
import signal
import socket
import time
import traceback

from harness.measure import locks
from harness.measure.lifeline import run_bound
from harness.measure.outcomes import DoesNotFit, Skip, is_out_of_memory
from harness.measure.safety import MULTICAST_OFF

POLL_S = 0.2


class LaunchError(RuntimeError):
    """A worker failed, exited or ran past the deadline; every worker was killed."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker, world: int, args: tuple = (), timeout_s: float = 540.0, gpus=None) -> list:
    """``worker(rank, world, *args)`` in ``world`` fresh processes (spawn); returns each rank's
    return value, by rank. A Skip or out-of-memory in a worker comes back as Skip or DoesNotFit.
    ``gpus``: the CUDA devices the ranks use, locked for the launch (default: one per rank,
    those this box has; none on a CPU box)."""
    ordinals = range(world) if gpus is None else gpus
    with locks.gpus_held(locks.visible_gpu_uuids(ordinals)):
        return _launch(worker, world, args, timeout_s)


def _launch(worker, world: int, args: tuple, timeout_s: float) -> list:
    import multiprocessing as mp
    ctx = mp.get_context("spawn")  # fork would copy a CUDA context, which CUDA forbids
    results = ctx.Queue()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world), **MULTICAST_OFF}
    procs = [ctx.Process(target=run_bound, args=(os.getpid(), _payload(worker, rank, world, env, args), results),
                         daemon=False) for rank in range(world)]
    try:
        for p in procs:
            p.start()
        return _collect(procs, results, world, time.monotonic() + timeout_s, timeout_s)
    finally:
        kill_all(procs)
        results.close()


def _payload(worker, rank, world, env, args) -> bytes:
    """The worker's call, pickled here so that the spawned process unpickles it (importing the
    worker's modules) only once it is bound to this one."""
    return pickle.dumps((_entry, (worker, rank, world, env, args)))


def _collect(procs, results, world, deadline, timeout_s) -> list:
    done: dict[int, object] = {}
    exited: set[int] = set()
    while len(done) < world:
        try:
            rank, status, payload = results.get(timeout=POLL_S)
        except queues.Empty:
            exited = _raise_if_dead(procs, done, exited)
            if time.monotonic() > deadline:
                raise LaunchError(f"workers ran past {timeout_s:.0f} s (ranks not done: "
                                  f"{sorted(set(range(world)) - set(done))}); all were killed. "
                                  "Give the case a smaller size or a longer timeout") from None
            continue
        if status == "ok":
            done[rank] = payload
        else:
            _raise_from_worker(rank, status, payload)
    return [done[r] for r in range(world)]


def _raise_if_dead(procs, done, exited: set) -> set:
    """Ranks found gone without a result. A worker may put its result and exit between one
    empty poll and this look, so a rank counts as lost only when it was already gone at the
    previous empty poll: its result, flushed before it exited, would have arrived in between."""
    gone = {rank for rank, p in enumerate(procs) if rank not in done and p.exitcode is not None}
    for rank in sorted(gone & exited):
        raise LaunchError(f"rank {rank} exited with code {procs[rank].exitcode} before reporting a result "
                          "(killed, or it called exit); all workers were killed")
    return gone


def _raise_from_worker(rank, status, payload):
    kind, message, text = payload
    if status == "skip":
        raise Skip(message)
    if status == "oom":
        raise DoesNotFit(f"rank {rank}: {message}")
    raise LaunchError(f"rank {rank} failed with {kind}: {message}; all workers were killed.\n"
                      f"Its traceback:\n{text}")


def kill_all(procs) -> None:
    """SIGKILL to each worker's process group (the worker and what it started), then reap."""
    for p in procs:
        if p.pid is None:
            continue
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            # No group of that id: the worker had not reached setsid yet, or is gone.
            if p.exitcode is None:
                p.kill()
    for p in procs:
        if p.pid is not None:
            p.join(timeout=10)


# ---- in the worker ----------------------------------------------------------------------------

def _entry(worker, rank, world, env, args, results):
    os.setsid()
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank))
    try:
        payload = worker(rank, world, *args)
    except BaseException as e:  # everything goes back to the parent, which decides
        results.put((rank, _status(e), (type(e).__name__, str(e), traceback.format_exc())))
        _flush(results)
        os._exit(1)  # skip exit handlers: NCCL's can block on a peer stuck in a collective
    results.put((rank, "ok", payload))
    _flush(results)


def _status(e: BaseException) -> str:
    if isinstance(e, Skip):
        return "skip"
    return "oom" if is_out_of_memory(e) else "error"


def _flush(results):
    # The queue's feeder thread must hand the message over before this process exits.
    results.close()
    results.join_thread()
