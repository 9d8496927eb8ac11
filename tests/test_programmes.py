"""Recorded programmes (``harness.measure.records.programmes``), the replay estimator that grows them
(``harness.workloads.search.replayed``) and the command that records and scores them
(``harness.drive.commands.programmes``), on hand-made programmes whose answers are worked out by
hand. Nothing here starts a probe."""
import json
import shutil
from argparse import Namespace

import pytest

from conftest import FROZEN
from harness.drive.commands import programmes as command
from harness.measure.records import programmes
from harness.workloads.search import replayed, simulator
from harness.workloads.search.simulator import ALLOC, FREE, RELEASED, Request

GiB = 2**30
KEY = {"device": "cuda", "workload": "lm", "technique": "bf16_autocast", "vocab": 32000, "width": 1024,
       "depth": 12, "seq_len": 1024, "over": "batch"}


def step(n, over="batch"):
    """A step whose one large block holds a GiB a sample (or a GiB per 1,024 tokens squared) beside
    a 64 MiB weight: the allocator reserves exactly both."""
    grows = GiB * n if over == "batch" else GiB * n * n // 1024**2
    return simulator.dump([Request(ALLOC, 0, 64 * 2**20), Request(ALLOC, 1, grows), Request(RELEASED, 1),
                           Request(FREE, 1)])


def probe(n, key=KEY, **result):
    """A recorded probe whose own peaks are the step's: the 64 MiB weight and the grown block, each a
    segment of its own size."""
    held = 64 * 2**20 + simulator.load(step(n, key["over"]))[1].size
    return {"key": key, "n": n, "cap": 40 * 10**9, "programme": step(n, key["over"]),
            "result": {"fits": True, "peak_reserved": held, "peak_allocated": held, **result}}


def environment():
    from harness.report.model import load_rows
    from harness.report.tables import machine_label
    row = next(r for r in load_rows(FROZEN) if r.record.case == "fits" and machine_label(r) == "H100 80GB HBM3")
    return row.record.environment.to_dict()


def test_a_recording_is_filed_whole_under_its_machine_and_read_back(tmp_path):
    path = programmes.write(tmp_path, "nvidia-h100-80gb-hbm3-x1", "0123456789abcdef", environment(), [probe(4)])
    assert path.parent == tmp_path / "programmes" / "nvidia-h100-80gb-hbm3-x1"
    assert path.name.startswith("01234567-") and path.name.endswith(".json.gz")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing written beside it is left
    (got,) = programmes.read(tmp_path)
    assert got["commit"] == "0123456789abcdef" and got["probes"] == [probe(4)]


def test_the_replay_grows_a_gpus_programmes_and_answers_the_largest_size_and_its_peak():
    found = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), probe(8)]}])
    rec = found[("H100 80GB HBM3", json.dumps(KEY, sort_keys=True))]
    assert sorted(rec.programmes) == [4, 8]
    # 64 MiB and n GiB under 20 GiB: 19 samples, not 20
    assert replayed.largest(rec, 20 * GiB, 1, 2**20) == 19
    assert replayed.peak(rec, 19, 20 * GiB) == 64 * 2**20 + 19 * GiB
    assert replayed.largest(rec, 20 * GiB, 1, 10) == 10  # up to the top it is given (a host's bound)


def test_under_a_failed_answer_the_replay_names_the_next_size_it_runs_above_what_fit_and_near_it():
    found = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), probe(8)]}])
    rec = found[("H100 80GB HBM3", json.dumps(KEY, sort_keys=True))]
    # the replay runs up to 19 under 20 GiB: under a failed 25, 19; under 19 itself, 18
    assert replayed.runs_below(rec, 20 * GiB, 1, 4, 25) == 19
    assert replayed.runs_below(rec, 20 * GiB, 1, 4, 19) == 18
    assert replayed.runs_below(rec, 20 * GiB, 1, 18, 19) is None  # nothing between what fit and the failure
    # it looks no further than BELOW_STEPS under the failure: a replay wrong by more names nothing
    far = 19 + replayed.BELOW_STEPS
    assert replayed.runs_below(rec, 20 * GiB, 1, 4, far) == 19
    assert replayed.runs_below(rec, 20 * GiB, 1, 4, far + 1) is None
    # in the search's units: multiples of 128 tokens only
    assert replayed.runs_below(rec, 20 * GiB, 128, 0, 24 * 128) is None  # 2,944 and down: none runs
    assert replayed.runs_below(rec, 200 * GiB, 128, 0, 2 * 128) == 128


