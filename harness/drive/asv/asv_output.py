"""asv's run output, with skips folded: one line per skipped benchmark class and reason.

asv prints every benchmark method in a block: a header, a table of its parameter sets, and for
each set its stderr. A case that cannot run here (no GPU, say) is skipped in every parameter
set and in each of its class's methods, and asv says so at each, twice (the harness's line and
asv's own). On a box without a GPU that buried the handful of measured cases under thousands of
lines. This keeps every block that measured something, and says each skip reason once per class.

asv also prints, beside what a run measured, the figures an earlier run of the same commit left in
its results file for the parameter sets this run did not select. ``harness.drive.asv.bench`` says on
stderr which sets this run measured (``THIS_RUN``); a figure of any other set is marked as an
earlier run's, and the marks themselves are not shown.
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator

HEADER = re.compile(r"^\[\s*[\d.]+%\] ··· (?P<name>[\w.]+)\s+(?P<status>\S+)\s*$")
PARAMS = re.compile(r"^(\[\s*[\d.]+%\] )?\s*···· ")
ASV_SKIP = re.compile(r"asv: skipped: NotImplementedError\((?P<q>['\"])(?P<reason>.*)(?P=q)\)\s*$")
OUR_SKIP = re.compile(r"oombench: (skipped|does_not_fit): ")
THIS_RUN = "oombench: measured in this run"
EARLIER = "  (an earlier run's: not measured now)"
# asv writes a tracked figure with its unit (1.44ms, 2.5s, 5.48G, 135M); parameters have none.
FIGURE = re.compile(r"^\d[\d.]*(?:[nμu]s|ms|s|k|M|G|T)$")


def fold(lines: Iterable[str]) -> Iterator[str]:
    """asv's output lines (without newlines) -> the lines to show."""
    folder = _Folder()
    for line in lines:
        yield from folder.feed(line)
    yield from folder.flush()


class _Folder:
    def __init__(self):
        self.block: list[str] = []
        self.told: set = set()  # (class, reason) already said

    def feed(self, line: str) -> list[str]:
        if HEADER.match(line) or (line.startswith("·") and not line.startswith("···")):
            out = self.flush()
            self.block = [line]
            return out
        if self.block:
            self.block.append(line)
            return []
        return [line]

    def flush(self) -> list[str]:
        block, self.block = self.block, []
        if not block:
            return []
        head = HEADER.match(block[0])
        if not head:
            return block
        cls = head["name"].rsplit(".", 1)[0]
        kept, reasons = _split(_marked(block[1:]))
        all_skipped = bool(reasons) and head["status"] in ("ok", "n/a") and not _measured(kept)
        news = [r for r in dict.fromkeys(reasons) if (cls, r) not in self.told]
        self.told.update((cls, r) for r in news)
        if all_skipped:
            return [f"skipped {cls}: {r}" for r in news]
        counted = [f"             {reasons.count(r)} parameter set(s) skipped: {r}" for r in news]
        return [block[0], *kept, *counted]


def _split(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the lines to keep, the skip reason of each parameter set whose only output is its skip)."""
    kept, reasons, i = [], [], 0
    while i < len(lines):
        if not PARAMS.match(lines[i]):
            kept.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() and not PARAMS.match(lines[j]) and not HEADER.match(lines[j]):
            j += 1
        sub = lines[i:j]
        reason = _only_skip(sub)
        if reason is None:
            kept.extend(sub)
        else:
            reasons.append(reason)
        i = j
        while i < len(lines) and not lines[i].strip():
            i += 1
    return kept, reasons


def _params(line: str) -> tuple[str, ...]:
    """A "For parameters: 'a', 2" line's values as asv's table shows them: a, 2."""
    text = PARAMS.sub("", line).strip().removeprefix("For parameters:")
    return tuple(v.strip().strip("'\"") for v in text.split(", "))


def _marked(lines: list[str]) -> list[str]:
    """``lines`` less the this-run marks, each figure of a parameter set this run did not measure
    marked as an earlier run's."""
    fresh, current = set(), None
    for line in lines:
        text = PARAMS.sub("", line).strip()
        if text.startswith("For parameters:"):
            current = _params(line)
        elif text == THIS_RUN:
            fresh.add(current)
    out = []
    for line in lines:
        if PARAMS.sub("", line).strip() == THIS_RUN:
            continue
        cells = line.split()
        old = (not PARAMS.match(line) and len(cells) >= 2 and FIGURE.match(cells[-1])
               and tuple(cells[:-1]) not in fresh and None not in fresh)
        out.append(line.rstrip() + EARLIER if old else line)
    return out


def _only_skip(sub: list[str]) -> str | None:
    """The reason, where a parameter set's lines say nothing but that it was skipped."""
    reason = None
    for line in sub:
        text = PARAMS.sub("", line).strip()
        if text.startswith("For parameters:") or OUR_SKIP.match(text):
            continue
        m = ASV_SKIP.search(text)
        if not m:
            return None
        reason = m["reason"]
    return reason


def _measured(lines: list[str]) -> bool:
    """Whether asv's table shows any figure (a time or a byte count with its unit), or a failure."""
    return any(FIGURE.match(cell) or cell == "failed" for line in lines for cell in line.split())
