"""The emulated card: its bytes, what a record says of it, and its enforcement in a pool."""
import json
from types import SimpleNamespace

import numpy as np
import re

import pytest

from harness.measure.guards import budget
from harness.measure.outcomes import DoesNotFit, Skip
from harness.measure.records.record import Record
from harness.units import GB

from conftest import FakePool, fake_devices
from test_record import sample_record

CARD = 80 * 2**30


def test_budget_bytes_are_gb_and_refuse_a_larger_card():
    assert budget.resolve("16GB", CARD, None).limit_bytes == 16 * GB
    assert budget.resolve("card", CARD, None).limit_bytes == CARD
    with pytest.raises(Skip, match="run it on a card with 80GB or more"):
        budget.resolve("80GB", 40 * 2**30, None)
    with pytest.raises(ValueError, match="pass one of them"):
        budget.resolve("12GB", CARD, None)


def test_a_budgets_size_is_looked_up_by_name_alone():
    """What the report sizes a card by: a named card's total (no overhead), a cap's bytes, or the
    card itself; a name it does not know is refused."""
    assert budget.size_bytes("p100-16gb", CARD) == 16280 * 2**20 and budget.size_bytes("24GB", CARD) == 24 * GB
    assert budget.size_bytes("card", 12345) == 12345 and budget.size_bytes("80GB", 1) == 80 * GB
    with pytest.raises(ValueError, match="^budget 'h300' is not one of 16GB, "):
        budget.size_bytes("h300", CARD)


def test_the_whole_card_is_one_name_and_nothing_else_is_it():
    assert budget.CARD == "card" and budget.is_whole_card("card") and budget.BUDGETS[-1] == budget.CARD
    for other in ("16GB", "p100-16gb", "Card", "", None):
        assert not budget.is_whole_card(other)


def test_a_budget_says_how_it_was_enforced_and_refuses_unknown_allocators():
    b = budget.resolve("24GB", CARD, "torch")
    assert b.to_dict() == {"name": "24GB", "limit_bytes": 24 * GB, "card_bytes": CARD,
                           "enforced": "torch.cuda.set_per_process_memory_fraction of torch's total"}
    assert budget.resolve("24GB", CARD, None).enforced == ""
    with pytest.raises(ValueError, match="allocator 'jax'"):
        budget.resolve("24GB", CARD, "jax")


def fake_torch_cuda(monkeypatch, total):
    """A torch whose device reports ``total`` bytes and whose allocator cap is a list of fractions:
    torch allows ``fraction x total`` (its own total, not NVML's)."""
    import sys
    import types
    fractions = []
    cuda = types.SimpleNamespace(
        get_device_properties=lambda device: types.SimpleNamespace(total_memory=total),
        set_per_process_memory_fraction=lambda fraction, device: fractions.append(fraction))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return fractions


# NVML counts what the driver keeps, torch does not: an H100 80GB's two totals, in bytes.
NVML_TOTAL, TORCH_TOTAL = 85_520_809_984, 85_017_755_648


@pytest.mark.parametrize("name", ["16GB", "40GB", "80GB"])
def test_torchs_cap_is_the_budgets_bytes_exactly_whatever_nvml_counts(monkeypatch, name):
    fractions = fake_torch_cuda(monkeypatch, TORCH_TOTAL)
    capped = budget.resolve(name, NVML_TOTAL, "torch")
    budget.enforce_torch(capped)
    assert abs(fractions[-1] * TORCH_TOTAL - capped.limit_bytes) < 1  # what torch then allows
    assert budget.cap_torch(capped.limit_bytes) == capped.limit_bytes


def test_torchs_cap_goes_to_the_device_asked_and_by_default_to_the_first(monkeypatch):
    import sys
    import types
    asked = []
    cuda = types.SimpleNamespace(
        get_device_properties=lambda device: (asked.append(("total", device))
                                              or types.SimpleNamespace(total_memory=CARD)),
        set_per_process_memory_fraction=lambda fraction, device: asked.append(("cap", device)))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    budget.enforce_torch(budget.resolve("16GB", CARD, "torch"), device=3)
    budget.enforce_torch(budget.resolve("16GB", CARD, "torch"))
    budget.cap_torch(GB)
    assert asked == [("total", 3), ("cap", 3)] + [("total", 0), ("cap", 0)] * 2


