"""What fits where fitting is not monotone in the size: the answer is the largest size at which it
and every size below it fit, whatever path the search takes to it (start, guess, hints, known
sizes, probes side by side, steps of 128), in few probes; the record keeps the larger sizes that
fitted, the tables and pages say so, and the gate compares the answer alone."""
import re
import sys
from html import unescape

import pytest
from hypothesis import given, settings, strategies as st

from conftest import render, set_run
from gate_records import fits as fits_record, write
from harness.cases import fits as fits_case
from harness.drive.runner import execute
from harness.measure.record import Record
from harness.report import gate, noise, tables
from harness.report.pages import build
from harness.report.pages.model import load_rows
from harness.workloads import fits, probe_log

LIMIT = 4096
FLICKER = 2  # the longest run of fits between two failures the rule is stated to see past (a lone fit, a pair)


@st.composite
def flickering(draw):
    """(first failure, the set of sizes that fit): every size under the first failure fits; past
    it, a band where fitting flickers, each run of fits in it at most ``FLICKER`` long (the
    assumption the rule is established on), then nothing fits."""
    first = draw(st.integers(1, 300))
    band = draw(st.lists(st.booleans(), max_size=12))
    fit = set(range(1, first))
    run = 0
    for n, ok in enumerate(band, start=first + 1):
        run = run + 1 if ok else 0
        if ok and run <= FLICKER:
            fit.add(n)
        else:
            run = 0
    return first, fit


def paths(first: int, fit: set):
    """What a search may start from: its smallest size, a guess, another run's bracket, sizes this
    run knows (true ones: a probe's answer does not change), probes side by side or not."""
    sizes = st.integers(1, 2 * first + 20)
    return st.fixed_dictionaries({
        "start": st.integers(1, first + 14),
        "estimate": st.none() | sizes.map(lambda g: (lambda: g)),
        "hint": st.tuples(st.none() | sizes, st.none() | sizes),
        "known": st.lists(sizes, max_size=6).map(lambda ns: {n: n in fit for n in ns}),
        "many": st.booleans()})


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_whatever_its_path_the_search_answers_the_size_under_the_first_failure(data):
    first, fit = data.draw(flickering())
    path = data.draw(paths(first, fit))
    start = path["start"]
    search = fits.largest_fitting(lambda n: n in fit, start=start, limit=LIMIT, estimate=path["estimate"],
                                  hint=path["hint"], known=path["known"],
                                  probe_many=(lambda sizes: [n in fit for n in sizes]) if path["many"] else None)
    under = min(n for n in range(start, LIMIT) if n not in fit) - 1  # under the first failure from the start
    assert search.largest == (under if under >= start else 0)
    probed = [n for n, _ in search.probed]
    assert len(set(probed)) == len(probed) and not set(probed) & set(path["known"])  # none twice, none known
    seen = {n for n, ok in search.probed if ok} | {n for n, ok in path["known"].items() if ok}
    assert search.also_fit == sorted(n for n in seen if n > search.largest and n >= start)
    assert all(n > under + 1 for n in search.also_fit)  # each past a failure


