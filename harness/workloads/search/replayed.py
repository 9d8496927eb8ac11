"""The replay estimator of what fits: the programmes a GPU recorded for a (way, axis) at a few sizes
(``harness.measure.records.programmes``), grown to any size (``simulator.Growth``) and run through
the caching allocator's rules (``simulator.replay``) under the cap: the largest size that runs,
and the reserved peak at a size.

Each request's bytes grow on a polynomial of the size: of degree 1 along the batch, of degree 2
along the sequence (attention's scores grow with its square), so a batch needs programmes at two
sizes and a sequence at three, alike in all but their requests' sizes.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cached_property

from harness.measure.instruments.environment import Environment
from harness.measure.instruments.machine import machine_label
from harness.measure.records import programmes
from harness.workloads.search import predict, simulator
from harness.workloads.search.fits import CONFIRM_ABOVE
from harness.workloads.search.probe_log import device_answer

DEGREE = {"batch": 1, "seq_len": 2}


@dataclass(frozen=True)
class Recorded:
    """The programmes one GPU recorded for one search's key: size -> requests, and size -> the
    probe's own answer, with its cap (the device's total and the context it held); and the probes
    recorded to test the replay: (size, cap) -> answer."""
    gpu: str
    key: dict
    programmes: dict = field(hash=False)
    results: dict = field(hash=False)
    commits: set = field(default_factory=set, hash=False)  # what the recordings ran
    tests: dict = field(default_factory=dict, hash=False)

    @cached_property
    def growth(self) -> simulator.Growth:
        """The programme grown from the sizes recorded that are alike with the largest: past the
        small sizes where the step takes other kernels and workspaces, each request's law read
        through the largest of them (``simulator.Growth``). ``simulator.Unlike`` where too few are
        alike or their bytes follow no law. Read once, once every recording is in: its laws serve
        every size asked of it."""
        sizes = sorted(self.programmes, reverse=True)
        shape = _shape(self.programmes[sizes[0]])
        alike = [n for n in sizes if _shape(self.programmes[n]) == shape]
        return simulator.Growth({n: self.programmes[n] for n in alike}, DEGREE[self.key["over"]])

    @cached_property
    def host(self):
        """The host memory one forward keeps at a size, where the way keeps what it saves there and
        its recordings say which tensors (``host_packs``): each tensor's bytes grown on its own law
        through the sizes the programme grows from (``simulator.law_of``), each taken as the pinned
        block the host allocator gives it (``offload.host_block``), as the way's guard counts them.
        None where the recordings name none, not the same count at each size, or anything but
        byte counts."""
        from harness.workloads.training.offload import host_block
        sizes = sorted(self.growth.sizes)
        packs = [self.results[n].get("host_packs") for n in sizes]
        if not all(isinstance(p, list) and all(type(b) is int and b >= 0 for b in p) for p in packs) \
                or len({len(p) for p in packs}) != 1:
            return None
        laws = [simulator.law_of(sizes, list(ys), DEGREE[self.key["over"]]) for ys in zip(*packs)]
        return lambda n: sum(host_block(max(0, law(n)), True) for law in laws)

    def reach(self, cap: int) -> int:
        """What the allocator can reserve under ``cap`` on this GPU (``predict.reachable``)."""
        return predict.reachable(cap, list(self.results.values()))


def _shape(requests: list) -> list:
    return [(r.action, r.block, r.stream) for r in requests]


def recorded(recordings: list[dict]) -> dict:
    """(GPU, key as sorted JSON) -> Recorded, from the files ``programmes.read`` returns; a later
    recording of a size replaces an earlier one. A test's probes (``programmes.CHECK``) are kept
    apart from the programmes the replay grows from."""
    found = {}
    for recording in recordings:
        gpu = machine_label(Environment.from_dict(recording["environment"]))
        purpose = recording.get("purpose", programmes.GROW)  # pragma: no mutate (any default but CHECK reads alike)
        test = purpose == programmes.CHECK
        for probe in recording["probes"]:
            ident = (gpu, json.dumps(probe["key"], sort_keys=True))
            rec = found.setdefault(ident, Recorded(gpu, probe["key"], {}, {}))
            n, answer = int(probe["n"]), dict(probe["result"], cap=int(probe["cap"]))
            if test:
                rec.tests[(n, answer["cap"])] = answer
                continue
            rec.programmes[n] = simulator.load(probe["programme"])
            rec.results[n] = answer
            rec.commits.add(recording["commit"])
    return found


def for_search(root, machine: str, gpu: str, key: dict) -> Recorded | None:
    """What ``machine`` (its folder under ``root``) recorded for a search's key on ``gpu``, ready
    to grow; None where it recorded nothing for it, or nothing the replay can grow. A search of
    another allocator setting has a key no recording has: the replay is the default allocator's.
    A recording that cannot be read only aims no search: it says so, and the search starts as
    though none were recorded."""
    try:
        mine = [dict(r, probes=[p for p in r["probes"] if p["key"] == key]) for r in programmes.read(root, machine)]
        found = recorded(mine)
    except programmes.UNREADABLE as e:
        print(f"oombench: the recorded programmes under {root}/{programmes.DIR}/{machine} cannot be read "
              f"({type(e).__name__}: {e}): the search starts without the replay; record them again with "
              f"`python3 -m harness programmes record`", file=sys.stderr)
        return None
    rec = found.get((gpu, json.dumps(key, sort_keys=True)))
    return rec if rec is not None and _grows(rec) is not None else None


def _grows(rec: Recorded) -> simulator.Growth | None:
    """``rec``'s growth; None where it recorded no programme to grow, or none the replay can grow."""
    if not rec.programmes:
        return None
    try:
        return rec.growth
    except simulator.Unlike:
        return None


