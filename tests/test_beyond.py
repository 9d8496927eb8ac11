"""Working sets past an emulated card (beyond, seed000) and Chainer under a budget, on the CPU:
what each refuses, how big each set is, does-not-fit with the bytes, the guard, the skips."""
import gc
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from harness.cases import beyond, seed000
from harness.drive import runner
from harness.drive.runner import execute
from harness.measure.guards import budget
from harness.measure.instruments.memory import PeakMemory
from harness.measure.outcomes import DoesNotFit, Skip
from harness.units import GB
from harness.workloads.chainer import chainer_backend
from harness.workloads.cupy import beyond as ways_past, mapped
from harness.workloads.cupy.kernels import build as build_pattern

from conftest import FakePool as Pool, fake_devices

CARD = 80 * 2**30
B16 = budget.resolve("16GB", CARD, "cupy")


def numpy_cupy(pool=None):
    """NumPy standing in for CuPy: the kernels are array-generic; the pool is the budget's."""
    pool = pool or Pool()
    return SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")},
                           cuda=SimpleNamespace(runtime=SimpleNamespace(deviceSynchronize=lambda: None)),
                           get_default_memory_pool=lambda: pool)


def on_a_gpu(monkeypatch, devices=None, pool=None):
    devices = devices or fake_devices(total=CARD)
    monkeypatch.setattr(beyond, "need_gpus", lambda n: devices)
    monkeypatch.setattr(seed000, "need_gpus", lambda n: devices)
    monkeypatch.setattr(ways_past, "need_cupy", lambda: numpy_cupy(pool))
    monkeypatch.setattr(runner, "PeakMemory", lambda gpus: PeakMemory())  # the fake GPUs have no NVML
    return devices


def test_the_set_is_times_the_budget_and_never_within_it():
    assert beyond.set_bytes(B16, 1.5) == 24 * GB and beyond.set_bytes(B16, 3.0) == 48 * GB
    assert beyond.set_bytes(budget.resolve("40GB", CARD, None), 1.5) == 60 * GB
    with pytest.raises(ValueError, match="pass times > 1"):
        beyond.set_bytes(B16, 1.0)
    assert seed000.SET_BYTES == 3 * 8589934592  # the seed's three 8 GiB arrays


def test_the_seed_prices_the_same_ways_as_beyond_bound_as_its_stream_is():
    assert seed000.CASE.params["way"] == beyond.CASE.params["way"] == ways_past.WAYS
    for way in ways_past.WAYS:
        bound = beyond.CASE.bound_by(way=way, pattern="stream", budget="16GB", times=1.5)
        assert seed000.CASE.bound_by(way=way, budget="16GB") == bound
        assert seed000.CASE.allocator(way=way, budget="16GB") == ways_past.ALLOCATOR[way]
    assert beyond.CASE.bound_by(way="out_of_core", pattern="stream", budget="16GB", times=1.5) == "h2d_pinned"
    assert seed000.CASE.bound_by(way="device_pool", budget="16GB") == "device_copy"


def test_configs_outside_the_declared_values_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="times=2.*1.5, 3.0"):
        beyond.CASE.config(dict(way="zero_copy", pattern="stream", budget="16GB", times=2))
    with pytest.raises(ValueError, match="budget='12GB' is not one of: 16GB"):
        seed000.CASE.config(dict(way="device_pool", budget="12GB"))
    with pytest.raises(ValueError, match="way='pinned' is not one of"):
        seed000.CASE.config(dict(way="pinned", budget="16GB"))


@pytest.mark.parametrize("pattern", ["matmul", "gather"])
def test_out_of_core_skips_patterns_it_cannot_stream_naming_the_ways_that_run_them(pattern):
    rec = execute("beyond", dict(way="out_of_core", pattern=pattern, budget="16GB", times=1.5))
    assert rec.outcome == "skipped" and "way=zero_copy" in rec.reason and "pattern=stream or reduce" in rec.reason


@pytest.mark.parametrize("case, params", [
    ("beyond", dict(way="zero_copy", pattern="gather", budget="16GB", times=1.5)),
    ("beyond", dict(way="managed_pool", pattern="stream", budget="16GB", times=3.0)),
    ("seed000", dict(way="zero_copy", budget="16GB")), ("seed000", dict(way="managed_pool", budget="16GB"))])
def test_without_a_gpu_the_ways_skip_naming_the_fix(case, params):
    rec = execute(case, params)
    assert rec.outcome == "skipped" and "run it on a box with 1 or more" in rec.reason


def test_with_a_gpu_but_no_cupy_zero_copy_names_the_install(monkeypatch):
    monkeypatch.setattr(beyond, "need_gpus", lambda n: fake_devices(total=CARD))
    monkeypatch.setitem(sys.modules, "cupy", None)
    from harness.measure.guards import requirements
    monkeypatch.setattr(requirements, "discover", lambda: fake_devices(total=CARD))
    monkeypatch.setenv("OOMBENCH_HOST_MEMORY_GB", "1000")
    with pytest.raises(Skip, match=r"pip install 'oombench\[cupy\]'"):
        beyond.build("zero_copy", "stream", "16GB", 1.5)


