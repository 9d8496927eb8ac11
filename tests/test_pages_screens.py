"""What a reader sees on a phone (390 px) and a desktop (1400 px), in Chromium, on pages built from
records planted here: no page scrolls sideways, no value breaks inside a word, chart text is at
least 11 px, no key covers a chart's plot, a family page opens on the GPU that compares most with
axes from zero, and a chart's point names itself on hover or tap and opens its record on click.
asv's graph legend, styled by what we publish, stands beside flot's plot, not over it."""
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import PHONE, fake_devices
from gate_records import record
from harness.drive.asv import asv_site
from harness.measure.instruments.environment import Environment
from harness.report.pages import build

WIDTHS = (390, 1400)
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
LM = {"device": "cuda", "batch": 16, "depth": 12, "width": 1024, "seq_len": 1024}
# (GPU, GPUs, strategy, micro-batches, median step s, peak GB): the 1-GPU box can run only single;
# the 2-GPU box ran five ways, so its page section is the answer.
LINES = [(H100, 1, "single", 1, 0.4521, 30), (H200, 2, "single", 1, 0.4500, 30), (H200, 2, "ddp", 1, 0.231, 32),
         (H200, 2, "fsdp", 1, 0.240, 18), (H200, 2, "pipeline", 4, 0.330, 16), (H200, 2, "pipeline", 8, 0.345, 15)]


def lm_record(gpu: str, count: int, strategy: str, micro: int, median: float, peak_gb: int) -> dict:
    rec = record("parallel_lm", {**LM, "strategy": strategy, "gpus": count, "micro_batches": micro,
                                 "transport": "nvlink_or_whatever_is_fastest"}, median, gpu=gpu,
                 work={"tokens": 16 * 1024},
                 memory={"device.used.gpu0": peak_gb * 10**9, "device.used_before.gpu0": 10**9,
                         "host.max_rss": 3 * 10**9})
    env = Environment.from_dict(rec["environment"])
    rec["environment"] = replace(env, devices=fake_devices(gpu, count, total=85520809984)).to_dict()
    return rec


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("screens")
    folder = root / "results" / "records" / "planted"
    folder.mkdir(parents=True)
    (folder / "lm.jsonl").write_text("".join(json.dumps(lm_record(*line)) + "\n" for line in LINES))
    assert build.main(results=str(root / "results"), out=str(root / "pages")) == 0
    return root / "pages"


# Every font a canvas writes text in, as it writes it: what a chart draws, tooltip included.
CANVAS_FONTS = ("""window.canvasFonts = [];
const fillText = CanvasRenderingContext2D.prototype.fillText;
CanvasRenderingContext2D.prototype.fillText = function () { canvasFonts.push(this.font); """
                """return fillText.apply(this, arguments); };""")


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def tab(request, browser):
    """A tab ``request.param`` px wide, with the page errors it met: at 390 px a phone, as Chromium
    emulates one (``PHONE``: the page's viewport tag decides its layout width, touch, 3 device pixels
    a CSS pixel), not a narrow desktop window."""
    width = request.param
    context = browser.new_context(**(PHONE if width < 600 else {"viewport": {"width": width, "height": 800}}))
    context.add_init_script(CANVAS_FONTS)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on("console", lambda msg: page.errors.append(msg.text) if msg.type == "error" else None)
    yield page
    assert page.errors == []
    context.close()


OPEN_ALL = "document.querySelectorAll('details').forEach(d => d.open = true)"
# Each whitespace-separated word of every table cell: those drawn on more than one line.
BROKEN_WORDS = """() => {
  const out = [];
  for (const cell of document.querySelectorAll('td, th')) {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const lines = new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
        if (lines.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
}"""
SCROLLING_BOXES = ("() => [...document.querySelectorAll('.wide, table')]"
                   ".filter(e => e.scrollWidth > e.clientWidth + 1).length")


def test_no_page_scrolls_sideways_and_no_value_breaks_inside_a_word(tab, pages):
    width = tab.viewport_size["width"]
    for path in sorted(pages.glob("*.html")):
        tab.goto(path.as_uri())
        tab.evaluate(OPEN_ALL)
        assert tab.evaluate("document.documentElement.scrollWidth") <= width, path.name
        assert tab.evaluate(SCROLLING_BOXES) == 0, f"{path.name}: a table scrolls in its box at {width} px"
        assert tab.evaluate(BROKEN_WORDS) == [], path.name


