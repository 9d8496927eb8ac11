"""The state file of a ``harness compare`` (``compare.json`` in its folder), written at its start:
what ``--resume FOLDER`` reads to go on with that compare exactly, and how long it has measured.

It holds the full hashes of BASE and NEW as named, the rounds, the cases in their order, the
profile or ``--bench`` that chose them, the gate's threshold and report, the run id and machine
its records are filed under, and the commit of the checkout that ran it (``harness``). After each
process it is rewritten whole with the measuring time so far and the number of sittings, so that
a compare measured over several sittings reports the sum of their measuring time (not the wall
clock between them), even where a sitting was killed.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from harness.drive.commands.todo import Bench
from harness.measure.guards.inputs import NOT_A_RUN_ID, Refused, write_whole
from harness.report.compares import MAX_ROUNDS, MAX_THRESHOLD, STATE, state_text

__all__ = ["MAX_ROUNDS", "MAX_THRESHOLD", "STATE", "CompareRefused", "State"]
HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git's SHA-1 or SHA-256 object names, as rev-parse prints them
MACHINE = re.compile(r"[a-z0-9][a-z0-9+-]{0,199}")  # as ``machine_name`` makes one: a folder's name, never a path


class CompareRefused(Exception):
    """``harness compare`` will not start (exit 2); the message names the fix."""


@dataclass
class State:
    commits: dict[str, str]  # side -> full hash
    revs: list[str]  # BASE and NEW as the command line named them
    rounds: int
    benches: list[Bench]
    profile: str | None
    bench: str | None
    harness: str  # the checkout's commit: its code chose the cases, orders the runs and gates them
    run_id: str
    machine: str
    report: str
    threshold: float
    measured_s: float = 0.0  # over all sittings, each from its worktrees' making to its last process's end
    sittings: int = 0
    # runs that began while other processes held the box's GPUs (``harness.drive.commands.compare``)
    shared_runs: int = 0
    # Seconds of the runs' processes, per side and round ("base r1"), over all sittings: one of
    # them is a fresh process per case, what one plain run of the cases takes near enough.
    round_s: dict[str, float] = dataclasses.field(default_factory=dict)

    def check(self) -> None:
        """ValueError naming the first field that is not as ``harness compare`` writes it: the
        commits reach git, the run id and machine name files, rounds and threshold bound the work
        and the verdict. ``report`` is never read back as a path (the report lives in the folder)."""
        if set(self.commits) != {"base", "new"} or not all(isinstance(c, str) and HASH.fullmatch(c)
                                                           for c in self.commits.values()):
            raise ValueError(f"commits must name base and new by full hash, got {str(self.commits)[:120]}")
        if not (isinstance(self.harness, str) and HASH.fullmatch(self.harness)):
            raise ValueError(f"harness must be a full commit hash, got {str(self.harness)[:80]!r}")
        if not (isinstance(self.revs, list) and len(self.revs) == 2 and all(isinstance(r, str) for r in self.revs)):
            raise ValueError("revs must be BASE and NEW as named, two strings")
        if not (type(self.rounds) is int and 1 <= self.rounds <= MAX_ROUNDS):
            raise ValueError(f"rounds must be a whole number from 1 to {MAX_ROUNDS}, got {str(self.rounds)[:40]}")
        if not (isinstance(self.run_id, str) and self.run_id and not NOT_A_RUN_ID.search(self.run_id)
                and self.run_id.isprintable() and len(self.run_id) <= 100):
            raise ValueError(f"run_id must be a run id as compare makes one (no /, \\, space or wildcard), "
                             f"got {str(self.run_id)[:80]!r}")
        if not (isinstance(self.machine, str) and MACHINE.fullmatch(self.machine)):
            raise ValueError(f"machine must be a machine name (a-z, 0-9, + and -), got {str(self.machine)[:80]!r}")
        if not (isinstance(self.threshold, (int, float)) and not isinstance(self.threshold, bool)
                and math.isfinite(self.threshold) and 0 <= self.threshold <= MAX_THRESHOLD):
            raise ValueError(f"threshold must be a number from 0 to {MAX_THRESHOLD:g}, got {str(self.threshold)[:40]}")
        if not self.benches or not all(isinstance(v, str) for b in self.benches
                                       for v in (b.family, b.cls, b.args, b.case, b.params, *b.methods)):
            raise ValueError("benches must list the compare's cases, each field a string")

    def save(self, folder: Path) -> None:
        d = dataclasses.asdict(self)
        write_whole(Path(folder) / STATE, json.dumps(d, indent=1) + "\n")

    @classmethod
    def read(cls, folder: Path) -> "State":
        """The state of the compare in ``folder``; CompareRefused where there is none to read."""
        path = Path(folder) / STATE
        fix = "name the folder that `harness compare` printed, or start a new compare without --resume"
        try:
            d = json.loads(state_text(path))  # a FIFO or a device is refused, never waited on
            d["benches"] = [Bench(**{**b, "methods": tuple(b["methods"])}) for b in d["benches"]]
            state = cls(**d)
            state.check()
            return state
        except FileNotFoundError:
            raise CompareRefused(f"--resume {folder} holds no {STATE}, so no compare began there: {fix}") from None
        except Refused as e:
            raise CompareRefused(f"--resume {folder}: {e}") from None
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            raise CompareRefused(f"--resume {folder}: {STATE} is unreadable ({type(e).__name__}: {e}): {fix}") from None
