"""Allocator settings on workloads that fragment: what PyTorch's out-of-memory message tells people
to try ("If reserved but unallocated memory is large try setting
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), priced on training whose shapes change every
step, and on the same training at one shape.

Parameters:
- ``device``: cpu or cuda (on the CPU only ``allocator=default`` runs: the settings configure
  torch's CUDA allocator);
- ``workload``: ``lm`` (the decoder-only transformer of ``harness.workloads.training.models``) or
  ``resnet50``, both trained with Adam;
- ``precision``: ``bf16_autocast`` (the GPU classes: what people who need memory train in) or
  ``fp32`` (TF32 off; bf16 on a CPU without bf16 units runs on slow reference kernels);
- ``shapes``: the distribution of each step's size (``harness.workloads.training.fragmenting``):
  ``uniform128-4096`` (LM sequence lengths, every one), ``pow2_128-4096`` (LM sequence lengths,
  the powers of two: bucketed batching), ``uniform224-1024`` (ResNet50 image sides, by 32),
  ``fixed1024`` (either at one shape), ``uniform16-64``, ``pow2_16-64`` and ``fixed32`` (small,
  for the CPU);
- ``allocator``: ``default``, ``expandable``, ``async``, ``gc0.6`` or ``split512``
  (``harness.workloads.training.allocator``), put in the environment of the case's fresh process before
  torch is imported, and verified against the backend torch runs;
- ``budget``: the card emulated (``harness.measure.guards.budget``), torch's allocator capped at it;
  under ``async`` the cap holds the bytes in use, not the driver pool's reserve, which the
  check compares with the budget instead (``reserved_over_budget``);
- ``batch``: the step's work, as many tokens (LM) or pixels (ResNet50) as ``batch`` samples of
  1024 (tokens, or 1024 x 1024 pixels) hold: 16 for the LM's 16,384 tokens, 10 for seed 003's
  images;
- ``references``: ``drop`` (the suite's loop: each step's outputs and loss dropped before the
  next, gradients set to None) or ``keep`` (the everyday loop, ``out = model(x)``, ``loss = ...``
  and ``zero_grad(set_to_none=False)`` at the top of each step: the last step's outputs, of the
  last step's shape, and the zeroed gradients live through the next forward);
- ``draws``: the seed of the sizes' draws (0, 1 or 2): the same distribution met in another order,
  the model and its data unchanged (the default allocator's reserve depends on the order in which
  the shapes arrive);
- ``vocab``, ``width``, ``depth``: the LM (ResNet50 ignores them).

The check: every loss finite and the last below the first; the sizes the steps drew; torch's peaks
of allocated and reserved bytes over the timed steps and ``fragmentation``, reserved over
allocated; what the allocator ran with (``allocator_backend``, ``allocator_settings``) and how
often it had to free its cache and retry a request (``num_alloc_retries``).
"""
from __future__ import annotations

import contextlib

from harness.cases.base import Case
from harness.measure.guards.budget import BUDGETS, Budget, torch_capped
from harness.measure.outcomes import Skip, learned
from harness.measure.guards.requirements import need_torch
from harness.measure.instruments.timing import torch_sync
from harness.measure.workload import Workload
from harness.workloads.training import allocator as settings
from harness.workloads.training.fragmenting import IMAGE_STRIDE, SHAPES, WORKLOADS, shapes_of

CASE_NAME = "fragmentation"
LM_SHAPES = ("uniform128-4096", "pow2_128-4096", "fixed1024", "uniform16-64", "pow2_16-64", "fixed32")
IMAGE_SHAPES = ("uniform224-1024", "fixed1024")
PARAMS = {"device": ("cpu", "cuda"), "workload": WORKLOADS, "shapes": SHAPES, "allocator": tuple(settings.TORCH),
          "precision": ("bf16_autocast", "fp32"), "budget": BUDGETS, "batch": (1, 10, 16),
          "references": ("drop", "keep"), "draws": (0, 1, 2), "vocab": (128, 32000), "width": (32, 1024),
          "depth": (2, 12)}