def test_zero_copy_and_out_of_core_need_the_host_memory_for_the_set(monkeypatch):
    on_a_gpu(monkeypatch)
    monkeypatch.setenv("OOMBENCH_HOST_MEMORY_GB", "64")  # half of it, 32 GB, is the cap
    for way in ("zero_copy", "out_of_core"):
        with pytest.raises(Skip, match="needs 48.0 GB of host memory"):
            beyond.build(way, "stream", "16GB", 3.0)


@pytest.mark.parametrize("case, params, asked", [
    ("beyond", dict(way="device_pool", pattern="stream", budget="16GB", times=1.5), 24 * GB),
    ("beyond", dict(way="device_pool", pattern="matmul", budget="24GB", times=3.0), 72 * GB),
    ("seed000", dict(way="device_pool", budget="16GB"), 3 * 2**33),
    ("seed000", dict(way="device_pool", budget="24GB"), 3 * 2**33)])
def test_the_capped_device_pool_does_not_fit_with_the_bytes_asked(monkeypatch, case, params, asked):
    pool = Pool()
    on_a_gpu(monkeypatch, pool=pool)
    rec = execute(case, params, devices=fake_devices(total=CARD))
    assert rec.outcome == "does_not_fit" and rec.requested_bytes == asked
    assert pool.limit == budget.resolve(params["budget"], CARD, None).limit_bytes
    assert pool.used == 0  # nothing allocated
    assert rec.budget["enforced"] == "cupy.cuda.MemoryPool.set_limit"


@pytest.mark.parametrize("case, params", [
    ("beyond", dict(way="device_pool", pattern="stream", budget="p100-16gb", times=1.5)),
    ("seed000", dict(way="device_pool", budget="p100-16gb"))])
def test_a_named_card_that_does_not_fit_files_the_card_the_case_emulated(monkeypatch, case, params):
    """The record's budget is the one the case capped its pool at: its allocator, and the overhead
    measured under it; the declared bytes read after it (beyond's, under no allocator) change nothing."""
    pool = Pool()
    on_a_gpu(monkeypatch, pool=pool)
    measured = []
    monkeypatch.setattr(budget, "measure_overhead", lambda allocator: measured.append(allocator) or budget.Overhead(
        (700 if allocator else 900) * 2**20, f"read under {allocator}"))
    rec = execute(case, params, devices=fake_devices(total=CARD))
    p100 = budget.CARDS["p100-16gb"].total_bytes
    assert rec.outcome == "does_not_fit" and pool.limit == p100 - 700 * 2**20 and pool.used == 0
    assert rec.budget == {"name": "p100-16gb", "limit_bytes": p100 - 700 * 2**20, "card_bytes": CARD,
                          "enforced": "cupy.cuda.MemoryPool.set_limit", "emulated_bytes": p100,
                          "overhead_bytes": 700 * 2**20, "overhead_read": "read under cupy"}
    assert measured[0] == "cupy"


def test_the_way_sizes_and_caps_through_the_pool_it_is_given(monkeypatch):
    pool = Pool()
    on_a_gpu(monkeypatch, pool=pool)
    small = budget.Budget("16GB", 30_000, CARD, "cupy.cuda.MemoryPool.set_limit")
    work = ways_past.way_workload("device_pool", "stream", 24_000, small, fake_devices(total=CARD), "x")
    work.step()
    assert pool.limit == 30_000 and work.check() == {"exact": True, "elements": 1000}
    with pytest.raises(DoesNotFit, match="needs"):
        ways_past.way_workload("device_pool", "stream", 48_000, small, fake_devices(total=CARD), "x")


@pytest.mark.parametrize("free, budget_name, times", [(CARD - 2**30, "40GB", 3.0),  # past the card itself
                                                     (40 * 2**30, "16GB", 3.0)])  # past what others left free
