"""Each access pattern's result against its reference, under NumPy."""
import numpy as np
import pytest

from harness.workloads.cupy import kernels
from harness.measure.outcomes import CheckFailed

MiB = 2**20


def test_sum_mod_is_the_closed_form_of_the_loop():
    for n in (0, 1, 1020, 1021, 1022, 123457):
        for m in (7, 1019, 1021):
            assert kernels.sum_mod(n, m) == sum(i % m for i in range(n))


def test_fill_writes_every_element_across_uneven_chunks():
    a = np.full((7, 13), np.nan, dtype=np.float32)
    kernels.fill(a, np, lambda i: i % 5 - 2, chunk=10)
    assert np.array_equal(a.ravel(), np.arange(91) % 5 - 2)


@pytest.mark.parametrize("name", kernels.PATTERNS)
def test_each_pattern_matches_its_reference_after_a_step(name):
    builder = kernels.BUILDERS[name]
    pat = builder(np, 3 * MiB, k=64) if name == "matmul" else builder(np, 3 * MiB)
    pat.step()
    assert pat.check()["exact"] is True
    assert 0.9 * 3 * MiB <= pat.nbytes <= 3 * MiB
    assert all(any(a is b for b in pat.arrays) for a in pat.inputs)


@pytest.mark.parametrize("name", kernels.PATTERNS)
def test_a_pattern_whose_step_did_not_run_fails_its_check(name):
    pat = kernels.build(name, np, 1 * MiB)
    with pytest.raises(CheckFailed):
        pat.check()


def test_stream_check_finds_one_wrong_element():
    pat = kernels.stream(np, 3 * MiB)
    pat.step()
    pat.arrays[2][12345] += 1  # the output
    with pytest.raises(CheckFailed, match="sum"):
        pat.check()


def test_matmul_check_finds_a_wrong_row():
    pat = kernels.matmul(np, 3 * MiB, k=64)
    pat.step()
    c = pat.arrays[2]
    c[5] = c[6]  # sums may agree by luck; a wrong row may not
    c[6] = c[5] + 1
    with pytest.raises(CheckFailed):
        pat.check()


def test_work_counts_bytes_moved_and_flops():
    s = kernels.stream(np, 24 * 1000)
    assert s.work == {"bytes": 24 * 1000}
    r = kernels.reduce(np, 8 * 1000)
    assert r.work == {"bytes": 8 * 1000}
    m = kernels.matmul(np, 4 * 64 * 64 + 8 * 64 * 100, k=64)
    assert m.arrays[0].shape == (100, 64)
    assert m.work == {"flops": 2 * 100 * 64 * 64, "bytes": 4 * (2 * 100 * 64 + 64 * 64)}
    g = kernels.gather(np, 64 * 1000, count=100)
    assert g.work == {"bytes": 24 * 100} and g.arrays[0].size == (64 * 1000 - 1600) // 8
