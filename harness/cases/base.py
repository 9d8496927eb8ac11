"""What a case declares: its name, its parameters with their allowed values, and how to build
its ``Workload`` for one choice of them; and ``Config``, one such choice, validated once.

A ``Config`` is made only by ``Case.config(params)`` (or ``Config.of``, or ``Config.from_json``
at a process boundary), which refuses an unknown or missing parameter and any value the case
does not declare, naming the allowed values; the string form of a value ("16" for 16) is
accepted, so command lines need no parsing of their own. Everything downstream takes the
Config as it is: nothing validates its parameters a second time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from harness.measure.workload import Workload

_MADE = object()  # what Case.config hands a new Config: nothing else can make one


@dataclass(frozen=True)
class Config:
    """One choice of a case's parameters: frozen, hashable, ``config.batch`` or ``config["batch"]``;
    ``params`` is the read-only mapping, in the order the case declares its parameters."""
    case: str
    pairs: tuple  # ((name, value), ...), each value one the case declares
    _made: object = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self._made is not _MADE:
            raise TypeError("a Config is made by Case.config(params) (or Config.of / Config.from_json), "
                            "which validates the parameters: call cases.get(NAME).config({...})")
        object.__setattr__(self, "_made", None)  # so that dataclasses.replace cannot skip the validation

    @classmethod
    def of(cls, case: Case | str, params: Mapping) -> Config:
        """``case.config(params)``; a case named by its name is found in the registry."""
        if isinstance(case, str):
            from harness import cases  # the registry imports this module
            case = cases.get(case)
        return case.config(params)

    @property
    def params(self) -> Mapping:
        return MappingProxyType(dict(self.pairs))

    def __getitem__(self, name: str):
        for k, v in self.pairs:
            if k == name:
                return v
        raise KeyError(f"case {self.case!r} has no parameter {name!r}; its parameters are "
                       f"{', '.join(k for k, _ in self.pairs)}")

    def __getattr__(self, name: str):
        pairs = self.__dict__.get("pairs")
        if name.startswith("_") or pairs is None:
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(e.args[0]) from None

    def to_json(self) -> str:
        """``{"case": NAME, "params": {...}}``: what ``from_json`` reads back, in another process."""
        return json.dumps({"case": self.case, "params": dict(self.pairs)})

    @classmethod
    def from_json(cls, text: str, case: str | None = None) -> Config:
        """The Config ``to_json`` wrote, validated again through the case registry: text that
        crossed a process boundary is checked as any other input. ``case``: the case it must be."""
        form = 'a config is the JSON Config.to_json writes, {"case": NAME, "params": {NAME: VALUE, ...}}'
        try:
            d = json.loads(text)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{form}; got text that is not JSON ({e}): {str(text)[:200]!r}") from None
        if not (isinstance(d, dict) and set(d) == {"case", "params"} and isinstance(d["case"], str)
                and isinstance(d["params"], dict)):
            raise ValueError(f"{form}; got {str(text)[:200]}")
        if case is not None and d["case"] != case:
            raise ValueError(f"expected a config of case {case!r}, got one of {d['case']!r}: pass {case}'s "
                             f"Config.to_json()")
        return cls.of(d["case"], d["params"])


def _choices(allowed) -> str:
    return ", ".join(map(str, allowed))


def _same(declared, value) -> bool:
    """``value`` is ``declared``, or a number equal to it (16.0 for 16), or its string form ("16")."""
    if type(declared) is type(value):
        return declared == value
    if isinstance(value, str):
        return str(declared) == value
    numbers = (int, float)
    return (isinstance(declared, numbers) and isinstance(value, numbers)
            and not isinstance(declared, bool) and not isinstance(value, bool) and declared == value)


@dataclass(frozen=True)
class Case:
    name: str
    params: dict  # parameter name -> tuple of allowed values
    build: Callable[..., Workload]
    # Device memory the case asks for, by parameters: quoted when it does not fit.
    declared_bytes: Callable[..., int | None] = lambda **_: None
    doc: str = ""
    # Its build takes ``run_file``: the run's records file, beside which it keeps files of its own
    # (the what-fits probes), or None outside a ``harness run``.
    keeps_files: bool = False
    # Its step's GPU work runs in processes of its own (the what-fits probes), and its time is
    # mostly theirs starting: a GPU-busy share read in this process says nothing about it.
    gpu_work_elsewhere: bool = False
    # The ceiling that bounds this case's rate, by parameters: a ``ceilings`` probe name
    # ("h2d_pinned", "device_copy", "matmul_bf16", ...), or None where no ceiling applies. The
    # report reads the rate as a fraction of that probe's rate on the same host.
    bound_by: Callable[..., str | None] = lambda **_: None
    # Whether the step's pace is the host's, by parameters, however busy the GPU looks: copies over
    # the host's link, pages faulted in through the driver. Such steps differ between hosts of one
    # kind by far more than GPU work does, and the gate reads them against host-bound floors.
    host_paced: Callable[..., bool] = lambda **_: False
    # The allocator a ``budget`` parameter is enforced in, by parameters: a key of
    # ``harness.measure.guards.budget.ENFORCED`` ("torch", "cupy", ...), or None where nothing caps it.
    allocator: Callable[..., str | None] = lambda **_: None
    # Parameters added after records of the case were filed, each with the value those records ran
    # at (``budget``: "card", the whole card): the report reads an older record as run at it.
    earlier: Mapping = field(default_factory=dict)
    # Whether a record of the case measured with code that no longer trains or checks as today's
    # does (``tricks``: losses from another Adam rate, or a failed check without its steps' time):
    # ``harness todo`` lists its parameters again.
    outdated: Callable[..., bool] = lambda record: False
    # What a record answers, as (what was asked, the answer within it), or None (``try``: a model at
    # one sequence length; its answer under one card, or one way of it on the whole card). On one
    # machine a run that gave again every answer an older run gave to the same question replaces
    # that run's rows: an older choice under a card never stands beside a newer one made from as
    # many ways, while a run that weighed other ways leaves the earlier answers standing.
    answer_of: Callable[[Mapping], tuple[tuple, tuple]] | None = None

    def upgrade(self, params: Mapping) -> dict:
        """``params`` of a record, with the parameters added since it was filed at ``earlier``'s
        values, by name as a record files them (readers name a record by its parameters in order)."""
        return dict(sorted({**{k: v for k, v in self.earlier.items() if k not in params}, **params}.items()))

    def _pick(self, name: str, value):
        allowed = self.params[name]
        if hasattr(allowed, "pick"):  # values composed of parts (a way out of several knobs): parsed, not listed
            try:
                return allowed.pick(value)
            except ValueError as e:
                if "+" in str(value):  # a combination: the parser's one line names the fix
                    raise ValueError(f"{name}: {e}") from None
                listed = list(allowed)
                raise ValueError(f"{name}={value!r} is not one of: {_choices(listed)} (or a '+'-joined combination "
                                 f"of knobs); pass one of them, e.g. {name}={listed[0]}") from None
        for declared in allowed:
            if _same(declared, value):
                return declared
        example = f"{name}={allowed[0]}" if allowed else f"{name}=VALUE"
        raise ValueError(f"{name}={value!r} is not one of: {_choices(allowed)}; pass one of them, e.g. {example}")

    def value(self, name: str, value):
        """The declared value ``value`` stands for (16 for "16"); ValueError naming the allowed ones."""
        if name not in self.params:
            raise ValueError(f"case {self.name!r} has no parameter {name!r}; its parameters are "
                             f"{', '.join(self.params)}: use one of those")
        try:
            return self._pick(name, value)
        except ValueError as e:
            raise ValueError(f"case {self.name!r}: {e}") from None

    def config(self, params: Mapping) -> Config:
        """The one validation of a choice of this case's parameters: every parameter once, each
        value one the case declares (or its string form); every problem named with the fix."""
        if isinstance(params, Config):
            if params.case != self.name:
                raise ValueError(f"a config of case {params.case!r} is not one of case {self.name!r}: "
                                 f"make it with cases.get({self.name!r}).config({{...}})")
            return params
        problems = []
        unknown = [n for n in params if n not in self.params]
        if unknown:
            problems.append(f"has no parameter {', '.join(map(repr, unknown))}; its parameters are "
                            f"{', '.join(self.params)}: drop it or use one of those")
        for name, allowed in self.params.items():
            if name not in params:
                problems.append(f"needs {name}: pass {name}=VALUE, one of: {_choices(allowed)}")
        pairs = []
        for name in self.params:
            if name in params:
                try:
                    pairs.append((name, self._pick(name, params[name])))
                except ValueError as e:
                    problems.append(str(e))
        if problems:
            raise ValueError(f"case {self.name!r}: " + "; ".join(problems))
        return Config(self.name, tuple(pairs), _MADE)

    def ordered(self, name: str, values) -> list:
        """``values`` of parameter ``name`` in the order the case declares them (budgets 16GB to
        card, techniques fp32 first); any it does not declare after them, sorted."""
        declared = list(self.params.get(name, ()))
        return sorted(values, key=lambda v: (declared.index(v) if v in declared else len(declared), str(v)))
