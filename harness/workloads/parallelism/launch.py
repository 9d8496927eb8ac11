"""Starts a case's ranks with torch's elastic launcher, on one node or several, and leaves none
of them behind.

``elastic_launch`` runs in the case's own process rather than as a ``torchrun`` subprocess, so
that the case's process stays the owner of its ranks: asv's fresh process per case is the agent
(its SIGTERM, asv's time-out or ``harness run`` stopping, reaches elastic's own handler, which
stops the workers), the GPU locks taken here cover the launch, and each rank's return value comes
back as elastic's dict by rank, with no channel of our own.

What elastic does not do, and this module adds:
- a deadline: elastic waits on a hung rank for ever. A real-time timer in the main thread raises
  ``LaunchError`` out of the agent, whose own clean-up then stops every worker.
- one import of torch per launch, not one per rank: the ranks fork from multiprocessing's fork
  server, started afresh for each launch in the agent's environment of the moment (what spawned
  ranks would inherit) with torch and elastic's worker entry imported once, and stopped at the
  launch's end. The server never touches CUDA (importing torch does not initialise it), so the
  ranks it forks may: forkserver, like spawn, is a start method torch supports for CUDA and NCCL
  (``torchrun --start-method forkserver``).
- SIGKILL of the case: nothing in it runs. The fork server asks the kernel for SIGKILL when its
  agent dies, and each rank for SIGKILL when the server dies (``lifeline.die_with_parent``); each
  then checks that its parent is still the one that started it (it may have died first).
- what a rank starts: elastic signals each worker's pid alone, and a rank's child would live on.
  A keeper process leads a process group that every rank joins first thing (a child inherits the
  group); it kills the whole group once its stdin, a pipe only the case holds, closes: at the
  launch's end, or when the case dies however it dies. (A child that makes a session of its own
  has left on purpose: daemons are out of reach.)
- several nodes on one box (``Nodes.local``): node 0's agent runs here; each other node's agent
  is forked from node 0's fork server and runs with its own ``CUDA_VISIBLE_DEVICES`` (and fork
  server), rendezvoused with c10d on localhost.
- the root cause: when one rank fails, its peers fail too (a collective lost its peer). Every
  rank records its exception in elastic's error file; the earliest that is not a lost peer is
  the launch's outcome (``Skip``, ``DoesNotFit`` with the bytes asked, or ``LaunchError``).
"""
from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from multiprocessing import forkserver

from harness.measure.guards import locks
from harness.measure.guards.lifeline import ORPHANED, die_with_parent
from harness.measure.guards.preloaded import bind_to_starter, end_forkserver
from harness.measure.outcomes import DoesNotFit, Skip, is_out_of_memory, requested_bytes
from harness.measure.guards.safety import MULTICAST_OFF
from harness.measure.guards.signals import handlers, kept
from harness.workloads.parallelism.nodes import FIRST_GPU, Nodes

SOCKETS = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}  # NCCL over sockets, as between hosts
TRANSPORTS = {"fast": {}, "sockets": SOCKETS}
SHUTDOWN_S = 5  # a worker that ignores elastic's SIGTERM this long is killed
# The keeper: blocks until the case's end of the pipe closes, then kills its group (itself last).
KEEPER = "import os, sys; sys.stdin.buffer.read(); os.killpg(0, 9)"


