"""How much of the suite a run covers: asv ``--bench`` expressions per profile.

asv matches each expression against ``module.Class.method(param, ...)``, parameters as Python
literals, so a profile can take one parameter set of a class and leave the rest.

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

# Half precision on a CPU without bf16/fp16 units runs on slow reference kernels (seconds a step
# on two cores) and says nothing about cards: the standard CPU part leaves those techniques out.
CPU = [r"^ceilings\.Host\.", r"^chainer_pool\.\w+Cpu\.", r"^parallel\.LmCpu",
       r"^tricks\.TricksCpu\.\w+\('(fp32|tf32|checkpoint|pad_longest|seq_cap|cpu_embedding|tied_embeddings|"
       r"save_on_cpu|cpu_offload|drop_references|keep_references)'\)"]

QUICK = [
    r"^ceilings\.Host\.\w+\('host_copy'\)", r"^ceilings\.Device\.\w+\('device_copy'\)",
    r"^unified\.Allocators\.\w+\('managed_pool', 'stream', 0\.1\)",
    r"^chainer_pool\.GcnCpu\.", r"^chainer_pool\.Gcn\.\w+\('managed_pool', 16384\)",
    r"^parallel\.LmCpuSingle\.", r"^parallel\.LmSingle\.",
    r"^tricks\.TricksCpu\.\w+\('fp32'\)", r"^tricks\.Techniques\.\w+\('lm', 'fp32'\)",
]

STANDARD = CPU + [
    r"^ceilings\.(Device|Peer|Pageable)\.",
    r"^unified\.Allocators\.\w+\('\w+', 'stream', 0\.1\)", r"^unified\.OutOfCore\.\w+\('stream', 0\.1\)",
    r"^unified\.Seed\.\w+\(0\.4\)",
    r"^chainer_pool\.(Gcn|TorchGcn)\.\w+\(('\w+', )?16384\)", r"^chainer_pool\.Mlp\.\w+\('\w+', 4096\)",
    r"^parallel\.LmSingle\.", r"^parallel\.ResnetSingle\.\w+\(1024\)",
    r"^tricks\.Techniques\.\w+\('lm', ",
    r"^tricks\.ResnetSeed\.\w+\('resnet50_1024', ", r"^tricks\.ResnetSeed\.\w+\('resnet50_2048', '(fp32|bf16_autocast|checkpoint)'\)",
]

# CuPy and Chainer past an emulated card: out-of-core at the sizes its chunk rule must hold, the
# beyond ways at 16 GB (and 1.5 x 24 and 40 GB), seed 000 under 16 GB, the Chainer MLP past 16 GB.
BUDGET_CUPY = [
    r"^unified\.OutOfCore\.", r"^unified\.Beyond\.\w+\('\w+', '\w+', '16GB', ",
    r"^unified\.Beyond\.\w+\('\w+', '\w+', '(24|40)GB', 1\.5\)", r"^unified\.Seed000\.\w+\('\w+', '16GB'\)",
    r"^chainer_pool\.MlpBeyond\.",
]

# Seed 003 on one GPU first, at 16 GB, where fp32 does not fit (1024 x 1024, every way out and
# the accumulations, then 2048 x 2048), then the other budgets; the parallel cases' one-GPU rows
# (single, dp, ddp and fsdp on one GPU); the LM's new ways out, its long sequences, and the whole
# of seed 001's and 002's what-fits tables (every technique under every budget).
WAYS_OUT_LM = "(save_on_cpu|cpu_offload|drop_references|keep_references)"
# Seed 003's ways combined under 16 GB, the ten of ``benchmarks.tricks.Seed003Combined`` that take
# about five minutes of one GPU (its docstring says which and why), after fp32 on the whole card,
# whose curve their checks read.
SEED_003_COMBINED = [
    r"^tricks\.ResnetSeed\.\w+\('resnet50_(1024|2048)', 'fp32'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_1024', 'tf32', [52], '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_1024', '(tf32|bf16_autocast)\+checkpoint', 10, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_1024', 'bf16_autocast\+(save_on_cpu|cpu_offload)', 10, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_2048', 'bf16_autocast', 2, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_2048', '(bf16|fp16)_autocast\+checkpoint', 10, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_2048', 'tf32\+checkpoint', 5, '16GB'\)",
]
BUDGET_TORCH = [
    r"^tricks\.Seed003Budget\.\w+\('resnet50_1024', '\w+', '16GB'\)",
    r"^tricks\.Seed003Accumulation\.\w+\('resnet50_1024', \d+, '16GB'\)",
    r"^tricks\.Seed003Budget\.\w+\('resnet50_2048', '\w+', '16GB'\)",
    r"^tricks\.Seed003Accumulation\.\w+\('resnet50_2048', \d+, '16GB'\)",
    r"^tricks\.Seed003(Budget|Accumulation)\.\w+\('resnet50_\d+', [^)]*'(24GB|40GB|80GB)'\)",
    SEED_003_COMBINED[0], r"^tricks\.Seed003Combined\.",
    r"^parallel\.(Resnet|Lm)Single\.",
    r"^parallel\.ResnetDataParallel\.\w+\('(dp|ddp|fsdp)', 1, \d+\)",
    r"^parallel\.LmDataParallel\.\w+\('(dp|ddp|fsdp)', 1\)",
    rf"^tricks\.Techniques\.\w+\('lm', '{WAYS_OUT_LM}'\)",
    r"^tricks\.LongSequence\.",
    r"^tricks\.WhatFitsSequence\.",
    r"^tricks\.WhatFits\.",
    r"^tricks\.WhatFitsCombined\.",
]

# The LM that fragments on the whole card under every setting but the gc threshold (which acts
# under a cap), over bucketed lengths (the powers of two) under the default, expandable segments
# and cudaMallocAsync, both again in the everyday loop (the last step's outputs and zeroed
# gradients kept), every length in that loop drawn in two more orders, and on a 24 GB card under
# all five; ResNet50 that fragments under the default, expandable segments and cudaMallocAsync;
# both at one shape under the default; CuPy's three pools; and the what-fits search the default
# has no record of (``tricks.WhatFits`` searches the default's).
FRAGMENTATION = [
    r"^fragmentation\.LmShapes\.\w+\('uniform128-4096', '(default|expandable|async|split512)'\)",
    r"^fragmentation\.LmShapes\.\w+\('pow2_128-4096', '(default|expandable|async)'\)",
    r"^fragmentation\.LmEverydayLoop\.\w+\('(uniform128-4096|pow2_128-4096)', '(default|expandable|async)'\)",
    r"^fragmentation\.LmDrawOrder\.\w+\([12], '(default|expandable|async)'\)",
    r"^fragmentation\.LmShapes\.\w+\('fixed1024', 'default'\)",
    r"^fragmentation\.LmBudget\.\w+\('\w+(\.\d)?', '24GB'\)",
    r"^fragmentation\.ResnetShapes\.\w+\('uniform224-1024', '(default|expandable|async)'\)",
    r"^fragmentation\.ResnetShapes\.\w+\('fixed1024', 'default'\)",
    r"^fragmentation\.CupyPools\.",
    r"^fragmentation\.WhatFitsAllocator\.\w+\('expandable'\)",
]

VERSIONS = [
    r"^unified\.Allocators\.\w+\('\w+', 'stream', 0\.1\)", r"^unified\.OutOfCore\.\w+\('stream', 0\.1\)",
    r"^unified\.Seed000\.\w+\('\w+', '16GB'\)",
    r"^chainer_pool\.Gcn\.\w+\('\w+', 16384\)", r"^chainer_pool\.Mlp\.\w+\('\w+', 4096\)",
]

PROFILES = {"quick": QUICK, "standard": STANDARD, "budget": BUDGET_CUPY + BUDGET_TORCH, "versions": VERSIONS,
            "fragmentation": FRAGMENTATION, "full": []}


def benchmarks(profile: str) -> list[str]:
    """asv ``--bench`` expressions of ``profile`` (none: everything)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    return PROFILES[profile]
