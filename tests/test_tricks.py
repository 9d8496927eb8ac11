"""The everyday memory tricks on the CPU, with tiny models: accumulation gives the full batch's
gradient, tied embeddings are one storage, the cap bounds the batch, and every technique trains."""
import math
from dataclasses import replace

import pytest
import torch

from harness.cases import tricks
from harness.workloads.training import reference
from harness.workloads.training import tricks as trick_steps
from harness.workloads.training import ways
from harness.workloads.training.ways import Way, parse
from harness.workloads.training.models import EncDecConfig, LMConfig, encoder_decoder, parameter_count, transformer_lm
from harness.drive.runner import execute
from harness.workloads.training.seqdata import IGNORE, OUTLIER_FACTOR, capped, outlier_sequences, pad_to_longest
from harness.workloads.training.precision import precision
from harness.workloads.training.trainer import Trainer, split, token_loss_sum
from conftest import make_trainer

TINY = dict(device="cpu", workload="lm", budget="card",
            batch=4, micro_batch=4, vocab=128, width=32, depth=2, seq_len=16)
STEP = {k: v for k, v in TINY.items() if k != "budget"}  # make_trainer's arguments: the step, without a budget
SMALL = dict(vocab=97, width=32, depth=2, heads=4, seq_len=64)


def grads_of(micro_batch, inputs, targets):
    model = transformer_lm(LMConfig(**SMALL), seed=3)
    trainer = Trainer(model, [((x,), t) for x, t in split((inputs, targets), micro_batch)], token_loss_sum,
                      precision("fp32"), "cpu")
    trainer.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_accumulated_gradients_equal_the_full_batch_gradient(micro_batch):
    # Ragged rows: micro-batches hold different numbers of real targets, so dividing each
    # micro-batch's loss by its own count, or by the number of micro-batches, gives a wrong gradient.
    inputs, targets = pad_to_longest(outlier_sequences(4, 12, SMALL["vocab"], seed=1))
    whole, accumulated = grads_of(4, inputs, targets), grads_of(micro_batch, inputs, targets)
    for w, a in zip(whole, accumulated):
        assert torch.allclose(w, a, rtol=1e-4, atol=1e-6)


def test_a_micro_batch_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(ValueError, match="must divide the batch"):
        split((torch.zeros(6, 2),), 4)


def test_encoder_decoder_shares_one_embedding_storage_and_drops_two_matrices():
    config = dict(vocab=97, width=32, depth=1, heads=4, seq_len=16)
    shared = encoder_decoder(EncDecConfig(**config, shared_embedding=True))
    separate = encoder_decoder(EncDecConfig(**config))
    ptr = shared.embed.weight.data_ptr()
    assert shared.target_embed.weight.data_ptr() == ptr and shared.head.weight.data_ptr() == ptr
    assert len({m.weight.data_ptr() for m in (separate.embed, separate.target_embed, separate.head)}) == 3
    assert parameter_count(separate) - parameter_count(shared) == 2 * config["vocab"] * config["width"]


def test_tied_case_counts_the_embedding_once():
    plain = execute("tricks", dict(TINY, technique="fp32"))
    tied = execute("tricks", dict(TINY, technique="tied_embeddings"))
    assert plain.check["parameters"] - tied.check["parameters"] == TINY["vocab"] * TINY["width"]


def test_the_cap_never_yields_a_longer_batch_and_padding_pads_to_the_longest():
    sequences = outlier_sequences(8, 32, 100, seed=2)
    longest = max(len(s) for s in sequences) - 1
    assert longest == OUTLIER_FACTOR * 32
    x, t = pad_to_longest(sequences)
    assert x.shape == t.shape == (8, longest)
    for cap in (1, 7, 32, 40):
        x, t = capped(sequences, cap)
        assert x.shape[1] <= cap and (t != IGNORE).sum(1).max() <= cap
    # Nothing real is lost below the cap: each row keeps min(length, cap) targets.
    x, t = capped(sequences, 40)
    assert (t != IGNORE).sum(1).tolist() == [min(len(s) - 1, 40) for s in sequences]


def test_checkpointing_recomputes_each_block_and_keeps_the_gradient():
    model = transformer_lm(LMConfig(**SMALL), seed=1)
    calls, block = [], model.blocks[0]
    plain_forward = block.forward  # counted here: module hooks do not run in the recomputation
    block.forward = lambda *a, **k: (calls.append(1), plain_forward(*a, **k))[1]
    x = torch.randint(0, SMALL["vocab"], (2, 8))
    model(x).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.checkpoint_blocks, calls[:] = True, []
    model(x).sum().backward()
    assert len(calls) == 2  # the forward, and its recomputation in backward
    for a, b in zip(plain, (p.grad for p in model.parameters())):
        assert torch.allclose(a, b, atol=1e-6)


