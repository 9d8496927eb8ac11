"""ResNet50 data parallel at a batch every GPU count splits: the suite declares it at 1, 2, 4 and
8 GPUs, and the parallel docs' table reads its scaling efficiency at each count against single
on the same box, apart from the tutorial's batch 10."""
import re

import pytest

from benchmarks import parallel as bench
from gate_records import environment, record, write
from harness.cases import parallel_resnet50
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report.model import load_rows
from harness.report.scaling import scaling_efficiency
from harness.report.selection import Select
from harness.report.specs import FAMILIES

PARAMS = {"device": "cuda", "micro_batches": 1, "image_size": 1024, "nodes": 1, "transport": "fast",
          "cut": "balanced"}
# Seconds per step at batch 16 by (strategy, gpus): single's 0.16 s over k GPUs at 80% of linear.
STEPS = {("single", 1): 0.16, ("ddp", 2): 0.1, ("ddp", 4): 0.05, ("ddp", 8): 0.025, ("fsdp", 8): 0.04}


def scaling_spec():
    scaling = (Select("parallel", "ResnetScaling", "ResnetScalingSingle"),)
    (spec,) = [s for f in FAMILIES for s in f.specs if s.bench == scaling]
    return spec


def test_the_scaling_batch_splits_over_every_gpu_count_the_suite_runs():
    assert bench.ResnetScaling.params == [bench.DATA_PARALLEL, [1, 2, 4, 8]]
    batch = bench.SCALING["batch"]
    assert batch in parallel_resnet50.BATCHES and all(batch % k == 0 for k in bench.ALL_GPUS)
    assert bench.ResnetScalingSingle.fixed["batch"] == batch and bench.ResnetScalingSingle.fixed["strategy"] == "single"


def test_the_docs_read_scaling_efficiency_at_each_gpu_count(tmp_path):
    folder = tmp_path / "results/records/nvidia-h200-x8"
    folder.mkdir(parents=True)
    recs = [record("parallel_resnet50", {**PARAMS, "strategy": s, "gpus": k, "batch": 16}, median=t, gpu="NVIDIA H200",
                   created=float(i)) for i, ((s, k), t) in enumerate(STEPS.items())]
    # The tutorial's batch 10 at the same parameters: another table's, never this one's base.
    recs.append(record("parallel_resnet50", {**PARAMS, "strategy": "single", "gpus": 1, "batch": 10}, median=0.5,
                       gpu="NVIDIA H200", created=99.0))
    write(folder / "run.jsonl", recs)
    text = re.sub(r"\\(.)", r"\1", scaling_spec().render(load_rows(tmp_path / "results")))  # cells unescaped
    cells = {tuple(line.split(" | ")[0].strip("| ").split(", ")): line
             for line in text.splitlines()[2:] if ", " in line}
    for (strategy, gpus), seconds in STEPS.items():
        if strategy != "single":
            want = STEPS["single", 1] / (gpus * seconds)
            assert f"{want:.2f} of linear" in cells[strategy, str(gpus)]
    assert "0.80 of linear" in cells["ddp", "8"]


@pytest.mark.parametrize("gpus", [4, 8])
def test_the_tutorials_batch_does_not_split_over_four_or_eight(gpus):
    from harness.workloads.parallelism.parallel import _check_fits_strategy
    from harness.workloads.parallelism.parallel_job import Job
    from harness.measure.outcomes import Skip
    with pytest.raises(Skip, match="does not split evenly"):
        _check_fits_strategy(Job(model="resnet50", strategy="ddp", device="cuda", gpus=gpus, batch=10))
    _check_fits_strategy(Job(model="resnet50", strategy="ddp", device="cuda", gpus=gpus, batch=bench.SCALING["batch"]))


# -- the efficiency itself ---------------------------------------------------------------------------

def scaled(strategy="ddp", gpus=4, median=0.05, outcome="ok", timed=True) -> Record:
    """A parallel record with step ``median``; ``gpus=None`` for one filed without the parameter."""
    params = {**PARAMS, "strategy": strategy, "batch": 16, **({"gpus": gpus} if gpus else {})}
    timing = Timing(median, median, median, median, median, 10, 2) if timed else None
    return Record(case="parallel_resnet50", params=params, outcome=outcome, environment=environment(), timing=timing)


def test_scaling_efficiency_is_the_single_step_over_k_times_the_strategys_step():
    single = scaled("single", 1, 0.16)
    assert scaling_efficiency(single, scaled(gpus=4, median=0.05)) == pytest.approx(0.8)
    assert scaling_efficiency(single, scaled(gpus=2, median=0.05)) == pytest.approx(1.6)
    assert scaling_efficiency(single, scaled(gpus=None, median=0.08)) == pytest.approx(2.0)  # no gpus: one device


def test_scaling_efficiency_is_none_where_either_record_was_not_ok_or_kept_no_timing():
    single, ddp = scaled("single", 1, 0.16), scaled()
    assert scaling_efficiency(scaled("single", 1, 0.16, outcome="failed"), ddp) is None
    assert scaling_efficiency(single, scaled(outcome="failed")) is None
    assert scaling_efficiency(scaled("single", 1, timed=False), ddp) is None
    assert scaling_efficiency(single, scaled(timed=False)) is None
