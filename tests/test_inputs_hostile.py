"""Hostile paths and values: every command refuses them before any work, with exit 2, one line
that names the fix, and nothing written; the record store reads only regular files; a full disk
is named as such; a valid last record without its newline is kept."""
import errno
import json
import os
import re
import signal
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harness.drive.asv import begun, bench, suite
from harness.drive.commands import bootstrap, cli
from harness.measure.guards import inputs, workingset
from harness.measure.records.store import RecordStore, append_line, load_file
from harness.report import gate as gate_module

from conftest import set_run
from test_record import sample_record

RUN_ID = "20261124T000000-abcdef"
REAL_RUN = suite.run


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    """A refused command never sets up, runs or publishes anything."""
    monkeypatch.setattr(bootstrap, "ensure", lambda command: pytest.fail(f"set-up ran for a refused {command}"))
    monkeypatch.setattr(suite, "run", lambda **kw: pytest.fail("the run started"))
    monkeypatch.delenv(inputs.HOST_MEMORY_ENV, raising=False)


def refused(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def tree(root: Path) -> dict:
    """What is under ``root``: each path's kind, size and modification time."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath, name)
            s = p.lstat()
            out[str(p.relative_to(root))] = (stat.S_IFMT(s.st_mode), s.st_size, s.st_mtime_ns)
    return out


class Blocked(Exception):
    """Not an OSError, which the reader under test may catch and go on."""


@contextmanager
def alarm(seconds: int):
    """Fails the test where the block blocks (a FIFO read waits for a writer forever)."""
    def fire(signum, frame):
        raise Blocked(f"blocked for {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- hostile paths, generated ---------------------------------------------------------------------
def hostile(world: Path, kind: str, read_only: Path) -> str:
    """One hostile path of ``kind`` in ``world`` (made here): what each names is never usable as a
    folder to write, a file to write, or a path to read."""
    (world / "file").write_text("a user's file\n")
    if not (world / "fifo.jsonl").exists():
        os.mkfifo(world / "fifo.jsonl")
        (world / "zero.jsonl").symlink_to("/dev/zero")
        (world / "dir").mkdir()
        read_only.mkdir()
    return {"under_file": str(world / "file" / "sub"), "fifo": str(world / "fifo.jsonl"),
            "device": str(world / "zero.jsonl"), "empty": "", "blank": "  ", "long": str(world / ("n" * 300)),
            "nul": str(world / "a\0b"), "read_only": str(read_only / "sub"), "file": str(world / "file"),
            "dir": str(world / "dir"), "dir_slash": str(world / "dir") + os.sep,
            "missing": str(world / "missing" / "x")}[kind]


WRITE_FOLDER = ["under_file", "fifo", "device", "empty", "blank", "long", "nul", "read_only", "file"]
WRITE_FILE = ["under_file", "fifo", "device", "empty", "blank", "long", "nul", "read_only", "dir", "dir_slash"]
READ = ["under_file", "fifo", "device", "empty", "blank", "long", "nul", "missing"]
COMMANDS = {  # command line with its hostile path as P -> the kinds of hostile path it takes there
    ("run", "--results", "P"): WRITE_FOLDER,
    ("wheelhouse", "P", "--python", "3.12"): WRITE_FOLDER,
    ("gate", "BASE", "NEW", "--report", "P"): WRITE_FILE,
    ("gate", "BASE", "NEW", "--history", "P"): READ,
    ("todo", "--results", "P"): READ + ["file"],
    ("table", "tricks", "--down", "technique", "--results", "P"): READ + ["file"],
    ("summary", "P"): READ,
}
CASES = [(argv, kind) for argv, kinds in COMMANDS.items() for kind in kinds]


@pytest.fixture
def read_only_probe(monkeypatch):
    """A folder whose writes fail as on a read-only mount (EROFS). Tests run as root, which
    ignores permission bits: the probe write the check makes is where a read-only mount shows."""
    made = tempfile.TemporaryFile
    marked = []

    def probe(*a, dir=None, **kw):
        if any(str(dir).startswith(str(m)) for m in marked):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return made(*a, dir=dir, **kw)
    monkeypatch.setattr(inputs.tempfile, "TemporaryFile", probe)
    return marked


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(case=st.sampled_from(CASES))
def test_every_hostile_path_is_refused_with_one_line_and_nothing_written(case, capsys, read_only_probe):
    argv, kind = case
    with tempfile.TemporaryDirectory() as top:
        world = Path(top) / "world"
        world.mkdir()
        read_only = Path(top) / "ro"
        read_only_probe[:] = [read_only]
        path = hostile(world, kind, read_only)
        records = Path(top) / "base.jsonl"
        records.write_text("")
        before = tree(Path(top))
        line = [path if a == "P" else str(records) if a in ("BASE", "NEW") else a for a in argv]
        with alarm(20):
            err = refused(capsys, line)
        assert err.startswith(f"oombench {argv[0]}:") or err.startswith("python3 -m harness")
        assert tree(Path(top)) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder whatever its mode bits say; the "
                    "read-only case is covered through the probe write above")
def test_a_folder_without_write_permission_is_refused(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert "read-only" in refused(capsys, ["run", "--results", str(ro / "res")])


def test_a_read_only_asv_folder_is_refused_before_the_run(tmp_path, monkeypatch, capsys, read_only_probe):
    (tmp_path / ".asv").mkdir()
    monkeypatch.setattr(bootstrap, "REPO", tmp_path)
    read_only_probe.append(tmp_path / ".asv")
    err = refused(capsys, ["run", "--results", str(tmp_path / "res")])
    assert ".asv folder" in err and "Read-only file system" in err


def test_a_disk_with_too_little_space_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(inputs.shutil, "disk_usage", lambda p: type("U", (), {"free": 10**6})())
    assert "1.00 MB free" in refused(capsys, ["wheelhouse", str(tmp_path / "w"), "--python", "3.12"])


# -- values ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["inf", "-5", "0", "nan", "1e9", "lots", "-inf"])
def test_stated_host_memory_must_be_bounded(value, monkeypatch, capsys):
    """`inf` raised OverflowError; `-5` and `0` filed a does_not_fit."""
    monkeypatch.setenv(inputs.HOST_MEMORY_ENV, value)
    assert inputs.HOST_MEMORY_ENV in refused(capsys, ["case", "ceilings", "probe=host_copy"])
    monkeypatch.setattr(suite, "run", lambda **kw: pytest.fail("the run started"))
    assert "a number of GB above 0" in refused(capsys, ["run", "--results", str(Path(tempfile.gettempdir()))])
    with pytest.raises(inputs.Refused):
        workingset.host_available()


@settings(deadline=None)
@given(gbs=st.floats(min_value=1e-3, max_value=inputs.HOST_MEMORY_MAX_GB))
def test_stated_host_memory_within_bounds_is_read(gbs):
    assert workingset.host_available({inputs.HOST_MEMORY_ENV: repr(gbs)}) == int(gbs * 10**9)


@settings(deadline=None)
@given(text=st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=20)))
def test_no_text_gets_past_the_bound_unbounded(text):
    try:
        value = inputs.bounded(text, "X", "GB", 100, "X=1")
    except inputs.Refused as e:
        assert "X must be a number of GB" in str(e) and "\n" not in str(e).replace(repr(text), "")
    else:
        assert 0 < value <= 100


def test_an_empty_bench_is_refused_not_the_standard_profile(capsys):
    assert "--bench takes a regular expression" in refused(capsys, ["run", "--bench", ""])


def test_a_bench_matching_no_benchmark_is_refused_before_the_run(tmp_path, monkeypatch, capsys):
    """It ran asv over nothing and exited 1 with "nothing was measured"."""
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    err = refused(capsys, ["run", "--results", str(tmp_path / "r"), "--bench", "zzz"])
    assert "matches no benchmark" in err and "e.g. " in err
    assert not (tmp_path / "r").exists()


def test_a_bench_naming_a_benchmark_without_its_parameters_is_taken():
    from harness.drive.commands import todo
    assert todo.unmatched(r"^ceilings\.Host\.track_seconds_per_step$") is None
    assert todo.unmatched(r"^ceilings\.Host\.\w+\('host_copy'\)") is None
    assert todo.unmatched(r"^ceilings\.Host\.\w+\('nope'\)")


def test_table_versus_garbage_names_versus(tmp_path, monkeypatch, capsys):
    (tmp_path / "records").mkdir()
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    err = refused(capsys, ["table", "tricks", "--down", "technique", "--versus", "garbage", "--results", str(tmp_path)])
    assert "--versus takes name=value" in err


def test_todo_of_a_missing_results_folder_is_refused(capsys):
    """It printed nothing and exited 0."""
    assert "does not exist" in refused(capsys, ["todo", "--results", "/nonexistent"])


# -- the gate's report ----------------------------------------------------------------------------
def planted_pair(tmp_path) -> tuple[Path, Path]:
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    append_line(base, sample_record().to_dict())
    append_line(new, {**sample_record().to_dict(), "run_id": "r2", "created": sample_record().created + 1})
    return base, new


def test_a_passing_gate_whose_report_cannot_be_written_exits_2(tmp_path, monkeypatch, capsys):
    """It exited 1, the code of a regression."""
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    base, new = planted_pair(tmp_path)
    monkeypatch.setattr(gate_module, "write_report",
                        lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    err = refused(capsys, ["gate", str(base), str(new), "--history", str(tmp_path), "--report", str(tmp_path / "r.md")])
    assert "--report" in err and "No space left on device" in err


# -- the record store reads only regular files -----------------------------------------------------
def test_a_fifo_and_a_device_among_the_records_are_named_not_read(tmp_path, monkeypatch, capfd):
    """A FIFO named *.jsonl hung summary, table, pages and gate; a link to /dev/zero ran out of memory."""
    machine = tmp_path / "records" / "box"
    append_line(machine / "good.jsonl", sample_record().to_dict())
    os.mkfifo(machine / "fifo.jsonl")
    (machine / "zero.jsonl").symlink_to("/dev/zero")
    with alarm(20):
        loaded = RecordStore(tmp_path / "records").load()
    assert len(loaded.records) == 1
    assert sorted(loaded.problems) == [f"{machine / 'fifo.jsonl'}: is a FIFO, not a regular file: remove it or put "
                                       "the file there",
                                       f"{machine / 'zero.jsonl'}: is a character device, not a regular file: remove "
                                       "it or put the file there"]
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    with alarm(20):
        assert cli.main(["summary", str(tmp_path / "records")]) == 0
    assert "fifo.jsonl: is a FIFO" in capfd.readouterr().err


def test_a_line_past_any_records_length_is_refused_by_number_and_the_rest_read(tmp_path):
    path = tmp_path / "run.jsonl"
    good = json.dumps(sample_record().to_dict())
    path.write_text(good + "\n" + "x" * (inputs.MAX_LINE_BYTES + 10) + "\n" + good + "\n")
    loaded = load_file(path)
    assert len(loaded.records) == 2
    assert loaded.problems == [f"{path}:2: longer than {inputs.MAX_LINE_BYTES} bytes: no record is"]


@pytest.mark.parametrize("where, value", [("environment.libraries.torch", "9" * 5000),
                                          ("environment.libraries.torch", 2), ("params.probe", "p" * 5000),
                                          ("schema", 10**40)])
def test_an_unbounded_value_refuses_its_record_by_file_and_line(tmp_path, where, value):
    """A 5,000-digit torch version stopped the whole page build with Python's int-digits error."""
    rec = sample_record().to_dict()
    inner = rec
    *outer, last = where.split(".")
    for key in outer:
        inner = inner[key]
    inner[last] = value
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(sample_record().to_dict()) + "\n" + json.dumps(rec) + "\n")
    loaded = load_file(path)
    assert len(loaded.records) == 1 and len(loaded.problems) == 1
    assert loaded.problems[0].startswith(f"{path}:2: not a record (")


