""""Which way out?": for a card a reader holds and a workload, the ways out that fit it, ranked by
what carries over from the GPU that measured them (the memory saved, then the slowdown against the
plain run on that GPU), and why each other way is not offered: a way the card's compute capability
cannot run is never offered.

The rule lives in ``fits`` and ``answer``, pure functions of ``Trial`` (one record, reduced to what
the rule reads), so it is unit-tested without a page. ``trial`` and ``view`` turn page rows into
trials; the template only lays out what ``view`` returns.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from harness.cases.chainer_mlp import PAST_16GB
from harness.measure.guards.budget import CARD, CARDS, is_whole_card, size_bytes
from harness.measure.outcomes import DEVICE, DOES_NOT_FIT, FAILED, OK, SKIPPED
from harness.report.capable import lacking, registered
from harness.report.tables import allocated_peak, loss
from harness.units import gb

RULE = ("A way out fits a card when its device peak (NVML's level: the CUDA context and library workspaces "
        "included) is at most the card's total, measured under that card's emulation (or a smaller card's), or "
        "measured anywhere else with no does-not-fit record under an emulation of at least that card. A way is not "
        "offered where the card's compute capability cannot run it, where its check failed on any GPU, or where it "
        "ran out of memory on any GPU under a budget of at least the card; each way left out says which. Managed "
        "memory that evicted nothing under a smaller budget ran at device speed and proves no fit: it is shown apart.")
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
    budget: str = CARD  # the budget's name it ran under
    loss: float | None = field(default=None, compare=False)  # the loss after its last step, where its check kept one
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
class Measured:
    """One GPU's evidence for a way: the trial that fits, and what carries over from it to another
    card: the device memory it saves and its step as a multiple of the reference's, both against the
    reference (fp32 as it is) on the whole card of the same GPU (None where that GPU has none)."""
    trial: Trial
    reference: Trial | None

    @property
    def saved(self) -> int | None:
        ref = self.reference
        if ref is None or ref.device is None or self.trial.device is None:
            return None
        return ref.device - self.trial.device

    @property
    def slowdown(self) -> float | None:
        ref = self.reference
        return None if ref is None or not ref.step_s or self.trial.step_s is None else self.trial.step_s / ref.step_s


@dataclass(frozen=True)
class Offer:
    """A way out that fits, with each GPU's evidence for it (``on``, by machine)."""
    way: str
    on: tuple

    def key(self) -> tuple:
        """Its rank: how it was shown to fit (under this card's emulation or a smaller named card's,
        then under an allocator cap, then by its device peak on a whole card); then the memory it
        saves (the least any GPU measured), most first: the margin that carries over to another
        card; then its slowdown (the most any GPU measured), least first; a way missing either goes
        after those with it."""
        saved = [m.saved for m in self.on if m.saved is not None]
        slow = [m.slowdown for m in self.on if m.slowdown is not None]
        shown = min(EVIDENCE.index(kind(m.trial.budget)) for m in self.on)
        return (shown, not saved, -min(saved, default=0), not slow, max(slow, default=0.0), self.way)


@dataclass(frozen=True)
class Answer:
    needless: list  # the baseline's trials that fit: no way out needed (one per GPU)
    ways: list  # Offers: ways that change memory and fit, ranked by ``Offer.key``
    apart: list  # managed memory that evicted nothing: shown, never ranked
    left: dict  # way -> why it is not offered


def _groups(tried: list[Trial], machine: str | None) -> dict:
    groups = defaultdict(lambda: defaultdict(list))
    for t in tried:
        if machine is None or t.machine == machine:
            groups[t.way][t.machine].append(t)
    return groups


def reference(tried: list[Trial], baseline: set[str], machine: str) -> Trial | None:
    """The plain run's record on ``machine``'s whole card: what a way's saving and slowdown are read against."""
    whole = [t for t in tried if t.machine == machine and t.way in baseline and t.budget == CARD and t.outcome == OK
             and t.step_s is not None and t.device is not None]
    return min(whole, key=lambda t: t.step_s) if whole else None


def answer(tried: list[Trial], reader: "Reader", baseline: set[str], same: set[str], machine: str | None = None,
           needs=lambda way: None) -> Answer:
    """For the ``reader``'s card: whether the ``baseline`` way fits (no way out needed), the ways out
    that fit (``same``: ways that change no memory, never listed), ranked by what carries over to
    another card, the managed runs shown apart, and why each other way is not offered. ``machine``
    keeps one machine's trials (a measured GPU's own answer); ``needs(way)`` is the compute
    capability a way needs (None: none)."""
    needless, ways, left = [], [], {}
    for way, by_machine in sorted(_groups(tried, machine).items()):
        if way in same - baseline:
            continue
        lacking = reader.lacks(needs(way))
        if lacking:
            left[way] = lacking
            continue
        hits = {m: fits(ts, reader.size) for m, ts in by_machine.items()}
        hits = {m: t for m, t in hits.items() if t is not None and t.step_s is not None}
        ruled_out = [m for m, ts in by_machine.items() if any(t.outcome == FAILED for t in ts)
                     or any(refutes(t, reader.size) for t in ts)]
        if not hits or ruled_out:
            left[way] = why_not(by_machine, reader)
        elif way in baseline:
            needless += sorted(hits.values(), key=lambda t: t.machine)
        else:
            ways.append(Offer(way, tuple(Measured(t, reference(tried, baseline, m)) for m, t in sorted(hits.items()))))
    apart = sorted((t for t in tried if t.unevicted and t.outcome == OK and t.step_s is not None
                    and (machine is None or t.machine == machine)), key=lambda t: (t.step_s, t.way, t.machine))
    for t in apart:
        if left.get(t.way, "").startswith(NO_RECORD):
            del left[t.way]  # shown apart, with why
    return Answer(needless, sorted(ways, key=Offer.key), apart, left)