@settings(max_examples=40, deadline=None)
@given(flickering(), st.none() | st.integers(1, 400))
def test_in_steps_of_128_tokens_the_answer_is_the_step_under_the_first_failing_step(table, guess):
    first, fit = table
    search = fits.largest_fitting(lambda n: n // 128 in fit, start=128, limit=LIMIT * 128, unit=128,
                                  estimate=None if guess is None else (lambda: guess * 128))
    assert search.largest == (first - 1) * 128
    assert all(n % 128 == 0 for n in search.also_fit) and all(n // 128 in fit for n in search.also_fit)


# The LM in bf16 autocast with checkpointing under a 16 GB cap, as an H100's probes found it: every
# batch up to 21 fits, 22 does not, 23 does, 24 and up do not.
LM_16GB = set(range(1, 22)) | {23}


def test_the_lms_answer_is_21_from_either_side_and_says_23_fitted():
    def many(sizes):
        return [n in LM_16GB for n in sizes]
    # side by side, the guess 22 and its neighbours at once, as the H100's search went
    beside = fits.largest_fitting(lambda n: n in LM_16GB, estimate=lambda: 22, probe_many=many)
    assert (beside.largest, beside.also_fit) == (21, [23])
    assert beside.probed == [(1, True), (2, True), (4, True), (21, True), (22, False), (23, True), (19, True),
                             (20, True)]
    # one at a time from another run's bracket above the flicker: the check under 23 finds 22
    above = fits.largest_fitting(lambda n: n in LM_16GB, hint=(23, 24))
    assert (above.largest, above.also_fit) == (21, [23])
    assert above.probed == [(23, True), (24, False), (21, True), (22, False), (19, True), (20, True)]


@pytest.mark.parametrize("boundary", [1, 2, 3, 37, 1000])
def test_a_monotone_table_gives_its_exact_boundary_and_nothing_above(boundary):
    search = fits.largest_fitting(lambda n: n <= boundary, limit=LIMIT)
    assert (search.largest, search.also_fit) == (boundary, [])
    assert (boundary + 1, False) in search.probed
    assert all((n, True) in search.probed for n in range(max(1, boundary - fits.CONFIRM_BELOW), boundary + 1))


def test_the_answer_stays_within_the_limit_and_a_step_known_both_ways_fails():
    assert fits.largest_fitting(lambda n: True, limit=16, known={100: False}).largest == 16  # a failure past it
    # 900 tokens failed (step 8 and up do not fit), 1024 fit: one step, both ways; the failure holds
    tokens = fits.largest_fitting(lambda n: True, start=128, limit=2**20, unit=128, known={900: False, 1024: True})
    assert tokens.largest == 896 and tokens.also_fit == []


def test_the_probe_log_brackets_under_its_first_failure(tmp_path):
    key = {"technique": "bf16_autocast+checkpoint"}
    log = probe_log.ProbeLog(tmp_path / "a.ndjson")
    for n in (21, 22, 23):
        log.add(key, 16, {"n": n, "fits": n != 22, "peak_allocated": n})
    log.add(key, 24, {"n": 40, "fits": False})
    assert log.answers(key, 16) == {21: True, 22: False, 23: True, 40: False}
    assert log.answers(key, 24) == {21: True, 23: True, 40: False}  # a failure under less says nothing
    assert log.bounds(key, 16) == (21, 22) and log.bounds(key, 24) == (23, 40)
    assert probe_log.EarlierRuns([tmp_path / "a.ndjson"]).bracket(key, 16) == (21, 22)  # the hint a run aims at
    log.add(key, 24, {"n": 21, "fits": False})  # fit under less, failed under more (never expected): the failure holds
    assert log.answers(key, 16)[21] is False and log.answers(key, 24)[21] is False and log.bounds(key, 16) == (None, 21)


# A probe that fits at n up to its first argument and at each size listed in its second.
FLICKER_PROBE = ("import json, os, sys; n = int(sys.argv[1]); "
                 "ok = n <= int(sys.argv[2]) or str(n) in sys.argv[3].split(','); "
                 "print(json.dumps({'fits': ok, 'pid': os.getpid()}))")
CASE_PARAMS = dict(device="cuda", workload="lm", technique="fp32", budget="16GB", over="batch", allocator="default",
                   vocab=128, width=32, depth=2, seq_len=16)


def test_the_record_keeps_the_larger_size_that_fitted(records_dir, monkeypatch):
    monkeypatch.setattr(fits_case, "_card", lambda devices: (24 * 2**30, 24 * 2**30))  # one probe at a time
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        lambda n: [sys.executable, "-S", "-c", FLICKER_PROBE, str(n), "5", "8"]))
    rec = execute("fits", CASE_PARAMS, run=set_run(monkeypatch, records_dir, run_id="run1"))
    assert rec.outcome == "ok", rec.reason
    assert (rec.check["max_batch"], rec.check["also_fit"]) == (5, [8])  # 1, 2, 4, 8, 16, 12, 10, 9, then 6
    assert fits_case.not_monotone("fits", rec.check, "max_batch") == "8 fitted where 6 did not"
    assert fits_case.not_monotone("fits", dict(rec.check, too_slow_at=9), "max_batch") == "8 fitted too"
    older = {k: v for k, v in rec.check.items() if k != "also_fit"}  # filed before the field
    assert fits_case.not_monotone("fits", older, "max_batch") is None
    assert fits_case.not_monotone("fits", dict(rec.check, also_fit=[]), "max_batch") is None
    assert fits_case.not_monotone("tricks", rec.check, "max_batch") is None


def flicker(budget: str, answer: int, **check) -> dict:
    """A what-fits record whose check holds ``check`` beside its answer."""
    d = fits_record(budget, answer)
    d["check"] = {**d["check"], **check}
    return d


def fit(answer: int, **check) -> Record:
    return Record.from_dict(flicker("24GB", answer, **check))


def test_the_tables_say_which_larger_size_fitted_and_older_records_read_as_before(tmp_path):
    machine = tmp_path / "results" / "records" / "nvidia-h100-80gb-hbm3-x1"
    machine.mkdir(parents=True)
    write(machine / "a.jsonl", [flicker("16GB", 21, also_fit=[23]), flicker("24GB", 40)])
    text, notes = render(load_rows(tmp_path / "results"), "fits", ["technique", "machine"], "budget",
                         ["check:max_batch"])
    assert "| 21 (23 fitted where 22 did not)≁ | 40 |" in text
    assert any(n.startswith("≁ not monotone") and "every size below it fit" in n for n in notes)


def test_the_gate_compares_the_answer_and_not_the_sizes_that_also_fitted():
    floors = noise.Floors([])
    same = gate.compare([fit(21, also_fit=[23])], [fit(21, also_fit=[])], floors)
    assert [(r.what, r.verdict) for r in same.rows] == [("answer", "same answer")]
    less = gate.compare([fit(27)], [fit(21, also_fit=[23, 27])], floors)  # a record filed before the field
    assert [(r.what, r.verdict) for r in less.rows] == [("answer", "fits less: batch 27 -> 21")]


def test_the_fits_page_says_which_larger_size_fitted_in_the_tables_words(tmp_path):
    machine = tmp_path / "results" / "records" / "nvidia-h100-80gb-hbm3-x1"
    machine.mkdir(parents=True)
    write(machine / "a.jsonl", [flicker("16GB", 21, also_fit=[23]), flicker("24GB", 40)])
    (tmp_path / "pages").mkdir()
    build.write_pages(tmp_path / "results", tmp_path / "pages")
    page = (tmp_path / "pages" / "fits.html").read_text()
    table = re.search(r'id="answers-table">(.*?)</table>', page, re.S).group(1)
    flickers = re.findall(r'data-kind="answer">(\d+)</a>.*?<span class="not-monotone" title="([^"]*)">\(([^<]*)\)', table)
    assert [(int(n), unescape(also)) for n, _, also in flickers] == [(21, "23 fitted where 22 did not")]
    assert unescape(flickers[0][1]) == tables.NOTES[tables.NOT_MONOTONE][2:]
