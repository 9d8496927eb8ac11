"""How much two honest measurements of one case differ: the gate's rank test and its noise floors.

A step time differs between two runs for three reasons: the steps of one run scatter; one host
differs from the next (PCIe link, NUMA placement, CPU, memory, page-fault handling); and the
same host drifts between runs. The first is what a rank test on the raw per-step times sees
(Mann-Whitney U, one-sided, as ``asv compare`` uses it): it says whether NEW's steps are
slower than BASE's at all. It cannot see the other two, which are differences between whole
runs, so a slowdown must also exceed a floor learned from how far whole runs differ. On too few
steps for the test to reach ``ALPHA`` at all (``can_decide``), the floor alone is left to judge.

Floors are learned from the committed history (results/records) per machine kind, case and
parameters, never from the two sets being compared alone: two runs cannot tell their own
noise from a change, whereas the history holds many hosts and repeats of each case.

- Across hosts: each host's median of its runs' medians; their spread, as the log of the
  largest over the smallest (the range), estimates the hosts' standard deviation sigma =
  log range / d2(H), d2 the expected range of H standard normal values (the range method of
  control charts: efficient for few hosts, and the history holds few hosts per kind). The
  floor is the one-sided 99% quantile of the log ratio of two hosts drawn at random,
  Z * sqrt(2) * sigma, and never less than the hosts' spread itself (with many hosts, a far one
  lies past that quantile, and a rerun on a host already seen must pass): a floor that grows
  where hosts differ (pageable copies, page-fault migration, CPU cases) and stays tight where
  they agree (device copies, GPU-bound training steps).
- Within one host: the same from the hosts that ran the case more than once, sigma averaged
  over those hosts (the R-bar / d2 estimate). A pair of records from one host uses the smaller
  of the within-host and the across-host floor.
- Too little history (fewer than two hosts, or no host with two runs): a stated default, by how
  busy the GPU was: GPU-bound steps vary little, host-bound ones a lot, and where neither the
  record nor its parameters say, a middle value. The gate's output names each default it used.

A floor across hosts past ``CROSS_HOST_AIM`` says so (``Floor.host_limited``, with the hosts'
``spread``): a slowdown under it cannot be told from the host. Nothing in the records takes the
host out of such a case. Read against the same run's ceiling (the matrix product of its
precision, the device copy), a step differs more between hosts than it does alone, because the
ceilings' own runs scatter as much as the hosts do; and the ceilings are the host's figure. Floors
learned only from hosts that ran one commit leave nearly every case without history (a lent box
runs one commit) and are no tighter where there is one; a box is seldom lent again, so a
per-host baseline is seldom there. Such a case is compared on one box in one session
(``harness compare``).

No floor is below ``MIN_FLOOR``: a change smaller than that is not worth failing a build for,
however steady the case. Floors learned from the rounds of one ``harness compare`` session (one
box, one interpreter, both commits alternating) go down to ``SESSION_MIN_FLOOR``: there the host
and its drift are out of the comparison, and a change of a few percent in a GPU-bound step is
what the compare exists to catch. It is not lower, because each round is a fresh process, and
fresh processes of a GPU-bound step whose data also crosses host memory (activations saved to
pinned memory, managed memory) differ by about a percent; three rounds a side can all land close
together and cannot show that. 1.5% keeps those apart from the 2% slowdown the compare aims at.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from harness import cases
from harness.measure.instruments.machine import host_key, machine_name
from harness.measure.outcomes import OK
from harness.measure.records.record import Record
from harness.measure.records.store import load_any
from harness.report.efficiency import BUSY_BOUND

Z = 2.326  # one-sided 1%: the floor is what two honest runs exceed once in a hundred
MIN_FLOOR = 0.02
SESSION_MIN_FLOOR = 0.015
ALPHA = 0.002  # the rank test's p threshold, as asv compare's
# The least slowdown of a GPU-bound step a verdict across hosts is meant to see: the across-host
# floor this module assumes of such a step where history is thin.
CROSS_HOST_AIM = 0.05
# Floors where history is too thin, by class of step: across hosts, and within one host.
DEFAULT_ACROSS = {"GPU-bound": CROSS_HOST_AIM, "host-bound": 0.25, "busy unknown": 0.10}
DEFAULT_WITHIN = {"GPU-bound": 0.03, "host-bound": 0.15, "busy unknown": 0.10}


def kind_of(rec: Record) -> str:
    """The machine kind a record was measured on (its GPU model and count, or its CPU)."""
    return machine_name(rec.environment.devices, rec.environment.cpu)


def key_of(rec: Record) -> tuple[str, str, str]:
    return kind_of(rec), rec.case, json.dumps(rec.params, sort_keys=True)


def same_host(a: Record, b: Record) -> bool:
    """Whether two records name one host; False where either names none (records made before
    hosts were kept, on a box without GPUs), so they are read against the across-host floor."""
    return bool(host_key(a.environment)) and host_key(a.environment) == host_key(b.environment)


# Work a step does over the host's link: its pace is the PCIe link's and the host memory's, which
# differ between hosts and drift on one, however busy the copy engines keep the GPU.
LINK_WORK = ("h2d_bytes", "d2h_bytes", "migrated_bytes")


def step_class(rec: Record) -> str:
    """GPU-bound, host-bound or busy unknown: host-bound for a step that moves data over the
    host's link, that its case calls paced by the host (``Case.host_paced``), or that runs its GPU
    work in other processes (a what-fits search); else from the
    record's GPU-busy fraction where it has one, else host-bound for a step that runs on the CPU
    (no GPU, or a ``device=cpu`` case)."""
    if any((rec.work or {}).get(k) for k in LINK_WORK) or cases.host_paced(rec):
        return "host-bound"
    if cases.gpu_work_elsewhere(rec.case):
        return "host-bound"  # its time is its probes' processes starting and loading
    busy = (rec.gpu_busy or {}).get("fraction")
    if busy is not None:
        return "GPU-bound" if busy >= BUSY_BOUND else "host-bound"
    if not rec.environment.devices.gpus or rec.params.get("device") == "cpu":
        return "host-bound"
    return "busy unknown"


def pair_class(base: Record, new: Record) -> str:
    """The class a pair is read as: the noisier of its two records' (one host-bound step makes
    the pair's difference partly the host's)."""
    found = {step_class(base), step_class(new)}
    for name in ("host-bound", "busy unknown"):
        if name in found:
            return name
    return "GPU-bound"


@lru_cache(maxsize=None)
def d2(n: int) -> float:
    """The expected range of ``n`` independent standard normal values."""
    from scipy import integrate, special  # ndtr: the normal cdf that stats.norm wraps, at a fraction of its cost a call
    value, _ = integrate.quad(lambda x: 1 - special.ndtr(x) ** n - special.ndtr(-x) ** n, -12, 12, limit=200)
    return value


def quantile_floor(sigma: float, least: float = MIN_FLOOR) -> float:
    return max(least, math.expm1(Z * math.sqrt(2) * sigma))


def log_range(values) -> float:
    return math.log(max(values) / min(values))


@dataclass(frozen=True)
class Floor:
    fraction: float  # the least rise of the median, over the base median, that can fail
    how: str  # "learned across 4 hosts", "default (host-bound): history has 1 host"
    learned: bool
    # Across hosts: how far apart the hosts it was learned from are (largest host median over the
    # smallest, less one; the widest of the stacks).
    spread: float | None = None

    @property
    def host_limited(self) -> bool:
        """Whether it was learned across hosts that differ too much for a verdict to see the slowdown
        ``CROSS_HOST_AIM``: a slowdown under it cannot be told from the host."""
        return self.spread is not None and self.fraction > CROSS_HOST_AIM


class Floors:
    """Floors learned from a history of records, by (machine kind, case, parameters).

    ``stack`` (record -> label, such as its library versions) keeps apart runs that differ by
    more than host and time: the spread is measured within each label and averaged over them, so
    a history holding a case under two library versions does not count their difference as the
    noise that is to tell a version effect from chance. Without it every run is one stack.
    ``least``: no learned floor is below it."""

    def __init__(self, history: list[Record], stack=None, least: float = MIN_FLOOR):
        self.least = least
        self.runs: dict[tuple, dict[tuple[str, str], list[float]]] = {}
        self._add(entries(history, stack))

    @classmethod
    def of_entries(cls, found, least: float = MIN_FLOOR) -> Floors:
        """The floors of records already read into ``entries``."""
        made = cls([], least=least)
        made._add(found)
        return made

    def _add(self, found) -> None:
        for key, label, host, median in found:
            self.runs.setdefault(key, {}).setdefault((label, host), []).append(median)

    def hosts(self, key: tuple) -> int:
        return len({host for _, host in self.runs.get(key, {})})

    def stacks(self, key: tuple) -> list[dict[str, list[float]]]:
        """Per stack: host -> that host's run medians."""
        by = {}
        for (label, host), medians in self.runs.get(key, {}).items():
            by.setdefault(label, {})[host] = medians
        return list(by.values())

    def across(self, key: tuple, klass: str) -> Floor:
        spread = [[statistics.median(v) for v in hosts.values()] for hosts in self.stacks(key)]
        several = [m for m in spread if len(m) >= 2]
        if not several:
            most = max(map(len, spread), default=0)
            return Floor(DEFAULT_ACROSS[klass], f"default ({klass}): history has {most} host(s)", False)
        sigma = statistics.mean(log_range(m) / d2(len(m)) for m in several)
        hosts = len({h for hosts in self.stacks(key) if len(hosts) >= 2 for h in hosts})
        spread = math.expm1(max(map(log_range, several)))
        # Never under the spread itself: an honest run on a host already seen must pass, and among
        # many hosts one far host lies past the normal quantile that the range's sigma gives.
        floor = max(quantile_floor(sigma, self.least), spread)
        return Floor(floor, f"learned across {hosts} hosts", True, spread)

    def within(self, key: tuple, klass: str, widest: bool = False) -> Floor:
        """The floor one host's runs of the step teach: their scatter on the hosts that ran it
        twice, averaged, or (``widest``) the widest of them."""
        repeated = [v for hosts in self.stacks(key) for v in hosts.values() if len(v) >= 2]
        if not repeated:
            return Floor(DEFAULT_WITHIN[klass], f"default ({klass}): no host ran it twice", False)
        sigmas = [log_range(v) / d2(len(v)) for v in repeated]
        hosts = len({h for hosts in self.stacks(key) for h, v in hosts.items() if len(v) >= 2})
        sigma, how = (max(sigmas), "widest") if widest else (statistics.mean(sigmas), "learned")
        return Floor(quantile_floor(sigma, self.least), f"{how} within {hosts} host(s)", True)

    def floor(self, key: tuple, klass: str, same_host: bool) -> Floor:
        across = self.across(key, klass)
        if not same_host:
            return across
        within = self.within(key, klass)
        return within if within.fraction <= across.fraction else across


