""""Which way out?": for a card a reader holds and a workload, the ways out that fit it, cheapest
first, from the records.

The rule lives in ``fits`` and ``answer``, pure functions of ``Trial`` (one record, reduced to what
the rule reads), so it is unit-tested without a page. ``trial`` and ``view`` turn page rows into
trials; the template only lays out what ``view`` returns.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from harness.measure.guards.budget import CARD, CARDS, is_whole_card, size_bytes
from harness.measure.outcomes import DEVICE, DOES_NOT_FIT, FAILED, OK
from harness.report.tables import allocated_peak
from harness.units import gb

RULE = ("A way out fits a card when its device peak (NVML's level: the CUDA context and library workspaces "
        "included) is at most the card's total, measured under that card's emulation (or a smaller card's), or "
        "measured anywhere else with no does-not-fit record under an emulation of at least that card; a way whose "
        "check failed on a machine is not offered for it. Managed memory that evicted nothing under a smaller "
        "budget ran at device speed and proves no fit: it is shown apart.")
APART = "ran at device speed: nothing was evicted"


@dataclass(frozen=True)
class Trial:
    """One record as the rule reads it: a way, on a machine, under a budget, and what came of it."""
    way: str
    machine: str
    outcome: str
    size: int  # the memory it ran as: a named card's total, a cap's bytes, or the whole card it ran on
    device: int | None = None  # its device peak, context included
    step_s: float | None = None
    named: bool = False  # ``size`` is a named card's total, its overhead charged
    requested: int | None = None  # a does-not-fit's single request, bytes
    unevicted: bool = False  # managed memory under a smaller budget that evicted nothing
    allocated: int | None = field(default=None, compare=False)  # the allocator's peak: shown, not ruled on
    row: object = field(default=None, compare=False)  # the page row, for links; the rule never reads it


def refutes(t: Trial, card: int) -> bool:
    """Whether ``t`` shows the way does not fit a card of ``card`` bytes: it ran short of device
    memory with at least that much, or asked for more than the card at once."""
    return t.outcome == DOES_NOT_FIT and (t.size >= card or (t.requested is not None and t.requested > card))


def fits(tried: list[Trial], card: int) -> Trial | None:
    """The trial that shows one way (on one machine) fits a card of ``card`` bytes, else None."""
    if any(t.outcome == FAILED for t in tried):
        return None  # a wrong answer is no way out, whatever memory it took
    ok = [t for t in tried if t.outcome == OK and not t.unevicted and t.device is not None and t.device <= card]
    emulated = [t for t in ok if t.named and t.size <= card]
    if emulated:
        return max(emulated, key=lambda t: t.size)  # the closest emulation of this card
    if any(refutes(t, card) for t in tried):
        return None
    return min(ok, key=lambda t: t.size) if ok else None


@dataclass(frozen=True)
class Answer:
    needless: list  # the baseline's trials that fit: no way out needed
    ways: list  # ways that change memory and fit, cheapest step first
    apart: list  # managed memory that evicted nothing: shown, never ranked


def _groups(tried: list[Trial], machine: str | None) -> dict:
    groups = defaultdict(list)
    for t in tried:
        if machine is None or t.machine == machine:
            groups[(t.way, t.machine)].append(t)
    return groups


def answer(tried: list[Trial], card: int, baseline: set[str], same: set[str], machine: str | None = None) -> Answer:
    """For ``card`` bytes: whether the ``baseline`` way fits (no way out needed), the ways out that
    fit (``same``: ways that change no memory, never listed), and the managed runs shown apart.
    ``machine`` keeps one machine's trials (a measured GPU's own answer)."""
    found = {}
    for key, ts in _groups(tried, machine).items():
        hit = fits(ts, card)
        if hit is not None and hit.step_s is not None:
            found[key] = hit
    by_step = lambda t: (t.step_s, t.way, t.machine)
    needless = sorted((t for (way, _), t in found.items() if way in baseline), key=by_step)
    ways = sorted((t for (way, _), t in found.items() if way not in baseline | same), key=by_step)
    apart = sorted((t for t in tried if t.unevicted and t.outcome == OK and t.step_s is not None
                    and (machine is None or t.machine == machine)), key=by_step)
    return Answer(needless, ways, apart)


# -- from page rows ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    key: str  # the section id's part: a plain word
    label: str
    case: str
    match: dict  # the parameters a record must hold to be this workload
    baseline: dict  # the parameters of the plain run: no way out
    same: tuple = ()  # parameter sets that change no memory (precision of the same run): never a way out


# The reader's workloads: named by the parameters the records hold, never by a figure, so that a
# name stays true whatever a later run measures.
FP32 = ({"technique": "fp32"}, {"technique": "tf32"})
WORKLOADS = (
    Workload("lm", "the LM (tricks: workload=lm, batch 16, seq_len 1024)", "tricks",
             {"workload": "lm", "batch": 16, "seq_len": 1024, "device": "cuda"},
             {"technique": "fp32", "micro_batch": 16}, FP32),
    Workload("resnet50_1024", "ResNet50 at seed 003's size, 1024 px (tricks: batch 10)", "tricks",
             {"workload": "resnet50_1024", "batch": 10, "device": "cuda"},
             {"technique": "fp32", "micro_batch": 10}, FP32),
    Workload("resnet50_2048", "ResNet50 at seed 003's size, 2048 px (tricks: batch 10)", "tricks",
             {"workload": "resnet50_2048", "batch": 10, "device": "cuda"},
             {"technique": "fp32", "micro_batch": 10}, FP32),
    Workload("seed000", "seed 000's arrays (seed000)", "seed000", {}, {"way": "device_pool"}),
    Workload("chainer_gcn", "the GCN (chainer_gcn on the GPU)", "chainer_gcn", {"device": "cuda"},
             {"pool": "device_pool"}),
)


def _way(params: dict, workload: Workload) -> str:
    return json.dumps({k: v for k, v in params.items() if k not in workload.match and k != "budget"}, sort_keys=True)


def _is(way: str, wanted: dict) -> bool:
    params = json.loads(way)
    return all(params.get(k) == v for k, v in wanted.items())


def trial(row, workload: Workload) -> Trial | None:
    """``row`` as a trial of ``workload``, or None where it is not one, ran on no GPU, or says
    nothing of device memory (it ran short of host memory)."""
    rec, params = row.record, row.record.params
    if row.case != workload.case or any(params.get(k) != v for k, v in workload.match.items()) or not row.gpu_memory:
        return None
    if rec.outcome == DOES_NOT_FIT and rec.short_of() != DEVICE:
        return None
    name = str(params.get("budget", CARD))
    try:
        size = size_bytes(name, row.gpu_memory)
    except ValueError:
        return None  # a budget this build does not know: no evidence either way
    unevicted = (not is_whole_card(name) and rec.check.get("budget_enforced") is False
                 and rec.check.get("evicted") is False)
    return Trial(_way(params, workload), row.machine, rec.outcome, size, rec.device_bytes(),
                 rec.timing.median_s if rec.outcome == OK and rec.timing else None, named=name in CARDS,
                 requested=rec.requested_bytes, unevicted=unevicted, allocated=allocated_peak(rec), row=row)


def shared(tried: list[Trial]) -> set[str]:
    """The parameters every trial of the workload holds at one value (they name no way)."""
    ways = [json.loads(w) for w in {t.way for t in tried}]
    names = {k for w in ways for k in w}
    return {k for k in names if len({json.dumps(w.get(k)) for w in ways}) == 1}


def way_label(way: str, same: set[str]) -> str:
    """The way's parameters, less those in ``same`` (``shared``)."""
    params = json.loads(way)
    return " ".join(f"{k}={v}" for k, v in params.items() if k not in same) or "(one way)"


