"""The ``precision`` knob: the dtypes a step computes and keeps its parameters in, and the process
setting it needs (TF32 for fp32 matrix products).

- ``fp32``: full fp32, TF32 off for matrix products and convolutions (the reference);
- ``tf32``: fp32 parameters and activations, matrix products on TF32 tensor cores (CUDA only;
  on the CPU it is fp32);
- ``fp16_autocast``: fp32 master parameters, fp16 compute under autocast, losses scaled by a
  ``GradScaler`` so that small fp16 gradients do not flush to zero;
- ``bf16_autocast``: as above in bf16, whose fp32-sized exponent needs no scaler;
- ``bf16_params``: parameters, gradients and optimizer state in bf16 (no fp32 master copy):
  the smallest footprint, and the one most likely to hurt the loss.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

PRECISIONS = ("fp32", "tf32", "fp16_autocast", "bf16_autocast", "bf16_params")


@dataclass(frozen=True)
class Precision:
    name: str
    autocast: object = None  # torch dtype under autocast, or None
    param_dtype: object = None  # torch dtype of the parameters, None for fp32
    scaler: bool = False
    tf32: bool = False


def precision(name: str) -> Precision:
    import torch
    table = {"fp32": Precision("fp32"), "tf32": Precision("tf32", tf32=True),
             "fp16_autocast": Precision("fp16_autocast", autocast=torch.float16, scaler=True),
             "bf16_autocast": Precision("bf16_autocast", autocast=torch.bfloat16),
             "bf16_params": Precision("bf16_params", param_dtype=torch.bfloat16)}
    if name not in table:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    return table[name]


@contextlib.contextmanager
def float32_matmul(tf32: bool):
    """TF32 on or off for fp32 matrix products and cuDNN convolutions, put back on exit.
    cuDNN allows TF32 by default, so the fp32 reference must turn it off explicitly."""
    import torch
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


@contextlib.contextmanager
def process(way):
    """The process piece of ``way`` (a ``ways.Way``), for the caller's life: TF32 for fp32 matrix
    products under tf32 (off otherwise, as the fp32 reference needs); yields its ``Precision``,
    which ``tricks.make_trainer`` builds the step in. The allocator setting is set once, before
    torch starts, by whoever starts the step (``allocator.use_torch(way.allocator)``)."""
    with float32_matmul(way.precision == "tf32"):
        yield precision(way.precision)
