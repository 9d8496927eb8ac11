"""The gate as ``harness compare`` calls it: every round of each side judged, floors from BASE's
rounds. A shift of every NEW round past BASE's scatter fails; one bad round does not decide."""
from pathlib import Path

import pytest

from gate_records import H100, H200, record, write
from harness.report import gate, noise

BASE_ROUNDS = (0.0100, 0.01001, 0.00999)  # three rounds that agree within 0.2%


def side(folder: Path, medians, commit: str, *, outcome: str = "ok", traced_first_only: bool = False) -> Path:
    """One side of a compare: a round file per median, the rounds in the order run. ``traced_first_only``:
    as a compare runs them, only the first round read the GPU-busy share."""
    folder.mkdir(parents=True)
    for r, median in enumerate(medians, 1):
        rec = record(median=median, n=20, run=f"20990101T000000-abcdef-r{r}", created=float(r), commit=commit)
        if traced_first_only and r > 1:
            rec["gpu_busy"] = {"source": "none", "reason": "cupti: not traced in this run (no extra step)"}
        if outcome != "ok" and r == len(medians):
            rec = {**rec, "outcome": outcome, "reason": "planted", "timing": None}
        write(folder / f"{commit}-r{r}.jsonl", [rec])
    return folder


def judged(tmp_path, new_medians, **kw) -> tuple[int, str]:
    base = side(tmp_path / "base", BASE_ROUNDS, "aaaaaaaa")
    new = side(tmp_path / "new", new_medians, "bbbbbbbb", **kw)
    return gate.gate(base, new, history=base, all_rounds=True)


def test_two_percent_on_every_new_round_fails_against_tight_base_rounds(tmp_path):
    rc, text = judged(tmp_path, [m * 1.02 for m in BASE_ROUNDS])
    assert rc == 1 and "FAIL: 1 regression(s) (1 slower)" in text
    assert "1.020" in text and "1.5% w" in text  # the floor BASE's rounds taught, at its least


def test_every_new_round_a_percent_apart_from_tight_base_rounds_is_no_regression(tmp_path):
    # Fresh processes of one step can differ so; three tight BASE rounds cannot show it.
    rc, text = judged(tmp_path, [m * 1.012 for m in BASE_ROUNDS])
    assert rc == 0 and "PASS: 0 regression(s) in 1 case(s) compared" in text and "1.012" in text


def test_the_readme_states_the_sessions_least_floor():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert f"against BASE's noise (at least {noise.SESSION_MIN_FLOOR:.1%};" in readme


def test_one_noisy_new_round_among_three_does_not_decide(tmp_path):
    # The noisy round is the last: the latest round alone would read 15% slower and fail.
    rc, text = judged(tmp_path, [0.01, 0.010005, 0.0115])
    assert rc == 0 and "PASS: 0 regression(s) in 1 case(s) compared" in text


def test_a_against_a_passes(tmp_path):
    rc, text = judged(tmp_path, [0.010005, 0.009995, 0.01001])
    assert rc == 0 and "PASS" in text and "rounds: each side's time is the median of its rounds' medians" in text


def test_a_round_that_did_not_end_ok_stands_for_its_side(tmp_path):
    rc, text = judged(tmp_path, BASE_ROUNDS, outcome="failed")
    assert rc == 1 and "ok -> failed: planted" in text


def test_the_plain_gate_still_reads_each_sides_latest_record(tmp_path):
    base = side(tmp_path / "base", BASE_ROUNDS, "aaaaaaaa")
    new = side(tmp_path / "new", [0.01, 0.010005, 0.0115], "bbbbbbbb")
    rc, text = gate.gate(base, new, history=base)
    assert rc == 1 and "slower" in text