def test_where_the_way_keeps_what_it_saves_on_the_host_the_replay_answers_under_the_hosts_share_too():
    # two tensors kept a forward: 1 GiB and 0.75 GiB a sample, each pinned in a power-of-two block
    kept = {n: [GiB * n, 3 * GiB * n // 4] for n in (4, 8)}
    found = replayed.recorded([{"environment": environment(), "commit": "c",
                                "probes": [probe(n, host_packs=kept[n], host_limit=30 * GiB) for n in (4, 8)]}])
    rec = found[("H100 80GB HBM3", json.dumps(KEY, sort_keys=True))]
    # at 9 samples: blocks of 16 and 8 GiB (9 and 6.75 rounded up); at 16: 16 and 16; at 17: 32 and 16
    assert [rec.host(n) for n in (8, 9, 16, 17)] == [16 * GiB, 24 * GiB, 32 * GiB, 48 * GiB]
    # 64 MiB and n GiB under 100 GiB: the card holds 99; a share of 30 GiB 10 (16 + 8; 11 keeps 16 + 16),
    # one of 48 GiB 21 (32 + 16; 22 keeps 32 + 32), however the device packs them
    assert replayed.largest(rec, 100 * GiB, 1, 2**20) == 99  # no share read: the card's answer, as before
    assert replayed.largest(rec, 100 * GiB, 1, 2**20, 30 * GiB) == 10
    assert replayed.largest(rec, 100 * GiB, 1, 2**20, 48 * GiB) == 21
    assert replayed.largest(rec, 5 * GiB, 1, 2**20, 48 * GiB) == 4  # the card binds first
    # no packs at a size, not the same tensors at each, or not byte counts: no host bound, the card's answer
    for odd in ({4: kept[4]}, {4: kept[4], 8: kept[8][:1]}, {4: kept[4], 8: ["1 GiB", 1]}, {4: 4, 8: 8}):
        found = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [
            probe(n, **({"host_packs": odd[n]} if n in odd else {})) for n in (4, 8)]}])
        rec = found[("H100 80GB HBM3", json.dumps(KEY, sort_keys=True))]
        assert rec.host is None and replayed.largest(rec, 100 * GiB, 1, 2**20, 30 * GiB) == 99


def test_the_replay_grows_from_the_largest_sizes_alike_past_the_small_ones_that_differ():
    small = [Request(ALLOC, 0, 64 * 2**20), Request(ALLOC, 1, 2**20), Request(ALLOC, 2, GiB)]  # another kernel's
    at = {1: small, **{n: simulator.load(step(n)) for n in (4, 8, 16)}}
    rec = replayed.Recorded("H100", KEY, at, {})
    assert replayed.largest(rec, 20 * GiB, 1, 2**20) == 19  # grown from 8 and 16, as from 4 and 8
    only = replayed.Recorded("H100", KEY, {1: small, 8: at[8]}, {})
    with pytest.raises(simulator.Unlike, match="degree 1 needs 2"):
        replayed.largest(only, 20 * GiB, 1, 2**20)


