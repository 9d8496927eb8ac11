"""The everyday memory tricks (gradient accumulation, half precision, checkpointing, a sequence
cap, the embedding on the CPU, tied embeddings, vocabulary size, channels_last, activations kept
on the CPU, CPU offload, dropped references) and what fits under each GPU memory budget.
``TricksCpu`` is the newcomer's run on a box without a GPU: a small LM, seconds per technique.
The GPU classes use a GPT-2-medium-sized LM (width 1024, 12 layers, vocab 32000, 1024 tokens).
Every class runs on the whole card (``budget`` "card") but ``Seed003Budget`` and
``Seed003Accumulation``, which emulate smaller ones. The inapplicable pairs of the cross
products (``seq_cap`` on ResNet50, say) skip with the reason."""
from harness.cases.tricks import TECHNIQUES, WORKLOADS
from harness.workloads.training.tricks import PRECISION_TECHNIQUES, techniques_for
from harness.workloads.training.ways import KNOBS, NEWER_KNOBS
from harness.measure.guards.budget import BUDGETS
from harness.drive.asv.bench import measure

from benchmarks.common import FALLBACK_RESULTS, _OnDevice, _OnHost

CPU_LM = {"device": "cpu", "workload": "lm", "budget": "card",
          "batch": 8, "micro_batch": 8, "vocab": 8192, "width": 256,
          "depth": 2, "seq_len": 128}
LM_DIMS = {"vocab": 32000, "width": 1024, "depth": 12, "seq_len": 1024}
CARD = {"budget": "card"}  # the whole card: every class but the budgeted ones
GPU_LM = {"device": "cuda", "workload": "lm", **LM_DIMS}


class TricksCpu(_OnHost):
    case = "tricks"
    fixed = CPU_LM
    param_names = ["technique"]
    params = [list(TECHNIQUES)]


class Techniques(_OnDevice):
    case = "tricks"
    fixed = {"device": "cuda", "batch": 16, "micro_batch": 16, **CARD, **LM_DIMS}
    param_names = ["workload", "technique"]
    params = [["lm", "encdec"], list(TECHNIQUES)]


class ResnetSeed(_OnDevice):
    """ResNet50 as in the model-parallel example that ran out of memory on a 16 GB card: batch 10
    of 1024 x 1024 images (and 2048 x 2048), every single-GPU technique that applies to it."""
    case = "tricks"
    fixed = {"device": "cuda", "batch": 10, "micro_batch": 10, **CARD, **LM_DIMS}
    param_names = ["workload", "technique"]
    params = [[w for w in WORKLOADS if w.startswith("resnet50_")], [*PRECISION_TECHNIQUES, "checkpoint"]]


SEED_003 = {"device": "cuda", "batch": 10, **LM_DIMS}  # batch 10 of the model-parallel example; LM_DIMS unused
EMULATED = ["p100-16gb", *(b for b in BUDGETS if b != "card")]  # seed 003's card, and 16 to 80 GB allocator caps
# fp16 autocast beside bf16: the seed's 16 GB card (a P100) computes in fp16 but has no bf16. TF32
# keeps fp32's tensors, so a budget holds it as it holds fp32: no way out.
# The newer knobs (what keeps the optimizer state, LoRA, the attention kernel, compile, the loss)
# are priced on the LM (``NewerCombined``, ``AttentionLong``), not in seed 003's grid.
NEWER = [t for knob in NEWER_KNOBS for t in KNOBS[knob]]
SEED_003_WAYS_OUT = [t for t in techniques_for("resnet50_1024") if t != "tf32" and t not in NEWER]


class Seed003Budget(_OnDevice):
    """Seed 003 on one GPU under an emulated card: ResNet50 at batch 10 of 1024 x 1024 (and
    2048 x 2048) images, fp32 and every single-GPU way out, each under a 16, 24, 40 and 80 GB
    budget. Over its budget a way out is does-not-fit, recorded as such."""
    case = "tricks"
    fixed = {**SEED_003, "micro_batch": 10}
    param_names = ["workload", "technique", "budget"]
    params = [[w for w in WORKLOADS if w.startswith("resnet50_")], SEED_003_WAYS_OUT, EMULATED]


