"""The training step of the everyday memory tricks: the model, its data and the trainer one
technique builds, shared by the ``tricks`` case (which times it) and the what-fits probe (which
runs it under a memory cap). ``harness.cases.tricks`` documents the parameters."""
from __future__ import annotations

from harness.measure.outcomes import Skip, learned
from harness.measure.requirements import need_torch

DEVICES = ("cpu", "cuda")
WORKLOADS = ("lm", "encdec", "resnet50")
PRECISION_TECHNIQUES = ("fp32", "tf32", "fp16_autocast", "bf16_autocast", "bf16_params")
TECHNIQUES = PRECISION_TECHNIQUES + ("checkpoint", "pad_longest", "seq_cap", "cpu_embedding", "tied_embeddings")
LM_ONLY = ("pad_longest", "seq_cap", "cpu_embedding")
TOKEN_MODELS = ("lm", "encdec")
IMAGE_SIZE, CLASSES = 224, 1000
SEED = 0


def heads(width: int) -> int:
    return max(1, width // 64)  # 64-wide heads, as GPT-2 and most LMs since


def applies(workload: str, technique: str):
    """Skips a pairing that means nothing; the values themselves were checked by the case's config."""
    if technique in LM_ONLY and workload != "lm":
        raise Skip(f"{technique} applies to workload lm only, not {workload}")
    if technique == "tied_embeddings" and workload not in TOKEN_MODELS:
        raise Skip(f"tied_embeddings needs a token model (lm, encdec), not {workload}")


def _lm(torch, technique, batch, vocab, width, depth, seq_len):
    from harness.workloads.models import LMConfig, tokens, transformer_lm
    from harness.workloads.seqdata import OUTLIER_FACTOR, capped, outlier_sequences, pad_to_longest
    ragged = technique in ("pad_longest", "seq_cap")
    # Both ragged techniques get one model with positions for the outlier: only the data differs.
    positions = OUTLIER_FACTOR * seq_len if ragged else seq_len
    model = transformer_lm(LMConfig(vocab=vocab, width=width, depth=depth, heads=heads(width), seq_len=positions,
                                    tie_embeddings=technique == "tied_embeddings"), seed=SEED)
    if not ragged:
        x, t = tokens(batch, seq_len, vocab, seed=SEED)
    elif technique == "pad_longest":
        x, t = pad_to_longest(outlier_sequences(batch, seq_len, vocab, seed=SEED))
    else:
        x, t = capped(outlier_sequences(batch, seq_len, vocab, seed=SEED), seq_len)
    return model, x, t


def _encdec(torch, technique, batch, vocab, width, depth, seq_len):
    from harness.workloads.models import EncDecConfig, encoder_decoder, tokens
    model = encoder_decoder(EncDecConfig(vocab=vocab, width=width, depth=depth, heads=heads(width), seq_len=seq_len,
                                         shared_embedding=technique == "tied_embeddings"), seed=SEED)
    x, t = tokens(batch, seq_len, vocab, seed=SEED)
    return model, (x, x), t  # copy task: the decoder predicts the source's next token


def _resnet(torch, batch):
    from harness.workloads.models import images, resnet50
    model = resnet50(CLASSES, seed=SEED)
    if hasattr(model, "layer1"):
        # Checkpointing per block, as for the LM: the bottlenecks of the four stages.
        blocks = [b for name in ("layer1", "layer2", "layer3", "layer4") for b in getattr(model, name)]
        _checkpointable(model, blocks)
    x, t = images(batch, IMAGE_SIZE, CLASSES, seed=SEED)
    return model, x, t


def _checkpointable(model, blocks):
    """Makes each block honour ``model.checkpoint_blocks`` (torchvision's ResNet has no such flag)."""
    from harness.workloads.models import run_block
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


def make_trainer(device, workload, technique, batch, micro_batch, vocab, width, depth, seq_len):
    """(trainer, work per step): what ``build`` times and what a "what fits" probe runs."""
    applies(workload, technique)
    torch = need_torch(device)
    from harness.workloads.training import Trainer, image_loss_sum, precision, split, token_loss_sum
    prec = precision(technique if technique in PRECISION_TECHNIQUES else "fp32")
    if workload == "resnet50":
        model, x, t = _resnet(torch, batch)
    else:
        model, x, t = (_lm if workload == "lm" else _encdec)(torch, technique, batch, vocab, width, depth, seq_len)
    inputs = x if isinstance(x, tuple) else (x,)
    model.checkpoint_blocks = technique == "checkpoint"
    forward = model
    if technique == "cpu_embedding":
        # Every part but the embedding is moved: moving it too and back would put the
        # vocab x width matrix on the device for a moment, and into the allocator's peak.
        for name, child in model.named_children():
            if name != "embed":
                child.to(device)
        forward = CpuEmbedding(model, device)
    else:
        model.to(device=device, dtype=prec.param_dtype)
        inputs = tuple(i.to(device) for i in inputs)
    if prec.param_dtype is not None:
        inputs = tuple(i.to(prec.param_dtype) if i.is_floating_point() else i for i in inputs)
    micro = split(inputs + (t.to(device),), micro_batch)
    loss_sum = image_loss_sum if workload == "resnet50" else token_loss_sum
    trainer = Trainer(model, [(m[:-1], m[-1]) for m in micro], loss_sum, prec, torch.device(device).type,
                      forward=forward)
    work = {"samples": batch} if workload == "resnet50" else {"tokens": trainer.count}
    return trainer, work


def losses_checked(losses) -> dict:
    return {**learned(losses), "seed": SEED}


