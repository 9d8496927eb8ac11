"""The newer knobs on a tiny CPU LM, each against the mechanism it claims: the chunked loss and
the eager attention give fp32's loss and gradients, LoRA freezes the model (no gradient, no
optimizer state), the 8-bit and bf16 moments take fewer bytes than Adam's, compile's time is kept
apart, a missing package or an impossible kernel is a skip naming the fix, and the ways held to a
falling loss fail where it does not fall."""
import time

import pytest
import torch

from harness.measure.outcomes import CheckFailed, Skip
from harness.workloads.training import reference
from harness.workloads.training import ways
from harness.workloads.training.chunked import chunked_cross_entropy
from harness.workloads.training.optimizers import state_bytes
from harness.workloads.training.ways import parse

from test_tricks import STEP
from conftest import make_trainer


def one_step_grads(technique):
    """The loss and every trained weight's gradient after one forward and backward of ``technique``."""
    trainer, _ = make_trainer(**dict(STEP, way=parse(technique)))
    loss = trainer.backward()
    return float(loss), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def fp32_grads():
    return one_step_grads("fp32")


@pytest.mark.parametrize("technique", ["chunked_loss", "attn_eager", "checkpoint+attn_eager+chunked_loss"])
def test_the_chunked_loss_and_the_eager_attention_give_fp32s_loss_and_gradients(fp32_grads, technique):
    loss, grads = one_step_grads(technique)
    ref_loss, ref_grads = fp32_grads
    assert loss == pytest.approx(ref_loss, abs=1e-5) and grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(grad, ref_grads[name], atol=1e-5), name


def test_the_chunked_loss_never_makes_more_than_a_chunk_of_logits():
    hidden, weight = torch.randn(10, 8, requires_grad=True), torch.randn(50, 8, requires_grad=True)
    targets = torch.randint(0, 50, (10,))
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        total = chunked_cross_entropy(hidden, weight, targets, chunk=4)
    total.backward()
    whole = torch.nn.functional.cross_entropy(hidden @ weight.T, targets, reduction="sum")
    assert float(total.detach()) == pytest.approx(float(whole.detach()), rel=1e-6)
    assert (10, 50) not in shapes and not any(s[-1] == 50 and s[0] > 4 for s in shapes if len(s) == 2)


def test_lora_freezes_the_model_and_only_its_adapters_take_gradients_and_state():
    trainer, _ = make_trainer(**dict(STEP, way=parse("lora")))
    trainer.step()
    named = dict(trainer.model.named_parameters())
    adapters = {n for n in named if "lora_" in n}
    # every block's attention and both MLP projections carry adapters; nothing else trains
    for i in range(STEP["depth"]):
        for part in ("attn", "mlp.0", "mlp.2"):
            assert any(n.startswith(f"blocks.{i}.{part}.") for n in adapters), (i, part)
    assert {n for n, p in named.items() if p.requires_grad} == adapters
    assert all(named[n].grad is None for n in named if n not in adapters)
    stateful = {id(p) for p in trainer.optimizer.state}
    assert stateful == {id(named[n]) for n in adapters}


def test_lora_composes_with_bf16_autocast_and_checkpointing():
    trainer, _ = make_trainer(**dict(STEP, way=parse("lora+checkpoint+bf16_autocast")))
    trainer.step()
    assert trainer.model.checkpoint_blocks and trainer.prec.name == "bf16_autocast"
    assert all(p.grad is not None for n, p in trainer.model.named_parameters() if "lora_" in n)


@pytest.fixture
def eager_torchao(monkeypatch):
    """torchao's update run eagerly: what torch.compile builds of it takes a minute on the CPU, and
    the state it keeps is the same either way."""
    pytest.importorskip("torchao")
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)


@pytest.mark.parametrize("technique,share", [("adamw8bit", 0.3), ("adam_bf16_state", 0.55)])
def test_quantised_moments_hold_fewer_bytes_than_adams_and_still_train(eager_torchao, technique, share):
    shape = dict(STEP, width=64)  # matrices of 4096 values and more: torchao keeps smaller ones as they are
    adam, _ = make_trainer(**dict(shape, way=parse("fp32")))
    small, _ = make_trainer(**dict(shape, way=parse(technique)))
    for trainer in (adam, small):
        for _ in range(3):
            trainer.step()
    assert state_bytes(small.optimizer) < share * state_bytes(adam.optimizer)
    assert float(small.losses[-1]) < float(small.losses[0])


def test_compile_keeps_its_time_apart_from_the_step(monkeypatch):
    calls, compiled = [], []

    def counted(fn, **kwargs):  # torch.compile's build, stood in for: its minutes belong to the GPU run
        calls.append(kwargs["mode"])

        def first_call_compiles(*args):
            if not compiled:
                time.sleep(1.0)
                compiled.append(fn)
            return fn(*args)
        return first_call_compiles
    monkeypatch.setattr(torch, "compile", counted)
    trainer, _ = make_trainer(**dict(STEP, way=parse("compile_max_autotune")))
    for _ in range(3):
        trainer.step()
    assert calls == ["max-autotune-no-cudagraphs"] and len(trainer.first_steps_s) == 2
    first, second = trainer.first_steps_s
    # the first step's compiling, less what a tiny step on a shared CPU may vary by
    assert trainer.compile_s == first - second and 0.5 < trainer.compile_s < first, trainer.first_steps_s


