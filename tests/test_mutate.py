"""``python3 -m harness mutate``: its options, its map of modules to tests, and how it reads
mutmut's results. mutmut itself never runs here (minutes a module): its output is canned."""
import configparser
import importlib.util
import re

import pytest

from harness.drive.commands import bootstrap, cli, mutate

# mutmut's `results --all true` listing, as it prints it (four spaces, the mutant, its status).
LISTING = """\
    harness.report.gate.x_verdict__mutmut_1: killed
    harness.report.gate.x_verdict__mutmut_2: survived
    harness.report.gate.x_verdict__mutmut_3: timeout
    harness.report.gate.xǁFloorǁtext__mutmut_1: no tests
    harness.report.gate.x_rows__mutmut_1: skipped
    harness.report.gate.x_rows__mutmut_2: killed
    harness.report.gate.x_rows__mutmut_3: suspicious
"""


def test_every_module_exists_and_maps_to_test_files_that_import_it():
    for module, tests in mutate.TESTS.items():
        assert (bootstrap.REPO / module).is_file(), module
        dotted = module.removesuffix(".py").replace("/", ".")
        package, _, name = dotted.rpartition(".")
        imports = re.compile(rf"(import {re.escape(dotted)}\b|from {re.escape(dotted)} import"
                             rf"|from {re.escape(package)} import .*\b{name}\b)")
        assert tests, module
        for test in tests:
            path = bootstrap.REPO / test
            assert path.is_file() and path.name.startswith("test_"), (module, test)
            assert imports.search(path.read_text()), f"{test} does not import {dotted}"


def test_the_score_counts_caught_mutants_over_all_but_skipped_ones():
    s = mutate.score("harness/report/gate.py", LISTING)
    assert (s.killed, s.total) == (3, 6)  # killed twice, one timeout; the skipped one not counted
    assert s.percent == 50.0
    assert s.survivors == ("harness.report.gate.x_rows__mutmut_3", "harness.report.gate.x_verdict__mutmut_2",
                           "harness.report.gate.xǁFloorǁtext__mutmut_1")
    assert mutate.score("harness/units.py", "").percent == 100.0  # nothing to mutate, nothing missed


def test_where_part_of_a_module_is_mutated_only_its_mutants_count():
    listing = """\
    harness.workloads.training.reference.x_curve_gap__mutmut_1: killed
    harness.workloads.training.reference.x_curve_gap__mutmut_2: survived
    harness.workloads.training.reference.x_deviation__mutmut_1: killed
    harness.workloads.training.reference.x_deviations__mutmut_1: not checked
    harness.workloads.training.reference.x_train__mutmut_1: not checked
"""
    assert "curve_gap" in mutate.PART["harness/workloads/training/reference.py"]
    s = mutate.score("harness/workloads/training/reference.py", listing)
    assert (s.killed, s.total, s.survivors) == (2, 3, ("harness.workloads.training.reference.x_curve_gap__mutmut_2",))
    for name in mutate.PART["harness/workloads/training/reference.py"]:
        assert re.search(rf"^def {name}\(", (bootstrap.REPO / "harness/workloads/training/reference.py").read_text(),
                         re.M), name


def test_a_method_of_a_part_is_named_as_mutmut_names_it_and_the_gpu_warm_ups_are_left_out():
    listing = """\
    harness.measure.guards.budget.x\u01c1Budget\u01c1over__mutmut_1: killed
    harness.measure.guards.budget.x_resolve__mutmut_1: survived
    harness.measure.guards.budget.x__warm_torch__mutmut_1: survived
"""
    s = mutate.score("harness/measure/guards/budget.py", listing)
    assert (s.killed, s.total, s.survivors) == (1, 2, ("harness.measure.guards.budget.x_resolve__mutmut_1",))


@pytest.mark.parametrize("module", sorted(mutate.PART))
def test_every_function_a_part_names_is_in_its_module(module):
    source = (bootstrap.REPO / module).read_text()
    for name in mutate.PART[module]:
        cls, _, fn = name.rpartition(".")
        where = re.search(rf"^class {cls}\b.*?(?=^\S)", source, re.M | re.S).group(0) if cls else source
        assert re.search(rf"^\s*def {fn}\(", where, re.M), name


def test_the_table_has_one_row_per_module():
    scores = [mutate.Score("harness/units.py", 9, 10, ()), mutate.Score("harness/report/gate.py", 1, 3, ("m",))]
    lines = mutate.table(scores).splitlines()
    assert lines[0].split() == ["module", "killed", "/", "total", "score"]
    assert lines[2].split() == ["harness/units.py", "9", "/", "10", "90.0%"]
    assert lines[3].split() == ["harness/report/gate.py", "1", "/", "3", "33.3%"]


