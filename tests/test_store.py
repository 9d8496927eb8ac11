"""The record store on its own: a torn line is set aside and never lost, every unreadable line is
named by file and line, a run is found again by its id (or refused naming the fix), and a run's
owner is told from a process that merely reused its pid."""
import functools
import json
import os
import sys

import psutil
import pytest

from gate_records import record, write
from harness.measure.guards import inputs
from harness.measure.records import store
from harness.measure.records.record import Record
from harness.measure.records.store import (RecordStore, RunContext, StoreError, append_line, latest, load_any,
                                           load_file, read_lines, record_key, repair, this_interpreters, write_records)


def text(path):
    return path.read_bytes().decode()


# -- repair and append: what a kill mid-write leaves ------------------------------------------------

def test_a_torn_last_line_is_moved_aside_and_the_next_record_starts_a_line_of_its_own(tmp_path):
    f = tmp_path / "run.jsonl"
    f.write_bytes(b'{"a": 1}\n{"b": 2, "c"')
    append_line(f, {"z": 3, "d": 4})
    assert text(f) == '{"a": 1}\n{"d": 4, "z": 3}\n'  # keys sorted, one object a line
    assert text(tmp_path / "run.jsonl.torn") == '{"b": 2, "c"\n'


def test_torn_fragments_of_several_kills_are_all_kept(tmp_path):
    f = tmp_path / "run.jsonl"
    f.write_bytes(b'{"a": 1}\n{"b"')
    repair(f)
    f.write_bytes(f.read_bytes() + b'[1, 2')
    repair(f)
    assert text(f) == '{"a": 1}\n'
    assert text(tmp_path / "run.jsonl.torn") == '{"b"\n[1, 2\n'


def test_a_whole_last_line_that_lacks_only_its_newline_is_kept(tmp_path):
    f = tmp_path / "run.jsonl"
    f.write_bytes(b'{"a": 1}\n{"b": 2}')
    repair(f)
    assert text(f) == '{"a": 1}\n{"b": 2}\n'
    assert not (tmp_path / "run.jsonl.torn").exists()


def test_a_first_line_cut_short_is_moved_aside_leaving_an_empty_file(tmp_path):
    f = tmp_path / "run.jsonl"
    f.write_bytes(b'{"a": ')
    repair(f)
    assert f.read_bytes() == b""
    assert text(tmp_path / "run.jsonl.torn") == '{"a": \n'


@pytest.mark.parametrize("tail", [b"[1, 2]", b'"text"', b"17"])
def test_a_last_line_that_parses_but_is_no_object_is_moved_aside(tmp_path, tail):
    f = tmp_path / "run.jsonl"
    f.write_bytes(b'{"a": 1}\n' + tail)
    repair(f)
    assert text(f) == '{"a": 1}\n'
    assert (tmp_path / "run.jsonl.torn").read_bytes() == tail + b"\n"


@pytest.mark.parametrize("content", [None, b"", b'{"a": 1}\n', b'{"a": 1}\n{"b": 2}\n'])
def test_a_missing_empty_or_whole_file_is_left_as_it_is(tmp_path, content):
    f = tmp_path / "run.jsonl"
    if content is not None:
        f.write_bytes(content)
    repair(f)
    assert f.exists() == (content is not None)
    if content is not None:
        assert f.read_bytes() == content
    assert not (tmp_path / "run.jsonl.torn").exists()