def test_the_device_binds_before_a_cap_past_it_and_a_sequence_needs_three_sizes():
    beside = {"device_total": 30 * GiB, "context_bytes": GiB}
    rec = replayed.Recorded("H100", KEY, {n: simulator.load(step(n)) for n in (4, 8)}, {4: beside})
    assert replayed.largest(rec, 100 * GiB, 1, 2**20) == 28  # 29 GiB reachable, not the cap's 100
    seq = dict(KEY, over="seq_len")
    two = replayed.Recorded("H100", seq, {n: simulator.load(step(n, "seq_len")) for n in (4096, 8192)}, {})
    with pytest.raises(simulator.Unlike, match="degree 2 needs 3"):
        replayed.largest(two, 20 * GiB, 128, 2**20)
    three = replayed.Recorded("H100", seq, {n: simulator.load(step(n, "seq_len")) for n in (2048, 4096, 8192)}, {})
    # n^2 / 1024^2 GiB + 64 MiB under 20 GiB: n up to 4,576 tokens, the last multiple of 128 is 4,480
    assert replayed.largest(three, 20 * GiB, 128, 2**20) == 4480


def pinning(n):
    """A step where a 1.5 MiB block lands in what a 2 MiB segment left over from the block freed
    before it, where that is room enough (n = 1 or 2, modulo 8), and pins the segment: the cap
    cannot release it for the last block, so those sizes fail under sizes that run."""
    mib = 2**20
    return [Request(ALLOC, 0, 100 * mib + n * mib // 4), Request(ALLOC, 1, 3 * mib // 2),
            Request(RELEASED, 0), Request(FREE, 0), Request(ALLOC, 2, 200 * mib + n * mib)]


def test_a_run_of_failing_sizes_under_a_larger_one_that_runs_does_not_hide_it():
    rec = replayed.Recorded("H100", KEY, {4: pinning(4), 8: pinning(8)}, {})
    cap = 240 * 2**20  # the 1.5 MiB block's own 20 MiB segment and the last block, up to 220 MiB of it
    runs = [n for n in range(1, 40) if simulator.replay(rec.growth.at(n), cap).fits]
    assert runs == [3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 19, 20]  # 1, 2, 9, 10, 17, 18 pinned
    # bisection would stop at the first failure (1); the largest size that runs is the answer
    assert replayed.largest(rec, cap, 1, 2**20) == 20
    assert replayed.largest(rec, cap, 1, 18) == 16  # under a top the host sets, the largest under it
    assert simulator.live_peak(rec.growth.at(20)) == 3 * 2**19 + 220 * 2**20  # the 1.5 MiB block and the last


def test_an_unknown_action_is_refused_naming_both(capsys):
    assert command.main(Namespace(action="recrod")) == 2
    assert "say record (on a GPU) or score (on the CPU), got 'recrod'" in capsys.readouterr().err


@pytest.mark.parametrize("ways, sizes, budget, message", [("", "4,8", "40GB", "--ways names no way"),
                                                          ("fp32,nope", "4,8", "40GB", "unknown knob 'nope'"),
                                                          ("fp32", "4,x", "40GB", "whole numbers separated by commas"),
                                                          ("fp32", "0,4", "40GB", "whole numbers from 1"),
                                                          ("fp32", "4", "a100", "--budget takes one of 16GB, 24GB"),
                                                          ("fp32", "4", "40", "--budget takes one of")])
def test_a_wrong_argument_is_refused_with_its_fix_before_anything_runs(ways, sizes, budget, message, capsys):
    args = Namespace(action="record", ways=ways, over="batch", sizes=sizes, side_by_side=2, results="unused",
                     budget=budget, check=True)
    assert command.main(args) == 2
    assert message in capsys.readouterr().err


def test_recording_without_a_gpu_is_refused_before_any_probe(monkeypatch, tmp_path, capsys):
    from harness.measure.instruments import devices
    monkeypatch.setattr(devices, "discover", lambda: devices.Devices(gpus=()))
    monkeypatch.setattr(command, "_probe", lambda *a: pytest.fail("a probe ran"))
    args = Namespace(action="record", ways="fp32", over="batch", sizes="4,8", side_by_side=2, results=str(tmp_path),
                     budget="40GB", check=False)
    assert command.main(args) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err and not (tmp_path / "programmes").exists()


def test_the_score_answers_each_cell_of_the_recording_gpu_and_the_error_table_shows_it(tmp_path):
    from harness.report import estimates
    from harness.report.model import load_rows
    results = tmp_path / "results"
    shutil.copytree(FROZEN, results)
    programmes.write(results, "nvidia-h100-80gb-hbm3-x1", "0" * 40, environment(), [probe(4), probe(8)])
    command.score(results)
    table = json.loads((results / command.FILE).read_text())["cells"]
    assert table and {c["gpu"] for c in table} == {"H100 80GB HBM3"}
    assert {c["key"]["technique"] for c in table} == {"bf16_autocast"}  # the only way recorded
    by_budget = {c["budget"]: c for c in table}
    assert by_budget["16GB"]["largest"] == 14  # 64 MiB and n GiB within 16 * 10^9 bytes
    cells = {c.budget: c for c in estimates.cells(load_rows(results), results)
             if c.gpu == "H100 80GB HBM3" and c.technique == "bf16_autocast" and c.allocator == "default"}
    assert estimates.scores(cells["16GB"])["replay"][0] == 14
    other = [c for c in estimates.cells(load_rows(results), results) if c.technique != "bf16_autocast"]
    assert other and all(estimates.scores(c)["replay"] == (None, None) for c in other)
    # each recorded programme replayed as recorded gives its own probe's peaks, and the page says so
    (recording,) = json.loads((results / command.FILE).read_text())["recordings"]
    assert [p["replayed_reserved"] == p["peak_reserved"] for p in recording["probes"]] == [True, True]
    assert estimates.replay_checks(results) == [
        "- H100 80GB HBM3: 2 recorded probes; the replay runs out where the probe did in 2; of the 2 that ran in "
        "both, 2 reserve and allocate the very bytes their probe measured, the worst reserved peak +0.0% off."]


def test_the_score_replays_every_probe_of_the_searches_that_capped_at_their_budget_s_own_bytes(tmp_path):
    from harness.measure.records.store import RecordStore
    from harness.report import estimates
    results = tmp_path / "results"
    shutil.copytree(FROZEN, results)
    programmes.write(results, "nvidia-h100-80gb-hbm3-x1", "0" * 40, environment(), [probe(4), probe(8)])
    folder = results / "records" / "nvidia-h100-80gb-hbm3-x1"

    def log(run, *entries):
        other = {"key": dict(KEY, technique="fp32"), "n": 1, "cap": 16 * 10**9, "fits": True}  # another way's
        lines = [json.dumps({"key": KEY, **e}) for e in entries] + [json.dumps(other)]
        RecordStore.probe_log(folder / run).write_text("\n".join(lines) + "\n")
    sixteen, card = 16 * 10**9, 85520809984
    # a run whose searches capped at the budget's bytes (16, 24, 40, 80 GB)
    log("9009c493-20261125T171513-718970.jsonl", {"n": 13, "cap": sixteen, "fits": True},
        {"n": 14, "cap": sixteen, "fits": False, "short_of": "device"},
        {"n": 15, "cap": sixteen, "fits": False, "reason": "CUDA out of memory. Tried to allocate 15.00 GiB."},
        {"n": 16, "cap": sixteen, "fits": False, "short_of": "host"},
        {"n": 17, "cap": sixteen, "fits": False, "reason": "does not fit: 9 GB of pinned host memory over 8 GB"},
        {"n": 18, "cap": sixteen, "fits": False, "too_slow": True},
        {"n": 19, "cap": sixteen, "fits": False, "killed": True},
        {"n": 22, "cap": 24 * 10**9, "fits": True}, {"n": 9, "cap": 17 * 10**9, "fits": True},  # no search of 17 GB
        {"n": 14, "cap": sixteen, "fits": False, "short_of": "device"})  # probed again: named once, counted twice
    # a run that capped short of 16 GB, and searched the whole card too, which it never capped
    log("d570cdd1-20261123T171831-930423.jsonl", {"n": 12, "cap": sixteen, "fits": False, "short_of": "device"},
        {"n": 70, "cap": card, "fits": True})
    command.score(results)
    (recording,) = json.loads((results / command.FILE).read_text())["recordings"]
    got = sorted((t["cap"], t["n"], t["fits"], t["replayed_fits"]) for t in recording["searched"])
    # 64 MiB and n GiB: 14 runs in 16 * 10^9 bytes, where the probe ran out; 15 does not
    assert got == [(sixteen, 13, True, True), (sixteen, 14, False, True), (sixteen, 14, False, True),
                   (sixteen, 15, False, False), (24 * 10**9, 22, True, True), (card, 70, True, True)]
    assert estimates.replay_checks(results)[1] == (
        "- H100 80GB HBM3, searched: 6 probes of its what-fits searches under their budget's own bytes, each a size "
        "the device held or ran out at; the grown programme runs where the probe fit and runs out where it ran out "
        "in 4; not: bf16_autocast at batch 14 under 16.0 GB (ran out, 2 probes).")


def test_the_replay_stops_where_a_search_would_only_where_it_runs_the_size_and_not_the_two_after_it(monkeypatch):
    table = {10: True, 11: False, 12: True, 13: False, 14: False, 15: True, 20: True, 21: True, 22: False,
             23: False}

    def runs(rec, n, cap):
        assert (rec, cap) == ("grown", 16 * 10**9)  # the programme and cap asked about, at every size
        return table[n // unit]
    monkeypatch.setattr(replayed, "runs", runs)
    for unit in (1, 128):  # in the search's steps: a sample, or 128 tokens
        stops = [n for n in (10, 11, 12, 20, 21) if replayed.stops_at("grown", n * unit, 16 * 10**9, unit)]
        assert stops == [12, 21]  # 10: 12 runs past 11; 20: 21 runs after it


def test_the_searches_probes_of_a_recording_that_grows_nothing_are_no_test_of_it():
    odd = dict(probe(8), programme=step(8)[:2])  # two requests where the one at 4 has four: not one programme
    (rec,) = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), odd]}]).values()
    assert replayed.searched(rec, [{"n": 9, "cap": 20 * GiB, "fits": True}]) == []
    (rec,) = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), probe(8)]}]).values()
    assert replayed.searched(rec, []) == []
    # at the cap's very bytes the blocks still fit; under a weight's worth of bytes nothing runs
    assert replayed.largest(rec, 64 * 2**20 + 19 * GiB, 1, 2**20) == 19
    assert replayed.largest(rec, 32 * 2**20, 1, 2**20) == 0