def test_a_case_whose_later_rounds_were_not_traced_is_judged_by_its_first_rounds_busy_share(tmp_path):
    """A compare traces the GPU-busy share in each side's first round only. The case stays GPU-bound,
    its floor capped at that class's default (5%) where BASE's rounds scatter more: read as "busy
    unknown" (10%), an 8% slowdown of every round would pass."""
    scattered = (0.0100, 0.0107, 0.0100)
    base = side(tmp_path / "base", scattered, "aaaaaaaa", traced_first_only=True)
    new = side(tmp_path / "new", [m * 1.08 for m in (0.0100, 0.0100, 0.0100)], "bbbbbbbb", traced_first_only=True)
    rc, text = gate.gate(base, new, history=base, all_rounds=True)
    assert rc == 1 and "FAIL: 1 regression(s) (1 slower)" in text and "5.0% d" in text


def test_the_rounds_busy_share_is_the_traced_one_before_nvmls_coarser_reading():
    from harness.measure.records.record import Record
    from harness.report import rounds
    shares = [{"fraction": 0.98, "source": "cupti"}, {"fraction": 0.61, "source": "nvml"},
              {"source": "none", "reason": "not traced"}]
    recs = [Record.from_dict(record(run=f"r{r}", created=float(r), gpu_busy=b)) for r, b in enumerate(shares, 1)]
    assert rounds.one(recs).gpu_busy == shares[0]
    assert rounds.one(recs[1:]).gpu_busy == shares[1]  # no traced round: NVML's
    assert rounds.one(recs[2:] * 2).gpu_busy == shares[2]  # none read: the newest round's reason


# -- a host-bound step's floor in a compare: at least the scatter earlier compares saw on one host ---------------

PAGEABLE = {"case": "pageable", "params": {"direction": "h2d", "size_mib": 256}, "work": {"h2d_bytes": 256 * 2**20}}
LUMPY_BASE, LUMPY_NEW = (0.0316, 0.0299, 0.0301), (0.0361, 0.0289, 0.0371)  # one code: processes land in two speeds


def rounds_of(folder: Path, medians, commit: str, *, gpu=H100, t0=0.0, **fields) -> Path:
    """One side's rounds of one case, a file per round."""
    folder.mkdir(parents=True)
    for r, median in enumerate(medians, 1):
        rec = record(median=median, n=20, run=f"20990101T000000-abcdef-r{r}", created=t0 + r, commit=commit, gpu=gpu,
                     **fields)
        write(folder / f"{commit}-r{r}.jsonl", [rec])
    return folder


def earlier(root: Path, name: str, base_medians, new_medians, *, new_commit="aaaaaaaa", gpu=H100, **fields) -> None:
    rounds_of(root / "kind" / name / "base", base_medians, "aaaaaaaa", gpu=gpu, **fields)
    rounds_of(root / "kind" / name / "new", new_medians, new_commit, gpu=gpu, t0=10.0, **fields)


def lumpy(tmp_path, prior=None, fields=PAGEABLE, where=None) -> tuple[int, str]:
    here = where or tmp_path / "judged"
    base = rounds_of(here / "base", LUMPY_BASE, "cccccccc", t0=100.0, **fields)
    new = rounds_of(here / "new", LUMPY_NEW, "cccccccc", t0=110.0, **fields)
    return gate.gate(base, new, history=base, all_rounds=True, prior=prior)


def test_a_host_bound_step_takes_the_scatter_earlier_compares_saw_within_one_host(tmp_path):
    rc, text = lumpy(tmp_path)
    assert rc == 1 and "11.3% w" in text  # three rounds of BASE alone teach too tight a floor: a false flag
    prior = tmp_path / "prior"
    earlier(prior, "aa", (0.0314, 0.0338, 0.0331), (0.0354, 0.0361, 0.0374), **PAGEABLE)
    rc, text = lumpy(tmp_path / "second", prior=prior)
    assert rc == 0 and "PASS" in text and "25.5% w" in text


