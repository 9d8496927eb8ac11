"""`table` and `pages` fed hostile records: case, machine and parameter names and values that try to
leave the output folder, become links, or break out of a chart's data. Each run either builds (every
file inside --out) or exits 2 with one line; never a traceback, never a file outside --out."""
import functools
import hashlib
import json
import re
import os
import stat
import subprocess
import sys
import tempfile
from html import unescape
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.drive.commands import cli
from harness.report.pages import build
from harness.report.pages import names as naming

from conftest import FROZEN

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = FROZEN / "records/nvidia-h100-80gb-hbm3-x1/bfa680ee-20261124T003930-ab748b.jsonl"
HOSTILE = ["../../x", "../../../../tmp/x/evil", "a/b", "/etc/passwd", "javascript:alert(1)", "$\\foo{$", "$x$",
           "index", "provenance", "style", "..", ".", "ünï/cødé ✓", "<script>alert(1)</script>", "a\nb|c",
           "x" * 400, "C:\\x", "\\\\server\\share", "%2e%2e%2f", "data:text/html,<b>"]
names = st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=80))
values = st.one_of(names, st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans())


# The loaded profile's budget (tests/conftest.py: "ci", or "thorough" under OOMBENCH_HYPOTHESIS).
CI = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# A page build takes a tenth of a second or more: a quarter of the budget keeps the suite fast;
# OOMBENCH_HYPOTHESIS_EXAMPLES (or the "thorough" profile) asks for more.
PAGES = settings(CI, max_examples=int(os.environ.get("OOMBENCH_HYPOTHESIS_EXAMPLES", 0))
                 or max(10, CI.max_examples // 4))


@pytest.fixture(scope="module", autouse=True)
def one_parser():
    """The command line's parser built once for the module rather than once a command: the
    property tests run hundreds of commands, and building the parser was most of each one's time.
    Every command still goes through ``cli.main`` and is parsed by the parser ``cli.parser`` builds."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli, "parser", functools.cache(cli.parser))
        yield


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
                columns = [len(re.findall(r"(?<!\\)\|", line)) for line in table]  # an escaped | breaks none
                assert columns == [columns[0]] * len(table), out.out


CHART_DATA = re.compile(r'<script type="application/json" class="chart-data">(.*?)</script>', re.S)


@pytest.mark.parametrize("text", HOSTILE)
def test_chart_data_in_a_page_hold_hostile_text_as_text(tmp_path, capsys, text):
    """A technique's name travels in the page as JSON inside a script element: it never closes
    that element, and reads back as the record wrote it."""
    params = {"allocator": "managed_pool", "placement": text, "pattern": "stream", "fraction": 0.1}
    results = plant(tmp_path, "unified", "box", params)
    assert build.main(results=str(results), out=str(tmp_path / "pages")) == 0, capsys.readouterr().err
    (data,) = CHART_DATA.findall((tmp_path / "pages" / "unified.html").read_text())
    assert "</" not in data and "<!--" not in data
    (point,) = json.loads(data)["points"]
    assert "".join("".join(point["title"]).split()) == "".join(f"allocator=managed_pool placement={text}".split())
    assert point["href"].startswith("provenance-unified.html#r-")


# -- names that meet after slugging --------------------------------------------------------------

def digest(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:10]


# A name that slugs to "provenance" has the page "provenance-<its hash>.html": the records' page of
# a case named that hash. Case variants and the build's own page names join them.
PROVENANCE_LIKE = st.tuples(st.sampled_from(["", " ", "-", "!", "../", "ü"]),
                            st.sampled_from(["Provenance", "PROVENANCE", "provenance", "pRoVeNaNcE"]),
                            st.sampled_from(["", "!", " ", "/", "."])).map("".join)
CASE_NAMES = st.one_of(
    PROVENANCE_LIKE.flatmap(lambda n: st.just([n, digest(n)])),
    st.sampled_from(["index", "Index", "INDEX", "provenance", "style", "chooser", "seeds", "ceilings",
                     "Ceilings", "a b", "a-b", "A B", "a_b"]).map(lambda n: [n]),
    st.text(min_size=1, max_size=12).flatmap(lambda n: st.just([n, n.swapcase(), n.upper()])),
)
CASE_SETS = st.lists(CASE_NAMES, min_size=1, max_size=3).map(lambda groups: sorted({n for g in groups for n in g}))


def test_names_that_meet_after_slugging_get_pages_of_their_own():
    pages = naming.names(["Provenance", digest("Provenance"), "index", "A", "a"])
    files = [*pages.page.values(), *pages.provenance.values()]
    assert len({f.casefold() for f in files}) == len(files) and not set(files) & set(naming.FIXED)
    assert pages.page[digest("Provenance")] == f"{digest('Provenance')}.html"  # a plain name keeps its page


@CI
@given(cases=CASE_SETS)
def test_every_page_name_of_a_build_is_its_own_and_never_a_fixed_pages(cases):
    pages = naming.names(cases)
    files = [*pages.page.values(), *pages.provenance.values()]
    assert len({f.casefold() for f in files}) == len(files) == 2 * len(cases)
    assert not {f.casefold() for f in files} & {f.casefold() for f in naming.FIXED}
    assert all(re.fullmatch(r"[a-z0-9_-]{1,80}\.html", f) for f in files)
    assert naming.names(reversed(cases)) == pages  # the same records name their pages the same way


def plant_cases(root: Path, cases: list[str]) -> Path:
    """The template's ceiling and one record of each case."""
    recs = [template()]
    for case in cases:
        d = template()
        d["case"] = case
        recs.append(d)
    folder = root / "results" / "records" / "box"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in recs))
    return root / "results"


