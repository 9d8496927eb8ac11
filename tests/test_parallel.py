"""Data versus model parallel on the CPU (gloo, two processes, a tiny transformer): every
strategy reaches the single-device loss, two node agents included; the stage splitter balances
and seed 003's cut is where the seed made it; too few GPUs is a skip. (How the launcher reports a
rank's failure and waits for locks: tests/test_launch.py; kills of every kind: tests/test_kills.py
and tests/test_kills_ranks.py.)"""
import itertools
from dataclasses import replace

import pytest
import torch

from conftest import fake_devices

from harness.cases.parallel_lm import job as lm_job
from harness.workloads.training.models import LMConfig, lm_layers, tokens, transformer_lm
from harness.measure.outcomes import OK, SKIPPED
from harness.drive.runner import execute
from harness.workloads.parallelism.stages import split_balanced, stage_ranges

TINY = dict(batch=4, depth=2, width=32, seq_len=16, nodes=1, transport="fast")


# ---- the stage splitter -----------------------------------------------------------------------

@pytest.mark.parametrize("sizes, k, cuts", [
    ([1, 1, 1, 1, 2, 2], 2, [4]),  # 4 | 4
    ([5, 1, 1, 1, 1, 1, 5], 3, [1, 6]),  # 5 | 5 | 5
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], 3, [5, 7]),  # 15 | 13 | 17: no cut does better than 17
    ([9, 1, 1, 1], 4, [1, 2, 3]),  # as many stages as layers: one each
    ([3, 3, 3], 1, []),
])
def test_split_balanced_gives_the_expected_cuts(sizes, k, cuts):
    assert split_balanced(sizes, k) == cuts


def test_split_balanced_reaches_the_brute_force_optimum():
    sizes = [7, 2, 9, 4, 4, 1, 8, 3, 6, 5]
    for k in range(1, 6):
        best = min(max(sum(sizes[a:b]) for a, b in stage_ranges(list(c), len(sizes)))
                   for c in itertools.combinations(range(1, len(sizes)), k - 1))
        got = split_balanced(sizes, k)
        assert len(got) == k - 1 and all(a < b for a, b in stage_ranges(got, len(sizes)))
        assert max(sum(sizes[a:b]) for a, b in stage_ranges(got, len(sizes))) == best


def test_split_balanced_refuses_more_stages_than_layers():
    with pytest.raises(ValueError, match="at most 2 devices"):
        split_balanced([1, 1], 3)


def test_lm_layers_in_sequence_compute_the_model():
    model = transformer_lm(LMConfig(vocab=97, width=32, depth=2, heads=2, seq_len=16))
    x, _ = tokens(2, 16, 97)
    with torch.no_grad():
        y = x
        for layer in lm_layers(model):
            y = layer(y)
        assert torch.equal(y, model(x))


# ---- every strategy computes the same training ------------------------------------------------

_RECORDS = {}


def run_lm(strategy, gpus=1, micro_batches=1, nodes=1):
    """One record per strategy for the whole module: each launch costs seconds on 2 cores."""
    key = (strategy, gpus, micro_batches, nodes)
    if key not in _RECORDS:
        _RECORDS[key] = _measure_lm(*key)
    return _RECORDS[key]


def _measure_lm(strategy, gpus, micro_batches, nodes):
    """The real case's parameters and record, with fewer steps (one warm-up, three timed)."""
    from harness.cases.base import Case
    from harness.cases.parallel_lm import CASE
    from harness.workloads.parallelism.parallel import build
    quick = Case(name=CASE.name, params=CASE.params, build=lambda **p: build(lm_job(**p, warmup=1, repeat=3)))
    rec = execute(quick, dict(TINY, strategy=strategy, device="cpu", gpus=gpus, micro_batches=micro_batches,
                              nodes=nodes))
    assert rec.outcome == OK, rec.reason
    return rec


@pytest.fixture
def single():
    return run_lm("single")


