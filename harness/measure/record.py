"""One record type for every measurement, and the file it is appended to.

A record holds the case, its parameters, how it ended, the timing with its spread, the work one
step does (so rates can be derived), peak memory by label, the correctness check, and the
environment. Records are appended one JSON line at a time and flushed, so a run that fails or
is interrupted keeps everything measured before it.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

from harness.measure.environment import Environment
from harness.measure.outcomes import OK, OUTCOMES
from harness.measure.timing import Timing

SCHEMA = 2


@dataclass(frozen=True)
class Record:
    case: str
    params: dict
    outcome: str
    environment: Environment
    reason: str | None = None
    timing: Timing | None = None
    # What one step does: {"bytes": n} for a transfer, {"flops": n} for arithmetic.
    work: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)
    requested_bytes: int | None = None
    # How busy the GPU was during the timed steps: {"fraction": 0..1, "source": how it was read}.
    gpu_busy: dict = field(default_factory=dict)
    run_id: str | None = None
    commit: str | None = None
    created: float = field(default_factory=time.time)
    # 2: memory levels cover the timed steps alone (set-up under "setup."), raw step times kept.
    # 1 (records written before): levels covered the whole case, build and check included.
    schema: int = SCHEMA

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    def rate(self, unit: str) -> float | None:
        """Work per second at the median step time, e.g. rate("bytes") in bytes/s."""
        if self.timing is None or unit not in self.work:
            return None
        return self.work[unit] / self.timing.median_s

    def device_bytes(self) -> int | None:
        """The most device memory the case took on any one GPU: NVML's used memory at the peak
        less what was in use before it started (its CUDA context counts, other processes do not)."""
        gains = [v - self.memory.get(label.replace("device.used.", "device.used_before."), 0)
                 for label, v in self.memory.items() if label.startswith("device.used.")]
        return max(gains) if gains else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["environment"] = self.environment.to_dict()
        d["timing"] = self.timing.to_dict() if self.timing else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        """The record a line holds; ValueError naming the field where it is not a valid one."""
        _validate(d)
        d = dict(d)
        d.setdefault("schema", 1)
        d["environment"] = Environment.from_dict(d["environment"])
        d["timing"] = Timing.from_dict(d["timing"]) if d.get("timing") else None
        return cls(**d)



def _validate(d: dict) -> None:
    for name, kind in (("case", str), ("params", dict), ("outcome", str), ("environment", dict)):
        if not isinstance(d.get(name), kind):
            raise ValueError(f"{name} must be a {kind.__name__}, got {d.get(name)!r:.60}")
    if d["outcome"] not in OUTCOMES:
        raise ValueError(f"outcome {d['outcome']!r} is not one of {', '.join(OUTCOMES)}")
    timing = d.get("timing")
    if d["outcome"] == OK:
        median = timing.get("median_s") if isinstance(timing, dict) else None
        if not isinstance(median, (int, float)) or not math.isfinite(median) or median < 0:
            raise ValueError(f"an ok record needs a finite timing.median_s, got {median!r}")
