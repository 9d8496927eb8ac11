"""Writes gpu_bound_hosts.jsonl, the frozen history tests/test_gate_hosts.py reads, from the
committed records: each GPU case (machine kind, case, parameters) that ran on two hosts or more
and whose latest record the gate reads as GPU-bound, with every run of it: host, commit, run id
and its step times (its quartiles where a record predates kept step times).

Run from the repository root: ``python3 tests/data/freeze_gpu_bound_hosts.py [results/records]``."""
import json
import sys
from pathlib import Path

from harness import cases
from harness.measure.instruments.machine import host_key
from harness.measure.outcomes import OK
from harness.measure.records.store import load_any
from harness.report import noise

OUT = Path(__file__).with_name("gpu_bound_hosts.jsonl")
DIGITS = 6  # significant digits kept of a step time: far under any spread the gate reads


def sig(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def timing(t) -> dict:
    if t.samples_s:
        return {"samples": [sig(s) for s in t.samples_s], "warmup": t.warmup}
    return {"median": sig(t.median_s), "q25": sig(t.q25_s), "q75": sig(t.q75_s), "min": sig(t.min_s),
            "max": sig(t.max_s), "steps": t.steps, "warmup": t.warmup}


def frozen(root: Path) -> list[dict]:
    by = {}
    for rec in map(cases.upgraded, load_any(root).records):
        if rec.outcome == OK and rec.timing is not None and host_key(rec.environment) and rec.environment.devices.gpus:
            by.setdefault(noise.key_of(rec), []).append(rec)
    out = []
    for (kind, case, params), recs in sorted(by.items()):
        recs.sort(key=lambda r: r.created)
        last = recs[-1]
        if len({host_key(r.environment) for r in recs}) < 2 or noise.step_class(last) != "GPU-bound":
            continue
        gpus = last.environment.devices.gpus
        out.append({"kind": kind, "gpu": gpus[0].name, "gpus": len(gpus), "case": case, "params": json.loads(params),
                    "busy": last.gpu_busy["fraction"],
                    "runs": [{"host": host_key(r.environment), "commit": (r.commit or "")[:8], "run": r.run_id,
                              **timing(r.timing)} for r in recs]})
    return out


if __name__ == "__main__":
    rows = frozen(Path(sys.argv[1] if len(sys.argv) > 1 else "results/records"))
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{OUT}: {len(rows)} cases")
