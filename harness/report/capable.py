"""What a named card can run: the ways out its compute capability rules out, read from the ways
registry (``Way.capability``) against the card's (``Card.capability``), and why, in one line each.
``harness table --card``, the seeds' tables and the chooser leave such ways out and say so; a record
run under the emulation of a card that cannot run its way is read as skipped (``as_read``)."""
from __future__ import annotations

import dataclasses

from harness.measure.guards.budget import CARDS, Card, dotted
from harness.measure.outcomes import SKIPPED
from harness.workloads.training import ways


def registered(name):
    """The registered ``Way`` a ``technique`` value names; None where it names none (another case, or
    a name this build no longer knows)."""
    try:
        return ways.parse(name) if isinstance(name, str) else None
    except ValueError:
        return None


def lacking(model: str, has: tuple[int, int] | None, needed: tuple[int, int] | None) -> str | None:
    """Why a way that needs compute capability ``needed`` cannot run on ``model`` of capability ``has``;
    None where it can, or where either is unknown."""
    if needed is None or has is None or has >= needed:
        return None
    return f"needs compute capability {dotted(needed)}; {model} has {dotted(has)}"


def card(name: str) -> Card:
    """The named card ``name``; ValueError naming the cards for any other."""
    if name not in CARDS:
        raise ValueError(f"--card {name!r} is no named card: pass one of {', '.join(CARDS)}")
    return CARDS[name]


def runnable(rows, name: str) -> tuple[list, list[tuple[str, tuple[int, int]]]]:
    """``rows`` less those of a way named card ``name`` cannot run, and each such way (in a reader's
    words) with the compute capability it needs."""
    c, kept, left = card(name), [], {}
    for r in rows:
        way = registered(r.record.params.get("technique"))
        if way is not None and c.lacks(way.capability):
            left[way.words] = way.capability
        else:
            kept.append(r)
    return kept, sorted(left.items())


def note(name: str, left: list[tuple[str, tuple[int, int]]]) -> str | None:
    """The footnote of a table for card ``name`` that left out ``left``; None where it left out none."""
    if not left:
        return None
    c = CARDS[name]
    needs = "; ".join(f"compute capability {dotted(n)}: {', '.join(ws)}" for n, ws in by_need(left))
    return (f"Not offered (--card {name}): the ways a {c.model} cannot run, its compute capability being "
            f"{dotted(c.capability)}. They need {needs}.")


def by_need(left: list[tuple[str, tuple[int, int]]]) -> list[tuple[tuple[int, int], list[str]]]:
    """(compute capability, the ways that need it) for each capability ``left`` names, least first,
    each way in its order in ``left``."""
    grouped: dict = {}
    for way, needed in left:
        grouped.setdefault(needed, []).append(way)
    return sorted(grouped.items())


def not_for_its_card(params) -> str | None:
    """Why a record with these parameters is no answer for the named card it ran under the emulation
    of (its ``budget``): the card's compute capability cannot run its way (``technique``); None where
    it can, where either is unknown, or where it ran under no named card."""
    name = params.get("budget")
    way = registered(params.get("technique"))
    if name not in CARDS or way is None:
        return None
    c = CARDS[name]
    why = lacking(c.model, c.capability, way.capability)
    return f"{way.name} under {name} (it {why})" if why else None


def as_read(record):
    """``record`` as the report reads it: one that ran under the emulation of a named card that cannot
    run its way (its memory was emulated on a GPU that can, as ``try`` did before it checked) is read
    as skipped, with why, so that no table, page or answer shows it as that card's. The file keeps it."""
    why = not_for_its_card(record.params)
    if why is None or record.outcome == SKIPPED:
        return record
    return dataclasses.replace(record, outcome=SKIPPED, reason=f"no answer for the card it was emulated for: {why}")
