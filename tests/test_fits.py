"""What fits: the search finds the exact boundary of a fake memory model, each real probe runs in
a process of its own, and a budget beyond the card is skipped with the reason."""
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import set_run

import psutil
import pytest

from harness.measure.guards.budget import resolve
from harness.units import GB
import harness
from harness import cases
from harness.cases.base import Config
from harness.workloads.search import fits, probe_log
from harness.measure.outcomes import Skip
from harness.drive.runner import execute

REAL_PROBE_ARGV = fits.probe_argv  # before any test puts a fake in its place
CASE_PARAMS = dict(device="cuda", workload="lm", technique="fp32", budget="16GB", over="batch", allocator="default",
                   vocab=128, width=32, depth=2, seq_len=16)
# A probe that costs a process start, not a model: fits while n is at most the argument.
FAKE_PROBE = ("import json, os, sys; n = int(sys.argv[1]); "
              "print(json.dumps({'fits': n <= int(sys.argv[2]), 'pid': os.getpid()}))")


def test_every_probe_runs_in_a_fresh_process():
    prober = fits.SubprocessProber(lambda n: [sys.executable, "-S", "-c", FAKE_PROBE, str(n), "5"])
    search = fits.largest_fitting(prober)
    assert search.largest == 5
    pids = [r["pid"] for r in prober.results]
    assert len(pids) == search.probes and len(set(pids)) == len(pids) and os.getpid() not in pids


def test_a_crashing_probe_raises_instead_of_reading_as_does_not_fit():
    prober = fits.SubprocessProber(lambda n: [sys.executable, "-S", "-c", "raise SystemExit('boom')"])
    with pytest.raises(RuntimeError, match="fix the probe"):
        prober(1)


def test_a_budget_larger_than_the_card_is_skipped_with_the_reason():
    card = 24 * 2**30  # a 24 GB card: 25.8 x 10^9 bytes
    assert resolve("24GB", card, "torch").limit_bytes == 24 * GB
    assert resolve("card", card, "torch").limit_bytes == card
    with pytest.raises(Skip, match="budget 40GB is larger than this card"):
        resolve("40GB", card, "torch")


def test_what_fits_skips_on_the_cpu_with_the_reason():
    rec = execute("fits", dict(CASE_PARAMS, device="cpu"))
    assert rec.outcome == "skipped" and "set_per_process_memory_fraction" in rec.reason


PROBE_PARAMS = dict(device="cpu", workload="lm", technique="bf16_autocast", budget="card", batch=1, micro_batch=1,
                    vocab=128,
                    width=32, depth=2, seq_len=16)


@pytest.mark.parametrize("technique, forked", [("bf16_autocast", False), ("checkpoint+expandable+bf16_autocast", True)])
def test_the_real_probe_trains_in_its_own_process_and_answers_in_json(technique, forked):
    """Started as a program, and as a search starts it: forked from a server with torch imported."""
    from harness.measure.guards import preloaded
    from harness.workloads.training import allocator as settings
    from harness.workloads.training.ways import parse
    config = cases.get("tricks").config(dict(PROBE_PARAMS, technique=technique))
    argv = fits.probe_argv(config, 1.0, over="seq_len")(24)
    assert argv.count(config.to_json()) == 1 and Config.from_json(argv[argv.index(config.to_json())]) == config
    if forked:
        with preloaded.cases():
            # as the fits case starts it: the way's allocator setting in force from the start
            env = settings.environ_with(parse(technique).allocator, fits.probe_env())
            prober = fits.SubprocessProber(fits.probe_argv(config, 1.0, over="seq_len"), env=env)
            assert prober(24) is True
            server = preloaded._SERVER.pid
        (answer,) = prober.results
        assert server is not None and not psutil.pid_exists(server)  # the block ended it
    else:
        done = subprocess.run(argv, capture_output=True, text=True, env=fits.probe_env(), timeout=120)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["fits"] is True and answer["n"] == 24 and answer["pid"] != os.getpid()


def test_the_probes_path_leads_to_this_checkouts_harness(monkeypatch):
    """asv starts benchmarks in a folder of its own with PYTHONPATH dropped, and an installed
    copy may be absent or stale: the probe's first path entry must hold this very package."""
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    first, *rest = fits.probe_env()["PYTHONPATH"].split(os.pathsep)
    assert (Path(first) / "harness" / "__init__.py").resolve() == Path(harness.__file__).resolve()
    assert rest == ["/elsewhere"]


def test_a_probe_grows_the_batch_or_one_sequence():
    from harness.workloads.search.fits_probe import sizes
    assert sizes("batch", 12) == {"batch": 12, "micro_batch": 12}
    assert sizes("seq_len", 4096) == {"seq_len": 4096, "batch": 1, "micro_batch": 1}
    with pytest.raises(ValueError, match="over='width' is not one of: batch, seq_len"):
        cases.get("fits").config(dict(CASE_PARAMS, over="width"))


