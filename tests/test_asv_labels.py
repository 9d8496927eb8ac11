"""The short params asv's site is published from (harness.drive.asv.asv_labels), function by function:
which record's environment labels a result, how far a label grows before two interpreters of one
commit are told apart, and what of a results folder is copied as it is."""
import json
import os

import pytest

from conftest import fake_devices
from harness.drive.asv import asv_labels
from harness.measure.instruments.environment import Environment
from harness.measure.instruments.machine import machine_name
from harness.measure.records.record import Record
from harness.measure.records.store import RecordStore, write_records
from harness.report.model import VERSION_LIBS

TORCH = "/opt/torch/.venv/bin/python3"
STACK = "/x/stack-cupy13/bin/python"
COMPARED = sorted(VERSION_LIBS)[0]  # a library the pages compare, whatever their list holds


def env(executable: str = TORCH, python: str = "3.12.3", **libraries) -> Environment:
    return Environment(python=python, platform="Linux x86_64", cpu="Xeon", num_cpu=16,
                       libraries=libraries or {COMPARED: "1.0", "psutil": "7.0"}, devices=fake_devices(),
                       executable=executable)


def result(python: str = TORCH, commit: str = "c", env_name: str = "e", **extra) -> dict:
    return {"params": {"machine": "m", "python": python}, "commit_hash": commit, "env_name": env_name, **extra}


# ---- which record labels a result ------------------------------------------------------------

def test_the_latest_record_of_the_interpreter_at_that_commit_labels_it():
    old, new, other = env(**{COMPARED: "1.0"}), env(**{COMPARED: "2.0"}), env(STACK, **{COMPARED: "3.0"})
    envs = {("m", "c"): [(2.0, new), (1.0, old), (3.0, other)]}
    assert asv_labels.environment_of(envs, "m", "c", TORCH) is new


def test_records_written_at_the_same_moment_label_it_without_comparing_environments():
    first, second = env(**{COMPARED: "1.0"}), env(**{COMPARED: "2.0"})
    assert asv_labels.environment_of({("m", "c"): [(1.0, first), (1.0, second)]}, "m", "c", TORCH) is first


def test_a_record_that_names_no_interpreter_labels_it_where_none_names_it():
    unnamed = env("")
    envs = {("m", "c"): [(1.0, unnamed), (2.0, env(STACK))]}
    assert asv_labels.environment_of(envs, "m", "c", TORCH) is unnamed
    assert asv_labels.environment_of({("m", "c"): [(1.0, env(STACK))]}, "m", "c", TORCH) is None


def test_without_records_at_its_commit_its_interpreters_latest_on_that_box_labels_it():
    older, latest, elsewhere = env(**{COMPARED: "1.0"}), env(**{COMPARED: "2.0"}), env(**{COMPARED: "9.0"})
    envs = {("m", "a"): [(2.0, latest), (1.0, env(STACK))], ("m", "b"): [(1.0, older)],
            ("other-box", "c"): [(5.0, elsewhere)], ("m", "c"): [(9.0, env(STACK))]}
    assert asv_labels.environment_of(envs, "m", "c", TORCH) is latest
    assert asv_labels.environment_of(envs, "m", "c", "") is None  # no interpreter named: nothing to look for


def test_records_of_the_same_moment_at_other_commits_label_it_without_comparing_environments():
    first, second = env(**{COMPARED: "1.0"}), env(**{COMPARED: "2.0"})
    assert asv_labels.environment_of({("m", "a"): [(1.0, first)], ("m", "b"): [(1.0, second)]}, "m", "c",
                                     TORCH) is first


def test_a_result_that_names_no_commit_is_labelled_by_the_records_that_name_none():
    uncommitted, later = env(**{COMPARED: "1.0"}), env(**{COMPARED: "2.0"})
    envs = {("m", ""): [(1.0, uncommitted)], ("m", "d"): [(2.0, later)]}
    (params,) = asv_labels.machine_params([{k: v for k, v in result().items() if k != "commit_hash"}], envs)
    assert params[COMPARED] == "1.0"