@pytest.mark.parametrize("wraps", [False, True], ids=["raised", "wrapped by the compiler"])
def test_a_first_step_that_compiles_past_the_limit_is_a_skip_saying_so_and_the_alarm_is_put_back(monkeypatch, wraps):
    """A compile that would outlast asv's limit ends its case with the reason, whether the alarm's
    exception comes out as raised or wrapped (as dynamo wraps a backend's error); the step after
    the first, and any other code, runs with SIGALRM and the timer as they were."""
    import signal

    from harness.workloads.training import trainer as trainer_module

    def slow(fn, **kwargs):
        def first_call_compiles(*args):
            try:
                time.sleep(30)
            except BaseException as e:
                if wraps:
                    raise RuntimeError("backend compiler failed") from e
                raise
            return fn(*args)
        return first_call_compiles
    monkeypatch.setattr(torch, "compile", slow)
    monkeypatch.setattr(trainer_module, "COMPILE_LIMIT_S", 0.3)
    before = signal.getsignal(signal.SIGALRM)
    trainer, _ = make_trainer(**dict(STEP, way=parse("compile")))
    start = time.perf_counter()
    stopped = r"had not ended after 0 s, so it was stopped there: this way compiles too slowly here to be timed"
    with pytest.raises(Skip, match=stopped):
        trainer.step()
    assert time.perf_counter() - start < 10  # stopped at the limit, not at the end of the sleep
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_missing_package_and_an_impossible_kernel_skip_naming_the_fix(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(Skip, match=r"^lora needs peft, which this Python lacks: pip install 'oombench\[ways\]'$"):
        ways.runnable(parse("bf16_autocast+lora"), "cuda")
    with pytest.raises(Skip, match="flash attention takes half inputs only on CUDA: add bf16_autocast"):
        ways.runnable(parse("attn_flash"), "cuda")
    ways.runnable(parse("bf16_autocast+attn_flash"), "cuda")  # half inputs: runs
    with pytest.raises(Skip, match=r"attn_mem_efficient runs on CUDA only \(no CPU kernel\): run it with device cuda$"):
        ways.runnable(parse("attn_mem_efficient"), "cpu")


def test_a_way_held_to_a_falling_loss_passes_when_it_falls_and_fails_when_it_does_not():
    way = parse("bf16_autocast+checkpoint+lora")
    ref = [10.0, 8.0, 6.0]
    ok = reference.held_to_falling(way, [10.0, 9.95, 9.89], "fp32", ref)
    assert ok["fell"] == pytest.approx(0.011) and ok["deviation"] == pytest.approx(0.389)
    assert "held to its own criterion, not to fp32's curve" in ok["criterion"]
    with pytest.raises(CheckFailed, match="a fall of 0.005 of it, under the 0.01 its criterion asks"):
        reference.held_to_falling(way, [10.0, 9.97, 9.95], "fp32", ref)
    with pytest.raises(CheckFailed):
        reference.held_to_falling(way, [10.0, float("nan"), float("nan")], "fp32", ref)


def test_a_what_fits_search_for_a_way_missing_its_package_skips_before_any_probe(monkeypatch):
    import importlib.util
    from harness.cases import fits
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(Skip, match=r"^adamw8bit needs torchao, which this Python lacks"):
        fits.build("cuda", "lm", "bf16_autocast+checkpoint+adamw8bit", "24GB", "batch", "default",
                   32000, 1024, 12, 1024)


def test_a_case_under_torchaos_optimizer_files_a_record_json_can_write(eager_torchao):
    """torchao keeps the rate as a tensor (a new rate then recompiles nothing): the record's check
    carries it as a number, or the record could not be written at all."""
    import json

    from harness.drive.runner import execute

    from test_tricks import TINY
    rec = execute("tricks", dict(TINY, technique="adamw8bit"))
    assert rec.outcome == "ok", rec.reason
    assert type(rec.check["lr"]) is float and rec.check["compile_s"] is not None
    assert json.loads(json.dumps(rec.to_dict()))["check"]["lr"] == rec.check["lr"]


def test_an_optimizers_own_rate_or_adams_kept_in_float32_is_no_other_adam_rate():
    from harness.workloads.training.tricks import adam_rate, other_rate
    lm, rate = {"workload": "lm", "width": 1024}, adam_rate("lm", 1024)
    assert float(torch.tensor(rate)) != rate  # torchao's float32 tensor rounds it
    assert not other_rate({**lm, "technique": "adamw8bit"}, {"lr": float(torch.tensor(rate))})
    assert other_rate({**lm, "technique": "adamw8bit"}, {"lr": rate * 2})
    assert not other_rate({**lm, "technique": "sgd_momentum"}, {"lr": 0.1})  # its own rule, its own rate
    assert not other_rate({**lm, "technique": "bf16_autocast+checkpoint+adafactor"}, {"lr": 0.01})
    assert other_rate({**lm, "technique": "fp32"}, {"lr": 0.01})  # Adam at a rate today's code no longer gives