def test_the_fits_case_searches_over_the_tricks_cases_own_values():
    fits_params, tricks_params = cases.get("fits").params, cases.get("tricks").params
    assert list(fits_params) == ["device", "workload", "technique", "budget", "over", "allocator", "vocab", "width",
                                 "depth", "seq_len"]
    for name in ("device", "workload", "technique", "vocab", "width", "depth", "seq_len"):
        assert list(fits_params[name]) == list(tricks_params[name]), name
    assert tuple(fits_params["seq_len"])[-1] == 32768 and 50304 in fits_params["vocab"]


def test_the_fits_case_hands_each_probe_exactly_its_tricks_configs_json(monkeypatch):
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits_case, "_card", lambda devices: (24 * 2**30, 24 * 2**30))
    given = []
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        given.append((config, REAL_PROBE_ARGV(config, cap, over))) or (
            lambda n: [sys.executable, "-S", "-c", FAKE_PROBE, str(n), "200"])))
    assert execute("fits", dict(CASE_PARAMS, over="seq_len", seq_len=128)).outcome == "ok"
    ((config, argv_of),) = given
    assert isinstance(config, Config) and config.case == "tricks"
    search = {k: v for k, v in CASE_PARAMS.items() if k not in ("budget", "over", "allocator")}
    assert dict(config.params) == dict(search, seq_len=128, batch=1, micro_batch=1, budget="card")
    argv = argv_of(300)
    assert argv[3] == config.to_json() and argv[1:3] == ["-m", "harness.cases.fits_probe"]
    assert argv[4:] == ["300", str(16 * GB), "seq_len"]
    assert Config.from_json(argv[3]) == config


def test_the_probe_reads_its_config_back_and_refuses_one_tampered_with(capsys):
    from harness.cases import fits_probe
    text = cases.get("tricks").config(PROBE_PARAMS).to_json()
    assert fits_probe.main([text, "8", str(GB), "batch"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["fits"] is True and answer["n"] == 8
    tampered = text.replace('"width": 32', '"width": 33')
    assert tampered != text
    with pytest.raises(ValueError, match="width=33 is not one of: 32, 256"):
        fits_probe.main([tampered, "8", str(GB), "batch"])
    with pytest.raises(ValueError, match="expected a config of case 'tricks', got one of 'fits'"):
        fits_probe.main([cases.get("fits").config(CASE_PARAMS).to_json(), "8", str(GB), "batch"])


@pytest.fixture
def fake_card(monkeypatch):
    """A 24 GB card whose probes are the cheap fake: batch 5 fits, 6 does not."""
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits_case, "_card", lambda devices: (24 * 2**30, 24 * 2**30))
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        lambda n: [sys.executable, "-S", "-c", FAKE_PROBE, str(n), "5"]))


def test_the_fits_case_records_the_largest_batch_and_one_process_per_probe(fake_card, records_dir):
    rec = execute("fits", CASE_PARAMS)
    assert rec.outcome == "ok", rec.reason
    assert rec.check["max_batch"] == 5 and rec.check["probe_pids"] == rec.check["probes"]
    assert rec.check["budget_bytes"] == 16 * GB
    assert rec.check["budget_bytes_per_sample"] == 16 * GB / 5


def test_the_fits_case_skips_a_budget_beyond_the_card(fake_card):
    rec = execute("fits", dict(CASE_PARAMS, budget="80GB"))
    assert rec.outcome == "skipped" and "budget 80GB is larger than this card" in rec.reason


def test_the_probe_reads_a_library_workspace_failure_as_out_of_memory_and_nothing_else():
    from harness.measure.outcomes import is_out_of_memory as out_of_memory  # what the probe reads them with
    assert out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert out_of_memory(MemoryError())
    assert not out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_the_probe_log_carries_a_fit_up_to_larger_caps_and_a_failure_down_to_smaller_ones(tmp_path):
    log, key = probe_log.ProbeLog(tmp_path / "p.ndjson"), {"technique": "fp32"}
    log.add(key, 16, {"n": 9, "fits": True, "peak_allocated": 14})
    log.add(key, 16, {"n": 10, "fits": False})
    log.add(key, 24, {"n": 14, "fits": True, "peak_allocated": 22})
    log.add(key, 24, {"n": 15, "fits": False})
    log.add({"technique": "bf16_autocast"}, 16, {"n": 99, "fits": True, "peak_allocated": 1})
    assert log.bounds(key, 16) == (9, 10)
    assert log.bounds(key, 20) == (9, 15)  # 14 fit only under more; 10 failed only under less
    assert log.bounds(key, 40) == (14, None)
    assert log.bounds(key, 8) == (None, 10)
    assert probe_log.ProbeLog(tmp_path / "p.ndjson").points(key) == [(9, 14), (14, 22)]  # read back from the file


