"""A docs table's command and the rows it speaks for (tests/test_tables.py checks that each command
prints its table from the records): the command line written out option by option, the rows a
``--where`` keeps, and what the command prints from its grid."""
from types import SimpleNamespace

from harness.report import specs, tables
from harness.report.specs import Spec


def test_a_spec_writes_its_command_with_only_the_options_it_sets():
    assert Spec("tricks", "technique").command() == "python3 -m harness table tricks --down technique --show step,rate,peak"
    full = Spec("tricks", "technique", across="workload", show="rate", where=("batch=16", "machine=h100"),
                versus="technique=fp32", rank=True)
    assert full.args() == ["tricks", "--down", "technique", "--across", "workload", "--show", "rate",
                           "--where", "batch=16", "--where", "machine=h100", "--versus", "technique=fp32", "--rank"]
    assert full.command() == "python3 -m harness table " + " ".join(full.args())
    assert Spec("tricks", "technique", across=tables.MACHINE).args() == \
        ["tricks", "--down", "technique", "--show", "step,rate,peak"]


def row(case="tricks", machine="H100", **params):
    gpus = (SimpleNamespace(name=f"NVIDIA {machine}"),)
    return SimpleNamespace(case=case, record=SimpleNamespace(params=params), machine=machine, gpus=gpus)


def test_a_spec_speaks_for_its_cases_rows_that_match_each_where(monkeypatch):
    monkeypatch.setattr(tables, "machine_label", lambda r: f"machine {r.machine}")
    spec = Spec("tricks", "technique", where=("batch=16", "machine=machine H200"))
    assert spec.matches(row(machine="H200", batch=16, technique="fp32"))
    assert not spec.matches(row(machine="H100", batch=16))
    assert not spec.matches(row(machine="H200", batch=8))
    assert not spec.matches(row(machine="H200"))  # no such parameter: "None" is no value of it
    assert not spec.matches(row(case="fits", machine="H200", batch=16))
    assert Spec("tricks", "technique").matches(row())
    assert Spec("tricks", "technique", where=("budget=24GB",)).matches(row(budget="24GB"))
    assert Spec("tricks", "technique", where=("x=a=b",)).matches(row(x="a=b"))  # the value after the first =


def test_what_a_spec_prints_is_its_grids_table_then_each_footnote(monkeypatch):
    spec = Spec("tricks", "technique")
    monkeypatch.setattr(Spec, "grid", lambda self, rows: None)
    assert spec.render(["a row"]) is None
    made = SimpleNamespace(markdown=lambda: "| t |", notes=["† one", "‡ two"])
    monkeypatch.setattr(Spec, "grid", lambda self, rows: made if rows == ["a row"] else None)
    assert spec.render(["a row"]) == "| t |\n\n† one\n\n‡ two"
    made.notes = []
    assert spec.render(["a row"]) == "| t |"


def test_a_spec_with_no_matching_row_has_no_grid():
    assert Spec("tricks", "technique", where=("batch=16",)).grid([row(batch=8)]) is None
    assert specs.COMMAND == "python3 -m harness table"


def test_a_specs_grid_is_the_tables_grid_of_its_own_options(monkeypatch):
    asked = {}
    monkeypatch.setattr(tables, "where_of", lambda case, where: asked.setdefault("where", (case.name, where)) and "W")
    monkeypatch.setattr(tables, "versus_pairs", lambda case, versus: asked.setdefault("versus", (case.name, versus)) and "V")
    monkeypatch.setattr(tables, "grid", lambda *a: asked.setdefault("grid", a) and "the grid")
    spec = Spec("tricks", "technique,micro_batch", across="workload", show="rate,peak", where=("batch=16",),
                versus="technique=fp32", rank=True)
    rows = [row(batch=8), row(batch=16)]
    assert spec.grid(rows) == "the grid"
    assert asked["where"] == ("tricks", ["batch=16"]) and asked["versus"] == ("tricks", "technique=fp32")
    assert asked["grid"] == (rows, "tricks", ["technique", "micro_batch"], "workload", ["rate", "peak"], "W", "V", True)
