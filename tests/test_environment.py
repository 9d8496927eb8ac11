"""What a record says of where it was measured: the libraries' versions, the CUDA runtime each
imported framework was built with, the CPU's model, and a snapshot that reads back as it was
written. Versions and CUDA are part of a result's identity: a wrong one files a figure under a
stack that never ran it."""
import platform
import sys
import types
from importlib import metadata

import pytest

from harness.measure.instruments import environment as env
from harness.measure.instruments import host, shims

from conftest import fake_devices


def test_library_versions_are_the_installed_distributions_and_leave_out_the_rest():
    assert env.library_versions(("numpy", "oombench-no-such-distribution")) == {"numpy": metadata.version("numpy")}
    assert env.library_versions(()) == {}
    assert "torch" in env.LIBRARIES and "cupy-cuda13x" in env.LIBRARIES and "chainer" in env.LIBRARIES


def cupy_reporting(version=None, raises=False):
    def runtime_version():
        if raises:
            raise RuntimeError("cudaErrorNoDevice")
        return version
    return types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(runtimeGetVersion=runtime_version)))


@pytest.mark.parametrize("torch_cuda, cupy, expected", [
    ("13.0", cupy_reporting(12040), {"torch": "13.0", "cupy": "12.4"}),
    (None, cupy_reporting(13000), {"cupy": "13.0"}),  # a CPU build of torch says no CUDA
    ("12.8", cupy_reporting(raises=True), {"torch": "12.8"}),  # CuPy without a GPU to ask
    ("12.8", None, {"torch": "12.8"}),
])
def test_framework_cuda_is_read_from_each_framework_already_imported(monkeypatch, torch_cuda, cupy, expected):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace(cuda=torch_cuda)))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert env.framework_cuda() == expected


def test_framework_cuda_imports_nothing_and_takes_a_torch_without_cuda_as_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert env.framework_cuda() == {}
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace()))
    assert env.framework_cuda() == {}


def reading(text):
    def fake_open(path, *args, **kwargs):
        assert path == "/proc/cpuinfo"
        if text is None:
            raise OSError("no /proc here")
        return __import__("io").StringIO(text)
    return fake_open


def test_the_cpu_is_the_first_model_name_of_proc_cpuinfo(monkeypatch):
    monkeypatch.setattr(env, "open", reading("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                                             "model name\t: AMD EPYC 7B13 64-Core: rev B\nmodel name\t: other\n"),
                        raising=False)
    assert env.cpu_model() == "AMD EPYC 7B13 64-Core: rev B"


@pytest.mark.parametrize("text", [None, "processor\t: 0\n"])
def test_without_a_model_name_the_cpu_is_what_platform_says(monkeypatch, text):
    monkeypatch.setattr(env, "open", reading(text), raising=False)
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert env.cpu_model() == "aarch64"
    monkeypatch.setattr(platform, "processor", lambda: "x86_64 Family 6")
    assert env.cpu_model() == "x86_64 Family 6"


def test_a_snapshot_says_this_interpreter_box_and_devices_and_reads_back_as_written(monkeypatch):
    devices = fake_devices(count=2)
    monkeypatch.setattr(env, "cpu_model", lambda: "Test CPU 9000")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace(cuda="13.0")))
    monkeypatch.setitem(sys.modules, "cupy", None)
    snap = env.snapshot(devices, shims=("chainer_numpy2",))
    assert snap.python == platform.python_version() and snap.executable == sys.executable
    assert snap.platform == f"{platform.system()} {platform.release()} {platform.machine()}"
    assert snap.cpu == "Test CPU 9000" and snap.num_cpu >= 1 and snap.devices is devices
    assert snap.shims == ("chainer_numpy2",) and snap.host == host.identity(devices, "Test CPU 9000")
    assert snap.libraries == env.library_versions() and snap.framework_cuda == {"torch": "13.0"}
    d = snap.to_dict()
    assert d["shims"] == ["chainer_numpy2"] and d["devices"] == devices.to_dict() and d["cpu"] == "Test CPU 9000"
    assert env.Environment.from_dict(d) == snap


def test_a_box_whose_cpu_count_is_unknown_says_zero(monkeypatch):
    monkeypatch.setattr(env.os, "cpu_count", lambda: None)
    assert env.snapshot(fake_devices()).num_cpu == 0


def test_a_snapshot_discovers_the_devices_unless_given(monkeypatch):
    found = fake_devices(count=3)
    monkeypatch.setattr(env.devices_mod, "discover", lambda: found)
    assert env.snapshot().devices is found
    given = fake_devices(count=1)
    assert env.snapshot(given).devices is given


def test_a_snapshot_takes_the_shims_this_process_applied_unless_told(monkeypatch):
    monkeypatch.setattr(shims, "applied", lambda: ["numpy_aliases"])
    assert env.snapshot(fake_devices()).shims == ("numpy_aliases",)
    assert env.snapshot(fake_devices(), shims=()).shims == ()


def test_an_older_record_without_shims_host_or_interpreter_reads_with_their_defaults():
    d = env.snapshot(fake_devices()).to_dict()
    for key in ("shims", "host", "executable", "framework_cuda"):
        del d[key]
    old = env.Environment.from_dict(d)
    assert (old.shims, old.host, old.executable, old.framework_cuda) == ((), {}, "", {})
