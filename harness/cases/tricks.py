"""The everyday memory tricks, each a parameter over the same training step.

Parameters:
- ``device``: cpu or cuda;
- ``workload``: ``lm`` (the decoder-only transformer of ``harness.workloads.training.models``; long sequences are
  the same model at a large ``seq_len``), ``encdec`` (encoder-decoder, a copy task) or
  ``resnet50`` (torchvision, 1000 classes) on 224 x 224 images, ``resnet50_1024`` and
  ``resnet50_2048`` on 1024 x 1024 and 2048 x 2048 (``vocab``, ``width``, ``depth`` and
  ``seq_len`` do not apply to it and are ignored);
- ``technique``: a precision (``fp32``, the reference; ``tf32``, ``fp16_autocast`` with a
  GradScaler, ``bf16_autocast``, ``bf16_params``), ``checkpoint`` (every block recomputed in
  backward), ``pad_longest`` and ``seq_cap`` (a batch with one sequence 4 x longer than the
  rest, padded to the longest, or cut at ``seq_len`` first), ``cpu_embedding`` (the token
  embedding on the CPU, the rest on the device), ``tied_embeddings`` (input and output
  embedding one matrix; for ``encdec`` the encoder's, decoder's and output's),
  ``channels_last`` (ResNet's weights and images in NHWC memory format), ``save_on_cpu`` (what
  autograd saves for backward kept in host memory, pinned on CUDA:
  ``torch.autograd.graph.save_on_cpu``), ``cpu_offload`` (parameters, gradients and optimizer
  state in host memory, FSDP2's ``CPUOffloadPolicy`` on one device:
  ``harness.workloads.training.offload``), ``drop_references`` (the loop every technique runs: the
  previous step's logits, outputs and loss dead before the next forward, gradients set to None)
  and ``keep_references`` (the everyday loop that keeps them alive into the next forward, and
  zeroed gradients allocated: what ``drop_references`` is measured against; both LM only),
  the optimizer's state (``adamw8bit``: torchao's 8-bit moments; ``adam_bf16_state``: Adam's
  moments in bf16; ``adafactor``; ``sgd_momentum``: ``harness.workloads.training.optimizers``),
  ``lora`` (peft's adapters of rank 16 on every block's attention and MLP, the LM frozen; LM only),
  ``qlora`` (the same, the MLP's frozen weights in torchao's 4-bit NF4; LM only),
  the attention kernel (``attn_eager``: the scores written out; ``attn_flash``,
  ``attn_mem_efficient``: SDPA's kernels alone; token models only), ``compile`` and
  ``compile_max_autotune`` (torch.compile, its mode max-autotune-no-cudagraphs), and
  ``chunked_loss`` (the output projection and cross-entropy over chunks of 1024 tokens; LM only);
  or a combination of them, one per knob, joined by "+" (``bf16_autocast+checkpoint``; a
  ``harness.workloads.training.ways.Way``: any order is taken and filed in its one canonical order, and
  two values of one knob, two precisions say, are refused), which may add an allocator setting
  (``harness.workloads.training.allocator``'s names: ``expandable``, ``async``, ...) set before torch starts;
- ``budget``: the card emulated (``harness.measure.guards.budget``): 16GB, 24GB, 40GB, 80GB, or ``card``
  (the whole card). On CUDA torch's caching allocator is capped at it before anything is
  allocated; out of memory under it is does-not-fit. The fp32 references of the check train
  after the case with the cap lifted (the whole card: ``reference_budget``), falling back as
  below where even that does not fit; the check names the one used. On
  the CPU nothing caps an allocator: only ``card`` runs there;
- ``batch``, ``micro_batch``: the optimizer step covers ``batch`` samples in
  ``batch / micro_batch`` accumulated micro-batches (gradient accumulation when smaller);
- ``vocab``, ``width``, ``depth``, ``seq_len``: the model and data.

The harness times one optimizer step (all micro-batches). ``work`` is the target tokens the loss
counts (padding excluded, so capped and padded batches compare on useful tokens) or samples.
The check trains from seed 0 for the fixed number of timed and warm-up steps; it fails when a
loss is not finite or the last is not below the first. Then the same model, data and seed train
again in fp32 on the whole batch (``harness.workloads.training.reference.references``; where this run already
filed fp32's record at the same shape, its curve stands for that run), and every step's
loss is held within the technique's tolerance of the reference's after as many applied updates
(a step the fp16 GradScaler skipped applied none), the gap taken as a share of the first loss
(``harness.workloads.training.ways.TOLERANCE``; a combination's is the largest of its knobs'). Over it,
the reference trains four more times: the curve is then held to the nearest of its five runs, and
twice the widest gap among them (the GPU's nondeterministic sums) is allowed on top. Both curves
(the technique's and that nearest run's), the gap, the tolerance, that spread, the runs it was read
from and the reference are recorded. A way with a knob that trains other weights or by another rule
(``lora``, ``qlora``, ``adafactor``, ``sgd_momentum``) is held to its own criterion instead, named in its
check (``criterion``): its last loss below its first by ``ways.TRAINS`` of it; fp32's curve and the
gap to it are recorded beside, not held against it. A way whose first step compiles
(``compile``, and torchao's optimizers) records ``compile_s``: what that warm-up step took beyond
the second (neither is timed); one still compiling past ``trainer.COMPILE_LIMIT_S`` is stopped, and
the case skipped with that reason, inside asv's limit for a benchmark.
"""
from __future__ import annotations

