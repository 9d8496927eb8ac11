"""Which compatibility shims this process has applied, by name, for the record's environment.

A figure taken with a shim in place is taken on a patched library: the record must say so.
"""
from __future__ import annotations

_APPLIED: list[str] = []


def record(name: str) -> None:
    if name not in _APPLIED:
        _APPLIED.append(name)


def applied() -> tuple[str, ...]:
    return tuple(_APPLIED)

