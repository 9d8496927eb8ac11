"""A docs table's command and the rows it speaks for (tests/test_tables.py checks that each command
prints its table from the records): the command line written out option by option, the rows a
``--where`` keeps, what the command prints from its grid, and the benchmarks each table names
(tests/test_selection.py checks that every one selects some)."""
import re
from types import SimpleNamespace

from harness.drive.asv import catalog
from harness.report import specs, tables
from harness.report.selection import expression
from harness.report.specs import Spec


def test_a_spec_writes_its_command_with_only_the_options_it_sets():
    assert Spec("tricks", "technique").command() == \
        "python3 -m harness table tricks --down technique --show step,rate,peak"
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
    monkeypatch.setattr(tables, "versus_pairs",
                        lambda case, versus: asked.setdefault("versus", (case.name, versus)) and "V")
    monkeypatch.setattr(tables, "grid", lambda *a: asked.setdefault("grid", a) and "the grid")
    spec = Spec("tricks", "technique,micro_batch", across="workload", show="rate,peak", where=("batch=16",),
                versus="technique=fp32", rank=True)
    rows = [row(batch=8), row(batch=16)]
    assert spec.grid(rows) == "the grid"
    assert asked["where"] == ("tricks", ["batch=16"]) and asked["versus"] == ("tricks", "technique=fp32")
    assert asked["grid"] == (rows, "tricks", ["technique", "micro_batch"], "workload", ["rate", "peak"], "W", "V", True,
                             None)


# Each table's benchmarks as they were matched by hand, kept literally (asv's unanchored search over
# ``family.Class.method(params)``), per family in the order of its tables, then the seeds' tables.
# Two selected nothing, a `$` after the class name that no benchmark name ends at; their declarations
# select what they meant (FIXED).
NEWER_FITS = r"^tricks\.WhatFits(Combined|Newer)?\."  # what-fits tables read the newer knobs' searches too
OLD_BENCH = {
    "ceilings": [r"ceilings\.", r"ceilings\.Context", r"ceilings\.Context", r"ceilings\."],
    "unified": [r"unified\.(Allocators|Placements)"] * 4 + [r"unified\.OutOfCore", r"unified\.Seed\.",
                                                            r"unified\.Beyond", r"unified\.Seed000"],
    "chainer_pool": [r"chainer_pool\.Gcn", r"chainer_pool\.TorchGcn", r"chainer_pool\.Mlp", r"chainer_pool\.Cnn"],
    "parallel": [r"parallel\.Lm", r"parallel\.Resnet", r"parallel\.ResnetScaling"],
    "tricks": [r"tricks\.Techniques", r"tricks\.(Techniques|NewerCombined)", r"tricks\.AttentionLong",
               r"tricks\.Techniques", r"tricks\.Techniques", r"tricks\.Accumulation",
               r"tricks\.Vocabulary", r"tricks\.LongSequence", NEWER_FITS, NEWER_FITS, r"tricks\.WhatFitsSequence"],
    "fragmentation": [r"fragmentation\.(Lm|Resnet)Shapes", r"fragmentation\.LmEverydayLoop",
                      r"fragmentation\.LmEverydayLoop|fragmentation\.LmDrawOrder", r"fragmentation\.LmBudget",
                      r"fragmentation\.ResnetBudget", r"fragmentation\.CupyPools",
                      r"fragmentation\.WhatFitsAllocator|tricks\.WhatFits$"],
    "tooling": [r"tooling\."],
    "models": [r"models\.", r"models\."],  # the ranked table of llama-1b came after the expressions
    "seeds": [r"unified\.Seed000", *[r"tricks\.(ResnetSeed|Seed003Budget|Seed003Accumulation|Seed003Combined)"] * 4,
              r"tricks\.Techniques", NEWER_FITS, r"tricks\.LongSequence",
              r"tricks\.WhatFitsSequence", r"chainer_pool\.MlpBeyond"],
    "headline": [r"tricks\.Techniques"],
}
FIXED = {r"tricks\.WhatFits(Combined)?$": r"^tricks\.WhatFits(Combined)?\.",
         r"fragmentation\.WhatFitsAllocator|tricks\.WhatFits$": r"fragmentation\.WhatFitsAllocator|^tricks\.WhatFits\."}


def test_each_tables_benchmarks_are_those_its_hand_written_expression_matched_but_where_none_matched():
    names = [n for b in catalog.benches() for n in b.names()]

    def matched(expr):
        return {n for n in names if re.search(expr, n)}

    declared = {**{f.name: [s.bench for s in f.specs] for f in specs.FAMILIES},
                "seeds": [s.bench for s in specs.SEEDS], "headline": [specs.HEADLINE.bench]}
    assert declared.keys() == OLD_BENCH.keys()
    for group, old in OLD_BENCH.items():
        assert len(declared[group]) == len(old), group
        for bench, expr in zip(declared[group], old):
            assert matched(expression(bench)) == matched(FIXED.get(expr, expr)), (group, bench, expr)
    # what the fixes mend: the bare `$` selected nothing
    assert not matched(r"tricks\.WhatFits(Combined)?$") and not matched(r"tricks\.WhatFits$")
    fits = matched(expression(specs.FITS_BATCH.bench))
    assert {n.split(".")[1] for n in fits} == {"WhatFits", "WhatFitsCombined", "WhatFitsNewer"}
