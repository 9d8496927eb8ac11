"""The ``lora`` knob: low-rank adapters (peft's LoRA) on a model's attention and MLP projections,
the model itself frozen. Only the adapters train: the frozen weights take no gradient and no
optimizer state (``trainer.Trainer`` hands the optimizer the weights that train). Under qlora
the frozen weight of every adapted linear layer is kept in 4-bit NF4 (torchao's ``NF4Tensor``,
as torchtune's QLoRA keeps it), dequantised for each matmul; the adapters stay in the
parameters' dtype.

The suite's LM and a model the user brings share these pieces: the adapters go on the linear
layers (and ``nn.MultiheadAttention``, and transformers' ``Conv1D``) inside the model's blocks."""
from __future__ import annotations

RANK, ALPHA = 16, 32  # alpha twice the rank: peft's examples' and most LoRA recipes' scale
# torchao's NF4: one scale per 64 values, the scales themselves quantised in blocks of 256
NF4_BLOCK, NF4_SCALER_BLOCK = 64, 256


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


def quantizable(weight) -> bool:
    """Whether torchao's NF4 takes ``weight``: whole blocks of values, whole blocks of scales."""
    return weight.numel() % (NF4_BLOCK * NF4_SCALER_BLOCK) == 0


def quantized_bases(model) -> tuple[int, int]:
    """The frozen weight of every adapted ``nn.Linear`` (a peft LoRA layer's base) replaced, where
    it lives, by its NF4 quantisation; (layers quantised, adapted linear layers whose size NF4's
    blocks do not divide, left in their dtype, frozen). An ``nn.MultiheadAttention``'s projections
    stay in their dtype, frozen: peft adapts it by adding its adapters' product to the weights
    themselves, which NF4 cannot take. Call it after the model is cast and placed: a cast to
    another dtype dequantises an NF4 weight."""
    import torch
    from peft.tuners.lora import LoraLayer
    try:
        from torchao.quantization import to_nf4
    except ImportError:  # older torchao kept NF4 among its dtypes
        from torchao.dtypes.nf4tensor import to_nf4
    merged = {id(m) for a in model.modules() if isinstance(a, torch.nn.MultiheadAttention) for m in a.modules()}
    done, left = 0, 0
    for module in model.modules():
        base = module.get_base_layer() if isinstance(module, LoraLayer) else None
        if not isinstance(base, torch.nn.Linear) or id(module) in merged:
            continue
        if not quantizable(base.weight):
            left += 1
            continue
        nf4 = to_nf4(base.weight.detach(), NF4_BLOCK, NF4_SCALER_BLOCK)
        base.weight = torch.nn.Parameter(nf4, requires_grad=False)
        done += 1
    return done, left


def adapted(model, blocks, token: str) -> list[str]:
    """The lora knob's piece before placement: adapters on ``targets(model, blocks)``; the names
    adapted (ValueError where none is: nothing to adapt)."""
    names = targets(model, blocks)
    if not names:
        raise ValueError(f"{token} found no linear layer or attention inside the model's blocks to adapt")
    with_adapters(model, names)
    return names


def quantized(model, token: str) -> int:
    """qlora's piece after placement: ``quantized_bases``; the layers quantised (ValueError where
    none is: the way would be lora under another name)."""
    done, left = quantized_bases(model)
    if not done:
        raise ValueError(f"{token}: none of the {left} adapted linear layers holds a multiple of "
                         f"{NF4_BLOCK * NF4_SCALER_BLOCK} weights, the blocks NF4 quantises in: use lora")
    return done