def test_torchs_cap_on_the_whole_card_is_all_of_it(monkeypatch):
    fractions = fake_torch_cuda(monkeypatch, TORCH_TOTAL)
    assert budget.cap_torch(budget.resolve("card", NVML_TOTAL, "torch").limit_bytes) == TORCH_TOTAL
    assert fractions == [1.0]


def test_over_budget_is_a_does_not_fit_with_the_bytes_asked():
    e = budget.resolve("16GB", CARD, "cupy").over(24 * GB, "three 8 GB arrays")
    assert isinstance(e, DoesNotFit) and e.requested_bytes == 24 * GB
    assert "over the 16GB budget" in str(e) and "24.0 GB" in str(e)


def test_over_budget_names_what_was_asked_the_budget_and_the_card_in_full():
    e = budget.resolve("16GB", 40 * GB, "cupy").over(24 * GB, "three 8 GB arrays")
    assert str(e) == "does not fit: three 8 GB arrays needs 24.0 GB, over the 16GB budget (16.0 GB of a 40.0 GB card)"


def test_managed_memory_says_the_budget_does_not_cap_it_and_whether_pages_left_the_card():
    b16 = budget.resolve("16GB", CARD, None)
    stays = b16.managed_note(48 * GB, memory_free=60 * GB)
    assert stays == {"budget_enforced": False, "evicted": False,
                     "note": "managed pages are not capped by the 16GB budget: the 48.0 GB set stays under the "
                             "card's 60.0 GB free, so nothing is evicted on this card; true oversubscription runs "
                             "only with OOMBENCH_ALLOW_OVERSUBSCRIPTION=1 on a machine you own"}
    assert b16.managed_note(60 * GB, memory_free=60 * GB)["evicted"] is False  # exactly what is free: stays
    over = b16.managed_note(61 * GB, memory_free=60 * GB)
    assert over == {"budget_enforced": False, "evicted": True,
                    "note": "managed pages are not capped by the 16GB budget: the 61.0 GB set oversubscribes "
                            "the card (opted in), so pages are evicted to the host"}


def test_a_budget_as_large_as_the_card_fits_it():
    assert budget.resolve("40GB", 40 * GB, None).limit_bytes == 40 * GB
    with pytest.raises(Skip, match=r"^budget 40GB is larger than this card \(40.0 GB\): "
                                   r"run it on a card with 40GB or more$"):
        budget.resolve("40GB", 40 * GB - 1, None)
    listed = re.escape(", ".join(budget.CARD_BUDGETS))
    with pytest.raises(ValueError, match=f"^budget '12GB' is not one of {listed}: pass one of them$"):
        budget.resolve("12GB", CARD, None)
    with pytest.raises(ValueError, match="^allocator 'jax' is not one of torch, cupy, cupy_managed, chainer$"):
        budget.resolve("24GB", CARD, "jax")


def test_enforce_pool_caps_what_the_pool_hands_out():
    pool = FakePool()
    budget.enforce_pool(budget.resolve("16GB", CARD, "cupy"), pool)
    pool.malloc(8 * GB)
    with pytest.raises(MemoryError):
        pool.malloc(9 * GB)


def test_a_record_keeps_its_budget_and_refuses_a_bad_one(tmp_path):
    d = sample_record().to_dict()
    d["budget"] = budget.resolve("16GB", CARD, "torch").to_dict()
    assert Record.from_dict(json.loads(json.dumps(d))).budget["limit_bytes"] == 16 * GB
    for bad, field in ((-1, "limit_bytes"), (1.5, "card_bytes"), (np.nan, "limit_bytes")):
        d["budget"] = dict(budget.resolve("16GB", CARD, "torch").to_dict(), **{field: bad})
        with pytest.raises(ValueError, match=f"budget.{field}"):
            Record.from_dict(d)
    d["budget"] = {"name": "16GB", "limit": 1}
    with pytest.raises(ValueError, match="unknown field budget."):
        Record.from_dict(d)


