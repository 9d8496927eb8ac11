"""`harness try` under the newer knobs: each applied to a small transformers Llama (built as the
built-in llama-1b is) by the suite's own pieces, against the mechanism it claims; a knob a model
cannot take refused in one line before anything runs, or left out of `--ways newer`, said; qlora's
base frozen in NF4; the ways held to a criterion of their own held to it."""
import contextlib
import importlib.util
import io
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
# Looked up, not imported: importing transformers and peft at collection would cost every worker
# seconds, where only the one that runs this file needs them.
for name, extra in (("transformers", "models"), ("peft", "ways")):
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"the {extra} extra is absent: pip install 'oombench[{extra}]'", allow_module_level=True)

from harness.drive.commands import cli, tryout  # noqa: E402
from harness.measure.outcomes import CheckFailed  # noqa: E402
from harness.workloads.training import user_model, ways  # noqa: E402
from harness.workloads.training.precision import process  # noqa: E402

LLAMA = "tests/data/try_models.py:tiny_llama"
TINY = "tests/data/try_models.py:tiny"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def trainer_of(technique, target=LLAMA, steps=0):
    way = ways.parse(technique)
    with process(way):
        trainer, _ = user_model.make_trainer(target, way, 2, 0, "cpu")
        for _ in range(steps):
            trainer.step()
    return trainer


