"""Text from records made safe for the two places a report goes: a terminal and a markdown page.

Case names, parameter values, reasons and paths come from records and command lines, which
anyone may write. In a pull-request comment such a text could otherwise open an HTML comment
that hides the verdict, start a heading or a line that reads as a verdict, or add a cell that
shifts a table's columns; in a terminal, a control character could move the cursor. So every
such text goes through ``one_line`` (terminal), ``escape`` (a markdown line), ``inline`` (a
value inside prose, where figures must read as written) or ``cell`` (a markdown table's cell),
and markdown tables are written by tabulate from ``cell``'s cells.

``escape`` relies on CommonMark's rule that a backslash before any ASCII punctuation character
makes it a literal character ("Backslash escapes", CommonMark 0.31 §2.4; GitHub's tables honour
``\\|`` the same way): with every such character escaped and no line break left, no text can
carry markup, wherever in a line it lands. A table cell holds inline text only (GitHub Flavored
Markdown 0.29 §4.10): no block can start there, so ``cell`` escapes only the characters that act
inside a line, and figures such as ``1.5 x 24GB`` or ``(2, 5, 1024)`` read as they are written.
``inline`` is ``cell`` that may also land at a line's start: what would open a block there (a
heading, a quote, a list item, a rule) is escaped too, and ``#`` wherever it is.
"""
from __future__ import annotations

import re
import unicodedata

# Every ASCII punctuation character: the set CommonMark lets a backslash make literal.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# What acts inside a table cell: a backslash, a code span's backtick, emphasis' `*` (and `_`, except
# between two letters or digits, where it opens and closes nothing: CommonMark 0.31 §6.2), a link's
# brackets, HTML's `<`, strikethrough's `~`, GitHub's math `$`, the cell's own `|`, an entity's `&`,
# and the `:` of `scheme://` and the `.` of `www.`, which GitHub would make a link of.
_INLINE = re.compile(r"([\\`*\[\]<~$|]|&(?=#?\w+;)|(?<![^\W_])_|_(?![^\W_])|:(?=//)|(?<=(?i:www))\.)")
# What opens a block at a line's start (CommonMark 0.31 §4-5): a heading's `#`, a quote's `>`, a bullet or
# rule of `-`, `+`, `*` or `_`, a setext underline's `=`, an ordered item's digits and `.` or `)`.
_BLOCK_START = re.compile(r"^(>|([-+=])(?=\s|$|\2)|\d{1,9}(?=[.)](?:\s|$)))")
_ANYWHERE = re.compile(r"(#)")
# Characters that end a line (str.splitlines' set), control a terminal, or reorder or hide text.
_INVISIBLE = ("Cc", "Cf", "Zl", "Zp")


def one_line(text) -> str:
    """``text`` as one line of visible characters: each line break shown as " ↵ ", control and
    format characters as spaces, lone surrogates as U+FFFD, runs of spaces as one."""
    text = str(text)
    if not (text.isascii() and text.isprintable()):  # else nothing to replace: the common case, kept quick
        text = "".join(" " if unicodedata.category(c) in _INVISIBLE else "\ufffd" if unicodedata.category(c) == "Cs"
                       else c for c in " ↵ ".join(text.splitlines()))
    return " ".join(text.split())


def escape(text) -> str:
    """``text`` for markdown: ``one_line``, then every ASCII punctuation character escaped."""
    return _PUNCTUATION.sub(r"\\\1", one_line(text))


def cell(text) -> str:
    """``text`` for a markdown table's cell: ``one_line``, then what acts inside a line escaped,
    and each ``>`` after a ``<``, so that no raw tag (``</script>``) stays in the file for whatever
    reads it as HTML; a lone ``>`` (``-2 > 3``) reads as written."""
    text = _INLINE.sub(r"\\\1", one_line(text))
    at = text.find("<")
    return text if at < 0 else text[:at] + text[at:].replace(">", "\\>")


def inline(text) -> str:
    """``text`` for a value inside a markdown paragraph, anywhere in a line: ``cell``, then what
    would open a block at a line's start escaped, and ``#``; figures read as written."""
    text = _ANYWHERE.sub(r"\\\1", cell(text))
    match = _BLOCK_START.match(text)
    if match is None:
        return text
    at = match.end() if match.group(1)[0].isdigit() else 0  # escape the ordered item's `.`, else the mark
    return text[:at] + "\\" + text[at:]


class Markup(str):
    """Text already written as markdown (``code``'s spans): ``table`` puts it in its cell as it is."""


def code(text) -> Markup:
    """``text`` as a code span: one line, fenced by more backticks than any run it holds
    (CommonMark 0.31 §6.1), its ``|`` escaped as GitHub's tables need even inside a span. A text
    holding ``<`` is ``inline`` text instead: a span shows it literally, but the file would still
    hold a raw tag (``</script>``) for whatever reads the markdown as HTML."""
    if "<" in one_line(text):
        return Markup(inline(text))
    text = one_line(text).replace("|", "\\|")
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markup(f"{fence}{pad}{text}{pad}{fence}")


def table(header, rows, right=(), markdown: bool = True) -> list[str]:
    """The lines of a table: a markdown pipe table of ``cell``'s cells (``Markup`` cells as they
    are), or plain columns of ``one_line`` cells; ``right``: per column, whether it is
    right-aligned (figures); columns past its end are left-aligned."""
    from tabulate import tabulate

    def clean(text) -> str:
        if not markdown:
            return one_line(text)
        return text if isinstance(text, Markup) else cell(text)
    body = [[clean(c) for c in row] for row in rows]
    align = ["right" if i < len(right) and right[i] else "left" for i in range(len(header))]
    text = tabulate(body, headers=[clean(h) for h in header], tablefmt="pipe" if markdown else "plain",
                    disable_numparse=True, colalign=align)
    return [line.rstrip() for line in text.splitlines()]
