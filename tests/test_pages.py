"""The comparison pages: built from a frozen copy of records (tests/data/results), every figure traceable to its record,
and (in a real headless browser) loading without a console error and showing the figures the
result files hold."""
import functools
import hashlib
import http.server
import json
import re
import shutil
import threading
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from harness.drive.asv import asv_site
from harness.drive.commands import cli
from harness.report import tables
from harness.report import model
from harness.report.pages import build, names
from harness.report.families import Family, family
from harness.report.specs import HEADLINE

from conftest import FROZEN, plain, results_with

REPO = Path(__file__).resolve().parents[1]
RESULTS = FROZEN


def raw_records() -> dict[str, dict]:
    """rid -> the record as the file holds it, read without the harness's loader."""
    out = {}
    for path in sorted((RESULTS / "records").rglob("*.jsonl")):
        source = str(path.relative_to(RESULTS.parent))
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            out["r-" + hashlib.sha1(f"{source}:{n}".encode()).hexdigest()[:10]] = json.loads(line)
    return out


@pytest.fixture(scope="module")
def site(frozen_site):
    """pages/ (the project's) and html/ (asv's) of the frozen results, side by side as `python3 -m
    harness pages` lays them out: one build, shared with test_pages_browser.py (conftest)."""
    return frozen_site


def test_pareto_keeps_only_undominated_points():
    # (peak, rate): the second uses more memory for less rate; the third trades memory for rate.
    assert model.pareto([(1.0, 10.0), (2.0, 5.0), (3.0, 20.0)]) == [True, False, True]
    assert model.pareto([(1.0, 10.0), (1.0, 10.0)]) == [True, True]  # ties dominate neither


def test_an_unknown_family_gets_a_page_with_every_parameter_a_technique():
    assert family("some_future_case") == Family(title="some_future_case")


def test_every_linked_record_has_one_provenance_entry_and_every_link_lands(site):
    pages = site / "pages"
    prov = {p.name: p.read_text() for p in pages.glob("provenance-*.html")}
    index = (pages / "provenance.html").read_text()
    for name in prov:
        assert f'href="{name}"' in index, f"provenance.html does not link {name}"
    anchors = {name: set(re.findall(r'id="(r-[0-9a-f]{10})"', text)) for name, text in prov.items()}
    for rid, rec in raw_records().items():
        held = [name for name in prov if rid in anchors[name]]  # a rid is r- and ten hex digits: the pattern's
        assert len(held) <= 1 and all(rec["commit"] in prov[name] for name in held), rid
    for page in pages.glob("*.html"):
        for name, rid in re.findall(r'href="(provenance-[^"#]+)#(r-[0-9a-f]{10})"', page.read_text()):
            assert rid in anchors.get(name, ()), f"{page.name} links to {name}#{rid}, which has no entry there"


class Links(HTMLParser):
    """A page's addresses (href, src) and the ids it holds."""

    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.update(v for k, v in attrs.items() if k in ("id", "name") and v)
        self.links += [v for k, v in attrs.items() if k in ("href", "src") and v is not None]


def dead_links(folder: Path) -> list[str]:
    """Every address of every page under ``folder`` that lands nowhere: no such file, or no such
    id in it ("" and "data:" need no file; a page's own "#id" needs the id)."""
    parsed = {}

    def parse(path: Path) -> Links:
        if path not in parsed:
            parsed[path] = Links()
            parsed[path].feed(path.read_text())
        return parsed[path]
    dead = []
    for page in sorted(folder.glob("*.html")):
        for link in parse(page).links:
            if link.startswith("data:"):
                continue
            file, _, anchor = link.partition("#")
            target = (page.parent / unquote(file)).resolve() if file else page
            if not target.is_file() or (anchor and target.suffix == ".html" and anchor not in parse(target).ids):
                dead.append(f"{page.name}: {link}")
    return dead


def test_every_address_of_every_page_lands_on_a_file_and_its_anchor(site):
    assert list((site / "pages").glob("*.html")) and dead_links(site / "pages") == []