def test_repair_reads_only_the_last_line_s_worth_of_a_long_file(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_LINE_BYTES", 16)
    f = tmp_path / "run.jsonl"
    f.write_bytes(b'{"first": 111111}\n{"x": 1}\n{"torn')
    repair(f)
    assert text(f) == '{"first": 111111}\n{"x": 1}\n'
    assert text(tmp_path / "run.jsonl.torn") == '{"torn\n'


def test_a_last_line_longer_than_any_record_is_kept_whole_not_cut(tmp_path, monkeypatch):
    # Past MAX_LINE_BYTES no newline is in reach: it cannot be a record cut mid-write, and cutting
    # it would drop bytes the reader will name as too long anyway.
    monkeypatch.setattr(store, "MAX_LINE_BYTES", 16)
    f = tmp_path / "run.jsonl"
    long = b'{"long": "' + b"x" * 40
    f.write_bytes(long)
    repair(f)
    assert f.read_bytes() == long + b"\n"
    assert not (tmp_path / "run.jsonl.torn").exists()


@pytest.mark.parametrize("content, torn", [
    (b'{"a": 1}\n' + b"x" * 16, True),  # no longer than a record may be: it may be one cut short
    (b'{"a": 1}\n' + b"x" * 17, False),  # longer than any record: not one cut mid-write
    (b"x" * 18, False)])
def test_a_last_line_is_set_aside_only_if_it_could_be_a_record_cut_short(tmp_path, monkeypatch, content, torn):
    monkeypatch.setattr(store, "MAX_LINE_BYTES", 16)
    f = tmp_path / "run.jsonl"
    f.write_bytes(content)
    repair(f)
    head, _, last = content.rpartition(b"\n")
    assert f.read_bytes() == (head + b"\n" if head else b"") if torn else content + b"\n"
    assert (tmp_path / "run.jsonl.torn").exists() == torn


def test_append_makes_the_folders_and_writes_one_sorted_line(tmp_path):
    f = tmp_path / "m" / "n" / "run.jsonl"
    append_line(f, {"b": 1, "a": [2]})
    append_line(f, {"c": None})
    assert text(f) == '{"a": [2], "b": 1}\n{"c": null}\n'


def test_write_records_writes_the_whole_file_as_append_would(tmp_path):
    recs = [Record.from_dict(record(created=c)) for c in (2.0, 1.0)]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("old\n")
    write_records(a, recs)
    for rec in recs:
        RecordStore.append(b, rec)
    assert a.read_bytes() == b.read_bytes()
    assert [r.created for r in load_file(a).records] == [2.0, 1.0]


# -- reading: every line that is not a record is named, none dropped silently ----------------------

def test_read_lines_numbers_each_line_and_names_each_bad_one(tmp_path):
    f = tmp_path / "run.jsonl"
    deep = b"[" * 100_000 + b"]" * 100_000
    f.write_bytes(b'{"a": 1}\n\n[1]\nnot json\n' + deep + b'\n{"b": 2}\r{"c": "\xff"}\n')
    good, bad = read_lines(f)
    # a stray CR starts a line, as editors count; a byte that is no UTF-8 reads as U+FFFD
    assert good == [(1, {"a": 1}), (6, {"b": 2}), (7, {"c": "\ufffd"})]
    assert [n for n, _ in bad] == [3, 4, 5]
    why = dict(bad)
    assert why[3] == "not a JSON object"
    assert why[4].startswith("not JSON (")
    with pytest.raises(RecursionError) as e:
        json.loads(deep)
    assert len(str(e.value)) > 80
    assert why[5] == f"not a record's JSON (RecursionError: {str(e.value)[:80]})"


def test_a_line_longer_than_any_record_is_named_and_the_next_still_read(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "lines", functools.partial(inputs.lines, limit=64))
    monkeypatch.setattr(store, "MAX_LINE_BYTES", 64)
    f = tmp_path / "run.jsonl"
    f.write_bytes(b'{"x": "' + b"y" * 80 + b'"}\n{"b": 2}\n')
    assert read_lines(f) == ([(2, {"b": 2})], [(1, "longer than 64 bytes: no record is")])


@pytest.mark.parametrize("make", ["missing", "folder", "fifo"])
def test_a_file_that_cannot_be_read_is_one_problem_on_line_zero(tmp_path, make):
    f = tmp_path / "run.jsonl"
    if make == "folder":
        f.mkdir()
    elif make == "fifo":
        os.mkfifo(f)
    good, bad = read_lines(f)
    assert good == [] and len(bad) == 1 and bad[0][0] == 0 and bad[0][1]
    assert str(f) not in bad[0][1]  # the reader prefixes the path once
    problems = load_file(f).problems
    assert problems == [f"{f}: {bad[0][1]}"]


def test_load_file_keeps_records_with_their_lines_and_lists_problems_in_line_order(tmp_path):
    good = record()
    f = tmp_path / "run.jsonl"
    f.write_text(json.dumps({"case": "no outcome"}) + "\nnot json\n" + json.dumps(good) + "\n")
    loaded = load_file(f)
    assert [(e.path, e.line) for e in loaded.entries] == [(f, 3)]
    assert loaded.records == [Record.from_dict(good)]
    assert [p.split(": ", 1)[0] for p in loaded.problems] == [f"{f}:1", f"{f}:2"]
    assert loaded.problems[0].split(": ", 1)[1].startswith("not a record (")


def test_warn_prints_each_problem_and_returns_the_same_load(tmp_path, capsys):
    f = tmp_path / "run.jsonl"
    f.write_text("x\ny\n")
    loaded = load_file(f)
    assert loaded.warn() is loaded
    err = capsys.readouterr().err.splitlines()
    assert err == [f"oombench: skipped an unreadable record: {p}" for p in loaded.problems] and len(err) == 2


def test_a_store_loads_every_jsonl_below_it_and_nothing_else(tmp_path):
    root = tmp_path / "records"
    for machine in ("m1", "m2"):
        (root / machine).mkdir(parents=True)
    write(root / "m1" / "a.jsonl", [record(created=1.0)])
    write(root / "m2" / "b.jsonl", [record(created=2.0), record(created=3.0)])
    (root / "m2" / "b.fits-probes.ndjson").write_text('{"not": "a record"}\n')
    (root / "m2" / "b.jsonl.torn").write_text("torn\n")
    s = RecordStore(root)
    assert s.files() == [root / "m1" / "a.jsonl", root / "m2" / "b.jsonl"]
    assert sorted(r.created for r in s.load().records) == [1.0, 2.0, 3.0]
    assert sorted(r.created for r in load_any(root).records) == [1.0, 2.0, 3.0]
    assert [r.created for r in load_any(root / "m2" / "b.jsonl").records] == [2.0, 3.0]
    assert RecordStore(tmp_path / "none").files() == [] and RecordStore(tmp_path / "none").load().entries == []


def test_this_interpreters_keeps_records_of_this_python_or_of_none_named(tmp_path):
    recs = []
    for exe, created in (("", 1.0), (sys.executable, 2.0), ("/other/python3", 3.0)):
        d = record(created=created)
        d["environment"]["executable"] = exe
        recs.append(d)
    f = write(tmp_path / "run.jsonl", recs)
    assert [r.created for r in this_interpreters(f)] == [1.0, 2.0]
    assert this_interpreters(None) == [] and this_interpreters(tmp_path / "later.jsonl") == []


# -- which record stands for a case -----------------------------------------------------------------

def test_latest_keeps_the_newest_of_each_key_whatever_the_order_read():
    recs = [Record.from_dict(record(params=p, created=c)) for p, c in
            (({"probe": "a", "n": 1}, 5.0), ({"n": 1, "probe": "a"}, 9.0), ({"probe": "a", "n": 1}, 7.0),
             ({"probe": "b"}, 1.0))]
    out = latest(recs)
    assert record_key(recs[0]) == record_key(recs[1])  # the parameters' order is not their identity
    assert {k: v.created for k, v in out.items()} == {record_key(recs[0]): 9.0, record_key(recs[3]): 1.0}
    rows = [("row", r) for r in reversed(recs)]
    assert latest(rows, key=lambda i: record_key(i[1]), record=lambda i: i[1])[record_key(recs[0])][1].created == 9.0


# -- names ------------------------------------------------------------------------------------------

def test_a_run_s_files_are_named_by_machine_commit_and_run_id(tmp_path):
    s = RecordStore.of_results(tmp_path / "res")
    assert s.root == tmp_path / "res" / "records"
    run = s.run_file("h100", "0123456789abcdef", "20990101T000000-aaaaaa")
    assert run == s.root / "h100" / "01234567-20990101T000000-aaaaaa.jsonl"
    assert s.run_file("h100", None, "r9") == s.root / "h100" / "nocommit-r9.jsonl"
    assert s.run_file("h100", "0123456789", None) == s.root / "h100" / "asv-direct.jsonl"
    assert s.run_file("h100", "0123456789", "") == s.root / "h100" / "asv-direct.jsonl"
    stem = "01234567-20990101T000000-aaaaaa"
    assert RecordStore.probe_log(run).name == stem + ".fits-probes.ndjson"
    assert RecordStore.begun_log(run).name == stem + ".begun.ndjson"
    assert RecordStore.run_state(run).name == stem + ".run.json"
    assert {p.parent for p in (RecordStore.probe_log(run), RecordStore.begun_log(run), RecordStore.run_state(run))} \
        == {run.parent}
    assert RecordStore.committed() == RecordStore.of_results(store.COMMITTED)  # names the folder, reads nothing


def test_earlier_probe_logs_are_split_by_machine_and_leave_this_run_s_out(tmp_path):
    s = RecordStore(tmp_path)
    this = s.run_file("h100", "aaaaaaaa", "r3")
    for machine, name in (("h100", "aaaaaaaa-r1"), ("h100", "aaaaaaaa-r3"), ("h100", "bbbbbbbb-r2"),
                          ("h200", "aaaaaaaa-r1"), ("cpu", "cccccccc-r4")):
        (tmp_path / machine).mkdir(exist_ok=True)
        (tmp_path / machine / (name + store.PROBES_SUFFIX)).write_text("")
    (tmp_path / "h100" / "aaaaaaaa-r5.jsonl").write_text("")
    mine, others = RecordStore.earlier_probe_logs(this)
    assert [p.name for p in mine] == ["aaaaaaaa-r1.fits-probes.ndjson", "bbbbbbbb-r2.fits-probes.ndjson"]
    assert [(p.parent.name, p.name) for p in others] == [("cpu", "cccccccc-r4.fits-probes.ndjson"),
                                                          ("h200", "aaaaaaaa-r1.fits-probes.ndjson")]


# -- who runs a run -----------------------------------------------------------------------------------

def test_a_claimed_run_is_live_while_its_process_runs(tmp_path):
    s = RecordStore(tmp_path)
    run = s.run_file("h100", "aaaaaaaa", "20990101T000000-aaaaaa")
    s.claim(run)
    state = json.loads(RecordStore.run_state(run).read_text())
    me = psutil.Process()
    assert state == {"pid": me.pid, "started": me.create_time(), "argv": sys.argv, "selection": None}
    assert s.live_run("20990101T000000-aaaaaa") == state
    assert s.live_run("20990101T000000-bbbbbb") is None
    assert s.live_run("000000-aaaaaa") is None  # the whole id, not its tail
    s.claim(run, {"bench": "x"})  # a resume claims the run again, its folder there already
    assert s.live_run("20990101T000000-aaaaaa") == {**state, "selection": {"bench": "x"}}


def test_a_run_whose_pid_was_reused_or_whose_state_is_unreadable_is_not_live(tmp_path):
    s = RecordStore(tmp_path)
    (tmp_path / "h100").mkdir()
    me = psutil.Process()
    states = {"aaaaaaaa-r1": {"pid": me.pid, "started": me.create_time() - 100},  # pid reused by another
              "aaaaaaaa-r2": {"pid": 2**22 + 12345, "started": 1.0},  # no such process
              "aaaaaaaa-r3": {"started": me.create_time()},
              "aaaaaaaa-r4": "not json"}
    for stem, state in states.items():
        (tmp_path / "h100" / (stem + store.STATE_SUFFIX)).write_text(state if isinstance(state, str)
                                                                     else json.dumps(state))
    assert [s.live_run(r) for r in ("r1", "r2", "r3", "r4")] == [None] * 4
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / ("bbbbbbbb-r4" + store.STATE_SUFFIX)).write_text(
        json.dumps({"pid": me.pid, "started": me.create_time()}))
    assert s.live_run("r4") == {"pid": me.pid, "started": me.create_time()}  # one unreadable does not hide another
    (tmp_path / "h100" / ("aaaaaaaa-r5" + store.STATE_SUFFIX)).write_text(json.dumps({"pid": "x", "started": 1}))
    (tmp_path / "h200" / ("bbbbbbbb-r5" + store.STATE_SUFFIX)).write_text(
        json.dumps({"pid": me.pid, "started": me.create_time()}))
    assert s.live_run("r5") == {"pid": me.pid, "started": me.create_time()}  # nor one whose pid is no pid
    assert RecordStore(tmp_path / "none").live_run("r1") is None


