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
from dataclasses import dataclass
from pathlib import Path

from harness.drive.commands.todo import Bench
from harness.measure.guards.inputs import write_whole

STATE = "compare.json"


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

    def save(self, folder: Path) -> None:
        d = dataclasses.asdict(self)
        write_whole(Path(folder) / STATE, json.dumps(d, indent=1) + "\n")

    @classmethod
    def read(cls, folder: Path) -> "State":
        """The state of the compare in ``folder``; CompareRefused where there is none to read."""
        path = Path(folder) / STATE
        fix = "name the folder that `harness compare` printed, or start a new compare without --resume"
        try:
            # pragma: no mutate (as write_whole wrote it; the tests' locale reads UTF-8 the same)
            d = json.loads(path.read_text(encoding="utf-8"))
            d["benches"] = [Bench(**{**b, "methods": tuple(b["methods"])}) for b in d["benches"]]
            return cls(**d)
        except FileNotFoundError:
            raise CompareRefused(f"--resume {folder} holds no {STATE}, so no compare began there: {fix}") from None
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise CompareRefused(f"--resume {folder}: {STATE} is unreadable ({type(e).__name__}: {e}): {fix}") from None
