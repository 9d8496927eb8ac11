"""The ``chunked_loss`` knob: the LM's output projection and cross-entropy over chunks of
tokens. Each chunk's logits (chunk x vocab) are made, summed into the loss and dropped; backward
recomputes them one chunk at a time (each chunk checkpointed), so the whole logits (batch x seq x
vocab, and their gradient) never exist."""
from __future__ import annotations

CHUNK_TOKENS = 1024  # one chunk's fp32 logits are 1024 x vocab floats: 131 MB at 32,000 words


def _chunk_loss(hidden, weight, targets, bias=None):
    import torch
    from harness.workloads.training.seqdata import IGNORE
    logits = torch.nn.functional.linear(hidden, weight, bias)
    return torch.nn.functional.cross_entropy(logits.float(), targets, ignore_index=IGNORE, reduction="sum")


def chunked_cross_entropy(hidden, weight, targets, chunk: int = CHUNK_TOKENS, bias=None):
    """The summed cross-entropy of ``hidden @ weight.T + bias`` (the logits) against ``targets``,
    chunk tokens at a time: ``hidden`` (..., width), ``targets`` (...)."""
    from torch.utils.checkpoint import checkpoint
    hidden, targets = hidden.flatten(0, -2), targets.flatten()
    total = 0.0
    for start in range(0, hidden.shape[0], chunk):
        part = slice(start, start + chunk)
        total = total + checkpoint(_chunk_loss, hidden[part], weight, targets[part], bias, use_reentrant=False)
    return total


def token_loss_sum(head):
    """``trainer.token_loss_sum`` for a model whose forward stops before ``head`` (its
    ``head_in_loss`` set): the projection applied in the loss, over chunks."""
    from harness.workloads.training.trainer import token_loss_sum as whole

    def loss_sum(model, inputs, targets):
        if model is None:
            return whole(None, None, targets)
        return chunked_cross_entropy(model(*inputs), head.weight, targets), whole(None, None, targets)[1]
    return loss_sum