def test_the_next_budget_of_a_run_starts_from_the_last_ones_answer(fake_card, records_dir, monkeypatch):
    run = set_run(monkeypatch, records_dir, run_id="run1")
    first = execute("fits", CASE_PARAMS, run=run)
    second = execute("fits", dict(CASE_PARAMS, budget="24GB"), run=run)
    assert first.check["max_batch"] == second.check["max_batch"] == 5
    assert second.check["known_fit"] == 5 and second.check["known_not_fit"] is None  # 6 failed under less
    logged = list((records_dir / "test-machine").glob("*.fits-probes.ndjson"))
    assert len(logged) == 1
    assert second.check["probes"] < first.check["probes"]
    assert second.check["probes"] == len(second.check["probe_seconds"])


def test_earlier_runs_hint_the_bracket_they_found_and_none_where_they_disagree(tmp_path):
    key = {"technique": "fp32"}
    for name, fit, fail in (("a", 9, 10), ("b", 8, 11)):
        log = probe_log.ProbeLog(tmp_path / f"{name}.ndjson")
        log.add(key, 16, {"n": fit, "fits": True, "peak_allocated": 14})
        log.add(key, 16, {"n": fail, "fits": False})
    earlier = probe_log.EarlierRuns([tmp_path / "a.ndjson", tmp_path / "b.ndjson"])
    assert earlier.bracket(key, 16) == (9, 10)
    assert earlier.runs(key) == [2, 0] and earlier.runs({"technique": "x"}) == [0, 0]
    assert earlier.bracket(key, 24) == (9, None)  # a failure under less says nothing about more
    probe_log.ProbeLog(tmp_path / "c.ndjson").add(key, 16, {"n": 12, "fits": True, "peak_allocated": 15})
    # 12 fit, 10 did not
    assert probe_log.EarlierRuns(sorted(tmp_path.glob("*.ndjson"))).bracket(key, 16) == (None, None)
    assert earlier.points(key) == [(9, 14), (8, 14)]


def test_another_machines_bracket_serves_only_where_this_ones_runs_found_none(tmp_path):
    key = {"technique": "fp32"}
    for name, cap, fit, fail in (("here", 16, 9, 10), ("there", 16, 8, 9), ("there", 24, 14, 15)):
        log = probe_log.ProbeLog(tmp_path / f"{name}.ndjson")
        log.add(key, cap, {"n": fit, "fits": True, "peak_allocated": fit})
        log.add(key, cap, {"n": fail, "fits": False})
    earlier = probe_log.EarlierRuns([tmp_path / "here.ndjson"], [tmp_path / "there.ndjson"])
    assert earlier.bracket(key, 16) == (9, 10)  # this machine's, though another card's disagrees
    assert earlier.bracket(key, 24) == (14, 15)  # this machine knows only 9 fit under less
    assert earlier.bracket(key, 40) == (14, None)
    assert earlier.runs(key) == [1, 1] and len(earlier.points(key)) == 3


def test_the_earlier_probe_logs_are_this_machines_other_runs_and_every_other_machines(tmp_path):
    from harness.measure.records.store import RecordStore
    store = RecordStore(tmp_path)
    run = store.run_file("box", "0123abcd", "r2")
    names = [store.probe_log(store.run_file(m, "0123abcd", r))
             for m, r in (("box", "r1"), ("box", "r2"), ("other", "r9"))]
    for path in names:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert RecordStore.earlier_probe_logs(run) == ([names[0]], [names[2]])


@pytest.mark.parametrize("was,now", [(5, 5), (5, 9), (9, 2), (0, 5)])
def test_a_case_searched_in_an_earlier_run_is_searched_again_from_its_answer_and_stays_exact(
        fake_card, records_dir, monkeypatch, was, now):
    def boundary(b):
        monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
            lambda n: [sys.executable, "-S", "-c", FAKE_PROBE, str(n), str(b)]))

    boundary(was)
    first = execute("fits", CASE_PARAMS, run=set_run(monkeypatch, records_dir, run_id="run1"))
    boundary(now)  # the code or its libraries changed between the runs, or nothing did
    second = execute("fits", CASE_PARAMS, run=set_run(monkeypatch, records_dir, run_id="run2"))
    assert (first.check["max_batch"] if first.outcome == "ok" else 0) == was
    assert second.outcome == "ok" and second.check["max_batch"] == now  # only this run's probes decide
    assert second.check["earlier_runs"] == [1, 0] and second.check["known_fit"] is None  # a hint, not a bound
    if was == now:
        assert second.check["earlier_bracket"] == [5, 6]
        assert second.check["probes"] == 3 < first.check["probes"]  # the answer and the two after it