class LaunchError(RuntimeError):
    """A rank failed, exited or ran past the deadline; every rank was killed."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker, world: int, args: tuple = (), timeout_s: float = 540.0, gpus=None, nodes: Nodes = Nodes()) -> dict:
    """``worker(rank, world, *args)`` in ``world`` ranks over ``nodes``; returns the return value of
    each rank of this box, by global rank. ``gpus``: the CUDA devices this box's ranks use, locked
    for the launch (default: one per rank of this box; none on a CPU box). Call it from the main
    thread: the deadline is a signal."""
    if world % nodes.count:
        raise Skip(f"{world} ranks do not split evenly over {nodes.count} nodes: use a multiple of {nodes.count}")
    per_node = world // nodes.count
    on_box = world if nodes.local else per_node
    with locks.gpus_held(locks.visible_gpu_uuids(range(on_box) if gpus is None else gpus)), \
            _keeper() as group, tempfile.TemporaryDirectory(prefix="oombench-ranks-") as logs:
        plan = _Plan(worker, args, per_node, nodes, group, logs, timeout_s, _rendezvous(nodes))
        # Each node's slice of the box is read now, before node 0's agent narrows this process's view.
        slices = [_on_slice(plan, n) for n in range(nodes.count if nodes.local else 1)]
        with _deadline(timeout_s) as over:
            others = []
            try:
                return _agent(slices[0], node=0, others=slices[1:], started=others)
            except _Failed as e:
                raise _root_cause(logs, e.failures) from None
            finally:
                over()
                for p in others:  # done with node 0 (elastic's exit barrier), or failed: killed either way
                    p.join(1)
                    p.kill()
                    p.join()


@dataclass(frozen=True)
class _Plan:
    worker: object
    args: tuple
    per_node: int
    nodes: Nodes
    group: int  # the keeper's process group, which every rank joins
    logs: str  # elastic's error files, every node of this box under it
    timeout_s: float
    rendezvous: dict  # elastic's rendezvous settings, the same for every node
    env: dict = field(default_factory=dict)  # set for this node's workers


def _rendezvous(nodes: Nodes) -> dict:
    if nodes.local and nodes.count == 1:  # a store on a free port, as `torchrun --standalone`
        return dict(rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", run_id=uuid.uuid4().hex, local_addr="127.0.0.1")
    if nodes.local:  # several agents of this box, c10d on localhost
        return dict(rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", run_id=uuid.uuid4().hex,
                    local_addr="127.0.0.1")
    return dict(rdzv_backend=nodes.backend, rdzv_endpoint=nodes.endpoint, run_id=nodes.run_id)


class _Failed(Exception):
    def __init__(self, failures: dict):
        super().__init__("ranks failed")
        self.failures = failures


@contextmanager
def _keeper():
    keeper = subprocess.Popen([sys.executable, "-I", "-S", "-c", KEEPER], stdin=subprocess.PIPE, process_group=0)
    try:
        yield keeper.pid
    finally:
        keeper.stdin.close()  # the keeper kills the group: any rank left, and what ranks started
        keeper.wait()


NODE_FAILED = signal.SIGUSR1  # what another node's agent on this box sends the case when its ranks fail


@contextmanager
def _deadline(timeout_s: float):
    """While node 0's agent runs in the main thread (until ``over()`` is called): past
    ``timeout_s``, or once another node of this box has failed, an exception out of the agent,
    whose own clean-up stops the workers. Its handlers stay until the other nodes are stopped, so a
    late word from one of them is ignored rather than left to SIGUSR1's default (ending the case)."""
    running = [True]

    def stop(error):
        def handler(signum, frame):
            if running[0]:
                running[0] = False
                raise error()
        return handler
    late = LaunchError(f"ranks ran past {timeout_s:.0f} s; all were killed. Give the case a smaller size or a "
                       "longer timeout")
    with handlers({signal.SIGALRM: stop(lambda: late), NODE_FAILED: stop(lambda: _Failed({}))}):
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            yield lambda: running.__setitem__(0, False)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _config(plan: _Plan, node: int):
    """elastic's LaunchConfig for one node of the plan; fields a torch release lacks are left out."""
    from torch.distributed.launcher.api import LaunchConfig
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    nodes = plan.nodes
    static = {"rank": nodes.node_rank} if plan.rendezvous["rdzv_backend"] == "static" else {}
    wanted = dict(min_nodes=nodes.count, max_nodes=nodes.count, nproc_per_node=plan.per_node, **plan.rendezvous,
                  rdzv_configs={"join_timeout": max(60, int(plan.timeout_s)), **static}, max_restarts=0,
                  monitor_interval=0.1, start_method="forkserver", shutdown_timeout=SHUTDOWN_S,
                  logs_specs=DefaultLogsSpecs(log_dir=os.path.join(plan.logs, f"node{node}")))
    known = {f.name for f in fields(LaunchConfig)}
    return LaunchConfig(**{k: v for k, v in wanted.items() if k in known})