def links(page: Path, pattern: str) -> list[tuple[str, str]]:
    """(href, the link's text) of each link ``pattern`` (a regex around ``(?P<a>...)``) finds."""
    return [(unescape(h), unescape(t)) for h, t in re.findall(pattern, as_written(page), re.S)]


def as_written(page: Path) -> str:
    return page.read_bytes().decode()  # a name's "\r" stays one


def title(page: Path) -> str:
    return unescape(re.search(r"<title>(.*?)</title>", as_written(page), re.S).group(1))


def assert_every_case_opens_its_own_pages(out: Path, cases: set[str]) -> None:
    every = cases | {"ceilings"}
    own = [name for name in naming.FIXED if name.endswith(".html")]  # the build's own pages
    assert len(list(out.glob("*.html"))) == len(own) + 2 * len(every)  # no page written over another
    shown = {t: h for h, t in links(out / "index.html", r'<a class="case" href="([^"]*)">(.*?)</a>')}
    for case in every:
        page = out / shown[case]
        assert title(page) == f"oombench: {case}", (case, page.name)
        ((prov, _),) = links(page, r'<a href="([^"]*)" id="(provenance-link)">')
        assert title(out / prov) == f"oombench: provenance of {case}", (case, prov)
    index = dict((t, h) for h, t in links(out / "provenance.html", r'<li><a href="([^"]*)">(.*?)</a>'))
    assert {c: title(out / index[c]) for c in every} == {c: f"oombench: provenance of {c}" for c in every}


def test_a_case_named_after_anothers_records_page_gets_its_own_page(tmp_path, capsys):
    cases = {"Provenance", digest("Provenance")}
    results, out = plant_cases(tmp_path, sorted(cases)), tmp_path / "pages"
    assert cli.main(["pages", "--no-asv", "--results", str(results), "--out", str(out)]) == 0
    assert_every_case_opens_its_own_pages(out, cases)


@PAGES
@given(cases=CASE_SETS)
def test_every_nav_link_of_a_build_opens_its_own_case(capsys, cases):
    with tempfile.TemporaryDirectory() as tmp:
        results, out = plant_cases(Path(tmp), cases), Path(tmp) / "pages"
        assert cli.main(["pages", "--no-asv", "--results", str(results), "--out", str(out)]) == 0
        assert_every_case_opens_its_own_pages(out, set(cases))