def test_a_run_state_longer_than_any_record_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_LINE_BYTES", 64)
    s = RecordStore(tmp_path)
    run = s.run_file("h100", "aaaaaaaa", "r1")
    s.claim(run, {"bench": "b" * 100})
    assert s.live_run("r1") is None and RecordStore.selection(run) is None


# -- resume ---------------------------------------------------------------------------------------------

def stored_runs(tmp_path, *names):
    s = RecordStore(tmp_path)
    for name in names:
        machine, stem = name.split("/")
        (tmp_path / machine).mkdir(exist_ok=True)
        (tmp_path / machine / (stem + ".jsonl")).write_text("")
    return s


@pytest.mark.parametrize("run_id", ["", "2099*", "r?", "r[1]", "r]", "../r1", "a/b", "a\\b", "r 1", "r1\n"])
def test_resume_refuses_what_is_no_run_id(tmp_path, run_id):
    s = stored_runs(tmp_path, "h100/aaaaaaaa-r1")
    with pytest.raises(StoreError, match=r"--resume takes a run id as `harness run` printed it"):
        s.resumable(run_id, "h100", "aaaaaaaa99")


def test_resume_finds_the_run_of_this_commit_on_this_machine(tmp_path):
    s = stored_runs(tmp_path, "h100/aaaaaaaa-r1", "h200/aaaaaaaa-r1")
    assert s.resumable("r1", "h100", "aaaaaaaa99") == tmp_path / "h100" / "aaaaaaaa-r1.jsonl"


