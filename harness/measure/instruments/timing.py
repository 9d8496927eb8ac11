"""Seconds per step: warm-up excluded, device synchronised before every clock read, median kept
with its spread.

GPU work is queued asynchronously, so a host clock read without a synchronisation measures the
launch, not the work. Each step is bracketed by ``sync()`` so the clock sees exactly one step;
the steps measured here are milliseconds or longer, so the synchronisation's own few
microseconds do not matter.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Timing:
    median_s: float
    q25_s: float
    q75_s: float
    min_s: float
    max_s: float
    steps: int
    warmup: int
    # Every timed step's seconds, in the order run: what a rank test between two runs needs.
    # Empty in records made before they were kept.
    samples_s: tuple = ()

    @property
    def iqr_s(self) -> float:
        return self.q75_s - self.q25_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["samples_s"] = list(self.samples_s)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Timing":
        d = dict(d)
        d["samples_s"] = tuple(d.get("samples_s", ()))
        return cls(**d)

    @classmethod
    def from_samples(cls, samples, warmup: int) -> "Timing":
        if not samples:
            raise ValueError("no timed step: ask for at least one repeat")
        s = sorted(samples)
        if len(s) == 1:
            q25 = q75 = s[0]
        else:
            q25, _, q75 = statistics.quantiles(s, method="inclusive")  # quartiles: n=4 by default
        return cls(median_s=statistics.median(s), q25_s=q25, q75_s=q75,
                   min_s=s[0], max_s=s[-1], steps=len(s), warmup=warmup, samples_s=tuple(samples))


def no_sync() -> None:
    """For work that is done when the call returns (CPU)."""


def torch_sync(gpus=()):
    """Waits for the work queued on each of these CUDA devices; with none (the CPU), nothing."""
    if not gpus:
        return no_sync
    import torch

    def sync() -> None:
        for g in gpus:
            torch.cuda.synchronize(g)
    return sync


def no_prepare() -> None:
    """For steps that need nothing put back between them."""


def time_steps(step, *, sync=no_sync, prepare=no_prepare, warmup: int = 2, repeat: int = 10,
               clock=time.perf_counter, begin=lambda: None) -> Timing:
    """``prepare`` runs before every step, outside the clock: it puts the state back where each
    step must start (pages back on the host before a managed-memory step, say). ``begin`` runs
    once, after the warm-up, before the first timed step (the memory levels start there)."""
    for _ in range(warmup):
        prepare()
        step()
    sync()
    begin()
    samples = []
    for _ in range(repeat):
        if prepare is not no_prepare:
            prepare()
            sync()  # what prepare queued is done before the clock starts
        t0 = clock()
        step()
        sync()
        samples.append(clock() - t0)
    return Timing.from_samples(samples, warmup)