def test_a_build_refuses_to_write_two_pages_to_one_path(tmp_path, capsys, monkeypatch):
    results, out = plant_cases(tmp_path, ["a", "b"]), tmp_path / "pages"
    assert cli.main(["pages", "--no-asv", "--results", str(results), "--out", str(out)]) == 0
    before = snapshot(out)
    same = naming.Names({"a": "a.html", "b": "A.html", "ceilings": "ceilings.html"},
                        {"a": "pa.html", "b": "pb.html", "ceilings": "pc.html"})
    monkeypatch.setattr(build, "names", lambda cases: same)
    assert cli.main(["pages", "--no-asv", "--results", str(results), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "two pages of one build" in err and len(err.strip().splitlines()) == 1
    assert snapshot(out) == before


# -- folders the pages do not own ----------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Each entry's mode and bytes, the folder's own mode under ""."""
    out = {"": (folder.stat().st_mode, b"")}
    for p in sorted(folder.rglob("*")):
        out[str(p.relative_to(folder))] = (p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
    return out


def pages(results: Path, out) -> int:
    return cli.main(["pages", "--no-asv", "--results", str(results), "--out", str(out)])


def refused_naming(capsys, fresh: Path) -> None:
    err = capsys.readouterr().err
    assert "did not make" in err and f"--out {fresh}" in err and len(err.strip().splitlines()) == 1, err


def test_a_folder_laid_out_as_pages_but_holding_a_users_file_is_refused_and_kept(tmp_path, capsys):
    results, out = plant_cases(tmp_path, ["a"]), tmp_path / "d"
    out.mkdir()
    for name in ("index.html", "provenance.html", "thesis.tex"):
        (out / name).write_text(f"the user's {name}")
    before = snapshot(out)
    assert pages(results, out) == 2
    refused_naming(capsys, tmp_path / "d-2")
    assert snapshot(out) == before


def test_a_file_put_in_built_pages_stops_the_next_build_from_replacing_them(tmp_path, capsys):
    results, out = plant_cases(tmp_path, ["a"]), tmp_path / "pages"
    assert pages(results, out) == 0
    assert pages(results, out) == 0  # its own pages, a build replaces
    (out / "notes.md").write_text("mine")
    before = snapshot(out)
    assert pages(results, out) == 2
    refused_naming(capsys, tmp_path / "pages-2")
    assert snapshot(out) == before


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_built_pages_take_the_modes_the_umask_gives(tmp_path, mask):
    results, out = plant_cases(tmp_path, ["a"]), tmp_path / "pages"
    old = os.umask(mask)
    try:
        assert pages(results, out) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o666 & ~mask}


def test_pages_refuse_an_empty_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert pages(plant_cases(tmp_path, ["a"]), "") == 2
    assert "--out ''" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


KILLED = """
import os, sys
from harness.report.pages import build
def killed(results, into):
    (into / "index.html").write_text("half")
    os._exit(9)
build.write_pages = killed
build.main(results=sys.argv[1], out=sys.argv[2])
"""


def test_a_killed_builds_folders_are_removed_by_the_next_build_and_no_others(tmp_path):
    results, out = plant_cases(tmp_path, ["a"]), tmp_path / "pages"
    killed = subprocess.Popen([sys.executable, "-c", KILLED, str(results), str(out)], cwd=REPO)
    assert killed.wait() == 9
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".pages.building-")]
    assert left.name.startswith(f".pages.building-{killed.pid}-")
    gone = tmp_path / f".pages.old-{dead_pid()}-x1"
    alive = tmp_path / f".pages.building-{os.getpid()}-x2"  # this process's: a build still at work
    theirs = [tmp_path / ".pages.building-notes", tmp_path / ".other.building-1-x3"]
    for folder in (gone, alive, *theirs):
        folder.mkdir()
    assert pages(results, out) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted(
        p.name for p in (alive, *theirs))