# -- a torn line is only a line that fails to parse -------------------------------------------------
def test_a_valid_last_record_without_its_newline_is_kept(tmp_path):
    """It was moved to .torn on --resume and measured again, silently."""
    path = tmp_path / "run.jsonl"
    a, b = sample_record().to_dict(), {**sample_record().to_dict(), "run_id": "r2"}
    path.write_text(json.dumps(a, sort_keys=True))  # written whole; the newline lost
    append_line(path, b)
    assert [r.run_id for r in load_file(path).records] == ["r1", "r2"] and not load_file(path).problems
    assert not (tmp_path / "run.jsonl.torn").exists()


def test_a_last_line_that_does_not_parse_is_moved_to_torn(tmp_path):
    path = tmp_path / "run.jsonl"
    a = sample_record().to_dict()
    path.write_text(json.dumps(a) + "\n" + json.dumps(a)[:40])  # cut mid-write
    append_line(path, a)
    assert len(load_file(path).records) == 2 and not load_file(path).problems
    assert (tmp_path / "run.jsonl.torn").read_text() == json.dumps(a)[:40] + "\n"


# -- a full disk ----------------------------------------------------------------------------------
def no_space(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_leaves_no_partial_run_state(tmp_path, monkeypatch):
    """A `.run.json.PID` was left when the disk filled."""
    store = RecordStore(tmp_path / "records")
    run_file = store.run_file("box", "c" * 40, RUN_ID)
    monkeypatch.setattr(inputs.os, "fsync", no_space)
    with pytest.raises(OSError) as raised:
        store.claim(run_file)
    assert raised.value.errno == errno.ENOSPC
    assert list(run_file.parent.iterdir()) == []


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "_watch_harness", lambda ctx: None)
    return set_run(monkeypatch, tmp_path / "records", run_id=RUN_ID, commit="c" * 40, parent_pid=4242)


