"""What a report's text can carry, exactly: ``one_line`` for a terminal, ``escape`` for a markdown
line, ``cell`` and ``code`` for a table's cell, and ``table`` that lays them out. Each expected
string is written out, so a rule that escapes too little (markup gets through) or too much (a
figure no longer reads as written) fails here, not in a pull-request comment."""
import pytest

from harness.report import markdown as md


@pytest.mark.parametrize("text, line", [
    ("plain text", "plain text"),
    ("  runs   of\tspaces ", "runs of spaces"),
    ("a\nb\r\nc", "a ↵ b ↵ c"),
    ("cursor\x1b[2Jmoved", "cursor [2Jmoved"),  # ESC, a control character, is a space
    ("right\u202eleft", "right left"),  # a bidi override (format) is a space
    ("line\u2028para\u2029end", "line ↵ para ↵ end"),  # splitlines' separators break the line
    ("lone \ud800 surrogate", "lone \ufffd surrogate"),
    ("ünïcode stays", "ünïcode stays"),
    (42, "42"),
])
def test_one_line_shows_every_line_break_and_hides_what_would_control_a_terminal(text, line):
    assert md.one_line(text) == line


@pytest.mark.parametrize("text, escaped", [
    ("# heading", r"\# heading"),
    ("**PASS**", r"\*\*PASS\*\*"),
    ("<!-- hide", r"\<\!\-\- hide"),
    ("a|b", r"a\|b"),
    ("1.5 x 24GB", r"1\.5 x 24GB"),
    ("under_score", r"under\_score"),
    ("two\nlines", "two ↵ lines"),
    ("no punctuation", "no punctuation"),
])
def test_escape_makes_every_ascii_punctuation_literal_on_one_line(text, escaped):
    assert md.escape(text) == escaped


@pytest.mark.parametrize("text, celled", [
    ("1.5 x 24GB", "1.5 x 24GB"),  # figures read as written
    ("(2, 5, 1024)", "(2, 5, 1024)"),
    ("# not a heading in a cell", "# not a heading in a cell"),
    ("a|b", r"a\|b"),
    ("*em* and `code`", r"\*em\* and \`code\`"),
    ("[link](x) <b> ~s~ $m$ back\\slash", r"\[link\](x) \<b\> \~s\~ \$m\$ back\\slash"),
    ("snake_case_name", "snake_case_name"),  # between letters, _ opens and closes nothing
    ("_lead trail_ _", r"\_lead trail\_ \_"),
    ("&amp; &#60; & alone", r"\&amp; \&#60; & alone"),
    ("http://x.org and www.y.org", r"http\://x.org and www\.y.org"),
    ("WWW.Z.org", r"WWW\.Z.org"),
    ("two\nlines", "two ↵ lines"),
])
def test_cell_escapes_only_what_acts_inside_a_line(text, celled):
    assert md.cell(text) == celled


@pytest.mark.parametrize("text, span", [
    ("x", "`x`"),
    ("", "``"),
    ("a|b", r"`a\|b`"),
    ("a`b", "``a`b``"),
    ("a``b`c", "```a``b`c```"),
    ("`lead", "`` `lead ``"),
    ("trail`", "`` trail` ``"),
    ("two\nlines", "`two ↵ lines`"),
])
def test_code_fences_with_more_backticks_than_any_run_and_pads_a_backtick_at_an_end(text, span):
    assert md.code(text) == span
    assert isinstance(md.code(text), md.Markup)


def test_a_markdown_table_aligns_figures_right_and_passes_markup_as_it_is():
    rows = [["1", "x_y"], [md.code("p|q"), "*s*"]]
    assert md.table(["a", "b|c"], rows, right=(True,)) == [
        "|      a | b\\|c   |",
        "|-------:|:-------|",
        "|      1 | x_y    |",
        "| `p\\|q` | \\*s\\*  |"]


def test_a_plain_table_is_columns_of_one_line_cells_without_trailing_spaces():
    rows = [["1", "x\ny"], ["22", "*z*"]]
    assert md.table(["a", "b"], rows, right=(False, True), markdown=False) == [
        "a        b",
        "1    x ↵ y",
        "22     *z*"]
    assert md.table(["a", "bb"], [["1", "x"]], markdown=False) == ["a    bb", "1    x"]  # a short last cell
    # figures' margin kept
    assert md.table(["n"], [["1"], ["22"]], right=(True,), markdown=False) == ["  n", "  1", " 22"]


def test_a_table_reads_its_cells_as_text_never_as_numbers():
    assert md.table(["n"], [["1.50"], ["1e3"]], markdown=False) == ["n", "1.50", "1e3"]
