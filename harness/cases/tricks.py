"""The everyday memory tricks, each a parameter over the same training step.

Parameters:
- ``device``: cpu or cuda;
- ``workload``: ``lm`` (the decoder-only transformer of ``harness.workloads.models``; long sequences are
  the same model at a large ``seq_len``), ``encdec`` (encoder-decoder, a copy task) or
  ``resnet50`` (torchvision, 1000 classes) on 224 x 224 images, ``resnet50_1024`` and
  ``resnet50_2048`` on 1024 x 1024 and 2048 x 2048 (``vocab``, ``width``, ``depth`` and
  ``seq_len`` do not apply to it and are ignored);
- ``technique``: a precision (``fp32``, the reference; ``tf32``, ``fp16_autocast`` with a
  GradScaler, ``bf16_autocast``, ``bf16_params``), ``checkpoint`` (every block recomputed in
  backward), ``pad_longest`` and ``seq_cap`` (a batch with one sequence 4 x longer than the
  rest, padded to the longest, or cut at ``seq_len`` first), ``cpu_embedding`` (the token
  embedding on the CPU, the rest on the device) and ``tied_embeddings`` (input and output
  embedding one matrix; for ``encdec`` the encoder's, decoder's and output's);
- ``batch``, ``micro_batch``: the optimizer step covers ``batch`` samples in
  ``batch / micro_batch`` accumulated micro-batches (gradient accumulation when smaller);
- ``vocab``, ``width``, ``depth``, ``seq_len``: the model and data.

The harness times one optimizer step (all micro-batches). ``work`` is the target tokens the loss
counts (padding excluded, so capped and padded batches compare on useful tokens) or samples.
The check trains from seed 0 for the fixed number of timed and warm-up steps; it fails when a
loss is not finite or the last is not below the first. Then the same model, data and seed train
again in fp32 on the whole batch (``harness.workloads.tricks.references``), and every step's
loss is held within the technique's tolerance of the reference's after as many applied updates
(a step the fp16 GradScaler skipped applied none), the gap taken as a share of the first loss
(``harness.workloads.tricks.TOLERANCE``). Over it, the reference trains once more and the gap
between its two runs (the GPU's nondeterministic sums) is allowed on top. Both curves, the gap,
the tolerance, that spread and the reference are recorded.
"""
from __future__ import annotations

import contextlib

from harness.cases.base import Case
from harness.measure.requirements import need_torch
from harness.measure.timing import torch_sync
from harness.measure.workload import Workload
from harness.workloads.tricks import (DEVICES, TECHNIQUES, WORKLOADS, checked_against_reference, losses_checked,
                                      make_trainer)

# Powers of two up to 1024, and the model-parallel example's batch of 10 (in micro-batches of 5).
BATCHES = tuple(sorted({2**k for k in range(0, 11)} | {5, 10}))
PARAMS = {"device": DEVICES, "workload": WORKLOADS, "technique": TECHNIQUES,
          "batch": BATCHES, "micro_batch": BATCHES,
          "vocab": (128, 8192, 32000, 50304, 128256, 256000),
          "width": (32, 256, 512, 1024, 2048, 4096),
          "depth": (2, 6, 12, 24),
          "seq_len": (16, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768)}


def build(device, workload, technique, batch, micro_batch, vocab, width, depth, seq_len) -> Workload:
    torch = need_torch(device)
    from harness.workloads.models import parameter_count
    from harness.workloads.training import float32_matmul
    with contextlib.ExitStack() as stack:
        stack.enter_context(float32_matmul(technique == "tf32"))
        trainer, work = make_trainer(device, workload, technique, batch, micro_batch, vocab, width, depth, seq_len)
        # Held for the case's life once built: close() puts the previous setting back.
        setting = stack.pop_all()
    params = parameter_count(trainer.model)
    on_device = sum(p.numel() for p in trainer.model.parameters() if p.device.type == torch.device(device).type)

    shape = dict(device=device, workload=workload, batch=batch, micro_batch=micro_batch, vocab=vocab, width=width,
                 depth=depth, seq_len=seq_len)

    def check():
        learned = losses_checked(trainer.losses)
        compared = checked_against_reference(technique, trainer.losses, trainer.skipped, **shape)
        return {**learned, **compared, "parameters": params, "parameters_on_device": on_device,
                "accumulation_steps": batch // micro_batch}

    gpus = (0,) if device == "cuda" else ()
    return Workload(step=trainer.step, sync=torch_sync(gpus), check=check, work=work, gpus=gpus,
                    warmup=2, repeat=10, close=setting.close)


CASE = Case(name="tricks", params=PARAMS, build=build, doc=__doc__)
