"""What earlier probes of a what-fits search found: ``ProbeLog``, every probe of one run, whose
answers bound the searches after it in that run; ``EarlierRuns``, the logs of other runs, which
only aim a search's guesses (``harness.workloads.search.fits``)."""
from __future__ import annotations

from pathlib import Path

from harness.measure.outcomes import HOST
from harness.measure.records.store import append_line, read_lines


class ProbeLog:
    """Every probe of one run, appended as it answers, so that the search of the same case under
    the next budget starts from what is known. The allocator makes the same requests whatever
    its cap, and only where it says no moves: a size that fit under a smaller cap fits under a
    larger one, and one that did not fit under a larger cap fits under no smaller one. One the
    host's memory could not hold fits under no cap: the cap moves the device's alone. Kept per
    run (one commit, one machine): another run's probes bound nothing in this one (they only aim
    its guesses: ``EarlierRuns``). Without a path it lives in memory, for one search."""

    def __init__(self, path=None):
        self.path = Path(path) if path else None
        self.kept: list[dict] = []

    @classmethod
    def snapshot(cls, path) -> "ProbeLog":
        """The log at ``path`` as it is now, read once and kept in memory."""
        log = cls()
        log.kept = _read(Path(path))
        return log

    def add(self, key: dict, cap: int, result: dict) -> None:
        entry = {"key": key, "cap": cap, **result}
        if self.path is None:
            self.kept.append(entry)
            return
        append_line(self.path, entry)

    def entries(self, key: dict) -> list[dict]:
        if self.path is None:
            lines = self.kept
        else:
            lines = _read(self.path)
        return [e for e in lines if e["key"] == key]

    def answers(self, key: dict, cap: int) -> dict:
        """Size -> whether it fits under ``cap``, for each size the log knows that of: it fit under
        ``cap`` or less, or failed under ``cap`` or more (or for the host's memory, under any).
        Where a size did both (never expected of the allocator's same requests), the failure
        holds, so that no answer rests on it."""
        known = {}
        for e in self.entries(key):
            if e["fits"] and e["cap"] <= cap:
                known.setdefault(e["n"], True)
            elif e["fits"] is False and (e["cap"] >= cap or _host_short(e)):
                known[e["n"]] = False
        return known

    def bounds(self, key: dict, cap: int) -> tuple:
        """(largest size known to fit under ``cap``, smallest known not to over it), either None:
        where fitting is not monotone, failures under the largest fit do not bound the answer."""
        known = self.answers(key, cap)
        low = max((n for n, ok in known.items() if ok), default=None)
        return low, min((n for n, ok in known.items() if not ok and (low is None or n > low)), default=None)

    def too_slow(self, key: dict) -> int | None:
        """The smallest size whose probe ran past its time limit, under any cap (time does not
        depend on the cap); None where none did."""
        return self._smallest(key, lambda e: bool(e.get("too_slow")))

    def host_killed(self, key: dict) -> int | None:
        """The smallest size whose probe the kernel killed when the host's memory ran out, under
        any cap (the host's memory does not depend on it); None where none did."""
        return self._smallest(key, lambda e: bool(e.get("killed")))

    def host_short(self, key: dict) -> int | None:
        """The smallest size the host's memory could not hold, under any cap: its probe was
        killed, or stopped by the guard of a way out that keeps data on the host."""
        return self._smallest(key, _host_short)

    def _smallest(self, key: dict, which) -> int | None:
        """The smallest size of ``key`` whose log entry ``which`` picks; None where it picks none."""
        return min((e["n"] for e in self.entries(key) if which(e)), default=None)

    def points(self, key: dict) -> list[tuple]:
        """(size, reserved bytes) of every probe that fit: the estimate's line."""
        return [(e["n"], e.get("peak_reserved") or e["peak_allocated"]) for e in self.entries(key)
                if e["fits"] and e.get("peak_allocated")]


def _read(path: Path) -> list[dict]:
    """The entries of a log file, none where it is not there yet (a line cut short is skipped)."""
    return [obj for _, obj in read_lines(path)[0]] if path.exists() else []


class EarlierRuns:
    """The probe logs of other runs, read once: this machine's (``here``) and other machines'
    (``elsewhere``). Hints for a search (the sizes it probes first, ``largest_fitting``'s
    ``hint``; the peaks its estimate's line runs through), never bounds. A budget caps the
    allocator's bytes whatever the card, so another card's probes under the same cap answer
    nearly alike; but their probes may have run other code, other library versions or other
    kernels, which can move the answer: a hint that is off costs probes, not exactness."""

    def __init__(self, here=(), elsewhere=()):
        self.here = [ProbeLog.snapshot(path) for path in here]
        self.elsewhere = [ProbeLog.snapshot(path) for path in elsewhere]

    def points(self, key: dict) -> list[tuple]:
        return [point for log in self.here + self.elsewhere for point in log.points(key)]

    def entries(self, key: dict) -> list[dict]:
        """Every earlier probe of ``key``, this machine's first: the prediction's points."""
        return [e for log in self.here + self.elsewhere for e in log.entries(key)]

    def bracket(self, key: dict, cap: int) -> tuple:
        """(largest size an earlier run saw fit under ``cap``, smallest one saw fail), either None:
        this machine's runs' where they found both, else other machines' where they did, else
        what all of them found."""
        for logs in (self.here, self.elsewhere):
            low, high = _agreed(logs, key, cap)
            if low is not None and high is not None:
                return low, high
        return _agreed(self.here + self.elsewhere, key, cap)

    def runs(self, key: dict) -> list[int]:
        """How many earlier runs probed this case: [on this machine, on others]."""
        return [sum(1 for log in logs if log.entries(key)) for logs in (self.here, self.elsewhere)]


def _agreed(logs, key: dict, cap: int) -> tuple:
    """The largest fit and smallest failure under ``cap`` across ``logs``; neither where they
    disagree (one version fit more than another did)."""
    bounds = [log.bounds(key, cap) for log in logs]
    low = max((low for low, _ in bounds if low is not None), default=None)
    high = min((high for _, high in bounds if high is not None), default=None)
    return (None, None) if low is not None and high is not None and low >= high else (low, high)


def _host_short(entry: dict) -> bool:
    """Whether a probe failed for the host's memory, which no device cap moves."""
    return entry["fits"] is False and (bool(entry.get("killed")) or entry.get("short_of") == HOST)


def device_answer(entry: dict) -> bool | None:
    """What a probe says of the device alone: True where its size fit, False where the device's
    memory ran out; None where the host's memory stopped it (its guard, or the kernel's killer) or
    its time limit did, which says nothing of the device. Entries from before probes said which
    memory ran short name the host's in their reason, as records of that time do."""
    if entry["fits"]:
        return True
    older_host = not entry.get("short_of") and "host memory" in (entry.get("reason") or "")
    return None if entry.get("too_slow") or _host_short(entry) or older_host else False