def test_every_outcome_of_a_budgeted_case_records_its_budget(monkeypatch):
    from harness.cases.base import Case
    from harness.drive import runner
    from harness.drive.runner import execute
    from harness.measure.instruments.memory import PeakMemory
    from harness.measure.workload import Workload
    monkeypatch.setattr(runner, "PeakMemory", lambda gpus: PeakMemory())  # the fake GPUs have no NVML

    def build(budget, asked):  # hands nothing back: the runner resolves it as the case did
        b = __import__("harness.measure.guards.budget", fromlist=["resolve"]).resolve(budget, card, "cupy")
        if asked > b.limit_bytes:
            raise b.over(asked, "the arrays")
        return Workload(step=lambda: None, check=lambda: {}, work={"bytes": 1}, warmup=0, repeat=2)

    devices = fake_devices(count=1)
    card = devices.gpus[0].memory_total
    case = Case(name="budgeted", params={"budget": budget.BUDGETS, "asked": (GB, 24 * GB)}, build=build,
                allocator=lambda **_: "cupy")
    for asked, outcome in ((GB, "ok"), (24 * GB, "does_not_fit")):
        rec = execute(case, {"budget": "16GB", "asked": asked}, devices=devices)
        assert rec.outcome == outcome
        assert rec.budget == {"name": "16GB", "limit_bytes": 16 * GB, "card_bytes": card,
                              "enforced": "cupy.cuda.MemoryPool.set_limit"}
    assert execute(case, {"budget": "16GB", "asked": 24 * GB}, devices=devices).requested_bytes == 24 * GB
    assert execute(case, {"budget": "16GB", "asked": GB}, devices=fake_devices(count=0)).budget == {}


def test_a_torch_case_runs_capped_and_its_check_reference_on_the_whole_card(monkeypatch):
    """The tricks case caps torch's allocator at its budget for its steps; the check's fp32
    reference is not what it measures, and trains with the cap lifted (so that a 16GB case of
    fp32 that does not fit there is still held against fp32 on the whole batch)."""
    import contextlib

    from harness.measure.guards import workingset
    from harness.measure.instruments import devices
    set_to = []
    monkeypatch.setattr(budget, "enforce_torch", lambda b, device=0: set_to.append(b.limit_bytes))
    monkeypatch.setattr(devices, "discover", lambda: fake_devices(total=CARD))
    monkeypatch.setattr(workingset, "card_total", lambda devs: CARD)
    with contextlib.ExitStack() as stack:
        cap = budget.torch_capped(stack, "cuda", "16GB")
        assert set_to == [16 * GB] and cap.budget == budget.resolve("16GB", CARD, "torch")
        cap.lift()
        assert set_to == [16 * GB, CARD]
    assert set_to == [16 * GB, CARD, CARD]  # and the whole card again when the case closes
    with contextlib.ExitStack() as stack:
        whole = budget.torch_capped(stack, "cuda", "card")
        whole.lift()  # the whole card: nothing to cap or lift
    assert set_to == [16 * GB, CARD, CARD] and whole.budget is None


def test_the_tricks_check_lifts_the_cap_before_its_reference_trains(monkeypatch):
    from harness.cases import tricks
    from harness.drive.runner import execute
    calls = []
    monkeypatch.setattr(budget, "torch_capped", lambda stack, device, name: SimpleNamespace(
        budget=None, lift=lambda: calls.append("cap lifted")))
    monkeypatch.setattr(tricks, "checked_against_reference",
                        lambda *a, **k: calls.append("reference trained") or {"reference": "fp32"})
    rec = execute("tricks", dict(device="cpu", workload="lm", technique="checkpoint", budget="card", batch=2,
                                 micro_batch=2, vocab=128, width=32, depth=2, seq_len=16))
    assert rec.outcome == "ok", rec.reason
    assert calls == ["cap lifted", "reference trained"] and rec.check["reference_budget"] == "card"


def capped_on_a_gpu(monkeypatch, card=CARD) -> list:
    """torch_capped on a fake GPU of ``card`` bytes: the limits torch's allocator is set to, in order."""
    from harness.measure.guards import workingset
    from harness.measure.instruments import devices
    set_to = []
    monkeypatch.setattr(budget, "enforce_torch", lambda b, device=0: set_to.append(b.limit_bytes))
    monkeypatch.setattr(devices, "discover", lambda: fake_devices(total=card))
    monkeypatch.setattr(workingset, "card_total", lambda devs: devs.gpus[0].memory_total)
    return set_to


@pytest.mark.parametrize("name", ["16GB", "p100-16gb"])
def test_an_emulated_card_on_the_cpu_is_refused_before_anything_is_resolved(monkeypatch, name):
    import contextlib
    set_to = capped_on_a_gpu(monkeypatch)
    monkeypatch.setattr(budget, "measure_overhead", lambda allocator: pytest.fail("nothing is measured on the CPU"))
    with contextlib.ExitStack() as stack, pytest.raises(Skip) as e:
        budget.torch_capped(stack, "cpu", name)
    assert str(e.value) == (f"budget {name} emulates a smaller card in torch's CUDA allocator, and nothing caps "
                            "memory on the CPU: run it with device=cuda on a GPU box, or with budget=card here")
    assert budget.handed(e.value) is None and set_to == []
    with contextlib.ExitStack() as stack:
        assert budget.torch_capped(stack, "cpu", "card").budget is None  # the CPU as it is
    assert set_to == []


