"""The training step of the everyday memory tricks: the model, its data and the trainer one way
out builds, shared by the ``tricks`` case (which times it) and the what-fits probe (which runs it
under a memory cap). ``harness.cases.tricks`` documents the parameters.

A way out is a ``harness.workloads.training.ways.Way``: knobs, each applied here by its own piece, in the
order a step is built: the model and its data (``data``, ``embedding``), the model
(``checkpoint``), where its parameters live (``offload``'s cpu_offload, ``embedding``'s
cpu_embedding, else the device, in ``precision``'s parameter dtype), the inputs' layout
(``channels_last``, the parameter dtype), the step (``precision``'s autocast and scaler,
``offload``'s save_on_cpu, ``references``) and the process (``process``: TF32; the allocator
setting is put in force before torch starts by whoever starts the step:
``harness.workloads.training.allocator.use_torch``). A new knob adds one piece; a way of several
knobs runs each piece at once."""
from __future__ import annotations

import contextlib
import itertools
import math

from harness.measure.outcomes import CheckFailed, Skip, is_out_of_memory, learned
from harness.measure.guards.requirements import need_torch
from harness.workloads.training import ways
from harness.workloads.training.trainer import LR, learning_rate

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
# The shapes a step is declared at, by the tricks case and the what-fits search alike. Batches:
# powers of two up to 1024, and the model-parallel example's batch of 10 (in micro-batches of 5).
BATCHES = tuple(sorted({2**k for k in range(0, 11)} | {5, 10}))
VOCABS = (128, 8192, 32000, 50304, 128256, 256000)
WIDTHS = (32, 256, 512, 1024, 2048, 4096)
DEPTHS = (2, 6, 12, 24)
SEQ_LENS = (16, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
CLASSES = 1000
SEED = 0

REFERENCE_RUNS = 5  # runs of the reference whose widest gap a curve over its tolerance is allowed
# How many times that widest gap is allowed. The technique's curve is one more draw of the same
# sums: a further draw of a normal quantity lies farther than once the widest gap among three
# draws from all of them about one time in eight, farther than twice that among five about one
# time in two hundred.
SPREAD_FACTOR = 2


def heads(width: int) -> int:
    return max(1, width // 64)  # 64-wide heads, as GPT-2 and most LMs since


def applies(workload: str, way):
    """Skips a pairing that means nothing; the values themselves were checked by the case's config."""
    ways.applies(way, workload, tuple(RESNETS), TOKEN_MODELS)


def techniques_for(workload: str) -> tuple[str, ...]:
    """The single ways that mean something for ``workload``, in ``TECHNIQUES``'s order."""
    return tuple(t for t in TECHNIQUES
                 if ways.why_not(ways.REGISTRY[t], workload, tuple(RESNETS), TOKEN_MODELS) is None)


@contextlib.contextmanager
def process(way):
    """The process piece, for the case's life: TF32 for fp32 matrix products under tf32 (off
    otherwise, as the fp32 reference needs). The allocator setting is set once, before torch
    starts, by whoever starts the step (``allocator.use_torch(way.allocator)``)."""
    from harness.workloads.training.trainer import float32_matmul
    with float32_matmul(way.precision == "tf32"):
        yield


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
    from harness.workloads.training.models import images, resnet50
    model = resnet50(CLASSES, seed=SEED)
    if hasattr(model, "layer1"):
        # Checkpointing per block, as for the LM: the bottlenecks of the four stages.
        _checkpointable(model, blocks(model))
    x, t = images(batch, size, CLASSES, seed=SEED)
    return model, x, t


def blocks(model) -> list:
    """The blocks a model is built of, each checkpointed or offloaded as one unit: the LM's
    transformer blocks, the encoder-decoder's layers, the bottlenecks of ResNet's four stages."""
    if hasattr(model, "blocks"):
        return list(model.blocks)
    if hasattr(model, "encoder"):
        return [*model.encoder, *model.decoder]
    return [b for name in ("layer1", "layer2", "layer3", "layer4") for b in getattr(model, name, ())]


def _checkpointable(model, blocks):
    """Makes each block honour ``model.checkpoint_blocks`` (torchvision's ResNet has no such flag)."""
    from harness.workloads.training.models import run_block
    model.checkpoint_blocks = False
    for block in blocks:
        plain = block.forward
        block.forward = lambda *a, _plain=plain, **k: run_block(_plain, *a, checkpointed=model.checkpoint_blocks, **k)


class CpuEmbedding:
    """The LM with its token embedding on the CPU: token ids stay on the host, only the looked-up
    rows (batch x seq x width) cross to the device, and the vocab x width matrix, its gradient
    and its optimizer state never take device memory."""

    def __init__(self, lm, device):
        self.lm, self.device = lm, device

    def __call__(self, tokens):
        return self.lm.forward_embedded(self.lm.embed(tokens.cpu()).to(self.device))


def runnable(way, device: str) -> None:
    """Skips a way this machine cannot run as meant, naming the fix: a knob's package missing,
    flash attention on CUDA without half inputs (its kernels take fp16 and bf16 only), or a knob
    with no CPU kernel (SDPA's memory-efficient attention) off CUDA."""
    import importlib.util
    for module in way.needs:
        if importlib.util.find_spec(module) is None:
            users = ", ".join(v.token for v in way.values() if v.needs == module)
            raise Skip(f"{users} needs {module}, which this Python lacks: pip install 'oombench[ways]'")
    if way.attention == "attn_flash" and device == "cuda" and not ways.REGISTRY[way.precision].half:
        raise Skip(f"{way}: flash attention takes half inputs only on CUDA: add bf16_autocast or fp16_autocast")
    cuda_only = [v.token for v in way.values() if v.cuda_only]
    if cuda_only and device != "cuda":
        raise Skip(f"{way}: {', '.join(cuda_only)} runs on CUDA only (no CPU kernel): run it with device cuda")


def _modelled(torch, model, way, loss_sum):
    """The model pieces of the newer knobs, in place: the attention kernel (before the adapters,
    which call each attention's own forward), the LoRA adapters, and the chunked loss (the forward
    stops before the head, which the loss applies); returns the loss function."""
    if way.attention:
        from harness.workloads.training.attention import use_kernel
        use_kernel(model, way.attention)
    if way.lora:
        from harness.workloads.training.adapters import with_adapters
        with_adapters(model)
    if way.loss == "chunked_loss":
        from harness.workloads.training import chunked
        model.head_in_loss = True
        return chunked.token_loss_sum(model.head)
    return loss_sum


COMPILE_MODES = {"compile": "default", "compile_max_autotune": "max-autotune-no-cudagraphs"}


def _compiled(torch, forward, way):
    """The forward through torch.compile in the way's mode (compiled on its first call)."""
    return torch.compile(forward, mode=COMPILE_MODES[way.compile]) if way.compile else forward


def make_trainer(device, workload, way, batch, micro_batch, vocab, width, depth, seq_len):
    """(trainer, work per step): what ``build`` times and what a "what fits" probe runs, for
    ``way`` (a ``Way``). Close the trainer when done with it (``cpu_offload`` holds a process
    group). The process pieces are the caller's (``allocator.use_torch``, ``process``)."""
    applies(workload, way)
    runnable(way, device)
    torch = need_torch(device)
    from harness.workloads.training.optimizers import OPTIMIZERS
    from harness.workloads.training.trainer import Trainer, image_loss_sum, precision, split, token_loss_sum
    prec = precision(way.precision)
    if workload in RESNETS:
        model, x, t = _resnet(torch, batch, RESNETS[workload])
    else:
        model, x, t = (_lm if workload == "lm" else _encdec)(torch, way, batch, vocab, width, depth, seq_len)
    loss_sum = _modelled(torch, model, way, image_loss_sum if workload in RESNETS else token_loss_sum)
    model.checkpoint_blocks = way.checkpoint
    with contextlib.ExitStack() as held:
        if prec.param_dtype is not None:  # on the host, before any placement: no fp32 copy on the device
            model.to(dtype=prec.param_dtype)
        forward, inputs = PLACEMENTS[_placement(way)](torch, model, x if isinstance(x, tuple) else (x,), device, held)
        inputs = _laid_out(torch, model, inputs, way, prec)
        micro = split(inputs + (t.to(device),), micro_batch)
        trainer = Trainer(model, [(m[:-1], m[-1]) for m in micro], loss_sum, prec, torch.device(device).type,
                          lr=adam_rate(workload, width),
                          forward=_compiled(torch, forward, way), saving=_saving(torch, way, device),
                          keep_references=way.references == "keep_references",
                          optimizer=OPTIMIZERS[way.optimizer], clock_first=way.compiles)
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


OWN_RATE = ("adafactor", "sgd_momentum")  # optimizers whose rate is not Adam's


# The placement pieces: where the parameters live, by the knob that decides it (at most one
# does: ``ways.CONFLICTS``). Each returns (forward, inputs on the device) and enters on ``held``
# what must outlive it.
def _placement(way) -> str:
    return next((v for v in (way.offload, way.embedding) if v and v in PLACEMENTS), "")


def _on_device(torch, model, inputs, device, held):
    model.to(device)
    return model, tuple(i.to(device) for i in inputs)


def _embedding_on_cpu(torch, model, inputs, device, held):
    # Every part but the embedding is moved: moving it too and back would put the
    # vocab x width matrix on the device for a moment, and into the allocator's peak.
    for name, child in model.named_children():
        if name != "embed":
            child.to(device)
    return CpuEmbedding(model, device), inputs


def _offloaded(torch, model, inputs, device, held):
    from harness.workloads.training.offload import offloaded, world_of_one
    held.enter_context(world_of_one(device))
    offloaded(model, blocks(model), device)
    return model, tuple(i.to(device) for i in inputs)


PLACEMENTS = {"": _on_device, "cpu_embedding": _embedding_on_cpu, "cpu_offload": _offloaded}


def _laid_out(torch, model, inputs, way, prec):
    """The inputs pieces: NHWC weights and images under channels_last, floating inputs in the
    parameters' dtype under bf16_params."""
    if way.channels_last:
        model.to(memory_format=torch.channels_last)
        inputs = tuple(i.to(memory_format=torch.channels_last) for i in inputs)
    if prec.param_dtype is not None:
        inputs = tuple(i.to(prec.param_dtype) if i.is_floating_point() else i for i in inputs)
    return inputs


def _saving(torch, way, device):
    """Where autograd keeps what the forward saves for backward: on the CPU for ``save_on_cpu``
    (pinned on CUDA, so that the copies out and back run at the pinned rate and asynchronously;
    on the CPU there is nothing to copy), held to the host's share of its memory; else where it
    was made (None)."""
    if way.offload != "save_on_cpu":
        return None
    from harness.measure.guards.workingset import HOST_CAP_FRACTION, host_available
    from harness.workloads.training.offload import activations_on_host
    available = host_available()
    return activations_on_host(torch, device == "cuda", int(available * HOST_CAP_FRACTION), available)


def losses_checked(losses) -> dict:
    return {**learned(losses), "seed": SEED}


# The references that train the whole batch at once, as (label, way): the same sums as fp32.
FP32 = ways.Way()
WHOLE_BATCH = (("fp32", FP32), ("fp32 with checkpointing", ways.Way(checkpoint=True)))
SAME_SUMS = {label for label, _ in WHOLE_BATCH}  # runs of one reference, whichever of them fit


def held_to_whole_batch(check: dict) -> bool:
    """Whether a check held the loss curve against fp32 on the whole batch (or was that
    reference itself); False where only the case's own micro-batches, or nothing, could run as
    the reference, so that what accumulation changes went unchecked."""
    return check.get("reference") in ("itself", *(label for label, _ in WHOLE_BATCH))


def references(way, batch: int, micro_batch: int):
    """The fp32 runs to hold ``way`` against, best first, as (label, way, micro-batch):
    fp32 on the whole batch; the same with activations recomputed (the same sums, less memory)
    where that does not fit beside the case; fp32 on the case's own micro-batches last (then the
    accumulation itself goes unchecked). None for fp32 on the whole batch: it is the reference."""
    if way == FP32 and micro_batch == batch:
        return []
    runs = [(label, ref, batch) for label, ref in WHOLE_BATCH]
    if micro_batch != batch:
        runs.append((f"fp32 in micro-batches of {micro_batch}", FP32, micro_batch))
    return runs


def reference_losses(steps: int, way, **shape) -> tuple[str, list[float]] | tuple[None, str]:
    """Trains the first reference that fits for ``steps`` steps: (its label, its losses), or
    (None, why none could run); ("itself", None) for the reference itself. ``shape``:
    make_trainer's other arguments."""
    runs = references(way, shape["batch"], shape["micro_batch"])
    if not runs:
        return "itself", None
    tried = []
    for label, ref_way, micro in runs:
        try:
            with process(ref_way):  # TF32 off: the reference is strict fp32, whatever the case ran
                return label, trained(steps, **dict(shape, way=ref_way, micro_batch=micro))
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            tried.append(label)
        _free_cuda()  # out of the except block: the error's frames, which hold the failed trainer, are gone
    return None, f"no fp32 reference fits on the card beside the case ({'; '.join(tried)} ran out of memory)"


def trained(steps: int, **shape) -> list[float]:
    """The losses of ``steps`` steps of make_trainer(**shape); the trainer closed, done or not."""
    return losses_of(make_trainer(**shape)[0], steps)


def losses_of(trainer, steps: int) -> list[float]:
    """The losses of ``steps`` steps of ``trainer``, closed afterwards, done or not."""
    try:
        for _ in range(steps):
            trainer.step()
        return [float(v) for v in trainer.losses]
    finally:
        trainer.close()


def _free_cuda():
    import torch
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def aligned(losses, skipped) -> list[tuple[int, float]]:
    """(index into the reference's losses, loss) per step. A step the GradScaler skipped left the
    weights as they were, so the loss after it belongs beside the reference's loss before it: the
    curves are compared at equal numbers of applied updates."""
    applied, pairs = 0, []
    for i, value in enumerate(losses):
        pairs.append((applied, float(value)))
        applied += not (i < len(skipped) and skipped[i])  # steps past the list: none skipped
    return pairs


def curve_gap(losses, ref_losses, one_sided: bool = False) -> tuple[int, float]:
    """(step, gap) of the largest gap between two curves of equal steps, as a share of the
    reference's first loss; above the reference only where ``one_sided``."""
    scale = abs(float(ref_losses[0]))
    gaps = [(float(v) - float(r)) / scale for v, r in zip(losses, ref_losses)]
    gaps = [max(g, 0.0) if one_sided else abs(g) for g in gaps]
    # a NaN gap is the worst: max compares nothing as larger than NaN, and would pass it over
    worst = max(range(len(gaps)), key=lambda i: math.inf if math.isnan(gaps[i]) else gaps[i])
    return worst, gaps[worst]


def deviation(way, losses, ref_losses, skipped=()):
    """(the aligned (reference step, loss) pairs, the worst step, its gap): ``curve_gap`` of the
    way's curve against the reference's at equal numbers of applied updates."""
    pairs = [(i, v) for i, v in aligned(losses, skipped) if i < len(ref_losses)]
    worst, gap = curve_gap([v for _, v in pairs], [ref_losses[i] for i, _ in pairs], way.one_sided)
    return pairs, worst, gap


def against_reference(way, losses, reference: str, ref_losses, skipped=(), spread: float = 0.0,
                      runs: int = 1) -> dict:
    """The largest gap between the technique's loss curve and the reference's, as a share of the
    reference's first loss (above it only, for a technique that changes the model or data), with
    steps the scaler skipped aligned out; CheckFailed past the technique's tolerance plus
    ``SPREAD_FACTOR`` times ``spread``, the widest gap among ``runs`` runs of the reference itself
    (``checked_against_reference``)."""
    pairs, worst, gap = deviation(way, losses, ref_losses, skipped)
    allowed = way.tolerance
    compared = {"deviation": gap, "tolerance": allowed, "reference": reference, "reference_spread": spread,
                "spread_factor": SPREAD_FACTOR, "reference_runs": runs, "reference_loss_last": float(ref_losses[-1]),
                "losses": [v for _, v in pairs], "reference_losses": [float(r) for r in ref_losses],
                "skipped_steps": sum(bool(s) for s in skipped)}
    if not gap <= allowed + SPREAD_FACTOR * spread:  # a NaN gap fails too
        i, v = pairs[worst]
        raise CheckFailed(f"{way}: loss {v:.5g} at step {worst + 1} against {ref_losses[i]:.5g} for {reference} "
                          f"after as many updates, a gap of {gap:.3g} of the first loss ({abs(ref_losses[0]):.4g}), "
                          f"over the {allowed:g} allowed + {SPREAD_FACTOR} x {spread:.3g}, the widest gap among {runs} "
                          f"{reference} runs", compared, priced=True)
    return compared


def checked_against_reference(way, losses, skipped, fp32_curve=None, **shape) -> dict:
    """The check of ``way``'s loss curve against the first fp32 reference that fits.
    GPU kernels that sum with atomics (cuDNN's convolution backward among them) give a
    different curve on every run, and a batch being memorised amplifies that; so a curve over its
    tolerance is held once more against the nearest of ``REFERENCE_RUNS`` runs of the reference,
    allowed on top ``SPREAD_FACTOR`` times the widest gap among those runs: the gap between one
    pair of runs varies several-fold from pair to pair, so one pair understates how far two runs of
    the same step drift apart, and a curve that only the first run's drift put out of reach is one
    fp32 could have drawn. A technique that changes the sums stays as far from every run.
    Where sums run in a fixed order (the CPU) every gap is zero and changes nothing.
    ``fp32_curve``: fp32's own curve on the whole batch at this shape, measured earlier in the
    same run, in place of the first reference run (one draw of the same training as any other)."""
    if fp32_curve is not None and references(way, shape["batch"], shape["micro_batch"]):
        reference, ref_losses = WHOLE_BATCH[0][0], list(fp32_curve)  # pragma: no mutate: fp32's label is its technique
    else:
        reference, ref_losses = reference_losses(len(losses), way, **shape)
    if way.falls is not None:
        return held_to_falling(way, losses, reference, ref_losses, skipped)
    if reference is None:
        return {"reference": None, "reference_reason": ref_losses}
    if ref_losses is None:
        return {"reference": reference}
    try:
        return against_reference(way, losses, reference, ref_losses, skipped)
    except CheckFailed:
        runs = [ref_losses]
        for _ in range(REFERENCE_RUNS - 1):
            again, again_losses = reference_losses(len(losses), way, **shape)
            if again != reference and not {again, reference} <= SAME_SUMS:
                raise  # a later run did not fit as the first did, and sums otherwise: no spread to learn
            runs.append(again_losses)
        spread = max(curve_gap(a, b)[1] for a, b in itertools.combinations(runs, 2))
        nearest = min(runs, key=lambda run: deviation(way, losses, run, skipped)[2])
        return against_reference(way, losses, reference, nearest, skipped, spread, len(runs))


def held_to_falling(way, losses, reference, ref_losses, skipped=()) -> dict:
    """The check of a way held to a criterion of its own (``Way.falls``: it trains other weights or
    by another rule than fp32's Adam): its last loss at most (1 - falls) of its first, CheckFailed
    otherwise. fp32's curve, where one ran, is recorded beside it with the gap, not held against it."""
    first, last = float(losses[0]), float(losses[-1])
    criterion = (f"{way}: held to its own criterion, not to fp32's curve: the last loss at most "
                 f"{1 - way.falls:g} of the first (it falls by {way.falls:g} of it within the run)")
    compared = {"criterion": criterion, "falls": way.falls, "fell": (first - last) / abs(first),
                "losses": [float(v) for v in losses], "reference": reference}
    if reference is not None and ref_losses is not None:
        pairs, _, gap = deviation(way, losses, ref_losses, skipped)
        compared.update(deviation=gap, reference_losses=[float(r) for r in ref_losses],
                        reference_loss_last=float(ref_losses[-1]))
    elif reference is None:
        compared["reference_reason"] = ref_losses
    if not last <= (1 - way.falls) * first:  # a NaN fails too
        raise CheckFailed(f"{way}: loss {last:.5g} after {len(losses)} steps against {first:.5g} at the first, "
                          f"a fall of {compared['fell']:.3g} of it, under the {way.falls:g} its criterion asks",
                          compared, priced=True)
    return compared