@pytest.mark.parametrize("strategy, gpus, micro_batches, nodes", [
    ("naive_mp", 2, 1, 1), ("pipeline", 2, 2, 1), ("pipeline", 2, 4, 1), ("ddp", 2, 1, 1), ("fsdp", 2, 1, 1),
    ("ddp", 2, 1, 2)])  # the last: two node agents of one rank each, rendezvoused on localhost
def test_strategies_reach_the_single_device_loss(single, strategy, gpus, micro_batches, nodes):
    rec = run_lm(strategy, gpus, micro_batches, nodes)
    # Four SGD steps moved the loss far more than the tolerance, so equal losses mean equal training.
    assert abs(single.check["loss"] - single.check["loss_first"]) > 1e-2
    assert rec.check["loss_first"] == pytest.approx(single.check["loss_first"], rel=1e-5)
    assert rec.check["loss"] == pytest.approx(single.check["loss"], rel=1e-5)
    assert rec.work == {"samples": 4, "tokens": 64}


@pytest.mark.parametrize("nodes", [1, 2])
def test_multi_process_record_carries_rank_zero_timing_and_each_ranks_memory(nodes):
    rec = run_lm("ddp", 2, nodes=nodes)
    assert rec.check["launch"] == {"nodes": nodes, "gpus_per_node": 2 // nodes, "transport": "fast",
                                   "rendezvous": "localhost"}
    assert rec.gpu_busy == {}  # CPU ranks: no GPU to read
    assert rec.timing.median_s == rec.check["rank_median_s"][0]
    assert rec.timing.steps == 3 and rec.timing.warmup == 1
    assert {"host.max_rss.rank0", "host.max_rss.rank1"} <= set(rec.memory)
    # the ranks ran the steps: the case's host peak is the larger rank's (what asv tracks and the pages show)
    assert rec.host_bytes() == max(rec.memory["host.max_rss.rank0"], rec.memory["host.max_rss.rank1"])


def test_model_parallel_records_its_cut_and_bubble():
    rec = run_lm("pipeline", 2, 2)
    assert rec.check["cuts"] == [3]  # embedding and both blocks | the 32000-word head
    assert len(rec.check["stage_busy_s"]) == 2 and 0 <= rec.check["bubble_fraction"] <= 1


# ---- what cannot run here is a skip with its reason --------------------------------------------

def test_more_gpus_than_the_box_has_is_skipped_with_the_reason():
    from harness.measure.instruments.devices import discover
    want = discover().count + 1
    rec = execute("parallel_lm", dict(strategy="ddp", device="cuda", gpus=8 if want <= 8 else want,
                                      micro_batches=1, batch=8, depth=2, width=32, seq_len=16, nodes=1,
                                      transport="fast"))
    assert rec.outcome == SKIPPED and "needs 8 GPU(s)" in rec.reason


def test_meaningless_combinations_are_skipped_with_the_fix():
    rec = execute("parallel_lm", dict(strategy="ddp", device="cpu", gpus=2, micro_batches=4, **TINY))
    assert rec.outcome == SKIPPED and "use micro_batches=1" in rec.reason
    rec = execute("parallel_lm", dict(strategy="dp", device="cpu", gpus=2, micro_batches=1, **TINY))
    assert rec.outcome == SKIPPED and "use ddp" in rec.reason


def test_scaling_efficiency_is_the_baseline_time_over_k_times_the_strategys():
    from harness.report.scaling import scaling_efficiency
    from harness.measure.instruments.timing import Timing
    base, ddp = run_lm("single"), run_lm("ddp", 2)
    base = replace(base, timing=Timing(1.0, 1.0, 1.0, 1.0, 1.0, 3, 1))
    ddp = replace(ddp, timing=Timing(0.625, 0.6, 0.7, 0.6, 0.7, 3, 1))
    assert scaling_efficiency(base, ddp) == 0.8
    assert scaling_efficiency(base, replace(ddp, outcome="does_not_fit", timing=None)) is None


