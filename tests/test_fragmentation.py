"""Allocator settings and workloads that fragment: each setting reaches the environment before torch
starts (and is refused after), bad names are refused naming the choices, the shape sampler keeps
its budget and its seed, the fragmentation figure is reserved over allocated, and the cases run on
the CPU at a tiny size."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from harness.drive.commands import cli
from harness.drive.runner import execute
from harness.measure.instruments.memory import fragmentation, reserved_peak, torch_peaks
from harness.workloads.search import fits
from harness.workloads.training import allocator
from harness.workloads.training.fragmenting import (AttentionStack, Sizes, attention_layers, images, live_bytes,
                                                    sequences, shapes_of)

REPO = Path(__file__).resolve().parents[1]
TINY = dict(device="cpu", workload="lm", shapes="uniform16-64", allocator="default", precision="fp32", budget="card",
            batch=1, references="drop", draws=0, vocab=128, width=32, depth=2)


def run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**env, "PYTHONPATH": str(REPO)})


# -- the setting, in the process's environment before torch starts -----------------------------------

def test_each_setting_is_in_the_c_environment_torch_reads_when_it_loads():
    """What c10 reads with getenv when torch loads, seen from C: each setting in turn replaces the
    one before (and what the parent passed down), the default removes both variables; torch is
    imported behind the last one."""
    code = ("import ctypes, json\n"
            "from harness.workloads.training import allocator\n"
            "get = ctypes.CDLL(None).getenv\n"
            "get.restype = ctypes.c_char_p\n"
            "def seen():\n"
            "    return {v: (get(v.encode()) or b'').decode() or None for v in allocator.ENV_VARS}\n"
            "out = {}\n"
            "for name in [*allocator.TORCH, 'expandable']:\n"
            "    allocator.apply_torch(name)\n"
            "    out[name] = seen()\n"
            "import torch\n"
            "out['imported'] = seen()\n"
            "print(json.dumps(out))\n")
    inherited = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    done = run_python(code, {"PATH": "/usr/bin:/bin", **inherited})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    for name, conf in allocator.TORCH.items():
        assert seen[name] == {v: conf or None for v in allocator.ENV_VARS}, name
    assert seen["imported"] == {v: "expandable_segments:True" for v in allocator.ENV_VARS}


def test_a_setting_is_refused_once_torch_is_imported_and_nothing_changes():
    environ = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}
    with pytest.raises(allocator.TooLate, match="before torch is imported"):
        allocator.apply_torch("expandable", environ, {"torch": object()})
    assert environ == {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}


def test_a_case_refuses_its_setting_where_torch_came_first(monkeypatch):
    """In a process that imported torch (this one), the case fails loudly before it changes anything,
    instead of measuring another allocator than it is named for."""
    import os
    import torch  # noqa: F401  (imported first, as the case must not find it)
    from harness.cases import fragmentation
    before = {v: os.environ.get(v) for v in allocator.ENV_VARS}
    with pytest.raises(allocator.TooLate):
        fragmentation.build(**dict(TINY, device="cuda", allocator="async"))
    assert {v: os.environ.get(v) for v in allocator.ENV_VARS} == before


@pytest.mark.parametrize("technique, setting", [("fp32", "expandable"), ("checkpoint+expandable", "default")])
def test_the_probes_of_a_what_fits_search_start_under_the_setting(monkeypatch, technique, setting):
    """The case's setting, or the way's own: in the probe's environment from its start, where the
    server it may be forked from imports torch before the probe could put it in force."""
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits_case, "_card", lambda devices: (24 * 2**30, 24 * 2**30))
    probe = ("import json, os, sys; n = int(sys.argv[1]); print(json.dumps({'fits': n <= 5, 'pid': os.getpid(), "
             "'allocator_backend': os.environ.get('PYTORCH_ALLOC_CONF')}))")
    monkeypatch.setattr(fits, "probe_argv",
                        lambda config, cap, over: lambda n: [sys.executable, "-S", "-c", probe, str(n)])
    params = dict(device="cuda", workload="lm", technique=technique, budget="16GB", over="batch", allocator=setting,
                  vocab=128, width=32, depth=2, seq_len=16)
    rec = execute("fits", params)
    assert rec.outcome == "ok" and rec.check["max_batch"] == 5
    assert rec.check["allocator_backends"] == ["expandable_segments:True"]
    assert fits_case.search_key({"a": 1}, "batch", "expandable") == {"a": 1, "over": "batch", "allocator": "expandable"}
    assert fits_case.search_key({"a": 1}, "batch", "default") == {"a": 1, "over": "batch"}  # earlier logs still aim it


def test_the_benchmarks_import_no_torch():
    """asv imports the module in the case's process before the case applies its setting."""
    done = run_python("import sys, benchmarks.fragmentation; print('torch' in sys.modules)", {"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_what_torch_runs_is_checked_against_the_setting():
    fake = SimpleNamespace(_C=SimpleNamespace(), cuda=SimpleNamespace(get_allocator_backend=lambda: "native"))
    assert allocator.verified("expandable", allocator.in_force(fake))["allocator_backend"] == "native"
    with pytest.raises(RuntimeError, match="asks for the cudaMallocAsync backend, and torch runs native"):
        allocator.verified("async", allocator.in_force(fake))


# -- bad names ---------------------------------------------------------------------------------------

def test_unknown_settings_are_refused_naming_the_choices(capsys):
    with pytest.raises(ValueError, match="choose one of default, expandable, async, gc0.6, split512"):
        allocator.torch_conf("expandable_segments")
    with pytest.raises(ValueError, match="device_pool, async_pool, limited_pool"):
        allocator.cupy_setting("managed")
    argv = ["case", "fragmentation", *(f"{k}={v}" for k, v in dict(TINY, allocator="expandable_segments").items())]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "default, expandable, async, gc0.6, split512" in err


# -- shapes ------------------------------------------------------------------------------------------

def test_shape_names_are_parsed_or_refused():
    assert (shapes_of("uniform128-4096").low, shapes_of("uniform128-4096").high) == (128, 4096)
    assert shapes_of("fixed1024").fixed and shapes_of("fixed1024").low == 1024
    pow2 = shapes_of("pow2_128-4096")
    assert (pow2.low, pow2.high, pow2.doubling, shapes_of("uniform128-4096").doubling) == (128, 4096, True, False)
    for bad in ("uniform4096-128", "fixed0", "normal128-4096", "uniform128", "pow2_128-3000", "pow2_96-256",
                "pow2_0-64", "pow2_256-128", "pow2128-4096"):
        with pytest.raises(ValueError) as e:
            shapes_of(bad)
        assert str(e.value) == (f"shape distribution {bad!r} is not uniformA-B (0 < A <= B), pow2_A-B (B = A times a "
                                "power of two) or fixedN: name one, e.g. uniform128-4096 or pow2_128-4096")
    one = shapes_of("uniform1-4")  # sizes from 1 up are sizes too
    assert (one.name, one.low, one.high, one.doubling) == ("uniform1-4", 1, 4, False)
    assert shapes_of("pow2_1-8").doubling and shapes_of("fixed1").name == "fixed1"


def test_a_step_holds_as_many_whole_samples_as_fit_and_refuses_none():
    from harness.workloads.training.fragmenting import images, sequences
    assert sequences(1024, 1024) == 1 and sequences(4095, 1024) == 3 and images(2 * 224 * 224, 224) == 2
    with pytest.raises(ValueError) as e:
        sequences(1023, 1024)
    assert str(e.value) == "a step of 1023 holds no sample of size 1024: raise the batch or lower the sizes"


def test_bucketed_lengths_are_the_powers_of_two_and_keep_the_token_budget_exactly():
    drawn = [Sizes(shapes_of("pow2_128-4096"))[i] for i in range(300)]
    assert set(drawn) == {128, 256, 512, 1024, 2048, 4096}  # each bucket, and only those
    assert all(sequences(16 * 1024, n) * n == 16 * 1024 for n in drawn)
    assert [Sizes(shapes_of("pow2_64-64"))[i] for i in range(3)] == [64] * 3


def test_the_sizes_are_seeded_in_range_and_on_the_stride():
    dist = shapes_of("uniform224-1024")
    a, b = Sizes(dist, seed=0, stride=32), Sizes(dist, seed=0, stride=32)
    drawn = [a[i] for i in range(200)]
    assert drawn == [b[i] for i in range(200)] and a[5] == drawn[5]  # drawn once, the same again
    assert drawn != [Sizes(dist, seed=1, stride=32)[i] for i in range(200)]
    assert all(224 <= s <= 1024 and s % 32 == 0 for s in drawn) and len(set(drawn)) > 10
    assert {Sizes(shapes_of("fixed1024"))[i] for i in range(5)} == {1024}


@hsettings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 4096))
def test_a_step_keeps_its_token_budget(batch, length):
    tokens = batch * 1024
    if length > tokens:
        with pytest.raises(ValueError, match="holds no sample"):
            sequences(tokens, length)
        return
    n = sequences(tokens, length)
    assert n * length <= tokens < (n + 1) * length
    side = 1 + length % 1024
    assert images(tokens * 1024, side) * side * side <= tokens * 1024 < (images(tokens * 1024, side) + 1) * side * side


