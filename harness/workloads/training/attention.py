"""The ``attention`` knob: which kernel computes every ``nn.MultiheadAttention``'s
softmax(QK^T)V. The models call it with ``need_weights=False`` and ``is_causal``, so torch hands
it to ``scaled_dot_product_attention``, which by default picks the first kernel that takes the
inputs (flash for half inputs on CUDA, memory-efficient for fp32): what the records without the
knob ran. The knob allows one kernel: SDPA's math kernel for attn_eager (the scores, batch x
heads x seq x seq, written out and kept for backward, as an eager ``softmax(q @ k.T) @ v`` does),
or flash or memory-efficient alone (an error where it cannot take the inputs, not a quiet
fallback). The choice is made inside each attention's own call, so a block recomputed under
checkpointing recomputes with the same kernel."""
from __future__ import annotations

KERNELS = {"attn_eager": "MATH", "attn_flash": "FLASH_ATTENTION", "attn_mem_efficient": "EFFICIENT_ATTENTION"}


def use_kernel(model, token: str) -> int:
    """Makes every ``nn.MultiheadAttention`` of ``model`` run under ``token``'s kernel; the number
    of them (none is no attention to choose for)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, KERNELS[token])
    attentions = [m for m in model.modules() if isinstance(m, torch.nn.MultiheadAttention)]
    for module in attentions:
        plain = module.forward

        def forward(*args, _plain=plain, **kwargs):
            with sdpa_kernel(backend):
                return _plain(*args, **kwargs)
        module.forward = forward
    return len(attentions)
