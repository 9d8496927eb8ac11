"""Folders a command owns: it replaces or clears a folder only where its own marker lists
everything the folder holds, so a file it did not make is never deleted.

A command that makes a folder whole (``pages``, ``stack``) writes a marker file in it naming the
command and the entries it made (the folder's own; what lies inside a folder it made is its).
Before it replaces that folder, ``refusal`` says why it may not: the path is a file, or the folder
holds an entry the marker does not list (a user's file, or a folder made by anything else); an
empty or missing folder is free. The refusal names a fresh path
beside it. Temporary folders a command builds beside its target carry the builder's pid in
their name, so a later run removes those of a builder that is gone (killed mid-build) and no
others. Standard library only: ``stack`` uses it before set-up.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path


def _listed(folder: Path, marker: str) -> set[str] | None:
    """The entries the marker lists, with the marker itself; None where there is no readable marker."""
    try:
        made = json.loads((folder / marker).read_text())
        return {marker, *map(str, made["entries"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def foreign(folder: Path, marker: str) -> list[str]:
    """The entries of ``folder`` its marker does not list, sorted (all of them where it has no marker)."""
    names = sorted(p.name for p in folder.iterdir())
    ours = _listed(folder, marker) or set()
    return [n for n in names if n not in ours]


def fresh(path: Path) -> Path:
    """A path beside ``path`` that does not exist yet: ``NAME-2``, ``NAME-3``..."""
    n = 2
    while path.with_name(f"{path.name}-{n}").exists():
        n += 1
    return path.with_name(f"{path.name}-{n}")


def _printable(name: str) -> str:
    """A file name on one line: its control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def _arg(flag: str, path: Path) -> str:
    return f"{flag} {path}" if flag else str(path)


def refusal(folder: Path, marker: str, flag: str = "") -> str | None:
    """Why ``folder`` may not be replaced whole, in one line naming a fresh path (as ``flag PATH``), or None."""
    folder = Path(folder)
    named, fix = _arg(flag, folder), f"e.g. {_arg(flag, fresh(folder))}"
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return f"{named} is not a folder: name a new one, {fix}"
    if not folder.exists():
        return None
    try:
        others = foreign(folder, marker)
    except OSError as e:
        return f"{named} cannot be read ({e.strerror}): name a new folder, {fix}"
    if not others:
        return None
    if (folder / marker).is_file() and _listed(folder, marker) is None:
        return (f"{named} was made by an older oombench, whose marker does not list what it made: delete the "
                f"folder yourself, or name a new one, {fix}")
    shown = ", ".join(map(_printable, others[:3])) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return f"{named} holds what oombench did not make ({shown}) and would be replaced whole: name a new folder, {fix}"


def mark(folder: Path, marker: str, made_by: str) -> None:
    """Marks ``folder`` as ``made_by``'s, listing every entry it holds now."""
    entries = sorted(p.name for p in Path(folder).iterdir() if p.name != marker)
    text = json.dumps({"made_by": made_by, "entries": entries}, indent=1)
    (Path(folder) / marker).write_text(f"{text}\n")


def umask() -> int:
    """This process's umask (read by setting it, so set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def open_as_umask(folder: Path) -> None:
    """``folder`` (a ``mkdtemp``, 0700) given the mode a plain ``mkdir`` would have."""
    os.chmod(folder, 0o777 & ~umask())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def temp_name(target: Path, kind: str) -> str:
    """The prefix of a temporary folder beside ``target``, naming this process as its builder."""
    return f".{target.name}.{kind}-{os.getpid()}-"


def remove_stale(target: Path, kinds: tuple[str, ...]) -> list[Path]:
    """Removes the temporary folders beside ``target`` (``temp_name``) whose builder is gone."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(?:{'|'.join(map(re.escape, kinds))})-(\d+)-.*")
    removed = []
    for path in target.parent.iterdir() if target.parent.is_dir() else ():
        found = pattern.fullmatch(path.name)
        if found and path.is_dir() and not path.is_symlink() and not pid_alive(int(found.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
