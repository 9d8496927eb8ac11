"""asv's own site labels machines and environments short: its selectors and legends are built
from the params in index.json's graph_param_list, so those values are checked here, on the site
published from a frozen copy of results (tests/data/results) and from a box that ran the suite
under two interpreters. The results folder published from is never written to."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from harness.drive.asv import asv_labels, asv_site
from harness.measure.instruments.environment import Environment
from harness.measure.instruments.machine import gpu_label, machine_info
from conftest import FROZEN, fake_devices

REPO = Path(__file__).resolve().parents[1]
RESULTS = FROZEN
# The boxes of the frozen copy with the labels their pages show; any other box is checked by rule.
FIRST_BOXES = {"cpu-intel-r-xeon-r-processor": "none", "nvidia-h100-80gb-hbm3-x1": "H100 80GB HBM3 x1",
               "nvidia-h200-x1": "H200 x1"}
LONGEST = 44  # a CPU box's machine name: "cpu-" and 40 characters of its model (machine.py)


def fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def labels(index: dict) -> list[tuple[str, str]]:
    """(param, value) of every value asv shows in a selector or a legend."""
    shown = [(k, v) for k, values in index["params"].items() for v in values]
    return shown + [(k, v) for params in index["graph_param_list"] for k, v in params.items()]


def assert_short(index: dict) -> None:
    for key, value in labels(index):
        if value is not None:
            assert len(value) <= LONGEST and "NVML" not in value, (key, value)
            # no path in a label; a branch is named as git names it ("feature/x" included)
            assert key == "branch" or "/" not in value, (key, value)


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """asv's site of the frozen results, and that folder before and after publishing it."""
    site = tmp_path_factory.mktemp("asv") / "html"
    before = fingerprint(RESULTS)
    assert asv_site.publish(REPO, site, RESULTS) == 0
    return json.loads((site / "index.json").read_text()), before, fingerprint(RESULTS)


def test_the_frozen_results_are_published_with_short_distinct_labels(frozen):
    index, _, _ = frozen
    assert_short(index)
    # Every machine's label of the results published
    assert set(index["params"]["gpu"]) == set(frozen_labels().values()) >= set(FIRST_BOXES.values())
    assert all(not v.startswith("/") for v in index["params"]["python"])
    # one line per machine and branch: nothing that differed was merged away
    lines = {json.dumps(p, sort_keys=True) for p in index["graph_param_list"]}
    assert len(lines) == len(index["graph_param_list"]) >= 2
    assert {p["machine"] for p in index["graph_param_list"]} >= {"nvidia-h100-80gb-hbm3-x1", "nvidia-h200-x1"}


def test_publishing_leaves_the_results_as_they_were_and_the_tooltips_whole(frozen):
    index, before, after = frozen
    assert before == after
    for machine_json in RESULTS.glob("*/machine.json"):
        full = json.loads(machine_json.read_text())
        assert index["machines"][full["machine"]] == full  # the machine's tooltip: every field
    assert "NVML" in json.loads((RESULTS / "cpu-intel-r-xeon-r-processor" / "machine.json").read_text())["gpu"]


def frozen_labels() -> dict[str, str]:
    return {json.loads(p.read_text())["machine"]: gpu_label(json.loads(p.read_text()))
            for p in RESULTS.glob("*/machine.json")}


def test_gpu_labels_of_the_frozen_machines():
    got = frozen_labels()
    assert {m: got.get(m) for m in FIRST_BOXES} == FIRST_BOXES
    # Any other box, by rule: a GPU box's label ends in its GPU count, as its name does, and no two
    # GPU boxes share one (asv's selector would merge them).
    gpu_boxes = {m: label for m, label in got.items() if m.startswith("nvidia-")}
    assert all(label.endswith(" x" + m.rsplit("-x", 1)[1]) for m, label in gpu_boxes.items()), gpu_boxes
    assert len(set(gpu_boxes.values())) == len(gpu_boxes)


def test_the_gpu_label_reads_back_what_machine_info_writes(no_gpu):
    def env(devices):
        return Environment(python="3.12.3", platform="Linux 6 x86_64", cpu="Xeon", num_cpu=16, libraries={},
                           devices=devices)
    assert gpu_label(machine_info(env(fake_devices("NVIDIA H200", 2)))) == "H200 x2"
    assert gpu_label(machine_info(env(no_gpu))) == "none"


TWO = {"/x/stack-cupy13/bin/python": "13.6.0", "/usr/bin/python3": "14.2.0"}


