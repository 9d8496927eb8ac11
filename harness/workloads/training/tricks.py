"""The training step of the everyday memory tricks: the model, its data and the trainer one way
out builds, shared by the ``tricks`` case (which times it) and the what-fits probe (which runs it
under a memory cap). ``harness.cases.tricks`` documents the parameters.

A way out is a ``harness.workloads.training.ways.Way``: knobs, each applied by its own piece, in the
order a step is built: the model and its data here (``data``, ``embedding``), the model's own
pieces (``attention``, ``lora``, ``loss``: their modules), where its parameters live and how its
inputs are laid out (``harness.workloads.training.placement``: ``offload``'s cpu_offload,
``embedding``'s cpu_embedding, else the device, in ``precision``'s parameter dtype; ``channels_last``),
the step (``precision``'s autocast and scaler, ``offload``'s save_on_cpu, ``references``,
``compile``). The caller puts the process pieces in force first and hands ``make_trainer`` the
``Precision`` they yield: the allocator setting before torch starts
(``harness.workloads.training.allocator.use_torch``), then TF32
(``harness.workloads.training.precision.process``); the checks that the way means something for
the workload and runs on this machine are ``ways.applies`` and ``ways.runnable``. So a step is
built in one direction: this module's pieces first, then the modules below it, the trainer last.
A new knob adds one piece; a way of several knobs runs each piece at once. Its loss curve is checked
by ``harness.workloads.training.reference``, which trains its fp32 references through ``trained``."""
from __future__ import annotations

import contextlib
import math

from harness.measure.outcomes import learned
from harness.measure.guards.requirements import need_torch
from harness.workloads.training import ways
from harness.workloads.training.optimizers import OWN_RATE
from harness.workloads.training.precision import process
from harness.workloads.training.trainer import LR, learning_rate, losses_of