def test_resume_of_another_commit_s_run_names_the_checkout_that_resumes_it(tmp_path):
    s = stored_runs(tmp_path, "h100/bbbbbbbb-20990101T000000-aaaaaa")
    with pytest.raises(StoreError) as e:
        s.resumable("20990101T000000-aaaaaa", "h100", "aaaaaaaa99")
    assert str(e.value) == ("run 20990101T000000-aaaaaa measured commit bbbbbbbb, and this checkout is at aaaaaaaa: "
                            "`git checkout bbbbbbbb` to resume it, or start a new run without --resume")


def test_resume_of_another_machine_s_run_names_that_machine(tmp_path):
    s = stored_runs(tmp_path, "h200/aaaaaaaa-r1", "cpu/bbbbbbbb-r1")
    with pytest.raises(StoreError) as e:
        s.resumable("r1", "h100", "aaaaaaaa99")
    assert str(e.value) == "run r1 was measured on cpu, h200, not on this machine (h100)"


def test_resume_of_an_unknown_run_lists_the_last_runs_of_this_commit_here(tmp_path):
    s = stored_runs(tmp_path, *(f"h100/aaaaaaaa-2099010{i}T000000-aaaaaa" for i in range(1, 8)),
                    "h100/bbbbbbbb-20990109T000000-bbbbbb", "h200/aaaaaaaa-20990109T000000-cccccc")
    with pytest.raises(StoreError) as e:
        s.resumable("r9", "h100", "aaaaaaaa99")
    listed = ", ".join(f"2099010{i}T000000-aaaaaa" for i in range(3, 8))
    assert str(e.value) == f"no records of run r9 on h100 in {tmp_path}; runs of aaaaaaaa here: {listed}"
    with pytest.raises(StoreError, match=r"runs of cccccccc here: none$"):
        s.resumable("r9", "h100", "cccccccc")


