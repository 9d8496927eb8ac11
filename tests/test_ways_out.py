"""The single-GPU ways out of seed 003's and seed 002's out-of-memory on the CPU, with tiny models:
the budget is refused where nothing caps it and capped before anything is allocated where it
is; channels_last, save_on_cpu and cpu_offload do what they say and learn as fp32 does; the
dropping loop frees the previous step's logits and the everyday loop keeps them."""
import contextlib
import gc
import weakref

import pytest
import torch

from harness import cases
from harness.drive.runner import execute
from harness.measure.guards import budget as budgets
from harness.workloads.training import tricks as trick_steps
from harness.workloads.training.models import blocks
from harness.workloads.training.ways import parse

from test_tricks import STEP, TINY, tiny_torchvision
from conftest import make_trainer

RESNET = dict(TINY, workload="resnet50", micro_batch=2)


def test_an_emulated_card_on_the_cpu_skips_naming_the_fix():
    rec = execute("tricks", dict(TINY, technique="fp32", budget="16GB"))
    assert rec.outcome == "skipped"
    assert "device=cuda" in rec.reason and "budget=card" in rec.reason


def test_the_tricks_config_takes_every_budget_and_refuses_others():
    case = cases.get("tricks")
    for name in budgets.CARD_BUDGETS:
        assert case.config(dict(TINY, technique="fp32", budget=name)).budget == name
    with pytest.raises(ValueError, match=r"budget='12GB' is not one of: 16GB, 24GB, 40GB, 80GB, p100-16gb, .*card"):
        case.config(dict(TINY, technique="fp32", budget="12GB"))
    assert case.allocator(**TINY) == "torch"


def test_on_cuda_the_allocator_is_capped_at_the_budget_and_given_the_card_back(monkeypatch):
    import harness.measure.instruments.devices as devices
    import harness.measure.guards.workingset as workingset
    card = 80 * 2**30
    monkeypatch.setattr(devices, "discover", lambda: None)
    monkeypatch.setattr(workingset, "card_total", lambda _: card)
    caps = []
    monkeypatch.setattr(budgets, "enforce_torch", lambda b, device=0: caps.append(b.limit_bytes))
    with contextlib.ExitStack() as stack:
        budgets.torch_capped(stack, "cuda", "16GB")
        assert caps == [16 * budgets.GB]
    assert caps == [16 * budgets.GB, card]
    with contextlib.ExitStack() as stack:
        budgets.torch_capped(stack, "cuda", "card")  # the whole card: left as it was
    assert len(caps) == 2
    context = budgets.Overhead(700 * 2**20, "nvml process")
    monkeypatch.setattr(budgets, "measure_overhead", lambda allocator: context)  # torch's, once warmed up
    with contextlib.ExitStack() as stack:
        cap = budgets.torch_capped(stack, "cuda", "p100-16gb")
        assert caps[-1] == budgets.CARDS["p100-16gb"].total_bytes - context.bytes  # the context charged
    assert cap.budget.overhead_bytes == context.bytes  # for the record