# A probe whose memory is a line, 1 GB + n x 0.1 GB, against the cap it was given; it takes the
# seconds it is given (half a second by default), and says when it ran.
LINE_PROBE = ("import json, os, sys, time; began = time.time(); n = int(sys.argv[1]); "
              "cap = float(sys.argv[2]); peak = 1e9 + n * 1e8; time.sleep(float(sys.argv[3])); "
              "print(json.dumps({'fits': peak <= cap, 'pid': os.getpid(), 'peak_allocated': peak, "
              "'peak_reserved': peak, 'began': began, 'ended': time.time()}))")


def line_probes(seconds: float = 0.5):
    """``fits.probe_argv`` standing for the real one: each probe a ``LINE_PROBE`` of ``seconds``."""
    return lambda config, cap, over: lambda n: [sys.executable, "-S", "-c", LINE_PROBE, str(n), str(cap),
                                                str(seconds)]


def test_on_a_roomy_card_the_guess_and_its_neighbours_are_probed_side_by_side(monkeypatch, records_dir):
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits_case, "_card", lambda devices: (200 * 10**9, 200 * 10**9))
    monkeypatch.setattr(fits, "probe_argv", line_probes())
    run = set_run(monkeypatch, records_dir, run_id="run1")  # so that the probe log is a file, with each probe's times
    rec = execute("fits", CASE_PARAMS, run=run)
    assert rec.outcome == "ok", rec.reason
    assert rec.check["max_batch"] == 150 and rec.check["side_by_side"] == 3  # (16e9 - 1e9) / 1e8
    assert rec.check["probes"] == 6 == rec.check["probe_pids"]  # 1, 2, 4 at once, then the prediction, 150,
    # with 151 and 152 after it at once: the rule's proof
    assert rec.check["prediction"]["largest"] == 150 and rec.check["prediction"]["from_sizes"] == [1, 2, 4]
    assert rec.check["prediction"]["reachable_bytes"] == 16 * 10**9  # the probes name no device: the cap binds
    (log,) = (records_dir / "test-machine").glob("*.fits-probes.ndjson")
    ran = {e["n"]: (e["began"], e["ended"]) for e in map(json.loads, log.read_text().splitlines())}
    for batch in ((1, 2, 4), (150, 151, 152)):
        assert max(ran[n][0] for n in batch) < min(ran[n][1] for n in batch), f"{batch} did not overlap"
    assert rec.timing.median_s < 3 * 0.5 + 2  # two rounds of half a second, not six


# A probe whose step is a weight of 477 segments of 2 MiB and 48 such a sample: what the replay of
# that programme reserves, so that the replay's answer is the probes' own.
SEGMENT_PROBE = ("import json, os, sys; n = int(sys.argv[1]); peak = 2**21 * (477 + 48 * n); "
                 "print(json.dumps({'fits': peak <= int(sys.argv[2]), 'pid': os.getpid(), "
                 "'peak_reserved': peak, 'peak_allocated': peak}))")


def aimed_by_a_recording(monkeypatch, folder, probe_code: str, sample_bytes: int, technique: str = "fp32",
                         result=lambda n: {}) -> None:
    """A roomy fake GPU whose probes run ``probe_code`` (size, cap), and whose programmes of
    ``technique``, filed under ``folder``, ask for the 477 segments of 2 MiB of a weight and
    ``sample_bytes`` a sample, recorded at 4 and 8 samples (each probe's ``result(n)`` beside its
    answer): what the search's replay grows."""
    from conftest import fake_devices
    from harness.cases import fits as fits_case
    from harness.measure.instruments import devices
    from harness.measure.instruments.environment import snapshot
    from harness.measure.instruments.machine import machine_name
    from harness.measure.records import programmes
    from harness.workloads.search import simulator
    from harness.workloads.search.simulator import ALLOC, Request
    monkeypatch.setattr(devices, "discover", lambda: fake_devices())
    monkeypatch.setattr(fits_case, "_card", lambda d: (200 * 10**9, 200 * 10**9))
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        lambda n: [sys.executable, "-S", "-c", probe_code, str(n), str(cap)]))
    params = {k: v for k, v in dict(CASE_PARAMS, technique=technique).items()
              if k not in ("budget", "over", "allocator")}
    step = {n: simulator.dump([Request(ALLOC, 0, 2**21 * 477), Request(ALLOC, 1, sample_bytes * n)]) for n in (4, 8)}
    programmes.write(folder, machine_name(fake_devices()), "0" * 40, snapshot(fake_devices()).to_dict(),
                     [{"key": dict(params, over="batch"), "n": n, "cap": 40 * 10**9, "programme": step[n],
                       "result": {"fits": True, **result(n)}} for n in (4, 8)])
    monkeypatch.setattr(fits_case, "PROGRAMMES", folder)


