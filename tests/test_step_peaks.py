"""The record's memory levels cover the timed steps alone, and it keeps what a comparison needs:
every step's time, the host it ran on, how busy the GPU was."""
import numpy as np

from harness import cases
from harness.drive.runner import execute
from harness.measure.instruments.busy import fraction, gpu_busy, union_s
from harness.measure.records.record import SCHEMA, Record
from harness.measure.instruments.timing import no_sync
from harness.measure.workload import Workload

MiB = 2**20


def touched(mib):
    return np.ones(mib * MiB, dtype=np.uint8)


def case_with(build_mib=0, step_mib=0, check_mib=0):
    def build(n):
        kept = touched(build_mib) if build_mib else None

        def check():
            held = touched(check_mib) if check_mib else None
            return {"exact": held is not None or kept is None or True}
        return Workload(step=lambda: touched(step_mib) if step_mib else None, check=check, work={"bytes": 8},
                        sync=no_sync, warmup=1, repeat=3)
    return cases.Case(name="fake", params={"n": (1,)}, build=build)


def test_a_check_that_allocates_does_not_raise_the_step_peak():
    quiet = execute(case_with(step_mib=20), {"n": 1}).memory
    heavy = execute(case_with(step_mib=20, check_mib=500), {"n": 1}).memory
    assert heavy["host.max_rss"] - quiet["host.max_rss"] < 100 * MiB
    assert heavy["host.rss"] - quiet["host.rss"] < 100 * MiB


def test_the_builds_allocation_is_a_set_up_level_not_a_step_level():
    mem = execute(case_with(build_mib=600, step_mib=20), {"n": 1}).memory
    # The built array is still held during the steps, so the step level includes it; the
    # temporary made and freed in build is only in set-up's high-water mark.
    assert mem["setup.host.max_rss"] >= mem["host.rss"]
    assert "setup.host.rss" in mem and "host.max_rss" in mem


def test_a_record_keeps_every_step_time_its_host_and_schema():
    rec = execute(case_with(), {"n": 1})
    assert len(rec.timing.samples_s) == rec.timing.steps == 3
    assert sorted(rec.timing.samples_s)[1] == rec.timing.median_s
    assert rec.environment.host["id"] and rec.schema == SCHEMA
    back = Record.from_dict(rec.to_dict())
    assert back.timing.samples_s == rec.timing.samples_s and back.environment.host == rec.environment.host


def test_an_older_record_without_samples_or_host_still_reads_as_schema_1():
    d = execute(case_with(), {"n": 1}).to_dict()
    del d["timing"]["samples_s"], d["environment"]["host"], d["schema"], d["gpu_busy"]
    old = Record.from_dict(d)
    assert old.schema == 1 and old.timing.samples_s == () and old.environment.host == {}


def test_busy_is_the_union_of_gpu_activity_inside_the_step_windows():
    assert union_s([(0, 2), (1, 3), (5, 6)], 0, 10) == 4
    assert union_s([(0, 2), (1, 3)], 1.5, 2.5) == 1
    assert union_s([(8, 20)], 0, 10) == 2
    # two steps of 10: GPU busy 9 of the first (overlapping kernels count once), 1 of the second;
    # activity between the windows (a prepare) does not count
    assert fraction([(0, 10), (20, 30)], [(0, 5), (4, 9), (12, 19), (29, 31)]) == 0.5
    assert fraction([], [(0, 1)]) is None
    # windows stretched by a profiler: the unprofiled step time is the wall
    assert fraction([(0, 10), (20, 30)], [(0, 4), (20, 24)], step_s=5) == 0.8
    # never past all of it, however long the windows were stretched; and steps shorter than one unit
    assert fraction([(0, 10)], [(0, 10)], step_s=5) == 1.0
    assert fraction([(0, 0.5), (1, 1.5)], [(0, 0.25), (1, 1.25)]) == 0.5


def test_no_gpu_means_no_busy_figure():
    w = Workload(step=lambda: None, check=dict, work={})
    assert gpu_busy(w, 0.1) == {}