def test_a_replay_that_misses_its_probes_peak_says_by_how_much():
    off = probe(8, peak_reserved=64 * 2**20 + 8 * GiB + 2**27)  # the probe reserved 128 MiB more
    found = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), off]}])
    (rec,) = found.values()
    got = replayed.checked(rec)
    assert [(p["n"], p["replayed_reserved"] == p["peak_reserved"]) for p in got] == [(4, True), (8, False)]
    assert got[1]["peak_reserved"] - got[1]["replayed_reserved"] == 2**27 and rec.commits == {"c"}


def test_a_broken_probe_costs_only_its_own_programme(monkeypatch, tmp_path, capsys):
    from harness.measure.guards import locks
    from harness.measure.instruments import devices
    from harness.measure.instruments import environment as env_mod
    from conftest import fake_devices
    monkeypatch.setattr(devices, "discover", lambda: fake_devices(count=1))
    monkeypatch.setattr(locks, "visible_gpu_uuids", lambda ordinals: [])
    monkeypatch.setattr(env_mod, "snapshot", lambda d: env_mod.Environment.from_dict(environment()))

    def fake_probe(job, tmp):
        way, over, n, cap = job
        if n == 8:
            raise RuntimeError(f"the probe of {way} at {over}={n} failed (exit 1): boom")
        return probe(n)
    monkeypatch.setattr(command, "_probe", fake_probe)
    args = Namespace(action="record", ways="bf16_autocast", over="batch", sizes="4,8", side_by_side=2,
                     results=str(tmp_path), budget="40GB", check=False)
    assert command.main(args) == 1
    assert "bf16_autocast at batch=8 failed (exit 1): boom" in capsys.readouterr().err
    (got,) = programmes.read(tmp_path)
    assert [p["n"] for p in got["probes"]] == [4]  # the one that ran is filed