# What compiles on its first step takes a minute on the CPU (test_ways_newer stands its compiler in),
# and SDPA's memory-efficient kernel is CUDA's only (a skip there).
@pytest.mark.parametrize("technique", [t for t in tricks.TECHNIQUES if t not in trick_steps.IMAGE_ONLY
                                       + ways.COMPILES + ways.CUDA_ONLY])
def test_every_technique_trains_one_tiny_lm_on_the_cpu(technique):
    # qlora's NF4 quantises whole blocks of 64 x 256 weights, which a width of 32 holds none of
    rec = execute("tricks", dict(TINY, technique=technique, **({"width": 256} if technique == "qlora" else {})))
    assert rec.outcome == "ok", rec.reason
    assert math.isfinite(rec.check["loss_last"]) and rec.check["loss_last"] < rec.check["loss_first"]
    assert rec.work["tokens"] > 0 and rec.timing.median_s > 0
    if technique == "fp32":
        assert rec.check["reference"] == "itself"
    elif parse(technique).falls is not None:  # its own criterion: the loss fell, fp32's curve kept beside it
        assert rec.check["fell"] >= rec.check["falls"] == ways.TRAINS and rec.check["reference"] == "fp32"
        assert "not to fp32's curve" in rec.check["criterion"] and len(rec.check["reference_losses"]) > 1
    else:  # held against fp32 on the same data and seed, within its own tolerance
        assert rec.check["reference"] == "fp32"
        assert 0 <= rec.check["deviation"] <= trick_steps.TOLERANCE[technique] == rec.check["tolerance"]


def dropping_every_other_update(make_trainer):
    """A broken technique: the optimizer skips every other step, as if its gradients were lost."""
    def make(*args, **kwargs):
        trainer, work = make_trainer(*args, **kwargs)
        plain = trainer.optimizer.step
        calls = iter(range(10**6))
        trainer.optimizer.step = lambda *a, **k: None if next(calls) % 2 else plain(*a, **k)
        return trainer, work
    return make


@pytest.mark.parametrize("technique", ["checkpoint", "bf16_autocast", "cpu_embedding"])
def test_a_technique_that_drops_every_other_update_fails_against_fp32(monkeypatch, technique):
    monkeypatch.setattr(tricks, "make_trainer", dropping_every_other_update(trick_steps.make_trainer))
    rec = execute("tricks", dict(TINY, technique=technique))
    assert rec.outcome == "failed" and "over the" in rec.reason and "for fp32" in rec.reason


def test_a_tolerance_is_stated_for_every_knob():
    from harness.workloads.training import ways
    assert set(trick_steps.TOLERANCE) == set(ways.TOKENS) >= set(tricks.TECHNIQUES)


def test_where_fp32_does_not_fit_beside_the_case_the_next_reference_is_tried(monkeypatch):
    real = trick_steps.make_trainer

    def whole_batch_fp32_runs_out(**kw):
        if kw["way"] == parse("fp32") and kw["micro_batch"] == kw["batch"]:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(**kw)
    monkeypatch.setattr(trick_steps, "make_trainer", whole_batch_fp32_runs_out)
    rec = execute("tricks", dict(TINY, technique="bf16_autocast"))
    assert rec.outcome == "ok" and rec.check["reference"] == "fp32 with checkpointing"


@pytest.mark.parametrize("technique", ["fp32", "checkpoint", "tied_embeddings", "bf16_autocast"])
def test_encoder_decoder_trains_with_each_embedding_and_checkpointing(technique):
    rec = execute("tricks", dict(TINY, workload="encdec", technique=technique))
    assert rec.outcome == "ok", rec.reason


def test_accumulation_matches_the_full_batch_loss_and_counts_its_steps():
    full = execute("tricks", dict(TINY, technique="fp32"))
    accumulated = execute("tricks", dict(TINY, technique="fp32", micro_batch=1))
    assert accumulated.check["accumulation_steps"] == 4
    assert accumulated.check["loss_last"] == pytest.approx(full.check["loss_last"], rel=1e-4)
    assert accumulated.check["reference"] == "fp32" and accumulated.check["deviation"] <= 2e-3


def test_capped_and_padded_batches_count_only_real_tokens():
    padded = execute("tricks", dict(TINY, technique="pad_longest"))
    capped_rec = execute("tricks", dict(TINY, technique="seq_cap"))
    assert capped_rec.work["tokens"] < padded.work["tokens"]


def test_lm_only_techniques_skip_other_workloads_with_the_reason():
    rec = execute("tricks", dict(TINY, workload="encdec", technique="seq_cap"))
    assert rec.outcome == "skipped" and "applies to workload lm only" in rec.reason


