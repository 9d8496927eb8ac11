"""Compiled bytecode for the fresh processes the harness starts, kept in a cache of its own.

Every case runs in a fresh process (asv's, or a compare's run), and most import torch: some
2,000 modules. An image that sets ``PYTHONDONTWRITEBYTECODE`` (a common line of Dockerfiles) and
ships no bytecode makes each of those processes compile them all again, which takes longer than
the whole of a small case. So where the setting is on and no ``PYTHONPYCACHEPREFIX`` is set, the
processes the harness starts write and read their bytecode under ``.asv/pycache`` instead: never
beside the sources, so the image's packages and the repository stay as the setting keeps them.
What a case measures is untouched: it times its steps, long after the imports.

A cache named that way is read in place of the ``__pycache__`` folders pip compiles beside each
package it installs, so a fresh cache would compile again all that pip compiled: ``seed`` links
that bytecode into it first. Python checks each file against its source as it reads it, so a
stale one is compiled again, written over the link, never into the package.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from harness.measure.records.store import LOCAL

CACHE = LOCAL.parent / "pycache"
OFF = "PYTHONDONTWRITEBYTECODE"
PREFIX = "PYTHONPYCACHEPREFIX"
SEEDED = "seeded.json"  # in the cache: the library folders last linked from, and when each last changed


def for_children(environ: Mapping[str, str], cache: Path = CACHE) -> dict[str, str]:
    """``environ`` for a process the harness starts: where it would compile every module afresh
    (bytecode writing off, no cache folder named), it keeps its bytecode under ``cache``."""
    env = dict(environ)
    if env.get(OFF) and not env.get(PREFIX):  # Python reads any non-empty value as on
        del env[OFF]
        env[PREFIX] = str(cache)
    return env


def cached(module: str, cache: str | Path | None) -> bool:
    """Whether ``module`` (dotted) has its bytecode under ``cache`` (None: beside its source, in
    ``__pycache__``), found without importing it: a package's submodule is looked up beside the
    package's own files."""
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return True  # not there, or not Python source: nothing of it to compile
    path = Path(spec.origin).parent.joinpath(*rest.split(".")) if rest else Path(spec.origin)
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    kept = sys.pycache_prefix
    try:
        sys.pycache_prefix = str(cache) if cache else None
        return Path(importlib.util.cache_from_source(str(source))).exists()
    finally:
        sys.pycache_prefix = kept


def library_folders() -> list[Path]:
    """Where this interpreter's standard library and installed packages live (one may hold another)."""
    paths = sysconfig.get_paths()
    return sorted({Path(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths})


def outermost(folders: list[Path]) -> list[Path]:
    """``folders`` less those inside another of them: each walked once."""
    return [f for f in folders if not any(f != o and f.is_relative_to(o) for o in folders)]


def seeded(environ: Mapping[str, str]) -> Mapping[str, str]:
    """``environ``, once the cache it names (if it names one) holds the bytecode this interpreter's
    libraries were installed with. Walked again only where a library folder changed since (pip
    adds, replaces or removes a package's folder there)."""
    if not environ.get(PREFIX):
        return environ
    folders = library_folders()
    stamp = Path(environ[PREFIX]) / SEEDED
    seen = json.dumps({str(f): f.stat().st_mtime_ns for f in folders if f.is_dir()}, sort_keys=True)
    with contextlib.suppress(OSError):
        if stamp.read_text() == seen:
            return environ
    seed(stamp.parent, outermost(folders))
    with contextlib.suppress(OSError):
        stamp.write_text(seen)
    return environ


def seed(cache: str | Path, roots: list[Path]) -> int:
    """Link into ``cache`` each module's bytecode that sits under ``roots`` in ``__pycache__``
    for this interpreter, where ``cache`` lacks it: the file Python would look for there under
    that prefix. A hard link where one can be made, else a symbolic one. Returns how many were
    linked."""
    cache, suffix, made = Path(cache), f".{sys.implementation.cache_tag}.pyc", 0
    for root in roots:
        for folder, _, files in os.walk(root):
            if Path(folder).name != "__pycache__" or Path(folder).is_relative_to(cache):
                continue
            # An optimised level (name.tag.opt-1.pyc) is not what a plain run reads.
            shipped = [f for f in files if f.endswith(suffix) and f.count(".") == 2]
            made += _link_all(Path(folder), cache / Path(folder).parent.relative_to("/"), shipped)
    return made


def _link_all(source: Path, dest: Path, names: list[str]) -> int:
    made = 0
    for name in names:
        target = dest / name
        if target.exists():
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source / name, target)
            except OSError:  # another file system
                os.symlink(source / name, target)
            made += 1
        except OSError:
            pass  # another process linked it first, or the cache is not writable: compiled as before
    return made


def warm(environ: Mapping[str, str], modules: tuple[str, ...]) -> bool:
    """Compile ``modules`` where ``environ`` keeps bytecode (the cache it names, else beside the
    sources), by importing them in one process, where any of them is not there yet; False where
    there is nothing to do or nowhere to keep it. Processes started after it (pytest's workers,
    each of which would compile the same modules at the same time) read it."""
    cache = environ.get(PREFIX)
    if environ.get(OFF) and not cache:
        return False  # nothing compiled would be kept
    seeded(environ)
    todo = [m for m in modules if not cached(m, cache)]
    if not todo:
        return False
    print(f"oombench: compiling {', '.join(todo)} into {cache or 'their __pycache__'} (once)", file=sys.stderr,
          flush=True)
    # One module failing to import (a library that needs a GPU, or is absent) stops none of the others.
    script = "import importlib\nfor m in %r:\n    try: importlib.import_module(m)\n    except Exception: pass\n" % todo
    subprocess.run([sys.executable, "-c", script], env=dict(environ), stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return True