class Seed003Accumulation(_OnDevice):
    """Seed 003's batch of 10 in fp32, accumulated over micro-batches of 5, 2 and 1, under the same
    emulated cards (micro-batches of 10, no accumulation, is ``Seed003Budget``'s fp32)."""
    case = "tricks"
    fixed = {**SEED_003, "technique": "fp32"}
    param_names = ["workload", "micro_batch", "budget"]
    params = [[w for w in WORKLOADS if w.startswith("resnet50_")], [5, 2, 1], EMULATED]


# The ways combined on seed 003: each precision that computes faster than strict fp32 (TF32, and
# bf16 and fp16 autocast: the seed's 16 GB card, a P100, has fp16 but no bf16), with and without
# checkpointing, each at micro-batches of 10 (none), 5 and 2; and the offloads under bf16.
SEED_003_COMBINED = [*(f"{p}{c}" for c in ("", "+checkpoint") for p in ("tf32", "bf16_autocast", "fp16_autocast")),
                     "bf16_autocast+save_on_cpu", "bf16_autocast+cpu_offload"]


class Seed003Combined(_OnDevice):
    """Seed 003 under the emulated 16 GB card, by ways combined: ResNet50 at batch 10 of
    1024 x 1024 and 2048 x 2048 images, {tf32, bf16_autocast, fp16_autocast} x {alone,
    checkpointing} x micro-batches {10, 5, 2}, and bf16 autocast with activations on the host or
    everything but the forward offloaded; each checked against fp32's loss curve, held to the
    largest of its knobs' tolerances. Ways that do not fit are does-not-fit records.

    The whole grid is 48 cases, about half an hour of one GPU. ``profiles.SEED_003_COMBINED``
    takes the ten that answer the issue's question in about five minutes: at 1024, where bf16
    alone already fits (``Seed003Budget``), what TF32 costs made to fit by accumulation (5, 2)
    or checkpointing, bf16 with checkpointing and the two offloads under bf16; at 2048, where
    no single way fits 16 GB, bf16 accumulated over 2, bf16 and fp16 with checkpointing, and TF32
    with checkpointing over 5. fp32 on the whole card (``ResnetSeed``) runs first, so each check
    reads fp32's curve from its record instead of training a reference of its own."""
    case = "tricks"
    fixed = SEED_003
    param_names = ["workload", "technique", "micro_batch", "budget"]
    params = [[w for w in WORKLOADS if w.startswith("resnet50_")], SEED_003_COMBINED, [10, 5, 2], ["16GB"]]


class NewerCombined(_OnDevice):
    """The newer knobs on ``bf16_autocast+checkpoint``, the LM at batch 16 of 1024 tokens (each
    alone is ``Techniques``'s): what each saves or costs on top of the leading combination, which
    runs first beside them."""
    case = "tricks"
    fixed = {**GPU_LM, **CARD, "batch": 16, "micro_batch": 16}
    param_names = ["technique"]
    params = [["bf16_autocast+checkpoint", *(f"bf16_autocast+checkpoint+{t}" for t in NEWER)]]


class AttentionLong(_OnDevice):
    """The attention kernels at 4096 tokens, where the eager kernel's scores (batch x heads x
    seq x seq per layer) outgrow everything else: batch 4, as many tokens as ``Techniques``'s 16 of
    1024, in fp32 (flash skips there, naming the fix) and under bf16 autocast; SDPA's own pick beside them."""
    case = "tricks"
    fixed = {**GPU_LM, **CARD, "seq_len": 4096, "batch": 4, "micro_batch": 4}
    param_names = ["technique"]
    params = [["fp32", "bf16_autocast", *KNOBS["attention"], *(f"bf16_autocast+{t}" for t in KNOBS["attention"])]]


class Accumulation(_OnDevice):
    """The optimizer step fixed at 64 sequences, cut into ever smaller micro-batches."""
    case = "tricks"
    fixed = {**GPU_LM, **CARD, "batch": 64}
    param_names = ["technique", "micro_batch"]
    params = [["fp32", "bf16_autocast"], [1, 2, 4, 8, 16, 32, 64]]