def test_resnet50_without_torchvision_skips_with_the_fix():
    try:
        import torchvision  # noqa: F401
        pytest.skip("torchvision is installed here")
    except ImportError:
        pass
    rec = execute("tricks", dict(TINY, workload="resnet50", technique="fp32"))
    assert rec.outcome == "skipped" and "pip install torchvision" in rec.reason


def test_bf16_params_train_in_bf16():
    trainer, _ = make_trainer(**dict(STEP, way=parse("bf16_params")))
    assert {p.dtype for p in trainer.model.parameters()} == {torch.bfloat16}


def test_cpu_embedding_keeps_the_embedding_on_the_cpu_and_learns():
    trainer, _ = make_trainer(**dict(STEP, way=parse("cpu_embedding")))
    assert trainer.model.embed.weight.device.type == "cpu"
    # The LM holds no parameter of its own outside its children, so moving the children moves the rest.
    assert not list(trainer.model.parameters(recurse=False))
    before = trainer.model.embed.weight.detach().clone()
    trainer.step()
    assert not torch.equal(before, trainer.model.embed.weight)  # its gradient came back through the copy


def tiny_torchvision(monkeypatch):
    """A stand-in for torchvision.models with ResNet's layout (stages layer1..layer4 of blocks),
    so the ResNet50 path (checkpointing per block, images, bf16 inputs) runs here without it."""
    import sys
    import types
    nn = torch.nn

    class TinyResNet(nn.Module):
        def __init__(self, num_classes):
            super().__init__()
            self.stem = nn.Conv2d(3, 4, 3, stride=16)
            for i in range(1, 5):
                setattr(self, f"layer{i}", nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()))
            self.fc = nn.Linear(4, num_classes)

        def forward(self, x):
            x = self.stem(x)
            for i in range(1, 5):
                x = getattr(self, f"layer{i}")(x)
            return self.fc(x.mean((2, 3)))

    models = types.ModuleType("torchvision.models")
    models.resnet50 = lambda weights=None, num_classes=1000: TinyResNet(num_classes)
    package = types.ModuleType("torchvision")
    package.models = models
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)


@pytest.mark.parametrize("technique,workload", [("fp32", "resnet50"), ("checkpoint", "resnet50_1024"),
                                                ("bf16_params", "resnet50"), ("fp16_autocast", "resnet50")])
def test_the_resnet_path_trains_with_a_stand_in_model(monkeypatch, technique, workload):
    tiny_torchvision(monkeypatch)
    rec = execute("tricks", dict(TINY, workload=workload, micro_batch=2, technique=technique))
    assert rec.outcome == "ok", rec.reason
    assert rec.work == {"samples": TINY["batch"]} and rec.check["accumulation_steps"] == 2


def test_the_trainer_marks_the_steps_its_scaler_skipped(monkeypatch):
    # A scale so large that the first scaled gradients overflow fp16: the scaler must skip and halve.
    monkeypatch.setattr(torch.amp, "GradScaler",
                        lambda *a, **k: torch.amp.grad_scaler.GradScaler(*a, **{**k, "init_scale": 2.0**40}))
    trainer, _ = make_trainer(**dict(STEP, way=parse("fp16_autocast")))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.step()
    assert trainer.skipped == [True]
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    for _ in range(40):  # halved once per skip: finite well within 40 steps
        trainer.step()
    assert not trainer.skipped[-1] and sum(trainer.skipped) < len(trainer.skipped)


def test_a_failed_check_keeps_both_curves_in_its_record(monkeypatch):
    monkeypatch.setattr(tricks, "make_trainer", dropping_every_other_update(trick_steps.make_trainer))
    rec = execute("tricks", dict(TINY, technique="checkpoint"))
    assert rec.outcome == "failed"
    assert len(rec.check["losses"]) == len(rec.check["reference_losses"]) == 12
    assert rec.check["deviation"] > rec.check["tolerance"]
    assert rec.check["lr"] == trick_steps.adam_rate("lm", TINY["width"])  # the rate its curve came from


def test_a_wider_lm_trains_at_an_adam_rate_scaled_down_with_its_width_and_a_resnet_keeps_its_own(monkeypatch):
    from harness.workloads.training.trainer import LR
    rates = {}
    for width in (64, 1024, 2048):
        trainer, _ = make_trainer(device="cpu", workload="lm", way=Way(), batch=1, micro_batch=1, vocab=64,
                                  width=width, depth=1, seq_len=8)
        rates[width] = trainer.optimizer.param_groups[0]["lr"]
        trainer.close()
    assert rates == {64: LR, 1024: LR, 2048: LR / 2}
    tiny_torchvision(monkeypatch)
    trainer, _ = make_trainer(device="cpu", workload="resnet50", way=Way(), batch=2, micro_batch=2,
                                          vocab=64, width=2048, depth=1, seq_len=8)
    assert trainer.optimizer.param_groups[0]["lr"] == LR  # width is the LM's: an image model ignores it


