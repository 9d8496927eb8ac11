"""What a case declares: its name, its parameters with their allowed values, and how to build
its ``Workload`` for one choice of them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.measure.workload import Workload


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
