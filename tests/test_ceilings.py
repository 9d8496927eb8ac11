import pytest

from harness.cases import ceilings
from harness.measure.outcomes import OK, CheckFailed
from harness.drive.runner import execute

from conftest import FROZEN


def run(workload):
    workload.step()
    return workload.check()


def test_the_pageable_sweep_declares_both_ends_of_each_copy_in_mib():
    from harness.cases import pageable
    assert pageable.CASE.declared_bytes(direction="h2d", size_mib=64) == 2 * 64 * 2**20
    assert pageable.CASE.declared_bytes(direction="d2h", size_mib=2048) == 2 * 2**31
    assert ceilings.LINK_BYTES == 2**30 and ceilings.DECLARED_BYTES["h2d_pinned"] == 2**31


def test_host_copy_is_checked_and_counts_read_plus_write():
    w = ceilings.host_copy(nbytes=4 * 2**20)
    assert w.work == {"bytes": 8 * 2**20}
    with pytest.raises(CheckFailed):  # before any step the destination is still poisoned
        w.check()
    assert run(w) == {"exact": True}


def test_cpu_matmul_matches_float64_and_counts_2n3_flops():
    w = ceilings.cpu_matmul(n=256)
    assert w.work == {"flops": 2 * 256**3}
    result = run(w)
    assert result["rel_err"] < ceilings.MATMUL_TOLERANCE["fp32"]


def test_matmul_check_rejects_a_wrong_product():
    w = ceilings.cpu_matmul(n=128)
    w.step()
    c = w.step.keywords["out"]
    c[0, 0] += 1.0
    with pytest.raises(CheckFailed, match="relative error"):
        w.check()


def test_check_fails_on_nan():
    with pytest.raises(CheckFailed):
        ceilings.checked("x", float("nan"), 1e-3)


def test_every_probe_has_a_builder_and_gpu_probes_declare_their_memory():
    assert set(ceilings.BUILDERS) == set(ceilings.PROBES)
    for probe in ceilings.GPU_PROBES + ceilings.MULTI_GPU_PROBES:
        assert ceilings.DECLARED_BYTES[probe] > 0


def test_the_duplex_probe_moves_two_bytes_in_per_byte_out_and_skips_without_a_gpu():
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    import torch
    if torch.cuda.is_available():
        w = ceilings.duplex(nbytes=8 * 2**20)
        assert w.work == {"bytes": 12 * 2**20, "h2d_bytes": 8 * 2**20, "d2h_bytes": 4 * 2**20}
        with pytest.raises(CheckFailed):  # both destinations start poisoned
            w.check()
        assert run(w) == {"exact": True}
    else:
        rec = execute("ceilings", {"probe": "duplex_pinned"})
        assert rec.outcome == "skipped" and "GPU" in rec.reason


def test_host_probes_run_through_the_runner(monkeypatch):
    monkeypatch.setitem(ceilings.BUILDERS, "host_copy", lambda: ceilings.host_copy(nbytes=8 * 2**20))
    rec = execute("ceilings", {"probe": "host_copy"})
    assert rec.outcome == OK and rec.check == {"exact": True}
    assert rec.rate("bytes") > 1e8  # any machine copies more than 100 MB/s
    assert rec.memory["host.rss"] > 16 * 2**20


# What each GPU probe holds while it runs, in bytes. cuBLAS takes its workspace (32 MiB on
# Hopper, CUBLAS_WORKSPACE_CONFIG's default) from PyTorch's allocator for matrix products.
CUBLAS_WORKSPACE = 32 * 2**20
OPERANDS = {"device_copy": 2 * ceilings.DEVICE_COPY_BYTES, "h2d_pinned": 2 * ceilings.LINK_BYTES,
            "d2h_pinned": ceilings.LINK_BYTES,
            **{f"matmul_{p}": 3 * ceilings.GPU_MATMUL_N**2 * size + CUBLAS_WORKSPACE
               for p, size in (("fp32", 4), ("tf32", 4), ("fp16", 2), ("bf16", 2))}}


def test_committed_ceiling_step_peaks_equal_their_operands():
    """Records whose memory covers the timed steps alone (schema 2): the allocator's peak is what
    the probe holds, within the allocator's 2 MiB rounding; set-up and check leave no trace."""
    from harness.measure.records.store import load_any
    recs = [r for r in load_any(FROZEN / "records").records
            if r.case == "ceilings" and r.ok and r.schema >= 2 and r.params["probe"] in OPERANDS]
    assert len(recs) >= 14, "the H100 and H200 ceilings at schema 2 should be committed"
    for r in recs:
        peak = r.memory["allocator.torch.max_allocated.cuda:0"]
        assert abs(peak - OPERANDS[r.params["probe"]]) <= 2 * 2**20, (r.params, r.commit, peak)


def test_the_context_probe_reads_each_stage_outside_the_allocators_pool(monkeypatch):
    """A fresh process's levels after CUDA starts and after cuBLAS loads, each less what the pool
    holds: NVML here lists no process, so each is the card's used memory less the level before."""
    import types

    from harness.cases import ceilings
    from test_budget import fake_nvml
    from conftest import fake_devices
    MiB = 2**20
    fake_nvml(monkeypatch, [1000 * MiB, 1500 * MiB, 1700 * MiB], None)  # before, after the context, after cuBLAS
    monkeypatch.setattr(ceilings, "need_gpus", lambda n: fake_devices())
    monkeypatch.setattr("harness.measure.guards.workingset.card", lambda devices: devices.gpus[0])
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(deviceSynchronize=lambda: None)))
    monkeypatch.setattr(ceilings, "need_cupy", lambda: cupy)
    monkeypatch.setattr(ceilings, "_cupy_stages", lambda module: iter([("cuda", lambda: 2 * MiB),
                                                                        ("cublas", lambda: 2 * MiB)]))
    made = ceilings.BUILDERS["context_cupy"]()
    assert made.memory == {"context.cuda": 498 * MiB, "context.cublas": 698 * MiB}
    assert made.check()["read"] == "device used less before"


def test_the_docs_table_each_gpus_context_from_its_records():
    from harness.report import specs
    from harness.report import model
    from harness.units import gb
    from test_chooser import record
    levels = {"context.cuda": 524_288_000, "context.cublas": 612_368_384, "context.cudnn": 700_448_768}
    rec = record("ceilings", {"probe": "context_torch"}, device=700_448_768, check={"read": "nvml process", **levels})
    torch_spec = next(s for s in specs.CONTEXT_SPECS if "context_torch" in s.command())
    text = torch_spec.render([model.Row("r-0", rec, "x", 1)])
    # written as bytes are, with no host-bound mark: the probe times no work
    assert all(gb(v) in text for v in levels.values()) and "†" not in text
    assert torch_spec.render([]) is None  # no record yet: the docs leave the section out (quiet)