DEVICES = ("cpu", "cuda")
# resnet50 on 224 x 224 images, or on the 1024 x 1024 and 2048 x 2048 of the model-parallel
# example that ran out of memory on a 16 GB card (batch 10 there).
RESNETS = {"resnet50": 224, "resnet50_1024": 1024, "resnet50_2048": 2048}
WORKLOADS = ("lm", "encdec", *RESNETS)
PRECISION_TECHNIQUES = ways.KNOBS["precision"]
# The single ways, in the order registered (``harness.workloads.training.ways``): asv's benchmark names and
# the profiles follow it. The technique parameter takes any combination of them too (``ways.Names``).
TECHNIQUES = ways.Names(ways.SINGLE)
# Each value's facts, by token, as the registry holds them.
LM_ONLY, IMAGE_ONLY, GROWS_ON_HOST = ways.LM_ONLY, ways.IMAGE_ONLY, ways.GROWS_ON_HOST
TOLERANCE, ONE_SIDED = ways.TOLERANCE, ways.ONE_SIDED
TOKEN_MODELS = ("lm", "encdec")
# The families ``ways.applies`` reads an image-only or token-only knob against.
IMAGE_MODELS = tuple(RESNETS)
# The shapes a step is declared at, by the tricks case and the what-fits search alike. Batches:
# powers of two up to 1024, and the model-parallel example's batch of 10 (in micro-batches of 5).
BATCHES = tuple(sorted({2**k for k in range(0, 11)} | {5, 10}))
VOCABS = (128, 8192, 32000, 50304, 128256, 256000)
WIDTHS = (32, 256, 512, 1024, 2048, 4096)
DEPTHS = (2, 6, 12, 24)
SEQ_LENS = (16, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
CLASSES = 1000
SEED = 0


def heads(width: int) -> int:
    return max(1, width // 64)  # 64-wide heads, as GPT-2 and most LMs since


def techniques_for(workload: str) -> tuple[str, ...]:
    """The single ways that mean something for ``workload``, in ``TECHNIQUES``'s order."""
    return tuple(t for t in TECHNIQUES
                 if ways.why_not(ways.REGISTRY[t], workload, IMAGE_MODELS, TOKEN_MODELS) is None)


# The model-and-data pieces: the LM's data by the ``data`` knob (ragged batches get one model
# with positions for the outlier: only the data differs).
def _plain_tokens(batch, seq_len, vocab):
    from harness.workloads.training.models import tokens
    return tokens(batch, seq_len, vocab, seed=SEED), seq_len


def _padded(batch, seq_len, vocab):
    from harness.workloads.training.seqdata import OUTLIER_FACTOR, outlier_sequences, pad_to_longest
    return pad_to_longest(outlier_sequences(batch, seq_len, vocab, seed=SEED)), OUTLIER_FACTOR * seq_len


def _capped(batch, seq_len, vocab):
    from harness.workloads.training.seqdata import OUTLIER_FACTOR, capped, outlier_sequences
    return capped(outlier_sequences(batch, seq_len, vocab, seed=SEED), seq_len), OUTLIER_FACTOR * seq_len


LM_DATA = {"": _plain_tokens, "pad_longest": _padded, "seq_cap": _capped}


def _lm(torch, way, batch, vocab, width, depth, seq_len):
    from harness.workloads.training.models import LMConfig, transformer_lm
    (x, t), positions = LM_DATA[way.data](batch, seq_len, vocab)
    model = transformer_lm(LMConfig(vocab=vocab, width=width, depth=depth, heads=heads(width), seq_len=positions,
                                    tie_embeddings=way.embedding == "tied_embeddings"), seed=SEED)
    return model, x, t


def _encdec(torch, way, batch, vocab, width, depth, seq_len):
    from harness.workloads.training.models import EncDecConfig, encoder_decoder, tokens
    model = encoder_decoder(EncDecConfig(vocab=vocab, width=width, depth=depth, heads=heads(width), seq_len=seq_len,
                                         shared_embedding=way.embedding == "tied_embeddings"), seed=SEED)
    x, t = tokens(batch, seq_len, vocab, seed=SEED)
    return model, (x, x), t  # copy task: the decoder predicts the source's next token


def _resnet(torch, batch, size):
    from harness.workloads.training.models import blocks, images, resnet50
    model = resnet50(CLASSES, seed=SEED)
    if hasattr(model, "layer1"):
        # Checkpointing per block, as for the LM: the bottlenecks of the four stages.
        _checkpointable(model, blocks(model))
    x, t = images(batch, size, CLASSES, seed=SEED)
    return model, x, t


def _checkpointable(model, blocks):
    """Makes each block honour ``model.checkpoint_blocks`` (torchvision's ResNet has no such flag)."""
    from harness.workloads.training.models import run_block
    model.checkpoint_blocks = False
    for block in blocks:
        plain = block.forward
        block.forward = lambda *a, _plain=plain, **k: run_block(_plain, *a, checkpointed=model.checkpoint_blocks, **k)


def _modelled(torch, model, way, loss_sum):
    """The model pieces of the newer knobs, in place: the attention kernel (before the adapters,
    which call each attention's own forward), the LoRA adapters (qlora's NF4 bases come after
    placement), and the chunked loss (the forward stops before the head, which the loss applies);
    returns the loss function."""
    if way.attention:
        from harness.workloads.training.attention import use_kernel
        use_kernel(model, way.attention)
    if way.lora:
        from harness.workloads.training.adapters import adapted
        from harness.workloads.training.models import blocks
        adapted(model, blocks(model), way.lora)
    if way.loss == "chunked_loss":
        from harness.workloads.training import chunked
        model.head_in_loss = True
        return chunked.token_loss_sum(model.head)
    return loss_sum


def make_trainer(device, workload, way, batch, micro_batch, vocab, width, depth, seq_len, prec):
    """(trainer, work per step): what ``build`` times and what a "what fits" probe runs, for
    ``way`` (a ``Way``) in ``prec`` (the ``Precision`` its process piece yields). Close the trainer
    when done with it (``cpu_offload`` holds a process group). The process pieces and the way's
    checks are the caller's (``allocator.use_torch``, ``precision.process``, ``ways.applies``,
    ``ways.runnable``)."""
    torch = need_torch(device)
    from harness.workloads.training.nf4 import quantized
    from harness.workloads.training.offload import saving
    from harness.workloads.training.optimizers import OPTIMIZERS
    from harness.workloads.training.placement import placed
    from harness.workloads.training.trainer import Trainer, image_loss_sum, split, token_loss_sum
    if workload in RESNETS:
        model, x, t = _resnet(torch, batch, RESNETS[workload])
    else:
        model, x, t = (_lm if workload == "lm" else _encdec)(torch, way, batch, vocab, width, depth, seq_len)
    rate = adam_rate(workload, width)
    # The last of this module's pieces: what follows is built by the modules below it, the trainer last.
    loss_sum = _modelled(torch, model, way, image_loss_sum if workload in RESNETS else token_loss_sum)
    model.checkpoint_blocks = way.checkpoint
    with contextlib.ExitStack() as held:
        forward, inputs = placed(torch, model, x if isinstance(x, tuple) else (x,), device, way, prec, held)
        if way.lora == "qlora":  # where the placement put them, in the dtype it cast them to
            quantized(model, way.lora)
        kept = saving(torch, way, device)
        micro = split(inputs + (t.to(device),), micro_batch)
        trainer = Trainer(model, [(m[:-1], m[-1]) for m in micro], loss_sum, prec, torch.device(device).type,
                          lr=rate, forward=forward, saving=kept, keep_references=way.references == "keep_references",
                          optimizer=OPTIMIZERS[way.optimizer], clock_first=way.compiles, compile_with=way.compile)
        trainer.on_close.append(held.pop_all().close)  # what the placement holds, until the trainer closes
    work = {"samples": batch} if workload in RESNETS else {"tokens": trainer.count}
    return trainer, work


def adam_rate(workload: str, width: int) -> float:
    """The rate ``make_trainer``'s Adam trains ``workload`` at: the transformers' falls with their
    width (``training.learning_rate``); ResNet50 has no width and keeps ``LR``."""
    return LR if workload in RESNETS else learning_rate(width)


def trained_at(check: dict) -> float:
    """The Adam rate a case's check says it trained at; ``LR`` for a record written before the
    check kept it (every model trained at ``LR`` then)."""
    return check.get("lr", LR)


def other_rate(params, check: dict) -> bool:
    """Whether a record's losses came from another Adam rate than today's code trains its model
    at: its loss, and its loss check's verdict, no longer say what today's would."""
    trained = {"loss_last", "losses", "deviation", "lr"} & set(check)  # not a case that died or raised
    width = params.get("width")
    if not trained or type(width) is not int or width < 1 or "workload" not in params:
        return False  # a record no trainer of today's could have written: nothing to compare
    if _own_rule(params.get("technique")):
        return False  # SGD's and Adafactor's rates are their knob's own, never Adam's
    # torchao keeps the rate as a float32 tensor: the same rate, rounded to its 24 bits
    return not math.isclose(trained_at(check), adam_rate(params["workload"], width), rel_tol=1e-6)


def _own_rule(technique) -> bool:
    """Whether ``technique`` trains with an optimizer of another rule than Adam's (its own rate)."""
    try:
        return ways.parse(technique).optimizer in OWN_RATE
    except (TypeError, ValueError):
        return False


def losses_checked(losses) -> dict:
    return {**learned(losses), "seed": SEED}


def trained(steps: int, way, micro_batch: int, **shape) -> list[float]:
    """The losses of ``steps`` steps of ``way`` in micro-batches of ``micro_batch`` at ``shape``
    (make_trainer's other arguments), under its own process piece (TF32 off for the fp32
    references, whatever the case ran); the trainer closed, done or not. The ``train`` that
    ``reference.checked_against_reference`` is handed, at the case's shape."""
    with process(way) as prec:
        return losses_of(make_trainer(way=way, micro_batch=micro_batch, prec=prec, **shape)[0], steps)