def test_a_gpu_bound_step_keeps_its_sessions_floor_whatever_earlier_compares_saw(tmp_path):
    prior = tmp_path / "prior"
    earlier(prior, "aa", (0.0314, 0.0338, 0.0331), (0.0354, 0.0361, 0.0374))  # device_copy, busy 0.99
    base = side(tmp_path / "base", BASE_ROUNDS, "aaaaaaaa")
    new = side(tmp_path / "new", [m * 1.03 for m in BASE_ROUNDS], "bbbbbbbb")
    rc, text = gate.gate(base, new, history=base, all_rounds=True, prior=prior)
    assert rc == 1 and "1.5% w" in text


def test_only_one_codes_rounds_teach_the_scatter(tmp_path):
    """A planted NEW's rounds are its change, not noise: an A/B compare lends only BASE's."""
    prior = tmp_path / "prior"
    earlier(prior, "ab", (0.0301, 0.0302, 0.0300), (0.0450, 0.0460, 0.0455), new_commit="dddddddd", **PAGEABLE)
    assert lumpy(tmp_path, prior=prior)[0] == 1


def test_the_compare_judged_is_not_its_own_earlier_compare(tmp_path):
    prior = tmp_path / "prior"
    rc, _ = lumpy(tmp_path, prior=prior, where=prior / "kind" / "judged")
    assert rc == 1


def test_a_kind_no_compare_ran_the_step_on_learns_from_another_kinds(tmp_path):
    prior = tmp_path / "prior"
    earlier(prior, "aa-h200", (0.0314, 0.0338, 0.0331), (0.0354, 0.0361, 0.0374), gpu=H200, **PAGEABLE)
    rc, text = lumpy(tmp_path, prior=prior)
    assert rc == 0 and "25.5% w" in text


def test_every_earlier_compare_counts_and_the_judged_one_is_passed_over_not_the_rest(tmp_path):
    prior = tmp_path / "prior"
    wide, tight = ((0.030, 0.045, 0.033), (0.041, 0.036, 0.030)), ((0.0300, 0.0301, 0.0302), (0.0301, 0.0300, 0.0302))
    earlier(prior, "b-wide", *wide, **PAGEABLE)
    earlier(prior, "c-tight", *tight, host="host-b", **PAGEABLE)  # the last folder read: alone it would fail the case
    assert lumpy(tmp_path / "one", prior=prior)[0] == 0
    assert lumpy(tmp_path / "two", prior=prior, where=prior / "kind" / "a-judged")[0] == 0  # read first, skipped


def test_earlier_compares_that_scattered_less_than_a_percent_leave_the_sessions_least_floor(tmp_path):
    """Their floor is held to the session's least (1.5%), not the history's (2%): they only ever raise it."""
    prior = tmp_path / "prior"
    earlier(prior, "aa", (0.0300, 0.03005, 0.0301), (0.03002, 0.03004, 0.03008), **PAGEABLE)
    tight = (0.0300, 0.03001, 0.03002)
    base = rounds_of(tmp_path / "judged" / "base", tight, "cccccccc", t0=100.0, **PAGEABLE)
    new = rounds_of(tmp_path / "judged" / "new", [m * 1.018 for m in tight], "dddddddd", t0=110.0, **PAGEABLE)
    rc, text = gate.gate(base, new, history=base, all_rounds=True, prior=prior)
    assert rc == 1 and "1.5% w" in text


def test_another_cases_scatter_is_not_borrowed(tmp_path):
    prior = tmp_path / "prior"
    other = {**PAGEABLE, "params": {"direction": "d2h", "size_mib": 256}}
    earlier(prior, "aa-h200", (0.0314, 0.0338, 0.0331), (0.0354, 0.0361, 0.0374), gpu=H200, **other)
    assert lumpy(tmp_path, prior=prior)[0] == 1


def test_without_an_earlier_compare_a_host_bound_step_keeps_the_sessions_floor():
    from harness.measure.records.record import Record
    recs = [Record.from_dict(record(median=m, n=20, run=f"r{r}", created=float(r), **PAGEABLE))
            for r, m in enumerate(LUMPY_BASE, 1)]
    key = noise.key_of(recs[0])
    own = noise.SessionFloors(recs).floor(key, "host-bound", True)
    assert own.how == "learned within 1 host(s)" and round(own.fraction, 3) == 0.113
    assert noise.SessionFloors(recs, prior=noise.Floors([])).floor(key, "host-bound", True) == own


