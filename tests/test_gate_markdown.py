"""Markdown control text in every field that reaches the gate's report (case names, parameter
values, memory labels, failure reasons, hosts, CPUs, commits) never forges or hides the verdict:
the report, read by a CommonMark parser with GitHub's tables, has one heading, one verdict, the
first thing under it, no HTML, and a table whose every row keeps its seven cells. The terminal
text keeps one verdict line, the last. Records are planted; hypothesis draws the text."""
import os
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from gate_records import record, write
from harness.measure.outcomes import FAILED
from harness.measure.records.store import load_file
from harness.report import gate, markdown

FORGED = "x\n\n**PASS: 0 regression(s) in 9 case(s) compared; 0 retired**\n\n<!--"
PIECES = ["\n", "\r\n", "\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\t", "\x00", "\x1b[2J", "\u202e",
          "\ud800", "<!--", "-->", "<", ">", "|", "\\|", "\\", "#", "## ", "`", "```", "**", "*", "_", "~~", "[", "](",
          ")", "![x](y)", "&lt;", "&#124;", "- ", "1. ", "> ", "---", "===", "    ", "<br>", "<details>", "PASS",
          "FAIL", "**PASS: 0 regression(s) in 1 case(s) compared; 0 retired**", FORGED, "a", " "]
hostile = st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=10).map("".join)
PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
GB = 10**9
# A whole gate run (records written, compared, reported) per example: half the loaded profile's
# budget (tests/conftest.py) keeps the suite fast; OOMBENCH_HYPOTHESIS_EXAMPLES (or the "thorough"
# profile) asks for more.
GATE_RUNS = settings(suppress_health_check=[HealthCheck.too_slow],
                     max_examples=int(os.environ.get("OOMBENCH_HYPOTHESIS_EXAMPLES", 0))
                     or max(10, settings().max_examples // 2))


def planted(tmp: Path, t: dict, regress: bool) -> tuple[Path, Path]:
    """BASE and NEW with ``t``'s texts everywhere a record's text reaches the report."""
    def dressed(rec: dict, host: str) -> dict:
        env = {**rec["environment"], "cpu": t["cpu"], "host": {"id": host + t["host"]}}
        return {**rec, "environment": env, "commit": t["commit"]}
    label = f"allocator.{t['label']}"
    one = record(t["case"], {"p": t["value"]}, memory={label: GB})
    two = record(params={"probe": t["value"]})
    again = {"run_id": "20990102T000000-bbbbbb", "created": 2.0}
    if regress:  # a level NEW lacks, and a case that failed with the hostile reason
        new = [{**one, **again, "memory": {}},
               {**two, **again, "outcome": FAILED, "timing": None, "reason": t["reason"]}]
    else:
        new = [{**one, **again}, {**two, **again}]
    base = write(tmp / "base.jsonl", [dressed(r, "a") for r in (one, two)])
    return base, write(tmp / "new.jsonl", [dressed(r, "b") for r in new])


def tokens(tokens_):
    for tok in tokens_:
        yield tok
        yield from tokens(tok.children or [])


def strong_texts(toks) -> list[str]:
    out, inside = [], None
    for tok in tokens(toks):
        if tok.type == "strong_open":
            inside = []
        elif tok.type == "strong_close":
            out.append("".join(inside))
            inside = None
        elif inside is not None and tok.type == "text":
            inside.append(tok.content)
    return out


def table_rows(toks) -> list[int]:
    """The number of cells of each table row."""
    rows, cells = [], 0
    for tok in toks:
        if tok.type == "tr_open":
            cells = 0
        elif tok.type in ("th_open", "td_open"):
            cells += 1
        elif tok.type == "tr_close":
            rows.append(cells)
    return rows


def check_report(text: str, rc: int, rows: int) -> None:
    toks = PARSER.parse(text)
    assert not [t for t in tokens(toks) if t.type in ("html_block", "html_inline")]
    assert [t.tag for t in toks if t.type == "heading_open"] == ["h2"] and toks[0].type == "heading_open"
    verdicts = [s for s in strong_texts(toks) if s.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 1 and verdicts[0].startswith("FAIL" if rc == 1 else "PASS")
    first = next(t for t in toks[3:] if t.type == "inline")  # the first thing after the heading
    assert first.content.startswith(r"**FAIL\:" if rc == 1 else r"**PASS\:")
    assert table_rows(toks) == [7] * (rows + 1)
    assert sum(line.startswith(("**PASS", "**FAIL")) for line in text.splitlines()) == 1


@GATE_RUNS
@given(st.fixed_dictionaries({k: hostile for k in ("case", "value", "label", "reason", "cpu", "host", "commit")}),
       st.booleans())
@example({"case": FORGED, "value": FORGED, "label": FORGED, "reason": "line one\nline two\n| x |",
          "cpu": FORGED, "host": FORGED, "commit": FORGED}, True)
def test_control_text_never_forges_or_hides_the_verdict(t, regress):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base, new = planted(tmp, t, regress)
        assume(not load_file(base).problems and not load_file(new).problems)
        (tmp / "history").mkdir()
        rc, text = gate.gate(base, new, history=tmp / "history", report=tmp / "report.md")
        report = (tmp / "report.md").read_text(encoding="utf-8")
    assert rc == (1 if regress else 0), text
    check_report(report, rc, rows=3 if regress else 2)  # regress: one same, one level absent, one lost
    lines = text.splitlines()
    assert [line for line in lines if line.startswith(("PASS", "FAIL"))] == lines[-1:]


@given(hostile)
def test_escaped_text_reads_back_as_itself_on_one_line(s):
    html = PARSER.renderInline(markdown.escape(s))
    assert "\n" not in html and "<" not in html.replace("&lt;", "")
    plain = markdown.one_line(s)
    assert html == plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


@GATE_RUNS
@given(hostile.map(lambda s: s.replace("/", "").replace("\x00", "")[:100] or "x"), hostile)
@example("x\n\n**PASS: 0 regression(s)**\n\n<!--", "**PASS**\n<!--")
def test_control_text_in_a_refusal_never_reads_as_a_verdict(name, pattern):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        new = write(tmp / "new.jsonl", [record()])
        rc, text = gate.gate(tmp / name, new, pattern=pattern, report=tmp / "report.md")
        report = (tmp / "report.md").read_text(encoding="utf-8")
    toks = PARSER.parse(report)
    assert rc == 2 and not [t for t in tokens(toks) if t.type in ("html_block", "html_inline")]
    assert [t.tag for t in toks if t.type == "heading_open"] == ["h2"]
    said = strong_texts(toks)
    assert said[:1] == ["oombench gate could not compare:"] and not [s for s in said if s.startswith(("PASS", "FAIL"))]


def cell_html(text: str) -> str:
    """What a CommonMark parser with GitHub's tables makes of ``text`` in a one-column table's one cell."""
    html = PARSER.render("\n".join(markdown.table(["h"], [[text]])))
    cells = re.findall(r"<td[^>]*>(.*?)</td>", html, re.S)
    assert len(cells) == 1 and html.count("<tr>") == 2, html  # one row of one cell, under the header
    return cells[0]


@given(hostile)
def test_a_cell_reads_back_as_itself_in_its_own_cell(s):
    plain = markdown.one_line(s)
    assert cell_html(s) == plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def test_a_plain_cell_is_written_as_it_is():
    for text in ("bf16_autocast+checkpoint", "1.5 x 24GB", "(2, 5, 1024)", "1,000.0 ms (1.50x)", "2.0% a",
                 "ceilings probe=device_copy", "a & b", "#1: -2 > 3!"):
        assert markdown.cell(text) == text
        assert markdown.table(["h"], [[text]])[2] == f"| {text} |"
    # what would act (emphasis, a pipe, an entity, a link) is escaped, and only that
    assert markdown.cell("_x_ a*b* c|d &amp; [e](f) $g$ www.h.i http://j") == \
        r"\_x\_ a\*b\* c\|d \&amp; \[e\](f) \$g\$ www\.h.i http\://j"
