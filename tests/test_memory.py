import numpy as np

from harness.memory import PeakMemory

MiB = 2**20


def test_host_peak_sees_a_short_lived_allocation():
    with PeakMemory() as before:
        pass
    with PeakMemory(period_s=0.001) as peak:
        block = np.ones(300 * MiB, dtype=np.uint8)  # touched, so resident
        del block
    assert peak.bytes["host.rss"] >= before.bytes["host.rss"] + 250 * MiB
    assert peak.bytes["host.max_rss"] >= peak.bytes["host.rss"] - 16 * MiB


def test_only_the_levels_present_are_labelled():
    with PeakMemory() as peak:
        pass
    assert set(peak.bytes) == {"host.rss", "host.max_rss"}  # no GPU, no CuPy here