NO_RECORD = "no record decides"


def why_not(by_machine: dict, reader: "Reader") -> str:
    """Why a way is not offered for the reader's card, from its trials on each machine: the first of
    a failed check, a run out of memory under at least this card, a device peak past it, no run."""
    for machine, ts in sorted(by_machine.items()):
        if any(t.outcome == FAILED for t in ts):
            return f"failed on {machine} (its loss check or its process)"
    for machine, ts in sorted(by_machine.items()):
        short = next((t for t in ts if refutes(t, reader.size)), None)
        if short is not None:
            asked = (f", a {gb(short.requested)} request failed" if short.requested is not None
                     and short.requested > reader.size else "")
            return f"ran out of memory under {ran_under(short.budget)} on {machine}{asked}"
    ok = [t for ts in by_machine.values() for t in ts if t.outcome == OK and t.device is not None and not t.unevicted]
    if ok:
        least = min(ok, key=lambda t: t.device)
        return (f"its least device peak, {gb(least.device)} on {least.machine} under {ran_under(least.budget)}, "
                f"is past this card's {gb(reader.size)}")
    if all(t.outcome == SKIPPED for ts in by_machine.values() for t in ts):
        return "never measured: skipped wherever it was asked for"
    short = sorted((t for ts in by_machine.values() for t in ts if t.outcome == DOES_NOT_FIT), key=lambda t: t.size)
    if short:
        return (f"{NO_RECORD}: it ran out of memory under {ran_under(short[-1].budget)} on {short[-1].machine}, "
                f"less than this card's {gb(reader.size)}, and ran under no budget of this card's size")
    return f"{NO_RECORD}: no run of it under a budget this card's size or smaller, and no device peak that fits"


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
# name stays true whatever a later run measures. A workload is shown only where one of its records
# ran out of device memory (``asked``): the others are no out-of-memory question.
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
    Workload("chainer_mlp", f"Chainer's dense net past a 16 GB card (chainer_mlp: batch {PAST_16GB})", "chainer_mlp",
             {"device": "cuda", "batch": PAST_16GB}, {"pool": "device_pool"}),
)


def asked(tried: list[Trial]) -> bool:
    """Whether a workload is an out-of-memory question: one of its records ran out of device memory."""
    return any(t.outcome == DOES_NOT_FIT for t in tried)


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
    ok = rec.outcome == OK
    return Trial(_way(params, workload), row.machine, rec.outcome, size, rec.device_bytes(),
                 rec.timing.median_s if ok and rec.timing else None, named=name in CARDS,
                 requested=rec.requested_bytes, unevicted=unevicted, budget=name,
                 loss=loss(rec.check or {}) if ok else None, allocated=allocated_peak(rec), row=row)


def technique(way: str):
    """The registered ``Way`` a trial's ``technique`` names; None where it names none (another case)."""
    return registered(json.loads(way).get("technique"))


def needs(way: str) -> tuple[int, int] | None:
    """The compute capability a way needs, from the ways registry (None: none, or no registered way)."""
    known = technique(way)
    return known.capability if known is not None else None


def shared(tried: list[Trial]) -> set[str]:
    """The parameters every trial of the workload holds at one value (they name no way)."""
    ways_ = [json.loads(w) for w in {t.way for t in tried}]
    names = {k for w in ways_ for k in w}
    return {k for k in names if len({json.dumps(w.get(k)) for w in ways_}) == 1}


def way_label(way: str, same: set[str], batch=None) -> str:
    """The way in a reader's words: a registered technique as the registry says it, a micro-batch
    smaller than the batch after it ("bf16 autocast + checkpointing, micro-batch 5"); the other
    parameters, less those in ``same`` (``shared``), as they are."""
    params = json.loads(way)
    known = technique(way)
    said = [known.words] if known is not None else []
    micro = params.get("micro_batch")
    if micro is not None and micro != batch:
        said.append(f"micro-batch {micro}")
    rest = [f"{str(v).replace('_', ' ')}" if k in ("way", "pool") else f"{k}={v}"
            for k, v in params.items() if k not in same | {"micro_batch"} and (k != "technique" or known is None)]
    return ", ".join(said + rest) or "(one way)"