DRAWN = "() => [...document.querySelectorAll('figure.chart canvas')].map(c => !!Chart.getChart(c))"


def charts_of(tab) -> list[dict]:
    """Each chart's plot area, key and canvas in page pixels, its HTML text's sizes, its axes' lower
    ends; once every chart is drawn (one in a section just opened is drawn on its toggle event)."""
    tab.wait_for_function(f"({DRAWN})().every(Boolean)", timeout=10_000)
    return tab.evaluate("""() => [...document.querySelectorAll('figure.chart')].map(fig => {
      const canvas = fig.querySelector('canvas'), chart = Chart.getChart(canvas), c = canvas.getBoundingClientRect();
      const a = chart.chartArea, s = chart.scales;
      return {area: {left: c.left + a.left, right: c.left + a.right, top: c.top + a.top, bottom: c.top + a.bottom},
              key: fig.querySelector('ul.key').getBoundingClientRect().toJSON(), canvas: c.toJSON(),
              html: [...fig.querySelectorAll('*')].filter(e => e.childNodes.length && e.innerText)
                       .map(e => parseFloat(getComputedStyle(e).fontSize)),
              min: [s.x.min, s.y.min]};
    })""")


def overlap(a: dict, b: dict) -> bool:
    return (min(a["right"], b["right"]) > max(a["left"], b["left"])
            and min(a["bottom"], b["bottom"]) > max(a["top"], b["top"]))


def test_a_chart_is_drawn_once_no_closed_section_holds_it(tab, pages):
    """On arrival the open section's chart is drawn and the closed one's is not; opening the
    closed section draws it, the size its section gives it."""
    tab.goto((pages / "parallel_lm.html").as_uri())
    assert tab.evaluate(DRAWN) == [True, False]
    tab.evaluate("document.querySelectorAll('details.gpu')[1].open = true")
    tab.wait_for_function(f"({DRAWN})().every(Boolean)", timeout=10_000)
    widths = tab.evaluate("[...document.querySelectorAll('figure.chart canvas')].map(c => c.clientWidth)")
    assert widths[0] > 0 and widths[1] == widths[0]


def test_charts_are_readable_their_key_off_the_plot_and_their_axes_from_zero(tab, pages):
    tab.goto((pages / "parallel_lm.html").as_uri())
    tab.evaluate(OPEN_ALL)
    charts = charts_of(tab)
    assert len(charts) == 2  # one a GPU: the 2-GPU box's and the 1-GPU box's
    p = point_on_screen(tab, 0)
    # a tooltip's text too
    (tab.touchscreen.tap if tab.viewport_size["width"] < 600 else tab.mouse.move)(p["x"], p["y"])
    fonts = tab.evaluate("canvasFonts")
    assert len(fonts) > 20 and min(float(re.search(r"([\d.]+)px", f).group(1)) for f in fonts) >= 11, fonts
    for ch in charts:
        assert not overlap(ch["key"], ch["area"]), ch
        assert min(ch["html"]) >= 11, ch
        assert ch["min"] == [0, 0]  # never a window around the points
        assert ch["canvas"]["width"] >= 0.8 * min(tab.viewport_size["width"], 640)  # never shrunk to a thumbnail


def test_the_page_opens_on_the_gpu_that_measured_the_most_strategies(tab, pages):
    tab.goto((pages / "parallel_lm.html").as_uri())
    opened = tab.evaluate("[...document.querySelectorAll('details.gpu')].map(d => [d.dataset.gpu, d.open])")
    assert opened == [["nvidia-h200-x2", True], ["nvidia-h100-80gb-hbm3-x1", False]]


def point_on_screen(tab, index: int) -> dict:
    """Where the first chart draws its ``index``-th point, in page pixels, and the key's name of it."""
    return tab.evaluate("""i => {
      const fig = document.querySelector('figure.chart'), canvas = fig.querySelector('canvas');
      const el = Chart.getChart(canvas).getDatasetMeta(0).data[i], c = canvas.getBoundingClientRect();
      const key = fig.querySelectorAll('ul.key a')[i];
      return {x: c.left + el.x, y: c.top + el.y, name: key.innerText, href: key.getAttribute('href')};
    }""", index)


