"""The case registry: each case names its parameters and builds a ``Workload`` for one choice.

A case module holds the workload (data, model, the step and its reference check); it never
reads a clock or a memory counter: that is ``harness.runner``'s job.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from ..timing import Timing, no_prepare, no_sync

# case name -> module under harness.cases that defines CASE
MODULES = {"ceilings": "ceilings", "unified": "unified", "unified_seed": "unified_seed", "out_of_core": "out_of_core",
           "chainer_gcn": "chainer_gcn", "chainer_mlp": "chainer_mlp", "chainer_cnn": "chainer_cnn",
           "torch_gcn": "torch_gcn", "parallel_resnet50": "parallel_resnet50", "parallel_lm": "parallel_lm",
           "tricks": "tricks", "fits": "fits"}


@dataclass
class Workload:
    step: Callable[[], None]
    # Returns what was checked, e.g. {"rel_err": 1e-7, "tolerance": 1e-4}; raises CheckFailed.
    check: Callable[[], dict]
    work: dict
    sync: Callable[[], None] = no_sync
    # Untimed, before every step: restores the state each step must start from.
    prepare: Callable[[], None] = no_prepare
    gpus: tuple = ()
    warmup: int = 2
    repeat: int = 10
    close: Callable[[], None] = lambda: None
    # Measured elsewhere: a multi-process case times its steps inside its workers (the process
    # that calls ``step`` here only waits) and hands back that timing and each worker's peak
    # memory. The runner then files these instead of timing ``step``.
    timing: Timing | None = None
    memory: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    name: str
    params: dict  # parameter name -> tuple of allowed values
    build: Callable[..., Workload]
    # Device memory the case asks for, by parameters: quoted when it does not fit.
    declared_bytes: Callable[..., int | None] = lambda **_: None
    doc: str = ""

    def validate(self, params: dict) -> dict:
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ValueError(f"case {self.name!r} has no parameter {', '.join(map(repr, unknown))}; "
                             f"its parameters are {', '.join(self.params)}")
        missing = sorted(set(self.params) - set(params))
        if missing:
            raise ValueError(f"case {self.name!r} needs {', '.join(missing)}")
        for name, value in params.items():
            if value not in self.params[name]:
                choices = ", ".join(map(str, self.params[name]))
                raise ValueError(f"case {self.name!r}: {name}={value!r} is not one of: {choices}")
        return params

    def ordered(self, name: str, values) -> list:
        """``values`` of parameter ``name`` in the order the case declares them (budgets 16GB to
        card, techniques fp32 first); any it does not declare after them, sorted."""
        declared = list(self.params.get(name, ()))
        return sorted(values, key=lambda v: (declared.index(v) if v in declared else len(declared), str(v)))


def names() -> list[str]:
    return sorted(MODULES)


def get(name: str) -> Case:
    if name not in MODULES:
        raise ValueError(f"unknown case {name!r}; known cases: {', '.join(names())}")
    return importlib.import_module(f"{__name__}.{MODULES[name]}").CASE