def cards(rows) -> list[tuple[str, str, int, str | None]]:
    """(key, label, bytes, machine or None): the named cards, then each measured GPU with its own records."""
    out = [(c.name, f"{c.model} ({gb(c.total_bytes)} as nvidia-smi reports it)", c.total_bytes, None)
           for c in CARDS.values()]
    for machine, memory in sorted({(r.machine, r.gpu_memory) for r in rows if r.gpu_memory}):
        out.append((f"m{len(out)}", f"{machine} ({gb(memory)}, its own records)", memory, machine))
    return out


def section(tried: list[Trial], wl: Workload, size: int, machine: str | None) -> dict:
    """One (card, workload) answer, each trial with its label."""
    ways = {t.way for t in tried}
    baseline = {w for w in ways if _is(w, wl.baseline)}
    same = {w for w in ways if any(_is(w, s) for s in wl.same) and _is(w, {k: v for k, v in wl.baseline.items()
                                                                          if k != "technique"})}
    found = answer(tried, size, baseline, same, machine)
    common = shared(tried)
    label = lambda ts: [(t, way_label(t.way, common)) for t in ts]
    offered = {t.way for t in found.ways + found.needless} | {t.way for t in found.apart}
    left = sorted({way_label(t.way, common) for t in tried if (machine is None or t.machine == machine)
                   and t.way not in offered | same})
    return {"needless": label(found.needless), "answer": label(found.ways), "apart": label(found.apart),
            "left": left}


def ran_under(name: str) -> str:
    """What a budget was, in a reader's words."""
    if name in CARDS:
        return f"{CARDS[name].model}, emulated"
    return "the whole card" if is_whole_card(name) else f"{name} allocator cap (context not charged)"


def view(rows) -> dict:
    """Every (card, workload) section's answer, for the template."""
    sections = []
    card_list = cards(rows)
    for wl in WORKLOADS:
        tried = [t for t in (trial(r, wl) for r in rows) if t is not None]
        for key, label, size, machine in card_list:
            sections.append({"id": f"{key}--{wl.key}", "card": label, "workload": wl.label, "size": size,
                             **section(tried, wl, size, machine)})
    return {"rule": RULE, "apart_note": APART, "under": ran_under, "cards": [(k, label) for k, label, *_ in card_list],
            "workloads": [(w.key, w.label) for w in WORKLOADS], "sections": sections}