@pytest.mark.parametrize("one_at_a_time", [False, True])
@pytest.mark.parametrize("recorded_segments", [48, 40])
def test_where_this_gpu_recorded_the_programmes_the_search_starts_from_the_replay(recorded_segments, one_at_a_time,
                                                                                 monkeypatch, tmp_path, capsys):
    from conftest import fake_devices
    from harness.measure.instruments.machine import machine_name
    from harness.measure.records import programmes
    aimed_by_a_recording(monkeypatch, tmp_path, SEGMENT_PROBE, 2**21 * recorded_segments)
    if one_at_a_time:  # as a way that grows in host memory, or a cap too large for two
        monkeypatch.setattr(fits, "side_by_side", lambda cap, free: 1)
    set_run(monkeypatch, tmp_path / "records")
    rec = execute("fits", CASE_PARAMS)
    assert rec.outcome == "ok", rec.reason
    # (16e9 bytes - the weight) / a sample's 48 segments: 149; one round proves it, 150 and 151 beside it
    replay = (16 * 10**9 - 2**21 * 477) // (2**21 * recorded_segments)
    # wrong, the record keeps the size under it the replay runs, which the search probed next
    again = {} if replay == 149 else {"then": replay - 1}
    assert rec.check["prediction"] == {"by": "replay", "largest": replay, "recorded_sizes": [4, 8],
                                       "recorded_at": ["0" * 40], **again}
    # right, one round proves it; wrong (a programme recorded smaller than the step), the search
    # goes on from there and its answer is as exact
    assert rec.check["max_batch"] == 149 and (rec.check["probes"] == 3) == (replay == 149)
    assert rec.check["side_by_side"] == (1 if one_at_a_time else 3)
    # a recording that cannot be read aims no search: the search starts cold and answers as exactly
    (tmp_path / programmes.DIR / machine_name(fake_devices()) / "zz-broken.json.gz").write_bytes(b"not gzip")
    broken = execute("fits", dict(CASE_PARAMS, budget="24GB"))
    assert broken.outcome == "ok" and broken.check["prediction"].get("by") != "replay"
    assert "cannot be read" in capsys.readouterr().err
    # another allocator setting is not the replay's: its search starts cold, as before
    other = execute("fits", dict(CASE_PARAMS, allocator="expandable"))
    assert other.check["max_batch"] == 149 and other.check["prediction"].get("by") != "replay"


# A GPU that does not fit monotonically: 48 segments a sample on a weight of 477 fit up to 149, but
# not at 146 and 147; and a peak reported steeper than the sizes fit (a law read off it guesses low).
SPIKED_PROBE = ("import json, os, sys; n = int(sys.argv[1]); "
                "ok = 2**21 * (477 + 48 * n) <= int(sys.argv[2]) and n not in (146, 147); "
                "print(json.dumps({'fits': ok, 'pid': os.getpid(), 'peak_reserved': 2**21 * (477 + 60 * n), "
                "'peak_allocated': 2**21 * (477 + 60 * n)}))")


@pytest.mark.parametrize("again", [True, False])
def test_where_the_gpu_fails_the_replays_answer_the_search_probes_the_size_under_it_the_replay_runs(
        again, monkeypatch, tmp_path):
    from harness.workloads.search import replayed
    # recorded at 47.5 segments a sample: the replay runs 150 (one over) and every size under it
    aimed_by_a_recording(monkeypatch, tmp_path, SPIKED_PROBE, 2**20 * 95)
    if not again:  # the search as it was: from under the run of failures, it answers the top it meets
        monkeypatch.setattr(replayed, "runs_below", lambda *args: None)
    set_run(monkeypatch, tmp_path / "records")
    rec = execute("fits", CASE_PARAMS)
    assert rec.outcome == "ok", rec.reason
    assert rec.check["prediction"]["largest"] == 150
    if again:
        # 150 to 152 fail; the cold start (1, 2, 4); then 149, with 150 and 151 known: 149, proved
        assert rec.check["prediction"]["then"] == 149
        assert (rec.check["max_batch"], rec.check["probes"]) == (149, 7)
    else:
        assert rec.check["prediction"]["then"] is None
        assert rec.check["max_batch"] == 145


def test_the_replay_aims_before_an_earlier_runs_bracket_and_finds_the_fit_past_the_run_it_stopped_under(
        monkeypatch, tmp_path):
    from harness.cases import fits as fits_case
    aimed_by_a_recording(monkeypatch, tmp_path / "recorded", SPIKED_PROBE, 2**21 * 48)  # the replay: 149
    recorded = fits_case.PROGRAMMES
    monkeypatch.setattr(fits_case, "PROGRAMMES", tmp_path / "none")  # a run before the GPU recorded any
    first = execute("fits", CASE_PARAMS, run=set_run(monkeypatch, tmp_path / "records", run_id="run1"))
    assert first.check["max_batch"] == 145 and first.check["prediction"].get("by") != "replay"  # under 146, 147
    monkeypatch.setattr(fits_case, "PROGRAMMES", recorded)
    second = execute("fits", CASE_PARAMS, run=set_run(monkeypatch, tmp_path / "records", run_id="run2"))
    assert second.check["earlier_bracket"] == [145, 146] and second.check["prediction"]["largest"] == 149
    # one round: 149 fits, 150 and 151 do not; the earlier bracket would have proved 145 again
    assert (second.check["max_batch"], second.check["probes"]) == (149, 3)


