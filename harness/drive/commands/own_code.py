"""Each side of a compare runs its own commit's code, and nothing else of the project.

A case's process runs with its worktree first on its path, but that alone is not enough: with the
project installed editable, the installer's import hook maps ``harness`` to the checkout, and a
``harness.<module>`` that the worktree lacks is loaded from there, so a commit that cannot import
would be measured with the checkout's module and pass. The processes of a side (and every Python
process they start, which inherits the environment) therefore import a ``sitecustomize`` that
puts a finder first in ``sys.meta_path``: the project's packages are found in the side's worktree
alone, and one that is not there fails to import, naming the worktree.
"""
from __future__ import annotations

import os
from pathlib import Path

TREE_ENV = "OOMBENCH_OWN_TREE"
OWN = ("harness", "benchmarks")  # the project's top-level packages

# Standard library only: it runs in every process of a side, before anything else is imported.
SITECUSTOMIZE = f'''"""Written by harness compare (harness.drive.commands.own_code): {OWN} from one worktree only."""
import importlib.machinery
import importlib.util
import os
import sys

_TREE = os.path.realpath(os.environ.get({TREE_ENV!r}, ""))
_HERE = os.path.dirname(os.path.realpath(__file__))


def _inside(path):
    return bool(path) and os.path.realpath(path).startswith(_TREE + os.sep)


class OwnTree:
    """The project's modules from the worktree of this side alone; any other is left to the rest."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] not in {OWN!r}:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [_TREE] if "." not in name else path)
        where = spec and (spec.origin if spec.has_location else next(iter(spec.submodule_search_locations or []), ""))
        if not _inside(where):
            raise ModuleNotFoundError(f"No module named {{name!r}} in the worktree {{_TREE}}", name=name)
        return spec


if _TREE and os.path.isdir(_TREE):
    sys.meta_path.insert(0, OwnTree)
# A sitecustomize this one shadows (the interpreter's own) still runs.
_other = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.realpath(p or ".") != _HERE])
if _other is not None and _other.loader is not None:
    _other.loader.exec_module(importlib.util.module_from_spec(_other))
'''


def site_folder(root: Path) -> Path:
    """A folder under ``root`` holding the ``sitecustomize`` above, to put first on a side's path."""
    folder = Path(root) / "site"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return folder


def environ(tree: Path, site: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` for a process of the side in ``tree``: the guard's folder, then the worktree, first
    on its path (any PYTHONPATH of the user's after them, for what is not the project's)."""
    path = [str(site), str(tree), base.get("PYTHONPATH", "")]
    return {**base, "PYTHONPATH": os.pathsep.join(p for p in path if p), TREE_ENV: str(tree)}
