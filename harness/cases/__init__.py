"""The case registry: each case names its parameters and builds a ``Workload`` for one choice.

A case module holds the workload (data, model, the step and its reference check); it never
reads a clock or a memory counter: that is ``harness.drive.runner``'s job.
"""
from __future__ import annotations

import importlib
from harness.cases.base import Case

# case name -> module under harness.cases that defines CASE
MODULES = {"ceilings": "ceilings", "unified": "unified", "unified_seed": "unified_seed", "out_of_core": "out_of_core",
           "chainer_gcn": "chainer_gcn", "chainer_mlp": "chainer_mlp", "chainer_cnn": "chainer_cnn",
           "torch_gcn": "torch_gcn", "parallel_resnet50": "parallel_resnet50", "parallel_lm": "parallel_lm",
           "tricks": "tricks", "fits": "fits", "pageable": "pageable",
           "beyond": "beyond", "seed000": "seed000", "tooling": "tooling",
           "fragmentation": "fragmentation", "fragmentation_cupy": "fragmentation_cupy", "try": "try_model"}


def names() -> list[str]:
    return sorted(MODULES)


def get(name: str) -> Case:
    if name not in MODULES:
        raise ValueError(f"unknown case {name!r}; known cases: {', '.join(names())}")
    return importlib.import_module(f"{__name__}.{MODULES[name]}").CASE


def gpu_work_elsewhere(name: str) -> bool:
    """Whether case ``name`` runs its step's GPU work in processes of its own (``Case.gpu_work_elsewhere``);
    False for a name no case has (a hostile or retired record)."""
    return name in MODULES and get(name).gpu_work_elsewhere


def host_paced(record) -> bool:
    """Whether ``record``'s step is paced by its host (``Case.host_paced``); False for a name no
    case has, or parameters the case does not declare (a hostile or retired record)."""
    if record.case not in MODULES:
        return False
    case = get(record.case)
    try:
        return bool(case.host_paced(**case.config(record.params).params))
    except (TypeError, ValueError, KeyError):
        return False


def outdated(record) -> bool:
    """Whether ``record``'s case calls it measured by code that no longer trains or checks as
    today's does (``Case.outdated``); False for a name no case has (a hostile or retired record)."""
    return record.case in MODULES and get(record.case).outdated(record)


def upgraded(record):
    """``record`` with the parameters its case added since it was filed at the values it ran at
    (``Case.earlier``: a record filed before ``budget`` existed ran on the whole card), so that
    records of earlier commits match today's on every reader: tables, pages and the gate."""
    import dataclasses
    if record.case not in MODULES:
        return record
    params = get(record.case).upgrade(record.params)
    return record if params == dict(record.params) else dataclasses.replace(record, params=params)