def changes(way: str) -> tuple[str, ...]:
    """What of the training a way changes (the model, the data), from the registry."""
    known = technique(way)
    return known.changes if known is not None else ()


@dataclass(frozen=True)
class Reader:
    """A card a reader picks: a named card the suite emulates, or a GPU it measured (``machine``)."""
    key: str
    label: str
    size: int
    machine: str | None
    model: str
    capability: tuple[int, int] | None  # None: not known, nothing ruled out

    def lacks(self, needed: tuple[int, int] | None) -> str | None:
        """Why a way that needs compute capability ``needed`` cannot run on this card; None where it can."""
        return lacking(self.model, self.capability, needed)


def named(card: str) -> Reader:
    """A named card as a reader holds it."""
    c = CARDS[card]
    return Reader(c.name, f"{c.model} ({gb(c.total_bytes)} as nvidia-smi reports it)", c.total_bytes, None, c.model,
                  c.capability)


def _capability(rows, machine: str) -> tuple[int, int] | None:
    """The compute capability a machine's records name for its first GPU."""
    for r in rows:
        gpus = r.machine == machine and r.record.environment.devices.gpus
        if gpus:
            major, _, minor = gpus[0].compute_capability.partition(".")
            return (int(major), int(minor or 0)) if major.isdigit() else None
    return None


def cards(rows) -> list[Reader]:
    """The named cards, then each measured GPU with its own records."""
    out = [named(c) for c in CARDS]
    for machine, memory in sorted({(r.machine, r.gpu_memory) for r in rows if r.gpu_memory}):
        out.append(Reader(f"m{len(out)}", f"{machine} ({gb(memory)}, its own records)", memory, machine, machine,
                          _capability(rows, machine)))
    return out


def section(tried: list[Trial], wl: Workload, reader: Reader) -> dict:
    """One (card, workload) answer, each trial and offer with its label, and each way left out with why."""
    all_ways = {t.way for t in tried}
    baseline = {w for w in all_ways if _is(w, wl.baseline)}
    same = {w for w in all_ways if any(_is(w, s) for s in wl.same) and _is(w, {k: v for k, v in wl.baseline.items()
                                                                              if k != "technique"})}
    found = answer(tried, reader, baseline, same, reader.machine, needs)
    common = shared(tried)
    batch = wl.match.get("batch")
    name = lambda way: way_label(way, common, batch)
    label = lambda ts: [(t, name(t.way)) for t in ts]
    return {"needless": label(found.needless), "apart": label(found.apart),
            "answer": [(o, name(o.way), changes(o.way)) for o in found.ways],
            "left": sorted((name(w), why) for w, why in found.left.items())}


def ran_under(name: str) -> str:
    """What a budget was, in a reader's words."""
    if name in CARDS:
        return f"the {CARDS[name].model} emulation (context charged)"
    return "the whole card" if is_whole_card(name) else f"a {name} allocator cap (context not charged)"


EVIDENCE = ("named", "cap", "card")  # how a fit was shown, surest first


def kind(name: str) -> str:
    """Which of the three emulations a budget is: a named card's, an allocator cap, the whole card."""
    return "named" if name in CARDS else "card" if is_whole_card(name) else "cap"


def intro(sections: list[dict]) -> str:
    """What is true of the offered rows: how many figures ran under each emulation, counted here."""
    count = Counter(kind(m.trial.budget) for s in sections for o, *_ in s["answer"] for m in o.on)
    count.update(kind(t.budget) for s in sections for t, _ in s["needless"])
    total = sum(count.values())
    if not total:
        return "No record yet shows a way out that fits any card: run the budget profile on a GPU."
    return (f"Of the {total} figures offered on this page, {count['named']} ran under a named card's emulation "
            f"(its CUDA context and library workspaces charged against the card's total), {count['cap']} under "
            f"an allocator cap that charges no context, and {count['card']} on the whole card of the GPU that "
            f"measured them; each row says which. Ways are ranked by what carries over to your card: how its "
            f"fit was shown (a named card's emulation, then a cap, then a whole card's device peak), then the device "
            f"memory each saves against the plain run on the same GPU (the least any GPU measured), most first, "
            f"then its step as a multiple of that run's on the GPU named beside it (the most any measured). No "
            f"step is another GPU's promise for yours.")


def view(rows) -> dict:
    """Every (card, workload) section's answer, for the template: only the workloads that ran out of
    device memory somewhere."""
    sections, shown = [], []
    readers = cards(rows)
    for wl in WORKLOADS:
        tried = [t for t in (trial(r, wl) for r in rows) if t is not None]
        if not asked(tried):
            continue
        shown.append(wl)
        for reader in readers:
            sections.append({"id": f"{reader.key}--{wl.key}", "card": reader.label, "workload": wl.label,
                             "size": reader.size, **section(tried, wl, reader)})
    return {"rule": RULE, "apart_note": APART, "under": ran_under, "intro": intro(sections),
            "cards": [(r.key, r.label) for r in readers], "workloads": [(w.key, w.label) for w in shown],
            "sections": sections}
