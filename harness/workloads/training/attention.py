"""The ``attention`` knob: which kernel computes a model's softmax(QK^T)V.

The suite's models call ``nn.MultiheadAttention`` with ``need_weights=False`` and ``is_causal``,
so torch hands it to ``scaled_dot_product_attention``, which by default picks the first kernel
that takes the inputs (flash for half inputs on CUDA, memory-efficient for fp32): what the
records without the knob ran. The knob allows one kernel: SDPA's math kernel for attn_eager (the
scores, batch x heads x seq x seq, written out and kept for backward, as an eager
``softmax(q @ k.T) @ v`` does), or flash or memory-efficient alone (an error where it cannot take
the inputs, not a quiet fallback). A transformers model has a switch of its own
(``attn_implementation``): attn_eager runs its eager attention, the others its SDPA attention
under the one kernel. The kernel is chosen inside each attention's (or block's) own call, so a
block recomputed under checkpointing recomputes with the same kernel."""
from __future__ import annotations

KERNELS = {"attn_eager": "MATH", "attn_flash": "FLASH_ATTENTION", "attn_mem_efficient": "EFFICIENT_ATTENTION"}


def under_kernel(module, token: str) -> None:
    """Makes ``module``'s every call run SDPA under ``token``'s kernel alone."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, KERNELS[token])
    plain = module.forward

    def forward(*args, _plain=plain, **kwargs):
        with sdpa_kernel(backend):
            return _plain(*args, **kwargs)
    module.forward = forward


def attentions(model) -> list:
    """``model``'s ``nn.MultiheadAttention`` modules."""
    import torch
    return [m for m in model.modules() if isinstance(m, torch.nn.MultiheadAttention)]


def use_kernel(model, token: str) -> int:
    """Makes every ``nn.MultiheadAttention`` of ``model`` run under ``token``'s kernel; the number
    of them (none is no attention to choose for)."""
    found = attentions(model)
    for module in found:
        under_kernel(module, token)
    return len(found)


def switchable(model) -> bool:
    """Whether ``model`` is a transformers model whose attention its ``attn_implementation`` picks."""
    return hasattr(model, "set_attn_implementation") and hasattr(getattr(model, "config", None),
                                                                 "_attn_implementation")


def use_implementation(model, blocks, token: str) -> None:
    """A transformers model's attention by ``token``: its eager implementation for attn_eager,
    else its SDPA implementation with every block run under the one kernel."""
    if token == "attn_eager":
        model.set_attn_implementation("eager")
        return
    model.set_attn_implementation("sdpa")
    for block in blocks:
        under_kernel(block, token)
