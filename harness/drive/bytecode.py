"""Compiled bytecode for the fresh processes the harness starts, kept in a cache of its own.

Every case runs in a fresh process (asv's, or a compare's run), and most import torch: some
2,000 modules. An image that sets ``PYTHONDONTWRITEBYTECODE`` (a common line of Dockerfiles) and
ships no bytecode makes each of those processes compile them all again, which takes longer than
the whole of a small case. So where the setting is on and no ``PYTHONPYCACHEPREFIX`` is set, the
processes the harness starts write and read their bytecode under ``.asv/pycache`` instead: never
beside the sources, so the image's packages and the repository stay as the setting keeps them.
What a case measures is untouched: it times its steps, long after the imports.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from harness.measure.records.store import LOCAL

CACHE = LOCAL.parent / "pycache"
OFF = "PYTHONDONTWRITEBYTECODE"
PREFIX = "PYTHONPYCACHEPREFIX"


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


def warm(environ: Mapping[str, str], modules: tuple[str, ...]) -> bool:
    """Compile ``modules`` where ``environ`` keeps bytecode (the cache it names, else beside the
    sources), by importing them in one process, where any of them is not there yet; False where
    there is nothing to do or nowhere to keep it. Processes started after it (pytest's workers,
    each of which would compile the same modules at the same time) read it."""
    cache = environ.get(PREFIX)
    if environ.get(OFF) and not cache:
        return False  # nothing compiled would be kept
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
