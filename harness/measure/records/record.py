"""One record type for every measurement, and the file it is appended to.

A record holds the case, its parameters, how it ended, the timing with its spread, the work one
step does (so rates can be derived), peak memory by label, the correctness check, and the
environment. Records are appended one JSON line at a time and flushed, so a run that fails or
is interrupted keeps everything measured before it.
"""
from __future__ import annotations

import math
import reprlib
import time
from dataclasses import asdict, dataclass, field, fields
from functools import cache

from harness.measure.guards.budget import Budget
from harness.measure.instruments.environment import Environment
from harness.measure.outcomes import DEVICE, DOES_NOT_FIT, HOST, OK, OUTCOMES
from harness.measure.instruments.timing import Timing

SCHEMA = 2


@dataclass(frozen=True)
class Record:
    case: str
    params: dict
    outcome: str
    environment: Environment
    reason: str | None = None
    timing: Timing | None = None
    # What one step does: {"bytes": n} for a transfer, {"flops": n} for arithmetic.
    work: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)
    requested_bytes: int | None = None
    # How busy the GPU was during the timed steps: {"fraction": 0..1, "source": how it was read}.
    gpu_busy: dict = field(default_factory=dict)
    # The emulated card it ran under (``harness.measure.guards.budget.Budget``): name, limit_bytes,
    # card_bytes, enforced; for a named card also emulated_bytes, overhead_bytes and overhead_read.
    # Empty for a case without a budget.
    budget: dict = field(default_factory=dict)
    run_id: str | None = None
    commit: str | None = None
    created: float = field(default_factory=time.time)
    # 2: memory levels cover the timed steps alone (set-up under "setup."), raw step times kept.
    # 1 (records written before): levels covered the whole case, build and check included.
    schema: int = SCHEMA

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    def short_of(self) -> str | None:
        """Which memory a does-not-fit case ran short of (``outcomes.DEVICE`` or ``HOST``), None for
        any other outcome. Records written before it was kept say so only in their reason, which
        for the host's names it ("... of pinned host memory ...")."""
        if self.outcome != DOES_NOT_FIT:
            return None
        if "short_of" in self.check:
            return self.check["short_of"]
        return HOST if "host memory" in (self.reason or "") else DEVICE

    def rate(self, unit: str) -> float | None:
        """Work per second at the median step time, e.g. rate("bytes") in bytes/s."""
        if self.timing is None or unit not in self.work:
            return None
        return self.work[unit] / self.timing.median_s

    def device_bytes(self) -> int | None:
        """The most device memory the case took on any one GPU: NVML's used memory at the peak
        less what was in use before it started (its CUDA context counts, other processes do not).
        None for a case that ran on the CPU (``device=cpu``): what NVML saw move meanwhile was
        another process's or the driver's, not the case's."""
        if self.params.get("device") == "cpu":
            return None
        gains = [v - self.memory.get(label.replace("device.used.", "device.used_before."), 0)
                 for label, v in self.memory.items() if label.startswith("device.used.")]
        return max(gains) if gains else None

    def host_bytes(self) -> int | None:
        """The most host memory any one process of the case held over its steps: the kernel's
        high-water mark of this process, or of each rank where ranks ran the steps (a process of
        its own each); the sampled resident set where no mark was read; None where neither was."""
        marks = [v for label, v in self.memory.items()
                 if label == "host.max_rss" or label.startswith("host.max_rss.rank")]
        return max(marks) if marks else self.memory.get("host.rss")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["environment"] = self.environment.to_dict()
        d["timing"] = self.timing.to_dict() if self.timing else None
        return d

    @classmethod
    def from_dict(cls, d: dict, seen: list | None = None) -> "Record":
        """The record a line holds; ValueError naming the field where it is not a valid one.
        ``seen``: a list the caller keeps over the records of one file, holding the last
        environment read as [its dict, its Environment]: a record whose environment equals that
        dict shares the Environment, checked and built once (a file's records nearly always share
        one). The caller must not change those dicts afterwards."""
        raw = d.get("environment") if isinstance(d, dict) else None
        same = bool(seen) and seen[0] == raw
        _validate(d, environment=not same)
        d = dict(d)
        d.setdefault("schema", 1)
        d["environment"] = seen[1] if same else Environment.from_dict(raw)
        if seen is not None and not same:
            seen[:] = [raw, d["environment"]]
        d["timing"] = Timing.from_dict(d["timing"]) if d.get("timing") else None
        return cls(**d)