def test_a_result_is_labelled_by_the_records_of_its_own_commit():
    at_c, at_d = env(**{COMPARED: "1.0"}), env(**{COMPARED: "2.0"})
    envs = {("m", "c"): [(1.0, at_c)], ("m", "d"): [(2.0, at_d)]}
    (params,) = asv_labels.machine_params([result(commit="c")], envs)
    assert params[COMPARED] == "1.0"
    (params,) = asv_labels.machine_params([{k: v for k, v in result().items() if k != "commit_hash"}], envs)
    assert params[COMPARED] == "2.0"  # a result that names no commit: the interpreter's latest


def test_records_are_keyed_by_their_box_and_commit_and_one_without_a_commit_by_none(tmp_path):
    def rec(commit, created):
        return Record(case="ceilings", params={"probe": "host_copy"}, outcome="skipped", reason="a test",
                      environment=env(), commit=commit, created=created)
    path = RecordStore.of_results(tmp_path).run_file("m", "c", "20261127T000000-abcdef")
    path.parent.mkdir(parents=True)
    write_records(path, [rec("c", 1.0), rec(None, 2.0)])
    envs = asv_labels.record_environments(tmp_path)
    box = machine_name(env().devices, env().cpu)
    assert sorted(envs) == [(box, ""), (box, "c")]
    assert [created for created, _ in envs[(box, "")]] == [2.0]


# ---- how far a label grows -------------------------------------------------------------------

@pytest.mark.parametrize("path, name", [
    ("/opt/torch/.venv/bin/python3", "torch/.venv/bin/python3"),
    ("/" + "a" * 35 + "/b/c", "/" + "a" * 35 + "/b/c"),  # 40 characters: whole
    ("/" + "a" * 36 + "/b/c", "..." + ("a" * 36 + "/b/c")[-37:]),  # 41: its last 37 after "..."
])
def test_an_interpreter_s_name_is_its_last_four_parts_cut_to_40_characters(path, name):
    assert asv_labels.interpreter_name(path) == name
    assert len(asv_labels.interpreter_name(path)) <= 40


def test_each_level_of_a_label_adds_what_tells_interpreters_apart():
    e = env(**{COMPARED: "1.0", "psutil": "7.0"})
    assert asv_labels.stack(e, TORCH, 0) == {"python": "3.12.3", COMPARED: "1.0"}
    assert asv_labels.stack(e, TORCH, 1) == {"python": "3.12.3", COMPARED: "1.0", "psutil": "7.0"}
    assert asv_labels.stack(e, TORCH, 2) == {"python": "3.12.3", COMPARED: "1.0", "psutil": "7.0",
                                             "interpreter": "torch/.venv/bin/python3"}
    assert asv_labels.stack(e, TORCH, 3) == {"python": "3.12.3", COMPARED: "1.0", "psutil": "7.0",
                                             "interpreter": TORCH}
    assert [asv_labels.stack(None, TORCH, level) for level in range(4)] == [
        {"python": "torch/.venv/bin/python3"}] * 3 + [{"python": TORCH}]


def two_interpreters(first: Environment, second: Environment) -> list[dict]:
    envs = {("m", "c"): [(1.0, first), (1.0, second)]}
    return asv_labels.machine_params([result(TORCH, env_name="a"), result(STACK, env_name="b")], envs)


def test_two_interpreters_that_differ_in_a_library_the_pages_compare_keep_the_shortest_label():
    a, b = two_interpreters(env(TORCH, **{COMPARED: "1.0", "psutil": "7.0"}),
                            env(STACK, **{COMPARED: "2.0", "psutil": "7.0"}))
    assert (a, b) == ({"machine": "m", "python": "3.12.3", COMPARED: "1.0"},
                      {"machine": "m", "python": "3.12.3", COMPARED: "2.0"})


def test_two_interpreters_that_differ_elsewhere_are_labelled_by_every_library():
    a, b = two_interpreters(env(TORCH, **{COMPARED: "1.0", "psutil": "7.0"}),
                            env(STACK, **{COMPARED: "1.0", "psutil": "6.0"}))
    assert (a["psutil"], b["psutil"]) == ("7.0", "6.0") and "interpreter" not in a


def test_the_same_libraries_listed_in_another_order_are_the_same_label():
    a, b = two_interpreters(env(TORCH, **{COMPARED: "1.0", "psutil": "7.0"}),
                            env(STACK, **{"psutil": "7.0", COMPARED: "1.0"}))
    assert (a["interpreter"], b["interpreter"]) == ("torch/.venv/bin/python3", "x/stack-cupy13/bin/python")