class SessionFloors(Floors):
    """The floors of one ``harness compare`` session: learned from BASE's rounds, down to
    ``SESSION_MIN_FLOOR``, except that a host-bound step's floor is at least how far one host's
    fresh processes of it scatter in the earlier compares (``prior``): the widest scatter of one
    host there, never an average that a steadier host would narrow as compares are filed; on its
    own machine kind where one ran it, else the widest on any kind, the scatter being the host's.
    Three rounds cannot show a host-paced step's scatter, which is lumpy: a pageable copy's
    process lands in one of a few speeds, so BASE's three rounds may all land in one and NEW's in
    another. GPU-bound steps keep the session's own floor, tight enough for a 2% change; a step no
    earlier compare ran keeps it too."""

    def __init__(self, base: list[Record], prior: Floors | None = None):
        super().__init__(base, least=SESSION_MIN_FLOOR)
        self.prior = prior

    def floor(self, key: tuple, klass: str, same_host: bool) -> Floor:
        own = super().floor(key, klass, same_host)
        known = self._known(key, klass) if klass == "host-bound" and self.prior is not None else None
        return known if known is not None and known.fraction > own.fraction else own

    def _known(self, key: tuple, klass: str) -> Floor | None:
        mine = self.prior.within(key, klass, widest=True)
        if mine.learned:
            return Floor(mine.fraction, f"{mine.how} of earlier compares", True)
        kin = [(k[0], self.prior.within(k, klass, widest=True))
               for k in self.prior.runs if k[1:] == key[1:] and k != key]
        kin = [(kind, f) for kind, f in kin if f.learned]
        if not kin:
            return None
        kind, widest = max(kin, key=lambda kf: kf[1].fraction)
        return Floor(widest.fraction, f"{widest.how} of earlier compares on {kind}", True)