# -- the figure --------------------------------------------------------------------------------------

def test_fragmentation_is_reserved_over_allocated_at_the_peaks():
    cuda = SimpleNamespace(max_memory_allocated=lambda d: 19_100_000_000, max_memory_reserved=lambda d: 26_600_000_000)
    assert torch_peaks(cuda) == {"peak_allocated": 19_100_000_000, "peak_reserved": 26_600_000_000,
                                 "fragmentation": round(26.6 / 19.1, 4)}
    assert fragmentation(0, 0) is None and fragmentation(5, None) is None
    assert fragmentation(5, 0) is None and fragmentation(5, -1) is None and fragmentation(5, 1) == 5.0
    per_gpu = SimpleNamespace(max_memory_allocated=lambda d: (100, 200)[d], max_memory_reserved=lambda d: (150, 500)[d])
    assert torch_peaks(per_gpu) == {"peak_allocated": 100, "peak_reserved": 150, "fragmentation": 1.5}
    assert torch_peaks(per_gpu, 1) == {"peak_allocated": 200, "peak_reserved": 500, "fragmentation": 2.5}
    levels = {"allocator.torch.max_allocated.cuda:0": 19, "allocator.torch.max_reserved.cuda:0": 26,
              "setup.allocator.torch.max_reserved.cuda:0": 99, "device.used.gpu0": 28}
    assert reserved_peak(levels) == 26
    assert reserved_peak({"allocator.cupy.limited_pool.used": 3, "allocator.cupy.limited_pool.total": 5,
                          "allocator.cupy.pool_total": 0}) == 5
    assert reserved_peak({"device.used.gpu0": 28}) is None