def test_a_rank_reports_its_gpus_level_over_the_timed_steps_and_not_set_up_or_before():
    """The parent sees the whole launch as set-up; each rank's own reading of its GPU over its
    timed steps is the record's device peak (the parent's reading before the launch is the base)."""
    import torch

    from harness.workloads.parallelism import distributed
    from harness.workloads.parallelism.parallel_job import Job
    job = Job(model="lm", strategy="ddp", device="cuda", gpus=2, batch=2, micro_batches=1, warmup=1, repeat=1)
    levels = {"device.used.gpu1": 7 * 2**30, "setup.device.used.gpu1": 9 * 2**30,
              "device.used_before.gpu1": 2**30, "device.used.gpu0": 1}
    fake = type("Cuda", (), {"max_memory_allocated": staticmethod(lambda d: 5),
                             "max_memory_reserved": staticmethod(lambda d: 6)})
    memory = distributed._memory(type("Torch", (), {"cuda": fake}), job, "cuda:1", 1, 1, 1, levels)
    assert memory == {"allocator.torch.max_allocated.cuda:1": 5, "allocator.torch.max_reserved.cuda:1": 6,
                      "device.used.gpu1": 7 * 2**30}
    assert "device.used.gpu1" not in distributed._memory(torch, replace(job, device="cpu"), "cpu", 1, 1, None, levels)


def test_a_node_of_a_box_labels_its_gpu_as_the_box_numbers_it(monkeypatch):
    """Two node agents on one box: the second node's local GPU 0 is the box's GPU 1, whose reading
    before the launch the case subtracts; a rank on another box is named with its node."""
    from harness.workloads.parallelism import distributed
    from harness.workloads.parallelism.nodes import FIRST_GPU, Nodes
    monkeypatch.setenv(FIRST_GPU, "1")
    assert distributed.gpu_label(0) == "gpu1"
    for k, v in Nodes(count=2, endpoint="head:29500", run_id="r").to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GROUP_RANK", "1")
    assert distributed.gpu_label(0) == "node1.gpu1"