def _validate(d: dict, environment: bool = True) -> None:
    """ValueError naming the first field of ``d`` (one JSON line) that a Record cannot hold: a
    wrong type, a number that is not finite or is negative, an unknown field. Every reader goes
    through here, so a figure that reaches a table or the gate is one that can be computed with."""
    if not isinstance(d, dict):
        raise ValueError(f"a record is a JSON object, got {type(d).__name__}")
    _known(d, Record, "")
    for name, kind in (("case", str), ("params", dict), ("outcome", str), ("environment", dict)):
        _is(d.get(name), kind, name)
    _name(d["case"], "case")  # a case's name is a word: one of megabytes would be copied into every page
    if d["outcome"] not in OUTCOMES:
        raise ValueError(f"outcome {_short(d['outcome'])} is not one of {', '.join(OUTCOMES)}")
    for name, kind in (("reason", str), ("run_id", str), ("commit", str)):
        _is(d.get(name), kind, name, none=True)
    for name in ("work", "memory", "check", "gpu_busy", "budget"):
        _is(d.get(name, {}), dict, name)
    for k, v in d["params"].items():
        _name(k, "params")
        if not (v is None or isinstance(v, (bool, int)) or _finite(v) or isinstance(v, str) and len(v) <= NAME_MAX):
            raise ValueError(f"params.{_short(k)} must be a string of at most {NAME_MAX} characters, a number "
                             f"or a boolean, got {_short(v)}")
    for k, v in d.get("work", {}).items():
        _number(v, f"work.{_short(k)}")
    for k, v in d.get("memory", {}).items():
        _count(v, f"memory.{_short(k)}")
    _validate_busy(d.get("gpu_busy", {}))
    _validate_budget(d.get("budget", {}))
    if d.get("requested_bytes") is not None:
        _count(d["requested_bytes"], "requested_bytes")
    if "created" in d:
        _number(d["created"], "created")
    if "schema" in d and (type(d["schema"]) is not int or not 1 <= d["schema"] < 2**31):
        raise ValueError(f"schema must be a whole number from 1, got {_short(d['schema'])}")
    _validate_timing(d.get("timing"), d["outcome"])
    if environment:
        _validate_environment(d["environment"])


# The longest parameter name or value, library name or version a record may hold: each is a
# word or a version, and a longer one is no measurement's. Far below the 4,300 digits past which
# Python refuses to read a number, so no reader that parses a version's digits can be stopped.
NAME_MAX = 1000
_SECONDS = ("median_s", "q25_s", "q75_s", "min_s", "max_s")
# No benchmark's step takes a week: a longer one is a unit slip or a forgery, and past it a ratio
# of two times can overflow to infinity.
MAX_STEP_S = 7 * 24 * 3600.0
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel = 2


def _short(value) -> str:
    """A value as a message quotes it: short, and shallow however deeply the value nests."""
    if type(value) is str and len(value) <= _SHORT.maxstring:
        text = repr(value)
        if len(text) <= _SHORT.maxstring:  # what reprlib gives such a string, without its cost
            return text
    return _SHORT.repr(value)


@cache
def _field_names(kind) -> frozenset:
    return frozenset(f.name for f in fields(kind))


def _known(d: dict, kind, prefix: str) -> None:
    names = _field_names(kind)
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(f"unknown field {prefix}{_short(unknown[0])}; the fields are {', '.join(sorted(names))}")


def _name(value, where: str) -> None:
    if not (isinstance(value, str) and 0 < len(value) <= NAME_MAX):
        raise ValueError(f"{where} holds {_short(value)}: a name of 1 to {NAME_MAX} characters is wanted")


def _text(value: str, where: str) -> None:
    """A name the pages and docs show (a GPU's, a CPU's, a version): at most ``NAME_MAX`` characters."""
    if len(value) > NAME_MAX:
        raise ValueError(f"{where} holds {len(value)} characters ({_short(value)}): at most {NAME_MAX} are wanted")


def _is(value, kind, name: str, none: bool = False) -> None:
    if not (isinstance(value, kind) or (none and value is None)):
        what = "a list" if isinstance(kind, tuple) else f"a {kind.__name__}"
        raise ValueError(f"{name} must be {what}{' or null' if none else ''}, got {_short(value)}")


def _finite(v) -> bool:
    try:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    except OverflowError:  # an int past any float: no figure can be computed with it
        return False


def _number(v, name: str) -> None:
    if not _finite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {_short(v)}")


def _count(v, name: str) -> None:
    if type(v) is not int or not 0 <= v < 2**63:
        raise ValueError(f"{name} must be a whole number of bytes from 0 to 2**63, got {_short(v)}")


def _validate_busy(busy: dict) -> None:
    fraction = busy.get("fraction")
    if fraction is not None and not (_finite(fraction) and 0 <= fraction <= 1):
        raise ValueError(f"gpu_busy.fraction must be a number from 0 to 1, got {_short(fraction)}")
    _is(busy.get("source"), str, "gpu_busy.source", none=True)


def _validate_budget(budget: dict) -> None:
    if not budget:
        return
    _known(budget, Budget, "budget.")
    for name in ("name", "enforced"):
        _is(budget.get(name), str, f"budget.{name}")
    for name in ("limit_bytes", "card_bytes"):
        _count(budget.get(name), f"budget.{name}")
    for name in ("emulated_bytes", "overhead_bytes"):  # a named card's: absent for a cap
        if name in budget:
            _count(budget[name], f"budget.{name}")
    if "overhead_read" in budget:
        _is(budget["overhead_read"], str, "budget.overhead_read")