STATS = ("num_alloc_retries", "num_device_alloc", "num_device_free")


def applies(device: str, workload: str, shapes: str, allocator: str) -> None:
    """Skips a pairing that means nothing; the values themselves were checked by the case's config."""
    if shapes not in (LM_SHAPES if workload == "lm" else IMAGE_SHAPES):
        raise Skip(f"shapes {shapes} are not {workload}'s: use one of "
                   f"{', '.join(LM_SHAPES if workload == 'lm' else IMAGE_SHAPES)}")
    if device != "cuda" and allocator != "default":
        raise Skip(f"allocator {allocator} configures torch's CUDA allocator: run it with device=cuda on a GPU box, "
                   "or with allocator=default here")


def build(device, workload, shapes, allocator, precision, budget, batch, references, draws, vocab, width,
          depth) -> Workload:
    applies(device, workload, shapes, allocator)
    if device == "cuda":
        settings.apply_torch(allocator)  # first of all: torch reads it when it is imported
    torch = need_torch(device)
    from harness.workloads.training.fragmenting import lm_trainer, resnet_trainer
    from harness.workloads.training.precision import float32_matmul, precision as precision_of
    dist = shapes_of(shapes)
    with contextlib.ExitStack() as stack:
        cap = torch_capped(stack, device, budget)  # before anything is allocated
        stack.enter_context(float32_matmul(False))  # fp32 is the reference: TF32 off, as in tricks
        keep = references == "keep"
        if workload == "lm":
            step, trainer, per_step = lm_trainer(device, dist, batch, vocab, width, depth, precision_of(precision),
                                                 keep_references=keep, draws=draws)
        else:
            step, trainer, per_step = resnet_trainer(device, dist, batch, precision_of(precision),
                                                     keep_references=keep, draws=draws)
        setting = stack.pop_all()
    cuda = device == "cuda"

    def check():
        peaks = _peaks(torch, cap.budget, allocator) if cuda else {}  # first: they are the steps' own
        ran = settings.verified(allocator, settings.in_force(torch)) if cuda else {}
        return {**learned(trainer.losses), "losses": [float(v) for v in trainer.losses],
                "sizes": step.sizes.drawn[:step.done], "size_stride": 1 if workload == "lm" else IMAGE_STRIDE,
                "per_step": per_step, **peaks, **ran}

    gpus = (0,) if cuda else ()
    # The step's budget, as the tables rate it: tokens (a step trains within one sequence of it),
    # or ResNet50's pixels in 1024 x 1024 images (its images change size: their count does not compare).
    work = {"tokens": per_step} if workload == "lm" else {"samples": batch}
    # Fragmentation builds up over many shapes; on the CPU no caching allocator fragments, and a few
    # steps show the case works.
    warmup, repeat = (3, 20) if cuda else (2, 6)
    return Workload(step=step, sync=torch_sync(gpus), check=check, work=work, gpus=gpus, warmup=warmup,
                    repeat=repeat, close=setting.close, budget=cap.budget)


def _peaks(torch, budget: Budget | None, allocator: str) -> dict:
    """The steps' peaks and allocator counts on device 0; under cudaMallocAsync and a ``budget``
    (None: the whole card), whether its reserve went past the budget."""
    from harness.measure.instruments.memory import torch_peaks
    peaks = torch_peaks(torch.cuda, 0)
    stats = torch.cuda.memory_stats(0)
    peaks.update({k: stats[k] for k in STATS if k in stats})
    if allocator == "async" and budget is not None:
        # cudaMallocAsync's memory fraction caps the bytes torch has in use, not the pool's reserve.
        peaks["reserved_over_budget"] = peaks["peak_reserved"] > budget.limit_bytes
    return peaks


CASE = Case(name=CASE_NAME, params=PARAMS, build=build, doc=__doc__, allocator=lambda **_: "torch",
            earlier={"references": "drop", "draws": 0})