def test_a_rank_pinned_to_one_gpu_of_a_shared_box_reads_and_labels_that_gpu(monkeypatch):
    """CUDA_VISIBLE_DEVICES=2 on a box of four: the rank's CUDA device 0 is the box's GPU 2, which
    the case's process read before the launch; NVML's GPU 0 is a neighbour's."""
    from harness.measure.instruments import devices
    from harness.workloads.parallelism import distributed
    monkeypatch.setattr(devices, "discover", lambda: fake_devices(count=4))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert (distributed.gpu_index(0), distributed.gpu_label(0)) == (2, "gpu2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert (distributed.gpu_index(1), distributed.gpu_label(1)) == (1, "gpu1")


# ---- seed 003's cut --------------------------------------------------------------------------------

def _resnet_shaped():
    """torchvision's ResNet's attributes, small (torchvision is not needed to test where the cut falls)."""
    nn = torch.nn
    stage = lambda blocks: nn.Sequential(*(nn.Linear(4, 4) for _ in range(blocks)))  # noqa: E731
    net = nn.Module()
    net.conv1, net.bn1, net.relu, net.maxpool = nn.Linear(4, 4), nn.Identity(), nn.ReLU(), nn.Identity()
    net.layer1, net.layer2, net.layer3, net.layer4 = stage(3), stage(4), stage(6), stage(3)
    net.avgpool, net.fc = nn.Identity(), nn.Linear(4, 4)
    return net


def test_the_seed003_cut_puts_conv1_to_layer2_on_stage_0_and_layer3_to_fc_on_stage_1():
    from harness.workloads.parallelism.model_parallel import cuts
    from harness.workloads.training.models import resnet_layers
    from harness.workloads.parallelism.parallel_job import Job
    net = _resnet_shaped()
    layers = resnet_layers(net)
    job = Job(model="resnet50", strategy="naive_mp", device="cpu", gpus=2, batch=2, cut="seed003")
    sizes = [1] * len(layers)
    (cut,) = cuts(job, net, layers, sizes, 2)
    first, second = layers[:cut], layers[cut:]
    assert first[0] is net.conv1 and first[-1] is net.layer2[-1]
    assert second[0] is net.layer3[0] and second[-1] is net.fc
    assert cuts(replace(job, cut="balanced"), net, layers, sizes, 2) != [cut]  # not the balanced one here
    with pytest.raises(ValueError, match="use cut=balanced"):
        cuts(job, net, layers, sizes, 3)


def test_a_cut_that_means_nothing_is_skipped_with_the_fix():
    rec = execute("parallel_resnet50", dict(strategy="naive_mp", device="cpu", gpus=3, micro_batches=1, batch=2,
                                            image_size=64, nodes=1, transport="fast", cut="seed003"))
    assert rec.outcome == SKIPPED and "use gpus=2" in rec.reason
    rec = execute("parallel_lm", dict(TINY, strategy="naive_mp", device="cpu", gpus=2, micro_batches=1, nodes=2))
    assert rec.outcome == SKIPPED and "use nodes=1 transport=fast" in rec.reason


# ---- several nodes ---------------------------------------------------------------------------------

def test_the_launchers_arguments_and_slurms_environment_describe_the_nodes():
    from harness.workloads.parallelism.nodes import Nodes
    assert Nodes.of_launcher(None, None, None, None, environ={}) is None
    got = Nodes.of_launcher(2, 1, "head:29500", "job7", environ={})
    assert (got.count, got.node_rank, got.endpoint, got.run_id, got.backend) == (2, 1, "head:29500", "job7", "c10d")
    assert Nodes.from_env(got.to_env()) == got
    slurm = {"SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_ID": "42", "MASTER_ADDR": "n001"}
    got = Nodes.of_launcher(None, None, None, None, environ=slurm)
    assert (got.count, got.node_rank, got.endpoint, got.run_id) == (2, 1, "n001:29500", "slurm-42")
    with pytest.raises(ValueError, match="needs --rdzv-endpoint HOST:PORT"):
        Nodes.of_launcher(2, 0, None, None, environ={})
    with pytest.raises(ValueError, match="--node-rank 2 is not one of 0..1"):
        Nodes.of_launcher(2, 2, "head:1", None, environ={})


def test_only_the_node_holding_rank_0_of_a_multi_node_launch_files_the_record(monkeypatch):
    from harness.measure.outcomes import Skip
    from harness.workloads.parallelism import launch as launcher, parallel
    from harness.workloads.parallelism.nodes import Nodes
    for k, v in Nodes(count=2, endpoint="head:29500", run_id="lm1").to_env().items():
        monkeypatch.setenv(k, v)
    from harness.measure.instruments.timing import Timing
    report = {"timing": Timing(0.5, 0.5, 0.5, 0.5, 0.5, 3, 1).to_dict(), "loss_first": 3.0, "loss": 2.0, "memory": {},
              "busy": {}}
    asked = []

    def fake(worker, world, args, timeout_s, nodes, here):
        asked.append(nodes)
        return {r: [report, report] for r in here}
    job = lm_job("ddp", "cpu", 2, 1, **{k: v for k, v in TINY.items() if k not in ("nodes", "transport")})
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: fake(*a, **k, here=[1]))
    with pytest.raises(Skip, match="rank 0 ran on another node"):
        parallel._multi_process(job)
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: fake(*a, **k, here=[0]))
    work = parallel._multi_process(job)
    assert work.check()["launch"] == {"nodes": 2, "gpus_per_node": 1, "transport": "fast", "rendezvous": "head:29500"}
    # one rendezvous per case, named alike on every node: a finished rendezvous is closed
    assert asked[0].run_id == asked[1].run_id != "lm1" and asked[0].run_id.startswith("lm1-")
    other = parallel._nodes(replace(job, batch=8))
    assert other.run_id != asked[0].run_id