def test_only_a_record_that_trained_at_another_rate_than_todays_is_outdated():
    wide, narrow = {"workload": "lm", "width": 2048}, {"workload": "lm", "width": 1024}
    assert trick_steps.other_rate(wide, {"loss_last": 5.0})  # kept no rate: trained at 1e-3, as all did then
    assert not trick_steps.other_rate(wide, {"loss_last": 5.0, "lr": 5e-4})
    assert not trick_steps.other_rate(narrow, {"loss_last": 5.0})
    assert not trick_steps.other_rate(wide, {"ended": "died"})  # nothing trained: nothing to be outdated
    assert not trick_steps.other_rate({"workload": "resnet50_2048", "width": 2048}, {"loss_last": 1.0})
    for odd in ("2048", 0, True, None):  # what a hand-edited or foreign record may hold: no mark, no crash
        assert not trick_steps.other_rate({"workload": "lm", "width": odd}, {"loss_last": 5.0})
    assert tricks.CASE.outdated(execute("tricks", dict(TINY, technique="fp32"))) is False  # today's own record


def test_a_check_holds_a_technique_to_this_runs_fp32_record_before_training_a_reference(monkeypatch, tmp_path):
    from conftest import set_run
    from harness.measure.records.store import RecordStore, load_file
    run = set_run(monkeypatch, tmp_path / "records", run_id="run1")
    trained = []
    real = trick_steps.trained
    monkeypatch.setattr(tricks, "trained", lambda *a, **shape: trained.append(shape) or real(*a, **shape))
    fp32 = execute("tricks", dict(TINY, technique="fp32"), run=run)
    assert fp32.ok and len(fp32.check["losses"]) == 12 and not trained  # fp32 is its own reference
    RecordStore.append(run.path, fp32)
    rec = execute("tricks", dict(TINY, technique="checkpoint"), run=run)
    assert rec.ok and not trained  # no reference trained: fp32's record of this run stood for the first
    assert rec.check["reference"] == "fp32" and rec.check["reference_first_run"] == "this run's fp32 record"
    assert rec.check["reference_losses"] == fp32.check["losses"]
    # another shape has no fp32 record in the run: its reference trains, as before
    other = execute("tricks", dict(TINY, technique="checkpoint", seq_len=128), run=run)
    assert other.ok and len(trained) == 1 and "reference_first_run" not in other.check
    # a curve over its tolerance: two more runs train, the record's curve counts as the third
    monkeypatch.setattr(tricks, "make_trainer", dropping_every_other_update(trick_steps.make_trainer))
    failed = execute("tricks", dict(TINY, technique="checkpoint"), run=run)
    assert failed.outcome == "failed" and len(trained) == 1 + reference.REFERENCE_RUNS - 1
    assert failed.check["reference_runs"] == reference.REFERENCE_RUNS
    # its steps ran and were timed before the check: the failed record keeps what they cost, and files
    assert failed.timing is not None and failed.timing.steps == 10 and failed.work == fp32.work
    RecordStore.append(run.path, failed)
    assert load_file(run.path).records[-1].timing == failed.timing
    assert not tricks.CASE.outdated(failed)  # today's failure carries its price: nothing to measure again
    assert tricks.CASE.outdated(replace(failed, timing=None))  # one filed before failures kept it is


def test_fp32s_curve_comes_only_from_an_ok_fp32_record_of_this_interpreter_at_the_same_shape(tmp_path):
    """One run may cover several environments: another interpreter's fp32 (another torch) is no
    reference for this one's technique; nor is a failed fp32, another shape or another length."""
    from dataclasses import replace
    from harness.measure.instruments.environment import snapshot
    from harness.measure.records.record import Record, Timing
    from harness.measure.records.store import RecordStore, load_file
    path = tmp_path / "run.jsonl"
    shape = {k: v for k, v in TINY.items() if k not in ("technique", "micro_batch")}
    params = dict(TINY, technique="fp32", micro_batch=TINY["batch"])
    mine = Record(case="tricks", params=params, outcome="ok", environment=snapshot(), check={"losses": [3.0, 2.0]},
                  timing=Timing(1.0, 1.0, 1.0, 1.0, 1.0, 3, 1))
    assert tricks.fp32_curve(None, shape, 2) is None and tricks.fp32_curve(path, shape, 2) is None
    for other in (replace(mine, environment=replace(snapshot(), executable="/elsewhere/python")),
                  replace(mine, outcome="failed"), replace(mine, params=dict(params, seq_len=999)),
                  replace(mine, check={"losses": [1.0, 1.0, 1.0]})):
        RecordStore.append(path, other)
    assert len(load_file(path).records) == 4 and tricks.fp32_curve(path, shape, 2) is None
    RecordStore.append(path, mine)
    assert tricks.fp32_curve(path, shape, 2) == [3.0, 2.0]
