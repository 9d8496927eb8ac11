"""Where a parallel case's ranks run: one box, several node agents on one box, or one node of a
rendezvous over several boxes, described by torchrun's usual arguments or by SLURM's environment.

Standard library only: ``harness run`` checks these arguments before it sets anything up.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

# How ``harness run`` and ``harness case`` hand a multi-node launch to the case (asv starts each case
# in a fresh process: the environment is what reaches it).
ENV = {"count": "OOMBENCH_NNODES", "node_rank": "OOMBENCH_NODE_RANK", "endpoint": "OOMBENCH_RDZV_ENDPOINT",
       "run_id": "OOMBENCH_RDZV_ID", "backend": "OOMBENCH_RDZV_BACKEND"}
BACKENDS = ("c10d", "static")
FIRST_GPU = "OOMBENCH_FIRST_GPU"  # a node's first GPU among its box's, where several nodes share the box


@dataclass(frozen=True)
class Nodes:
    """Where the ranks run: ``count`` nodes of ``world // count`` ranks each. ``endpoint`` empty:
    every node on this box (``local``, each its own slice of the GPUs, c10d on localhost); else
    this box is node ``node_rank`` of a rendezvous at ``endpoint`` (``host:port``) named
    ``run_id``, as torchrun's ``--nnodes --node-rank --rdzv-endpoint --rdzv-id --rdzv-backend``.
    With c10d the rendezvous numbers the nodes; ``static`` takes ``node_rank`` as given."""
    count: int = 1
    endpoint: str = ""
    run_id: str = ""
    transport: str = "fast"
    node_rank: int = 0
    backend: str = "c10d"

    @property
    def local(self) -> bool:
        return not self.endpoint

    def to_env(self) -> dict:
        return {ENV[k]: str(getattr(self, k)) for k in ENV}

    @classmethod
    def from_env(cls, environ=None, transport: str = "fast") -> Nodes:
        """The multi-node launch ``to_env`` described; one local node where there is none."""
        environ = os.environ if environ is None else environ
        if not environ.get(ENV["count"]):
            return cls(transport=transport)
        return cls(count=int(environ[ENV["count"]]), endpoint=environ[ENV["endpoint"]], run_id=environ[ENV["run_id"]],
                   node_rank=int(environ[ENV["node_rank"]]), backend=environ[ENV["backend"]], transport=transport)

    @classmethod
    def of_launcher(cls, nnodes, node_rank, endpoint, run_id, backend="c10d", environ=None) -> Nodes | None:
        """From the launcher's arguments, or else from SLURM's environment inside an ``srun`` step of
        several nodes (``SLURM_STEP_NUM_NODES``, ``SLURM_NODEID``, ``SLURM_JOB_ID``, and
        ``MASTER_ADDR``[:``MASTER_PORT``] for the endpoint); None for a run on one box. ValueError
        names the missing argument."""
        environ = os.environ if environ is None else environ
        slurm = _slurm_int(environ, "SLURM_STEP_NUM_NODES", 1) > 1 and nnodes is None
        if slurm:
            nnodes, node_rank = _slurm_int(environ, "SLURM_STEP_NUM_NODES", 1), _slurm_int(environ, "SLURM_NODEID", 0)
            run_id = run_id or f"slurm-{environ.get('SLURM_JOB_ID', '')}"
            if not endpoint and environ.get("MASTER_ADDR"):
                endpoint = f"{environ['MASTER_ADDR']}:{environ.get('MASTER_PORT', '29500')}"
        if nnodes is not None and nnodes < 1:
            raise ValueError(f"--nnodes takes a number of nodes, 1 or more, got {nnodes}")
        if nnodes is None or nnodes == 1:
            given = [flag for flag, value in (("--node-rank", node_rank), ("--rdzv-endpoint", endpoint),
                                              ("--rdzv-id", run_id)) if value is not None]
            if given:
                raise ValueError(f"{given[0]} describes one node of several: pass --nnodes N (2 or more) with it, "
                                 f"or leave {given[0]} out for a run on this box alone")
            return None
        if not endpoint or ":" not in endpoint:
            raise ValueError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT, the same on every node (under "
                             "SLURM: export MASTER_ADDR=$(scontrol show hostnames | head -n1))")
        split_endpoint(endpoint)
        if backend == "static" and node_rank is None:
            raise ValueError("--rdzv-backend static needs --node-rank N (0 on the node that hosts the endpoint)")
        if node_rank is not None and not 0 <= node_rank < nnodes:
            raise ValueError(f"--node-rank {node_rank} is not one of 0..{nnodes - 1}: pass this node's number")
        return cls(count=nnodes, endpoint=endpoint, run_id=run_id or "oombench", node_rank=node_rank or 0,
                   backend=backend)


def _slurm_int(environ, name: str, default: int) -> int:
    """SLURM's variable ``name`` as a number (``default`` where unset); ValueError naming it where not one."""
    text = environ.get(name) or str(default)
    if not text.strip().isdigit():
        raise ValueError(f"{name}={text!r} is not a number of nodes or a node's number: run inside `srun`, which "
                         f"sets it, or unset it")
    return int(text)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as (host, port); ValueError naming the fix where it is not one."""
    host, _, port = endpoint.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT with a port of 1..65535: pass the "
                         "rendezvous as e.g. --rdzv-endpoint node0:29500")
    return host, int(port)


RESOLVE_S = 10.0  # how long a rendezvous host may take to resolve before the run is refused


def unresolved(endpoint: str, timeout_s: float = RESOLVE_S) -> str | None:
    """Why the rendezvous host of ``endpoint`` cannot be reached by name (one line naming the fix),
    or None: asked once, within ``timeout_s`` (a resolver that hangs is left to its thread)."""
    import socket
    import threading

    host, port = split_endpoint(endpoint)
    answer: list = []

    def ask():
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as e:
            answer.append(e)
    thread = threading.Thread(target=ask, name="oombench-resolve", daemon=True)
    thread.start()
    thread.join(timeout_s)
    fix = "name a host every node can resolve (e.g. the first node's hostname, or its address)"
    if not answer:
        return f"--rdzv-endpoint {endpoint}: {host} did not resolve within {timeout_s:.0f} s: {fix}"
    if isinstance(answer[0], Exception):
        why = getattr(answer[0], "strerror", None) or str(answer[0])
        return f"--rdzv-endpoint {endpoint}: {host} does not resolve ({why}): {fix}"
    return None
