"""Selections are declared (``harness.report.selection.Select``): the ``--bench`` expression written
from one selects exactly the benchmarks it names, as asv matches ``family.Class.method(params)``, and
no selection of a profile or a table selects nothing: each class it names is one of its family, each
parameter one of its class's and each value one that parameter takes."""
import re

import pytest

from harness.drive.asv import catalog, profiles
from harness.report import specs
from harness.report.selection import Select, expression

BENCHES = catalog.benches()
NAMES = [n for b in BENCHES for n in b.names()]
PARAM_NAMES = catalog.param_names()
CLASSES = {f"{family}.{name}": cls for family, name, cls in catalog.classes()}


def matched(expr: str) -> set[str]:
    return {n for n in NAMES if re.search(expr, n)}


def classes_of(expr: str) -> set[str]:
    return {n.split(".track_")[0] for n in matched(expr)}


def test_a_class_a_family_and_several_classes_select_every_parameter_set_of_those_and_no_neighbour():
    assert Select("tricks", "WhatFits").expression() == r"^tricks\.WhatFits\."
    assert classes_of(Select("tricks", "WhatFits").expression()) == {"tricks.WhatFits"}  # not WhatFitsSequence
    assert classes_of(Select("chainer_pool", "Gcn").expression()) == {"chainer_pool.Gcn"}  # not GcnCpu
    both = Select("chainer_pool", "Gcn", "GcnCpu").expression()
    assert classes_of(both) == {"chainer_pool.Gcn", "chainer_pool.GcnCpu"}
    assert Select("tooling").expression() == r"^tooling\."
    assert classes_of(Select("ceilings").expression()) == {c for c in CLASSES if c.startswith("ceilings.")}
    every = {n for b in BENCHES if b.cls == "WhatFits" for n in b.names()}
    assert matched(Select("tricks", "WhatFits").expression()) == every and len(every) == 7 * 5  # every set


def test_named_parameters_take_their_values_in_the_classes_order_and_the_rest_any():
    # the budget is Seed003Budget's third parameter and Seed003Accumulation's too, after other names
    sel = Select("tricks", "Seed003Budget", "Seed003Accumulation", budget=("24GB", "40GB"),
                 workload="resnet50_1024")
    got = {n.partition("(")[2] for n in matched(sel.expression(PARAM_NAMES))}
    want = {b.args[1:] for b in BENCHES if b.cls in ("Seed003Budget", "Seed003Accumulation")
            and b.args.startswith("('resnet50_1024', ") and b.args.endswith(("'24GB')", "'40GB')"))}
    assert got == want and len(want) == 8 * 2 + 3 * 2
    floats = Select("unified", "Beyond", budget="40GB", times=1.5).expression(PARAM_NAMES)
    ways = ("device_pool", "managed_pool", "out_of_core", "zero_copy")
    patterns = ("stream", "reduce", "matmul", "gather")
    assert {n.partition("(")[2] for n in matched(floats)} == {f"'{w}', '{p}', '40GB', 1.5)" for w in ways
                                                              for p in patterns}
    # a value as asv writes it, special characters and all: '+' is no repetition, '.' no wildcard
    plus = Select("tricks", "Seed003Combined", technique="tf32+checkpoint", micro_batch=5, workload="resnet50_2048")
    assert len(matched(plus.expression(PARAM_NAMES))) == 2 and "'tf32\\+checkpoint'" in plus.expression(PARAM_NAMES)


def test_a_parameter_the_class_lacks_or_parameters_without_a_class_are_refused():
    with pytest.raises(ValueError, match=r"tricks\.WhatFits takes the parameters \['technique', 'budget'\]"):
        Select("tricks", "WhatFits", pool="device_pool").expression(PARAM_NAMES)
    with pytest.raises(ValueError, match="takes the parameters None"):  # names not given: no guessing the order
        Select("tricks", "WhatFits", budget="16GB").expression()
    with pytest.raises(ValueError, match="name the classes of tricks"):
        Select("tricks", budget="16GB").expression(PARAM_NAMES)


def test_one_expression_for_several_selections_selects_what_each_does():
    a, b = Select("tricks", "WhatFits", budget="card"), Select("fragmentation", "WhatFitsAllocator")
    assert matched(expression([a, b], PARAM_NAMES)) == matched(a.expression(PARAM_NAMES)) | matched(b.expression())
    assert Select("tricks", "WhatFits", budget=["16GB"]) == Select("tricks", "WhatFits", budget="16GB")


def every_selection():
    """(where, Select) for each selection a profile or a table declares."""
    for name in ("QUICK", "CPU", "STANDARD", "BUDGET_CUPY", "BUDGET_TORCH", "SEED_003_COMBINED", "FRAGMENTATION",
                 "VERSIONS"):
        for i, sel in enumerate(getattr(profiles, name)):
            yield f"profiles.{name}[{i}]", sel
    tables = [s for f in specs.FAMILIES for s in f.specs] + list(specs.SEEDS) + [
        specs.HEADLINE, specs.FITS_BATCH, specs.FITS_SEQUENCE, specs.LONG_SEQUENCE]
    for spec in tables:
        assert spec.bench, f"{spec.title or spec.command()}: names no benchmark"
        for sel in spec.bench:
            yield f"the table {spec.title or spec.command()!r}", sel


SELECTIONS = list(every_selection())


def test_every_profile_lists_only_declared_selections_and_every_part_is_checked():
    listed = {id(s) for _, s in SELECTIONS}
    assert all(id(s) in listed for p in profiles.PROFILES.values() for s in p)
    assert len(SELECTIONS) > 70


@pytest.mark.parametrize("where, sel", SELECTIONS, ids=[w for w, _ in SELECTIONS])
def test_no_selection_selects_nothing(where, sel):
    assert matched(sel.expression(PARAM_NAMES)), f"{where}: {sel} selects no benchmark"
    for cls in sel.classes:
        key = f"{sel.family}.{cls}"
        assert key in CLASSES, f"{where}: {sel.family} has no benchmark class {cls}"
        assert matched(Select(sel.family, cls, **{n: v for n, v in sel.params}).expression(PARAM_NAMES)), \
            f"{where}: {key} under {sel.params} selects nothing"
        for name, values in sel.params:
            taken = CLASSES[key].params[PARAM_NAMES[key].index(name)]
            assert set(values) <= set(taken), f"{where}: {key}'s {name} takes {taken}, not all of {values}"