TOOLTIP = """() => { const t = Chart.getChart(document.querySelector('figure.chart canvas')).tooltip;
  return t.opacity > 0 ? [...t.title, ...t.body.flatMap(b => b.lines)] : []; }"""


def test_pointing_at_a_point_names_it_with_its_figures_and_a_click_opens_its_record(tab, pages):
    tab.goto((pages / "parallel_lm.html").as_uri())
    tab.evaluate("document.querySelector('figure.chart').scrollIntoView()")
    p = point_on_screen(tab, 2)
    touch = tab.viewport_size["width"] < 600
    (tab.touchscreen.tap if touch else tab.mouse.move)(p["x"], p["y"])
    tab.wait_for_function(f"({TOOLTIP})().length > 0", timeout=5000)  # Chart.js fades its tooltip in
    shown = tab.evaluate(TOOLTIP)
    assert " ".join(shown).startswith(p["name"]) and any("k tokens/s" in line for line in shown), (shown, p)
    assert tab.url.endswith("parallel_lm.html")  # a tap names the point; it does not leave the page
    (tab.touchscreen.tap if touch else tab.mouse.click)(p["x"], p["y"])
    tab.wait_for_url(f"**/{p['href']}")
    rid = p["href"].split("#")[1]
    assert tab.evaluate(f"document.getElementById('{rid}').open")  # the record itself, unfolded


# -- asv's graph page: flot's legend under the stylesheet asv_site publishes ------------------------

FLOT_PAGE = ("""<!doctype html><html><head><link rel="stylesheet" href="{css}"></head><body>
<div style="position: absolute; left: 220px; top: 60px; bottom: 10px; right: 20px;"><div id="main-graph"
 style="min-height: 100px; width: 100%; height: 100%"></div></div>
<script src="{vendor}/jquery.min.js"></script><script src="{vendor}/flot/jquery.flot.js"></script>
<script>
var series = [];
for (var s = 0; s < 30; s++) series.push({{label: "batch-" + s + "; cupy-cuda13x-14.2.0; """
             """gpu-H100 80GB HBM3 x1; numpy-2.5.2",
  data: [[0, s], [1, s + 1], [2, s]]}});
window.plot = $.plot($("#main-graph"), series, {{legend: {{show: true, position: "nw"}}}});
</script></body></html>""")


def test_asvs_legend_stands_beside_its_plot(tmp_path, browser):
    (tmp_path / "graph.html").write_text(
        FLOT_PAGE.format(css=asv_site.LEGEND_CSS.as_uri(), vendor=asv_site.VENDOR.as_uri()))
    page = browser.new_page(viewport={"width": 1400, "height": 800})
    page.goto((tmp_path / "graph.html").as_uri())
    plot, legend = page.evaluate("""() => {
      const g = document.getElementById('main-graph').getBoundingClientRect(), o = plot.getPlotOffset();
      return [{left: g.left + o.left, top: g.top + o.top, right: g.left + o.left + plot.width(), """
                                 """bottom: g.top + o.top + plot.height()},
              document.querySelector('#main-graph .legend table').getBoundingClientRect().toJSON()];
    }""")
    assert legend["width"] > 0 and not overlap(plot, legend), (plot, legend)
    assert legend["right"] <= 1400
    page.close()


def test_every_page_asv_publishes_loads_the_legend_stylesheet(tmp_path):
    (tmp_path / "index.html").write_text("<html><head><title>asv</title></head><body></body></html>")
    assert asv_site.localize(tmp_path) == []
    text = (tmp_path / "index.html").read_text()
    assert f'<link rel="stylesheet" href="{asv_site.LEGEND_CSS.name}">' in text
    assert text.count('<meta name="viewport" content="width=device-width, initial-scale=1">') == 1  # a phone's width
    assert (tmp_path / asv_site.LEGEND_CSS.name).read_text() == asv_site.LEGEND_CSS.read_text()