def test_under_async_and_a_budget_the_reserve_is_held_to_the_budgets_bytes():
    """cudaMallocAsync's fraction caps what torch has in use, not its reserve: the check says
    whether the reserve went past the budget the case capped torch at (none on the whole card)."""
    from harness.cases import fragmentation as case
    from harness.measure.guards import budget
    cuda = SimpleNamespace(max_memory_allocated=lambda d: 10, max_memory_reserved=lambda d: 16 * 10**9 + 1,
                           memory_stats=lambda d: {"num_alloc_retries": 3, "num_ooms": 1})
    torch = SimpleNamespace(cuda=cuda)
    b16, b24 = (budget.resolve(name, 80 * 2**30, "torch") for name in ("16GB", "24GB"))
    assert case._peaks(torch, b16, "async")["reserved_over_budget"] is True
    assert case._peaks(torch, b24, "async")["reserved_over_budget"] is False
    assert case._peaks(torch, budget.Budget("16GB", 16 * 10**9 + 1, 1, ""), "async")["reserved_over_budget"] is False
    whole = case._peaks(torch, None, "async")
    assert "reserved_over_budget" not in whole and whole["num_alloc_retries"] == 3 and "num_ooms" not in whole
    assert "reserved_over_budget" not in case._peaks(torch, b16, "default")