def test_a_build_that_raises_under_torchs_cap_hands_its_budget_back_and_gives_the_card_back(monkeypatch):
    import contextlib
    set_to = capped_on_a_gpu(monkeypatch)
    monkeypatch.setattr(budget, "measure_overhead", lambda allocator: budget.Overhead(CONTEXT, f"read {allocator}"))
    with pytest.raises(MemoryError) as e, contextlib.ExitStack() as stack:
        cap = budget.torch_capped(stack, "cuda", "p100-16gb")
        raise MemoryError("CUDA out of memory building the model")
    assert budget.handed(e.value) == cap.budget and cap.budget.overhead_read == "read torch"
    assert set_to == [P100 - CONTEXT, CARD]  # capped, then the whole card once the build gave up
    with pytest.raises(Skip) as e, contextlib.ExitStack() as stack:
        budget.torch_capped(stack, "cuda", "h200")  # larger than this card: nothing capped, nothing handed back
    assert budget.handed(e.value) is None and set_to == [P100 - CONTEXT, CARD]


def test_a_budget_goes_back_on_the_workload_or_on_what_the_build_raised():
    from harness.measure.workload import Workload
    b16 = budget.resolve("16GB", CARD, "cupy")
    made = Workload(step=lambda: None, check=lambda: {}, work={"bytes": 1})
    assert made.budget is None and budget.handed(made) is None  # handed nothing back
    with budget.handed_back(b16) as hand:
        handed = hand(made)
    assert handed.budget == b16 and budget.handed(handed) is b16 and handed.work == made.work and made.budget is None
    for raised in (Skip("no cupy here"), b16.over(24 * GB, "the arrays"), MemoryError("out of memory")):
        with pytest.raises(type(raised)) as e, budget.handed_back(b16):
            raise raised
        assert e.value is raised and budget.handed(e.value) is b16  # the same exception, with the budget on it
    with budget.handed_back(None) as hand:
        assert hand(made) is made  # resolved none: nothing to hand back
    with pytest.raises(Skip) as e, budget.handed_back(None):
        raise Skip("ended before resolving")
    assert not hasattr(e.value, "budget") and budget.handed(e.value) is None
    assert budget.handed(SimpleNamespace(budget={"name": "16GB"})) is None  # only a Budget is one
    assert budget.handed(None) is None


def test_the_runner_files_the_budget_handed_back_in_every_outcome_and_resolves_none_again(monkeypatch):
    """What the case resolved is what its record files, on a Workload or on what its build raised;
    the runner resolves a budget only for a case that ended before resolving one (a named card's
    then is empty: its overhead is measured only in the case)."""
    from harness.cases.base import Case
    from harness.drive import runner
    from harness.drive.runner import execute
    from harness.measure.instruments.memory import PeakMemory
    from harness.measure.outcomes import CheckFailed
    from harness.measure.workload import Workload
    monkeypatch.setattr(runner, "PeakMemory", lambda gpus: PeakMemory())
    devices = fake_devices(count=1)
    card = devices.gpus[0].memory_total
    # The case's own, unlike anything the runner would resolve: another allocator, a made-up overhead.
    mine = budget.resolve("p100-16gb", card, "cupy", overhead=budget.Overhead(CONTEXT, "the case's"))
    resolved = []
    real = budget.resolve
    monkeypatch.setattr(budget, "resolve", lambda *a, **k: resolved.append(a) or real(*a, **k))

    def failed():
        raise CheckFailed("another curve", {})

    def build(budget, end):
        if end == "skipped_before":
            raise Skip("ended before resolving")
        with __import__("harness.measure.guards.budget", fromlist=["handed_back"]).handed_back(mine) as hand:
            if end == "skipped":
                raise Skip("ended after resolving")
            if end == "does_not_fit":
                raise mine.over(24 * GB, "the arrays")
            return hand(Workload(step=oom if end == "oom_in_steps" else lambda: None,
                                 check=failed if end == "failed" else lambda: {}, work={"bytes": 1}, warmup=0,
                                 repeat=2))

    def oom():
        raise MemoryError("out of memory in a step")

    ends = {"ok": "ok", "failed": "failed", "skipped": "skipped", "does_not_fit": "does_not_fit",
            "oom_in_steps": "does_not_fit", "skipped_before": "skipped"}
    case = Case(name="carded", params={"budget": budget.CARD_BUDGETS, "end": tuple(ends)}, build=build,
                allocator=lambda **_: "torch")
    for end in list(ends)[:-1]:
        rec = execute(case, {"budget": "p100-16gb", "end": end}, devices=devices)
        assert rec.outcome == ends[end] and rec.budget == mine.to_dict(), end
    assert resolved == []  # never resolved again
    assert execute(case, {"budget": "p100-16gb", "end": "skipped_before"}, devices=devices).budget == {}
    rec = execute(case, {"budget": "16GB", "end": "skipped_before"}, devices=devices)
    assert rec.budget == {"name": "16GB", "limit_bytes": 16 * GB, "card_bytes": card,
                          "enforced": budget.ENFORCED["torch"]} and resolved == [("16GB", card, "torch")]