# The card fits 149 (as SEGMENT_PROBE); the host, which the probe's guard holds to its share of a
# GiB kept a sample in power-of-two blocks, 128.
SHARE_PROBE = ("import json, os, sys; n = int(sys.argv[1]); "
              "dev = 2**21 * (477 + 48 * n) <= int(sys.argv[2]); host = n <= 128; "
              "print(json.dumps({'fits': dev and host, 'pid': os.getpid(), "
              "**({} if host else {'short_of': 'host'})}))")


@pytest.mark.parametrize("share_read", [True, False])
def test_a_way_that_keeps_what_it_saves_on_the_host_is_aimed_under_the_hosts_share_as_well(
        share_read, monkeypatch, tmp_path):
    from harness.cases import fits as fits_case
    aimed_by_a_recording(monkeypatch, tmp_path, SHARE_PROBE, 2**21 * 48, technique="save_on_cpu",
                         result=lambda n: {"host_packs": [n * 2**30]})
    monkeypatch.setattr(fits_case, "host_available", lambda: 256 * 2**30)  # a share of 128 GiB
    if not share_read:  # as before the replay knew the host: the card's answer
        monkeypatch.setattr(fits_case, "host_share", lambda available: None)
    set_run(monkeypatch, tmp_path / "records")
    rec = execute("fits", dict(CASE_PARAMS, technique="save_on_cpu"))
    assert rec.outcome == "ok", rec.reason
    assert rec.check["max_batch"] == 128 and rec.check["host_short_at"] == 129
    if share_read:  # one round, one probe at a time: 128 fits, 129 and 130 do not
        assert rec.check["prediction"]["largest"] == 128 and rec.check["probes"] == 3
        assert rec.check["host_limit_bytes"] == 128 * 2**30
    else:
        assert rec.check["prediction"]["largest"] == 149 and rec.check["probes"] > 3
        assert "host_limit_bytes" not in rec.check


@pytest.mark.parametrize("technique", ["save_on_cpu", "bf16_autocast+checkpoint+save_on_cpu"])
def test_probes_of_a_technique_that_grows_in_host_memory_run_one_at_a_time(monkeypatch, records_dir, technique):
    # the same roomy card as above: only the technique differs. save_on_cpu's probes would each
    # take the host's share its guard allows, so side by side they would run the host out. Shorter
    # probes than above: one after another they never overlap however short; started together, as
    # the roomy card's are, they still would.
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits_case, "_card", lambda devices: (200 * 10**9, 200 * 10**9))
    monkeypatch.setattr(fits, "probe_argv", line_probes(0.2))
    run = set_run(monkeypatch, records_dir, run_id="run1")
    rec = execute("fits", dict(CASE_PARAMS, technique=technique), run=run)
    assert rec.outcome == "ok", rec.reason
    assert rec.check["max_batch"] == 150 and rec.check["side_by_side"] == 1
    (log,) = (records_dir / "test-machine").glob("*.fits-probes.ndjson")
    ran = sorted((e["began"], e["ended"]) for e in map(json.loads, log.read_text().splitlines()))
    assert len(ran) == rec.check["probes"] and all(end <= nxt for (_, end), (nxt, _) in zip(ran, ran[1:]))


def test_the_search_runs_once_per_record_and_reads_no_busy_share_of_its_own(fake_card, monkeypatch):
    # The probes hold the GPU work: profiling this process would only run the search again.
    searches = []
    real = fits.largest_fitting
    monkeypatch.setattr(fits, "largest_fitting", lambda *a, **kw: searches.append(1) or real(*a, **kw))
    rec = execute("fits", CASE_PARAMS)
    assert rec.outcome == "ok" and len(searches) == 1 and rec.gpu_busy == {}


def test_one_sequence_is_searched_past_the_batch_limit_and_an_answer_at_its_own_limit_says_so(monkeypatch):
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits_case, "_card", lambda devices: (24 * 2**30, 24 * 2**30))

    def fits_up_to(top):
        monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
            lambda n: [sys.executable, "-S", "-c", FAKE_PROBE, str(n), str(top)]))
        return execute("fits", dict(CASE_PARAMS, over="seq_len", seq_len=2**14)).check
    long = fits_up_to(3 * fits.LIMIT)
    assert long["max_seq_len"] == 3 * fits.LIMIT and long["search_limit"] == fits.LIMITS["seq_len"] > 3 * fits.LIMIT
    assert not fits_case.lower_bound("fits", long, "max_seq_len")
    endless = fits_up_to(10 * fits.LIMITS["seq_len"])
    assert endless["max_seq_len"] == fits.LIMITS["seq_len"] and fits_case.lower_bound("fits", endless, "max_seq_len")