def _agent(plan: _Plan, node: int, others: list | tuple = (), started: list | None = None) -> dict:
    """One node's agent, in this process: its ranks' return values by global rank. ``others``: the
    plans of this box's other nodes, whose agents it starts (into ``started``) from its fork server."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    _name_rendezvous_events_by_frame()
    try:
        # The workers inherit this process's environment, through the fork server started in it.
        with _environment({**MULTICAST_OFF, **TRANSPORTS[plan.nodes.transport], **plan.env}), kept(AGENT_SIGNALS):
            with _rank_server() as server:
                for n, other in enumerate(others, start=node + 1):
                    started.append(_start_node(other, n, server))
                return elastic_launch(_config(plan, node), _rank)(plan.worker, plan.args, server, plan.group)
    except ChildFailedError as e:
        raise _Failed({rank: f.exitcode for rank, f in e.failures.items()}) from None


def _name_rendezvous_events_by_frame() -> None:
    """Has elastic's dynamic rendezvous name the events it records (``get_method_name``) by walking
    frames, not by ``inspect.stack()``, which it calls twice an event: that reads every frame's
    source and looks each frame's module up among all of ``sys.modules``, so that its cost grows
    with the stack's depth and with what the process has imported (transformers, timm), in the
    agent, whose steps wait on it. The name is the same: the function ``depth`` frames up."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    if hasattr(dynamic_rendezvous, "get_method_name"):  # a release without it names events otherwise
        dynamic_rendezvous.get_method_name = caller_name


def caller_name(depth: int = 2) -> str:
    """The name of the function ``depth`` frames above this one (0: this one), as
    ``inspect.stack()[depth].function`` reads it in the function it replaces."""
    try:
        return sys._getframe(depth).f_code.co_name
    except ValueError:  # a stack not that deep
        return "no_method_name"


# Elastic's agent turns these into an exception in whatever this process runs, so that its own
# clean-up stops the workers, and leaves its handlers in place when it returns: a SIGTERM to the
# case after the launch would then be an exception the case may catch, not the end it asks for.
AGENT_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, n))


@contextmanager
def _environment(values: dict):
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---- the fork server the ranks start from -------------------------------------------------------

SERVER_OF = "OOMBENCH_RANK_SERVER_OF"  # the agent's pid, in the fork server's environment alone
# What every rank imports before its worker runs, imported once in the server: this module first,
# to bind the server at once, then elastic's entry (torch with it). Only code known to initialise no
# CUDA: the worker's module and the caller's __main__, which might, each rank imports after the fork,
# as a spawned rank would.
PRELOAD = (__name__, "torch.distributed.elastic.multiprocessing.api")


@contextmanager
def _rank_server():
    """multiprocessing's fork server for one launch, started in this thread (the one its
    parent-death signal names) and this environment, preloading what each rank imports; yields its
    pid, the ranks' parent. Killed at the end, so that a later launch's ranks get that launch's
    environment; one started before, with another preload or environment, is stopped first."""
    end_forkserver()
    forkserver.set_forkserver_preload(list(PRELOAD))
    with _environment({SERVER_OF: str(os.getpid())}):
        forkserver.ensure_running()
    try:
        yield forkserver._forkserver._forkserver_pid  # no public name: the stdlib keeps one server per process
    finally:
        end_forkserver()


# ---- the other nodes of a box -------------------------------------------------------------------

def _on_slice(plan: _Plan, node: int) -> _Plan:
    """Several nodes on one box: node ``node`` sees its own ``per_node`` GPUs alone, as on a box
    of its own; one node, or one node of many boxes, sees what the box shows."""
    if not (plan.nodes.local and plan.nodes.count > 1):
        return plan
    first = node * plan.per_node
    visible = _visible()[first:first + plan.per_node]
    return replace(plan, env={"CUDA_VISIBLE_DEVICES": ",".join(visible), FIRST_GPU: str(first)}) if visible else plan


