"""Working sets sized from a card's memory, and what may and may not be asked of it."""
import pytest

from harness.cases.unified_seed import ARRAYS_AT_PEAK, size_for
from harness.measure.outcomes import Skip
from harness.measure.guards.safety import OPT_IN_ENV
from harness.measure.guards.workingset import (HOST_MEMORY_ENV, guard_managed, host_available, need_host,
                                               working_set_bytes)

from conftest import fake_devices

GiB = 2**30
H100, H200 = 81559 * 2**20, 143771 * 2**20


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    """The guards' ledgers in the test's own folder."""
    from harness.measure.guards.locks import LOCK_DIR_ENV
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))


@pytest.mark.parametrize("total", [H100, H200])
def test_working_set_is_the_fraction_of_the_cards_total(total):
    assert working_set_bytes(0.25, total) == total // 4
    assert working_set_bytes(1.5, total) == int(1.5 * total)
    with pytest.raises(ValueError, match="above 0"):
        working_set_bytes(0, total)


@pytest.mark.parametrize("total", [H100, H200])
@pytest.mark.parametrize("fraction", [0.4, 0.8, 1.5])
def test_seed_size_is_the_largest_whose_five_arrays_fit_the_fraction(total, fraction):
    size = size_for(fraction, total)
    budget = working_set_bytes(fraction, total)
    assert ARRAYS_AT_PEAK * 8 * size**2 <= budget < ARRAYS_AT_PEAK * 8 * (size + 1) ** 2


@pytest.mark.parametrize("total", [H100, H200])
@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.25, 0.4, 0.8])
def test_the_default_sweep_stays_under_the_guards_cap(monkeypatch, total, fraction):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    # an idle card: its free memory less what the driver and a CUDA context take
    devices = fake_devices(total=total, free=total - GiB)
    guard = guard_managed(fraction, working_set_bytes(fraction, total), devices)
    assert working_set_bytes(fraction, total) <= guard.cap < devices.gpus[0].memory_free


def test_past_the_card_is_refused_without_the_opt_in_and_names_it(monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    with pytest.raises(Skip, match=f"oversubscribes.*{OPT_IN_ENV}=1 or --allow-oversubscription"):
        guard_managed(1.5, working_set_bytes(1.5, H200), fake_devices(total=H200))


def test_under_the_card_but_over_the_cap_is_refused_too(monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    busy = fake_devices(total=H200, free=H200 // 2)  # someone else holds half the card
    with pytest.raises(Skip, match="would pass the cap"):
        guard_managed(0.8, working_set_bytes(0.8, H200), busy)


def test_past_the_card_runs_with_the_opt_in(monkeypatch):
    monkeypatch.setenv(OPT_IN_ENV, "1")
    guard = guard_managed(1.5, working_set_bytes(1.5, H200), fake_devices(total=H200))
    assert guard.allow_oversubscription


def test_host_memory_limit_is_half_of_what_is_available():
    need_host(10 * GiB, "x", available=20 * GiB)
    with pytest.raises(Skip, match=f"needs 11.3 GB of host memory.*{HOST_MEMORY_ENV}"):
        need_host(int(10.5 * GiB), "x", available=20 * GiB)


def test_stated_host_memory_overrides_what_a_growing_vm_reports():
    assert host_available({HOST_MEMORY_ENV: "128"}) == 128 * 10**9
    with pytest.raises(ValueError, match="a number of GB"):
        host_available({HOST_MEMORY_ENV: "lots"})


def test_working_sets_and_the_guard_follow_cuda_visible_devices(monkeypatch, tmp_path):
    """Working-set sizes and the cap came from NVML's GPU 0 while the memory landed on CUDA's device 0."""
    from dataclasses import replace

    from harness.measure.instruments.devices import Devices
    from harness.measure.guards.workingset import card_total
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    box = fake_devices(count=4)
    box = Devices(gpus=tuple(replace(g, memory_total=(g.index + 1) * 40 * GiB, memory_free=(g.index + 1) * 30 * GiB)
                             for g in box.gpus))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert card_total(box) == 160 * GiB
    assert guard_managed(0.1, 16 * GiB, box).cap == int(0.9 * 120 * GiB)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    with pytest.raises(Skip, match="CUDA_VISIBLE_DEVICES"):
        card_total(box)


# ---- each limit, to its boundary and its words -------------------------------------------------

def test_a_working_set_of_the_whole_card_is_held_to_the_cap_not_refused_as_oversubscription():
    from harness.measure.guards.safety import ManagedGuard
    from harness.measure.guards.workingset import admit_managed
    admit_managed(1.0, GiB, ManagedGuard(free_bytes=2 * GiB, allow_oversubscription=False))


def test_the_oversubscription_refusal_names_the_set_the_card_and_the_opt_in():
    from harness.measure.guards.safety import ManagedGuard, OversubscriptionRefused
    from harness.measure.guards.workingset import admit_managed
    with pytest.raises(OversubscriptionRefused) as e:
        admit_managed(1.5, 3 * GiB, ManagedGuard(free_bytes=2 * GiB, allow_oversubscription=False, gpu=2))
    assert str(e.value) == (
        f"working set of 1.5 x the card's memory (3.22 GB) oversubscribes GPU 2: it runs only when you opt in, "
        f"on a machine you own ({OPT_IN_ENV}=1 or --allow-oversubscription); oversubscribing managed memory can "
        "hang a shared GPU for every process on the host")


def test_the_card_is_cuda_device_0_unless_another_is_named(monkeypatch):
    from dataclasses import replace

    from harness.measure.instruments.devices import Devices
    from harness.measure.guards.workingset import card, card_total
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    box = fake_devices(count=2)
    box = Devices(gpus=tuple(replace(g, memory_total=(g.index + 1) * 40 * GiB) for g in box.gpus))
    assert card(box).index == 0 and card_total(box) == 40 * GiB and card_total(box, 1) == 80 * GiB
    with pytest.raises(Skip, match=r"needs CUDA device 2, and this process sees 2 GPU\(s\) \(CUDA_VISIBLE_DEVICES "
                                   r"hides it\): run it on a GPU box"):
        card(box, 2)


def test_a_card_of_no_memory_is_refused_by_name():
    with pytest.raises(ValueError, match="card memory must be positive, got 0"):
        working_set_bytes(0.5, 0)
    assert working_set_bytes(0.5, 1) == 0


def test_a_set_that_starts_on_the_host_also_needs_half_the_host_free(monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    monkeypatch.setenv(HOST_MEMORY_ENV, "4")
    devices = fake_devices(total=H200)
    assert guard_managed(0.01, 2 * 10**9, devices, host_use="a managed set that starts on the host").cap > 0
    with pytest.raises(Skip) as e:
        guard_managed(0.01, 2 * 10**9 + 1, devices, host_use="a managed set that starts on the host")
    assert str(e.value).startswith("a managed set that starts on the host needs 2.00 GB of host memory; the limit "
                                   "is 0.5 of the 4.00 GB available (2.00 GB): run it on a host with more memory")
    guard_managed(0.01, 3 * 10**9, devices)  # resident on the card: no host memory asked


def test_host_memory_is_what_the_host_reports_where_none_is_stated(monkeypatch):
    import psutil
    monkeypatch.delenv(HOST_MEMORY_ENV, raising=False)
    reported = psutil.virtual_memory().available
    assert isinstance(host_available({}), int) and 0.5 < host_available({}) / reported < 2
    assert 0.5 < host_available() / reported < 2
    with pytest.raises(Skip, match="needs"):
        need_host(4 * reported, "x")  # no figure given: the host's own