import contextlib
import functools

from harness.cases.base import Case
from harness.measure.guards import budget as budgets
from harness.measure.outcomes import FAILED, CheckFailed
from harness.measure.guards.requirements import need_torch
from harness.measure.records.store import this_interpreters
from harness.measure.instruments.timing import torch_sync
from harness.measure.workload import Workload
from harness.workloads.training.tricks import (BATCHES, DEPTHS, DEVICES, IMAGE_MODELS, SEQ_LENS, TECHNIQUES,
                                               TOKEN_MODELS, VOCABS, WIDTHS, WORKLOADS, losses_checked, make_trainer,
                                               other_rate, trained)
from harness.workloads.training import allocator, ways
from harness.workloads.training.precision import process
from harness.workloads.training.reference import checked_against_reference

CASE_NAME = "tricks"
PARAMS = {"device": DEVICES, "workload": WORKLOADS, "technique": TECHNIQUES, "budget": budgets.CARD_BUDGETS,
          "batch": BATCHES, "micro_batch": BATCHES, "vocab": VOCABS, "width": WIDTHS, "depth": DEPTHS,
          "seq_len": SEQ_LENS}


def build(device, workload, technique, budget, batch, micro_batch, vocab, width, depth, seq_len,
          run_file=None) -> Workload:
    way = ways.parse(technique)  # once: every piece below is handed the Way; the record keeps the name
    ways.applies(way, workload, IMAGE_MODELS, TOKEN_MODELS)  # skips before anything runs, naming why
    ways.runnable(way, device)
    allocator.use_torch(way.allocator)  # before torch starts: its allocator reads the setting once
    budgets.uncapped_on_cpu(device, budget)
    torch = need_torch(device)
    from harness.workloads.training.models import parameter_count
    with contextlib.ExitStack() as stack:
        cap = budgets.torch_capped(stack, device, budget)  # before anything is allocated
        prec = stack.enter_context(process(way))
        trainer, work = make_trainer(device, workload, way, batch, micro_batch, vocab, width, depth, seq_len, prec)
        stack.callback(trainer.close)
        # Held for the case's life once built: close() puts the previous settings back.
        setting = stack.pop_all()
    params = parameter_count(trainer.model)
    on_device = sum(p.numel() for p in trainer.model.parameters() if p.device.type == torch.device(device).type)

    shape = dict(device=device, workload=workload, batch=batch, micro_batch=micro_batch, vocab=vocab, width=width,
                 depth=depth, seq_len=seq_len)

    # fp32's references train at the case's shape in micro-batches of their own
    train = functools.partial(trained, **{k: v for k, v in shape.items() if k != "micro_batch"})

    # float(): torchao's optimizers keep the rate as a tensor (so a new rate recompiles nothing)
    rate = float(trainer.optimizer.param_groups[0]["lr"])

    def check():
        try:
            learned = losses_checked(trainer.losses)
            # The reference is what the case is checked against, not what it measures: it trains on
            # the whole card, so that a budget too small for fp32 on the whole batch still has one.
            cap.lift()
            fp32 = fp32_curve(run_file, shape, len(trainer.losses))
            compared = checked_against_reference(way, trainer.losses, trainer.skipped, train, batch, micro_batch, fp32)
            if fp32 is not None and compared.get("reference_losses") is not None:
                compared["reference_first_run"] = "this run's fp32 record"
        except CheckFailed as e:
            e.details["lr"] = rate  # a failed record's check is what was compared: the rate too
            raise
        return {"losses": [float(v) for v in trainer.losses], **learned, **compared, "lr": rate,
                "parameters": params, "parameters_on_device": on_device,
                "accumulation_steps": batch // micro_batch, "reference_budget": budgets.CARD,
                # a way whose first step compiles: what that step took beyond the second (both warm-up)
                **({"compile_s": trainer.compile_s} if way.compiles else {})}

    gpus = (0,) if device == "cuda" else ()
    return Workload(step=trainer.step, sync=torch_sync(gpus), check=check, work=work, gpus=gpus,
                    warmup=2, repeat=10, close=setting.close, budget=cap.budget)


def fp32_curve(run_file, shape: dict, steps: int) -> list[float] | None:
    """The loss curve of fp32 on the whole batch at ``shape`` over ``steps`` steps, from an ok
    record this run filed in this interpreter (any budget: the cap changes no sum); None where
    there is none. A check holds a technique against it before training a reference of its own."""
    want = dict(shape, technique="fp32", micro_batch=shape["batch"])
    for rec in this_interpreters(run_file):
        if (rec.case == CASE_NAME and rec.ok and {k: rec.params.get(k) for k in want} == want
                and len(rec.check.get("losses", ())) == steps):
            return rec.check["losses"]
    return None


def untimed_verdict(record) -> bool:
    """Whether a record failed its loss check without the time of the steps it trained: one filed
    before a failed check kept what its steps cost. Today's check runs after the timed steps, so a
    run today prices it; a case that died or raised has no losses and is no such record."""
    return record.outcome == FAILED and "losses" in record.check and record.timing is None


def outdated(record) -> bool:
    """Whether today's run would say more than ``record``: its losses came from another Adam rate,
    or its verdict came without the step time its failed check now keeps."""
    return other_rate(record.params, record.check) or untimed_verdict(record)


CASE = Case(name=CASE_NAME, params=PARAMS, build=build, doc=__doc__, allocator=lambda **_: "torch",
            earlier={"budget": "card"}, keeps_files=True, outdated=outdated)
