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
        slurm = int(environ.get("SLURM_STEP_NUM_NODES") or 1) > 1 and nnodes is None
        if slurm:
            nnodes, node_rank = int(environ["SLURM_STEP_NUM_NODES"]), int(environ.get("SLURM_NODEID", 0))
            run_id = run_id or f"slurm-{environ.get('SLURM_JOB_ID', '')}"
            if not endpoint and environ.get("MASTER_ADDR"):
                endpoint = f"{environ['MASTER_ADDR']}:{environ.get('MASTER_PORT', '29500')}"
        if nnodes is not None and nnodes < 1:
            raise ValueError(f"--nnodes takes a number of nodes, 1 or more, got {nnodes}")
        if nnodes is None or nnodes == 1:
            return None
        if not endpoint or ":" not in endpoint:
            raise ValueError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT, the same on every node (under "
                             "SLURM: export MASTER_ADDR=$(scontrol show hostnames | head -n1))")
        if backend == "static" and node_rank is None:
            raise ValueError("--rdzv-backend static needs --node-rank N (0 on the node that hosts the endpoint)")
        if node_rank is not None and not 0 <= node_rank < nnodes:
            raise ValueError(f"--node-rank {node_rank} is not one of 0..{nnodes - 1}: pass this node's number")
        return cls(count=nnodes, endpoint=endpoint, run_id=run_id or "oombench", node_rank=node_rank or 0,
                   backend=backend)
