"""The optimizers the ``optimizer`` knob names, each a factory ``(params, lr) -> optimizer``.

Adam with fp32 moments is the default (``trainer.Trainer``). The others keep less state:
torchao's 8-bit AdamW (two moments, one byte a value in blocks of 256 with one scale each),
Adam with bf16 moments (torchao's Adam update, its buffers made bf16), Adafactor (torch's: the
second moment of a matrix factored into a row and a column), SGD with momentum (one buffer).
AdamW's weight decay is 0, so the 8-bit one computes Adam's update, as fp32 Adam does (whose
default decay is 0 too). Adafactor and SGD train at their own rates (``ways.TRAINS`` holds them)."""
from __future__ import annotations

# SGD's rate: Adam moves each weight by about its rate whatever the gradient's size, SGD by the
# gradient times the rate, and the LM's mean-loss gradients are small: the rate SGD with
# momentum 0.9 is usually run at on such models.
SGD_LR, SGD_MOMENTUM = 0.1, 0.9
OWN_RATE = ("adafactor", "sgd_momentum")  # the optimizers whose rate is their own, not Adam's


def _adamw8bit(params, lr):
    from torchao.optim import AdamW8bit
    return AdamW8bit(params, lr=lr, weight_decay=0.0)


def _adam_bf16_state(params, lr):
    import torch
    from torchao.optim.adam import _AdamBase

    class AdamBf16State(_AdamBase):
        """torchao's Adam update (computed in fp32) on moments kept in bf16. torchao makes a buffer
        of its own kind only for tensors of a multiple of ``block_size`` values, 4096 or more
        (smaller ones stay in the parameter's dtype): a block of one takes every such tensor."""

        @staticmethod
        def _subclass_zeros(p, signed, block_size):
            return torch.zeros_like(p, dtype=torch.bfloat16)

    return AdamBf16State(params, lr, (0.9, 0.999), 1e-8, 0.0, False, block_size=1, bf16_stochastic_round=False,
                         is_adamw=False)


def _adafactor(params, lr):
    import torch
    return torch.optim.Adafactor(params)  # its own relative step: the rate scales with each weight's size


def _sgd_momentum(params, lr):
    import torch
    return torch.optim.SGD(params, lr=SGD_LR, momentum=SGD_MOMENTUM)


OPTIMIZERS = {"": None, "adamw8bit": _adamw8bit, "adam_bf16_state": _adam_bf16_state, "adafactor": _adafactor,
              "sgd_momentum": _sgd_momentum}


def state_bytes(optimizer) -> int:
    """The bytes an optimizer's state holds on any device, tensor subclasses (torchao's 8-bit
    codes and scales) counted by the plain tensors inside them."""
    import torch
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                total += _tensor_bytes(value)
    return total


def _tensor_bytes(t) -> int:
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()
