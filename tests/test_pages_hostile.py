"""`table` and `pages` fed hostile records: case, machine and parameter names and values that try to
leave the output folder, become links, or break the chart's text. Each run either builds (every
file inside --out) or exits 2 with one line; never a traceback, never a file outside --out."""
import json
import re
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.drive import cli
from harness.report.pages import charts

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "results/records/nvidia-h100-80gb-hbm3-x1/bfa680ee-20261124T003930-ab748b.jsonl"
HOSTILE = ["../../x", "../../../../tmp/x/evil", "a/b", "/etc/passwd", "javascript:alert(1)", "$\\foo{$", "$x$",
           "index", "provenance", "style", "..", ".", "ünï/cødé ✓", "<script>alert(1)</script>", "a\nb|c",
           "x" * 400, "C:\\x", "\\\\server\\share", "%2e%2e%2f", "data:text/html,<b>"]
names = st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=80))
values = st.one_of(names, st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans())


# The loaded profile's budget (tests/conftest.py: "ci", or "thorough" under OOMBENCH_HYPOTHESIS).
CI = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# A page build draws charts (a tenth of a second each): a quarter of the budget keeps the suite fast;
# OOMBENCH_HYPOTHESIS_EXAMPLES (or the "thorough" profile) asks for more.
PAGES = settings(CI, max_examples=int(os.environ.get("OOMBENCH_HYPOTHESIS_EXAMPLES", 0)) or max(10, CI.max_examples // 4))


def template() -> dict:
    return next(d for d in map(json.loads, TEMPLATE.read_text().splitlines()) if d["outcome"] == "ok")


def plant(root: Path, case: str, machine: str, params: dict) -> Path:
    """Two records (the template's ceiling and one of ``case``) on a GPU named ``machine``."""
    recs = []
    for name in ("ceilings", case):
        d = template()
        d["case"] = name
        if name == case:
            d["params"] = params
            d["check"] = {"loss": 1.5, str(next(iter(params), "k")): "$\\bar{$"}
        d["environment"]["devices"]["gpus"][0]["name"] = machine
        recs.append(json.dumps(d))
    folder = root / "results" / "records" / "box"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text("\n".join(recs) + "\n")
    return root / "results"


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def one_line_or_built(rc: int, err: str) -> None:
    assert "Traceback" not in err
    assert rc == 0 or (rc == 2 and len(err.strip().splitlines()) == 1), (rc, err)


@PAGES
@given(case=names, machine=names, params=st.dictionaries(names, values, max_size=3))
def test_pages_from_hostile_records_stay_in_their_folder(capsys, case, machine, params):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results = plant(root, case, machine, params)
        before = files(root)
        out = root / "site" / "pages"
        rc = cli.main(["pages", "--no-asv", "--results", str(results), "--out", str(out)])
        one_line_or_built(rc, capsys.readouterr().err)
        assert {f for f in files(root) - before if not f.startswith("site")} == set()
        assert {p.name for p in (root / "site").iterdir()} <= {"pages"}  # no temporary folder left
        if rc == 0:
            for page in out.glob("*.html"):
                text = page.read_text()
                for href in re.findall(r'href="([^"]*)"', text):
                    assert ":" not in href.split("#")[0] or href.startswith("data:,"), (page.name, href)
                    assert not href.startswith(("/", "..")) or href == "../html/index.html", href


@CI
@given(machine=names, value=names, where=names, key=names)
def test_table_of_hostile_records_prints_or_exits_2(capsys, machine, value, where, key):
    with tempfile.TemporaryDirectory() as tmp:
        params = {"allocator": "managed_pool", "placement": value, "pattern": "stream", "fraction": 0.1}
        results = plant(Path(tmp), "unified", machine, params)
        for argv in (["--down", "allocator,placement", "--show", "step,rate,eff,peak,loss"],
                     ["--down", "placement,machine", "--where", f"placement={where}"],
                     ["--down", where, "--show", f"check:{key}"]):
            rc = cli.main(["table", "unified", *argv, "--results", str(results)])
            out = capsys.readouterr()
            one_line_or_built(rc, out.err)
            if rc == 0:
                table = out.out.split("\n\n")[0].splitlines()
                assert all(line.count(" | ") == table[0].count(" | ") for line in table), out.out


@pytest.mark.parametrize("text", HOSTILE)
def test_chart_text_is_never_parsed_as_mathtext_or_markup(text):
    svg = charts.pareto_svg([(1.0, 2.0, text, True), (2.0, 1.0, "b", False)], text, text, text)
    assert svg.startswith("<svg") and "<script" not in svg
    if "$" in text and "\n" not in text:
        assert text.replace("<", "&lt;").replace(">", "&gt;")[:40] in svg  # the dollars stay text
