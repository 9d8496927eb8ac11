"""Every field a record line may hold, checked one at a time (harness.measure.records.record): each value
just past what a record can hold is refused with words that name the field and what it wants, and
each value at the edge of what it can hold is read."""
import copy
import json
import math
import re

import pytest

from conftest import fake_devices
from harness.measure.guards.budget import Budget
from harness.measure.instruments.environment import Environment
from harness.measure.records.record import NAME_MAX, Record
from harness.measure.instruments.timing import Timing


def good() -> dict:
    env = Environment(python="3.12.3", platform="Linux x86_64", cpu="Xeon", num_cpu=16,
                      libraries={"torch": "2.11.0"}, devices=fake_devices(count=2), framework_cuda={"torch": "13.0"},
                      executable="/usr/bin/python3", host={"id": "f3fc9504c53f"})
    timing = Timing(median_s=0.2, q25_s=0.15, q75_s=0.25, min_s=0.1, max_s=0.3, steps=3, warmup=1,
                    samples_s=(0.1, 0.2, 0.3))
    budget = Budget(name="h100-80gb", limit_bytes=80 * 10**9, card_bytes=85 * 10**9, enforced="torch",
                    emulated_bytes=80 * 10**9, overhead_bytes=7 * 10**8, overhead_read="nvml")
    rec = Record(case="tricks", params={"batch": 16, "technique": "fp32", "fraction": 0.1, "on": True, "none": None},
                 outcome="ok", environment=env, timing=timing, work={"tokens": 16384}, memory={"device.used.gpu0": 5},
                 check={"exact": True}, gpu_busy={"fraction": 0.98, "source": "cupti"}, budget=budget.to_dict(),
                 requested_bytes=1024, run_id="20261127T043736-942ce1", commit="b03788d3", created=1.0)
    return json.loads(json.dumps(rec.to_dict()))  # as a line of a records file holds it


def changed(path: str, value=None, delete: bool = False) -> dict:
    d = good()
    *parents, last = path.split(".")
    at = d
    for key in parents:
        at = at[int(key)] if isinstance(at, list) else at[key]
    last = int(last) if isinstance(at, list) else last
    if delete:
        del at[last]
    else:
        at[last] = value
    return d


def refused(d) -> str:
    with pytest.raises(ValueError) as e:
        Record.from_dict(d)
    return str(e.value)