def test_interpreters_at_different_commits_never_clash():
    envs = {("m", "c"): [(1.0, env(TORCH))], ("m", "d"): [(1.0, env(STACK))]}
    a, b = asv_labels.machine_params([result(TORCH, "c", "a"), result(STACK, "d", "b")], envs)
    assert a == b == {"machine": "m", "python": "3.12.3", COMPARED: "1.0"}


def test_two_results_of_one_interpreter_under_two_names_end_at_its_whole_path():
    a, b = asv_labels.machine_params([result(env_name="a"), result(env_name="b")], {("m", "c"): [(1.0, env())]})
    assert a == b and a["interpreter"] == TORCH


def test_asv_s_own_environments_keep_their_python_and_requirements_only():
    matrix = {"params": {"machine": "m", "python": "3.12", "numpy": "2.5.2", "cpu": "Xeon", "os": "Linux"},
              "requirements": {"numpy": "2.5.2"}, "commit_hash": "c", "env_name": "e"}
    envs = {("m", "c"): [(1.0, env(""))]}  # a record naming no interpreter: not this result's
    assert asv_labels.short_params(matrix, envs, 0) == {"machine": "m", "python": "3.12", "numpy": "2.5.2"}
    bare = {"params": {"machine": "m", "python": "3.12", "os": "Linux"}, "commit_hash": "c"}
    assert asv_labels.short_params(bare, envs, 0) == {"machine": "m", "python": "3.12"}
    existing = result() | {"requirements": {"numpy": "2.5.2"}}  # an absolute path with requirements: asv's
    assert asv_labels.short_params(existing, envs, 0) == {"machine": "m", "python": TORCH}


# ---- what is copied ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"params": [1]}', '{"results": {}}'])
def test_a_file_that_is_not_a_result_with_params_is_not_read_as_one(tmp_path, text):
    (tmp_path / "r.json").write_text(text)
    assert asv_labels.read_result(tmp_path / "r.json") is None
    assert asv_labels.read_result(tmp_path / "missing.json") is None


def test_a_machine_s_results_get_short_params_and_anything_else_is_copied_as_it_is(tmp_path):
    box = tmp_path / "results" / "m"
    box.mkdir(parents=True)
    (box / "machine.json").write_text('{"machine": "m", "version": 1}')
    (box / "c-e.json").write_text(json.dumps(result() | {"results": {"x": 1}}))
    odd = {"broken.json": "{not json", "paramless.json": '{"params": {"python": "3.12"}}'}
    for name, text in odd.items():
        (box / name).write_text(text)
    dest = tmp_path / "copy" / "deeper" / "m"
    asv_labels.copy_machine(box, dest, {})
    assert sorted(p.name for p in dest.iterdir()) == ["broken.json", "c-e.json", "machine.json", "paramless.json"]
    assert (dest / "machine.json").read_text() == '{"machine": "m", "version": 1}'
    copied = json.loads((dest / "c-e.json").read_text())
    assert copied["params"] == {"machine": "m", "python": "torch/.venv/bin/python3"} and copied["results"] == {"x": 1}
    assert {name: (dest / name).read_text() for name in odd} == odd


def test_a_labelled_copy_goes_into_a_new_or_existing_folder_and_leaves_records_behind(tmp_path):
    results = tmp_path / "results"
    (results / "m").mkdir(parents=True)
    (results / "m" / "machine.json").write_text("{}")
    (results / "benchmarks.json").write_text('{"version": 2}')
    (results / "records" / "m").mkdir(parents=True)
    (results / "records" / "m" / "x.jsonl").write_text("")
    fresh = asv_labels.labelled_copy(results, tmp_path / "a" / "b")
    assert fresh == tmp_path / "a" / "b" and (fresh / "benchmarks.json").read_text() == '{"version": 2}'
    assert sorted(os.listdir(fresh)) == ["benchmarks.json", "m"]
    again = tmp_path / "again"
    again.mkdir()
    assert (asv_labels.labelled_copy(results, again) / "m" / "machine.json").exists()
    assert not (asv_labels.labelled_copy(results / "m", tmp_path / "none") / "benchmarks.json").exists()
