"""A model the user brings, trained under a way out: what ``harness try`` and the ``try`` case run.

A target is ``path/to/file.py:factory``, ``package.module:factory`` or a built-in name
(``BUILT_IN``: real architectures from transformers' config classes, randomly initialised, no
weights fetched). The factory takes ``seq_len=`` where it declares it, and returns a mapping
(or a tuple in this order):

- ``model``: a ``torch.nn.Module``;
- ``batch``: ``batch(n, device) -> (inputs, targets)``, inputs a tensor, a tuple of them (the
  model's positional arguments) or a dict (its keyword arguments);
- ``loss`` (optional): ``loss(outputs, targets) -> scalar`` mean loss; by default cross-entropy
  of the outputs' logits (``outputs.logits`` where they have it) against integer class targets,
  positions at -100 ignored;
- ``blocks`` (optional): the modules each recomputed in backward under ``checkpoint`` (and
  sharded one by one under ``cpu_offload``); by default the largest ``ModuleList`` or
  ``Sequential`` whose children are all of one type;
- ``lr`` (optional): Adam's rate (default ``trainer.LR``).

Every problem with a target is a ``TargetError`` of one line that names the fix, found before any
GPU work where it can be: ``preflight`` builds the model and a batch of one and runs the loss on
torch's meta device (shapes only, no memory, no arithmetic).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from harness.measure.guards.requirements import need_module, need_torch
from harness.workloads.training.trainer import LR, learning_rate
from harness.workloads.training.ways import NEWER_KNOBS

IGNORE = -100  # the target transformers' losses skip (masked-LM positions not masked, padding)
SEED = 0
# The knobs a model the user brings takes: those that touch no model-specific code, and the newer
# ones, each applied where it finds what it needs in the model (``misfit`` says why not); the LM's
# data and embedding, ResNet's memory format and the LM's loop stay the suite's own models'.
# ``default_ways`` and ``every_way`` combine the older ones; ``newer_ways`` the newer.
OLDER = ("precision", "checkpoint", "offload")
KNOBS = (*OLDER, *NEWER_KNOBS)
MODELS_EXTRA = "pip install 'oombench[models]' (transformers)"


class TargetError(ValueError):
    """What is wrong with a target, in one line that names the fix."""


@dataclass(frozen=True)
class Spec:
    model: object
    batch: Callable
    loss: Callable | None = None
    blocks: list | None = None
    lr: float = LR


# ---- the built-in targets: real architectures, random init ------------------------------------

def _transformers():
    return need_module("transformers", MODELS_EXTRA)


def _tokens(vocab: int, seq_len: int):
    """A batch maker of random token sequences, next-token targets."""
    def batch(n, device):
        import torch
        g = torch.Generator().manual_seed(SEED)
        x = torch.randint(0, vocab, (n, seq_len + 1), generator=g)
        return {"input_ids": x[:, :-1].to(device)}, x[:, 1:].to(device)
    return batch


def _causal(config_class, model_class, vocab, width, seq_len, **dims):
    t = _transformers()
    config = getattr(t, config_class)(vocab_size=vocab, use_cache=False, **dims)
    config._attn_implementation = "sdpa"
    return {"model": getattr(t, model_class)(config), "batch": _tokens(vocab, seq_len), "lr": learning_rate(width)}


def llama(width, depth, heads, mlp, seq_len):
    return _causal("LlamaConfig", "LlamaForCausalLM", 32000, width, seq_len, hidden_size=width,
                   num_hidden_layers=depth, num_attention_heads=heads, intermediate_size=mlp,
                   max_position_embeddings=seq_len)


def llama_1b(seq_len: int = 2048):
    """A Llama-style decoder of about 1 B parameters: TinyLlama's width and heads, 16 layers."""
    return llama(2048, 16, 32, 5632, seq_len)


def llama_3b(seq_len: int = 2048):
    """A Llama-style decoder of 3.4 B parameters (OpenLLaMA 3B's shape)."""
    return llama(3200, 26, 32, 8640, seq_len)


