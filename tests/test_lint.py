"""The house's lint, as pyproject.toml's [tool.ruff] chooses it (pycodestyle, pyflakes, bugbear):
ruff finds nothing anywhere in the repository; the files conftest.py hands out first all exist;
the test files' asserts are rewritten once, as pytest's own hook would."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    # --no-cache: a check leaves nothing behind in the tree it reads.
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_files_handed_out_first_or_together_are_test_files_of_this_folder():
    # A renamed file would silently fall back to pytest's order, and run last again, or to a unit
    # of its own, importing again what its group's worker imported.
    from conftest import LONGEST_FIRST, SHARED_IMPORTS
    here = Path(__file__).parent
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    named = [*LONGEST_FIRST, *SHARED_IMPORTS]
    assert [n for n in named if not n.startswith("test_") or not (here / n).is_file()] == []


def test_a_file_of_a_shared_unit_goes_with_the_others_and_any_other_file_alone():
    from conftest import SHARED_IMPORTS, pytest_xdist_make_scheduler

    class Config:
        option = type("Option", (), {"loadscopereorder": False, "maxschedchunk": None})()

        def __init__(self, dist):
            self.dist = dist

        def getvalue(self, name):
            return {"dist": self.dist, "tx": ["2*popen"]}.get(name)

    assert pytest_xdist_make_scheduler(Config("load"), None) is None  # another --dist is xdist's own
    scheduler = pytest_xdist_make_scheduler(Config("loadfile"), None)
    shared = {scheduler._split_scope(f"tests/{name}::test_x[1]") for name in SHARED_IMPORTS}
    assert len(shared) == 1 and len(SHARED_IMPORTS) > 1
    assert scheduler._split_scope("tests/test_lint.py::test_x") == "tests/test_lint.py"


def test_the_controller_rewrites_the_asserts_of_test_files_as_pytest_s_hook_then_reads_them(
        pytestconfig, tmp_path, monkeypatch):
    from _pytest.assertion.rewrite import PYTEST_TAG, _read_pyc
    from conftest import _rewrite_once
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "cache"))
    folder = tmp_path / "tests"
    folder.mkdir()
    for name in "abcde":
        (folder / f"test_{name}.py").write_text(f"def test():\n    assert {ord(name)} + 1 == 0\n")
    pyc = {n: tmp_path.joinpath("cache", *folder.parts[1:], f"test_{n}.{PYTEST_TAG}.pyc") for n in "abcde"}

    _rewrite_once(pytestconfig, folder)
    made = {n: p.stat().st_mtime_ns for n, p in pyc.items()}
    namespace = {}
    exec(_read_pyc(folder / "test_c.py", pyc["c"]), namespace)
    with pytest.raises(AssertionError, match=re.escape("assert (99 + 1) == 0")):  # pytest's own explanation
        namespace["test"]()

    # One file lacking of five is left to the workers; an edited file's pyc is not read: pytest checks
    # each against its source.
    pyc["e"].unlink()
    _rewrite_once(pytestconfig, folder)
    assert not pyc["e"].exists() and all(p.stat().st_mtime_ns == made[n] for n, p in pyc.items() if n != "e")
    (folder / "test_a.py").write_text("def test():\n    pass\n")
    assert _read_pyc(folder / "test_a.py", pyc["a"]) is None
