"""The unified-memory case's logic on the CPU: which CUDA API form is used, the guard's bookkeeping
through CuPy-style allocators, and the skips a box without the GPU or library gets."""
import gc
import sys
from types import SimpleNamespace

import pytest

from harness.workloads.cupy import managed
from harness.measure.guards import requirements
from harness.cases import unified
from harness.workloads.cupy.managed import HOST, UnifiedApi, Unsupported
from harness.measure.outcomes import SKIPPED, Skip
from harness.drive.runner import execute
from harness.measure.guards.safety import ManagedGuard

from conftest import fake_devices

GiB = 2**30


class CudaError(Exception):
    pass


def fake_cupy(log, works=False):
    def cupy_call(name):
        def call(*args):
            log.append(("cupy", name, args))
            if not works:
                raise CudaError("cudaErrorInvalidDevice")
        return call
    runtime = SimpleNamespace(CUDARuntimeError=CudaError, memPrefetchAsync=cupy_call("memPrefetchAsync"),
                              memAdvise=cupy_call("memAdvise"))
    return SimpleNamespace(cuda=SimpleNamespace(runtime=runtime))


class Location:
    type = id = None


def fake_bindings(log, cuda: int):
    """cuda.bindings as CUDA 13 (location forms only) or CUDA 12.2 (device numbers, plus _v2)."""
    rt = SimpleNamespace(
        cudaError_t=SimpleNamespace(cudaSuccess=0),
        cudaMemLocationType=SimpleNamespace(cudaMemLocationTypeHost="host", cudaMemLocationTypeDevice="device"),
        cudaMemoryAdvise=SimpleNamespace(**{name: name for name in UnifiedApi.ADVICE.values()}),
        cudaMemLocation=Location, cudaGetLastError=lambda: (0,))

    def by_location(name):
        def call(ptr, n, *args):
            if not isinstance(args[-3 if "Prefetch" in name else -1], Location):
                raise TypeError("location must be a cudaMemLocation")
            log.append((name, args))
            return (0,)
        return call

    def by_device(name):
        def call(ptr, n, *args):
            dev = args[0] if "Prefetch" in name else args[1]
            if not isinstance(dev, int):
                raise TypeError("an int device")
            log.append((name, args))
            return (0,)
        return call

    if cuda == 13:
        rt.cudaMemPrefetchAsync, rt.cudaMemAdvise = by_location("cudaMemPrefetchAsync"), by_location("cudaMemAdvise")
    else:
        rt.cudaMemPrefetchAsync, rt.cudaMemAdvise = by_device("cudaMemPrefetchAsync"), by_device("cudaMemAdvise")
        rt.cudaMemPrefetchAsync_v2 = by_location("cudaMemPrefetchAsync_v2")
        rt.cudaMemAdvise_v2 = by_location("cudaMemAdvise_v2")
    return rt


def test_cuda13_takes_the_location_form_for_the_host_and_it_is_recorded(monkeypatch):
    log = []
    monkeypatch.setattr(managed, "_runtime", lambda: fake_bindings(log, 13))
    api = UnifiedApi(fake_cupy(log))
    api.prefetch(0x1000, 4096, HOST)
    api.advise(0x1000, 4096, "preferred_location", HOST)
    (name, args), (name2, args2) = log
    assert name == "cudaMemPrefetchAsync" and args[0].type == "host"
    assert name2 == "cudaMemAdvise" and args2 == ("cudaMemAdviseSetPreferredLocation", args2[1])
    assert api.used == {"prefetch to host": "cuda.bindings cudaMemPrefetchAsync(location)",
                        "advise preferred_location host": "cuda.bindings cudaMemAdvise(location)"}


def test_cuda12_bindings_fall_back_to_the_v2_location_form(monkeypatch):
    log = []
    monkeypatch.setattr(managed, "_runtime", lambda: fake_bindings(log, 12))
    api = UnifiedApi(fake_cupy(log))
    api.prefetch(0x1000, 4096, 0)
    assert log[0][0] == "cudaMemPrefetchAsync_v2" and log[0][1][0].type == "device" and log[0][1][0].id == 0
    api.prefetch(0x2000, 4096, 0)  # the form that worked is used straight away from then on
    assert [entry[0] for entry in log] == ["cudaMemPrefetchAsync_v2"] * 2


def test_without_cuda_bindings_cupys_device_number_form_is_tried(monkeypatch):
    log = []
    monkeypatch.setattr(managed, "_runtime", lambda: None)
    api = UnifiedApi(fake_cupy(log, works=True))
    api.prefetch(0x1000, 4096, HOST)
    assert log == [("cupy", "memPrefetchAsync", (0x1000, 4096, -1, 0))]


def test_where_no_form_works_the_case_is_unsupported_not_a_crash(monkeypatch):
    log = []
    monkeypatch.setattr(managed, "_runtime", lambda: None)
    api = UnifiedApi(fake_cupy(log, works=False))
    with pytest.raises(Unsupported, match="prefetch to host unsupported.*cudaErrorInvalidDevice") as e:
        api.prefetch(0x1000, 4096, HOST)
    assert isinstance(e.value, Skip)


class Memory:
    """Stands in for CuPy's memory objects: no weak references, like theirs."""
    __slots__ = ("size", "owner")

    def __init__(self, size, owner=None):
        self.size, self.owner = size, owner


def test_guarded_memory_without_weak_references_gives_its_bytes_back_when_freed():
    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False)
    malloc = guard.wrap(Memory, hand_out=lambda mem, reservation: Memory(mem.size, (mem, reservation)))
    a = malloc(3 * GiB)
    b = malloc(2 * GiB)
    assert guard.allocated == 5 * GiB
    with pytest.raises(Exception, match="refused"):
        malloc(1)
    del a
    gc.collect()
    assert guard.allocated == 2 * GiB
    del b
    gc.collect()
    assert guard.allocated == 0


def test_the_managed_pool_needs_a_guard():
    with pytest.raises(ValueError, match="ManagedGuard"):
        managed.install_cupy_allocator(SimpleNamespace(), "managed_pool", None)
    with pytest.raises(ValueError, match="known: device_pool"):
        managed.install_cupy_allocator(SimpleNamespace(), "pinned", None)


def test_no_gpu_is_a_skip_with_its_reason():
    for case, params in [("unified", dict(allocator="managed_pool", placement="fault", pattern="stream", fraction=0.1)),
                         ("out_of_core", dict(pattern="stream", fraction=0.1, budget="card")),
                         ("unified_seed", dict(fraction=0.4))]:
        rec = execute(case, params)
        assert rec.outcome == SKIPPED and "needs 1 GPU" in rec.reason


def test_a_gpu_without_cupy_is_a_skip_that_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy fails, installed or not
    monkeypatch.setattr(requirements, "discover", lambda: fake_devices())
    with pytest.raises(Skip, match=r"cupy is not installed.*pip install 'oombench\[cupy\]'"):
        requirements.need_cupy()


def test_placements_other_than_resident_are_for_managed_memory_only():
    with pytest.raises(Skip, match="is for managed memory"):
        unified._guard_for("device_pool", "fault", 0.1, GiB, fake_devices())
    assert unified._guard_for("async_pool", "resident", 1.5, GiB, fake_devices()) is None
