"""A model the user brings (or a built-in architecture), trained under one way out: ``harness try``'s case.

Parameters:
- ``device``: cpu or cuda;
- ``target``: ``path/to/file.py:factory``, ``package.module:factory`` or a built-in name
  (``harness.workloads.training.user_model`` says what a factory returns);
- ``technique``: a way out as ``tricks`` names it (``bf16_autocast+checkpoint``), of the
  precision, checkpoint and offload knobs and the newer ones (optimizer, lora, attention, compile,
  loss), each where the model has what it applies to (``user_model.misfit``; else a skip naming
  why): the others apply to the suite's own models only;
- ``budget``: the card emulated, as for ``tricks`` (a named card such as ``l4-24gb``, an
  allocator cap, or ``card``, the whole card);
- ``batch``: the samples of one step; ``seq_len``: the factory's ``seq_len`` (0: its default,
  or none applies).

The harness times one optimizer step. The check is ``tricks``': every loss finite and the last
below the first, then the curve held within the way's tolerance of fp32's at the same shape (this
run's fp32 record where it filed one, else fp32 trained here, on the whole card); a way held to a
criterion of its own (lora, qlora, adafactor, sgd_momentum: ``Way.falls``) is held to it instead,
fp32's curve recorded beside. A way whose first step compiles records ``compile_s``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping

from harness.cases.base import Case
from harness.measure.guards import budget as budgets
from harness.measure.guards.requirements import need_torch
from harness.measure.instruments.timing import torch_sync
from harness.measure.outcomes import CheckFailed, Skip, is_out_of_memory
from harness.measure.records.store import this_interpreters
from harness.measure.workload import Workload
from harness.workloads.training import user_model
from harness.workloads.training.precision import process
from harness.workloads.training.reference import against_reference, held_to_falling
from harness.workloads.training.trainer import losses_of
from harness.workloads.training.tricks import DEVICES, TECHNIQUES, losses_checked
from harness.workloads.training.ways import parse, runnable

CASE_NAME = "try"
# A large model's step takes seconds: the median of five timed steps, after two that warm up.
WARMUP, REPEAT = 2, 5


class Targets(tuple):
    """The ``target`` parameter: any well-formed target (the built-in names are listed)."""

    def pick(self, value) -> str:
        return user_model.well_formed(value)


class Sizes(tuple):
    """A parameter that takes any whole number from ``least`` (a batch from 1, a seq_len from 0)."""

    def __new__(cls, examples, least: int):
        made = super().__new__(cls, examples)
        made.least = least
        return made

    def pick(self, value) -> int:
        n = int(value) if str(value).isdigit() else None
        if n is None or n < self.least:
            raise ValueError(f"{value!r} is not a whole number from {self.least}")
        return n


PARAMS = {"device": DEVICES, "target": Targets(user_model.BUILT_IN), "technique": TECHNIQUES,
          "budget": budgets.CARD_BUDGETS, "batch": Sizes((1, 2, 4, 8, 16, 32), 1),
          "seq_len": Sizes((0, 512, 1024, 2048), 0)}


def build(device, target, technique, budget, batch, seq_len, run_file=None) -> Workload:
    way = parse(technique)
    refused = user_model.refused_knobs(way)
    if refused:
        raise Skip(refused)
    runnable(way, device)
    budgets.uncapped_on_cpu(device, budget)
    need_torch(device)
    with contextlib.ExitStack() as stack:
        cap = budgets.torch_capped(stack, device, budget)  # before anything is allocated
        stack.enter_context(process(way))
        trainer, work = user_model.make_trainer(target, way, batch, seq_len, device)
        stack.callback(trainer.close)
        setting = stack.pop_all()
    params = sum(p.numel() for p in trainer.model.parameters())
    shape = dict(device=device, target=target, batch=batch, seq_len=seq_len)

    def check():
        learned = losses_checked(trainer.losses)
        cap.lift()  # the reference trains on the whole card, as tricks' does
        compared = reference_check(way, trainer, run_file, shape)
        return {"losses": [float(v) for v in trainer.losses], **learned, **compared, "parameters": params,
                # float(): torchao's optimizers keep the rate as a tensor
                "lr": float(trainer.optimizer.param_groups[0]["lr"]), "reference_budget": budgets.CARD,
                **({"compile_s": trainer.compile_s} if way.compiles else {})}

    gpus = (0,) if device == "cuda" else ()
    return Workload(step=trainer.step, sync=torch_sync(gpus), check=check, work=work, gpus=gpus,
                    warmup=WARMUP, repeat=REPEAT, close=setting.close, budget=cap.budget)


def reference_check(way, trainer, run_file, shape: dict) -> dict:
    """``way``'s curve against fp32's at ``shape``: this run's fp32 record's curve, else fp32
    trained here for as many steps; none where fp32 itself is the way or does not fit."""
    if way == parse("fp32"):
        return {"reference": "itself"}
    steps = len(trainer.losses)
    curve = fp32_curve(run_file, shape, steps)
    origin = "this run's fp32 record"
    if curve is None:
        origin = "fp32 trained after the case"
        try:
            curve = trained_fp32(steps, **shape)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            why = "fp32 does not fit on the whole card at this batch"
            if way.falls is not None:
                return held_to_falling(way, trainer.losses, None, why, trainer.skipped)
            return {"reference": None, "reference_reason": why}
    try:
        if way.falls is not None:  # trains other weights or by another rule: its own criterion
            compared = held_to_falling(way, trainer.losses, "fp32", curve, trainer.skipped)
        else:
            compared = against_reference(way, trainer.losses, "fp32", curve, trainer.skipped)
    except CheckFailed as e:
        e.details["reference_first_run"] = origin
        raise
    return {**compared, "reference_first_run": origin}


def trained_fp32(steps: int, device, target, batch, seq_len) -> list[float]:
    fp32 = parse("fp32")
    with process(fp32):
        return losses_of(user_model.make_trainer(target, fp32, batch, seq_len, device)[0], steps)


def fp32_curve(run_file, shape: dict, steps: int) -> list[float] | None:
    """fp32's curve at ``shape`` from an ok record this run filed (any budget: a cap changes no sum)."""
    want = dict(shape, technique="fp32")
    for rec in this_interpreters(run_file):
        if (rec.case == CASE_NAME and rec.ok and {k: rec.params.get(k) for k in want} == want
                and len(rec.check.get("losses", ())) == steps):
            return rec.check["losses"]
    return None