def gpt2_medium(seq_len: int = 1024):
    """GPT-2 medium: 24 blocks of width 1024, 355 M parameters."""
    return _causal("GPT2Config", "GPT2LMHeadModel", 50257, 1024, seq_len, n_embd=1024, n_layer=24, n_head=16,
                   n_positions=max(1024, seq_len))


def bert_large(seq_len: int = 512):
    """BERT-large as a masked LM: 24 layers of width 1024; 15% of the positions masked and predicted."""
    t = _transformers()
    vocab, mask_id = 30522, 103
    config = t.BertConfig(vocab_size=vocab, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                          intermediate_size=4096, max_position_embeddings=max(512, seq_len))
    config._attn_implementation = "sdpa"

    def batch(n, device):
        import torch
        g = torch.Generator().manual_seed(SEED)
        x = torch.randint(1000, vocab, (n, seq_len), generator=g)
        masked = torch.rand(n, seq_len, generator=g) < 0.15
        return {"input_ids": x.masked_fill(masked, mask_id).to(device)}, x.masked_fill(~masked, IGNORE).to(device)
    return {"model": t.BertForMaskedLM(config), "batch": batch, "lr": learning_rate(1024)}


def vit_l16():
    """ViT-L/16 on 224 x 224 images, 1000 classes (transformers' ViT: 24 layers of width 1024, 16 x 16 patches)."""
    t = _transformers()
    config = t.ViTConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                         image_size=224, patch_size=16, num_labels=1000)
    config._attn_implementation = "sdpa"

    def batch(n, device):
        import torch
        g = torch.Generator().manual_seed(SEED)
        return ({"pixel_values": torch.randn(n, 3, 224, 224, generator=g).to(device)},
                torch.randint(0, 1000, (n,), generator=g).to(device))
    return {"model": t.ViTForImageClassification(config), "batch": batch, "lr": learning_rate(1024)}


BUILT_IN = {"llama-1b": llama_1b, "llama-3b": llama_3b, "gpt2-medium": gpt2_medium, "bert-large": bert_large,
            "vit-l16": vit_l16}
FORM = "a target is a built-in name ({}), path/to/file.py:factory or package.module:factory"


def well_formed(target) -> str:
    """``target`` if its form is one (built-in, or ``where:factory``); TargetError otherwise."""
    if isinstance(target, str) and (target in BUILT_IN or _split(target) is not None):
        return target
    raise TargetError(f"{FORM.format(', '.join(BUILT_IN))}; got {target!r}")


def _split(target: str):
    where, sep, name = target.rpartition(":")
    return (where, name) if sep and where and name.isidentifier() else None


def factory_of(target: str) -> Callable:
    """The factory ``target`` names, imported; TargetError naming the fix where it cannot be."""
    well_formed(target)
    if target in BUILT_IN:
        return BUILT_IN[target]
    where, name = _split(target)
    module = _module(where, target)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise TargetError(f"{target}: {where} defines no function {name!r}: name a factory it defines")
    return factory


def _module(where: str, target: str):
    try:
        if where.endswith(".py"):
            path = _located(where)
            if not path.is_file():
                raise TargetError(f"{target}: no file {where}: give the path of a Python file, from here or absolute")
            name = f"oombench_target_{abs(hash(str(path.resolve())))}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses and pickling look their module up by name
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(where)
    except TargetError:
        raise
    except Exception as e:
        raise TargetError(f"{target}: importing {where} raised {type(e).__name__}: {_first(e)}: fix the module "
                          f"(or install what it imports)") from None


# The folder a project's pyproject.toml names its models from: a relative path there is read from
# it, wherever the process runs (asv starts benchmarks in a folder of its own).
PROJECT_ENV = "OOMBENCH_PROJECT"


def _located(where: str) -> Path:
    path = Path(where)
    project = os.environ.get(PROJECT_ENV)
    if not path.is_absolute() and not path.is_file() and project:
        return Path(project) / path
    return path