def test_a_case_that_finds_the_disk_full_is_filed_saying_so(ctx, monkeypatch):
    """It was filed as "killed ... or crashed"."""
    monkeypatch.setattr(bench, "execute", no_space)
    folder = re.escape(str(ctx.path.parent))
    with pytest.raises(bench.DiskFull, match=rf"disk holding {folder} is full .*--resume {RUN_ID}"):
        bench.measure("ceilings", probe="host_copy")
    (rec,) = load_file(ctx.path).records
    assert rec.outcome == "failed" and rec.check == {"ended": "disk_full"} and "is full" in rec.reason


def test_a_case_that_cannot_file_its_record_names_the_full_disk(ctx, monkeypatch):
    monkeypatch.setattr(bench, "execute", lambda *a, **k: sample_record())
    monkeypatch.setattr(RecordStore, "append", staticmethod(no_space))
    with pytest.raises(bench.DiskFull, match="is full"):
        bench.measure("ceilings", probe="host_copy")


def test_a_case_lost_while_the_disk_was_full_is_filed_as_such(ctx, monkeypatch):
    from harness.measure.instruments.environment import snapshot
    from test_begun import begun_by, dead_pid
    ctx.path.parent.mkdir(parents=True)
    begun_by(ctx, dead_pid(), harness_pid=ctx.parent_pid)
    monkeypatch.setattr(begun, "disk_nearly_full", lambda path: True)
    (rec,) = begun.file_lost(ctx, snapshot())
    assert rec.check == {"ended": "disk_full"} and "is full" in rec.reason and "killed" not in rec.reason


def test_a_run_that_fills_the_disk_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    monkeypatch.setattr(suite, "run", lambda **kw: no_space())
    assert cli.main(["run", "--results", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is full" in err and "--resume" in err


# -- a refused --resume leaves nothing -------------------------------------------------------------
def test_a_refused_resume_makes_no_folder_and_no_lock(tmp_path, monkeypatch, capsys):
    """A refused --resume left results/baseline/.lock behind."""
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    monkeypatch.setattr(suite, "run", REAL_RUN)
    monkeypatch.setattr(suite, "register_with_asv", lambda info: pytest.fail("machine.json rewritten"))
    err = refused(capsys, ["run", "--results", str(tmp_path / "baseline"), "--resume", RUN_ID])
    assert f"no records of run {RUN_ID}" in err
    assert not (tmp_path / "baseline").exists()


def test_a_fifo_given_as_the_gates_side_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    base, _ = planted_pair(tmp_path)
    os.mkfifo(tmp_path / "new.fifo")
    with alarm(20):
        rc = cli.main(["gate", str(base), str(tmp_path / "new.fifo"), "--history", str(tmp_path)])
    assert rc == 2 and "new.fifo: is a FIFO, not a regular file" in capsys.readouterr().err