@pytest.fixture
def canned(monkeypatch):
    """mutate.main with mutmut's run replaced by a canned listing per module."""
    listings = {}
    monkeypatch.setattr(mutate, "run_tester", lambda work, module: listings[work.name])
    monkeypatch.setattr(mutate, "check_tester", lambda: None)
    return listings


def test_one_module_under_the_threshold_fails_the_run(tmp_path, canned, capsys):
    canned["harness.units"] = "".join(f"    harness.units.x_f__mutmut_{i}: killed\n" for i in range(9))
    canned["harness.units"] += "    harness.units.x_f__mutmut_9: survived\n"  # 90%: enough
    assert mutate.main(["harness/units.py"], root=tmp_path) == 0
    canned["harness.report.gate"] = LISTING
    assert mutate.main(["harness/report/gate.py", "harness/units.py"], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "survived: harness.report.gate.x_verdict__mutmut_2" in out
    assert out.index("harness/units.py ") < out.index("harness/report/gate.py ")  # TESTS' order


def test_each_module_gets_its_own_folder_and_set_up_and_starts_anew(tmp_path):
    (tmp_path / "harness").mkdir()
    earlier = tmp_path / ".mutmut" / "harness.report.gate" / "mutants" / "harness" / "report"
    earlier.mkdir(parents=True)
    (earlier / "gate.py.meta").write_text("{}")  # a result from before the tests changed
    work = mutate.folder(tmp_path, "harness/report/gate.py")
    assert (work / "harness").resolve() == tmp_path / "harness" and not (work / "tests").exists()
    assert not (work / "mutants").exists()
    cfg = configparser.ConfigParser()
    cfg.read(work / "setup.cfg")
    assert cfg["mutmut"]["only_mutate"] == "harness/report/gate.py"
    assert cfg["mutmut"]["pytest_add_cli_args_test_selection"].split() == list(mutate.TESTS["harness/report/gate.py"])
    assert ("--deselect=tests/test_units.py::test_units_stays_the_lowest_layer"
            in cfg["mutmut"]["pytest_add_cli_args"].split())
    for test in mutate.LEFT_OUT:
        path, _, name = test.partition("::")
        assert f"def {name}(" in (bootstrap.REPO / path).read_text(), test
    assert cfg["mutmut"]["also_copy"] == ""  # none of the others is in tmp_path; mutmut copies harness itself


def test_only_the_module_whose_tests_publish_with_asv_gets_git_and_no_other_keeps_it(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "results").mkdir()
    labels = mutate.folder(tmp_path, "harness/drive/asv/asv_labels.py")
    cfg = configparser.ConfigParser()
    cfg.read(labels / "setup.cfg")
    assert (labels / ".git").resolve() == tmp_path / ".git"
    assert cfg["mutmut"]["also_copy"].split() == ["results", ".git"]
    (tmp_path / ".mutmut" / "harness.report.gate").mkdir()
    (tmp_path / ".mutmut" / "harness.report.gate" / ".git").symlink_to(tmp_path / ".git")  # an earlier set-up's
    gate = mutate.folder(tmp_path, "harness/report/gate.py")
    cfg.read(gate / "setup.cfg")
    assert not (gate / ".git").exists() and (gate / "results").is_symlink()
    assert cfg["mutmut"]["also_copy"].split() == ["results"]


def test_a_tester_that_stops_is_refused_naming_the_tests_to_run(tmp_path, monkeypatch):
    import subprocess
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: subprocess.CompletedProcess(a, 1))
    with pytest.raises(mutate.Refused,
                       match=r"^mutmut stopped on harness/units.py .*python3 -m pytest tests/test_units.py$"):
        mutate.run_tester(tmp_path, "harness/units.py")


@pytest.mark.parametrize("argv, modules", [(["mutate"], []),
                                           (["mutate", "harness/units.py", "harness/report/gate.py"],
                                            ["harness/units.py", "harness/report/gate.py"])])
def test_the_command_takes_modules(argv, modules):
    args = cli.parse(argv)
    assert args.func is cli._mutate and args.modules == modules


def test_an_unknown_module_is_refused_before_any_set_up(monkeypatch, capsys):
    monkeypatch.setattr(bootstrap, "ensure", lambda command: pytest.fail("set up for a refused command"))
    assert cli.main(["mutate", "harness/report/gates.py"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "harness/report/gates.py" in err and "harness/report/gate.py" in err


def test_a_missing_tester_is_refused_naming_the_install(monkeypatch, capsys):
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mutmut" else real(name, *a))
    assert cli.main(["mutate", "harness/units.py"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'mutmut" in err
