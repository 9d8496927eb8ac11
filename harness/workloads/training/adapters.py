"""The ``lora`` knob: low-rank adapters (peft's LoRA) on a model's attention and MLP projections,
the model itself frozen. Only the adapters train: the frozen weights take no gradient and no
optimizer state (``trainer.Trainer`` hands the optimizer the weights that train). Under qlora
the frozen bases beneath the adapters are kept in 4-bit NF4 once placed (``nf4``).

The suite's LM and a model the user brings share these pieces: the adapters go on the linear
layers (and ``nn.MultiheadAttention``, and transformers' ``Conv1D``) inside the model's blocks."""
from __future__ import annotations

RANK, ALPHA = 16, 32  # alpha twice the rank: peft's examples' and most LoRA recipes' scale


def _adaptable_kinds():
    """The module types peft adapts that carry a block's projections."""
    import torch
    kinds = [torch.nn.MultiheadAttention, torch.nn.Linear]
    try:
        from transformers.pytorch_utils import Conv1D  # GPT-2's projections
        kinds.append(Conv1D)
    except ImportError:
        pass
    return tuple(kinds)


def targets(model, blocks) -> list[str]:
    """The names of the modules the adapters go on: inside ``blocks``, every attention (peft adapts
    ``nn.MultiheadAttention``'s input and output projections) and every linear layer not part of
    one. Empty where the blocks hold none."""
    import torch
    inside = {id(m) for b in blocks for m in b.modules()}
    attention_parts = {id(m) for a in model.modules() if isinstance(a, torch.nn.MultiheadAttention)
                       for m in a.modules() if m is not a}
    kinds = _adaptable_kinds()
    return [name for name, m in model.named_modules()
            if id(m) in inside and isinstance(m, kinds) and id(m) not in attention_parts]


def with_adapters(model, names):
    """``model`` with LoRA adapters of rank ``RANK`` injected in place on the modules ``names``
    (``targets``), all else frozen."""
    from peft import LoraConfig, inject_adapter_in_model
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=list(names))
    return inject_adapter_in_model(config, model)


def adapted(model, blocks, token: str) -> list[str]:
    """The lora knob's piece before placement: adapters on ``targets(model, blocks)``; the names
    adapted (ValueError where none is: nothing to adapt)."""
    names = targets(model, blocks)
    if not names:
        raise ValueError(f"{token} found no linear layer or attention inside the model's blocks to adapt")
    with_adapters(model, names)
    return names