# -- the workloads on the CPU ------------------------------------------------------------------------

def test_the_lm_case_trains_each_step_at_its_own_length_on_the_cpu():
    rec = execute("fragmentation", TINY)
    assert rec.outcome == "ok", rec.reason
    steps = rec.check["steps"]
    assert rec.check["sizes"] == [Sizes(shapes_of("uniform16-64"))[i] for i in range(steps)]
    assert len(set(rec.check["sizes"])) > 5 and rec.check["loss_last"] < rec.check["loss_first"]
    assert rec.work == {"tokens": 1024}
    assert "fragmentation" not in rec.check  # no CUDA allocator on the CPU: no reserve to read


def test_the_bucketed_lm_case_trains_only_at_the_bucket_lengths_on_the_cpu():
    rec = execute("fragmentation", dict(TINY, shapes="pow2_16-64"))
    assert rec.outcome == "ok", rec.reason
    sizes = rec.check["sizes"]
    assert sizes == [Sizes(shapes_of("pow2_16-64"))[i] for i in range(len(sizes))]
    assert set(sizes) <= {16, 32, 64} and len(set(sizes)) > 1


def test_the_everyday_loop_keeps_the_last_steps_logits_and_zeroed_gradients_into_the_next():
    from harness.workloads.training.fragmenting import lm_trainer
    from harness.workloads.training.precision import precision
    for keep in (False, True):
        step, trainer, _ = lm_trainer("cpu", shapes_of("uniform16-64"), 1, 128, 32, 2, precision("fp32"),
                                      keep_references=keep)
        step()
        step()
        kept = getattr(trainer.forward, "last", None)
        assert (kept is not None) == keep
        if keep:  # the second step's logits, at its own length
            assert kept.shape[:2] == (1024 // step.sizes[1], step.sizes[1])
        # What the third step's forward runs beside: the gradients its step zeroed, or none.
        backward, grads_held = trainer.backward, []

        def noting(grads_held=grads_held, trainer=trainer, backward=backward):  # this pass's, called in it
            grads_held.append(all(p.grad is not None for p in trainer.model.parameters()))
            return backward()

        trainer.backward = noting
        step()
        assert grads_held == [keep]


def test_records_filed_before_the_loop_and_the_draws_were_parameters_ran_the_suites_loop_and_seed():
    from harness.cases import get
    old = {k: v for k, v in TINY.items() if k not in ("references", "draws")}
    upgraded = get("fragmentation").upgrade(old)
    assert (upgraded["references"], upgraded["draws"]) == ("drop", 0)
    # in the order a record files them, so pages name an older record as they name a new one
    assert list(upgraded) == sorted(upgraded)


def test_the_draws_reorder_the_lengths_and_leave_the_model_and_its_data_alone():
    from harness.workloads.training.fragmenting import lm_trainer
    from harness.workloads.training.precision import precision
    made = {d: lm_trainer("cpu", shapes_of("uniform16-64"), 1, 128, 32, 2, precision("fp32"), draws=d)
            for d in (0, 1)}
    (step0, trainer0, _), (step1, trainer1, _) = made[0], made[1]
    assert [step0.sizes[i] for i in range(20)] != [step1.sizes[i] for i in range(20)]
    assert [step1.sizes[i] for i in range(20)] == [Sizes(shapes_of("uniform16-64"), seed=1)[i] for i in range(20)]
    assert all(a.equal(b) for a, b in zip(trainer0.model.parameters(), trainer1.model.parameters()))


@pytest.mark.parametrize("change, reason", [
    (dict(allocator="expandable"), "configures torch's CUDA allocator"),
    (dict(shapes="uniform224-1024"), "are not lm's"),
    (dict(budget="24GB"), "nothing caps memory on the CPU"),
])
def test_pairings_that_mean_nothing_skip_with_the_reason(change, reason):
    rec = execute("fragmentation", dict(TINY, **change))
    assert rec.outcome == "skipped" and reason in rec.reason


def test_the_varying_step_feeds_the_trainer_each_size():
    from harness.workloads.training.fragmenting import lm_trainer
    from harness.workloads.training.precision import precision
    step, trainer, tokens = lm_trainer("cpu", shapes_of("uniform16-64"), 1, 128, 32, 2, precision("fp32"))
    for i in range(3):
        step()
        (inputs,), targets = trainer.micro_batches[0]
        length = step.sizes[i]
        assert inputs.shape == (tokens // length, length) == targets.shape and trainer.count == targets.numel()


def test_the_attention_step_keeps_what_it_says_and_matches_the_host():
    work = AttentionStack(numpy, shapes_of("uniform16-64"), tokens=256, width=8, depth=3)
    for _ in range(4):
        work()
    assert work.check(numpy)["ok"]
    length = work.sizes[3]
    x = work.stream[:sequences(256, length) * length * 8].reshape(-1, length, 8)
    assert sum(a.nbytes for a in attention_layers(numpy, x, 3)) == live_bytes(256, length, 8, 3)
    work.last = (work.last[0], work.last[1] * 1.01)  # a device that computed something else
    assert not work.check(numpy)["ok"]


def test_the_limited_pool_is_held_to_its_live_bytes_or_the_budget(monkeypatch):
    from harness.measure.instruments import memory
    monkeypatch.setattr(memory, "_WATCHED", {})  # the fake pool is watched: not beyond this test
    made = []

    class Pool:
        def __init__(self):
            made.append(self)

        def set_limit(self, size):
            self.limit = size

        malloc = used_bytes = total_bytes = None

    cupy = SimpleNamespace(cuda=SimpleNamespace(MemoryPool=Pool, set_allocator=lambda f: None))
    assert allocator.use_cupy_pool(cupy, "limited_pool", None, 1000).limit == 1250
    assert allocator.use_cupy_pool(cupy, "limited_pool", 1100, 1000).limit == 1100


def test_a_setting_never_searched_is_aimed_by_the_defaults_answer_and_decided_by_its_own_probes(
        monkeypatch, records_dir):
    from conftest import set_run
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits_case, "_card", lambda devices: (24 * 2**30, 24 * 2**30))

    def boundary(b):
        probe = ("import json, os, sys; "
                 "print(json.dumps({'fits': int(sys.argv[1]) <= int(sys.argv[2]), 'pid': os.getpid()}))")
        monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
            lambda n: [sys.executable, "-S", "-c", probe, str(n), str(b)]))

    params = dict(device="cuda", workload="lm", technique="fp32", budget="16GB", over="batch", allocator="default",
                  vocab=128, width=32, depth=2, seq_len=16)
    boundary(5)
    first = execute("fits", params, run=set_run(monkeypatch, records_dir, run_id="run1"))
    for answer in (7, 5):  # the setting fits more than the default, or (in another run) as much
        boundary(answer)
        run = set_run(monkeypatch, records_dir, run_id=f"run-{answer}")
        second = execute("fits", dict(params, allocator="expandable"), run=run)
        assert second.outcome == "ok" and second.check["max_batch"] == answer  # only its own probes decide
        if answer == 7:  # the setting's first search: the default's answer aims it
            assert second.check["earlier_bracket"] == [5, 6] and second.check["earlier_runs"] == [0, 0]
    assert second.check["earlier_bracket"] == [7, 8]  # its own earlier search, once there is one
    assert first.check["max_batch"] == 5
