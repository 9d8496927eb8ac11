"""asv's benchmarks as the suite declares them: each class of ``benchmarks/`` that measures a
case, and each of its parameter sets with the case and parameters it measures. ``harness todo``,
``harness compare`` and the profiles read the suite from here."""
from __future__ import annotations

import importlib
import inspect
import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import cases
from harness.measure.records.store import REPO


@dataclass(frozen=True)
class Bench:
    family: str  # the module of benchmarks/
    cls: str
    methods: tuple[str, ...]  # its track_* methods: asv's benchmarks, one per figure
    args: str  # the parameter set as asv writes it: "('fp32', '16GB')", or "" for none
    case: str
    params: str  # the case's full parameters, as JSON with sorted keys: what a record holds

    def names(self) -> list[str]:
        """As ``--bench`` sees them: ``family.Class.method(args)``."""
        return [f"{self.family}.{self.cls}.{m}{self.args}" for m in self.methods]


def families(repo: Path = REPO) -> list[str]:
    return sorted(p.stem for p in (repo / "benchmarks").glob("*.py") if p.stem not in ("__init__", "common"))


def classes(repo: Path = REPO):
    """(family, class name, class) of every benchmark class of benchmarks/ that measures a case."""
    sys.path.insert(0, str(repo))
    try:
        mods = [importlib.import_module(f"benchmarks.{f}") for f in families(repo)]
    finally:
        sys.path.remove(str(repo))
    for mod in mods:
        for name, cls in vars(mod).items():
            if inspect.isclass(cls) and not name.startswith("_") and cls.__module__ == mod.__name__ \
                    and getattr(cls, "case", ""):
                yield mod.__name__.split(".")[-1], name, cls


def param_names(repo: Path = REPO) -> dict[str, list[str]]:
    """``"family.Class"`` -> its parameters' names, in the order asv writes their values."""
    return {f"{family}.{name}": list(getattr(cls, "param_names", [])) for family, name, cls in classes(repo)}


def benches(repo: Path = REPO) -> list[Bench]:
    """Every (benchmark class, parameter set) of benchmarks/ with the case and parameters it measures."""
    out = []
    for family, name, cls in classes(repo):
        methods = tuple(m for m in dir(cls) if m.startswith("track_"))
        combos = itertools.product(*cls.params) if getattr(cls, "params", []) else [()]
        for combo in combos:
            # A class whose parameters name something else than the case's (a model's name) maps them itself.
            chosen = (cls.case_params(*combo) if hasattr(cls, "case_params")
                      else {**cls.fixed, **dict(zip(getattr(cls, "param_names", []), combo))})
            params = dict(cases.get(cls.case).config(chosen).params)
            args = f"({', '.join(map(repr, combo))})" if combo else ""
            out.append(Bench(family, name, methods, args, cls.case, json.dumps(params, sort_keys=True)))
    return out