def test_the_whole_card_s_probes_cap_at_the_gpu_s_total_as_its_search_does(monkeypatch, tmp_path):
    from harness.measure.guards import locks
    from harness.measure.instruments import devices
    from harness.measure.instruments import environment as env_mod
    from conftest import fake_devices
    monkeypatch.setattr(devices, "discover", lambda: fake_devices(count=1, total=80 * GiB))
    monkeypatch.setattr(locks, "visible_gpu_uuids", lambda ordinals: [])
    monkeypatch.setattr(env_mod, "snapshot", lambda d: env_mod.Environment.from_dict(environment()))
    caps = []
    monkeypatch.setattr(command, "_probe", lambda job, tmp: caps.append(job[3]) or dict(probe(job[2]), cap=job[3]))
    args = Namespace(action="record", ways="fp32", over="batch", sizes="66,67", side_by_side=2,
                     results=str(tmp_path), budget="card", check=True)
    assert command.main(args) == 0
    assert caps == [80 * GiB, 80 * GiB]
    (got,) = programmes.read(tmp_path)
    assert [p["cap"] for p in got["probes"]] == [80 * GiB, 80 * GiB] and got["purpose"] == programmes.CHECK


def test_probes_recorded_to_test_the_replay_are_never_grown_from_and_are_foreseen_by_the_grown_programme():
    # the test probe at 20 carries another step (two GiB a sample): grown from, it would move every answer
    odd = dict(probe(20), programme=step(40), cap=20 * GiB)
    odd["result"] = {"fits": False, "device_total": 80 * GiB, "context_bytes": 0}
    tests = [dict(probe(19), cap=20 * GiB), odd]
    found = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), probe(8)]},
                               {"environment": environment(), "commit": "t", "probes": tests,
                                "purpose": programmes.CHECK}])
    (rec,) = found.values()
    assert sorted(rec.programmes) == [4, 8] and rec.commits == {"c"}
    assert replayed.largest(rec, 20 * GiB, 1, 2**20) == 19
    # grown to 19 it fits in 20 GiB with the probe's very peak; grown to 20 it runs out, as the probe did
    assert [(t["n"], t["fits"], t["replayed_fits"]) for t in replayed.foreseen(rec)] == [(19, True, True),
                                                                                       (20, False, False)]
    assert replayed.foreseen(rec)[0]["replayed_reserved"] == rec.tests[(19, 20 * GiB)]["peak_reserved"]
    assert {(t["cap"], t["peak_reserved"]) for t in replayed.foreseen(rec)} == {
        (20 * GiB, rec.tests[(19, 20 * GiB)]["peak_reserved"]), (20 * GiB, None)}  # the probe's own, beside it
    # 19 fits and 20 does not, as probed: the replay's answer under 20 GiB was probed as it has it
    assert replayed.probed(rec, 19, 20 * GiB, 1) is True
    assert replayed.probed(rec, 18, 20 * GiB, 1) is None and replayed.probed(rec, 19, 24 * GiB, 1) is None


