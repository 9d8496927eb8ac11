"""The asv configuration one command uses: asv.conf.json with its branches fitted to the clone,
written into a folder of that command's own (``scratch``), so that two commands side by side
(``pages`` beside ``run --results DIR``) never read each other's results folder."""
from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from harness.drive.scratch import private_dir

# Paths asv.conf.json gives relative to the repository; the copy holds them absolute.
PATHS = ("repo", "results_dir", "benchmark_dir", "html_dir", "env_dir")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def config(repo: Path) -> dict:
    """asv.conf.json as asv reads it (comments allowed)."""
    from asv.util import load_json
    return load_json(str(repo / "asv.conf.json"), js_comments=True)


def fitted(repo: Path, results: Path | None = None) -> dict:
    """asv.conf.json with the checked-out branch added to ``branches``: asv refuses to run when a
    configured branch is missing (a fresh clone of a feature branch has no main), and publishes only
    results of commits on those branches (first parent), so a branch's own results would vanish
    otherwise. Branches this clone does not have are left out. ``results``, where given, replaces
    the results folder."""
    conf = config(repo)
    current = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    wanted = conf.get("branches", []) + ([current] if current and current != "HEAD" else [])
    branches = [b for b in dict.fromkeys(wanted) if git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{b}")]
    if not branches:
        raise SystemExit("oombench: asv files and publishes results by branch, and this clone has none of "
                         f"{', '.join(wanted) or 'asv.conf.json branches'}: check out a branch (git switch -c NAME)")
    conf.update({key: str((repo / conf[key]).resolve()) for key in PATHS}, branches=branches)
    if results is not None:
        conf["results_dir"] = str(Path(results).resolve())
    return conf


@contextmanager
def private_config(repo: Path, results: Path | None = None) -> Iterator[Path]:
    """The fitted configuration as a file of this process's own under ``.asv/``, removed when the
    block ends (on SIGTERM too); pass it to asv as ``--config``."""
    conf = fitted(repo, results)
    with private_dir("asv-conf", repo / ".asv") as folder:
        path = folder / "asv.conf.json"
        path.write_text(json.dumps(conf, indent=2))
        yield path
