"""The house's lint, as pyproject.toml's [tool.ruff] chooses it (pycodestyle, pyflakes, bugbear):
ruff finds nothing anywhere in the repository; the files conftest.py hands out first all exist."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    # --no-cache: a check leaves nothing behind in the tree it reads.
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_files_handed_out_first_are_test_files_of_this_folder():
    # A renamed file would silently fall back to pytest's order, and run last again.
    from conftest import LONGEST_FIRST
    here = Path(__file__).parent
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [n for n in LONGEST_FIRST if not n.startswith("test_") or not (here / n).is_file()] == []
