"""The shared PyTorch models: tied embeddings share one storage, and the language model has no
batch statistics, so a batch split in two gives the whole batch's gradient."""
import pytest
import torch

from harness.workloads.models import LMConfig, parameter_count, tokens, transformer_lm

SMALL = dict(vocab=97, width=32, depth=2, heads=4, seq_len=16)


def test_tied_embeddings_share_one_storage_and_drop_the_head_from_the_count():
    untied = transformer_lm(LMConfig(**SMALL))
    tied = transformer_lm(LMConfig(**SMALL, tie_embeddings=True))
    assert tied.head.weight.data_ptr() == tied.embed.weight.data_ptr()
    assert untied.head.weight.data_ptr() != untied.embed.weight.data_ptr()
    assert parameter_count(untied) - parameter_count(tied) == SMALL["vocab"] * SMALL["width"]


def test_language_model_is_causal():
    model = transformer_lm(LMConfig(**SMALL))
    x, _ = tokens(2, 16, SMALL["vocab"])
    y = x.clone()
    y[:, 10:] = (y[:, 10:] + 1) % SMALL["vocab"]  # change only the future of position 9
    with torch.no_grad():
        assert torch.allclose(model(x)[:, :10], model(y)[:, :10], atol=1e-6)
        assert not torch.allclose(model(x)[:, 10:], model(y)[:, 10:])


def test_split_batch_gives_the_whole_batch_gradient():
    model = transformer_lm(LMConfig(**SMALL), seed=3)
    x, t = tokens(4, 16, SMALL["vocab"], seed=1)
    loss = lambda xs, ts: torch.nn.functional.cross_entropy(model(xs).flatten(0, 1), ts.flatten(), reduction="sum")  # noqa: E731
    whole = torch.autograd.grad(loss(x, t), list(model.parameters()))
    halves = [torch.autograd.grad(loss(x[i:i + 2], t[i:i + 2]), list(model.parameters())) for i in (0, 2)]
    for w, a, b in zip(whole, *halves):
        assert torch.allclose(w, a + b, rtol=1e-4, atol=1e-5)


def test_width_must_divide_into_heads():
    with pytest.raises(ValueError, match="multiple of heads"):
        LMConfig(width=30, heads=4)