@pytest.fixture(scope="module")
def two_interpreters(tmp_path_factory):
    """A results folder of one H200 box that ran the suite at one commit under two interpreters,
    CuPy 13.6 and CuPy 14.2 (as `harness run --python /x/stack-cupy13/bin/python --python python3`):
    the frozen H200 result and record, once per interpreter."""
    root = tmp_path_factory.mktemp("two") / "results"
    box = root / "nvidia-h200-x1"
    box.mkdir(parents=True)
    shutil.copy2(RESULTS / "benchmarks.json", root)
    shutil.copy2(RESULTS / box.name / "machine.json", box)
    result = json.loads(next((RESULTS / box.name).glob("bfa680ee-*.json")).read_text())
    record = json.loads((RESULTS / "records" / box.name / "bfa680ee-20261124T005204-346ecc.jsonl")
                        .read_text().splitlines()[0])
    lines = []
    for python, cupy in TWO.items():
        env_name = "existing-py" + python.replace("/", "_")
        params = result["params"] | {"python": python}
        (box / f"bfa680ee-{env_name}.json").write_text(json.dumps(result | {"env_name": env_name, "python": python,
                                                                           "params": params}))
        env = record["environment"] | {"executable": python,
                                       "libraries": record["environment"]["libraries"] | {"cupy-cuda13x": cupy}}
        lines.append(json.dumps(record | {"environment": env}))
    (root / "records" / box.name).mkdir(parents=True)
    (root / "records" / box.name / "bfa680ee-20261124T005204-aaaaaa.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_two_interpreters_on_one_box_are_labelled_by_the_library_that_differs(two_interpreters, tmp_path):
    before = fingerprint(two_interpreters)
    assert asv_site.publish(REPO, tmp_path / "html", two_interpreters) == 0
    assert fingerprint(two_interpreters) == before
    index = json.loads((tmp_path / "html" / "index.json").read_text())
    assert_short(index)
    lines = [p for p in index["graph_param_list"] if p["branch"] == "main"]
    assert sorted(p["cupy-cuda13x"] for p in lines) == sorted(TWO.values())
    differ = {k for k in lines[0] if lines[0][k] != lines[1][k]}
    assert differ == {"cupy-cuda13x"}  # asv's legend shows only this: "cupy-cuda13x-13.6.0"


def test_two_interpreters_with_the_same_libraries_are_told_apart_by_name():
    result = {"params": {"machine": "m", "gpu": "no GPU (x)", "python": ""}, "commit_hash": "c", "requirements": {}}
    env = Environment(python="3.12.3", platform="", cpu="", num_cpu=1, libraries={"numpy": "2.5.2"},
                      devices=fake_devices(), executable="")
    results, envs = [], {("m", "c"): []}
    for python in TWO:
        results.append(result | {"env_name": python, "params": result["params"] | {"python": python}})
        envs[("m", "c")].append((1.0, Environment(**(env.__dict__ | {"executable": python}))))
    first, second = asv_labels.machine_params(results, envs)
    assert first != second
    assert {first["interpreter"], second["interpreter"]} == {"x/stack-cupy13/bin/python", "/usr/bin/python3"}
    assert first["numpy"] == second["numpy"] == "2.5.2" and first["gpu"] == "none"


def test_an_interpreter_without_records_gets_its_short_name():
    result = {"params": {"machine": "m", "python": "/opt/torch/.venv/bin/python3"}, "commit_hash": "c",
              "env_name": "e"}
    assert asv_labels.machine_params([result], {}) == [{"machine": "m", "python": "torch/.venv/bin/python3"}]


def test_a_result_whose_records_did_not_come_back_takes_its_interpreters_latest_environment():
    result = {"params": {"machine": "m", "python": "/opt/torch/.venv/bin/python3"}, "commit_hash": "new",
              "env_name": "e"}
    env = Environment(python="3.12.3", platform="", cpu="", num_cpu=1, libraries={"numpy": "2.5.2"},
                      devices=fake_devices(), executable="/opt/torch/.venv/bin/python3")
    other = Environment(**(env.__dict__ | {"executable": "/x/stack/bin/python", "libraries": {"numpy": "2.0.2"}}))
    envs = {("m", "old"): [(1.0, env), (2.0, other)], ("elsewhere", "new"): [(3.0, other)]}
    assert asv_labels.machine_params([result], envs) == [{"machine": "m", "python": "3.12.3", "numpy": "2.5.2"}]
