"""A command's set-up installs what the command imports: with every module some command needs but
this one does not declare made unimportable, ``summary``, ``table`` and ``todo`` still run to the
end on the frozen records (a fresh clone's .venv holds the declared modules and no more); each
declared module comes from pyproject's dependencies or the extras the command installs; pip's
temporary folders stay in .venv; and the dirty-tree check sees edits git's index was told to ignore."""
import importlib.metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness.drive.asv import suite
from harness.drive.commands import bootstrap, compare

from conftest import FROZEN

REPO = Path(__file__).resolve().parents[1]
# In the child: a meta-path finder ahead of all others refuses the modules of DENY, as an
# interpreter without them would; set-up is skipped (it would install them).
CHILD = """
import importlib.abc, json, sys
DENY = set(json.loads(sys.argv[1]))
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in DENY:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
from harness.drive.commands import bootstrap, cli
bootstrap.ensure = lambda command: None
codes = [cli.main(argv) for argv in json.loads(sys.argv[2])]
sys.exit(max(codes))
"""


def undeclared(command: str) -> list[str]:
    """The modules some command needs and ``command`` does not declare."""
    every = {m for modules, _ in bootstrap.NEEDS.values() for m in modules}
    return sorted(every - set(bootstrap.NEEDS[command][0]) - {"pip"})


def test_the_reading_commands_run_with_only_the_modules_they_declare():
    assert {tuple(bootstrap.NEEDS[c][0]) for c in ("summary", "table", "todo")} == {bootstrap.BASE}
    argv = [["summary", str(FROZEN / "records")],
            ["table", "tricks", "--down", "technique", "--where", "workload=lm", "--where", "batch=16", "--where",
             "seq_len=1024", "--results", str(FROZEN)],
            ["todo", "--results", str(FROZEN)]]
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(undeclared("summary")), json.dumps(argv)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "No module named" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| technique" in done.stdout


def test_each_declared_module_comes_from_the_dependencies_or_the_commands_extras():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    providers = importlib.metadata.packages_distributions()

    def names(specs) -> set[str]:
        return {s.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
                for s in specs}
    for command, (modules, extras) in bootstrap.NEEDS.items():
        if modules == ("pip",):
            continue
        given = names(project["dependencies"]) | {n for e in bootstrap.split(extras)
                                                  for n in names(project["optional-dependencies"][e])}
        for module in modules:
            dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
            assert dists & given, f"{command} imports {module} ({dists}), which neither pyproject's dependencies " \
                                  f"nor its extras {extras!r} install"


def test_pip_makes_its_temporary_folders_in_the_venv_and_the_next_set_up_clears_a_killed_ones(monkeypatch, tmp_path):
    monkeypatch.setattr(bootstrap, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(bootstrap, "has_nvidia_gpu", lambda: False)
    left = bootstrap.build_dir() / "pip-unpack-killed"
    left.mkdir(parents=True)
    seen = []

    def call(cmd, **kw):
        seen.append((cmd, kw.get("env", {}).get("TMPDIR"), left.exists()))
        return 0
    monkeypatch.setattr(bootstrap, "_call", call)
    bootstrap.install(tmp_path / ".venv" / "bin" / "python", [])
    assert [(tmpdir, there) for _, tmpdir, there in seen] == [(str(bootstrap.build_dir()), False)]
    assert not bootstrap.build_dir().exists()  # cleared once the install is whole


@pytest.mark.parametrize("flag", ["--skip-worktree", "--assume-unchanged"])
def test_an_edit_git_status_is_told_to_ignore_still_makes_the_tree_dirty(tmp_path, flag):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)
    (tmp_path / "harness").mkdir()
    for name in ("a.py", "b.py"):
        (tmp_path / "harness" / name).write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    git("update-index", flag, "harness/a.py")
    assert suite.hidden_edits(tmp_path) == []  # marked, not edited
    compare.refuse_dirty(tmp_path)
    (tmp_path / "harness" / "a.py").write_text("x = 2\n")
    assert suite.hidden_edits(tmp_path, "harness") == ["harness/a.py"]
    with pytest.raises(compare.CompareRefused, match=r"1 uncommitted change\(s\) \(e\.g\. harness/a\.py\)"):
        compare.refuse_dirty(tmp_path)