def answer_of(params: Mapping) -> tuple[tuple, tuple]:
    """(the model at its sequence length, what the record answers of it): under a named card, the
    run's choice for that card (it files only the way it chose); on the whole card, one way at one
    batch."""
    asked = (params.get("target"), params.get("seq_len"))
    card = params.get("budget") == "card"
    return asked, (params.get("budget"), *((params.get("technique"), params.get("batch")) if card else ()))


CASE = Case(name=CASE_NAME, params=PARAMS, build=build, doc=__doc__, allocator=lambda **_: "torch", keeps_files=True,
            answer_of=answer_of)


# ---- the models a project tracks: [tool.oombench.models] in its pyproject.toml ----------------

def registered(pyproject) -> dict[str, dict]:
    """The models ``pyproject`` (a path) names under ``[tool.oombench.models]``, each as the try
    case's parameters: ``NAME = "path/to/file.py:factory"`` (batch 1, the factory's seq_len, fp32,
    on the GPU and on the CPU), or ``NAME = {target = "...", batch = 8, seq_len = 512, technique =
    "...", device = "cuda"}`` (one device only: a model too large for the CPU names cuda).
    ValueError, naming the entry and the fix, for one the case would refuse; {} where there is none."""
    from pathlib import Path
    path = Path(pyproject)
    if not path.is_file():
        return {}
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    models = tomllib.loads(path.read_text()).get("tool", {}).get("oombench", {}).get("models", {})
    out = {}
    for name, entry in models.items():
        entry = {"target": entry} if isinstance(entry, str) else dict(entry)
        unknown = sorted(set(entry) - {"target", "batch", "seq_len", "technique", "budget", "device"})
        if unknown or "target" not in entry:
            raise ValueError(f"{path}: [tool.oombench.models] {name}: give target (and optionally batch, seq_len, "
                             f"technique, budget, device){f', not {unknown}' if unknown else ''}")
        params = {"technique": "fp32", "budget": budgets.CARD, "batch": 1, "seq_len": 0, **entry}
        try:
            CASE.config({"device": "cpu", **params})
        except ValueError as e:
            raise ValueError(f"{path}: [tool.oombench.models] {name}: {e}") from None
        out[name] = params
    return out