def test_a_check_recording_is_filed_under_its_cap_as_a_test_and_the_page_counts_it(monkeypatch, tmp_path):
    from harness.measure.guards import locks
    from harness.measure.instruments import devices
    from harness.measure.instruments import environment as env_mod
    from harness.report import estimates
    from conftest import fake_devices
    monkeypatch.setattr(devices, "discover", lambda: fake_devices(count=1))
    monkeypatch.setattr(locks, "visible_gpu_uuids", lambda ordinals: [])
    monkeypatch.setattr(env_mod, "snapshot", lambda d: env_mod.Environment.from_dict(environment()))
    monkeypatch.setattr(command, "_probe", lambda job, tmp: dict(probe(job[2]), cap=job[3]))
    base = dict(action="record", ways="bf16_autocast", over="batch", side_by_side=2, results=str(tmp_path))
    assert command.main(Namespace(**base, sizes="4,8", budget="40GB", check=False)) == 0
    assert command.main(Namespace(**base, sizes="15", budget="16GB", check=True)) == 0
    grown, test = programmes.read(tmp_path)
    assert (grown["purpose"], test["purpose"]) == (programmes.GROW, programmes.CHECK)
    assert [p["cap"] for p in grown["probes"]] == [40 * 10**9] * 2 and test["probes"][0]["cap"] == 16 * 10**9
    (rec,) = replayed.recorded([grown, test]).values()
    (seen,) = replayed.foreseen(rec)  # 64 MiB and 15 GiB pass 16 * 10^9 bytes: the replay runs out
    assert (seen["n"], seen["replayed_fits"]) == (15, False)
    recordings = [{"gpu": rec.gpu, "probes": replayed.checked(rec), "foreseen": replayed.foreseen(rec)}]
    (tmp_path / command.FILE).write_text(json.dumps({"recordings": recordings}))
    assert estimates.replay_checks(tmp_path)[1] == (
        "- H100 80GB HBM3, grown: 1 probes recorded to test the replay, at sizes and caps it did not grow from; "
        "the grown programme runs out where the probe did in 0.")


