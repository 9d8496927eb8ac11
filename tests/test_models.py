"""The shared PyTorch models: tied embeddings share one storage, and the language model has no
batch statistics, so a batch split in two gives the whole batch's gradient."""
import pytest
import torch

from harness.workloads.training.models import (EncDecConfig, LMConfig, encoder_decoder, images, lm_layers,
                                               parameter_count, resnet50, resnet_layers, run_block, tokens,
                                               transformer_lm)

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
    loss = lambda xs, ts: torch.nn.functional.cross_entropy(model(xs).flatten(0, 1), ts.flatten(), reduction="sum")
    whole = torch.autograd.grad(loss(x, t), list(model.parameters()))
    halves = [torch.autograd.grad(loss(x[i:i + 2], t[i:i + 2]), list(model.parameters())) for i in (0, 2)]
    for w, a, b in zip(whole, *halves):
        assert torch.allclose(w, a + b, rtol=1e-4, atol=1e-5)


def test_width_must_divide_into_heads():
    with pytest.raises(ValueError, match="multiple of heads"):
        LMConfig(width=30, heads=4)


# -- what each model is: its size, its outputs, and the forms the techniques run it in ---------------

def lm_parameters(c: LMConfig) -> int:
    w = c.width
    block = 2 * 2 * w + (3 * w * w + 3 * w) + (w * w + w) + (w * 4 * w + 4 * w) + (4 * w * w + w)
    return c.vocab * w + c.seq_len * w + c.depth * block + 2 * w + (0 if c.tie_embeddings else w * c.vocab)


@pytest.mark.parametrize("config", [LMConfig(**SMALL), LMConfig(**SMALL, tie_embeddings=True), LMConfig()])
def test_the_language_model_has_the_parameters_its_config_says(config):
    with torch.device("meta"):  # the full-size model's shapes, no memory
        model = transformer_lm(config)
    assert parameter_count(model) == lm_parameters(config)
    assert len(model.blocks) == config.depth and model.blocks[0].attn.num_heads == config.heads


def test_the_default_language_model_is_the_one_the_docs_name():
    assert round(lm_parameters(LMConfig()) / 1e6, 1) == 217.7  # "217.7 M parameters" in the README's headline


def test_the_language_model_gives_logits_per_position_and_the_same_weights_for_a_seed():
    config = LMConfig(**SMALL)
    x, _ = tokens(3, 16, SMALL["vocab"])
    a, b, c = transformer_lm(config, seed=5), transformer_lm(config, seed=5), transformer_lm(config, seed=6)
    assert a(x).shape == (3, 16, SMALL["vocab"])
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embed.weight, c.embed.weight)


def test_a_tied_head_starts_as_the_embedding_scaled_to_unit_logits():
    untied = transformer_lm(LMConfig(**SMALL), seed=2)
    tied = transformer_lm(LMConfig(**SMALL, tie_embeddings=True), seed=2)
    assert torch.allclose(tied.embed.weight, untied.embed.weight * SMALL["width"] ** -0.5)


def grads(model, *inputs):
    out = model(*inputs)
    out.square().mean().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def test_checkpointed_blocks_compute_the_same_outputs_and_gradients():
    x, _ = tokens(2, 16, SMALL["vocab"], seed=4)
    plain, ckpt = transformer_lm(LMConfig(**SMALL), seed=1), transformer_lm(LMConfig(**SMALL), seed=1)
    ckpt.checkpoint_blocks = True
    (out_p, g_p), (out_c, g_c) = grads(plain, x), grads(ckpt, x)
    assert torch.allclose(out_p, out_c, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_p, g_c))


def test_run_block_passes_keywords_whether_checkpointed_or_not():
    block = torch.nn.Linear(4, 4)
    calls = []

    def f(x, scale=1.0):
        calls.append(scale)
        return block(x) * scale

    x = torch.ones(2, 4, requires_grad=True)
    plain = run_block(f, x, scale=3.0)
    again = run_block(f, x, checkpointed=True, scale=3.0)
    again.sum().backward()  # the checkpointed forward runs once more in backward
    assert torch.allclose(plain, again) and calls == [3.0, 3.0, 3.0]