def _first(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def takes_seq_len(factory) -> bool:
    try:
        return "seq_len" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def built(target: str, seq_len: int = 0) -> Spec:
    """The factory's model and batch maker (and loss, blocks, rate), checked; ``seq_len`` 0: the
    factory's own default (or none applies)."""
    factory = factory_of(target)
    if seq_len and not takes_seq_len(factory):
        raise TargetError(f"{target}: --seq-len does not apply: its factory takes no seq_len argument; drop it")
    torch = need_torch("cpu")
    torch.manual_seed(SEED)
    try:
        made = factory(**({"seq_len": seq_len} if seq_len else {}))
    except TargetError:
        raise
    except Exception as e:
        raise TargetError(f"{target}: the factory raised {type(e).__name__}: {_first(e)}: fix the factory") from None
    return _spec(target, made, torch)


def _spec(target: str, made, torch) -> Spec:
    keys = ("model", "batch", "loss", "blocks", "lr")
    if isinstance(made, Mapping):
        unknown = sorted(set(made) - set(keys))
        if unknown:
            raise TargetError(f"{target}: the factory returned unknown keys {unknown}: return only {', '.join(keys)}")
        parts = dict(made)
    elif isinstance(made, (tuple, list)) and 2 <= len(made) <= 4:
        parts = dict(zip(keys, made))
    else:
        raise TargetError(f"{target}: the factory returned {type(made).__name__}: return a dict with model and batch "
                          "(and optionally loss, blocks, lr), or a tuple (model, batch[, loss[, blocks]])")
    if not isinstance(parts.get("model"), torch.nn.Module):
        raise TargetError(f"{target}: the factory's model is {type(parts.get('model')).__name__}, not a "
                          "torch.nn.Module: return the module itself")
    if not callable(parts.get("batch")):
        raise TargetError(f"{target}: the factory's batch is not callable: return a function batch(n, device) -> "
                          "(inputs, targets)")
    if parts.get("loss") is not None and not callable(parts["loss"]):
        raise TargetError(f"{target}: the factory's loss is not callable: return loss(outputs, targets), or none")
    blocks = parts.get("blocks")
    if blocks is not None and not all(isinstance(b, torch.nn.Module) for b in blocks):
        raise TargetError(f"{target}: the factory's blocks are not all modules: return a list of the model's blocks")
    return Spec(parts["model"], parts["batch"], parts.get("loss"), list(blocks) if blocks is not None else None,
                float(parts.get("lr") or LR))


def found_blocks(model) -> list:
    """The largest ``ModuleList`` or ``Sequential`` (by parameters) whose children, two or more,
    are all of one type: the model's repeated blocks. Empty where it has none."""
    import torch
    best, size = [], 0
    for module in model.modules():
        if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            children = list(module.children())
            if len(children) >= 2 and len({type(c) for c in children}) == 1:
                n = sum(p.numel() for p in module.parameters())
                if n > size:
                    best, size = children, n
    return best


def blocks_of(spec: Spec) -> list:
    return spec.blocks if spec.blocks is not None else found_blocks(spec.model)


# ---- one step: the forward by the inputs' kind, the loss as a sum and a count ------------------

def call(forward, inputs):
    if isinstance(inputs, Mapping):
        return forward(**inputs)
    if isinstance(inputs, (tuple, list)):
        return forward(*inputs)
    return forward(inputs)


def logits_of(outputs):
    return getattr(outputs, "logits", outputs)


def loss_sum_of(spec: Spec):
    """The ``Trainer``'s loss_sum for ``spec``: the default cross-entropy summed over the targets
    it counts (positions at ``IGNORE`` left out), or the user's mean loss times the samples."""
    import torch

    def default(forward, inputs, targets):
        count = (targets != IGNORE).sum() if not targets.is_floating_point() else targets.shape[0]
        if forward is None:
            return None, count
        logits = logits_of(call(forward, inputs[0])).float()
        if targets.is_floating_point():  # class probabilities
            return torch.nn.functional.cross_entropy(logits, targets, reduction="sum"), count
        return torch.nn.functional.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE,
                                                 reduction="sum"), count

    def users(forward, inputs, targets):
        n = len(targets)
        if forward is None:
            return None, n
        return spec.loss(call(forward, inputs[0]), targets).float() * n, n

    return default if spec.loss is None else users