def test_a_replays_size_a_search_of_its_gpu_saw_fit_with_the_next_failing_is_marked_probed():
    from types import SimpleNamespace
    found = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), probe(8)],
                                "purpose": programmes.GROW}])
    (rec,) = found.values()
    # the search answered 28; an earlier search of the same GPU, key and cap saw 33 fit and 34 not
    cell = SimpleNamespace(cap=16 * 10**9, unit=1, measured=28, seen={28: True, 29: False, 33: True, 34: False})
    assert command._probed(rec, cell, 33) is True
    assert command._probed(rec, SimpleNamespace(**dict(vars(cell), seen={33: True, 34: True})), 33) is False
    assert command._probed(rec, SimpleNamespace(**dict(vars(cell), seen={33: True})), 33) is None  # 34 not probed
    # at the search's own answer only a probe recorded to test the replay counts: the search's own
    # probes are what it is scored against
    assert command._probed(rec, cell, 28) is None
    tested = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), probe(8)]},
                                {"environment": environment(), "commit": "c", "purpose": programmes.CHECK,
                                 "probes": [dict(probe(28), cap=16 * 10**9),
                                            dict(probe(29), cap=16 * 10**9, result={"fits": False})]}])
    (rec,) = tested.values()
    assert command._probed(rec, cell, 28) is True
    failed = replayed.recorded([{"environment": environment(), "commit": "c", "probes": [probe(4), probe(8)]},
                                {"environment": environment(), "commit": "c", "purpose": programmes.CHECK,
                                 "probes": [dict(probe(28), cap=16 * 10**9, result={"fits": False}),
                                            dict(probe(29), cap=16 * 10**9, result={"fits": False})]}])
    (rec,) = failed.values()
    assert replayed.probed(rec, 28, 16 * 10**9, 1) is False  # the replay's size itself failed


def test_a_recording_that_cannot_be_read_is_refused_by_the_score_naming_the_fix(tmp_path, capsys):
    folder = tmp_path / programmes.DIR / "nvidia-h100-80gb-hbm3-x1"
    folder.mkdir(parents=True)
    (folder / "0000-broken.json.gz").write_bytes(b"not gzip")
    assert command.main(Namespace(action="score", results=str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "programmes record" in err and not (tmp_path / command.FILE).exists()