def _start_node(plan: _Plan, node: int, server: int):
    """Node ``node``'s agent (``plan``: its slice), forked from this process's fork server, torch
    already imported; it starts a fork server of its own, in its own slice's environment."""
    import multiprocessing as mp
    p = mp.get_context("forkserver").Process(target=_node_agent, args=(plan, node, server, os.getpid()))
    p.start()
    return p


def _visible() -> list[str]:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return [v for v in value.split(",") if v]
    from harness.measure.instruments.devices import discover
    return [str(g.index) for g in discover().gpus]


def _node_agent(plan: _Plan, node: int, server: int, case: int):
    _join(server, plan.group)
    try:
        _agent(plan, node)
    except BaseException:
        # Node 0's ranks may wait on this node's in a collective for long: stop them now. The case
        # reads the root cause from the error files.
        os.kill(case, NODE_FAILED)
        os._exit(1)


# ---- in each rank -------------------------------------------------------------------------------

def _join(parent: int, group: int) -> None:
    """First thing in a rank or a node's agent: die with its parent (a fork server), check it is
    still there, and join the keeper's group, so that whatever this process starts is killed with it."""
    die_with_parent()
    if os.getppid() != parent:
        os._exit(ORPHANED)
    try:
        os.setpgid(0, group)
    except OSError:  # the keeper is gone: the launch is over
        os._exit(ORPHANED)


def _rank(worker, args, server: int, group: int):
    _join(server, group)
    try:
        return worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), *args)
    except BaseException as e:
        # torch's own error file (what ChildFailedError reads), then an exit that skips exit
        # handlers: NCCL's can block on a peer stuck in a collective.
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler
        get_error_handler().record_exception(e)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


# ---- how the launch failed ------------------------------------------------------------------------

LOST_PEER = ("DistBackendError", "Connection closed by peer", "Connection reset by peer", "Broken pipe")


def _root_cause(logs: str, failures: dict) -> Exception:
    """The failure that came first, from every error file of this box's ranks: a rank's own error
    before the lost-peer errors it caused in the others; else a rank that exited with no error."""
    found = []
    for path in glob.glob(os.path.join(logs, "node*", "**", "error.json"), recursive=True):
        try:
            with open(path) as f:
                found.append(_error(json.load(f), os.path.relpath(path, logs).split(os.sep)))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    if found:
        _lost, _stamp, node, local, message, trace = min(found)
        return _outcome(f"node {node} local rank {local}", message, trace)
    if not failures:
        return LaunchError("another node's agent on this box failed with no error file; all ranks were killed")
    rank, code = min(failures.items())
    return LaunchError(f"rank {rank} exited with code {code} before reporting a result (killed, or it "
                       "called exit); all ranks were killed")


def _error(data: dict, parts: list[str]) -> tuple:
    """One error file, at nodeN/RUN/attempt_K/LOCAL_RANK/error.json under the launch's logs, as a
    tuple that sorts root causes first."""
    body = data.get("message", {})
    message = body.get("message", "") if isinstance(body, dict) else str(body)
    info = body.get("extraInfo", {}) if isinstance(body, dict) else {}
    lost = any(s in message for s in LOST_PEER)
    return (lost, int(info.get("timestamp") or 0), int(parts[0][4:]), int(parts[-2]), message,
            info.get("py_callstack", ""))


def _outcome(where: str, message: str, trace: str) -> Exception:
    kind, _, text = message.partition(": ")
    if kind == "Skip":
        return Skip(text)
    if kind in ("OutOfMemoryError", "MemoryError", "DoesNotFit") or is_out_of_memory(RuntimeError(message)):
        return DoesNotFit(f"{where}: {text}", requested_bytes(text))
    return LaunchError(f"{where} failed with {message}; all ranks were killed.\nIts traceback:\n{trace}")


bind_to_starter(SERVER_OF)  # does nothing but in a launch's fork server, which imports this module first