def entries(history, stack=None) -> list[tuple]:
    """What floors learn of each record: (its key, its stack's label, its host, its median), for
    the records that ended ok with a timing on a named host."""
    found = []
    for rec in history:
        host = host_key(rec.environment)
        if rec.outcome == OK and rec.timing is not None and host:
            label = stack(rec) if stack else ""  # pragma: no mutate (without stacks, one label: never shown)
            found.append((key_of(rec), label, host, rec.timing.median_s))
    return found


def compare_floors(root: Path, exclude: Path | None = None, least: float = MIN_FLOOR) -> Floors:
    """The floors of the rounds of the compares filed under ``root`` (``<kind>/<folder>/{base,new}/``),
    one code each: BASE's, and NEW's too where NEW measured BASE's commit (an A/A compare); a
    planted or changed NEW is left out, as is the compare holding ``exclude`` (the one judged)."""
    root, found = Path(root), []
    inside = (Path(exclude).resolve(), *Path(exclude).resolve().parents) if exclude is not None else ()
    for folder in sorted(p.parent for p in root.glob("*/*/base")):
        if folder.resolve() in inside:
            continue
        (base, base_commits), (new, new_commits) = (_read(folder / side) for side in ("base", "new"))
        same = bool(base_commits) and new_commits == base_commits
        found += base + (new if same else ())
    return Floors.of_entries(found, least)