# -- named cards: the card's total, less what this process holds outside the allocator ----------

P100 = budget.CARDS["p100-16gb"].total_bytes
CONTEXT = 600 * 2**20


def test_a_named_card_caps_the_allocator_at_its_total_less_the_overhead_and_says_so():
    b = budget.resolve("p100-16gb", CARD, "torch", overhead=budget.Overhead(CONTEXT, "nvml process"))
    assert P100 == 16280 * 2**20 and b.limit_bytes == P100 - CONTEXT
    assert b.to_dict() == {"name": "p100-16gb", "limit_bytes": P100 - CONTEXT, "card_bytes": CARD,
                           "enforced": budget.ENFORCED["torch"], "emulated_bytes": P100,
                           "overhead_bytes": CONTEXT, "overhead_read": "nvml process"}
    d = sample_record().to_dict()
    d["budget"] = b.to_dict()
    assert Record.from_dict(json.loads(json.dumps(d))).budget == b.to_dict()
    d["budget"] = dict(b.to_dict(), overhead_bytes=-1)
    with pytest.raises(ValueError, match="budget.overhead_bytes"):
        Record.from_dict(d)
    with pytest.raises(Skip, match="larger than this one"):
        budget.resolve("h200", CARD, "torch", overhead=budget.Overhead(0, "nvml process"))


def test_a_named_card_as_large_as_this_one_fits_and_a_larger_one_is_refused_by_both_sizes():
    h100 = budget.CARDS["h100-80gb"].total_bytes
    b = budget.resolve("h100-80gb", h100, None, overhead=budget.Overhead(CONTEXT, "nvml process"))
    assert (b.limit_bytes, b.card_bytes, b.enforced) == (h100 - CONTEXT, h100, "")  # nothing caps it: said so
    with pytest.raises(Skip) as e:
        budget.resolve("h200", h100, "torch", overhead=budget.Overhead(0, "nvml process"))
    assert str(e.value) == ("card h200 (150.8 GB) is larger than this one (85.5 GB): "
                            "run it on a card with 150.8 GB or more")


def test_an_overhead_past_the_named_cards_total_leaves_the_allocator_nothing():
    b = budget.resolve("p100-16gb", CARD, "torch", overhead=budget.Overhead(P100 + 1, "device used less before"))
    assert b.limit_bytes == 0 and b.overhead_bytes == P100 + 1


def test_a_named_card_without_an_overhead_measures_it_under_its_own_allocator(monkeypatch):
    asked = []
    monkeypatch.setattr(budget, "measure_overhead", lambda allocator: asked.append(allocator) or budget.Overhead(
        CONTEXT, "nvml process"))
    assert budget.resolve("p100-16gb", CARD, "cupy").limit_bytes == P100 - CONTEXT and asked == ["cupy"]


