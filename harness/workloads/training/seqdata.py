"""Batches of sequences of different lengths, as real text comes: padded to the longest in the
batch, or cut at a cap first. One outlier (a sequence far longer than the rest) makes a padded
batch as wide as the outlier; the cap bounds the width whatever the data holds.

Sequences are 1-D token id tensors of length L + 1 (inputs and next-token targets). Padding is
``PAD_ID`` in the inputs and ``IGNORE`` in the targets, so the loss skips it; the language model
is causal with right padding, so pads never reach a real position.
"""
from __future__ import annotations

PAD_ID = 0
IGNORE = -100  # torch.nn.functional.cross_entropy's default ignore_index
OUTLIER_FACTOR = 4  # the outlier is this many times the typical maximum length


def _torch():
    from harness.measure.guards.requirements import need_module
    return need_module("torch", "pip install 'oombench[torch]'")


def outlier_sequences(batch: int, seq_len: int, vocab: int, seed: int = 0) -> list:
    """``batch`` sequences of lengths drawn from [seq_len / 2, seq_len], the first of them
    ``OUTLIER_FACTOR * seq_len`` long instead."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, seq_len // 2), seq_len + 1, (batch,), generator=gen).tolist()
    lengths[0] = OUTLIER_FACTOR * seq_len
    return [torch.randint(1, vocab, (n + 1,), generator=gen) for n in lengths]


def pad_to_longest(sequences):
    """(inputs, targets), each (batch, longest length), right-padded."""
    torch = _torch()
    width = max(len(s) for s in sequences) - 1
    inputs = torch.full((len(sequences), width), PAD_ID, dtype=torch.long)
    targets = torch.full((len(sequences), width), IGNORE, dtype=torch.long)
    for row, s in enumerate(sequences):
        inputs[row, :len(s) - 1], targets[row, :len(s) - 1] = s[:-1], s[1:]
    return inputs, targets


def capped(sequences, cap: int):
    """Each sequence cut to at most ``cap`` positions (its tail dropped), then padded to the
    longest that is left: never wider than ``cap``."""
    if cap < 1:
        raise ValueError(f"the sequence cap must be at least 1, got {cap}")
    return pad_to_longest([s[:cap + 1] for s in sequences])