def test_asvs_history_is_linked_only_where_asvs_site_stands_beside_the_pages(tmp_path):
    src = sorted((FROZEN / "records").rglob("*.jsonl"))[0]
    (tmp_path / "results" / "records" / "one").mkdir(parents=True)
    shutil.copy(src, tmp_path / "results" / "records" / "one" / src.name)
    args = {"results": str(tmp_path / "results"), "out": str(tmp_path / "pages")}
    assert build.main(**args) == 0  # as `harness pages --no-asv` builds them: no asv site there
    assert "asv history" not in (tmp_path / "pages" / "index.html").read_text()
    assert dead_links(tmp_path / "pages") == []
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "index.html").write_text("<html><body>asv</body></html>")
    assert build.main(**args) == 0
    assert '<a href="../html/index.html">asv history</a>' in (tmp_path / "pages" / "index.html").read_text()
    assert dead_links(tmp_path / "pages") == []


def test_pages_show_two_gpu_models_or_counts_and_two_library_versions(site):
    index = (site / "pages" / "index.html").read_text()
    assert "nvidia-h200-x1" in index and "nvidia-h200-x2" in index
    # The committed CPU runs measured the same cases under numpy 1.26.4 and 2.4.6.
    assert "numpy 1.26.4" in index and "numpy 2.4.6" in index
    # A family with a does-not-fit record gets a "what fits" table; with none anywhere, it is said.
    cut_short = {rec["case"] for rec in raw_records().values() if rec["outcome"] == "does_not_fit"}
    for case in cut_short:
        assert f'href="{case}.html#what-fits"' in index
        assert "does not fit (a " in (site / "pages" / f"{case}.html").read_text()  # (a 2.68 GB request failed)
    assert cut_short or "None yet" in index
    # Activations kept on the CPU past the host's share (committed tricks records): the host's memory
    # ran short, not the card's, and the what-fits table says which.
    short_of_host = [rec for rec in raw_records().values() if rec["outcome"] == "does_not_fit"
                     and rec["case"] == "tricks" and "pinned host memory" in (rec["reason"] or "")]
    assert short_of_host and re.search(r"does not fit in host memory \([\d.]+ GB asked\)",
                                       (site / "pages" / "tricks.html").read_text())


def test_no_page_or_site_reaches_the_internet(site):
    for page in list((site / "pages").glob("*.html")) + list((site / "html").glob("*.html")):
        text = page.read_text()
        assert not re.search(r'(src|href)="https?://(?!github\.com)', text), page.name


# -- in a real browser -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser_page(site, browser):
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = browser.new_page()
    errors = watched(page)
    yield page, f"http://127.0.0.1:{server.server_address[1]}", errors
    page.context.close()
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


def close(shown: str, value: float) -> bool:
    """The page rounds to 1-3 decimals: half a unit of the last shown digit."""
    digits = text_decimals(shown.split()[0])
    return abs(number(shown) - value) <= 0.5 * 10 ** -digits + 1e-12


def text_decimals(num: str) -> int:
    return len(num.split(".")[1]) if "." in num else 0


def expected_rate(rec: dict) -> float:
    work, median = rec["work"], rec["timing"]["median_s"]
    if "flops" in work:
        return work["flops"] / median / 1e12
    if "bytes" in work:
        return work["bytes"] / median / 1e9
    return 1 / median


def expected_bytes(shown: str) -> float:
    scale = {"GB": 10**9, "MB": 10**6}[shown.split()[1]]
    return number(shown) * scale, scale


def watched(page) -> list[str]:
    """The errors ``page`` meets from now on: the console's, the page's own and failed requests."""
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("requestfailed", lambda req: errors.append(f"request failed: {req.url}"))
    return errors


