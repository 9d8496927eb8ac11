"""How much of the suite a run covers: the benchmark classes each profile selects, declared
(``harness.report.selection.Select``), and the asv ``--bench`` expressions written from them.

asv matches each expression against ``module.Class.method(param, ...)``, parameters as Python
literals, so a profile can take some parameter sets of a class and leave the rest.

- ``quick``: one value per family, to see the suite work (minutes on one GPU);
- ``standard``: what the comparison pages need to compare cards: every ceiling, the managed
  pool against the device pool, Chainer's pools, the single-GPU training baselines and every
  trick on the language model;
- ``budget``: working sets past emulated 16 to 80 GB cards, by every way out and without one
  (``BUDGET_CUPY``: CuPy and Chainer; ``BUDGET_TORCH``: the PyTorch family);
- ``versions``: the CuPy and Chainer cases that compare library stacks on one box (run under
  two interpreters, e.g. one made by ``harness stack``): the managed, async and device pools,
  out-of-core, seed 000's arrays under 16 GB and Chainer's pools; the pinned copy ceilings their
  rates are read against come from one interpreter, in a run of their own;
- ``fragmentation``: the allocator settings on training that fragments (GPU calls of minutes: the
  LM under every setting, over bucketed lengths and in the everyday loop (its lengths drawn in
  three orders) under the default, ``expandable`` and ``async``, ResNet50 under those three, both
  at one shape under the default, CuPy's pools, and what fits on a 24 GB card with expandable
  segments); ``full`` adds the other settings;
- ``full``: every benchmark and parameter set (hours: the what-fits searches alone take many
  minutes each).

asv runs what a profile selects in its own order, not the profile's: where a deadline may cut a
run short, run the first expressions alone first (``--bench``).
"""
from __future__ import annotations

from harness.report.selection import Select
from harness.workloads.training import ways
from harness.workloads.training.tricks import IMAGE_ONLY, TECHNIQUES

# Half precision on a CPU without bf16/fp16 units runs on slow reference kernels (seconds a step
# on two cores) and says nothing about cards: the standard CPU part leaves those techniques out,
# and channels_last, which the CPU's LM skips.
HALF_PRECISIONS = ways.HALF
# What torch.compile builds on the first step takes minutes on two cores, and its price is the
# GPU's question; a knob with no CPU kernel only skips: the CPU part leaves those ways out too,
# and those whose price is the GPU's question alone (``Value.gpu_priced``).
CPU_TECHNIQUES = tuple(t for t in TECHNIQUES
                       if t not in HALF_PRECISIONS + IMAGE_ONLY + ways.COMPILES + ways.CUDA_ONLY + ways.GPU_PRICED)
CPU = [Select("ceilings", "Host"), Select("chainer_pool", "GcnCpu", "TorchGcnCpu", "MlpCpu", "CnnCpu"),
       Select("parallel", "LmCpuSingle", "LmCpu", "LmCpuPipeline"),
       Select("tricks", "TricksCpu", technique=CPU_TECHNIQUES)]

QUICK = [
    Select("ceilings", "Host", probe="host_copy"), Select("ceilings", "Device", probe="device_copy"),
    Select("unified", "Allocators", allocator="managed_pool", pattern="stream", fraction=0.1),
    Select("chainer_pool", "GcnCpu"), Select("chainer_pool", "Gcn", pool="managed_pool", nodes=16384),
    Select("parallel", "LmCpuSingle"), Select("parallel", "LmSingle"),
    Select("tricks", "TricksCpu", technique="fp32"), Select("tricks", "Techniques", workload="lm", technique="fp32"),
]

STANDARD = CPU + [
    Select("ceilings", "Device", "Peer", "Pageable"),
    Select("unified", "Allocators", pattern="stream", fraction=0.1),
    Select("unified", "OutOfCore", pattern="stream", fraction=0.1),
    Select("unified", "Seed", fraction=0.4),
    Select("chainer_pool", "Gcn", "TorchGcn", nodes=16384), Select("chainer_pool", "Mlp", batch=4096),
    Select("parallel", "LmSingle"), Select("parallel", "ResnetSingle", image_size=1024),
    Select("tricks", "Techniques", workload="lm"),
    Select("tricks", "ResnetSeed", workload="resnet50_1024"),
    Select("tricks", "ResnetSeed", workload="resnet50_2048", technique=("fp32", "bf16_autocast", "checkpoint")),
]

# CuPy and Chainer past an emulated card: out-of-core at the sizes its chunk rule must hold, the
# beyond ways at 16 GB (and 1.5 x 24 and 40 GB), seed 000 under 16 GB, the Chainer MLP past 16 GB.
BUDGET_CUPY = [
    Select("unified", "OutOfCore"), Select("unified", "Beyond", budget="16GB"),
    Select("unified", "Beyond", budget=("24GB", "40GB"), times=1.5), Select("unified", "Seed000", budget="16GB"),
    Select("chainer_pool", "MlpBeyond"),
]

