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