def checked(rec: Recorded) -> list[dict]:
    """Each recorded programme replayed as recorded, under its probe's own cap, beside the peaks its
    probe measured: where the rules are the allocator's, the same bytes."""
    out = []
    for n, requests in sorted(rec.programmes.items()):
        result = rec.results[n]
        got = simulator.replay(requests, predict.reachable(result["cap"], [result]))
        out.append({"n": n, "fits": result.get("fits"), "replayed_fits": got.fits,
                    "peak_reserved": result.get("peak_reserved"), "replayed_reserved": got.peak_reserved,
                    "peak_allocated": result.get("peak_allocated"), "replayed_allocated": got.peak_allocated})
    return out


def foreseen(rec: Recorded) -> list[dict]:
    """The grown programme at each size recorded to test it, under that probe's cap, beside what the
    probe measured: the replay's answers where no programme it grew from was recorded. [] where it
    has nothing to grow from."""
    growth = _grows(rec) if rec.tests else None  # pragma: no mutate (without tests the loop makes [] either way)
    if growth is None:
        return []
    out = []
    for (n, cap), answer in sorted(rec.tests.items()):
        got = simulator.replay(growth.at(n), predict.reachable(cap, [answer]))
        out.append({"n": n, "cap": cap, "fits": answer.get("fits"), "replayed_fits": got.fits,
                    "peak_reserved": answer.get("peak_reserved"), "replayed_reserved": got.peak_reserved})
    return out


def runs(rec: Recorded, n: int, cap: int) -> bool:
    """Whether the programme grown to ``n`` runs under ``cap``."""
    return simulator.replay(rec.growth.at(n), rec.reach(cap)).fits


def searched(rec: Recorded, probes: list[dict]) -> list[dict]:
    """The grown programme at each size and cap the GPU's searches probed (their log's entries,
    each saying what the device held: ``probe_log.device_answer``), beside the probe's answer:
    every probe a test of the replay, the sizes that fit past a run that did not among them. [] where
    it has nothing to grow from."""
    if not probes or _grows(rec) is None:
        return []
    return [{"n": e["n"], "cap": e["cap"], "fits": device_answer(e), "replayed_fits": runs(rec, e["n"], e["cap"])}
            for e in probes]


def stops_at(rec: Recorded, n: int, cap: int, unit: int) -> bool:
    """Whether the grown programme runs ``n`` under ``cap`` and runs out at the ``CONFIRM_ABOVE``
    sizes after it: the replay too has a search stop at ``n`` (``fits.largest_fitting``'s rule)."""
    return runs(rec, n, cap) and not any(runs(rec, n + i * unit, cap) for i in range(1, CONFIRM_ABOVE + 1))


def probed(rec: Recorded, n: int, cap: int, unit: int) -> bool | None:
    """Whether probes recorded to test the replay (``tests``) found ``n`` fitting under ``cap`` and
    the size after it not; None where they did not probe both."""
    at, after = rec.tests.get((n, cap)), rec.tests.get((n + unit, cap))
    if at is None or after is None:
        return None
    return bool(at.get("fits")) and after.get("fits") is False


def largest(rec: Recorded, cap: int, unit: int, top: int, host_limit: int | None = None) -> int:
    """The largest multiple of ``unit`` up to ``top`` whose grown programme runs under ``cap``: each
    size tried from the last whose blocks alone stay within what the allocator can reach (past it
    none runs, however it packs them) down to the first that runs. Down, not by bisection: where a
    run of sizes fails under a larger one that runs (a block split for one request and too small
    for the next), bisection answers the boundary it happens on, and the larger size is the answer.
    ``host_limit``: the host's share the way's guard allows what one forward keeps there; no size
    whose kept tensors pass it (``Recorded.host``) fits, whatever the device holds."""
    growth, reach = rec.growth, rec.reach(cap)
    if host_limit is not None and rec.host is not None:
        top = predict.last_multiple(lambda m: rec.host(m) <= host_limit, unit, top)
    n = predict.last_multiple(lambda m: simulator.live_peak(growth.at(m)) <= reach, unit, top)
    while n > 0 and not simulator.replay(growth.at(n), reach).fits:
        n -= unit
    return n


# How far under its failed answer the replay looks for the next size it runs: its runs of failing
# sizes lie near the top, where the allocations near the cap, and each size is one replay of the
# whole programme.
BELOW_STEPS = 16


def runs_below(rec: Recorded, cap: int, unit: int, above: int, below: int) -> int | None:
    """The largest multiple of ``unit`` between ``above`` and ``below`` (both excluded), at most
    ``BELOW_STEPS`` of them under ``below``, whose grown programme runs under ``cap``: where the
    GPU failed the replay's answer, the next size the replay has fitting, a fit past the run of
    failures a search from under it would stop at. None where it runs none of them."""
    growth, reach = rec.growth, rec.reach(cap)
    n = (below - 1) // unit * unit
    for _ in range(BELOW_STEPS):
        if n <= above:
            return None
        if simulator.replay(growth.at(n), reach).fits:
            return n
        n -= unit
    return None


def peak(rec: Recorded, n: int, cap: int) -> int:
    """The reserved peak of the programme grown to ``n`` under ``cap`` (up to where it runs out)."""
    return simulator.replay(rec.growth.at(n), rec.reach(cap)).peak_reserved
