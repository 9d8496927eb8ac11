"""A results folder of ``n`` made-up records, the same every time, for timing the tools that read
records (the gate, the pages) at the size a long history reaches.

The records come from a small template here, not from any committed result: a few cases shaped
like the suite's (a ceilings probe, a tricks grid of techniques and budgets), on four machines
(two GPU kinds, one of them twice, and a CPU box), under two library stacks, run after run. Each
run is one machine's pass over every configuration, filed as ``harness run`` files it.
"""
from __future__ import annotations

import json
import random
from itertools import product
from pathlib import Path

from harness.measure.instruments.devices import GPU, Devices
from harness.measure.instruments.environment import Environment
from harness.measure.instruments.machine import machine_name
from harness.measure.records.record import Record
from harness.measure.records.store import RecordStore
from harness.measure.instruments.timing import Timing
from harness.units import GiB

CONFIGS = ([("ceilings", {"probe": p}, {"bytes": 2 * GiB}) for p in ("host_copy", "device_copy", "h2d_pinned")]
           + [("tricks", {"workload": w, "batch": 16, "device": "cuda", "technique": t, "budget": b}, {"samples": 16})
              for w, t, b in product(("lm", "resnet50_1024"), ("fp32", "amp", "checkpoint", "accumulate", "offload"),
                                     ("16GB", "40GB", "card"))])
STACKS = ({"torch": "2.11.0", "numpy": "2.4.6"}, {"torch": "2.13.0", "numpy": "2.5.2"})


def _machine(gpu: str | None, count: int, memory: int) -> Devices:
    if gpu is None:
        return Devices(reason="no NVIDIA GPU visible")
    gpus = tuple(GPU(i, gpu, memory, memory - GiB, "9.0", f"GPU-{gpu[-4:]}-{count}-{i}") for i in range(count))
    return Devices(gpus=gpus, driver="580.0", cuda_driver="13.0", peer=((True,) * count,) * count)


MACHINES = (_machine("NVIDIA H100 80GB HBM3", 1, 80 * GiB), _machine("NVIDIA H200", 1, 141 * GiB),
            _machine("NVIDIA H200", 2, 141 * GiB), _machine(None, 0, 0))


def environment(devices: Devices, stack: dict, host: int) -> Environment:
    return Environment(python="3.11.7", platform="Linux 6.0 x86_64", cpu="Synthetic CPU", num_cpu=2,
                       libraries=dict(stack), devices=devices, executable="/opt/venv/bin/python",
                       host={"id": f"{host:012x}"})


def record(case: str, params: dict, work: dict, env: Environment, rng: random.Random, run_id: str,
           commit: str, created: float) -> Record:
    base = 1e-3 * (1 + len(json.dumps(params)) % 7)
    samples = [base * rng.uniform(0.97, 1.05) for _ in range(10)]
    peak = int((1 + rng.random()) * GiB)
    memory = ({"device.used.0": peak, "device.used_before.0": GiB // 2, "host.max_rss": GiB}
              if env.devices.gpus else {"host.max_rss": peak})
    return Record(case=case, params=params, outcome="ok", environment=env, timing=Timing.from_samples(samples, 2),
                  work=work, memory=memory, run_id=run_id, commit=commit, created=created)


def write(root: Path, n: int, seed: int = 0) -> list[Path]:
    """``n`` records under ``root``/records, run after run; the files written, oldest run first."""
    rng, store, files = random.Random(seed), RecordStore.of_results(Path(root)), []
    for run in range(-(-n // len(CONFIGS))):
        devices = MACHINES[run % len(MACHINES)]
        env = environment(devices, STACKS[run // len(MACHINES) % len(STACKS)], host=run % 7)
        run_id, commit = f"20260101T{run // 3600 % 24:02d}{run // 60 % 60:02d}{run % 60:02d}-s{run:06d}", f"{run:040x}"
        count = min(len(CONFIGS), n - run * len(CONFIGS))
        lines = [json.dumps(record(*CONFIGS[i], env, rng, run_id, commit, 1.7e9 + run * 60 + i).to_dict(),
                            sort_keys=True) for i in range(count)]
        path = store.run_file(machine_name(devices, env.cpu), commit, run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return files