class Vocabulary(_OnDevice):
    """The logits (batch x seq x vocab) and the embeddings grow with the vocabulary."""
    case = "tricks"
    fixed = {"device": "cuda", "workload": "lm", "width": 1024, "depth": 12, "seq_len": 1024, "batch": 8,
             "micro_batch": 8, **CARD}
    param_names = ["technique", "vocab"]
    params = [["fp32", "tied_embeddings", "cpu_embedding", "bf16_autocast"], [8192, 32000, 50304, 128256, 256000]]


class LongSequence(_OnDevice):
    """One sequence per step, ever longer: activations grow with the length."""
    case = "tricks"
    fixed = {"device": "cuda", "workload": "lm", "batch": 1, "micro_batch": 1, "vocab": 32000, "depth": 12, **CARD}
    param_names = ["technique", "width", "seq_len"]
    params = [["fp32", "bf16_autocast", "checkpoint"], [1024, 2048], [2048, 4096, 8192, 16384, 32768]]


class SequenceCap(_OnDevice):
    """A batch with one sequence four times longer than the rest: padded to it, or capped."""
    case = "tricks"
    fixed = {"device": "cuda", "workload": "lm", "vocab": 32000, "width": 1024, "depth": 12, "batch": 16,
             "micro_batch": 16, **CARD}
    param_names = ["technique", "seq_len"]
    params = [list(KNOBS["data"]), [512, 1024, 2048]]


class _Fits:
    """What fits under each budget: the largest size that fits, the two after it seen not to
    (``harness.workloads.search.fits.largest_fitting``). asv treats bigger as worse, so it tracks the
    budget per fitting sample or token (budget / largest size), which falls as more fits; the size
    itself is in the record's check (``max_batch``, ``max_seq_len``), beside any smaller size that
    did not fit where it did (``failed_below``). A search starts one process per probe: minutes
    per benchmark."""
    case = "fits"
    fixed = {}
    param_names = ["technique", "budget"]
    params = [["fp32", "bf16_autocast", "checkpoint"], list(BUDGETS)]
    timeout = 1800

    def setup(self, *values):
        self.record = measure(self.case, FALLBACK_RESULTS, **self.fixed, **dict(zip(self.param_names, values)))


class WhatFits(_Fits):
    """The largest batch of 1024-token sequences; beside the precisions and checkpointing, the
    activations kept on the CPU, everything else offloaded, and seed 002's dropped references
    against the everyday loop that keeps them."""
    fixed = {**GPU_LM, "over": "batch", "allocator": "default"}
    params = [[*_Fits.params[0], "save_on_cpu", "cpu_offload", "drop_references", "keep_references"], list(BUDGETS)]

    def track_budget_bytes_per_sample(self, *values):
        return self.record.check["budget_bytes_per_sample"]

    track_budget_bytes_per_sample.unit = "bytes"


class WhatFitsCombined(WhatFits):
    """The largest batch of 1024-token sequences for the leading combinations: bf16 autocast or
    bf16 parameters with checkpointing (activations down to each block's input), and bf16
    autocast with checkpointing and parameters, gradients and optimizer state on the host."""
    params = [["bf16_autocast+checkpoint", "bf16_params+checkpoint", "bf16_autocast+checkpoint+cpu_offload"],
              list(BUDGETS)]


# The three cheapest ways with a newer knob, by their step on the H100 under a 24 GB card (docs'
# "Every way on the LM, ranked under a 24 GB card"), of those a search can probe: a way that compiles
# on its first step (torch.compile, torchao's optimizers) would pay it again in every probe, each a
# fresh process, so none is searched.
CHEAPEST_NEWER = ("sgd_momentum", "attn_flash", "chunked_loss")


class WhatFitsNewer(WhatFits):
    """The largest batch of 1024-token sequences under 24 GB for the three cheapest newer knobs on
    ``bf16_autocast+checkpoint`` (``CHEAPEST_NEWER``): SGD's one momentum buffer, the flash kernel
    alone, the logits never whole (chunked loss)."""
    params = [[f"bf16_autocast+checkpoint+{t}" for t in CHEAPEST_NEWER], ["24GB"]]


class WhatFitsSequence(_Fits):
    """The longest single sequence, searched from 1024 tokens up."""
    fixed = {**GPU_LM, "over": "seq_len", "allocator": "default"}

    def track_budget_bytes_per_token(self, *values):
        return self.record.check["budget_bytes_per_token"]

    track_budget_bytes_per_token.unit = "bytes"