def _validate_timing(timing, outcome: str) -> None:
    if timing is None or timing == {}:
        if outcome == OK:
            raise ValueError("an ok record needs its timing (median_s, quartiles, steps)")
        return
    _is(timing, dict, "timing")
    _known(timing, Timing, "timing.")
    for name in _SECONDS:
        v = timing.get(name)
        if not _finite(v) or v <= 0:
            raise ValueError(f"timing.{name} must be a finite number of seconds > 0, got {_short(v)}")
        if v > MAX_STEP_S:
            raise ValueError(f"timing.{name} must be at most {MAX_STEP_S:g} seconds (no step takes a week), "
                             f"got {_short(v)}")
    if not timing["min_s"] <= timing["q25_s"] <= timing["median_s"] <= timing["q75_s"] <= timing["max_s"]:
        raise ValueError("timing must hold min_s <= q25_s <= median_s <= q75_s <= max_s")
    for name, least in (("steps", 1), ("warmup", 0)):
        if type(timing.get(name)) is not int or not least <= timing[name] < 2**31:
            raise ValueError(f"timing.{name} must be a whole number >= {least}, got {_short(timing.get(name))}")
    samples = timing.get("samples_s", [])
    _is(samples, (list, tuple), "timing.samples_s")
    if samples and len(samples) != timing["steps"]:
        raise ValueError(f"timing.samples_s holds {len(samples)} steps, timing.steps says {timing['steps']}")
    plain = all(type(s) is float and 0 < s <= MAX_STEP_S for s in samples)  # NaN fails the comparison
    if not (plain or all(_finite(s) and 0 < s <= MAX_STEP_S for s in samples)):
        raise ValueError("timing.samples_s must hold finite numbers of seconds > 0" + (
            f" (at most {MAX_STEP_S:g})" if all(_finite(s) and s > 0 for s in samples) else ""))
    if samples:
        _from_samples(timing, samples)


def _from_samples(timing: dict, samples) -> None:
    """A record's median, quartiles and extremes are its samples' (``Timing.from_samples``): a
    summary that its own steps contradict would be judged on the summary by one reader and on
    the steps by another (the gate's rank test reads the steps, its ratio the median)."""
    made = Timing.from_samples(samples, 0)
    for name in ("median_s", "q25_s", "q75_s", "min_s", "max_s"):
        if not math.isclose(timing[name], getattr(made, name), rel_tol=1e-9):
            raise ValueError(f"timing.{name} is {_short(timing[name])}, and its samples_s give "
                             f"{_short(getattr(made, name))}: a summary its own steps contradict")


def _validate_environment(env: dict) -> None:
    _known(env, Environment, "environment.")
    for name, kind in (("python", str), ("platform", str), ("cpu", str), ("num_cpu", int),
                       ("libraries", dict), ("devices", dict)):
        _is(env.get(name), kind, f"environment.{name}")
        if kind is str:
            _text(env[name], f"environment.{name}")
    for name, kind in (("framework_cuda", dict), ("shims", (list, tuple)), ("executable", str), ("host", dict)):
        if name in env:
            _is(env[name], kind, f"environment.{name}")
    for lib, version in env["libraries"].items():
        _name(lib, "environment.libraries")
        _name(version, f"environment.libraries.{_short(lib)}")
    if isinstance(env["num_cpu"], bool) or not 0 <= env["num_cpu"] < 2**31:
        raise ValueError(f"environment.num_cpu must be a whole number >= 0, got {_short(env['num_cpu'])}")
    _is(env.get("host", {}).get("id"), str, "environment.host.id", none=True)
    devices = env["devices"]
    for name in ("driver", "cuda_driver", "reason"):
        _is(devices.get(name), str, f"environment.devices.{name}", none=True)
        if name != "reason" and devices.get(name) is not None:
            _text(devices[name], f"environment.devices.{name}")
    _is(devices.get("gpus", []), (list, tuple), "environment.devices.gpus")
    _is(devices.get("peer", []), (list, tuple), "environment.devices.peer")
    if not all(isinstance(row, (list, tuple)) for row in devices.get("peer", [])):
        raise ValueError("environment.devices.peer must be a list of lists")
    for gpu in devices.get("gpus", []):
        _validate_gpu(gpu)


_GPU = {"index": int, "name": str, "memory_total": int, "memory_free": int, "compute_capability": str, "uuid": str}


def _validate_gpu(gpu) -> None:
    _is(gpu, dict, "environment.devices.gpus[]")
    if set(gpu) != set(_GPU):
        raise ValueError(f"environment.devices.gpus[] must have the fields {', '.join(_GPU)}")
    for name, kind in _GPU.items():
        if type(gpu[name]) is not kind or (kind is int and not 0 <= gpu[name] < 2**63):
            raise ValueError(f"environment.devices.gpus[].{name} must be a {kind.__name__}"
                             f"{' >= 0' if kind is int else ''}, got {_short(gpu[name])}")
        if kind is str:
            _text(gpu[name], f"environment.devices.gpus[].{name}")
