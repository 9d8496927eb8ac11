import gc

import pytest

from harness.measure.safety import OPT_IN_ENV, ManagedGuard, OversubscriptionRefused, opted_in

from conftest import fake_devices

GiB = 2**30


def test_request_above_cap_is_refused_and_names_the_opt_in():
    guard = ManagedGuard(free_bytes=100 * GiB, fraction=0.9, allow_oversubscription=False)
    assert guard.cap == 90 * GiB
    with pytest.raises(OversubscriptionRefused) as e:
        guard.check(91 * GiB)
    assert OPT_IN_ENV in str(e.value) and "--allow-oversubscription" in str(e.value)


def test_request_at_cap_is_allowed():
    guard = ManagedGuard(free_bytes=100 * GiB, fraction=0.9, allow_oversubscription=False)
    guard.check(90 * GiB)


def test_cap_counts_what_is_already_allocated():
    guard = ManagedGuard(free_bytes=100 * GiB, fraction=0.5, allow_oversubscription=False)
    guard.reserve(30 * GiB)
    guard.reserve(20 * GiB)
    with pytest.raises(OversubscriptionRefused):
        guard.reserve(1)
    guard.release(20 * GiB)
    guard.reserve(10 * GiB)
    assert guard.allocated == 40 * GiB


def test_opt_in_allows_oversubscription():
    guard = ManagedGuard(free_bytes=100 * GiB, allow_oversubscription=True)
    guard.reserve(150 * GiB)
    assert guard.allocated == 150 * GiB


@pytest.mark.parametrize("value,expected", [("1", True), ("yes", True), ("TRUE", True), ("", False), ("0", False), ("no", False)])
def test_opt_in_comes_from_the_environment(value, expected, monkeypatch):
    monkeypatch.setenv(OPT_IN_ENV, value)
    assert opted_in() is expected
    assert ManagedGuard(free_bytes=GiB).allow_oversubscription is expected


def test_default_is_no_opt_in(monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    assert ManagedGuard(free_bytes=GiB).allow_oversubscription is False


class Block:
    def __init__(self, n):
        self.n = n


def test_wrapped_allocator_refuses_before_calling_malloc_and_releases_on_free():
    calls = []

    def malloc(n):
        calls.append(n)
        return Block(n)

    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False)
    alloc = guard.wrap(malloc)
    a = alloc(3 * GiB)
    with pytest.raises(OversubscriptionRefused):
        alloc(3 * GiB)
    assert calls == [3 * GiB]  # the refused request never reached the device
    del a
    gc.collect()
    assert guard.allocated == 0
    b = alloc(3 * GiB)
    assert guard.allocated == 3 * GiB and b.n == 3 * GiB


def test_failed_malloc_gives_its_bytes_back():
    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False)

    def malloc(n):
        raise MemoryError("out of memory")

    with pytest.raises(MemoryError):
        guard.wrap(malloc)(GiB)
    assert guard.allocated == 0


def test_guard_is_sized_from_the_gpus_free_memory():
    guard = ManagedGuard.for_gpu(0, fraction=0.5, devices=fake_devices(free=80 * GiB))
    assert guard.cap == 40 * GiB


def test_guard_without_a_gpu_skips_with_reason(no_gpu):
    from harness.measure.outcomes import Skip
    with pytest.raises(Skip, match="GPU"):
        ManagedGuard.for_gpu(0, devices=no_gpu)


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1])
def test_cap_must_stay_below_free_memory(fraction):
    with pytest.raises(ValueError):
        ManagedGuard(free_bytes=GiB, fraction=fraction)
