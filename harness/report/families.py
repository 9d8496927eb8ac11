"""What the pages need to know about each case family, and nothing more: which parameters name
the workload (the rest name the technique), which memory level a technique trades, and which
ceilings bound its figures. A case missing here still gets a page: every parameter is then a
technique, and all of its machine's ceilings stand beside it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    title: str
    workload: tuple = ()  # parameters that name the workload; the others name the technique
    memory: str = "device"  # the peak a Pareto chart puts on its x axis: "device" or "host"
    pareto: bool = True  # False where the rows measure different things (the ceilings' probes)
    ceilings: tuple = ()  # the probes that bound this family's rates; () = all
    note: str = ""
    answer: str = ""  # a parameter whose value each check answers per column (fits: budget)
    baseline: tuple = ()  # (parameter, value) pairs of the row each technique is read against (x the baseline)
    matched: tuple = ()  # parameters the baseline row must share with the row read against it, or no multiple


FAMILIES = {
    "ceilings": Family("Ceilings: the box's physical limits", pareto=False,
                       note="Every other figure is read against these; measured by the suite on the same box."),
    "unified": Family("Unified memory: CuPy allocators and managed placements", workload=("pattern", "fraction"),
                      ceilings=("device_copy", "h2d_pinned", "h2d_pageable"),
                      note="fraction is the working set as a share of the card's memory.",
                      baseline=(("allocator", "device_pool"), ("placement", "resident"))),
    "out_of_core": Family("Out-of-core streaming: explicit chunked copies", workload=("pattern", "fraction"),
                          ceilings=("h2d_pinned", "d2h_pinned", "duplex_pinned")),
    "unified_seed": Family("Unified memory: the seed scenario (managed pool)", workload=("fraction",),
                           ceilings=("device_copy",)),
    "parallel_resnet50": Family("Data versus model parallel: ResNet50", workload=("device", "batch", "image_size"),
                                ceilings=("matmul_fp32", "p2p_copy"), baseline=(("strategy", "single"),),
                                note="batch is the global batch; gpus counts CPU workers where device is cpu."),
    "parallel_lm": Family("Data versus model parallel: transformer LM",
                          workload=("device", "batch", "depth", "width", "seq_len"),
                          ceilings=("matmul_fp32", "p2p_copy"), baseline=(("strategy", "single"),),
                          note="batch is the global batch, in sequences; gpus counts CPU workers where device is cpu."),
    "tricks": Family("Everyday memory tricks: accumulation, precision, checkpointing, caps, embeddings",
                     workload=("device", "workload", "batch", "vocab", "width", "depth", "seq_len"),
                     ceilings=("matmul_fp32", "matmul_tf32", "matmul_fp16", "matmul_bf16", "h2d_pinned"),
                     # fp32 on the whole card: a way out under an emulated card reads against the plain
                     # run the card allows, never against another way out (fp32 accumulated under 16 GB)
                     baseline=(("technique", "fp32"), ("budget", "card")), matched=("micro_batch",),
                     note="Compare loss_last in each check with the fp32 row of the same workload (same seed, "
                          "same steps): a technique that hurts training shows there."),
    "try": Family("A model you bring, under each way out and each card",
                  baseline=(("technique", "fp32"), ("budget", "card")),
                  workload=("device", "target", "batch", "seq_len"),
                  note="A card's answer is the way run under its budget; every way ran on the whole card."),
    "fits": Family("What fits: the largest batch under each memory budget", pareto=False,
                   workload=("device", "workload", "over", "vocab", "width", "depth", "seq_len"),
                   note="The answer (max_batch or max_seq_len) is in each record's check and in the first "
                        "table; in the second, the timed step is the search, not training.", answer="budget"),
    # The workload is what a reader holds fixed (the model and its size); the pool is the way out.
    "chainer_cnn": Family("Chainer CNN: CuPy memory pools", workload=("device", "batch"),
                          baseline=(("pool", "device_pool"),)),
    "chainer_mlp": Family("Chainer MLP: CuPy memory pools", workload=("device", "batch"),
                          baseline=(("pool", "device_pool"), ("budget", "card"))),
    "chainer_gcn": Family("Chainer GCN: CuPy memory pools", workload=("device", "nodes", "features"),
                          baseline=(("pool", "device_pool"), ("budget", "card"))),
    "torch_gcn": Family("PyTorch GCN", workload=("device", "nodes", "features")),
    "seed000": Family("Seed 000's arrays under a 16 GB budget", workload=("budget",),
                      baseline=(("way", "device_pool"),)),
    "fragmentation": Family("Allocator settings on training that fragments",
                            workload=("device", "workload", "shapes", "precision", "budget", "batch", "vocab",
                                      "width", "depth"),
                            baseline=(("allocator", "default"),),
                            note="fragmentation in each check is reserved over allocated at their peaks."),
    "fragmentation_cupy": Family("CuPy's pools on attention that fragments",
                                 workload=("shapes", "budget", "batch", "width", "depth"),
                                 baseline=(("pool", "device_pool"),)),
    "beyond": Family("Beyond the card: working sets larger than its memory", workload=("budget", "pattern", "times"),
                     baseline=(("way", "device_pool"),)),
}


MEMORY_NAMES = {"device": "peak device memory gain", "host": "peak host RSS"}


def memory_name(case: str) -> str:
    """The words a page names its memory figure by, in a table and on a chart's axis alike."""
    return MEMORY_NAMES[family(case).memory]


def family(case: str) -> Family:
    return FAMILIES.get(case, Family(title=case))
