"""Data parallel versus model parallel on the shared transformer language model (no batch
statistics: every strategy must reach the same loss as one device). ``depth``, ``width`` and
``seq_len`` size it (heads of 64 wide, at least 2), ``batch`` is the global batch in sequences;
``strategy``, ``gpus`` and ``micro_batches`` as in ``harness.workloads.parallelism.parallel``; ``nodes`` node
agents share the ``gpus`` (rendezvoused on this box), over NCCL's ``transport``."""
from harness.workloads.parallelism.parallel import STRATEGIES, build
from harness.workloads.parallelism.launch import TRANSPORTS
from harness.workloads.parallelism.parallel_job import Job
from harness.cases.base import Case

DEVICES = ("cuda", "cpu")
GPUS = (1, 2, 3, 4, 8)
MICRO_BATCHES = (1, 2, 4, 8)
BATCHES = (4, 8, 16, 32, 64)
DEPTHS = (2, 4, 12, 24, 48)
WIDTHS = (32, 64, 1024, 2048, 4096)
SEQ_LENS = (16, 128, 1024, 2048)
NODES = (1, 2)
# Parameters added after records were filed, at the values those records ran at.
EARLIER = {"nodes": 1, "transport": "fast"}


def _build(strategy, device, gpus, micro_batches, batch, depth, width, seq_len, nodes, transport):
    return build(job(strategy, device, gpus, micro_batches, batch, depth, width, seq_len, nodes=nodes,
                     transport=transport))


def job(strategy, device, gpus, micro_batches, batch, depth, width, seq_len, warmup=2, repeat=10, nodes=1,
        transport="fast") -> Job:
    return Job(model="lm", strategy=strategy, device=device, gpus=gpus, batch=batch, micro_batches=micro_batches,
               depth=depth, width=width, heads=max(2, width // 64), seq_len=seq_len, warmup=warmup, repeat=repeat,
               nodes=nodes, transport=transport)


CASE = Case(name="parallel_lm",
            params={"strategy": STRATEGIES, "device": DEVICES, "gpus": GPUS, "micro_batches": MICRO_BATCHES,
                    "batch": BATCHES, "depth": DEPTHS, "width": WIDTHS, "seq_len": SEQ_LENS, "nodes": NODES,
                    "transport": tuple(TRANSPORTS)},
            build=_build, earlier=EARLIER, doc=__doc__)