def test_browser_tables_show_the_figures_the_result_files_hold(browser_page):
    page, base, errors = browser_page
    raw = raw_records()
    page.goto(f"{base}/pages/ceilings.html", wait_until="networkidle")
    # each cell's record, kind and text as the reader sees it (innerText), read in one call
    cells = page.locator("#family-table a[data-kind]").evaluate_all(
        "links => links.map(a => [a.getAttribute('data-record'), a.getAttribute('data-kind'), a.innerText])")
    assert cells
    seen = set()
    for rid, kind, shown in cells:
        rec = raw[rid]
        if kind == "rate":
            assert close(shown, expected_rate(rec)), (rid, shown, expected_rate(rec))
        elif kind == "host":
            value, scale = expected_bytes(shown)
            assert abs(value - rec["memory"]["host.max_rss"]) <= 0.5 * scale * 10 ** -text_decimals(shown.split()[0])
        seen.add(rid)
    # The latest measured ceiling of each GPU box (model and count) and library versions (those the
    # pages compare: model.VERSION_LIBS; a tool's version, asv's say, is no axis) is on the page.
    newest = {}
    for rid, rec in raw.items():
        gpus = rec["environment"]["devices"]["gpus"]
        if rec["case"] == "ceilings" and rec["outcome"] == "ok" and gpus:
            libs = {k: v for k, v in rec["environment"]["libraries"].items() if k in model.VERSION_LIBS}
            box = (gpus[0]["name"], len(gpus), json.dumps(libs, sort_keys=True), rec["params"]["probe"])
            if box not in newest or rec["created"] > raw[newest[box]]["created"]:
                newest[box] = rid
    assert {name for name, *_ in newest} >= {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    for box, rid in newest.items():
        assert rid in seen, f"{box} is missing from the table"
    assert errors == []


def test_the_fits_page_tables_the_size_each_search_found_per_budget(site):
    page = (site / "pages" / "fits.html").read_text()
    raw = raw_records()
    shown = re.findall(r'data-record="(r-[0-9a-f]+)" data-kind="answer">(\d+)<', page)
    found = {rid: rec for rid, rec in raw.items() if rec["case"] == "fits" and rec["outcome"] == "ok"}
    assert found and shown
    for rid, value in shown:
        check = raw[rid]["check"]
        assert int(value) == next(v for k, v in check.items() if k.startswith("max_"))
    # an answer where the search stopped is marked a lower bound, and only such an answer
    marked = set(re.findall(r'≥</span> <a href="[^"]+" data-record="(r-[0-9a-f]+)" data-kind="answer"', page))
    assert marked == {rid for rid, _ in shown if raw[rid]["check"].get("max_seq_len") == 2**16}
    budgets = re.search(r'id="answers-table">\s*<tr>(.*?)</tr>', page, re.S).group(1)
    assert re.findall(r"<th>(\w+)</th>", budgets)[2:] == ["16GB", "24GB", "40GB", "80GB", "card"]  # as declared


def test_the_fits_page_marks_an_answer_at_an_older_search_limit_a_lower_bound_and_no_exact_one(tmp_path):
    # the H200's card searches stopped at the old limit of 2**16 tokens; the H100's found exact answers
    lower = RESULTS / "records/nvidia-h200-x1/1f1ac8ea-20261124T195405-8d7e30.jsonl"
    exact = RESULTS / "records/nvidia-h100-80gb-hbm3-x1/1dedbd7b-20261125T094200-0b5610.jsonl"
    results_with(tmp_path, lower, exact)
    # and save_on_cpu at 24GB on an H200, whose next batch the host's memory could not hold
    host = RESULTS / "records/nvidia-h200-x1/cddf8cc1-20261125T120830-fd5868.jsonl"
    recs = [json.loads(line) for line in host.read_text().splitlines()]
    for rec in recs:
        rec["check"]["host_short_at"] = 33 if rec["params"]["technique"] == "save_on_cpu" else None
    (tmp_path / "results/records/nvidia-h200-x1" / host.name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "pages").mkdir()
    build.write_pages(tmp_path / "results", tmp_path / "pages")
    page = (tmp_path / "pages" / "fits.html").read_text()
    answers = re.findall(r'(≥</span> )?<a href="[^"]+" data-record="r-[0-9a-f]+" data-kind="answer">(\d+)<', page)
    assert sorted(int(v) for mark, v in answers if mark) == [2**16, 2**16]  # fp32 and bf16 at the H200's card
    assert {51328, 55552, 74240, 76544} <= {int(v) for mark, v in answers if not mark}
    host_set = re.findall(r'data-kind="answer">(\d+)</a><span class="host-set"', page)
    assert host_set == ["32"]  # the host's memory set it; cpu_offload's 16 the device did


def test_the_fits_page_marks_only_the_answers_searched_under_the_old_short_cap(tmp_path):
    # checkpoint on the H100: 40GB searched under the old cap (77), then at the budget's bytes (78);
    # 80GB only under the old cap; the whole card, never capped
    h100 = RESULTS / "records/nvidia-h100-80gb-hbm3-x1"
    results_with(tmp_path, *(h100 / name for name in ("1a42ca54-20261125T001441-bbf18a.jsonl",
                                                       "0586d386-20261125T153851-dfded6.jsonl",
                                                       "9009c493-20261125T171513-718970.jsonl")))
    (tmp_path / "pages").mkdir()
    build.write_pages(tmp_path / "results", tmp_path / "pages")
    page = (tmp_path / "pages" / "fits.html").read_text()
    table = re.search(r'id="answers-table">(.*?)</table>', page, re.S).group(1)
    row = next(tr for tr in table.split("<tr>") if "technique=checkpoint" in tr and "over=batch" in tr)
    answers = re.findall(r'data-kind="answer">(\d+)</a>(<span class="old-cap")?', row)
    assert [(int(v), bool(mark)) for v, mark in answers] == [
        (23, False), (36, False), (78, False), (157, True), (167, False)]
    # the mark's title is the markdown tables' note for it, in the same words
    title = re.search(r'<span class="old-cap" title="([^"]*)"', row).group(1)
    assert unescape(title) == tables.NOTES[tables.OLD_CAP][2:]
    # each of these searches was filed before today's rule, and is marked so, in the note's words too
    assert row.count('<span class="before-rule"') == len(answers) == 5
    title = re.search(r'<span class="before-rule" title="([^"]*)"', row).group(1)
    assert unescape(title) == tables.NOTES[tables.BEFORE_RULE][2:]


# -- safe pages ----------------------------------------------------------------------------------

def small_results(tmp_path) -> Path:
    src = RESULTS / "records" / "nvidia-h100-80gb-hbm3-x1" / "bfa680ee-20261124T003930-ab748b.jsonl"
    dest = tmp_path / "results" / "records" / "box"
    dest.mkdir(parents=True)
    shutil.copy(src, dest / src.name)
    return tmp_path / "results"


def test_a_rate_on_the_pages_is_read_against_its_own_hosts_ceiling_though_a_later_host_measured_one(tmp_path):
    """Two H100 hosts of one session: the first measured its ceilings and then working sets past
    24GB; the second measured its own ceilings later."""
    h100 = RESULTS / "records" / "nvidia-h100-80gb-hbm3-x1"
    a_ceilings, a_beyond, b_ceilings = (h100 / f"b2b2626b-20261125T{run}.jsonl"
                                        for run in ("063343-6bf09b", "064838-6ddbf7", "065217-891639"))
    def beyond_page(name, *files):
        results = results_with(tmp_path / name, *files)
        (tmp_path / name / "pages").mkdir()
        build.write_pages(results, tmp_path / name / "pages")
        return (tmp_path / name / "pages" / names.page_name("beyond")).read_text()
    marked = "another host&#39;s ceiling"  # as the page escapes it
    own = beyond_page("both", a_ceilings, a_beyond, b_ceilings)
    assert "(0.99 of pinned H2D)" in own and marked not in own
    assert marked in beyond_page("other", a_beyond, b_ceilings)


def test_names_become_collision_free_slugs_inside_the_folder():
    assert names.page_name("unified") == "unified.html"
    hostile = ["../../x", "a/b", "javascript:alert(1)", "index", "A", "a", "x" * 300]
    files = [names.page_name(n) for n in hostile]
    assert len(set(files)) == len(files) and all(re.fullmatch(r"[a-z0-9_-]{1,60}\.html", n) for n in files)
    with pytest.raises(names.UnsafePath, match="outside"):
        names.inside(Path("/tmp/out"), "../evil.html")


def test_a_failed_build_leaves_the_old_pages_whole_and_exits_2(tmp_path, monkeypatch, capsys):
    results, out = small_results(tmp_path), tmp_path / "pages"
    assert build.main(results=str(results), out=str(out)) == 0
    before = {p.name: p.read_text() for p in out.iterdir()}
    monkeypatch.setattr(names, "page_name", lambda case: f"../../{case}.html")  # a page that would escape
    assert build.main(results=str(results), out=str(out)) == 2
    err = capsys.readouterr().err
    assert "outside" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pages", "results"]  # no temporary folder left


def test_pages_refuse_a_folder_of_other_files_and_a_missing_results_folder(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    results = small_results(tmp_path)
    assert cli.main(["pages", "--no-asv", "--results", str(results), "--out", str(tmp_path / "mine")]) == 2
    assert "did not make (notes.txt)" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert cli.main(["pages", "--no-asv", "--results", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


def test_pages_of_another_results_folder_leave_the_repositorys_asv_site_alone(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(asv_site, "publish", lambda *a, **k: calls.append(a) or 0)
    assert cli.main(["pages", "--results", str(small_results(tmp_path)), "--out", str(tmp_path / "o")]) == 0
    assert calls == []


def test_summary_of_a_missing_path_exits_2_naming_the_fix(capsys):
    assert cli.main(["summary", "/nonexistent"]) == 2
    assert "name a record file (.jsonl) or a folder of them" in capsys.readouterr().err


def test_table_shows_the_loss_parallel_lm_records_hold(capsys):
    assert cli.main(["table", "parallel_lm", "--down", "strategy", "--show", "loss", "--where", "device=cuda",
                     "--where", "machine=H200", "--results", str(RESULTS)]) == 0
    assert re.search(r"\| single \| 10\.\d{3} \|", plain(capsys.readouterr().out))


def test_table_names_the_check_keys_that_exist(capsys):
    assert cli.main(["table", "fits", "--down", "technique,machine", "--across", "budget", "--where", "over=batch",
                     "--show", "check:typo", "--results", str(RESULTS)]) == 2
    err = capsys.readouterr().err
    assert "check key 'typo'" in err and "max_batch" in err


# -- "Which way out?": its rule and answers are tested on planted records in test_chooser.py -------

def test_browser_the_chooser_fits_1400px_and_shows_one_picked_answer(browser_page, site):
    page, base, errors = browser_page
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{base}/pages/chooser.html", wait_until="networkidle")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    for card, workload in (("p100-16gb", "resnet50_1024"), ("p100-16gb", "seed000"), ("l4-24gb", "lm")):
        page.select_option("#card", card)
        page.select_option("#workload", workload)
        visible = page.locator("section.choice:visible")
        assert visible.count() == 1 and visible.get_attribute("id") == f"{card}--{workload}"
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    page.screenshot(path=str(site / "chooser-1400.png"))  # what the reader saw, kept with the test's pages
    assert errors == []


def test_the_seeds_page_holds_the_docs_seed_tables_each_cell_linked_to_the_record_it_shows(site):
    import html
    page = (site / "pages" / "seeds.html").read_text()
    from harness.report import docs
    doc = docs.seeds_doc(model.load_rows(RESULTS))  # the doc these records give, as `harness docs` writes it
    md_rows = [line[2:-2].split(" | ") for line in plain(doc).splitlines()
               if line.startswith("| ") and not line.startswith("| :---")]
    html_rows = [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", row)]
                 for row in re.findall(r"<tr>(.*?)</tr>", page)]
    assert md_rows and html_rows == md_rows
    records = raw_records()
    for section in re.findall(r'<section class="seed".*?</section>', page, flags=re.S):
        case = re.search(r"python3 -m harness table (\w+)", section).group(1)
        links = re.findall(r'data-record="(r-[0-9a-f]{10})">([^<]*)</a>', section)
        assert links, case
        for rid, text in links:
            rec = records[rid]
            assert rec["case"] == case
            shown = ("does_not_fit" if text.startswith("does not fit")
                     else "failed" if text.startswith("failed") else "ok")
            assert rec["outcome"] == shown, (rid, text)


def test_provenance_holds_the_records_the_figures_come_from_and_not_the_runs_they_replaced(tmp_path):
    from harness.workloads import synthetic
    results = tmp_path / "results"
    files = synthetic.write(results, 3 * len(synthetic.CONFIGS) * len(synthetic.MACHINES))
    assert build.main(results=str(results), out=str(tmp_path / "pages")) == 0
    pages = tmp_path / "pages"
    held = {rid for p in pages.glob("provenance-*.html") for rid in re.findall(r'id="(r-[0-9a-f]{10})"', p.read_text())}
    linked = {rid for p in pages.glob("*.html") for rid in re.findall(r'href="provenance-[^"#]+#(r-[0-9a-f]{10})"',
                                                                      p.read_text())}
    assert held == linked

    def rids(path):
        source = str(path.relative_to(results.parent))
        return {model.record_id(source, n) for n in range(1, len(path.read_text().splitlines()) + 1)}
    newest = {f.parent.name: f for f in files}  # each machine's last run: every figure of that machine is its
    assert set().union(*map(rids, newest.values())) <= held
    assert not rids(files[0]) & held  # the first run of a machine that ran again: no figure reads it
    counts = re.findall(r"</a>: (\d+) of (\d+) record\(s\)</li>", (pages / "provenance.html").read_text())
    assert sum(int(n) for n, _ in counts) == len(held)  # the index counts what each page holds, of all on file
    assert sum(int(m) for _, m in counts) == len(files) * len(synthetic.CONFIGS)


def test_a_records_memory_figure_is_the_same_in_its_answer_line_and_on_its_chart(site):
    """One memory figure per record: the table's peak and the chart's, the same text under the same name."""
    text = (site / "pages" / "tricks.html").read_text()
    table = {rid: (kind, shown) for rid, kind, shown in re.findall(
        r'data-record="(r-[0-9a-f]{10})" data-kind="head-peak" data-peak="([^"]*)">([^<]*)<', text)}
    drawn = [json.loads(unescape(spec)) for spec in
             re.findall(r'<script type="application/json" class="chart-data">(.*?)</script>', text, re.S)]
    both = 0
    for chart in drawn:
        assert len(chart["points"]) <= 12  # a dozen points a chart at most
        for p in chart["points"]:
            rid = p["href"].split("#")[1]
            if rid in table:
                kind, shown = table[rid]
                assert chart["x_label"] == f"{kind} (GB)" and p["lines"][1] == f"{shown} {kind}", (rid, p, table[rid])
                both += 1
    assert both > 10


def test_the_index_opens_with_the_readmes_headline_each_cell_linked_to_its_record(site):
    text = (site / "pages" / "index.html").read_text()
    made = HEADLINE.grid(model.load_rows(FROZEN))
    shown = re.search(r'<table id="headline-table">(.*?)</table>', text, re.S)
    assert shown and text.index('id="headline-table"') < text.index('id="which-way-out"')
    cells = [unescape(c) for c in re.findall(r'data-record="r-[0-9a-f]{10}">([^<]*)</a>', shown.group(1))]
    assert cells == [t for _, line in made.lines for t, row in line if row is not None] and cells


def test_the_predict_page_shows_the_docs_score_per_axis_cell_and_cost_tables_of_the_same_records(frozen_pages):
    from harness.report import estimates, search_cost
    rows = model.load_rows(FROZEN)
    found = estimates.cells(rows, FROZEN)
    assert found  # the frozen records hold what-fits searches with their probes
    page = (frozen_pages / "predict.html").read_text()
    shown = [[[unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", tr)] for tr in re.findall(r"<tr>(.*?)</tr>", t)]
             for t in re.findall(r'<table class="predict-table">(.*?)</table>', page, re.S)]
    costs = [[head, *lines] for _, head, lines in search_cost.tables(rows) if lines]
    assert costs  # the frozen records hold cells searched again
    assert shown == [[estimates.SCORE_HEADER, *estimates.summary(found)],
                     [estimates.AXIS_HEADER, *estimates.by_axis(found)],
                     [estimates.HEADER, *estimates.rows_of(found)], *costs]
    # the cells' marks are said under them, as on the docs' page, with each refusal's reason
    text = unescape(re.sub(r"<[^>]+>", "", page))
    assert estimates.PROBED_MARK.replace("`", "") in text and estimates.REFUSED_MARK in text
    assert estimates.STOPPED_MARK in text and estimates.RULE_MARK.replace("`", "") in text
    refused = {c.refused for c in found if c.refused}
    assert refused and all(reason in text for reason in refused)
    assert all(said.replace("`", "") in text for said, _, _ in search_cost.tables(rows))  # what each table is
    assert '<a href="predict.html">' in (frozen_pages / "index.html").read_text()  # reached from every page's nav