def test_harness_gate_rounds_judges_a_compares_folder_again_as_the_compare_would(tmp_path, monkeypatch, capsys):
    from harness.drive.commands import cli
    folder = tmp_path / "compare"
    base = rounds_of(folder / "base", LUMPY_BASE, "cccccccc", **PAGEABLE)
    new = rounds_of(folder / "new", LUMPY_NEW, "cccccccc", t0=10.0, **PAGEABLE)
    assert cli.main(["gate", str(base), str(new), "--rounds"]) == 1  # no earlier compare: BASE's rounds alone
    assert "11.3% w" in capsys.readouterr().out
    prior = tmp_path / "committed"
    earlier(prior, "aa", (0.0314, 0.0338, 0.0331), (0.0354, 0.0361, 0.0374), **PAGEABLE)
    monkeypatch.setattr(gate, "COMPARES", prior)
    assert cli.main(["gate", str(base), str(new), "--rounds"]) == 0
    assert "25.5% w" in capsys.readouterr().out
    assert cli.main(["gate", str(base), str(new), "--history", str(base)]) == 1  # the plain gate: latest rounds


# -- SessionFloors and the earlier compares' rounds, read directly ------------------------------------------------

def pageable(medians, *, gpu=H100, gpus=1, host="host-a", t0=0.0) -> list:
    import dataclasses

    from conftest import fake_devices
    from gate_records import CARD
    from harness.measure.records.record import Record
    recs = [Record.from_dict(record(median=m, n=20, run=f"20990101T000000-abcdef-r{r}", created=t0 + r, gpu=gpu,
                                    host=host, **PAGEABLE)) for r, m in enumerate(medians, 1)]
    if gpus == 1:
        return recs
    env = dataclasses.replace(recs[0].environment, devices=fake_devices(gpu, count=gpus, total=CARD[gpu]))
    return [dataclasses.replace(r, environment=env) for r in recs]


def test_where_no_compare_ran_the_step_on_its_kind_the_widest_scatter_on_another_kind_is_taken_and_named():
    """The scatter is the host's, so the widest seen anywhere stands; a kind that ran it once teaches nothing."""
    base = pageable(LUMPY_BASE)
    key = noise.key_of(base[0])
    narrow = pageable((0.0300, 0.0330, 0.0310), gpu=H200)  # read first, and its kind's name sorts last
    wide = pageable((0.0300, 0.0450, 0.0330), gpu=None)
    once = pageable((0.0300,), gpu=H200, gpus=2)
    prior = noise.Floors(narrow + once + wide)
    floor = noise.SessionFloors(base, prior=prior).floor(key, "host-bound", True)
    widest = prior.within(noise.key_of(wide[0]), "host-bound")
    assert floor == noise.Floor(widest.fraction, "widest within 1 host(s) of earlier compares on cpu-test-cpu", True)
    assert floor.fraction > prior.within(noise.key_of(narrow[0]), "host-bound").fraction


def test_on_its_own_kind_the_earlier_compares_floor_is_named_as_theirs_and_learned():
    base = pageable(LUMPY_BASE)
    key = noise.key_of(base[0])
    prior = noise.Floors(pageable((0.0314, 0.0338, 0.0331, 0.0354, 0.0361, 0.0374), host="host-b"))
    floor = noise.SessionFloors(base, prior=prior).floor(key, "host-bound", True)
    assert floor.learned is True and floor.how == "widest within 1 host(s) of earlier compares"
    assert floor.fraction == prior.within(key, "host-bound").fraction > 0.2