def test_a_named_card_is_never_its_total_its_limit_is_known_once_the_overhead_is_measured(monkeypatch):
    """A named card's limit is its total less the overhead: never its size alone, as a cap's is."""
    asked = []
    monkeypatch.setattr(budget, "measure_overhead", lambda allocator: asked.append(allocator) or budget.Overhead(
        CONTEXT, "device used less before"))
    for allocator in ("torch", None):
        b = budget.resolve("v100-16gb", CARD, allocator)
        assert b.limit_bytes == budget.size_bytes("v100-16gb", CARD) - CONTEXT == 16160 * 2**20 - CONTEXT
        assert (b.emulated_bytes, b.overhead_read) == (16160 * 2**20, "device used less before")
    assert asked == ["torch", None]  # measured each time asked for: once a process, where it is cached
    cap = budget.resolve("16GB", CARD, "torch")
    assert (cap.emulated_bytes, cap.overhead_bytes, cap.overhead_read) == (None, None, None)
    assert asked == ["torch", None]  # a cap measures nothing


def fake_nvml(monkeypatch, used: list, processes):
    """pynvml whose device reports ``used`` (one figure a read, the last repeated) and lists ``processes``."""
    import sys
    import types
    reads = iter(used)

    class NVMLError(Exception):
        pass

    def running(handle):
        if handle != ("handle", 0):  # the GPU's handle, as NVML gave it
            return []
        if processes is None:
            raise NVMLError("not supported")
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=n) for pid, n in processes]

    last = [used[-1]]
    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i), nvmlDeviceGetComputeRunningProcesses=running,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(
            used=next(reads, last[0]) if h == ("handle", 0) else -1)))
    from harness.measure.instruments import devices
    monkeypatch.setattr(devices, "cuda_gpu", lambda ordinal, devs=None: fake_devices().gpus[0])
    budget.measure_overhead.cache_clear()


@pytest.mark.parametrize("processes,read", [([(1, 10), ("self", 900 * 2**20)], "nvml process"),
                                            (None, "device used less before"), ([(1, 10)], "device used less before")])
def test_the_overhead_is_what_this_process_holds_outside_its_pool_after_warming_up(monkeypatch, processes, read):
    import os
    pooled = 300 * 2**20
    monkeypatch.setitem(budget.WARM, "torch", lambda: pooled)
    listed = processes and [(os.getpid() if pid == "self" else pid, n) for pid, n in processes]
    fake_nvml(monkeypatch, [2**30, 2**30 + 900 * 2**20], listed)  # before, then after the warm-up
    overhead = budget.measure_overhead("torch")
    assert overhead == budget.Overhead(600 * 2**20, read)
    budget.measure_overhead.cache_clear()


def test_a_case_emulating_a_named_card_records_the_overhead_it_measured(monkeypatch):
    from harness.cases.base import Case
    from harness.drive import runner
    from harness.drive.runner import execute
    from harness.measure.instruments.memory import PeakMemory
    from harness.measure.workload import Workload
    monkeypatch.setattr(runner, "PeakMemory", lambda gpus: PeakMemory())
    devices = fake_devices(count=1)
    card = devices.gpus[0].memory_total

    def build(budget):
        made = __import__("harness.measure.guards.budget", fromlist=["resolve"]).resolve(
            budget, card, "cupy", overhead=__import__("harness.measure.guards.budget", fromlist=["Overhead"]).Overhead(
                CONTEXT, "nvml process"))
        with __import__("harness.measure.guards.budget", fromlist=["handed_back"]).handed_back(made) as hand:
            return hand(Workload(step=lambda: None, check=lambda: {"limit": made.limit_bytes}, work={"bytes": 1},
                                 warmup=0, repeat=2))

    case = Case(name="carded", params={"budget": budget.CARD_BUDGETS}, build=build, allocator=lambda **_: "cupy")
    rec = execute(case, {"budget": "v100-16gb"}, devices=devices)
    v100 = budget.CARDS["v100-16gb"].total_bytes
    assert rec.budget["emulated_bytes"] == v100 and rec.budget["overhead_bytes"] == CONTEXT
    assert rec.budget["limit_bytes"] == rec.check["limit"] == v100 - CONTEXT


def test_each_named_card_knows_what_its_compute_capability_runs():
    from harness.measure.guards.budget import CARDS
    features = {name: card.features for name, card in CARDS.items()}
    assert features["p100-16gb"] == () and features["v100-16gb"] == ("fp16 tensor cores",)
    assert features["a100-80gb"] == ("fp16 tensor cores", "TF32", "bf16")  # no FP8 before Ada
    assert "FP8" in features["l4-24gb"] and "FP8" in features["rtx4090-24gb"] and "FP8" in features["h100-80gb"]
    assert CARDS["v100-16gb"].lacks((8, 0)) and not CARDS["v100-16gb"].lacks((7, 0))
    assert not CARDS["p100-16gb"].lacks(None)
