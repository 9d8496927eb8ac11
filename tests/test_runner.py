"""How ``execute`` wires a case to what measures it (tests/test_outcomes.py has how each ending
reads): every record, whatever its outcome, names the devices it was given and the run's id and
commit; the memory levels around a failure are kept; the GPUs sampled are the case's own; the
timed steps run as the workload asks; the busy share is read over those steps, traced or not as
the run says; a case with a budget files the card it ran under."""
from dataclasses import replace
from types import SimpleNamespace

import pytest

from harness import cases
from harness.drive import runner
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK, SKIPPED, CheckFailed, Skip
from harness.measure.records.store import RecordStore, RunContext
from harness.measure.instruments.timing import Timing
from harness.measure.workload import Workload

from conftest import fake_devices
from test_outcomes import quick

DEVICES = fake_devices(count=2)


def workload(**kw) -> Workload:
    return replace(quick(), **kw)


def case(build, params=None, **kw) -> cases.Case:
    return cases.Case(name="fake", params=params or {"device": ("cpu", "cuda")}, build=build, **kw)


def run_at(tmp_path, run_id="20261127T000000-abcdef", trace_busy=True) -> RunContext:
    return RunContext(RecordStore(tmp_path), "box", run_id=run_id, commit="c0ffee" * 6 + "abcd", trace_busy=trace_busy)


def oom(*_, **__):
    raise MemoryError("Unable to allocate 1.00 KiB for an array")


def check_failed(priced):
    def check():
        raise CheckFailed("another curve", {"deviation": 0.1}, priced=priced)
    return check


def skip(**_):
    raise Skip("needs 3 GPU(s)")


@pytest.mark.parametrize("build, outcome", [
    (lambda device: workload(), OK),
    (skip, SKIPPED),
    (lambda device: workload(check=check_failed(True)), FAILED),
    (oom, DOES_NOT_FIT),
])
def test_every_record_names_the_devices_given_and_the_runs_id_and_commit(tmp_path, build, outcome):
    run = run_at(tmp_path)
    rec = runner.execute(case(build), {"device": "cpu"}, devices=DEVICES, run=run)
    assert rec.outcome == outcome and rec.environment.devices == DEVICES
    assert (rec.run_id, rec.commit, rec.case, rec.params) == (run.run_id, run.commit, "fake", {"device": "cpu"})


def test_without_devices_given_the_box_is_asked_and_without_a_run_no_id_is_filed(monkeypatch):
    monkeypatch.setattr(runner, "discover", lambda: DEVICES)
    rec = runner.execute(case(lambda device: workload()), {"device": "cpu"})
    assert rec.environment.devices == DEVICES and (rec.run_id, rec.commit) == (None, None)


def test_a_failure_and_a_does_not_fit_keep_the_memory_levels_and_a_priced_failure_its_work():
    priced = runner.execute(case(lambda device: workload(check=check_failed(True))), {"device": "cpu"}, devices=DEVICES)
    assert priced.work == {"bytes": 8} and priced.timing.steps == 3 and "host.max_rss" in priced.memory
    unpriced = runner.execute(case(lambda device: workload(check=check_failed(False))), {"device": "cpu"},
                              devices=DEVICES)
    assert unpriced.timing is None and unpriced.check == {"deviation": 0.1} and "host.max_rss" in unpriced.memory
    dnf = runner.execute(case(oom), {"device": "cpu"}, devices=DEVICES)
    assert dnf.requested_bytes == 1024 and any(k.endswith("host.max_rss") for k in dnf.memory)


class Noted:
    """Stands in for PeakMemory and Sampled (which read NVML, absent here), noting the GPUs each is made for."""
    made: list = []

    def __init__(self, gpus=()):
        type(self).made.append(gpus)
        self.bytes = {"host.max_rss": 1}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def steps_begin(self):
        pass

    def steps_end(self):
        pass

    def begin(self):
        pass

    def end(self):
        pass


@pytest.fixture
def noted(monkeypatch) -> dict:
    """What the runner made its memory and NVML readers for, and each gpu_busy call."""
    class Peak(Noted):
        made = []

    class Timed(Noted):
        made = []
    calls = []
    monkeypatch.setattr(runner, "PeakMemory", Peak)
    monkeypatch.setattr(runner, "Sampled", Timed)
    monkeypatch.setattr(runner, "gpu_busy", lambda w, step_s, timed, trace: calls.append((w, step_s, timed, trace)) or
                        {"fraction": 0.9, "source": "nvml"})
    return {"peak": Peak.made, "sampled": Timed.made, "busy": calls, "Sampled": Timed}


@pytest.mark.parametrize("device, sampled", [("cpu", ()), ("cuda", [0, 1])])
def test_the_memory_sampled_is_the_cases_gpus_and_none_on_the_cpu(monkeypatch, noted, device, sampled):
    monkeypatch.setattr(runner, "visible_indices", lambda devices: [0, 1] if devices is DEVICES else ["wrong"])
    runner.execute(case(lambda device: workload()), {"device": device}, devices=DEVICES)
    assert noted["peak"] == [sampled]