def test_a_steadier_host_filed_later_does_not_narrow_what_another_host_showed():
    """The floor must not fall as compares are filed: a verdict judged again later stays what it was."""
    base = pageable(LUMPY_BASE)
    key = noise.key_of(base[0])
    lumpy_host = pageable((0.0314, 0.0338, 0.0331, 0.0354, 0.0361, 0.0374), host="host-b")
    steady_host = pageable((0.0300, 0.0301, 0.0300, 0.0301, 0.0300, 0.0301), host="host-c", t0=20.0)
    alone = noise.SessionFloors(base, prior=noise.Floors(lumpy_host)).floor(key, "host-bound", True)
    both = noise.SessionFloors(base, prior=noise.Floors(lumpy_host + steady_host)).floor(key, "host-bound", True)
    assert both.fraction == alone.fraction > 0.2 and both.how == "widest within 2 host(s) of earlier compares"
    averaged = noise.Floors(lumpy_host + steady_host).within(key, "host-bound")
    assert averaged.fraction < alone.fraction and averaged.how == "learned within 2 host(s)"  # the plain gate's


def test_where_earlier_compares_saw_no_more_scatter_than_the_session_the_sessions_own_floor_stands():
    base = pageable(LUMPY_BASE)
    key = noise.key_of(base[0])
    same = noise.SessionFloors(base, prior=noise.Floors(pageable(LUMPY_BASE, host="host-b")))
    floor = same.floor(key, "host-bound", True)
    assert floor.how == "learned within 1 host(s)" and floor == noise.SessionFloors(base).floor(key, "host-bound", True)


def learned(root) -> list[float]:
    """The run medians the floors of the compares under ``root`` learned from."""
    floors = noise.compare_floors(root)
    return sorted(m for hosts in floors.runs.values() for medians in hosts.values() for m in medians)


def test_earlier_compares_are_read_whole_without_an_exclusion_and_again_once_a_round_is_added(tmp_path):
    earlier(tmp_path, "aa", (0.0314, 0.0338), (0.0354,), **PAGEABLE)
    assert learned(tmp_path) == pytest.approx([0.0314, 0.0338, 0.0354])
    rounds_of(tmp_path / "kind" / "bb" / "base", (0.0400,), "aaaaaaaa", **PAGEABLE)
    extra = tmp_path / "kind" / "aa" / "new" / "aaaaaaaa-r9.jsonl"
    write(extra, [record(median=0.0390, n=20, run="20990101T000000-abcdef-r9", created=19.0, commit="aaaaaaaa",
                         **PAGEABLE)])
    medians = learned(tmp_path)
    assert medians == pytest.approx([0.0314, 0.0338, 0.0354, 0.039, 0.04])
    assert learned(tmp_path / "none") == []


def test_a_round_file_swapped_for_another_of_its_size_and_time_is_read_again(tmp_path):
    import os

    def padded(path: Path) -> Path:  # every round file one size
        path.write_text(path.read_text().rstrip("\n").ljust(1999) + "\n")
        return path
    earlier(tmp_path, "aa", (0.0314,), (0.0354,), **PAGEABLE)
    old = padded(tmp_path / "kind" / "aa" / "new" / "aaaaaaaa-r1.jsonl")
    assert learned(tmp_path) == pytest.approx([0.0314, 0.0354])
    stat = old.stat()
    new = padded(write(old.with_name("aaaaaaaa-r2.jsonl"), [record(
        median=0.0355, n=20, run="20990101T000000-abcdef-r2", created=12.0, commit="aaaaaaaa", **PAGEABLE)]))
    old.unlink()
    os.utime(new, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert learned(tmp_path) == pytest.approx([0.0314, 0.0355])


def test_a_floor_learned_across_hosts_is_held_to_the_least_it_was_given():
    tight = [*pageable((0.03000, 0.03001), host="host-a"), *pageable((0.03001, 0.03002), host="host-b", t0=5.0)]
    key = noise.key_of(tight[0])
    assert noise.Floors(tight, least=0.003).across(key, "host-bound").fraction < noise.MIN_FLOOR
    assert noise.Floors(tight).across(key, "host-bound").fraction == noise.MIN_FLOOR