LONG = "x" * (NAME_MAX + 1)
REFUSED = [
    ("case", 5, "case must be a str, got 5"),
    ("params", [], "params must be a dict, got []"),
    ("outcome", "great", "outcome 'great' is not one of ok, skipped, does_not_fit, failed"),
    ("environment", None, "environment must be a dict, got None"),
    ("reason", 3, "reason must be a str or null, got 3"),
    ("run_id", [], "run_id must be a str or null, got []"),
    ("commit", 1.5, "commit must be a str or null, got 1.5"),
    ("work", [], "work must be a dict, got []"),
    ("memory", None, "memory must be a dict, got None"),
    ("check", "x", "check must be a dict, got 'x'"),
    ("gpu_busy", 1, "gpu_busy must be a dict, got 1"),
    ("budget", [], "budget must be a dict, got []"),
    ("params.batch", [16], "params.'batch' must be a string of at most 1000 characters, a number or a boolean, "
                           "got [16]"),
    ("params.fraction", math.nan, "params.'fraction' must be a string of at most 1000 characters, a number or a "
                                  "boolean, got nan"),
    ("work.tokens", -1, "work.'tokens' must be a finite number >= 0, got -1"),
    ("work.tokens", math.inf, "work.'tokens' must be a finite number >= 0, got inf"),
    ("work.tokens", True, "work.'tokens' must be a finite number >= 0, got True"),
    ("gpu_busy.fraction", 1.01, "gpu_busy.fraction must be a number from 0 to 1, got 1.01"),
    ("gpu_busy.fraction", -0.01, "gpu_busy.fraction must be a number from 0 to 1, got -0.01"),
    ("gpu_busy.source", 1, "gpu_busy.source must be a str or null, got 1"),
    ("requested_bytes", -1, "requested_bytes must be a whole number of bytes from 0 to 2**63, got -1"),
    ("requested_bytes", 2**63, "requested_bytes must be a whole number of bytes from 0 to 2**63, "
                               "got 9223372036854775808"),
    ("created", -1.0, "created must be a finite number >= 0, got -1.0"),
    ("schema", 0, "schema must be a whole number from 1, got 0"),
    ("schema", 2**31, "schema must be a whole number from 1, got 2147483648"),
    ("schema", True, "schema must be a whole number from 1, got True"),
    ("budget.name", 1, "budget.name must be a str, got 1"),
    ("budget.enforced", None, "budget.enforced must be a str, got None"),
    ("budget.limit_bytes", -1, "budget.limit_bytes must be a whole number of bytes from 0 to 2**63, got -1"),
    ("budget.card_bytes", 1.0, "budget.card_bytes must be a whole number of bytes from 0 to 2**63, got 1.0"),
    ("budget.emulated_bytes", None, "budget.emulated_bytes must be a whole number of bytes from 0 to 2**63, got None"),
    ("budget.overhead_bytes", -5, "budget.overhead_bytes must be a whole number of bytes from 0 to 2**63, got -5"),
    ("budget.overhead_read", 3, "budget.overhead_read must be a str, got 3"),
    ("budget.cap", 1, "unknown field budget.'cap'; the fields are card_bytes, emulated_bytes, enforced, limit_bytes, "
                      "name, overhead_bytes, overhead_read"),
    ("timing", [], "timing must be a dict, got []"),
    ("timing.median_s", 0, "timing.median_s must be a finite number of seconds > 0, got 0"),
    ("timing.q25_s", math.inf, "timing.q25_s must be a finite number of seconds > 0, got inf"),
    ("timing.q75_s", "1", "timing.q75_s must be a finite number of seconds > 0, got '1'"),
    ("timing.min_s", -1.0, "timing.min_s must be a finite number of seconds > 0, got -1.0"),
    ("timing.max_s", 0.24, "timing must hold min_s <= q25_s <= median_s <= q75_s <= max_s"),
    ("timing.q25_s", 0.21, "timing must hold min_s <= q25_s <= median_s <= q75_s <= max_s"),
    ("timing.min_s", 0.16, "timing must hold min_s <= q25_s <= median_s <= q75_s <= max_s"),
    ("timing.q75_s", 0.19, "timing must hold min_s <= q25_s <= median_s <= q75_s <= max_s"),
    ("timing.steps", 0, "timing.steps must be a whole number >= 1, got 0"),
    ("timing.steps", 2**31, "timing.steps must be a whole number >= 1, got 2147483648"),
    ("timing.warmup", -1, "timing.warmup must be a whole number >= 0, got -1"),
    ("timing.warmup", 1.0, "timing.warmup must be a whole number >= 0, got 1.0"),
    ("timing.samples_s", {}, "timing.samples_s must be a list, got {}"),
    ("timing.samples_s", [0.1, 0.2], "timing.samples_s holds 2 steps, timing.steps says 3"),
    ("timing.samples_s", [0.1, 0.0, 0.3], "timing.samples_s must hold finite numbers of seconds > 0"),
    ("timing.samples_s", [0.1, math.nan, 0.3], "timing.samples_s must hold finite numbers of seconds > 0"),
    ("timing.samples_s", [0.1, "0.2", 0.3], "timing.samples_s must hold finite numbers of seconds > 0"),
    ("timing.rounds", 1, "unknown field timing.'rounds'; the fields are max_s, median_s, min_s, q25_s, q75_s, "
                         "samples_s, steps, warmup"),
    ("environment.python", 3, "environment.python must be a str, got 3"),
    ("environment.num_cpu", "16", "environment.num_cpu must be a int, got '16'"),
    ("environment.num_cpu", -1, "environment.num_cpu must be a whole number >= 0, got -1"),
    ("environment.num_cpu", True, "environment.num_cpu must be a whole number >= 0, got True"),
    ("environment.num_cpu", 2**31, "environment.num_cpu must be a whole number >= 0, got 2147483648"),
    ("environment.libraries", [], "environment.libraries must be a dict, got []"),
    ("environment.devices", None, "environment.devices must be a dict, got None"),
    ("environment.framework_cuda", [], "environment.framework_cuda must be a dict, got []"),
    ("environment.shims", "chainer", "environment.shims must be a list, got 'chainer'"),
    ("environment.executable", None, "environment.executable must be a str, got None"),
    ("environment.host", [], "environment.host must be a dict, got []"),
    ("environment.host.id", 7, "environment.host.id must be a str or null, got 7"),
    ("environment.libraries.torch", "", "environment.libraries.'torch' holds '': a name of 1 to 1000 characters "
                                        "is wanted"),
    ("environment.devices.driver", 580, "environment.devices.driver must be a str or null, got 580"),
    ("environment.devices.cuda_driver", 13.0, "environment.devices.cuda_driver must be a str or null, got 13.0"),
    ("environment.devices.reason", [], "environment.devices.reason must be a str or null, got []"),
    ("environment.devices.gpus", {}, "environment.devices.gpus must be a list, got {}"),
    ("environment.devices.peer", "yes", "environment.devices.peer must be a list, got 'yes'"),
    ("environment.devices.peer", [True], "environment.devices.peer must be a list of lists"),
    ("environment.devices.gpus.0", "H100", "environment.devices.gpus[] must be a dict, got 'H100'"),
    ("environment.devices.gpus.1.serial", "x", "environment.devices.gpus[] must have the fields index, name, "
                                               "memory_total, memory_free, compute_capability, uuid"),
    ("environment.devices.gpus.0.index", True, "environment.devices.gpus[].index must be a int >= 0, got True"),
    ("environment.devices.gpus.0.memory_free", -1, "environment.devices.gpus[].memory_free must be a int >= 0, got -1"),
    ("environment.devices.gpus.0.memory_total", 2**63, "environment.devices.gpus[].memory_total must be a int >= 0, "
                                                       "got 9223372036854775808"),
    ("environment.devices.gpus.1.uuid", 5, "environment.devices.gpus[].uuid must be a str, got 5"),
    ("environment.colour", "x", "unknown field environment.'colour'; the fields are cpu, devices, executable, "
                                "framework_cuda, host, libraries, num_cpu, platform, python, shims"),
]


