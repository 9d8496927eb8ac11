"""The README against the tree and the records: its Layout names what is there, and it quotes no
measured figure outside the sections `harness docs` generates.

The Layout block (the fenced block under ``## Layout``) is read as a tree. An entry is a line that
starts before the description column (column 17): its first word is a path (``name/`` a folder,
else a file), nested under the entry above it that is two spaces less indented. A line that starts
at the description column or later continues the entry above. Checked both ways:
- every entry exists, and every ``name.py`` or ``name/`` a folder entry's description names exists
  in that folder;
- every package under harness/ is an entry or named as ``name/`` by its parent's entry;
- drive/, measure/ and workloads/ name each module they hold directly as ``name.py``, and each of
  their subpackages lists its modules: the description's last ``: ``-led part (or all of it), with
  parenthesised notes dropped, is a comma-separated list of exactly that subpackage's modules.
"""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DESCRIPTION_COLUMN = 17
FAMILIES = ("harness/drive", "harness/measure", "harness/workloads")


def layout_lines(readme: str = README) -> list[str]:
    block = re.search(r"^## Layout\n\n```\n(.*?)^```", readme, re.S | re.M)
    assert block, "README.md has no ## Layout section with a fenced block"
    return block.group(1).splitlines()


def entries(lines: list[str]) -> dict[str, str]:
    """Path (from the repository root) -> its description, continuation lines joined."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, path) of the open folders
    last = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if not line.strip():
            continue
        if indent >= DESCRIPTION_COLUMN:
            assert last, f"a continuation line with no entry above it: {line!r}"
            found[last] += " " + line.strip()
            continue
        name, _, description = line.strip().partition(" ")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        assert indent == 2 * len(stack), f"{name} is indented {indent}, under {stack[-1][1] if stack else 'the root'}"
        path = f"{stack[-1][1]}/{name.rstrip('/')}" if stack else name.rstrip("/")
        found[path] = description.strip()
        last = path
        if name.endswith("/"):
            stack.append((indent, path))
    return found


def listed_modules(description: str) -> list[str]:
    bare = re.sub(r"\([^()]*\)", "", description)
    tail = bare.rsplit(": ", 1)[-1]
    return [item.strip().split(" ")[0] for item in tail.split(",") if item.strip()]


def _packages(root: Path) -> set[str]:
    return {p.parent.relative_to(REPO).as_posix() for p in root.rglob("__init__.py")}


LAYOUT = entries(layout_lines())


@pytest.mark.parametrize("path", sorted(LAYOUT))
def test_every_entry_and_what_it_names_exists(path):
    assert (REPO / path).exists(), f"README's Layout names {path}, which is not there"
    if (REPO / path).is_dir() and path.startswith("harness"):
        for named in re.findall(r"(?<![\w./])(\w+\.py|\w+/)(?![\w])", LAYOUT[path]):
            assert (REPO / path / named).exists(), f"README's Layout names {named} in {path}, which is not there"


def test_every_package_of_the_harness_is_named():
    named_inside = {f"{path}/{n.rstrip('/')}" for path, d in LAYOUT.items() for n in re.findall(r"\b\w+/", d)}
    missing = sorted(_packages(REPO / "harness") - set(LAYOUT) - named_inside)
    assert not missing, f"README's Layout misses {missing}"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_names_each_module_and_each_room_lists_its_own(family):
    root = REPO / family
    modules = {p.name for p in root.glob("*.py") if p.name != "__init__.py"}
    named = set(re.findall(r"\b\w+\.py\b", LAYOUT[family]))
    assert modules <= named, f"README's Layout: {family}/ does not name {sorted(modules - named)}"
    for room in sorted(p.parent for p in root.glob("*/__init__.py")):
        path = room.relative_to(REPO).as_posix()
        assert path in LAYOUT, f"README's Layout has no entry for {path}/"
        held = sorted(p.stem for p in room.glob("*.py") if p.name != "__init__.py")
        assert sorted(listed_modules(LAYOUT[path])) == held, f"README's Layout lists {path}/'s modules wrongly"


def test_the_parse_sees_a_stale_or_missing_name():
    # The reader itself, on a block that is wrong in each way it checks.
    lines = ["harness/         the library", "  drive/         what drives: runner.py",
             "    asv/         plumbing: suite, bench (what asv calls),", "                 gone"]
    got = entries(lines)
    assert set(got) == {"harness", "harness/drive", "harness/drive/asv"}
    assert listed_modules(got["harness/drive/asv"]) == ["suite", "bench", "gone"]
    assert listed_modules("what fits: fits (the search, once), fits_probe") == ["fits", "fits_probe"]
    with pytest.raises(AssertionError):
        entries(["harness/", "   drive/   three spaces in"])


# -- no measured figure typed into the README ---------------------------------------------------

GENERATED = re.compile(r"<!-- (\S+):start -->.*?<!-- \1:end -->", re.S)
# Code: a fenced block that names its language (a command, a class) and inline code. The Layout's
# plain fenced block is prose in columns, and is read as prose.
CODE = re.compile(r"^```\w+\n.*?^```$|`[^`\n]*`", re.S | re.M)
UNIT = (r"(?:[kMGT]i?B|ms|µs|us|s|min|minutes?|GPU-minutes|h|hours?|x"
        r"|[kMGT]?FLOP/s|[kMGT]?B/s|(?:k |M )?(?:tokens|samples)/s)")
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(?:\s?[–-]\s?(\d[\d,]*(?:\.\d+)?))?\s?" + UNIT + r"(?![\w/])")


def prose(readme: str) -> str:
    """The README without what `harness docs` generates and without code (commands and their
    parameters, inline or in a fenced block that names its language)."""
    return CODE.sub("", GENERATED.sub("", readme))


def measured(number: str) -> bool:
    """A figure as the suite prints a measurement: a decimal part, or three significant digits or
    more. A figure someone chose (a 16 GB card, every 5 ms, a 64 MB floor, a budget of 20 minutes)
    is a round whole number: at most two significant digits."""
    digits = number.replace(",", "")
    return "." in digits or len(digits.strip("0")) > 2


def typed_figures(readme: str) -> list[str]:
    return [m.group(0) for m in FIGURE.finditer(prose(readme))
            if any(measured(n) for n in m.groups() if n)]


def test_no_measured_figure_outside_the_generated_sections():
    """A number with a unit of bytes, time, rate or ratio in the README's prose is a measurement
    (and fails) when it has a decimal part or three significant digits or more; whole round numbers
    are choices (card sizes, periods, floors). Inside the generated sections and inside code (a
    command and its parameters) anything goes: `harness docs` rewrites the former from the records."""
    assert typed_figures(README) == [], "measured figures typed into README.md: quote the generated table instead"


@pytest.mark.parametrize("pasted", ["the context takes 0.72 GB for torch", "a step of 574 s",
                                    "fp16 runs 2.78x faster", "35.7 k tokens/s on the H100", "1.37 min",
                                    "```\nbenchmarks/      thin asv classes (0.61 GB)\n```"])
def test_a_pasted_measurement_is_caught(pasted):
    assert typed_figures(README + "\n" + pasted + "\n")


@pytest.mark.parametrize("chosen", ["emulated 16–80 GB cards", "sampled every 5 ms", "within 5 s",
                                    "max(64 MB, 2%)", "its budget is 20 GPU-minutes", "`--deadline 600` s",
                                    "<!-- t:start -->\n0.72 GB\n<!-- t:end -->"])
def test_a_chosen_figure_or_a_generated_one_passes(chosen):
    assert typed_figures(chosen) == []
