"""Chainer 7.8.1 through the compatibility shims, its workloads on the CPU, and the PyTorch GCN
that must agree with it."""
import subprocess
import sys
import types

import numpy as np
import pytest

from harness.workloads.chainer import compat_chainer
from harness.measure.guards import requirements
from harness.measure.instruments import shims
from harness.cases.chainer_cnn import cnn_workload
from harness.cases.chainer_gcn import gcn_workload
from harness.cases.chainer_mlp import mlp_workload
from harness.cases.torch_gcn import torch_gcn_workload
from harness.measure.instruments.environment import snapshot
from harness.workloads.chainer.graphs import gcn_reference_rows, gcn_weights, planted_partition
from harness.measure.outcomes import CheckFailed, Skip
from harness.drive.runner import execute

from conftest import fake_devices

# Chainer (and the NumPy shims it needs) is imported when this module's first test runs, not when
# pytest collects it: every xdist worker collects every module, and only those that run its tests
# need Chainer.
chainer = nets = None


@pytest.fixture(scope="module", autouse=True)
def chainer_imported():
    global chainer, nets
    chainer, _ = compat_chainer.import_chainer()
    # after Chainer's import through the shims
    from harness.workloads.chainer import chainer_nets as nets


def train(workload, steps=12):
    for _ in range(steps):
        workload.step()
    return workload.check()


# ---- the shims --------------------------------------------------------------------------------

def test_chainer_imports_and_trains_in_a_fresh_process_on_numpy_2():
    code = ("import sys, numpy; from harness.workloads.chainer.compat_chainer import import_chainer;"
            "c, applied = import_chainer();"
            "from harness.cases.chainer_mlp import mlp_workload;"
            "w = mlp_workload('cpu', 'numpy', 64, sizes=(16, 32, 4));"
            "[w.step() for _ in range(12)]; w.check();"
            "print(numpy.__version__, c.__version__, ','.join(applied), 'pkg_resources' in sys.modules)")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    numpy_version, chainer_version, applied, leftover = done.stdout.split()
    assert int(numpy_version.split(".")[0]) >= 2 and chainer_version == "7.8.1"
    assert "numpy.sctypes" in applied.split(",")  # NumPy 2 has none
    assert leftover == "False"  # a stand-in never outlives Chainer's import


def test_sctypes_is_restored_only_where_missing(monkeypatch):
    monkeypatch.delitem(vars(np), "sctypes", raising=False)
    assert compat_chainer.restore_sctypes(np)
    assert np.sctypes["int"] == [np.int8, np.int16, np.int32, np.int64] and np.float32 in np.sctypes["float"]
    mine = {"int": []}
    monkeypatch.setitem(vars(np), "sctypes", mine)
    assert not compat_chainer.restore_sctypes(np) and np.sctypes is mine


def test_import_time_modules_stand_in_only_where_missing_and_leave_no_trace(monkeypatch):
    real = types.ModuleType("pkg_resources")
    monkeypatch.setitem(sys.modules, "pkg_resources", real)
    monkeypatch.setitem(sys.modules, "numpy.distutils", None)  # what Python 3.12 looks like: not importable
    attr_before = vars(np).get("distutils")
    with compat_chainer.import_time_modules(np) as stood_in:
        assert stood_in == ["numpy.distutils"]
        assert sys.modules["pkg_resources"] is real
        assert np.distutils.system_info.get_info("blas_opt") == {}
    assert sys.modules["numpy.distutils"] is None and vars(np).get("distutils") is attr_before

    monkeypatch.setitem(sys.modules, "pkg_resources", None)
    with compat_chainer.import_time_modules(np) as stood_in:
        assert "pkg_resources" in stood_in
        pr = sys.modules["pkg_resources"]
        assert pr.require("numpy>=1.0")[0].version == np.__version__
        with pytest.raises(pr.VersionConflict):
            pr.require("numpy<1")
        with pytest.raises(pr.DistributionNotFound):
            pr.require("no-such-distribution-xyz>=1")
    assert sys.modules["pkg_resources"] is None


def test_applied_shims_are_in_the_records_environment(monkeypatch):
    monkeypatch.setattr(shims, "_APPLIED", [])
    assert snapshot(fake_devices()).shims == ()
    monkeypatch.delitem(vars(np), "sctypes", raising=False)
    _, applied = compat_chainer.import_chainer()
    assert applied == ["numpy.sctypes"]
    assert snapshot(fake_devices()).shims == ("numpy.sctypes",)


# ---- the workloads ---------------------------------------------------------------------------

def tiny_gcn(**kw):
    return gcn_workload("cpu", "numpy", nodes=400, features=16, hidden=8, classes=4, **kw)


def test_gcn_learns_and_matches_its_float64_reference():
    result = train(tiny_gcn())
    assert result["loss_last"] < 0.95 * result["loss_first"]
    assert result["rel_err"] < 1e-5