@pytest.mark.parametrize("path, value, says", REFUSED, ids=lambda v: str(v)[:40])
def test_a_value_a_record_cannot_hold_is_refused_by_its_field(path, value, says):
    assert refused(changed(path, value)) == says


def test_a_refused_long_value_is_quoted_short():
    said = refused(changed("params.technique", LONG))
    assert said.startswith("params.'technique' must be a string of at most 1000 characters, a number or a boolean, "
                           "got 'xxxx") and len(said) < 200


def test_a_memory_figure_and_a_library_name_are_named_by_their_label():
    d = good()
    d["memory"]["device.used.gpu0"] = 1.5
    assert refused(d) == "memory.'device.used.gpu0' must be a whole number of bytes from 0 to 2**63, got 1.5"
    d = good()
    d["environment"]["libraries"][""] = "1.0"
    assert refused(d) == "environment.libraries holds '': a name of 1 to 1000 characters is wanted"
    d = good()
    d["params"][LONG] = 1
    assert refused(d).startswith("params holds 'xxx")
    assert refused(d).endswith("a name of 1 to 1000 characters is wanted")


@pytest.mark.parametrize("path", ["case", "params", "outcome", "environment", "environment.python",
                                  "environment.devices", "budget.name", "budget.limit_bytes", "timing.steps"])
def test_a_field_a_record_needs_cannot_be_left_out(path):
    assert "got None" in refused(changed(path, delete=True))


def test_an_ok_record_needs_its_timing_and_any_other_outcome_may_lack_it():
    for empty in (None, {}):
        assert refused(changed("timing", empty)) == "an ok record needs its timing (median_s, quartiles, steps)"
        d = changed("timing", empty)
        d["outcome"] = "skipped"
        assert Record.from_dict(d).timing is None


