import time

import numpy as np
import pytest

from harness import cases
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK, SKIPPED, CheckFailed, is_out_of_memory, requested_bytes
from harness.drive.asv.bench import for_asv, measure
from harness.drive.runner import execute
from harness.measure.records.store import load_file
from harness.measure.instruments.timing import no_sync

from conftest import set_run
from harness.measure.workload import Workload


def make_case(build, declared=None):
    return cases.Case(name="fake", params={"n": (1, 2)}, build=build,
                      declared_bytes=(lambda n: declared) if declared else (lambda **_: None))


def quick(step=lambda: None, check=lambda: {"exact": True}):
    return Workload(step=step, check=check, work={"bytes": 8}, sync=no_sync, warmup=1, repeat=3)


@pytest.mark.parametrize("message,size", [
    ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.10 GiB", 20 * 2**30),
    ("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
     "you tried to allocate 1152921504606846976 bytes.", 2**60),
    ("Unable to allocate 4.00 EiB for an array with shape (4611686018427387904,) and data type uint8", 4 * 2**60),
    ("Out of memory allocating 1,024 bytes (allocated so far: 0 bytes).", 1024),
    ("something else", None),
])
def test_requested_size_is_read_from_each_frameworks_message(message, size):
    assert requested_bytes(message) == size


def test_numpy_out_of_memory_becomes_does_not_fit_with_the_size_asked():
    def build(n):
        np.empty(2**60, dtype=np.uint8)  # far more than any machine has
    rec = execute(make_case(build), {"n": 1})
    assert rec.outcome == DOES_NOT_FIT
    assert rec.requested_bytes == 2**60
    assert "does not fit" in rec.reason
    assert rec.timing is None


def test_torch_cpu_out_of_memory_becomes_does_not_fit():
    torch = pytest.importorskip("torch")

    def build(n):
        torch.empty(2**60, dtype=torch.uint8)
    rec = execute(make_case(build), {"n": 1})
    assert rec.outcome == DOES_NOT_FIT and rec.requested_bytes == 2**60
    assert rec.check == {"short_of": "device"}  # the memory of the device the case runs on


def test_out_of_memory_during_the_steps_is_caught_too_and_falls_back_to_the_declared_size():
    class OutOfMemoryError(RuntimeError):  # the name CuPy and PyTorch give theirs
        pass

    def step():
        raise OutOfMemoryError("no detail")
    rec = execute(make_case(lambda n: quick(step=step), declared=123), {"n": 2})
    assert rec.outcome == DOES_NOT_FIT and rec.requested_bytes == 123


def test_an_error_that_is_not_out_of_memory_is_not_hidden():
    def build(n):
        raise RuntimeError("a bug in the case")
    with pytest.raises(RuntimeError, match="a bug"):
        execute(make_case(build), {"n": 1})
    assert not is_out_of_memory(ValueError("out of memory"))


def test_a_wrong_answer_is_a_failure_not_a_figure():
    def check():
        raise CheckFailed("relative error 1 over tolerance 1e-4")
    rec = execute(make_case(lambda n: quick(check=check)), {"n": 1})
    assert rec.outcome == FAILED and rec.timing is None
    with pytest.raises(RuntimeError, match="tolerance"):
        for_asv(rec)
    # steps that did their work and trained another curve keep their time as a price; still no figure for asv
    def another_curve():
        raise CheckFailed("loss gap 0.1 over 0.01", {"deviation": 0.1, "tolerance": 0.01}, priced=True)
    rec = execute(make_case(lambda n: quick(check=another_curve)), {"n": 1})
    assert rec.outcome == FAILED and rec.timing is not None and rec.check["deviation"] == 0.1
    with pytest.raises(RuntimeError, match="loss gap"):
        for_asv(rec)


def test_missing_gpu_is_a_skip_with_its_reason(no_gpu):
    rec = execute("ceilings", {"probe": "device_copy"}, devices=no_gpu)
    assert rec.outcome == SKIPPED
    assert "GPU" in rec.reason and "run it on a box with 1" in rec.reason


