"""The house's lint, as pyproject.toml's [tool.ruff] chooses it (pycodestyle, pyflakes, bugbear):
ruff finds nothing anywhere in the repository."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    # --no-cache: a check leaves nothing behind in the tree it reads.
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
