"""Working sets sized from a card's memory, and what may and may not be asked of it."""
import pytest

from harness.cases.unified_seed import ARRAYS_AT_PEAK, size_for
from harness.measure.outcomes import Skip
from harness.measure.safety import OPT_IN_ENV
from harness.measure.workingset import HOST_MEMORY_ENV, guard_managed, host_available, need_host, working_set_bytes

from conftest import fake_devices

GiB = 2**30
H100, H200 = 81559 * 2**20, 143771 * 2**20


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    """The guards' ledgers in the test's own folder."""
    from harness.measure.locks import LOCK_DIR_ENV
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

    from harness.measure.devices import Devices
    from harness.measure.workingset import card_total
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
