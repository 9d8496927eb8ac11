import json

from harness.measure.instruments.environment import Environment, snapshot
from harness.measure.records.record import Record
from harness.measure.records.store import RecordStore, load_file, write_records
from harness.measure.instruments.timing import Timing

from conftest import fake_devices


def sample_record(devices=None):
    env = snapshot(devices or fake_devices(count=2), shims=("numpy.sctypes",))
    return Record(case="ceilings", params={"probe": "device_copy"}, outcome="ok", environment=env,
                  timing=Timing(1e-3, 0.9e-3, 1.1e-3, 0.8e-3, 1.3e-3, 50, 3), work={"bytes": 2**31},
                  memory={"device.used.gpu0": 5 * 2**30, "host.rss": 2**29}, check={"exact": True},
                  run_id="r1", commit="abc")


def test_record_round_trips_with_its_environment():
    rec = sample_record()
    back = Record.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back == rec
    assert back.environment.devices.gpus[1].name == "NVIDIA H200"
    assert back.environment.devices.peer == ((True, True), (True, True))
    assert back.environment.shims == ("numpy.sctypes",)
    assert back.rate("bytes") == 2**31 / 1e-3


def test_environment_names_python_libraries_and_gpus():
    env = snapshot(fake_devices())
    assert env.python and env.num_cpu >= 1
    assert "numpy" in env.libraries and "nvidia-ml-py" in env.libraries
    assert env.devices.driver == "580.159.04" and env.devices.cuda_driver == "13.0"
    assert Environment.from_dict(json.loads(json.dumps(env.to_dict()))) == env


def test_appended_records_survive_an_interrupted_write(tmp_path):
    path = tmp_path / "m" / "run.jsonl"
    a = sample_record()
    RecordStore.append(path, a)
    RecordStore.append(path, a)
    with open(path, "a") as f:  # a run killed in the middle of a line
        f.write('{"case": "ceilings", "par')
    loaded = load_file(path)
    assert loaded.records == [a, a]
    assert loaded.problems == [f"{path}:3: not JSON (Unterminated string starting at)"]  # reported, not dropped
    RecordStore.append(path, a)  # the next append repairs the torn line first
    assert load_file(path).records == [a, a, a] and not load_file(path).problems
    assert (tmp_path / "m" / "run.jsonl.torn").read_text() == '{"case": "ceilings", "par\n'
    assert load_file(tmp_path / "missing.jsonl").records == []


def test_records_written_whole_read_back_as_appended_ones(tmp_path):
    a, b = sample_record(), sample_record()
    b = Record.from_dict({**b.to_dict(), "run_id": "r2"})
    appended, whole = tmp_path / "appended.jsonl", tmp_path / "whole.jsonl"
    RecordStore.append(appended, a)
    RecordStore.append(appended, b)
    whole.write_text("left over\n")
    write_records(whole, [a, b])  # replaces what was there
    assert whole.read_text() == appended.read_text() and load_file(whole).records == [a, b]
    write_records(whole, [])
    assert whole.read_text() == "" and load_file(whole).records == []


def test_device_bytes_is_the_cases_own_share_on_its_busiest_gpu():
    rec = sample_record()
    memory = {"device.used_before.gpu0": 600, "device.used.gpu0": 5600,
              "device.used_before.gpu1": 100, "device.used.gpu1": 7100, "host.rss": 10**9}
    assert Record.from_dict({**rec.to_dict(), "memory": memory}).device_bytes() == 7000
    assert Record.from_dict({**rec.to_dict(), "memory": {"host.rss": 1}}).device_bytes() is None


def test_invalid_lines_are_reported_with_file_and_line(tmp_path):
    path = tmp_path / "m" / "run.jsonl"
    good = sample_record().to_dict()
    lines = [good, {**good, "outcome": "great"}, {**good, "params": "n=1"}, [1, 2],
             {**good, "timing": {**good["timing"], "median_s": "fast"}}, good]
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\x00\x01garbage\n")
    loaded = load_file(path)
    assert len(loaded.records) == 2
    assert [p.split(": ")[0] for p in loaded.problems] == [f"{path}:{n}" for n in (2, 3, 4, 5, 7)]
    assert "outcome 'great' is not one of" in loaded.problems[0]


def test_every_committed_record_file_still_loads():
    """Records written by earlier commits stay readable: no line of results/ is invalid."""
    from harness.measure.records.store import RecordStore
    store = RecordStore.committed()
    loaded = store.load()
    assert len(store.files()) > 10 and len(loaded.records) > 100
    assert loaded.problems == []


def test_records_of_one_file_with_one_environment_share_it_and_each_other_environment_is_read_and_checked(tmp_path):
    a, b = sample_record(), sample_record(fake_devices(count=1))
    bad = {**a.to_dict(), "environment": {**a.to_dict()["environment"], "num_cpu": -1}}
    path = tmp_path / "m" / "run.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(x) for x in (a.to_dict(), a.to_dict(), b.to_dict(), bad, a.to_dict())) + "\n")
    loaded = load_file(path)
    assert loaded.records == [a, a, b, a]
    first, second, other, last = (r.environment for r in loaded.records)
    assert first is second and other is not first and other == b.environment
    assert [p.split(": ")[0] for p in loaded.problems] == [f"{path}:4"]  # a changed environment is checked
    assert "num_cpu" in loaded.problems[0]
