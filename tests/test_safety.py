import gc

import pytest

from harness.measure.guards.safety import OPT_IN_ENV, ManagedGuard, OversubscriptionRefused, opted_in

from conftest import fake_devices

GiB = 2**30


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    """Ledgers and locks of the fake GPUs in the test's own folder."""
    from harness.measure.guards.locks import LOCK_DIR_ENV
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    return tmp_path / "locks"


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


@pytest.mark.parametrize("value,expected", [("1", True), ("yes", True), ("TRUE", True),
                                            ("", False), ("0", False), ("no", False)])
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


# ---- the right card, and one cap for every process on it --------------------------------------

def four_gpus_nvml(monkeypatch):
    """pynvml of a box with four GPUs, GPU i having (i + 1) x 10 - i GiB free."""
    import sys

    from nvml_stub import StrictNvml
    monkeypatch.setitem(sys.modules, "pynvml", StrictNvml(["NVIDIA H100"] * 4))


@pytest.mark.parametrize("visible, free", [(None, 10), ("3", 37), ("3,0", 37), ("GPU-2", 28), ("1,2", 19)])
def test_the_cap_follows_the_cuda_device_the_memory_lands_on(monkeypatch, lock_dir, visible, free):
    """NVML ignores CUDA_VISIBLE_DEVICES: the cap was 0.9 of GPU 0's free memory while CuPy's
    device 0 was GPU 3."""
    four_gpus_nvml(monkeypatch)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    guard = ManagedGuard.for_gpu(0, fraction=0.9)
    assert guard.cap == int(0.9 * free * GiB)
    expected_uuid = {None: "GPU-0", "3": "GPU-3", "3,0": "GPU-3", "GPU-2": "GPU-2", "1,2": "GPU-1"}[visible]
    assert guard.ledger.path.name == f"gpu-{expected_uuid}.managed.json"


def test_a_hidden_gpu_is_a_skip_not_another_card(monkeypatch, lock_dir):
    from harness.measure.outcomes import Skip
    four_gpus_nvml(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(Skip, match="CUDA_VISIBLE_DEVICES"):
        ManagedGuard.for_gpu(0)


RESERVE = ("import sys, time; from harness.measure.guards.safety import ManagedGuard, ManagedLedger\n"
           "g = ManagedGuard(free_bytes=int(sys.argv[2]), fraction=0.9, allow_oversubscription=False,"
           " ledger=ManagedLedger(sys.argv[1]))\n"
           "g.reserve(int(sys.argv[3])); print('reserved', flush=True); time.sleep(60)\n")


def test_two_processes_on_one_gpu_cannot_together_pass_the_cap(tmp_path, monkeypatch):
    """The cap was a snapshot per process: two runs on one card could each take 0.9 of it."""
    import subprocess
    import sys

    from harness.measure.guards.safety import ManagedLedger
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    path = tmp_path / "gpu-X.managed.json"
    other = subprocess.Popen([sys.executable, "-c", RESERVE, str(path), str(100 * GiB), str(50 * GiB)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "reserved"
        # This process's snapshot sees less free (the other's pages are resident): the ledger keeps
        # the baseline of the first reservation, so the two together stay under 0.9 of it.
        guard = ManagedGuard(free_bytes=50 * GiB, fraction=0.9, allow_oversubscription=False,
                             ledger=ManagedLedger(path))
        with pytest.raises(OversubscriptionRefused, match="53.7 GB reserved by other processes"):
            guard.reserve(41 * GiB)
        guard.reserve(40 * GiB)
        assert ManagedLedger(path).held() == 90 * GiB
        guard.release(40 * GiB)
        assert ManagedLedger(path).held() == 50 * GiB
    finally:
        other.kill()
        other.wait()
    guard.reserve(45 * GiB)  # a dead holder's reservation no longer counts
    assert ManagedLedger(path).held() == 45 * GiB


def test_a_guard_collected_unreleased_leaves_nothing_in_the_ledger(tmp_path):
    from harness.measure.guards.safety import ManagedLedger
    ledger = ManagedLedger(tmp_path / "gpu-Y.managed.json")
    guard = ManagedGuard(free_bytes=10 * GiB, allow_oversubscription=False, ledger=ledger)
    guard.reserve(GiB)
    assert ledger.held() == GiB
    del guard
    gc.collect()
    assert ledger.held() == 0


# ---- each rule of the guard, to the byte -------------------------------------------------------

def ledger_file(path):
    import json
    return json.loads(path.read_text())


def test_a_request_at_the_cap_less_what_is_held_fits_and_a_byte_more_does_not():
    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False)
    guard.reserve(2 * GiB)
    assert guard.fits(3 * GiB) and not guard.fits(3 * GiB + 1)
    guard.check(0)  # nothing asked: always admitted
    with pytest.raises(ValueError, match="allocation size must be >= 0, got -1"):
        guard.check(-1)


def test_the_refusal_names_the_request_what_is_held_the_cap_and_the_card():
    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False, gpu=3)
    guard.reserve(2 * GiB)
    with pytest.raises(OversubscriptionRefused) as e:
        guard.check(4 * GiB)
    assert str(e.value).startswith("managed allocation of 4.29 GB refused: with 2.15 GB already allocated it "
                                   "would pass the cap of 5.37 GB (0.50 of the 10.7 GB free on GPU 3).")


@pytest.mark.parametrize("free, says", [(0, "free memory must be positive, got 0"),
                                        (-1, "free memory must be positive, got -1")])
def test_a_guard_of_no_free_memory_is_refused_by_name(free, says):
    with pytest.raises(ValueError, match=says):
        ManagedGuard(free_bytes=free)
    assert ManagedGuard(free_bytes=1).cap == 0


def test_a_cap_fraction_out_of_range_is_refused_by_name():
    with pytest.raises(ValueError, match=r"cap fraction must be between 0 and 1 \(exclusive\), got 1.5"):
        ManagedGuard(free_bytes=GiB, fraction=1.5)


def test_a_check_counts_the_other_guards_on_the_card_and_reserves_nothing(tmp_path):
    from harness.measure.guards.safety import ManagedLedger
    ledger = ManagedLedger(tmp_path / "gpu-Z.managed.json")
    first = ManagedGuard(free_bytes=100 * GiB, fraction=0.9, allow_oversubscription=False, ledger=ledger)
    first.reserve(50 * GiB)
    # Another guard sees less free (the first one's pages are resident): the card's baseline holds.
    second = ManagedGuard(free_bytes=50 * GiB, fraction=0.9, allow_oversubscription=False, ledger=ledger)
    second.reserve(GiB)
    second.check(39 * GiB)
    with pytest.raises(OversubscriptionRefused, match="53.7 GB reserved by other processes"):
        second.check(39 * GiB + 1)
    assert ledger.held() == 51 * GiB and second.allocated == GiB
    assert (tmp_path / "gpu-Z.managed.json.lock").exists()  # the lock every process takes


def test_a_check_alone_on_the_card_reads_its_own_free_memory(tmp_path):
    from harness.measure.guards.safety import ManagedLedger
    ledger = ManagedLedger(tmp_path / "gpu-Z.managed.json")
    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False, ledger=ledger)
    guard.check(5 * GiB)
    with pytest.raises(OversubscriptionRefused):
        guard.check(5 * GiB + 1)
    assert ledger.held() == 0 and ledger_file(ledger.path)["entries"] == []