def first_grads(technique):
    trainer = trainer_of(technique)
    loss = float(trainer.backward())
    return trainer, loss, {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def fp32():
    return first_grads("fp32")


@pytest.mark.parametrize("technique", ["chunked_loss", "attn_eager", "checkpoint+attn_eager+chunked_loss"])
def test_the_chunked_loss_and_eager_attention_give_fp32s_loss_and_gradients_on_a_transformers_llama(fp32, technique):
    trainer, loss, grads = first_grads(technique)
    _, ref_loss, ref_grads = fp32
    assert loss == pytest.approx(ref_loss, abs=1e-5) and grads.keys() == ref_grads.keys()
    assert all(torch.allclose(g, ref_grads[n], atol=1e-5) for n, g in grads.items())
    if "attn_eager" in technique:  # the model's own switch, not SDPA's math kernel
        assert trainer.model.config._attn_implementation == "eager"
    if "chunked_loss" in technique:  # the forward stops at the hidden states: the head is the loss's
        inputs, _ = trainer.micro_batches[0]
        assert trainer.forward(**inputs[0]).shape[-1] == trainer.model.config.hidden_size


def kernels_seen(technique):
    """The trainer of ``technique``, and a list each attention call appends to the SDPA kernels
    allowed in it, (flash, memory-efficient, math)."""
    trainer, seen, b = trainer_of(technique), [], torch.backends.cuda
    assert trainer.model.config._attn_implementation == "sdpa"
    for layer in trainer.model.model.layers:
        layer.self_attn.register_forward_pre_hook(lambda *_: seen.append(
            (b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.math_sdp_enabled())))
    return trainer, seen


@pytest.mark.parametrize("technique", ["attn_flash", "checkpoint+attn_flash"])
def test_an_sdpa_kernel_is_the_only_one_allowed_in_every_attention_call_recomputed_ones_too(technique):
    trainer, seen = kernels_seen(technique)
    inputs, targets = trainer.micro_batches[0]
    trainer.loss_sum(trainer.forward, inputs, targets)[0].backward()
    recomputed = 2 if "checkpoint" in technique else 1
    assert seen == [(True, False, False)] * (2 * recomputed)  # two layers, again in backward where checkpointed
    b = torch.backends.cuda
    assert (b.flash_sdp_enabled(), b.math_sdp_enabled()) == (True, True)  # outside the calls, as it was
    trainer, seen = kernels_seen("attn_mem_efficient")
    with pytest.raises(RuntimeError, match="No viable backend"):  # CUDA's kernel alone: none left on the CPU
        trainer.backward()
    assert seen == [(False, True, False)]


def test_lora_adapts_every_projection_and_only_the_adapters_train_or_hold_state():
    trainer = trainer_of("lora", steps=2)
    named = dict(trainer.model.named_parameters())
    adapters = {n for n in named if "lora_" in n}
    for i in range(2):
        for part in PROJECTIONS:
            assert any(f"layers.{i}." in n and f".{part}." in n for n in adapters), (i, part)
    assert {n for n, p in named.items() if p.requires_grad} == adapters  # embedding, norms and head frozen
    assert {id(p) for p in trainer.optimizer.state} == {id(named[n]) for n in adapters}


def test_qlora_keeps_each_adapted_projection_frozen_in_nf4_and_trains_the_adapters(fp32):
    from torchao.quantization import NF4Tensor
    from harness.workloads.training.optimizers import _tensor_bytes
    trainer = trainer_of("qlora", steps=2)  # NF4's dequantisation is slow on the CPU: two steps
    bases = {n: p for n, p in trainer.model.named_parameters() if n.endswith("base_layer.weight")}
    assert len(bases) == 2 * len(PROJECTIONS)
    assert all(isinstance(p, NF4Tensor) and not p.requires_grad for p in bases.values())
    values = sum(p.numel() for p in bases.values())
    # 4 bits a weight, and a scale per 64 quantised in 8 bits: about an eighth of fp32's bytes
    assert sum(_tensor_bytes(p) for p in bases.values()) < 0.15 * 4 * values
    assert {id(p) for p in trainer.optimizer.state} == {id(p) for n, p in trainer.model.named_parameters()
                                                       if "lora_" in n}
    losses = [float(v) for v in trainer.losses]
    assert losses[-1] < losses[0]
    # the forward computes with the rounded weights: not fp32's first loss to the last digit
    assert losses[0] != pytest.approx(fp32[1], abs=1e-6)


@pytest.mark.parametrize("technique, kind", [("adafactor", torch.optim.Adafactor), ("sgd_momentum", torch.optim.SGD),
                                             ("adam_bf16_state", None)])
def test_the_optimizer_knob_hands_the_model_to_its_optimizer(technique, kind, monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)  # torchao's update, eagerly: a minute on the CPU
    trainer = trainer_of(technique, steps=2)
    if kind is not None:
        assert type(trainer.optimizer) is kind
    else:
        state = next(iter(trainer.optimizer.state.values()))
        assert state["exp_avg"].dtype == torch.bfloat16
    assert trainer.clock_first == ways.parse(technique).compiles and float(trainer.losses[-1]) < float(
        trainer.losses[0])


def test_compile_wraps_the_forward_in_its_mode_and_clocks_its_first_steps(monkeypatch):
    modes = []
    monkeypatch.setattr(torch, "compile", lambda fn, mode: modes.append(mode) or fn)
    trainer = trainer_of("compile_max_autotune+chunked_loss", steps=2)
    assert modes == ["max-autotune-no-cudagraphs"] and trainer.forward is not trainer.model  # the hidden states'
    assert len(trainer.first_steps_s) == 2


def refused(*argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(["try", *argv])
    return code, err.getvalue()


@pytest.mark.parametrize("way, says", [
    ("chunked_loss", "chunked_loss computes a transformers causal LM's output projection and cross-entropy over "
                     "chunks of tokens, and the model is a Tiny: drop it"),
    ("bf16_autocast+attn_eager", "attn_eager chooses the kernel of a transformers model's attention "
                                 "(attn_implementation) or of nn.MultiheadAttention, and the model has neither: "
                                 "drop it"),
    ("qlora", "qlora quantises the adapted nn.Linear weights in blocks of 16384 values, and none of the model's "
              "holds a multiple of it: try lora"),
])
def test_a_knob_the_model_cannot_take_is_refused_in_one_line_naming_the_fix(way, says, tmp_path):
    code, err = refused(TINY, "--ways", f"checkpoint,{way}", "--results", str(tmp_path / "results"))
    assert code == 2 and err.count("\n") == 1, err
    assert err == f"oombench try: --ways {ways.canonical(way)}: {TINY}: {says}\n"
    assert not (tmp_path / "results").exists()


def test_a_model_without_blocks_is_refused_lora_naming_the_factorys_blocks():
    spec = user_model.Spec(torch.nn.Linear(4, 4), lambda n, d: None)
    assert user_model.misfit(spec, ways.parse("lora")).endswith(
        "return blocks=[...] (the modules holding its projections) from the factory")
    assert user_model.misfit(spec, ways.parse("sgd_momentum+compile")) is None  # any model takes these


def test_newer_is_each_knob_alone_and_on_the_leading_way_and_the_default_stays_as_it_was():
    args = lambda w: SimpleNamespace(ways=w)  # noqa: E731
    chosen = lambda w, device: [way.name for way in tryout.chosen_ways(args(w), device)]  # noqa: E731
    assert chosen(None, "cuda") == user_model.default_ways("cuda")
    newer = chosen("newer", "cuda")
    singles = [t for k in ways.NEWER_KNOBS for t in ways.KNOBS[k]]
    assert newer[0] == "fp32" and "attn_flash" not in newer  # flash takes no fp32 inputs on CUDA
    assert newer == ["fp32", *(t for t in singles if t != "attn_flash"), "bf16_autocast+checkpoint",
                     *(f"bf16_autocast+checkpoint+{t}" for t in singles)]
    on_cpu = chosen("default,newer", "cpu")
    assert "attn_mem_efficient" not in on_cpu and "checkpoint+sgd_momentum" in on_cpu
    assert on_cpu[:len(user_model.default_ways("cpu"))] == user_model.default_ways("cpu")


def test_newer_leaves_out_what_the_model_cannot_take_and_says_so_before_anything_runs(capsys):
    chosen = tryout.chosen_ways(SimpleNamespace(ways="newer"), "cpu")
    seen = user_model.preflight(TINY, 2, 0, chosen)
    assert set(seen["refused"]) == {w.name for w in chosen if {"attn_eager", "attn_flash", "chunked_loss", "qlora"}
                                    & set(w.name.split("+"))}
    t = tryout.Try(SimpleNamespace(ways="newer", target=TINY, card=["l4-24gb"], batch=2, seq_len=0), seen)
    names = {w.name for w in t.ways}
    assert {"lora", "checkpoint+lora"} <= names and not names & set(seen["refused"])
    assert f"{len(t.ways)} ways on the whole card" in t.cost()


def test_a_way_with_a_criterion_of_its_own_is_held_to_it_in_try_not_to_fp32s_curve(monkeypatch):
    from harness.cases import try_model
    fp32_curve = [4.0, 3.0, 2.0]
    monkeypatch.setattr(try_model, "fp32_curve", lambda *a: fp32_curve)
    falling = SimpleNamespace(losses=[4.0, 3.8, 3.7], skipped=[False] * 3)
    compared = try_model.reference_check(ways.parse("checkpoint+lora"), falling, None, {})
    assert compared["fell"] == pytest.approx(0.075) and compared["deviation"] == pytest.approx(0.425)
    assert compared["reference_first_run"] == "this run's fp32 record"
    with pytest.raises(CheckFailed, match="under the 0.01 its criterion asks"):
        try_model.reference_check(ways.parse("qlora"), SimpleNamespace(losses=[4.0, 4.1, 3.99], skipped=[]), None,
                                  {})
    with pytest.raises(CheckFailed, match="over the 0.01 allowed"):  # a curve-held way is still held to the curve
        try_model.reference_check(ways.parse("attn_eager"), falling, None, {})


def test_the_try_case_trains_a_combination_of_newer_knobs_and_files_its_own_criterion():
    from harness.drive.runner import execute
    rec = execute("try", {"device": "cpu", "target": LLAMA, "technique": "checkpoint+lora+chunked_loss",
                          "budget": "card", "batch": 2, "seq_len": 0})
    assert rec.outcome == "ok", rec.reason
    assert rec.check["fell"] >= ways.TRAINS and "not to fp32's curve" in rec.check["criterion"]
    assert rec.check["reference_first_run"] == "fp32 trained after the case" and len(rec.check["reference_losses"]) == 7


def test_the_default_group_named_beside_newer_still_runs_cpu_offload_only_where_a_card_needs_it():
    from test_try import Fake
    t = object.__new__(tryout.Try)
    t.args = SimpleNamespace(ways="default,newer", card=["l4-24gb"])
    lean = {"fp32": Fake("fp32", "card", 4, "ok", 30e9, 1),
            "bf16_params": Fake("bf16_params", "card", 4, "ok", 12e9, 1)}
    assert t.needless(ways.parse("bf16_params+checkpoint+cpu_offload"), lean)
    t.args.ways = "newer,bf16_params+checkpoint+cpu_offload"  # named: it runs
    assert not t.needless(ways.parse("bf16_params+checkpoint+cpu_offload"), lean)
