import pytest

from harness.measure.instruments.timing import Timing, time_steps


class FakeClock:
    """Advances only when a step runs, by the duration the step says."""
    def __init__(self, log):
        self.now = 0.0
        self.log = log

    def __call__(self):
        self.log.append("clock")
        return self.now


def test_warmup_is_not_timed_and_every_clock_read_follows_a_sync():
    log = []
    clock = FakeClock(log)
    durations = iter([100.0, 100.0, 3.0, 1.0, 2.0])  # two slow warm-up steps, then the timed ones

    def step():
        log.append("step")
        clock.now += next(durations)

    t = time_steps(step, sync=lambda: log.append("sync"), warmup=2, repeat=3, clock=clock)
    assert (t.median_s, t.min_s, t.max_s, t.steps, t.warmup) == (2.0, 1.0, 3.0, 3, 2)
    assert log[:3] == ["step", "step", "sync"]
    timed = log[3:]
    assert timed == ["clock", "step", "sync", "clock"] * 3


def test_median_and_quartiles():
    t = Timing.from_samples([5, 1, 4, 2, 3], warmup=0)
    assert (t.median_s, t.q25_s, t.q75_s, t.iqr_s) == (3, 2, 4, 2)
    one = Timing.from_samples([7.0], warmup=1)
    assert one.q25_s == one.q75_s == one.median_s == 7.0


def test_no_samples_is_an_error():
    with pytest.raises(ValueError, match="^no timed step: ask for at least one repeat$"):
        time_steps(lambda: None, repeat=0)


def test_by_default_two_warm_up_steps_then_ten_timed():
    ran = []
    t = time_steps(lambda: ran.append(1))
    assert (len(ran), t.warmup, t.steps, len(t.samples_s)) == (12, 2, 10, 10)


def test_prepare_runs_before_every_step_and_outside_the_clock():
    log = []
    clock = FakeClock(log)

    def prepare():
        log.append("prepare")
        clock.now += 50.0  # slow, and must not be counted

    def step():
        log.append("step")
        clock.now += 1.0

    t = time_steps(step, sync=lambda: log.append("sync"), prepare=prepare, warmup=1, repeat=2, clock=clock)
    assert t.median_s == t.max_s == 1.0
    assert log == ["prepare", "step", "sync"] + ["prepare", "sync", "clock", "step", "sync", "clock"] * 2


def test_torch_sync_waits_on_each_named_gpu_and_on_none_for_the_cpu(monkeypatch):
    import torch

    from harness.measure.instruments.timing import no_sync, torch_sync
    assert torch_sync(()) is no_sync
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    torch_sync((0, 1))()
    assert waited == [0, 1]


def test_the_median_not_the_mean_and_inclusive_quartiles_of_a_skewed_set():
    # One slow step (a GC pause, a page fault) must not move the published step time.
    t = Timing.from_samples([1.0, 2.0, 30.0, 3.0, 4.0], warmup=2)
    assert (t.median_s, t.q25_s, t.q75_s, t.min_s, t.max_s) == (3.0, 2.0, 4.0, 1.0, 30.0)
    assert t.samples_s == (1.0, 2.0, 30.0, 3.0, 4.0)  # in the order run, for the rank test
    two = Timing.from_samples([1.0, 9.0], warmup=0)
    assert (two.q25_s, two.median_s, two.q75_s) == (3.0, 5.0, 7.0)


def test_a_record_round_trip_keeps_every_field():
    t = Timing.from_samples([0.5, 0.25, 2.0], warmup=3)
    d = t.to_dict()
    assert d == {"median_s": 0.5, "q25_s": 0.375, "q75_s": 1.25, "min_s": 0.25, "max_s": 2.0,
                 "steps": 3, "warmup": 3, "samples_s": [0.5, 0.25, 2.0]}
    assert Timing.from_dict(d) == t
    old = {k: v for k, v in d.items() if k != "samples_s"}  # a record from before samples were kept
    assert Timing.from_dict(old).samples_s == ()