def test_asv_sees_skips_and_does_not_fit_as_skipped_with_the_reason(no_gpu, capsys):
    rec = execute("ceilings", {"probe": "p2p_copy"}, devices=no_gpu)
    with pytest.raises(NotImplementedError, match="needs 2 GPU"):
        for_asv(rec)
    assert "needs 2 GPU" in capsys.readouterr().err


def test_a_finished_case_has_timing_work_and_check():
    rec = execute(make_case(lambda n: quick()), {"n": 1})
    assert rec.outcome == OK and rec.timing.steps == 3 and rec.check == {"exact": True}
    assert rec.rate("bytes") == pytest.approx(8 / rec.timing.median_s)
    assert "host.max_rss" in rec.memory


def test_unknown_case_and_parameters_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="known cases: beyond, ceilings"):
        cases.get("nope")
    with pytest.raises(ValueError, match="is not one of: host_copy"):
        execute("ceilings", {"probe": "nope"})
    with pytest.raises(ValueError, match="its parameters are probe"):
        execute("ceilings", {"probe": "host_copy", "size": 3})


@pytest.fixture
def built(monkeypatch) -> list:
    """The n of every build of the case "fake" that ``measure`` runs, in order, within run-1."""
    built = []

    def build(n):
        built.append(n)
        return quick()
    fake = make_case(build)
    monkeypatch.setattr(cases, "get", lambda name: fake)
    return built


def test_measure_files_every_record_and_measures_once_per_run(records_dir, built, monkeypatch):
    set_run(monkeypatch, records_dir, run_id="run-1", commit="abcdef0123456789")
    first = measure("fake", n=1)
    second = measure("fake", n=1)  # another figure of the same case, in the same run
    assert built == [1] and first.timing == second.timing
    measure("fake", n=2)
    set_run(monkeypatch, records_dir, run_id="run-2", commit="abcdef0123456789")
    measure("fake", n=1)
    assert built == [1, 2, 1]
    path = records_dir / "test-machine"
    files = sorted(p.name for p in path.glob("*.jsonl"))
    assert files == ["abcdef01-run-1.jsonl", "abcdef01-run-2.jsonl"]
    assert [r.params["n"] for r in load_file(path / files[0]).records] == [1, 2]


def test_past_the_deadline_a_case_is_not_started_but_one_already_measured_still_reads_back(records_dir, built,
                                                                                          monkeypatch):
    set_run(monkeypatch, records_dir, run_id="run-1", deadline=time.time() + 3600)
    measure("fake", n=1)
    set_run(monkeypatch, records_dir, run_id="run-1", deadline=time.time() - 1)
    assert measure("fake", n=1).params == {"n": 1}  # measured before the deadline: read back
    with pytest.raises(NotImplementedError, match="deadline had passed; `python3 -m harness run --resume run-1`"):
        measure("fake", n=2)  # asv shows this as skipped, with the reason
    assert built == [1]
    (path,) = (records_dir / "test-machine").glob("*.jsonl")
    assert [r.params["n"] for r in load_file(path).records] == [1]  # nothing says n=2 ran


def test_every_training_case_checks_learning_by_one_rule():
    from harness.measure.outcomes import learned
    assert learned([3.0, 2.0]) == {"loss_first": 3.0, "loss_last": 2.0, "steps": 2}
    with pytest.raises(CheckFailed, match="loss is nan at step 2"):
        learned([3.0, float("nan"), 1.0])
    with pytest.raises(CheckFailed, match="did not learn: loss 3 at the first step, 2.9 after 2 .needs below 0.95"):
        learned([3.0, 2.9], drop=0.95)
    with pytest.raises(CheckFailed, match="no training step ran"):
        learned([])


def test_a_cases_host_peak_is_the_largest_process_high_water_mark_else_its_sampled_set():
    from dataclasses import replace
    rec = execute(make_case(lambda n: quick()), {"n": 1})
    assert rec.host_bytes() == rec.memory["host.max_rss"]
    def host(memory):
        return replace(rec, memory=memory).host_bytes()
    assert host({"host.max_rss": 5, "host.rss": 9, "setup.host.max_rss": 99}) == 5  # the steps', not set-up's
    assert host({"host.max_rss.rank0": 7, "host.max_rss.rank1": 8, "setup.host.max_rss": 99}) == 8
    assert host({"host.rss": 3}) == 3 and host({"setup.host.rss": 4}) is None