def test_values_at_the_edge_of_what_a_record_holds_are_read():
    d = good()
    d["params"].update(name="x" * NAME_MAX, big=2**70, zero=0.0)
    d["work"]["tokens"] = 0
    d["memory"]["device.used.gpu0"] = 2**63 - 1
    d["gpu_busy"]["fraction"] = 0
    d["requested_bytes"] = 0
    d["created"] = 0
    d["schema"] = 2**31 - 1
    d["timing"].update(steps=2**31 - 1, warmup=0, samples_s=[], min_s=0.2, q25_s=0.2, median_s=0.2, q75_s=0.2,
                       max_s=0.2)
    d["environment"]["num_cpu"] = 0
    d["environment"]["devices"]["gpus"][0]["memory_free"] = 0
    rec = Record.from_dict(d)
    assert rec.params["big"] == 2**70 and rec.timing.steps == 2**31 - 1 and rec.environment.num_cpu == 0
    d["gpu_busy"]["fraction"] = 1
    d["schema"] = 1
    d["requested_bytes"] = None
    d["timing"].update(steps=2, samples_s=[1, 2.5], min_s=1, q25_s=1.375, median_s=1.75, q75_s=2.125,
                       max_s=2.5)  # whole seconds read as numbers too; the summary is the samples' own
    assert Record.from_dict(d).gpu_busy["fraction"] == 1


def test_a_record_without_a_budget_busy_share_or_optional_fields_is_read():
    d = good()
    for name in ("budget", "gpu_busy", "work", "memory", "check", "requested_bytes", "created", "schema"):
        d.pop(name)
    for name in ("framework_cuda", "shims", "executable", "host"):
        d["environment"].pop(name)
    d["environment"]["devices"] = {}
    rec = Record.from_dict(d)
    assert rec.budget == {} and rec.schema == 1 and rec.environment.host == {}


def test_a_line_that_is_no_object_or_holds_an_unknown_field_is_refused_first():
    assert refused([good()]) == "a record is a JSON object, got list"
    d = good()
    d["case"] = 5
    d["zzz"] = 1
    assert refused(d).startswith("unknown field 'zzz'; the fields are budget, case, check, commit, created,")


def test_each_record_of_a_file_that_shares_the_environment_is_checked_once_and_shares_it():
    seen = []
    first, second = Record.from_dict(good(), seen), Record.from_dict(good(), seen)
    assert first.environment is second.environment and seen[0] == good()["environment"]
    other = good()
    other["environment"]["cpu"] = "EPYC"
    assert Record.from_dict(other, seen).environment.cpu == "EPYC" and seen[0]["cpu"] == "EPYC"
    bad = copy.deepcopy(other)
    bad["environment"]["num_cpu"] = -1
    assert re.search("num_cpu", refused(bad))


# ---- what a record answers ----------------------------------------------------------------------

def record(**fields) -> Record:
    d = good()
    d.update(fields)
    return Record.from_dict(d)


def test_what_a_does_not_fit_case_ran_short_of():
    from harness.measure.outcomes import DEVICE, HOST
    assert record(outcome="does_not_fit", check={"short_of": "host"}, reason="x").short_of() == "host"
    assert record(outcome="does_not_fit", check={}, reason="a 2 GB request of pinned host memory failed").short_of() \
        == HOST
    assert record(outcome="does_not_fit", check={}, reason="CUDA out of memory").short_of() == DEVICE
    assert record(outcome="does_not_fit", check={}, reason=None).short_of() == DEVICE
    assert record(outcome="ok", check={"short_of": "host"}).short_of() is None


def test_a_case_s_device_memory_is_its_largest_gain_on_one_gpu_and_none_on_the_cpu():
    memory = {"device.used.gpu0": 7000, "device.used_before.gpu0": 1000, "device.used.gpu1": 5500, "host.rss": 9}
    assert record(memory=memory).device_bytes() == 6000
    assert record(memory={"device.used.gpu0": 7000}).device_bytes() == 7000  # nothing read before: all of it
    assert record(memory={"host.rss": 9}).device_bytes() is None
    assert record(memory=memory, params={"device": "cpu"}).device_bytes() is None
    assert record(memory=memory, params={"device": "cuda"}).device_bytes() == 6000


def test_a_rate_is_work_over_the_median_step_and_none_without_either():
    assert record().rate("tokens") == pytest.approx(16384 / 0.2)
    assert record().rate("bytes") is None
    assert record(outcome="skipped", timing=None).rate("tokens") is None


def test_a_record_without_timing_is_written_with_none():
    assert record(outcome="skipped", timing=None).to_dict()["timing"] is None
    assert list(record().to_dict()["timing"]["samples_s"]) == [0.1, 0.2, 0.3]
