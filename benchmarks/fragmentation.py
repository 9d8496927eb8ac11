"""Allocator settings as a way out, on training that fragments: the LM (12 blocks, width 1024, vocab
32000, Adam, bf16 autocast) over sequence lengths drawn from 128 to 4096 at 16,384 tokens a step,
ResNet50 over image sides from 224 to 1024 at seed 003's pixels a step (10 images of 1024 x 1024),
each beside the same training at one shape; CuPy's pools on attention of the same lengths; and the
largest LM batch that fits a 24 GB card under each setting. Each case's setting is put in its own
fresh process's environment before torch is imported. asv tracks the step and the bytes the
allocator held (reserved, CuPy's pool total): the figure fragmentation moves."""
from harness.measure.instruments.memory import reserved_peak
from harness.workloads.training.allocator import CUPY, TORCH

from benchmarks.common import _Case
from benchmarks.tricks import GPU_LM, _Fits

TORCH_SETTINGS = list(TORCH)
LM = {"device": "cuda", "workload": "lm", "precision": "bf16_autocast", "batch": 16, "references": "drop", "draws": 0,
      "vocab": 32000, "width": 1024, "depth": 12}
RESNET = {**LM, "workload": "resnet50", "batch": 10}  # vocab, width and depth do not apply to it


class _Reserved(_Case):
    def track_peak_reserved_bytes(self, *values):
        return reserved_peak(self.record.memory)

    track_peak_reserved_bytes.unit = "bytes"


class LmShapes(_Reserved):
    """The LM over lengths from 128 to 4096 at 16,384 tokens a step (every length, or the powers of
    two that bucketed batching uses), and at 1024 every step."""
    case = "fragmentation"
    fixed = {**LM, "budget": "card"}
    param_names = ["shapes", "allocator"]
    params = [["uniform128-4096", "pow2_128-4096", "fixed1024"], TORCH_SETTINGS]


class LmEverydayLoop(_Reserved):
    """The LM in the everyday loop (``out = model(x)``, ``loss = ...``, ``zero_grad(set_to_none=False)``
    at the top of each step): the last step's logits, at the last step's length, and the zeroed
    gradients live through the next forward."""
    case = "fragmentation"
    fixed = {**LM, "budget": "card", "references": "keep"}
    param_names = ["shapes", "allocator"]
    params = [["uniform128-4096", "pow2_128-4096"], TORCH_SETTINGS]


class LmDrawOrder(_Reserved):
    """The everyday loop over every length, the lengths drawn in other orders (seeds 1 and 2; seed
    0 is ``LmEverydayLoop``'s): what the default allocator reserves depends on the order in which
    the shapes arrive."""
    case = "fragmentation"
    fixed = {**{k: v for k, v in LM.items() if k != "draws"}, "budget": "card", "references": "keep",
             "shapes": "uniform128-4096"}
    param_names = ["draws", "allocator"]
    params = [[1, 2], TORCH_SETTINGS]


class ResnetShapes(_Reserved):
    """ResNet50 over image sides from 224 to 1024 (by 32) at 10 x 1024 x 1024 pixels a step, and at
    1024 every step."""
    case = "fragmentation"
    fixed = {**RESNET, "budget": "card"}
    param_names = ["shapes", "allocator"]
    params = [["uniform224-1024", "fixed1024"], TORCH_SETTINGS]


class LmBudget(_Reserved):
    """The fragmenting LM on a 24 GB card: more is reserved than that with torch's default
    allocator, less is allocated."""
    case = "fragmentation"
    fixed = {**LM, "shapes": "uniform128-4096"}
    param_names = ["allocator", "budget"]
    params = [TORCH_SETTINGS, ["24GB"]]


class ResnetBudget(_Reserved):
    """The fragmenting ResNet50 on a 16 GB card."""
    case = "fragmentation"
    fixed = {**RESNET, "shapes": "uniform224-1024"}
    param_names = ["allocator", "budget"]
    params = [TORCH_SETTINGS, ["16GB"]]


class CupyPools(_Reserved):
    """CuPy's default pool, its async pool and a pool with a limit, on attention over the LM's lengths."""
    case = "fragmentation_cupy"
    fixed = {"budget": "card", "batch": 16, "width": 128, "depth": 12}
    param_names = ["pool", "shapes"]
    params = [list(CUPY), ["uniform128-4096", "fixed1024"]]


class WhatFitsAllocator(_Fits):
    """The largest batch of 1024-token sequences of the LM in bf16 autocast on a 24 GB card, under
    each allocator setting (``allocator=default`` is ``tricks.WhatFits``'s search)."""
    fixed = {**GPU_LM, "over": "batch", "technique": "bf16_autocast", "budget": "24GB"}
    param_names = ["allocator"]
    params = [TORCH_SETTINGS]

    def track_budget_bytes_per_sample(self, *values):
        return self.record.check["budget_bytes_per_sample"]

    track_budget_bytes_per_sample.unit = "bytes"