# A probe that fits while n is at most the first argument, and takes n / 1000 s: past the second
# argument it sleeps far longer than the tests' time limit.
SLOW_PROBE = ("import json, os, sys, time; n, top, slow = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); "
              "time.sleep(30 if n >= slow else 0); print(json.dumps({'fits': n <= top, 'pid': os.getpid()}))")


@pytest.mark.parametrize("slow", [3, 40, 200, 1000])
def test_a_probe_too_slow_to_wait_for_ends_the_search_at_what_fit_before_it(slow):
    def probe(n):
        if n >= slow:
            raise fits.TooSlow(n, 1.0)
        return n <= 300
    search = fits.largest_fitting(probe, limit=4096)
    if slow > 512:  # memory ran out first (at 512): the search never reached a slow size
        assert search.too_slow is None and search.largest == 300
        return
    fitted = [n for n, ok in search.probed if ok]
    assert search.too_slow == search.probed[-1][0] >= slow  # the slow probe was the last
    assert search.largest == max(fitted) < slow


def test_the_prober_kills_a_probe_past_its_time_and_logs_it_as_neither_fitting_nor_not(tmp_path):
    log = probe_log.ProbeLog(tmp_path / "probes.ndjson")
    key = {"case": "x"}
    prober = fits.SubprocessProber(lambda n: [sys.executable, "-S", "-c", SLOW_PROBE, str(n), "100", "8"],
                                   timeout_s=1, on_result=lambda result: log.add(key, 10, result))
    search = fits.largest_fitting(prober, limit=4096)
    assert (search.largest, search.too_slow) == (4, 8)
    assert [(e["n"], e["fits"], e.get("too_slow")) for e in log.entries(key)] == \
        [(1, True, None), (2, True, None), (4, True, None), (8, None, True)]
    assert log.bounds(key, 10) == (4, None)  # too slow is not "does not fit", under any cap
    assert log.too_slow(key) == 8


def test_probes_side_by_side_keep_the_answers_beside_one_too_slow():
    def prober(top):
        return fits.SubprocessProber(lambda n: [sys.executable, "-S", "-c", SLOW_PROBE, str(n), top, "8"], timeout_s=1)
    with pytest.raises(fits.TooSlow) as slow:
        prober("3").many([1, 4, 16, 8])
    assert (slow.value.n, slow.value.answered) == (8, {1: True, 4: False})  # the smaller of the two too slow
    many = prober("100")
    search = fits.largest_fitting(many, probe_many=many.many, limit=4096)
    assert (search.largest, search.too_slow) == (4, 8)


def test_only_an_answer_at_a_search_limit_lower_than_todays_is_outdated():
    from types import SimpleNamespace
    from harness.cases import fits as fits_case

    def rec(over, check):  # what the rule reads of a record
        return SimpleNamespace(case="fits", params=dict(CASE_PARAMS, over=over), check=check)

    old = fits.LIMIT  # what a sequence was searched up to before LIMITS
    assert fits_case.stopped_short(rec("seq_len", {"max_seq_len": old}))
    assert not fits_case.stopped_short(rec("seq_len", {"max_seq_len": old, "search_limit": fits.LIMITS["seq_len"]}))
    assert not fits_case.stopped_short(rec("seq_len", {"max_seq_len": old - 128}))  # exact
    assert not fits_case.stopped_short(rec("seq_len", {"max_seq_len": old, "too_slow_at": old + 128}))
    assert not fits_case.stopped_short(rec("batch", {"max_batch": old}))  # today's limit for a batch
    assert not fits_case.stopped_short(rec("seq_len", {"max_seq_len": fits.LIMITS["seq_len"],
                                                       "search_limit": fits.LIMITS["seq_len"]}))
    assert not fits_case.stopped_short(rec("seq_len", {}))  # no answer (does not fit, skipped)


def test_a_what_fits_answer_stopped_by_a_slow_probe_is_a_lower_bound_and_the_next_budget_skips_it(
        fake_card, records_dir, monkeypatch):
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits, "PROBE_TIMEOUT_S", 1)
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        lambda n: [sys.executable, "-S", "-c", SLOW_PROBE, str(n), "100", "8"]))
    run = set_run(monkeypatch, records_dir, run_id="run1")
    first = execute("fits", CASE_PARAMS, run=run)
    assert first.outcome == "ok", first.reason
    assert (first.check["max_batch"], first.check["too_slow_at"], first.check["probe_timeout_s"]) == (4, 8, 1)
    assert fits_case.lower_bound("fits", first.check, "max_batch")
    second = execute("fits", dict(CASE_PARAMS, budget="24GB"), run=run)
    # The known slow size bounds the next search: it probes up to 7, never 8 again.
    assert second.check["max_batch"] == 7 and second.check["too_slow_at"] == 8
    assert fits_case.lower_bound("fits", second.check, "max_batch")
    assert max(second.check["probe_seconds"]) < 1


