"""The ``lora`` knob: low-rank adapters (peft's LoRA) on the LM's attention and MLP projections,
the model itself frozen. Only the adapters train: the frozen weights take no gradient and no
optimizer state (``trainer.Trainer`` hands the optimizer the weights that train)."""
from __future__ import annotations

RANK, ALPHA = 16, 32  # alpha twice the rank: peft's examples' and most LoRA recipes' scale


def targets(model) -> list[str]:
    """The names of the modules the adapters go on: every block's attention (peft adapts
    ``nn.MultiheadAttention``'s input and output projections) and its MLP's linear layers."""
    import torch
    from harness.workloads.training.models import blocks
    inside = {id(m) for b in blocks(model) for m in b.modules()}
    kinds = (torch.nn.MultiheadAttention, torch.nn.Linear)
    attention_parts = {id(m) for a in model.modules() if isinstance(a, torch.nn.MultiheadAttention)
                       for m in a.modules() if m is not a}
    return [name for name, m in model.named_modules()
            if id(m) in inside and isinstance(m, kinds) and id(m) not in attention_parts]


def with_adapters(model):
    """``model`` with LoRA adapters of rank ``RANK`` injected in place on ``targets``, all else frozen."""
    from peft import LoraConfig, inject_adapter_in_model
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=targets(model))
    return inject_adapter_in_model(config, model)
