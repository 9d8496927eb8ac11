"""qlora's frozen bases: the weight of every adapted linear layer (a peft LoRA layer's base) kept
in 4-bit NF4 (torchao's ``NF4Tensor``, as torchtune's QLoRA keeps it), dequantised for each
matmul; the adapters (``adapters``) stay in the parameters' dtype. Applied after the placement:
a cast to another dtype dequantises an NF4 weight."""
from __future__ import annotations

# torchao's NF4: one scale per 64 values, the scales themselves quantised in blocks of 256
NF4_BLOCK, NF4_SCALER_BLOCK = 64, 256


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


def quantized(model, token: str) -> int:
    """qlora's piece after placement: ``quantized_bases``; the layers quantised (ValueError where
    none is: the way would be lora under another name)."""
    done, left = quantized_bases(model)
    if not done:
        raise ValueError(f"{token}: none of the {left} adapted linear layers holds a multiple of "
                         f"{NF4_BLOCK * NF4_SCALER_BLOCK} weights, the blocks NF4 quantises in: use lora")
    return done
