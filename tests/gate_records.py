"""Records built for the gate's tests, so that none depends on what is committed under results/."""
import json
from pathlib import Path

from conftest import fake_devices
from harness.measure.instruments.devices import Devices
from harness.measure.instruments.environment import Environment
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
CARD = {H100: 85520809984, H200: 150754820096}
FITS = {"device": "cuda", "workload": "lm", "technique": "cpu_offload", "vocab": 32000, "width": 1024, "depth": 12,
        "seq_len": 1024, "over": "batch"}


def environment(gpu: str | None = H100, host: str = "host-a") -> Environment:
    devices = fake_devices(gpu, total=CARD[gpu]) if gpu else Devices(reason="no NVIDIA GPU visible (test)")
    return Environment(python="3.12.3", platform="Linux x86_64", cpu="Test CPU", num_cpu=16,
                       libraries={"torch": "2.11.0"}, devices=devices, host={"id": host})


def steps(median: float, n: int, spread: float = 0.002) -> Timing:
    """``n`` step times evenly spread over ``median`` ± ``spread`` of it."""
    offsets = [(i - (n - 1) / 2) / max(n - 1, 1) * 2 * spread for i in range(n)]
    return Timing.from_samples([median * (1 + o) for o in offsets], warmup=2)


def record(case: str = "ceilings", params: dict | None = None, median: float = 0.01, n: int = 10, *,
           gpu: str | None = H100, host: str = "host-a", run: str = "20990101T000000-aaaaaa", created: float = 1.0,
           memory: dict | None = None, **fields) -> dict:
    """A valid ok record as a dict: ``n`` raw step times around ``median``, busy GPU, the given memory."""
    rec = Record(case=case, params=params if params is not None else {"probe": "device_copy"}, outcome="ok",
                 environment=environment(gpu, host), timing=steps(median, n), memory=memory or {},
                 gpu_busy={"fraction": 0.99, "source": "test"} if gpu else {}, run_id=run, created=created)
    return {**rec.to_dict(), **fields}


def fits(budget: str = "24GB", answer: int = 16, peak: int = 20_467_567_104, *, gpu: str = H100,
         host: str = "host-a", device_level: int = 24_415_895_552, **kw) -> dict:
    """A what-fits record: its search's answer ``answer`` under ``budget``, the probe at it
    allocating ``peak``; its own device level adds up probes run side by side."""
    limit = CARD[gpu] if budget == "card" else int(budget[:-2]) * 10**9
    check = {"max_batch": answer, "peak_allocated_at_max": peak, "budget_bytes": limit, "card_bytes": CARD[gpu],
             "search_limit": 65536, "search_unit": 1, "too_slow_at": None, "host_short_at": None, "probes": 2}
    return record("fits", {**FITS, "budget": budget}, kw.pop("median", 30.0), kw.pop("n", 1), gpu=gpu, host=host,
                  memory={"device.used.gpu0": device_level, "device.used_before.gpu0": 0, "host.max_rss": 71_000_000},
                  check=check, budget={"name": budget, "limit_bytes": limit, "card_bytes": CARD[gpu],
                                       "enforced": "torch.cuda.set_per_process_memory_fraction of torch's total"},
                  gpu_busy={}, **kw)


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path