def test_managed_past_the_cards_free_memory_is_refused_by_the_guard(monkeypatch, tmp_path, free, budget_name, times):
    monkeypatch.setenv("OOMBENCH_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv("OOMBENCH_ALLOW_OVERSUBSCRIPTION", raising=False)
    on_a_gpu(monkeypatch, devices=fake_devices(total=CARD, free=free))
    with pytest.raises(Skip, match="refused by the managed-memory guard"):
        beyond.build("managed_pool", "stream", budget_name, times)


def test_managed_says_the_budget_is_not_enforced_and_nothing_is_evicted():
    assert beyond.CASE.allocator(way="managed_pool", pattern="stream", budget="16GB", times=1.5) is None
    assert beyond.CASE.allocator(way="device_pool", pattern="stream", budget="16GB", times=1.5) == "cupy"
    gpu = fake_devices(total=CARD).gpus[0]
    note = B16.managed_note(48 * GB, gpu.memory_free)
    assert note["budget_enforced"] is False and note["evicted"] is False and "nothing is evicted" in note["note"]
    assert B16.managed_note(CARD + 1, gpu.memory_free)["evicted"] is True


def test_what_crosses_the_host_link_when_the_set_is_on_the_host():
    stream = build_pattern("stream", np, 24_000)
    assert ways_past.link_bytes(stream, "stream") == {"h2d_bytes": 16_000, "d2h_bytes": 8_000}
    assert ways_past.link_bytes(build_pattern("reduce", np, 8_000), "reduce") == {"h2d_bytes": 8_000, "d2h_bytes": 0}
    g = build_pattern("gather", np, 64_000)
    count = g.work["bytes"] // 24
    assert ways_past.link_bytes(g, "gather") == {"h2d_bytes": 16 * count, "d2h_bytes": 8 * count}
    assert ways_past.bound_by("zero_copy", "gather") == "h2d_pinned"
    assert ways_past.bound_by("managed_pool", "matmul") == "matmul_fp32"


def test_mapped_memory_hands_out_the_device_address_and_is_freed_when_dropped():
    log = []
    runtime = SimpleNamespace(hostAlloc=lambda n, flags: log.append(("alloc", n, flags)) or 0x1000,
                              freeHost=lambda p: log.append(("free", p)),
                              pointerGetAttributes=lambda p: SimpleNamespace(devicePointer=p + 0x10))
    cupy = SimpleNamespace(cuda=SimpleNamespace(
        runtime=runtime, Device=lambda: SimpleNamespace(id=0),
        UnownedMemory=lambda ptr, size, owner, dev: SimpleNamespace(ptr=ptr, size=size, owner=owner),
        MemoryPointer=lambda mem, offset: SimpleNamespace(mem=mem, ptr=mem.ptr + offset)))
    p = mapped.mapped_malloc(cupy)(4096)
    assert log == [("alloc", 4096, mapped.HOST_ALLOC_MAPPED)] and p.ptr == 0x1010
    del p
    gc.collect()
    assert log[-1] == ("free", 0x1000)


def chainer_on_a_gpu(monkeypatch, pool):
    devices = fake_devices(total=CARD)
    chainer = SimpleNamespace(backends=SimpleNamespace(cuda=SimpleNamespace(available=True)),
                              get_device=lambda name: name)
    cupy = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(deviceSynchronize=lambda: None)))
    monkeypatch.setattr(chainer_backend, "_cupy", lambda: (cupy, devices))
    monkeypatch.setattr(chainer_backend, "_chainer", lambda: (chainer, []))
    monkeypatch.setattr(chainer_backend, "install_cupy_allocator", lambda cupy, name, guard: pool)
    monkeypatch.setattr(chainer_backend, "guard_managed", lambda *a: None)


def test_chainers_device_pool_is_capped_at_the_budget_and_the_managed_pool_says_it_is_not(monkeypatch):
    pool = Pool()
    chainer_on_a_gpu(monkeypatch, pool)
    chainer_backend.open_backend("cuda", "device_pool", 10**9, "16GB")
    assert pool.limit == 16 * GB
    with pytest.raises(MemoryError, match="Out of memory allocating"):
        pool.malloc(17 * GB)  # what the runner records as does-not-fit
    managed = Pool()
    chainer_on_a_gpu(monkeypatch, managed)
    backend = chainer_backend.open_backend("cuda", "managed_pool", 20 * GB, "16GB")
    assert managed.limit == 0 and backend.notes["budget_enforced"] is False and backend.notes["evicted"] is False


def test_chainers_backend_carries_the_budget_it_resolved_for_the_record(monkeypatch):
    chainer_on_a_gpu(monkeypatch, Pool())
    on_the_pool = chainer_backend.open_backend("cuda", "device_pool", 10**9, "16GB").budget
    assert on_the_pool == budget.resolve("16GB", CARD, "chainer") and on_the_pool.card_bytes == CARD
    on_managed = chainer_backend.open_backend("cuda", "managed_pool", 10**9, "24GB").budget
    assert on_managed == budget.resolve("24GB", CARD, None)
    assert chainer_backend.Backend(chainer=None, device=None).budget is None  # the CPU's: no card, no budget


def test_chainer_declares_where_its_budget_is_enforced_and_refuses_one_on_the_cpu():
    from harness import cases
    mlp = cases.get("chainer_mlp")
    assert mlp.allocator(device="cuda", pool="device_pool", batch=256, budget="16GB") == "chainer"
    assert mlp.allocator(device="cuda", pool="managed_pool", batch=256, budget="16GB") is None
    with pytest.raises(Skip, match="device=cpu takes budget=card"):
        chainer_backend.open_backend("cpu", "numpy", 10, "16GB")


def test_records_filed_before_the_budget_parameter_read_as_run_on_the_whole_card():
    from harness import cases
    old = {"pattern": "stream", "fraction": 0.1}
    params = cases.get("out_of_core").upgrade(old)
    assert params == dict(old, budget="card") and cases.get("out_of_core").config(params).budget == "card"
    assert cases.get("chainer_mlp").upgrade(dict(device="cuda", pool="device_pool", batch=256,
                                                 budget="16GB"))["budget"] == "16GB"
