import pytest

from harness.measure.devices import GPU, Devices


@pytest.fixture
def no_gpu():
    return Devices(reason="no NVIDIA GPU visible (test)")


def fake_devices(name="NVIDIA H200", count=1, total=143771 * 2**20, free=None):
    gpus = tuple(GPU(index=i, name=name, memory_total=total, memory_free=free if free is not None else total - 2**30,
                     compute_capability="9.0", uuid=f"GPU-{i}") for i in range(count))
    peer = tuple(tuple(True for _ in range(count)) for _ in range(count))
    return Devices(gpus=gpus, driver="580.159.04", cuda_driver="13.0", peer=peer)


@pytest.fixture
def records_dir(tmp_path, monkeypatch):
    """Measurements filed under a temporary folder, never into the repository's results/."""
    monkeypatch.setenv("OOMBENCH_RECORDS", str(tmp_path / "records"))
    monkeypatch.delenv("OOMBENCH_RUN_ID", raising=False)
    monkeypatch.delenv("OOMBENCH_COMMIT", raising=False)
    monkeypatch.setenv("OOMBENCH_MACHINE", "test-machine")
    return tmp_path / "records"