def test_a_release_keeps_the_card_s_baseline_and_the_rest_of_the_reservation(tmp_path):
    from harness.measure.guards.safety import ManagedLedger
    ledger = ManagedLedger(tmp_path / "gpu-Z.managed.json")
    first = ManagedGuard(free_bytes=100 * GiB, fraction=0.9, allow_oversubscription=False, ledger=ledger)
    first.reserve(30 * GiB)
    first.release(20 * GiB)
    assert ledger.held() == 10 * GiB and ledger_file(ledger.path)["free"] == 100 * GiB
    second = ManagedGuard(free_bytes=50 * GiB, fraction=0.9, allow_oversubscription=False, ledger=ledger)
    second.reserve(80 * GiB)  # 0.9 of the first baseline, less the 10 GiB still held
    with pytest.raises(OversubscriptionRefused):
        second.reserve(1)
    first.release(10 * GiB)
    second.release(80 * GiB)
    assert ledger_file(ledger.path)["entries"] == []  # a guard holding nothing leaves no entry


def test_a_baseline_left_by_dead_processes_is_not_this_card_s_now(tmp_path):
    import json

    from harness.measure.guards.safety import ManagedLedger
    path = tmp_path / "gpu-Z.managed.json"
    path.write_text(json.dumps({"free": 100 * GiB, "entries": [{"pid": 2**22 + 7, "started": 1.0, "guard": 1,
                                                                 "bytes": 60 * GiB}]}))
    guard = ManagedGuard(free_bytes=50 * GiB, fraction=0.9, allow_oversubscription=False, ledger=ManagedLedger(path))
    guard.reserve(45 * GiB)
    with pytest.raises(OversubscriptionRefused):
        guard.reserve(1)
    assert ManagedLedger(path).held() == 45 * GiB


@pytest.mark.parametrize("text", ["not json", '{"free": 5}', "{}", "[1, 2]"])
def test_a_ledger_that_says_nothing_holds_nothing_and_is_written_anew(tmp_path, text):
    from harness.measure.guards.safety import ManagedLedger
    path = tmp_path / "gpu-Z.managed.json"
    path.write_text(text)
    assert ManagedLedger(path).held() == 0
    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False, ledger=ManagedLedger(path))
    guard.reserve(5 * GiB)
    assert ledger_file(path)["free"] == 10 * GiB and ManagedLedger(path).held() == 5 * GiB


def test_memory_that_takes_no_weak_reference_is_released_when_what_was_handed_out_goes():
    class Handed:
        def __init__(self, mem, reservation):
            self.mem, self.reservation = mem, reservation

    guard = ManagedGuard(free_bytes=10 * GiB, fraction=0.5, allow_oversubscription=False)
    alloc = guard.wrap(lambda n: ("memory of", n), hand_out=Handed)  # a tuple takes no weak reference
    handed = alloc(2 * GiB)
    assert handed.mem == ("memory of", 2 * GiB) and guard.allocated == 2 * GiB
    del handed
    gc.collect()
    assert guard.allocated == 0


def test_the_guard_of_a_card_defaults_to_cuda_device_0_and_keeps_the_one_asked():
    from harness.measure.outcomes import Skip
    two = fake_devices(count=2, free=80 * GiB)
    assert ManagedGuard.for_gpu(devices=two).gpu == 0
    assert ManagedGuard.for_gpu(1, devices=two).gpu == 1
    assert ManagedGuard.for_gpu(devices=fake_devices(count=1)).gpu == 0
    with pytest.raises(Skip, match=r"needs CUDA device 1, and this process sees 1 GPU\(s\) \(too few, or "
                                   r"CUDA_VISIBLE_DEVICES hides it\)"):
        ManagedGuard.for_gpu(1, devices=fake_devices(count=1))


@pytest.mark.parametrize("value", ["on", " On ", "true"])
def test_the_opt_in_is_read_from_the_environment_given(value, monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    assert opted_in({OPT_IN_ENV: value}) is True
    monkeypatch.setenv(OPT_IN_ENV, "1")
    assert opted_in({}) is False
