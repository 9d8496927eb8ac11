"""What fits where fitting is not monotone in the size: the answer is the largest size that fits,
the sizes after it seen not to, whatever path the search takes to it (start, guess, hints, known
sizes, probes side by side, steps of 128), in few probes; the record keeps the smaller sizes that
failed, the tables and pages say so, and the gate compares the answer alone."""
import re
import sys
from html import unescape

import pytest
from hypothesis import given, settings, strategies as st

from conftest import render, set_run
from gate_records import fits as fits_record, write
from harness.cases import fits as fits_case
from harness.drive.runner import execute
from harness.measure.records.record import Record
from harness.report import gate, noise, tables
from harness.report.pages import build
from harness.report.model import load_rows
from harness.workloads.search import fits, probe_log

LIMIT = 4096


@st.composite
def spiky(draw):
    """(the largest size that fits, the set of sizes that fit): every size up to it fits but for
    spikes, each alone (the assumption the rule is established on) and none at 1, the smallest
    size; nothing fits past it."""
    top = draw(st.integers(0, 300))
    spikes = set(draw(st.lists(st.integers(2, max(2, top - 1)), max_size=8))) if top > 2 else set()
    spikes = {n for n in spikes if n - 1 not in spikes}
    return top, set(range(1, top + 1)) - spikes


def paths(top: int, fit: set):
    """What a search may start from: its smallest size (one that fits), a guess, another run's
    bracket, sizes this run knows (true ones: a probe's answer does not change), probes side by
    side or not."""
    sizes = st.integers(1, 2 * top + 20)
    return st.fixed_dictionaries({
        "start": st.sampled_from(sorted(fit) or [1]),
        "estimate": st.none() | sizes.map(lambda g: (lambda: g)),
        "hint": st.tuples(st.none() | sizes, st.none() | sizes),
        "known": st.lists(sizes, max_size=6).map(lambda ns: {n: n in fit for n in ns}),
        "many": st.booleans(),
        # the fits case's own path: a guess (or a hint's fit) confirmed with the sizes after it at once
        "confirm": st.booleans()})


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_whatever_its_path_the_search_answers_the_largest_size_that_fits(data):
    top, fit = data.draw(spiky())
    path = data.draw(paths(top, fit))
    start = path["start"]
    search = fits.largest_fitting(lambda n: n in fit, start=start, limit=LIMIT, estimate=path["estimate"],
                                  hint=path["hint"], known=path["known"],
                                  probe_many=(lambda sizes: [n in fit for n in sizes]) if path["many"] else None,
                                  confirm=path["confirm"])
    assert search.largest == top
    probed = [n for n, _ in search.probed]
    assert len(set(probed)) == len(probed) and not set(probed) & set(path["known"])  # none twice, none known
    seen = {n for n, ok in search.probed if ok is False} | {n for n, ok in path["known"].items() if not ok}
    assert search.failed_below == sorted(n for n in seen if start <= n < top)
    assert not set(search.failed_below) & fit