# Seed 003 on one GPU first, at 16 GB, where fp32 does not fit (1024 x 1024, every way out and
# the accumulations, then 2048 x 2048), then the other budgets; the parallel cases' one-GPU rows
# (single, dp, ddp and fsdp on one GPU); the LM's new ways out, its long sequences, and the whole
# of seed 001's and 002's what-fits tables (every technique under every budget).
WAYS_OUT_LM = ("save_on_cpu", "cpu_offload", "drop_references", "keep_references")
# Seed 003's ways combined under 16 GB, the ten of ``benchmarks.tricks.Seed003Combined`` that take
# about five minutes of one GPU (its docstring says which and why), after fp32 on the whole card,
# whose curve their checks read.
SEED_003_16GB = {"budget": "16GB"}
SEED_003_COMBINED = [
    Select("tricks", "ResnetSeed", technique="fp32"),
    Select("tricks", "Seed003Combined", workload="resnet50_1024", technique="tf32", micro_batch=(5, 2),
           **SEED_003_16GB),
    Select("tricks", "Seed003Combined", workload="resnet50_1024",
           technique=("tf32+checkpoint", "bf16_autocast+checkpoint"), micro_batch=10, **SEED_003_16GB),
    Select("tricks", "Seed003Combined", workload="resnet50_1024",
           technique=("bf16_autocast+save_on_cpu", "bf16_autocast+cpu_offload"), micro_batch=10, **SEED_003_16GB),
    Select("tricks", "Seed003Combined", workload="resnet50_2048", technique="bf16_autocast", micro_batch=2,
           **SEED_003_16GB),
    Select("tricks", "Seed003Combined", workload="resnet50_2048",
           technique=("bf16_autocast+checkpoint", "fp16_autocast+checkpoint"), micro_batch=10, **SEED_003_16GB),
    Select("tricks", "Seed003Combined", workload="resnet50_2048", technique="tf32+checkpoint", micro_batch=5,
           **SEED_003_16GB),
]
BUDGET_TORCH = [
    Select("tricks", "Seed003Budget", workload="resnet50_1024", **SEED_003_16GB),
    Select("tricks", "Seed003Accumulation", workload="resnet50_1024", **SEED_003_16GB),
    Select("tricks", "Seed003Budget", workload="resnet50_2048", **SEED_003_16GB),
    Select("tricks", "Seed003Accumulation", workload="resnet50_2048", **SEED_003_16GB),
    Select("tricks", "Seed003Budget", "Seed003Accumulation", budget=("24GB", "40GB", "80GB")),
    SEED_003_COMBINED[0], Select("tricks", "Seed003Combined"),
    Select("parallel", "ResnetSingle", "LmSingle"),
    Select("parallel", "ResnetDataParallel", gpus=1),
    Select("parallel", "LmDataParallel", gpus=1),
    Select("tricks", "Techniques", workload="lm", technique=WAYS_OUT_LM),
    Select("tricks", "LongSequence"),
    Select("tricks", "WhatFitsSequence"),
    Select("tricks", "WhatFits"),
    Select("tricks", "WhatFitsCombined"),
]

# The LM that fragments on the whole card under every setting but the gc threshold (which acts
# under a cap), over bucketed lengths (the powers of two) under the default, expandable segments
# and cudaMallocAsync, both again in the everyday loop (the last step's outputs and zeroed
# gradients kept), every length in that loop drawn in two more orders, and on a 24 GB card under
# all five; ResNet50 that fragments under the default, expandable segments and cudaMallocAsync;
# both at one shape under the default; CuPy's three pools; and the what-fits search the default
# has no record of (``tricks.WhatFits`` searches the default's).
THREE_SETTINGS = ("default", "expandable", "async")
FRAGMENTATION = [
    Select("fragmentation", "LmShapes", shapes="uniform128-4096", allocator=THREE_SETTINGS + ("split512",)),
    Select("fragmentation", "LmShapes", shapes="pow2_128-4096", allocator=THREE_SETTINGS),
    Select("fragmentation", "LmEverydayLoop", shapes=("uniform128-4096", "pow2_128-4096"), allocator=THREE_SETTINGS),
    Select("fragmentation", "LmDrawOrder", draws=(1, 2), allocator=THREE_SETTINGS),
    Select("fragmentation", "LmShapes", shapes="fixed1024", allocator="default"),
    Select("fragmentation", "LmBudget", budget="24GB"),
    Select("fragmentation", "ResnetShapes", shapes="uniform224-1024", allocator=THREE_SETTINGS),
    Select("fragmentation", "ResnetShapes", shapes="fixed1024", allocator="default"),
    Select("fragmentation", "CupyPools"),
    Select("fragmentation", "WhatFitsAllocator", allocator="expandable"),
]

VERSIONS = [
    Select("unified", "Allocators", pattern="stream", fraction=0.1),
    Select("unified", "OutOfCore", pattern="stream", fraction=0.1),
    Select("unified", "Seed000", budget="16GB"),
    Select("chainer_pool", "Gcn", nodes=16384), Select("chainer_pool", "Mlp", batch=4096),
]

DEFAULT = "standard"  # what `harness run` runs without --profile (and `todo` checks)
PROFILES = {"quick": QUICK, "standard": STANDARD, "budget": BUDGET_CUPY + BUDGET_TORCH, "versions": VERSIONS,
            "fragmentation": FRAGMENTATION, "full": []}


def expressions(selects: list[Select]) -> list[str]:
    """asv's ``--bench`` expressions, one per declaration, its parameters placed as its class orders them."""
    from harness.drive.asv import catalog  # the suite's classes: read where a run is chosen, not at every command
    names = catalog.param_names()
    return [s.expression(names) for s in selects]


def benchmarks(profile: str) -> list[str]:
    """asv ``--bench`` expressions of ``profile`` (none: everything)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    return expressions(PROFILES[profile])