def _on(inputs, move):
    if isinstance(inputs, Mapping):
        return {k: move(v) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return tuple(move(v) for v in inputs)
    return move(inputs)


def _shape_of(x) -> str:
    return "x".join(map(str, x.shape)) if hasattr(x, "shape") else type(x).__name__


def preflight(target: str, batch: int, seq_len: int = 0, ways=()) -> dict:
    """Builds the target and one batch, and runs the forward and the loss on torch's meta device
    (shapes only): TargetError naming the fix for a target, a factory, a batch maker or a loss that
    cannot train; else what was seen (parameters, blocks found, the loss's shape, and ``misfit``'s
    reason for each of ``ways`` the model cannot take, by way: ``refused``)."""
    from harness.workloads.training.ways import parse
    torch = need_torch("cpu")
    with torch.device("meta"):  # no memory taken, no initialisation computed, whatever the model's size
        spec = built(target, seq_len)
    refused = {w.name: why for w in map(parse, ways) if (why := misfit(spec, w)) is not None}
    params = sum(p.numel() for p in spec.model.parameters())
    try:
        made = spec.batch(batch, "cpu")
    except Exception as e:
        raise TargetError(f"{target}: batch({batch}, 'cpu') raised {type(e).__name__}: {_first(e)}: fix the batch "
                          "maker") from None
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise TargetError(f"{target}: batch({batch}, device) returned {type(made).__name__}: return (inputs, targets)")
    inputs, targets = made
    if not isinstance(targets, torch.Tensor):
        raise TargetError(f"{target}: batch({batch}, device)'s targets are {type(targets).__name__}: return a tensor")
    if len(targets) != batch:
        raise TargetError(f"{target}: batch({batch}, device) made {len(targets)} targets, not {batch}: make n samples")
    try:
        loss = _loss_of(spec, inputs, targets, "meta")
        checked = "on the meta device"
    except Exception as e:
        if not _needs_values(e):
            raise _disagree(target, inputs, targets, e) from None
        # The model reads values in its forward (a mask's .item(), say): shapes alone cannot run it.
        # A large one's first case checks it on the device.
        loss, checked = None, "by its first case (its forward reads values, and it is too large for the CPU)"
    if loss is not None and (not isinstance(loss, torch.Tensor) or loss.numel() != 1):
        raise TargetError(f"{target}: the loss is {_shape_of(loss)}, not one number: return a scalar mean loss")
    if params <= CPU_CHECK_PARAMETERS:  # small enough to run for real: values checked too, on the CPU
        checked = _on_cpu(target, seq_len)
    return {"parameters": params, "blocks": len(blocks_of(spec)), "batch": batch, "checked": checked,
            "refused": refused}


# Models up to this many parameters are run for real on the CPU where shapes alone cannot run them.
CPU_CHECK_PARAMETERS = 200_000_000


def _on_cpu(target: str, seq_len: int) -> str:
    """The loss at batch 1 on the CPU, with values: TargetError where it is not a finite number."""
    import math

    import torch
    small = built(target, seq_len)
    inputs, targets = small.batch(1, "cpu")
    try:
        with torch.no_grad():
            loss, count = loss_sum_of(small)(small.model, (inputs,), targets)
    except Exception as e:
        raise _disagree(target, inputs, targets, e) from None
    value = float(loss) / max(1, int(count))
    if loss.numel() != 1 or not math.isfinite(value):
        raise TargetError(f"{target}: the loss of a batch of 1 is {value} before any training: fix the model or its "
                          "loss (a NaN or an infinity trains nothing)")
    return "on the CPU at batch 1"


def _loss_of(spec: Spec, inputs, targets, device: str):
    model = spec.model if device == "meta" else spec.model.to(device)
    return loss_sum_of(spec)(model, (_on(inputs, lambda v: v.to(device) if hasattr(v, "to") else v),),
                             targets.to(device))[0]


def _needs_values(e: Exception) -> bool:
    """Whether ``e`` is the meta device's: an operation that needs values (``.item()``) or has no
    meta kernel; not a disagreement of shapes."""
    return isinstance(e, NotImplementedError) or "meta" in str(e).lower()


def _disagree(target, inputs, targets, e) -> TargetError:
    shown = list(inputs) if isinstance(inputs, Mapping) else _shape_of(inputs)
    return TargetError(f"{target}: the loss cannot take the model's outputs for inputs {shown} and targets "
                       f"{_shape_of(targets)} ({type(e).__name__}: {_first(e)}): make batch and loss agree")


# ---- the trainer of one way ------------------------------------------------------------------

def _checkpointed(model, blocks) -> None:
    """Each block's forward recomputed in backward (as the suite's own models are)."""
    from harness.workloads.training.models import run_block
    for block in blocks:
        plain = block.forward
        block.forward = lambda *a, _plain=plain, **k: run_block(_plain, *a, checkpointed=True, **k)


def refused_knobs(way) -> str | None:
    """Why ``way`` cannot run on a model the user brings (a knob it does not take), or None."""
    from dataclasses import fields
    other = [f.name for f in fields(way) if f.name not in (*KNOBS, "allocator") and getattr(way, f.name) != f.default]
    return (f"{way} sets the {', '.join(other)} knob, which the suite applies to its own models only; a model "
            f"brought to `try` takes the {', '.join(KNOBS)} knobs") if other else None


def causal_lm(model) -> bool:
    """Whether ``model`` is a transformers causal LM: its base model's hidden states, then its output
    projection, are its logits."""
    if not hasattr(model, "get_output_embeddings") or not hasattr(model, "base_model"):
        return False
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return type(model).__name__ in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()


def misfit(spec: Spec, way) -> str | None:
    """Why a newer knob of ``way`` finds nothing to apply to in ``spec``'s model, naming the fix;
    None where each finds what it needs (the older knobs: ``refused_knobs``)."""
    model, blocks = spec.model, blocks_of(spec)
    if way.lora:
        from harness.workloads.training.adapters import targets
        from harness.workloads.training.nf4 import quantizable
        names = targets(model, blocks)
        if not names:
            return (f"{way.lora} puts adapters on the linear layers inside the model's blocks, and found no blocks "
                    "holding one: return blocks=[...] (the modules holding its projections) from the factory")
        import torch
        linear = [m.weight for n, m in model.named_modules() if n in names and isinstance(m, torch.nn.Linear)]
        if way.lora == "qlora" and not linear:
            kinds = sorted({type(m).__name__ for n, m in model.named_modules() if n in names})
            return (f"qlora keeps the adapted nn.Linear weights in NF4, and the model's projections are "
                    f"{', '.join(kinds)}: try lora")
        if way.lora == "qlora" and not any(quantizable(w) for w in linear):
            from harness.workloads.training.nf4 import NF4_BLOCK, NF4_SCALER_BLOCK
            return (f"qlora quantises the adapted nn.Linear weights in blocks of {NF4_BLOCK * NF4_SCALER_BLOCK} "
                    "values, and none of the model's holds a multiple of it: try lora")
    if way.attention:
        from harness.workloads.training.attention import attentions, switchable
        if not switchable(model) and not attentions(model):
            return (f"{way.attention} chooses the kernel of a transformers model's attention (attn_implementation) "
                    "or of nn.MultiheadAttention, and the model has neither: drop it")
    if way.loss == "chunked_loss" and not (spec.loss is None and causal_lm(model)):
        return ("chunked_loss computes a transformers causal LM's output projection and cross-entropy over chunks "
                "of tokens" + (", not a loss of the factory's own" if spec.loss is not None else
                               f", and the model is a {type(model).__name__}") + ": drop it")
    return None


def _attention(model, blocks, token: str) -> None:
    """The attention knob: a transformers model's own switch, else its ``nn.MultiheadAttention``."""
    from harness.workloads.training import attention
    if attention.switchable(model):
        attention.use_implementation(model, blocks, token)
    else:
        attention.use_kernel(model, token)


def hidden_states(model):
    """The forward of a causal LM up to its output projection: its base model's last hidden states."""
    base = model.base_model

    def forward(*args, **kwargs):
        return base(*args, **kwargs)[0]
    return forward


def chunked_loss_sum(model):
    """The ``Trainer``'s loss_sum of a causal LM under chunked_loss: ``hidden_states`` through the
    output projection and cross-entropy over chunks of tokens (``chunked``), positions at
    ``IGNORE`` left out, as the default loss sums."""
    from harness.workloads.training.chunked import chunked_cross_entropy
    head = model.get_output_embeddings()

    def loss_sum(forward, inputs, targets):
        count = (targets != IGNORE).sum()
        if forward is None:
            return None, count
        return chunked_cross_entropy(call(forward, inputs[0]), head.weight, targets, bias=head.bias), count
    return loss_sum


def built_on_host(target: str, seq_len: int) -> Spec:
    """The factory's model built on the host, whatever device it trains on: the CPU's generator
    draws other numbers than CUDA's from the same seed, so a model initialised on the device would
    start every way that builds it on the host (cpu_offload, bf16_params) from other weights than
    fp32's, and the loss check would compare two different models."""
    torch = need_torch("cpu")
    with torch.device("cpu"):
        return built(target, seq_len)


def make_trainer(target: str, way, batch: int, seq_len: int, device: str):
    """(trainer, work per step) of ``target`` at ``batch`` under ``way``; close the trainer when done.
    The newer knobs are the suite's own pieces (``attention``, ``adapters``, ``chunked``,
    ``optimizers``, ``trainer.compiled``), applied in the order ``tricks.make_trainer`` applies
    them: the attention kernel (before checkpointing, so that a recomputed block recomputes with
    it), the adapters, the placement, qlora's NF4 bases where the placement put them, the loss,
    and last the trainer, which compiles the forward."""
    from harness.workloads.training.offload import saving
    from harness.workloads.training.optimizers import OPTIMIZERS
    from harness.workloads.training.precision import precision
    from harness.workloads.training.trainer import Trainer
    torch = need_torch(device)
    prec = precision(way.precision)
    offload = way.offload == "cpu_offload"
    spec = built_on_host(target, seq_len)
    model, blocks = spec.model, blocks_of(spec)
    refused = misfit(spec, way)
    if refused:
        from harness.measure.outcomes import Skip
        raise Skip(f"{target}: {refused}")
    if way.attention:
        _attention(model, blocks, way.attention)
    if way.checkpoint:
        if not blocks:
            raise TargetError(f"{target}: checkpoint needs blocks to recompute and the model has no ModuleList or "
                              "Sequential of like blocks: return blocks=[...] from the factory")
        _checkpointed(model, blocks)
    if way.lora:
        from harness.workloads.training.adapters import adapted
        adapted(model, blocks, way.lora)
    held = contextlib.ExitStack()
    if prec.param_dtype is not None:
        model.to(dtype=prec.param_dtype)
    if offload:
        from harness.workloads.training.offload import offloaded, world_of_one
        held.enter_context(world_of_one(device))
        offloaded(model, blocks, device)
    else:
        model.to(device)
    if way.lora == "qlora":
        from harness.workloads.training.nf4 import quantized
        quantized(model, way.lora)
    torch.manual_seed(SEED)
    inputs, targets = spec.batch(batch, device)
    if prec.param_dtype is not None:
        inputs = _on(inputs, lambda v: v.to(prec.param_dtype) if getattr(v, "is_floating_point", bool)() else v)
    forward, loss_sum = (hidden_states(model), chunked_loss_sum(model)) if way.loss == "chunked_loss" \
        else (model, loss_sum_of(spec))
    trainer = Trainer(model, [((inputs,), targets)], loss_sum, prec, torch.device(device).type, lr=spec.lr,
                      forward=forward, saving=saving(torch, way, device), optimizer=OPTIMIZERS[way.optimizer],
                      clock_first=way.compiles, compile_with=way.compile)
    trainer.on_close.append(held.close)
    return trainer, {"samples": batch}


# ---- which ways a model the user brings is tried under ---------------------------------------

def applicable(device: str, knobs=OLDER) -> list[str]:
    """The registry's single ways of ``knobs`` (by default the older ones), fp32 first; on the CPU
    none that computes in a 16-bit float (no fast units for it there, as the suite's CPU profile)
    or that has no CPU kernel."""
    from harness.workloads.training import ways
    return [t for t in ways.SINGLE if ways.REGISTRY[t].knob in knobs
            and not (device == "cpu" and (ways.REGISTRY[t].half or ways.REGISTRY[t].cuda_only))]


# What each newer knob is tried on beside itself alone: the leading combination of the older ways.
LEADING = {"cuda": "bf16_autocast+checkpoint", "cpu": "checkpoint"}  # the CPU computes no 16-bit float fast


def newer_ways(device: str) -> list[str]:
    """``--ways newer``: fp32, each newer knob's values alone, the leading combination
    (``LEADING``), and each value on it; flash attention alone only where it takes fp32 inputs (not
    on CUDA, whose flash kernels take half inputs only: it runs on the leading combination there)."""
    from harness.workloads.training import ways
    singles = applicable(device, NEWER_KNOBS)
    alone = [t for t in singles if not (t == "attn_flash" and device == "cuda")]
    lead = LEADING[device]
    return list(dict.fromkeys(["fp32", *alone, lead, *(ways.canonical(f"{lead}+{t}") for t in singles)]))


# Singles that save no memory over another way that is as fast or faster: TF32 and fp16 autocast
# hold fp32's and bf16 autocast's tensors; save_on_cpu is checkpointing's saving paid in copies.
NO_SAVING = ("tf32", "fp16_autocast", "save_on_cpu")


def default_ways(device: str) -> list[str]:
    """What ``try`` runs unless told: the singles that save memory, each saving precision with
    checkpointing (as ``tricks`` combines them on seed 003), and the leanest of those with CPU
    offload on top, for a model no other way fits; then checkpointing and CPU offload in fp32,
    the last resort of a card that runs no 16-bit way (a P100). ``try`` runs an offload only for a
    card that can run it and that nothing else fits (``Try.needless``)."""
    from harness.workloads.training import ways
    singles = [t for t in applicable(device) if t not in NO_SAVING]
    precisions = [t for t in singles if ways.REGISTRY[t].knob == "precision" and t != "fp32"]
    combined = [f"{p}+checkpoint" for p in precisions if "checkpoint" in singles]
    leanest = (combined or ["checkpoint"])[-1]
    offload = [f"{leanest}+cpu_offload", "checkpoint+cpu_offload"] \
        if "cpu_offload" in singles and "checkpoint" in singles else []
    return list(dict.fromkeys(ways.canonical(w) for w in [*singles, *combined, *offload] if w != "cpu_offload"))


def every_way(device: str) -> list[str]:
    """``--ways all``: every single a brought model takes, and every precision with checkpointing,
    each with either offload."""
    from harness.workloads.training import ways
    singles = applicable(device)
    precisions = [t for t in singles if ways.REGISTRY[t].knob == "precision"]
    offloads = ["", *(t for t in singles if ways.REGISTRY[t].knob == "offload")]
    combos = [ways.canonical("+".join(x for x in (p, "checkpoint", o) if x)) for p in precisions for o in offloads]
    return list(dict.fromkeys([*singles, *combos]))