def test_the_language_model_as_layers_computes_the_model_exactly():
    model = transformer_lm(LMConfig(**SMALL), seed=7)
    x, _ = tokens(2, 16, SMALL["vocab"], seed=8)
    layers = lm_layers(model)
    assert len(layers) == SMALL["depth"] + 2
    h = x
    for layer in layers:
        h = layer(h)
    with torch.no_grad():
        assert torch.equal(h, model(x))
    ours = {id(p) for layer in layers for p in layer.parameters()}
    assert ours == {id(p) for p in model.parameters()}  # the same parameters, none copied


ED = dict(vocab=53, width=16, depth=2, heads=2, seq_len=12)


def test_the_encoder_decoder_shares_one_embedding_when_asked_and_is_causal_in_its_decoder():
    shared = encoder_decoder(EncDecConfig(**ED, shared_embedding=True))
    separate = encoder_decoder(EncDecConfig(**ED))
    assert shared.target_embed is shared.embed and shared.head.weight is shared.embed.weight
    assert separate.target_embed is not separate.embed
    assert parameter_count(separate) - parameter_count(shared) == 2 * ED["vocab"] * ED["width"]
    src, _ = tokens(2, 10, ED["vocab"], seed=1)
    tgt, _ = tokens(2, 8, ED["vocab"], seed=2)
    changed = tgt.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % ED["vocab"]
    separate.eval()
    with torch.no_grad():
        out = separate(src, tgt)
        assert out.shape == (2, 8, ED["vocab"])
        assert torch.allclose(out[:, :5], separate(src, changed)[:, :5], atol=1e-6)
        assert not torch.allclose(out[:, 5:], separate(src, changed)[:, 5:])


def test_the_encoder_decoder_checkpointed_computes_the_same():
    src, _ = tokens(2, 10, ED["vocab"], seed=1)
    tgt, _ = tokens(2, 8, ED["vocab"], seed=2)
    plain, ckpt = encoder_decoder(EncDecConfig(**ED), seed=3), encoder_decoder(EncDecConfig(**ED), seed=3)
    ckpt.checkpoint_blocks = True
    (out_p, g_p), (out_c, g_c) = grads(plain, src, tgt), grads(ckpt, src, tgt)
    assert torch.allclose(out_p, out_c, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_p, g_c))
    with pytest.raises(ValueError, match="multiple of heads"):
        EncDecConfig(width=30, heads=4)


def test_resnet50_as_layers_computes_the_model_exactly():
    pytest.importorskip("torchvision", reason="torchvision is not in the torch extra: the GPU image brings it")
    model = resnet50(num_classes=10, seed=1).eval()
    assert parameter_count(model) == parameter_count(resnet50(seed=1)) - 990 * 2049
    x, one_hot = images(2, 32, 10, seed=3)
    h = x
    for layer in resnet_layers(model):
        h = layer(h)
    with torch.no_grad():
        assert torch.equal(h, model(x))