@settings(max_examples=40, deadline=None)
@given(spiky(), st.none() | st.integers(1, 400))
def test_in_steps_of_128_tokens_the_answer_is_the_largest_step_that_fits(table, guess):
    top, fit = table
    search = fits.largest_fitting(lambda n: n // 128 in fit, start=128, limit=LIMIT * 128, unit=128,
                                  estimate=None if guess is None else (lambda: guess * 128))
    assert search.largest == top * 128
    assert all(n % 128 == 0 and n // 128 not in fit for n in search.failed_below)


# The LM in bf16 autocast with checkpointing under a 16 GB cap: every batch up to 27 fits but 22 (an
# H100's probes saw 21 and 23 fit and 22 fail, the line through their peaks meets the cap past 26,
# and an H200's probes saw 26 and 27 fit and 28 fail).
LM_16GB = set(range(1, 28)) - {22}


def lm(sizes):
    return [n in LM_16GB for n in sizes]


def test_the_lm_answers_27_on_either_cards_path_and_says_22_did_not_fit():
    # the H100's path: its guess was 22, probed with its neighbours
    h100 = fits.largest_fitting(lambda n: n in LM_16GB, estimate=lambda: 22, probe_many=lm)
    assert (h100.largest, h100.failed_below) == (27, [22])
    assert h100.probed == [(1, True), (2, True), (4, True), (21, True), (22, False), (23, True), (24, True),
                           (25, True), (27, True), (31, False), (29, False), (28, False)]
    # the H200's path: its guess was 27
    h200 = fits.largest_fitting(lambda n: n in LM_16GB, estimate=lambda: 27, probe_many=lm)
    assert (h200.largest, h200.failed_below) == (27, [])
    assert h200.probed == [(1, True), (2, True), (4, True), (26, True), (27, True), (28, False), (29, False)]
    # one at a time from another run's bracket under the spike
    under = fits.largest_fitting(lambda n: n in LM_16GB, hint=(21, 22))
    assert (under.largest, under.failed_below) == (27, [22])


@pytest.mark.parametrize("boundary", [1, 2, 3, 37, 1000])
def test_a_monotone_table_gives_its_exact_boundary_and_the_two_sizes_after_it_fail(boundary):
    search = fits.largest_fitting(lambda n: n <= boundary, limit=LIMIT)
    assert (search.largest, search.failed_below) == (boundary, [])
    assert {(boundary + 1, False), (boundary + 2, False)} <= set(search.probed)


def test_the_answer_stays_within_the_limit_and_a_step_known_both_ways_fails():
    assert fits.largest_fitting(lambda n: True, limit=16, known={100: True}).largest == 16  # a fit past it
    assert fits.largest_fitting(lambda n: n <= 20, limit=16).probed == [(1, True), (2, True), (4, True), (8, True),
                                                                       (16, True)]  # nothing after the limit
    # 1000 tokens fit (step 7), 1100 failed and 1152 fit (step 9 both ways): the failure holds
    tokens = fits.largest_fitting(lambda n: n <= 1024, start=128, limit=2**20, unit=128,
                                  known={1000: True, 1100: False, 1152: True})
    assert tokens.largest == 1024 and tokens.probed == [(1024, True), (1280, False)]


def test_the_probe_log_brackets_over_its_largest_fit(tmp_path):
    key = {"technique": "bf16_autocast+checkpoint"}
    log = probe_log.ProbeLog(tmp_path / "a.ndjson")
    for n in (21, 22, 23, 24):
        log.add(key, 16, {"n": n, "fits": n in (21, 23), "peak_allocated": n})
    log.add(key, 24, {"n": 40, "fits": False})
    assert log.answers(key, 16) == {21: True, 22: False, 23: True, 24: False, 40: False}
    assert log.answers(key, 24) == {21: True, 23: True, 40: False}  # a failure under less says nothing
    assert log.bounds(key, 16) == (23, 24) and log.bounds(key, 24) == (23, 40)  # 22 bounds nothing
    assert probe_log.EarlierRuns([tmp_path / "a.ndjson"]).bracket(key, 16) == (23, 24)  # the hint a run aims at
    log.add(key, 24, {"n": 23, "fits": False})  # fit under less, failed under more (never expected): the failure holds
    assert log.answers(key, 24)[23] is False and log.bounds(key, 24) == (21, 23)


# A probe that fits at n up to its first argument but at the sizes listed in its second.
SPIKY_PROBE = ("import json, os, sys; n = int(sys.argv[1]); "
               "ok = n <= int(sys.argv[2]) and str(n) not in sys.argv[3].split(','); "
               "print(json.dumps({'fits': ok, 'pid': os.getpid()}))")
CASE_PARAMS = dict(device="cuda", workload="lm", technique="fp32", budget="16GB", over="batch", allocator="default",
                   vocab=128, width=32, depth=2, seq_len=16)


def test_the_record_keeps_the_smaller_size_that_did_not_fit(records_dir, monkeypatch):
    monkeypatch.setattr(fits_case, "_card", lambda devices: (24 * 2**30, 24 * 2**30))  # one probe at a time
    monkeypatch.setattr(fits, "probe_argv", lambda config, cap, over: (
        lambda n: [sys.executable, "-S", "-c", SPIKY_PROBE, str(n), "9", "8"]))
    rec = execute("fits", CASE_PARAMS, run=set_run(monkeypatch, records_dir, run_id="run1"))
    assert rec.outcome == "ok", rec.reason
    # 1, 2 and 4 fit, 8 does not, 6 and 7 do, and so does 9, probed after 8: then 18, 13, 11 and 10 fail
    assert (rec.check["max_batch"], rec.check["failed_below"], rec.check["probes"]) == (9, [8], 11)
    assert fits_case.not_monotone("fits", rec.check, "max_batch") == "8 did not fit"
    older = {k: v for k, v in rec.check.items() if k != "failed_below"}  # filed before the field
    assert fits_case.not_monotone("fits", older, "max_batch") is None
    assert fits_case.not_monotone("fits", dict(rec.check, failed_below=[]), "max_batch") is None
    assert fits_case.not_monotone("tricks", rec.check, "max_batch") is None


def spiked(budget: str, answer: int, **check) -> dict:
    """A what-fits record whose check holds ``check`` beside its answer."""
    d = fits_record(budget, answer)
    d["check"] = {**d["check"], **check}
    return d


def fit(answer: int, **check) -> Record:
    return Record.from_dict(spiked("24GB", answer, **check))


def test_the_tables_say_which_smaller_size_did_not_fit_and_mark_an_older_record_searched_before_the_rule(tmp_path):
    machine = tmp_path / "results" / "records" / "nvidia-h100-80gb-hbm3-x1"
    machine.mkdir(parents=True)
    write(machine / "a.jsonl", [spiked("16GB", 27, failed_below=[20, 22]), spiked("24GB", 40)])
    text, notes = render(load_rows(tmp_path / "results"), "fits", ["technique", "machine"], "budget",
                         ["check:max_batch"])
    assert "| 27 (20, 22 did not fit)≁ | 40△ |" in text  # 40's record keeps no failures: filed before the rule
    assert any(n.startswith("≁ not monotone") and "the two after it seen not to" in n for n in notes)
    assert any(n.startswith("△ searched before an answer needed the two sizes after it") for n in notes)


def test_the_gate_compares_the_answer_and_not_the_sizes_that_failed_under_it():
    floors = noise.Floors([])
    same = gate.compare([fit(27, failed_below=[22])], [fit(27, failed_below=[])], floors)
    assert [(r.what, r.verdict) for r in same.rows] == [("answer", "same answer")]
    more = gate.compare([fit(21)], [fit(27, failed_below=[22])], floors)  # a record filed before the field
    assert [(r.what, r.verdict) for r in more.rows] == [("answer", "fits more")]


def test_the_fits_page_says_which_smaller_size_did_not_fit_in_the_tables_words(tmp_path):
    machine = tmp_path / "results" / "records" / "nvidia-h100-80gb-hbm3-x1"
    machine.mkdir(parents=True)
    write(machine / "a.jsonl", [spiked("16GB", 27, failed_below=[22]), spiked("24GB", 40)])
    (tmp_path / "pages").mkdir()
    build.write_pages(tmp_path / "results", tmp_path / "pages")
    page = (tmp_path / "pages" / "fits.html").read_text()
    table = re.search(r'id="answers-table">(.*?)</table>', page, re.S).group(1)
    spikes = re.findall(r'data-kind="answer">(\d+)</a>.*?<span class="not-monotone" title="([^"]*)">\(([^<]*)\)', table)
    assert [(int(n), unescape(failed)) for n, _, failed in spikes] == [(27, "22 did not fit")]
    assert unescape(spikes[0][1]) == tables.NOTES[tables.NOT_MONOTONE][2:]