# A probe that fits while n is at most the first argument, and past the second is killed by
# SIGKILL, as the kernel's out-of-memory killer ends a probe whose host memory ran out.
HOST_PROBE = ("import json, os, signal, sys; n, top, host = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); "
              "n > host and os.kill(os.getpid(), signal.SIGKILL); "
              "print(json.dumps({'fits': n <= top, 'pid': os.getpid()}))")


def test_a_probe_killed_when_host_memory_ran_out_does_not_fit_under_any_cap(fake_card, records_dir, monkeypatch):
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        lambda n: [sys.executable, "-S", "-c", HOST_PROBE, str(n), "100", "12"]))
    run = set_run(monkeypatch, records_dir, run_id="run1")
    first = execute("fits", CASE_PARAMS, run=run)
    assert first.outcome == "ok", first.reason
    assert first.check["max_batch"] == 12 and first.check["host_killed_at"] == 13
    assert not fits_case.lower_bound("fits", first.check, "max_batch")  # exact, for this host
    second = execute("fits", dict(CASE_PARAMS, budget="24GB"), run=run)
    # the kill holds under the larger cap too: host memory does not grow with the budget
    assert second.check["known_not_fit"] == 13 and second.check["max_batch"] == 12
    assert second.check["host_killed_at"] == 13  # its answer too was set by the host, known from the first
    (log,) = (records_dir / "test-machine").glob("*.fits-probes.ndjson")
    killed = [json.loads(line) for line in log.read_text().splitlines() if json.loads(line).get("killed")]
    assert killed and all(e["fits"] is False and "host's memory ran out" in e["reason"] for e in killed)


def test_the_probe_names_the_memory_that_ran_short(monkeypatch):
    from harness.measure.outcomes import HOST, DoesNotFit
    from harness.workloads.search import fits_probe
    from harness.workloads.training import tricks as trick_steps
    params = dict(device="cpu", workload="lm", technique="save_on_cpu", budget="card", batch=1, micro_batch=1,
                  vocab=128, width=32, depth=2, seq_len=16)
    def failing(error):
        def make_trainer(**_):
            raise error
        return make_trainer
    monkeypatch.setattr(trick_steps, "make_trainer", failing(DoesNotFit("does not fit: kept on the host", 9, HOST)))
    host = fits_probe.probe(params, 4, GB)
    monkeypatch.setattr(trick_steps, "make_trainer", failing(MemoryError()))  # no message: named by its type
    device = fits_probe.probe(params, 4, GB)
    assert (host["fits"], host["short_of"], host["reason"]) == (False, "host", "does not fit: kept on the host")
    assert (device["fits"], device["short_of"], device["reason"]) == (False, "device", "MemoryError")


# A probe that fits while n is at most the first argument, and past the second runs short of host
# memory, as ``save_on_cpu``'s guard stops a forward that would keep too much on the host.
HOST_SHORT_PROBE = ("import json, os, sys; n, top, host = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); "
                    "print(json.dumps({'fits': n <= min(top, host), 'pid': os.getpid(), "
                    "'short_of': 'host' if n > host else 'device'}))")


def test_an_answer_the_hosts_memory_set_says_so_and_bounds_the_next_budget_of_the_run(fake_card, records_dir,
                                                                                       monkeypatch):
    from harness.cases import fits as fits_case
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        lambda n: [sys.executable, "-S", "-c", HOST_SHORT_PROBE, str(n), str(int(cap / GB)), "12"]))
    run = set_run(monkeypatch, records_dir, run_id="run1")
    first = execute("fits", CASE_PARAMS, run=run)  # 16GB: the device allows 16, the host 12
    assert first.check["max_batch"] == 12 and first.check["host_short_at"] == 13
    assert first.check["host_killed_at"] is None  # stopped by a guard, not killed
    assert fits_case.host_bound("fits", first.check, "max_batch")
    assert not fits_case.lower_bound("fits", first.check, "max_batch")  # exact, for this host
    second = execute("fits", dict(CASE_PARAMS, budget="24GB"), run=run)
    # the host holds no more under a larger cap: the run knows the answer without a probe
    assert (second.check["known_fit"], second.check["known_not_fit"]) == (12, 13)
    assert second.check["max_batch"] == 12 and second.check["probes"] == 0
    assert fits_case.host_bound("fits", second.check, "max_batch")
    # a host that fell short only past a size the device refused did not set the answer
    assert not fits_case.host_bound("fits", dict(first.check, host_short_at=14), "max_batch")
    assert not fits_case.host_bound("fits", dict(first.check, host_short_at=None), "max_batch")
    assert not fits_case.host_bound("tricks", first.check, "max_batch")
