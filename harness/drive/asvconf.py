"""The asv configuration this clone can use: asv.conf.json with its branches fitted to the clone."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def config(repo: Path) -> dict:
    """asv.conf.json as asv reads it (comments allowed)."""
    from asv.util import load_json
    return load_json(str(repo / "asv.conf.json"), js_comments=True)


def results_dir(repo: Path) -> Path:
    """The committed results folder asv.conf.json names."""
    return repo / config(repo)["results_dir"]


def local_config(repo: Path, results: Path | None = None) -> Path:
    """asv.conf.json with the checked-out branch added to ``branches``: asv refuses to run when a
    configured branch is missing (a fresh clone of a feature branch has no main), and publishes only results
    of commits on those branches (first parent), so a branch's own results would vanish otherwise.
    Branches this clone does not have are left out (a fresh clone has only the one checked out).
    Paths in an asv config are relative to the config file, which lives in .asv/. ``results``, where
    given, replaces the results folder (a local run's, outside git)."""
    conf = config(repo)
    current = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    wanted = conf.get("branches", []) + ([current] if current and current != "HEAD" else [])
    branches = [b for b in dict.fromkeys(wanted) if git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{b}")]
    if not branches:
        raise SystemExit("oombench: asv files and publishes results by branch, and this clone has none of "
                         f"{', '.join(wanted) or 'asv.conf.json branches'}: check out a branch (git switch -c NAME)")
    up = lambda key: str(Path("..") / conf[key])  # noqa: E731
    conf.update(branches=branches, repo=up("repo"), results_dir=up("results_dir"),
                benchmark_dir=up("benchmark_dir"), html_dir=up("html_dir"), env_dir=up("env_dir"))
    if results is not None:
        conf["results_dir"] = str(Path(results).resolve())
    path = repo / ".asv" / "local.conf.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(conf, indent=2))
    return path