def test_the_timed_steps_run_as_the_workload_asks_and_nvml_samples_its_gpus(monkeypatch, noted):
    seen = []
    real = runner.time_steps
    monkeypatch.setattr(runner, "time_steps", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    calls = {"prepare": 0, "sync": 0}
    built = workload(gpus=(1,), warmup=2, repeat=4, prepare=lambda: calls.__setitem__("prepare", calls["prepare"] + 1),
                     sync=lambda: calls.__setitem__("sync", calls["sync"] + 1))
    rec = runner.execute(case(lambda device: built), {"device": "cuda"}, devices=DEVICES)
    assert (rec.timing.warmup, rec.timing.steps) == (2, 4) and calls["prepare"] == 6 and calls["sync"] >= 6
    assert noted["sampled"] == [(1,)]
    assert seen[0]["warmup"] == 2 and seen[0]["repeat"] == 4 and seen[0]["prepare"] is built.prepare


def test_a_timing_measured_elsewhere_is_filed_as_it_is_and_nothing_is_sampled_here(noted):
    theirs = Timing.from_samples((0.5, 0.5, 0.5), warmup=1)
    rec = runner.execute(case(lambda device: workload(gpus=(0,), timing=theirs)), {"device": "cuda"}, devices=DEVICES)
    assert rec.timing == theirs and noted["sampled"] == [()]


@pytest.mark.parametrize("with_run, trace", [(None, True), (True, True), (False, False)])
def test_the_busy_share_is_read_over_the_timed_steps_traced_as_the_run_says(tmp_path, noted, with_run, trace):
    run = None if with_run is None else run_at(tmp_path, trace_busy=with_run)
    built = workload()
    rec = runner.execute(case(lambda device: built), {"device": "cuda"}, devices=DEVICES, run=run)
    ((w, step_s, timed, traced),) = noted["busy"]
    assert w is built and step_s == rec.timing.median_s and isinstance(timed, noted["Sampled"]) and traced is trace
    assert rec.gpu_busy == {"fraction": 0.9, "source": "nvml"}


def test_a_case_that_keeps_files_is_handed_the_runs_records_file(tmp_path):
    handed = []
    keeper = case(lambda device, run_file: handed.append(run_file) or workload(), keeps_files=True)
    run = run_at(tmp_path)
    runner.execute(keeper, {"device": "cpu"}, devices=DEVICES, run=run)
    runner.execute(keeper, {"device": "cpu"}, devices=DEVICES, run=run_at(tmp_path, run_id=None))
    runner.execute(keeper, {"device": "cpu"}, devices=DEVICES)
    assert handed == [run.path, None, None]


def test_a_budget_is_filed_as_the_card_emulated_or_the_share_of_this_card(monkeypatch):
    from harness.measure.guards import budget
    asked = []
    monkeypatch.setattr(budget, "resolve", lambda name, total, allocator: asked.append((name, total, allocator)) or
                        SimpleNamespace(to_dict=lambda: {"name": name, "allocator": allocator}))
    monkeypatch.setattr(budget, "CARDS", ("16GB", "24GB"))
    emulated = budget.Budget("16GB", 1, 2, "by the case")  # what the case resolved, handed back on its Workload
    budgeted = case(lambda device, budget: workload(budget=emulated if budget == "16GB" else None),
                    params={"device": ("cpu",), "budget": ("16GB", "24GB", "card")},
                    allocator=lambda device, budget: "torch")
    assert runner.execute(budgeted, {"device": "cpu", "budget": "16GB"}, devices=DEVICES).budget == emulated.to_dict()
    # ended before it
    assert runner.execute(budgeted, {"device": "cpu", "budget": "24GB"}, devices=DEVICES).budget == {}
    assert asked == []  # a named card is never resolved outside the case
    assert runner.execute(budgeted, {"device": "cpu", "budget": "card"}, devices=DEVICES).budget == \
        {"name": "card", "allocator": "torch"}
    assert asked == [("card", DEVICES.gpus[0].memory_total, "torch")]
    unbudgeted = case(lambda device: workload(budget=emulated))  # no budget parameter: nothing filed
    assert runner.execute(unbudgeted, {"device": "cpu"}, devices=DEVICES).budget == {}


def test_a_budget_with_no_card_to_emulate_it_on_files_none(monkeypatch):
    from harness.measure.guards import budget

    def no_card(*_):
        raise Skip("no GPU")
    monkeypatch.setattr(budget, "resolve", no_card)
    budgeted = case(skip, params={"device": ("cpu",), "budget": ("card",)})
    rec = runner.execute(budgeted, {"device": "cpu", "budget": "card"}, devices=fake_devices(count=0))
    assert rec.outcome == SKIPPED and rec.budget == {}