def test_the_synthetic_data_is_seeded_and_shaped_as_the_cases_use_it():
    x, t = tokens(3, 7, 11, seed=4)
    assert x.shape == t.shape == (3, 7) and torch.equal(x[:, 1:], t[:, :-1])  # targets: the next token
    assert int(x.min()) >= 0 and int(t.max()) < 11
    assert torch.equal(tokens(3, 7, 11, seed=4)[0], x) and not torch.equal(tokens(3, 7, 11, seed=5)[0], x)
    imgs, one_hot = images(4, 8, 5, seed=2)
    assert imgs.shape == (4, 3, 8, 8) and one_hot.shape == (4, 5)
    assert torch.equal(one_hot.sum(1), torch.ones(4)) and set(one_hot.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(images(4, 8, 5, seed=2)[0], imgs) and not torch.equal(images(4, 8, 5, seed=3)[0], imgs)


def test_a_block_is_pre_norm_with_both_residuals():
    """What each block computes, from its own submodules: x + attn(norm1(x)) causal, then + mlp(norm2(.))."""
    model = transformer_lm(LMConfig(**SMALL), seed=9)
    block = model.blocks[0]
    x = torch.randn(2, 16, SMALL["width"], generator=torch.Generator().manual_seed(1))
    causal = torch.ones(16, 16, dtype=torch.bool).triu(1)
    with torch.no_grad():
        h = block.norm1(x)
        x1 = x + block.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        assert torch.allclose(block(x), x1 + block.mlp(block.norm2(x1)), atol=1e-5)
        positions = model.position(torch.arange(16))
        ids, _ = tokens(2, 16, SMALL["vocab"], seed=2)
        h = model.embed(ids) + positions
        for b in model.blocks:
            h = b(h)
        assert torch.allclose(model(ids), model.head(model.norm(h)), atol=1e-5)
    assert model.head.bias is None and block.mlp[0].out_features == 4 * SMALL["width"]
    assert isinstance(block.mlp[1], torch.nn.GELU) and len(block.mlp) == 3


def test_no_model_checkpoints_unless_the_technique_asks_and_then_every_block_does(monkeypatch):
    from harness.workloads.training import models
    seen = []
    real = models.run_block
    monkeypatch.setattr(models, "run_block", lambda *a, checkpointed=False, **k: seen.append(checkpointed)
                        or real(*a, checkpointed=checkpointed, **k))
    lm, ed = transformer_lm(LMConfig(**SMALL)), encoder_decoder(EncDecConfig(**ED))
    assert lm.checkpoint_blocks is False and ed.checkpoint_blocks is False
    src, _ = tokens(2, 10, ED["vocab"])
    lm(tokens(2, 16, SMALL["vocab"])[0])
    ed(src, src)
    assert seen == [False] * (SMALL["depth"] + 2 * ED["depth"])
    seen.clear()
    lm.checkpoint_blocks = ed.checkpoint_blocks = True
    lm(tokens(2, 16, SMALL["vocab"])[0])
    ed(src, src)
    assert seen == [True] * (SMALL["depth"] + 2 * ED["depth"])


def test_the_encoder_decoder_has_its_layers_as_configured():
    model = encoder_decoder(EncDecConfig(**ED), seed=1)
    assert len(model.encoder) == len(model.decoder) == ED["depth"] and model.head.bias is None
    for layer in [*model.encoder, *model.decoder]:
        assert layer.linear1.out_features == 4 * ED["width"] and layer.norm_first and layer.dropout.p == 0.0
        assert layer.activation is torch.nn.functional.gelu
    ids, _ = tokens(2, 10, ED["vocab"], seed=3)
    with torch.no_grad():
        assert torch.equal(model._embedded(model.embed, ids), model.embed(ids) + model.position(torch.arange(10)))


def test_the_models_run_where_their_inputs_are():
    """On the meta device: every tensor a model makes for itself (positions, masks) follows its input."""
    with torch.device("meta"):
        lm, ed = transformer_lm(LMConfig(**SMALL)), encoder_decoder(EncDecConfig(**ED))
    ids, targets = tokens(2, 10, SMALL["vocab"], device="meta")
    assert ids.device.type == targets.device.type == "meta"
    assert lm(ids).device.type == "meta" and lm(ids).shape == (2, 10, SMALL["vocab"])
    src, _ = tokens(2, 10, ED["vocab"], device="meta")
    assert ed(src, src).device.type == "meta"
    imgs, one_hot = images(2, 8, 5, device="meta")
    assert imgs.device.type == one_hot.device.type == "meta"


def test_synthetic_labels_and_tokens_cover_every_class_and_id_and_follow_the_seed():
    ids, _ = tokens(4, 64, 2, seed=1)
    assert set(ids.unique().tolist()) == {0, 1}
    _, one_hot = images(64, 1, 2, seed=1)
    assert set(one_hot.argmax(1).tolist()) == {0, 1}
    assert torch.equal(images(8, 1, 5, seed=4)[1], images(8, 1, 5, seed=4)[1])