# -- a run's context, as it travels to each benchmark's process ---------------------------------------

def test_a_run_context_travels_whole_as_json(tmp_path):
    ctx = RunContext(RecordStore(tmp_path / "records"), "h100", "r1", "aaaaaaaa99", 123.5, 4242, False)
    back = RunContext.from_json(ctx.to_json())
    assert back == ctx and back.path == tmp_path / "records" / "h100" / "aaaaaaaa-r1.jsonl"
    plain = RunContext.from_json(json.dumps({"records": str(tmp_path), "machine": "cpu"}))
    assert plain == RunContext(RecordStore(tmp_path), "cpu")
    assert plain.trace_busy is True and plain.path == tmp_path / "cpu" / "asv-direct.jsonl"


def test_a_run_s_selection_is_read_back_from_its_state_and_none_where_it_cannot_be(tmp_path):
    s = RecordStore(tmp_path)
    run = s.run_file("h100", "aaaaaaaa", "r1")
    assert RecordStore.selection(run) is None  # no state yet
    s.claim(run, {"bench": "tricks", "quick": True})
    assert RecordStore.selection(run) == {"bench": "tricks", "quick": True}
    for state in ("not json", "[1]", '{"selection": [1]}', '{"selection": "tricks"}', '{"pid": 1}'):
        RecordStore.run_state(run).write_text(state)
        assert RecordStore.selection(run) is None, state
    RecordStore.run_state(run).unlink()
    RecordStore.run_state(run).mkdir()
    assert RecordStore.selection(run) is None


RUNS = [f"20990101T00000{i}-aaaaaa" for i in range(4)]


def test_a_file_read_again_gives_what_it_holds_now_after_an_append_or_a_whole_rewrite(tmp_path):
    # a file unchanged since it was read is not parsed again: every write a reader may miss changes
    # what it is read under (an append its size, a file written whole and moved there its inode)
    path = write(tmp_path / "r.jsonl", [record(run=RUNS[0])])
    first = load_file(path)
    first.entries.clear()  # a reader's changes to what it got stay its own
    assert [r.run_id for r in load_file(path).records] == RUNS[:1]
    append_line(path, record(run=RUNS[1]))
    assert [r.run_id for r in load_file(path).records] == RUNS[:2]
    whole = write(tmp_path / "next.jsonl", [record(run=RUNS[2]), record(run=RUNS[3])])
    os.replace(whole, path)
    assert [r.run_id for r in load_file(path).records] == RUNS[2:]
    path.write_text("not json\n")  # in place, another size
    assert load_file(path).records == [] and len(load_file(path).problems) == 1
    # one version kept a file: a file read again after each line it gains is held once, the latest
    held = len(store._PARSED)
    for i in range(3):
        append_line(path, record(run=RUNS[i]))
        assert len(load_file(path).records) == i + 1
    assert len(store._PARSED) == held and len(store._PARSED[str(path)][1].entries) == 3
