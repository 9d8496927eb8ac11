"""What a reader sees, in Chromium at 1400 px, on the pages built from a frozen copy of records (tests/data/results):
no page scrolls sideways, every figure of the answer tables
equals what its record files hold (computed here from the files, never typed), the tables sort
and filter, and a screenshot of every page is kept in the test's output folder."""
import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

import pytest

from harness import cases

from harness.report.pages import build
from harness.report.families import family
from harness.report.specs import HEADLINE
from conftest import FROZEN, PHONE
from test_pages import QuietHandler, raw_records, watched

WIDTH = 1400
# The units the answer tables use, in the order the README reads them: tokens/s for LMs,
# samples/s for images, then arithmetic, bytes moved, a graph's nodes. label -> (work key, scale).
UNITS = {"k tokens/s": ("tokens", 1e3), "k samples/s": ("samples", 1e3), "TFLOP/s": ("flops", 1e12),
         "GB/s": ("bytes", 1e9), "M nodes/s": ("nodes", 1e6)}


@pytest.fixture(scope="module")
def pages(frozen_pages) -> Path:
    """The frozen copy's pages, standing for the committed results/: one build, shared with test_pages.py."""
    return frozen_pages


@pytest.fixture(scope="module")
def served(frozen_site):
    """The frozen site (pages/ and asv's html/) served over HTTP, as a published site is read."""
    handler = functools.partial(QuietHandler, directory=str(frozen_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def page(pages, browser):
    tab = browser.new_page(viewport={"width": WIDTH, "height": 900})
    yield tab, watched(tab)
    tab.context.close()


OPEN_ALL = "document.querySelectorAll('details').forEach(d => d.open = true)"
LINES = """() => [...document.querySelectorAll('table.headline tbody tr[data-record]')].map(tr => {
  const a = k => tr.querySelector(`[data-kind=${k}]`);
  return {rid: tr.dataset.record, base: tr.dataset.base, rate: a('head-rate') && a('head-rate').innerText,
          peak: a('head-peak') && a('head-peak').innerText, peak_kind: a('head-peak') && a('head-peak').dataset.peak,
          rate_x: a('rate-x').innerText.trim(), peak_x: a('peak-x').innerText.trim()};
})"""


def family_pages(pages: Path) -> list[Path]:
    return [p for p in sorted(pages.glob("*.html"))
            if p.name not in {"index.html", "chooser.html"} and not p.name.startswith("provenance")]


@pytest.fixture(scope="module")
def visits(page, pages) -> dict:
    """Each page met once, as a reader meets it: its height on arrival and a screenshot of that
    (kept in the test's output folder), then, every table opened, its width, the answer's lines and
    the errors the page met."""
    tab, errors = page
    shots = pages.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    seen = {}
    for path in sorted(pages.glob("*.html")):
        before = len(errors)
        tab.goto(path.as_uri())
        height = tab.evaluate("document.documentElement.scrollHeight")
        # what a reader sees on arrival; JPEG, which Chromium encodes in a fraction of PNG's time
        tab.screenshot(path=str(shots / f"{path.stem}.jpg"), type="jpeg")
        # every table opened, then its width (read after the opening: a forced layout) and the answer's lines
        opened = tab.evaluate(f"() => {{ {OPEN_ALL}; return [document.documentElement.scrollWidth, ({LINES})()]; }}")
        seen[path.name] = {"height": height, "width": opened[0], "lines": opened[1], "errors": errors[before:]}
    return seen


def test_every_page_loads_without_console_errors_and_so_do_the_served_site_and_asvs(page, visits, served):
    """Every page of pages/ (met once, above), then the site served over HTTP as it is published:
    its front page, the largest family page and asv's html/ beside them. No console error, no
    error of the page's own, no request that failed."""
    assert {name: seen["errors"] for name, seen in visits.items() if seen["errors"]} == {}
    tab, errors = page
    for url in ("pages/index.html", "pages/tricks.html", "html/index.html"):
        before = len(errors)
        tab.goto(f"{served}/{url}", wait_until="networkidle")
        assert errors[before:] == [], url
    assert "asv" in tab.title().lower() or tab.locator("body").inner_text()


def test_no_page_scrolls_sideways_at_1400px_even_with_every_table_open(page, pages, visits):
    _, errors = page
    for name, seen in visits.items():
        assert seen["width"] <= WIDTH, f"{name} is {seen['width']} px wide at {WIDTH} px"
    assert sorted(visits) == sorted(p.name for p in pages.glob("*.html"))
    assert len(list((pages.parent / "screenshots").glob("*.jpg"))) == len(visits)
    assert errors == []


def expected_rate(rec: dict) -> tuple[float, str]:
    work, median = rec["work"], rec["timing"]["median_s"]
    for label, (key, scale) in UNITS.items():
        if work.get(key):
            return work[key] / median / scale, label
    return 1 / median, "steps/s"


def expected_peak(rec: dict, base: dict | None, kind: str) -> float | None:
    """The allocator's highest peak where both rows report one, else NVML's gain on the device."""
    def allocated(r):
        peaks = [v for k, v in r["memory"].items()
                 if k.startswith("allocator.") and ".max_" in k and "reserved" not in k]
        return max(peaks) if peaks else None
    if kind == "allocated":
        assert allocated(rec) and (base is None or allocated(base))
        return allocated(rec)
    mem = rec["memory"]
    gains = [v - mem.get(k.replace("device.used.", "device.used_before."), 0) for k, v in mem.items()
             if k.startswith("device.used.")]
    return max(gains) if gains else None


def close(shown: str, value: float) -> bool:
    """Within half a unit of the last digit shown."""
    num = shown.split()[0].rstrip("x").replace(",", "")
    digits = len(num.split(".")[1]) if "." in num else 0
    return abs(float(num) - value) <= 0.5 * 10 ** -digits + 1e-9


def gpus(rec: dict) -> list[tuple]:
    return [(g["name"], g["memory_total"]) for g in rec["environment"]["devices"]["gpus"]]


def check_line(cells: dict, raw: dict, case: str) -> None:
    rec, base = raw[cells["rid"]], raw.get(cells["base"])
    if base is not None:  # the baseline holds the family's declared values, on the same GPU
        params = cases.get(base["case"]).upgrade(base["params"])  # as filed, with parameters added since
        assert all(str(params.get(k)) == str(v) for k, v in family(case).baseline), cells
        assert gpus(base) == gpus(rec), cells
    if cells["rate"] is None:
        return
    rate, unit = expected_rate(rec)
    assert cells["rate"].endswith(unit) and close(cells["rate"], rate), (cells, rate, unit)
    if cells["rate_x"] != "-":
        assert close(cells["rate_x"], rate / expected_rate(base)[0]), cells
    if cells["peak"] is not None:
        peak = expected_peak(rec, base, cells["peak_kind"])
        scale = {"GB": 1e9, "MB": 1e6}[cells["peak"].split()[1]]
        assert close(cells["peak"], peak / scale), (cells, peak)
        if cells["peak_x"] != "-":
            assert close(cells["peak_x"], peak / expected_peak(base, rec, cells["peak_kind"])), cells



def test_every_figure_of_the_answer_equals_its_record(pages, visits):
    raw = raw_records()
    lines = 0
    for path in family_pages(pages):
        for cells in visits[path.name]["lines"]:
            check_line(cells, raw, raw[cells["rid"]]["case"])
            lines += 1
    assert lines


def test_the_answer_comes_first_and_every_parameter_set_one_click_below(page, pages):
    tab, _ = page
    tab.goto((pages / "tricks.html").as_uri())
    order = tab.evaluate("""() => ['h1', '#answer-words', '#answer', 'details.gpu table.headline',
        'details.gpu figure canvas', '#every-figure-details', '#fits-details', '#how', '#provenance-link']
        .map(s => document.querySelector(s).getBoundingClientRect().top)""")
    assert order == sorted(order) and order[4] > 0  # the first GPU's table, then its charts, on show; method last
    # the README's headline workload heads the first table: the README's answer is the page's first
    heading = tab.locator("table.headline tr.group").first.inner_text().split()
    # (the ways the README lists are rows of that group, not its heading)
    assert all(pair in heading for pair in HEADLINE.where if not pair.startswith("technique=")), heading
    sections = tab.locator("details.gpu")
    assert sections.count() >= 2 and sections.first.get_attribute("open") is not None
    assert all(sections.nth(i).get_attribute("open") is None for i in range(1, sections.count()))
    assert tab.locator("#every-figure-details").get_attribute("open") is None
    assert tab.locator("#fits-details").get_attribute("open") is None
    assert tab.locator("#provenance-link").get_attribute("href") == "provenance-tricks.html"


def test_a_gpu_picked_in_the_filter_opens_its_own_section(page, pages):
    tab, errors = page
    tab.goto((pages / "tricks.html").as_uri())
    opened = "() => [...document.querySelectorAll('details.gpu')].filter(d => d.open).map(d => d.dataset.gpu)"
    first = tab.evaluate(opened)
    other = tab.evaluate("() => [...document.querySelectorAll('details.gpu')].map(d => d.dataset.gpu)")[-1]
    assert len(first) == 1 and other not in first
    tab.select_option("#filter-gpu", other)
    assert tab.evaluate(opened) == [other]
    tab.select_option("#filter-gpu", "")
    assert tab.evaluate(opened) == first  # no GPU picked: the sections as the page came
    assert errors == []


# A reader arrives at one GPU's answer with the rest folded: the bound leaves room for records to
# come, not for a page that shows every GPU's tables and charts at once.
TALLEST = 10_000


def test_no_family_page_is_taller_than_a_reader_scrolls_on_arrival(pages, visits):
    for path in family_pages(pages):
        height = visits[path.name]["height"]
        assert height <= TALLEST, f"{path.name} is {height} px tall at {WIDTH} px"


def test_skipped_only_parameter_sets_fold_into_one_counted_line_and_a_cpu_box_takes_no_gpu_column(page, pages):
    tab, _ = page
    raw = raw_records().values()
    skipped_everywhere = {json.dumps(r["params"], sort_keys=True) for r in raw if r["case"] == "unified"} - {
        json.dumps(r["params"], sort_keys=True) for r in raw if r["case"] == "unified" and r["outcome"] != "skipped"}
    tab.goto((pages / "unified.html").as_uri())
    assert tab.locator("#folded summary").inner_text().startswith(f"{len(skipped_everywhere)} parameter set")
    heads = tab.locator("#family-table thead th").all_inner_texts()
    assert not any(h.startswith("cpu-") for h in heads), heads  # the CPU box skipped every unified case


def test_tables_sort_and_filter_from_file(page, pages):
    tab, errors = page
    tab.goto((pages / "tricks.html").as_uri())
    raw = raw_records()
    rids = ("() => [...document.querySelectorAll('table.headline tbody tr[data-record]')]"
            ".filter(r => !r.hidden).map(r => r.dataset.record)")
    everything = tab.evaluate(rids)
    tab.select_option("#filter-outcome", "failed")
    failed = tab.evaluate(rids)
    assert failed and len(failed) < len(everything)
    assert sorted(failed) == sorted(r for r in everything if raw[r]["outcome"] == "failed")
    tab.select_option("#filter-gpu", "nvidia-h200-x1")
    assert all(raw[r]["environment"]["devices"]["gpus"][0]["name"] == "NVIDIA H200" for r in tab.evaluate(rids))
    tab.select_option("#filter-outcome", "")
    tab.select_option("#filter-gpu", "")
    head = tab.locator("table.headline").first.locator("thead th").nth(3)  # x baseline rate
    groups = ("t => [...t.tBodies].map(b => [b.rows[0].className, "
              "...[...b.rows].slice(1).map(r => r.cells[3].innerText)])")
    before = tab.locator("table.headline").first.evaluate(groups)
    head.click()
    after = tab.locator("table.headline").first.evaluate(groups)
    assert len(after) > 1 and all(g[0] == "group" for g in after)  # each group's heading stays on top
    assert [sorted(g) for g in after] == [sorted(g) for g in before]  # a line stays in its group
    for shown in (g[1:] for g in after):
        numbers = [float(s.rstrip("x")) for s in shown if s != "-"]
        assert numbers == sorted(numbers) and shown[:len(numbers)] == [s for s in shown if s != "-"]
    tab.select_option("#filter-outcome", "failed")
    shown_groups = tab.evaluate("""() => [...document.querySelectorAll('table.headline tbody')].map(b =>
        [b.rows[0].hidden, [...b.rows].slice(1).every(r => r.hidden)])""")
    # a heading goes with its lines
    assert [hidden for hidden, _ in shown_groups] == [empty for _, empty in shown_groups]
    assert not all(hidden for hidden, _ in shown_groups)
    tab.select_option("#filter-outcome", "")
    assert errors == []


def test_each_group_of_the_answer_is_headed_by_the_workload_its_lines_ran(page, pages):
    tab, _ = page
    raw = raw_records()
    tab.goto((pages / "tricks.html").as_uri())
    tab.evaluate(OPEN_ALL)
    groups = tab.evaluate("""() => [...document.querySelectorAll('table.headline tbody')].map(b =>
        [b.rows[0].innerText.trim(), [...b.querySelectorAll('tr[data-record]')].map(r => r.dataset.record)])""")
    assert len(groups) > 1
    for heading, rids in groups:
        assert rids
        for rid in rids:
            params = {k: str(v) for k, v in raw[rid]["params"].items()}
            said = dict(kv.split("=", 1) for kv in heading.split())
            assert said and all(params.get(k) == v for k, v in said.items()), (heading, rid)



def test_committed_results_carry_no_local_label_and_another_folder_is_labelled_local(pages, tmp_path):
    assert 'id="local-label"' not in (pages / "index.html").read_text()
    src = sorted((FROZEN / "records").rglob("*.jsonl"))[0]
    dest = tmp_path / "results" / "records" / src.parent.name
    dest.mkdir(parents=True)
    shutil.copy(src, dest / src.name)
    assert build.main(results=str(tmp_path / "results"), out=str(tmp_path / "pages")) == 0
    index = (tmp_path / "pages" / "index.html").read_text()
    assert 'id="local-label"' in index and f"local results from {tmp_path / 'results'}" in index


def test_the_versions_table_sorts_by_its_ratio(page, pages):
    tab, errors = page
    tab.goto((pages / "index.html").as_uri())
    ratios = """() => [...document.querySelectorAll('#version-table tbody tr')]
        .map(r => parseFloat(r.cells[5].innerText))"""
    if not tab.evaluate(ratios):
        pytest.skip("the committed results hold no case under two sets of library versions")
    tab.locator("#version-table thead th").nth(5).click()
    assert tab.evaluate(ratios) == sorted(tab.evaluate(ratios))
    tab.locator("#version-table thead th").nth(5).click()
    assert tab.evaluate(ratios) == sorted(tab.evaluate(ratios), reverse=True)
    assert errors == []


# -- on a phone: Chromium emulating one (conftest.PHONE), not a narrow desktop window ------------------

FOLD = PHONE["viewport"]["height"]
# The first answer of each kind of page, the first in the document that matches: a family's answer
# line, the largest sizes, the table of every parameter set (families without an answer), the
# README's headline, a seed's table, a record.
FIRST_ANSWER = ("table.headline tr[data-record], #answers-table tr + tr, #family-table tbody tr, "
                "#headline-table tr + tr, table.seed-table tr + tr, table.predict-table tr + tr, details.record, "
                "#provenance-pages li")
# Every visible piece of text, at the size a reader sees it: its CSS size times the page's zoom
# (a page laid out wider than the screen is shown shrunk), the smallest first.
SMALLEST_TEXT = """() => {
  const out = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const e = n.parentElement;
    if (!n.data.trim() || !e || e.closest('script, style')) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    if (![...r.getClientRects()].some(b => b.width > 0 && b.height > 0)) continue;
    out.push([parseFloat(getComputedStyle(e).fontSize) * visualViewport.scale, n.data.trim().slice(0, 40)]);
  }
  return out.sort((a, b) => a[0] - b[0]).slice(0, 3);
}"""


@pytest.fixture(scope="module")
def phone(browser):
    context = browser.new_context(**PHONE)
    tab = context.new_page()
    errors = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab, errors
    context.close()


@pytest.fixture(scope="module")
def phone_visits(phone, pages) -> dict:
    """Each page met once on the phone: its layout width and first answer on arrival, then, every
    table opened, its scroll width and its smallest text."""
    tab, _ = phone
    seen = {}
    for path in sorted(pages.glob("*.html")):
        tab.goto(path.as_uri())
        seen[path.name] = tab.evaluate(f"""() => {{
          const a = document.querySelector({FIRST_ANSWER!r}), box = a && a.getBoundingClientRect();
          const arrived = {{layout: innerWidth, answer: box && [box.top, box.bottom]}};
          {OPEN_ALL};
          return {{...arrived, scroll: document.documentElement.scrollWidth, small: ({SMALLEST_TEXT})()}};
        }}""")
    return seen


def test_every_page_reads_on_a_phone_without_sideways_scroll_at_11px_or_more(phone, pages, phone_visits):
    width = PHONE["viewport"]["width"]
    assert sorted(phone_visits) == sorted(p.name for p in pages.glob("*.html"))
    for name, seen in phone_visits.items():
        assert seen["layout"] == width, f"{name} is laid out {seen['layout']} px wide: no viewport tag?"
        assert seen["scroll"] <= width, f"{name} scrolls sideways: {seen['scroll']} px"
        assert seen["small"] and seen["small"][0][0] >= 11, (name, seen["small"])
    assert phone[1] == []


def test_every_pages_first_answer_is_above_the_fold_on_a_phone(phone_visits):
    for name, seen in phone_visits.items():
        if name == "chooser.html":  # its answer is the card picked: the next test picks each
            continue
        assert seen["answer"], f"{name} shows no answer"
        assert seen["answer"][1] <= FOLD, f"{name}: its first answer ends {seen['answer'][1]:.0f} px down"


def test_the_choosers_answer_is_above_the_fold_on_a_phone_for_every_card_and_workload(phone, pages):
    tab, errors = phone
    tab.goto((pages / "chooser.html").as_uri())
    picks = tab.evaluate("""() => [...document.querySelectorAll('#card option')].flatMap(c =>
        [...document.querySelectorAll('#workload option')].map(w => [c.value, w.value]))""")
    assert len(picks) > 1
    for card, workload in picks:
        tab.select_option("#card", card)
        tab.select_option("#workload", workload)
        shown = tab.evaluate("""() => [...document.querySelectorAll('section.choice')].filter(s => !s.hidden)
            .map(s => { const b = s.querySelector('h2 + *').getBoundingClientRect();
                        return [s.id, b.top, b.bottom]; })""")
        assert [s[0] for s in shown] == [f"{card}--{workload}"]
        assert shown[0][1] < FOLD, (card, workload, shown)  # the answer starts on the first screen
    assert errors == []
