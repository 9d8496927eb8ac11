"""Which of asv's benchmarks a profile runs or a table speaks for, declared: a class of
``benchmarks/`` (or a whole family), and where it takes only some parameter sets, the values of
each parameter it takes. asv selects by regular expressions over ``family.Class.method(params)``,
the parameters as Python literals; ``Select.expression`` writes the one that selects exactly the
declaration, so no expression is typed by hand."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, init=False)
class Select:
    """``Select("unified", "Allocators", pattern="stream", fraction=0.1)``: those classes of one
    family (none named: every class of it), each parameter named taking only the values given (one
    value or a sequence of them), every other parameter any of its values."""
    family: str
    classes: tuple[str, ...]
    params: tuple[tuple[str, tuple], ...]

    def __init__(self, family: str, *classes: str, **params):
        object.__setattr__(self, "family", family)
        object.__setattr__(self, "classes", classes)
        object.__setattr__(self, "params", tuple((name, tuple(v) if isinstance(v, (list, tuple)) else (v,))
                                                 for name, v in params.items()))

    def expression(self, param_names: Mapping[str, Sequence[str]] | None = None) -> str:
        """asv's ``--bench`` expression selecting exactly these benchmarks. Where parameters are
        named, ``param_names`` gives each class's (``"family.Class"``) in asv's order."""
        if not self.params:  # whole classes: their names alone
            return rf"^{self.family}\." + (rf"{_one_of(self.classes, str)}\." if self.classes else "")
        if not self.classes:
            raise ValueError(f"{self}: parameters are chosen per class: name the classes of {self.family}")
        return "|".join(self._of_class(c, (param_names or {}).get(f"{self.family}.{c}")) for c in self.classes)

    def _of_class(self, cls: str, names: Sequence[str] | None) -> str:
        chosen = dict(self.params)
        if names is None or not set(chosen) <= set(names):
            raise ValueError(f"{self.family}.{cls} takes the parameters {names}, not {sorted(chosen)}")
        # a parameter left free takes any value (none holds a comma)
        values = ", ".join(_one_of(chosen[n]) if n in chosen else "[^,]+" for n in names)
        return rf"^{self.family}\.{cls}\.\w+\({values}\)$"


def _one_of(values: tuple, written=repr) -> str:
    """Any of ``values``, each as asv writes it (a parameter: its Python literal)."""
    literals = [re.escape(written(v)) for v in values]
    return literals[0] if len(literals) == 1 else f"({'|'.join(literals)})"


def expression(selects: Sequence[Select], param_names: Mapping[str, Sequence[str]] | None = None) -> str:
    """One ``--bench`` expression selecting every benchmark of ``selects``."""
    return "|".join(s.expression(param_names) for s in selects)