def _read(side: Path) -> tuple[tuple, frozenset]:
    return _side(str(side), _stamp(side))


# Each compare's floors read every other compare's rounds: read, upgraded and keyed once per state
# of a side, which the docs' compares (each judged against all the others) ask for again and again.
@lru_cache(maxsize=256)
def _side(side: str, stamp: tuple) -> tuple[tuple, frozenset]:
    """A side's entries and the commits its records name (kept, so never to be changed: a tuple)."""
    recs = [cases.upgraded(r) for r in load_any(Path(side)).records]
    return tuple(entries(recs)), frozenset(r.commit for r in recs)


def _stamp(root: Path) -> tuple:
    files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))  # pragma: no mutate (any glob)
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)


@lru_cache(maxsize=8)
def _learned(root: str, stamp: tuple) -> Floors:
    return Floors([cases.upgraded(r) for r in load_any(Path(root)).records])


def history_floors(root: Path) -> Floors:
    """The floors of the records under ``root``, learned once per state of its files."""
    root = Path(root)
    return _learned(str(root.resolve()), _stamp(root))


def can_decide(n: int, m: int) -> bool:
    """Whether ``n`` steps against ``m`` are enough for a test to tell a change at ``ALPHA``: the
    least p a one-sided rank test of them can give (one ordering of all, 1 / C(n + m, m)) is under
    it. Five steps a side are not (1/252); six are (1/924). The quartile test is held to the same
    count, since its normal approximation is no surer on fewer steps."""
    return 1 / math.comb(n + m, m) < ALPHA  # no steps on a side: C(m, m) = 1, p = 1


def rank_p(base: tuple, new: tuple, alternative: str = "greater") -> float | None:  # pragma: no mutate (any case)
    """p of "NEW's steps are slower than BASE's" (``alternative="less"``: faster) by a one-sided
    Mann-Whitney U test; None where either side has no raw samples or too few for p to reach
    ``ALPHA`` at all."""
    if not can_decide(len(base), len(new)):
        return None
    from scipy.stats import mannwhitneyu
    return float(mannwhitneyu(new, base, alternative=alternative).pvalue)