def test_a_step_that_does_not_learn_fails_the_check(monkeypatch):
    monkeypatch.setattr(chainer.optimizers.Adam, "update", lambda self, *a, **k: None)
    with pytest.raises(CheckFailed, match="did not learn"):
        train(tiny_gcn())


def test_gcn_gradient_matches_a_numerical_gradient():
    # Central differences in float64 on a 12-node graph. (chainer.gradient_check would need
    # chainer.testing, which imports pkg_resources at its own import.)
    graph = planted_partition(12, 5, 3, degree=4)
    with chainer.using_config("dtype", np.float64):
        model = nets.GCN(*(w.astype(np.float64) for w in gcn_weights(5, 4, 3)))
    adj = chainer.utils.CooMatrix(graph.value.astype(np.float64), graph.row, graph.col, (12, 12), order="C")
    x = graph.features.astype(np.float64)
    gy = np.random.default_rng(3).standard_normal((12, 3))
    loss = lambda: chainer.functions.sum(model(adj, x) * gy)
    model.cleargrads()
    loss().backward()
    eps = 1e-6
    for param in (model.l1.W, model.l2.W):
        numerical = np.zeros_like(param.array)
        for i in np.ndindex(param.shape):
            keep = param.array[i]
            param.array[i] = keep + eps
            up = float(loss().array)
            param.array[i] = keep - eps
            numerical[i] = (up - float(loss().array)) / (2 * eps)
            param.array[i] = keep
        np.testing.assert_allclose(param.grad, numerical, rtol=1e-5, atol=1e-7)


def test_chainer_and_torch_gcns_agree_on_the_same_weights():
    torch = pytest.importorskip("torch")
    from harness.workloads.chainer import torch_gcn as tg
    graph = planted_partition(300, 16, 4)
    w1, w2 = gcn_weights(16, 8, 4)
    adj = nets.coo_on(chainer.get_device("@numpy"), graph)
    ours = nets.GCN(w1, w2)(adj, graph.features).array
    theirs = tg.GCN(w1, w2)(tg.adjacency(graph, "cpu"), torch.from_numpy(graph.features)).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    rows = np.arange(0, 300, 7)
    np.testing.assert_allclose(ours[rows], gcn_reference_rows(graph, w1, w2, rows), rtol=1e-4, atol=1e-6)
    # and trained from there, the first steps' losses agree as well
    a = gcn_workload("cpu", "numpy", nodes=300, features=16, hidden=8, classes=4)
    b = torch_gcn_workload("cpu", nodes=300, features=16, hidden=8, classes=4)
    ra, rb = train(a), train(b)
    assert ra["loss_first"] == pytest.approx(rb["loss_first"], rel=1e-5)
    assert ra["loss_last"] == pytest.approx(rb["loss_last"], rel=1e-3)


def test_mlp_and_cnn_learn_on_the_cpu():
    assert train(mlp_workload("cpu", "numpy", batch=64, sizes=(16, 32, 4)))["steps"] == 12
    assert train(cnn_workload("cpu", "numpy", batch=16, side=8))["steps"] == 12


def test_the_benchmarked_mlp_learns_past_its_smallest_batch():
    # At the GPU sweep's second batch and full width: the learning rate that worked at 256
    # (memorised) made the loss climb here, on the H200 and on the CPU alike. Adam's first updates
    # move every weight by about the rate, so a rate too large for the width shows at once: from
    # half again the case's rate up, the loss climbs on the first update and is not yet back under
    # nine tenths of the first by the fourth step, which the case's rate reaches. A step at this
    # width and batch is the CPU's longest, so the test takes no more of them than that.
    check = train(mlp_workload("cpu", "numpy", batch=4096, repeat=10), steps=4)
    assert check["loss_last"] < 0.9 * check["loss_first"]


# ---- pools -----------------------------------------------------------------------------------

GCN_GPU = {"device": "cuda", "nodes": 2**14, "features": 128, "budget": "card"}


def test_managed_pool_without_cupy_is_skipped_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # not importable, whatever this box has
    # A box with a GPU, so that CuPy's absence is the reason (without a GPU, that comes first).
    monkeypatch.setattr(requirements, "discover", lambda: fake_devices(count=1))
    rec = execute("chainer_gcn", dict(GCN_GPU, pool="managed_pool"), devices=fake_devices(count=0))
    assert rec.outcome == "skipped"
    assert "cupy is not installed" in rec.reason and "pip install 'oombench[cupy]'" in rec.reason


def test_managed_pool_with_cupy_but_no_gpu_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    with pytest.raises(Skip, match="needs 1 GPU"):
        gcn_workload("cuda", "managed_pool", nodes=400, features=16)


@pytest.mark.parametrize("device, pool, hint", [("cpu", "managed_pool", "device=cuda"),
                                                 ("cpu", "device_pool", "device=cuda"),
                                                 ("cuda", "numpy", "pool=device_pool")])
def test_a_pool_on_the_wrong_device_is_skipped_with_the_pairing_that_works(device, pool, hint):
    with pytest.raises(Skip, match=hint):
        gcn_workload(device, pool, nodes=400, features=16)