def test_a_library_workspace_failure_under_the_cap_is_does_not_fit_and_other_errors_are_not():
    from harness.cases.base import Case
    from harness.measure.workload import Workload

    def failing(e):
        def step():
            raise e
        case = Case(name="failing", params={}, build=lambda: Workload(step=step, check=dict, work={}))
        return execute(case, {})
    rec = failing(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE"))
    assert rec.outcome == "does_not_fit" and "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE" in rec.reason
    rec = failing(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert rec.outcome == "does_not_fit" and rec.requested_bytes == 2 * 2**30  # torch's own: its size is read
    with pytest.raises(RuntimeError, match="shape mismatch"):
        failing(RuntimeError("shape mismatch"))


@pytest.mark.parametrize("technique", ["channels_last", "save_on_cpu", "cpu_offload"])
def test_each_way_out_trains_the_resnet_stand_in_within_its_tolerance_of_fp32(monkeypatch, technique):
    tiny_torchvision(monkeypatch)
    rec = execute("tricks", dict(RESNET, technique=technique))
    assert rec.outcome == "ok", rec.reason
    assert rec.check["reference"] == "fp32" and rec.check["reference_budget"] == "card"
    assert 0 <= rec.check["deviation"] <= trick_steps.TOLERANCE[technique]


def test_channels_last_puts_the_weights_and_images_in_nhwc_and_nothing_else_does(monkeypatch):
    tiny_torchvision(monkeypatch)
    nhwc = torch.channels_last
    for technique, expected in (("channels_last", True), ("fp32", False)):
        trainer, _ = make_trainer(**dict(STEP, workload="resnet50", way=parse(technique)))
        images = trainer.micro_batches[0][0][0]
        weights = [p for p in trainer.model.parameters() if p.dim() == 4]
        assert images.is_contiguous(memory_format=nhwc) == expected != images.is_contiguous()
        assert all(w.is_contiguous(memory_format=nhwc) == expected for w in weights)


def test_channels_last_skips_a_token_model_with_the_reason():
    rec = execute("tricks", dict(TINY, technique="channels_last"))
    assert rec.outcome == "skipped" and "image models" in rec.reason


def test_save_on_cpu_keeps_every_saved_activation_on_the_cpu_unpinned_here(monkeypatch):
    real, packed = torch.autograd.graph.save_on_cpu, []

    class Watched(real):
        def __init__(self, pin_memory=False, device_type="cuda"):
            super().__init__(pin_memory=pin_memory, device_type=device_type)
            pack = self.pack_hook
            self.pack_hook = lambda t: (lambda out: packed.append((out[1].device.type, pin_memory)) or out)(pack(t))
    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", Watched)
    trainer, _ = make_trainer(**dict(STEP, way=parse("save_on_cpu")))
    trainer.step()
    assert packed and set(packed) == {("cpu", False)}  # pinned only on CUDA
    packed.clear()
    plain, _ = make_trainer(**dict(STEP, way=parse("fp32")))
    plain.step()
    assert not packed


def alive_at_each_forward(technique):
    """Per forward after the first: whether the previous step's logits, and gradients, were alive."""
    trainer, _ = make_trainer(**dict(STEP, way=parse(technique)))
    inner, last, alive = trainer.forward, [], []

    def forward(*args):
        if last:  # what the last step left alive: a reference cycle freed only by the collector is not
            gc.collect()
            grads = {p.grad is not None for p in trainer.model.parameters()}
            alive.append((last[-1]() is not None, grads == {True}))
        out = inner(*args)
        last.append(weakref.ref(out))
        return out
    trainer.forward = forward
    for _ in range(3):
        trainer.step()
    return alive, trainer


def test_dropping_references_frees_the_last_logits_and_gradients_before_the_next_forward():
    alive, _ = alive_at_each_forward("drop_references")
    assert alive == [(False, False)] * 2


def test_the_everyday_loop_keeps_logits_and_zeroed_gradients_alive_into_the_next_forward():
    alive, trainer = alive_at_each_forward("keep_references")
    assert alive == [(True, True)] * 2 and trainer.kept_loss is not None


def test_cpu_offload_shards_every_block_with_the_policy_in_a_group_it_tears_down():
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule
    trainer, _ = make_trainer(**dict(STEP, way=parse("cpu_offload")))
    try:
        assert dist.is_initialized() and dist.get_world_size() == 1
        units = [trainer.model, *blocks(trainer.model)]
        assert all(isinstance(u, FSDPModule) for u in units)
        policies = [u._get_fsdp_state()._fsdp_param_group.offload_policy for u in units]
        assert all(isinstance(p, CPUOffloadPolicy) and not p.pin_memory for p in policies)  # pinned only on CUDA
        with pytest.raises(RuntimeError, match="already initialised"):
            make_trainer(**dict(STEP, way=parse("cpu_offload")))
        trainer.step()
    finally:
        trainer.close()
    assert not dist.is_initialized()


def test_save_on_cpu_past_the_hosts_share_is_does_not_fit_with_the_bytes_it_held(monkeypatch):
    from harness.measure.guards.workingset import HOST_MEMORY_ENV
    tiny_torchvision(monkeypatch)
    monkeypatch.setenv(HOST_MEMORY_ENV, "0.00002")  # 20 kB available: the share is 10 kB
    rec = execute("tricks", dict(RESNET, technique="save_on_cpu"))
    assert rec.outcome == "does_not_fit", rec.reason
    assert "activations kept on the host" in rec.reason and "more memory" in rec.reason
    assert rec.requested_bytes > 10_000
    assert rec.check == {"short_of": "host"} and rec.short_of() == "host"  # the host's memory, not the card's
    monkeypatch.setenv(HOST_MEMORY_ENV, "100")
    assert execute("tricks", dict(RESNET, technique="save_on_cpu")).outcome == "ok"


def test_a_recording_probe_files_each_tensor_save_on_cpu_kept_and_the_share_its_guard_allowed(monkeypatch):
    from harness.measure.guards.workingset import HOST_MEMORY_ENV
    from harness.workloads.search.fits_probe import kept_on_host
    monkeypatch.setenv(HOST_MEMORY_ENV, "100")
    kept = {}
    for batch in (2, 4):
        trainer, _ = make_trainer(**dict(STEP, way=parse("save_on_cpu"), batch=batch, micro_batch=batch))
        try:
            trainer.step()
            kept[batch] = kept_on_host(trainer)
        finally:
            trainer.close()
    assert kept[2]["host_limit"] == kept[4]["host_limit"] == 50 * 10**9  # half the 100 GB stated
    # the same tensors at both batches, an activation twice the bytes at twice the batch, a weight
    # the same: each on a law of the batch, which the replay grows
    pairs = list(zip(kept[2]["host_packs"], kept[4]["host_packs"], strict=True))
    assert len(pairs) > 10 and all(b > 0 for b, _ in pairs)
    assert all(at4 in (at2, 2 * at2) for at2, at4 in pairs)
    assert sum(at4 == 2 * at2 for at2, at4 in pairs) > len(pairs) / 2
    trainer, _ = make_trainer(**dict(STEP, way=parse("checkpoint")))
    try:
        assert kept_on_host(trainer) == {}  # kept where it was made: nothing on the host
    finally:
        trainer.close()


def test_a_pinned_activation_takes_the_power_of_two_block_the_host_allocator_gives_it():
    from harness.workloads.training.offload import host_block
    assert [host_block(n, True) for n in (0, 1, 4096, 4097, 3 * 2**30)] == [0, 1, 4096, 8192, 4 * 2**30]
    assert host_block(4097, False) == 4097
