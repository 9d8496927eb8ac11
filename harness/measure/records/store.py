"""The record store: where records live, what their files are named, and how they are read and
written. Every reader and writer of records goes through it.

Layout under a store's root (``results/records`` for committed results, ``.asv/results/records``
for a local run)::

    <machine>/<commit[:8]>-<run id>.jsonl           one run's records, one JSON object a line
    <machine>/<commit[:8]>-<run id>.fits-probes.ndjson   the what-fits probes of that run
    <machine>/<commit[:8]>-<run id>.run.json        who runs it (pid, start, command)
    <machine>/<commit[:8]>-<run id>.begun.ndjson    each case as its measuring process begins it
    <machine>/asv-direct.jsonl                       records of a plain ``asv run``

Records are appended one line at a time, flushed and synced, so a run that fails or is killed
keeps everything measured before it. A line cut short by a kill is repaired before the next
append (the fragment is moved to ``<file>.torn``; a last line that parses is kept), and loading
reports every line it cannot read as ``file:line``, never drops one silently. Only regular files
are read (``harness.measure.guards.inputs.open_regular``), a line at most ``MAX_LINE_BYTES`` long.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from harness.measure.guards.inputs import (MAX_LINE_BYTES, NOT_A_RUN_ID, Refused, kind_of, lines, open_regular,
                                           write_whole)
from harness.measure.records.record import Record

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "results"
LOCAL = REPO / ".asv" / "results"
PROBES_SUFFIX = ".fits-probes.ndjson"
STATE_SUFFIX = ".run.json"
BEGUN_SUFFIX = ".begun.ndjson"


class StoreError(ValueError):
    """A request the store cannot honour; the message names the fix."""


@dataclass(frozen=True)
class Stored:
    """One record with the file and line it came from, so any figure can be traced back."""
    record: Record
    path: Path
    line: int


@dataclass
class Loaded:
    entries: list[Stored] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "file:line: why", for the reader to show

    @property
    def records(self) -> list[Record]:
        return [e.record for e in self.entries]

    def warn(self, out=None) -> "Loaded":
        for p in self.problems:
            print(f"oombench: skipped an unreadable record: {p}", file=out or sys.stderr)
        return self


def _line(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True) + "\n"


def refuse_unwritable(path: Path) -> None:
    """``Refused``, naming it, where a writer of records would write to ``path`` through a link or
    into anything but a regular file: a link's target is never appended to or cut, a FIFO or a
    device never waited on (readers refuse those too), and records are never filed in a linked
    folder, which no reader lists."""
    path = Path(path)
    for p, what in ((path.parent, "folder"), (path, "file")):
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISLNK(st.st_mode):
            raise Refused(f"{p} is a symbolic link, and records are never written through one: put the {what} "
                          "itself there (or move it away)")
        if what == "file" and not stat.S_ISREG(st.st_mode):
            raise Refused(f"{p} is {kind_of(st.st_mode)}, not a regular file: remove it or put the file there")


def append_line(path: Path, obj: dict) -> None:
    """Appends one JSON line, flushed and synced; a torn last line is repaired first. A link, a
    FIFO or a device in the file's place (or a linked folder) is refused (``refuse_unwritable``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_unwritable(path)
    repair(path)
    # O_NOFOLLOW and O_NONBLOCK: a link or a FIFO put there since the check is refused, not written or waited on.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused(f"{path} is not a regular file: remove it or put the file there")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "a") as f:
        f.write(_line(obj))
        f.flush()
        os.fsync(f.fileno())


def write_records(path: Path, records: Iterable[Record]) -> None:
    """``records`` as the whole of ``path``, one line each as ``append_line`` writes it; the old
    file is left as it was where the write fails."""
    write_whole(path, "".join(_line(rec.to_dict()) for rec in records))


def repair(path: Path) -> None:
    """A file whose last line has no newline was cut mid-write, or lacks only its newline. A
    last line that parses (a JSON object, written whole) is kept and given its newline; one that
    does not is moved to ``<file>.torn``. Either way the next line starts on a line of its own."""
    refuse_unwritable(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - MAX_LINE_BYTES - 1)
        f.seek(start)
        tail = f.read()
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n") + 1
        if _parses(tail[cut:]) or (cut == 0 and start > 0):  # whole, or past any record's length: kept
            f.write(b"\n")
        else:
            with open(str(path) + ".torn", "ab") as torn:
                torn.write(tail[cut:] + b"\n")
            f.truncate(start + cut)
        f.flush()
        os.fsync(f.fileno())


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _text_lines(f):
    """The lines of a binary file as text, split where ``str.splitlines`` splits (a stray carriage
    return inside a line starts another, as every reader of the file counts lines); None for a
    line longer than ``MAX_LINE_BYTES``."""
    for raw in lines(f):
        if raw is None:
            yield None
            continue
        yield from raw.decode(errors="replace").splitlines() or [""]


def read_lines(path: Path) -> tuple[list[tuple[int, dict]], list[tuple[int, str]]]:
    """(line number, object) of every JSON line, and (line number, why) of each that is not one
    (line 0: the file itself could not be read: missing, unreadable, or not a regular file)."""
    good, bad = [], []
    try:
        f = open_regular(path)
    except Refused as e:
        return good, [(0, str(e).removeprefix(f"{path} "))]
    except OSError as e:
        return good, [(0, e.strerror)]
    with f:
        for n, line in enumerate(_text_lines(f), start=1):
            if line is None:
                bad.append((n, f"longer than {MAX_LINE_BYTES} bytes: no record is"))
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                bad.append((n, f"not JSON ({e.msg})"))
                continue
            except (RecursionError, ValueError) as e:  # nested past the parser's depth, or a number past int's digits
                bad.append((n, f"not a record's JSON ({type(e).__name__}: {str(e)[:80]})"))
                continue
            if not isinstance(obj, dict):
                bad.append((n, "not a JSON object"))
                continue
            good.append((n, obj))
    return good, bad


def load_file(path: Path) -> Loaded:
    """Every valid record of one file, and "file:line: why" for each line that is not one, in
    file order whichever check caught it. A regular file read before and unchanged since (the same
    file, size and times) is not parsed again: the report, the gate and the docs read the same
    files many times over in one process."""
    version = _version(path)
    if version is None:
        return _parsed(path)
    key = str(path)
    kept = _PARSED.get(key)
    if kept is None or kept[0] != version:
        if key not in _PARSED and len(_PARSED) >= _PARSED_FILES:
            del _PARSED[next(iter(_PARSED))]  # the file first kept longest ago
        kept = _PARSED[key] = (version, _parsed(path))
    return Loaded(list(kept[1].entries), list(kept[1].problems))


# path -> (its version, its records) for the files read so far: one version a file, the latest, so
# that a run file read again after each record it gains holds its records once, not once a read.
_PARSED: dict = {}
_PARSED_FILES = 4096


def _version(path: Path) -> tuple | None:
    """What a regular file's records depend on: the file (device and inode), its size and its times
    of change, to the nanosecond; None for anything else, which is read each time."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) if stat.S_ISREG(st.st_mode) else None


def _parsed(path: Path) -> Loaded:
    out = Loaded()
    lines, bad = read_lines(path)
    where, seen = Path(path), []  # seen: the environment its records share, read once (Record.from_dict)
    for n, obj in lines:
        try:
            out.entries.append(Stored(Record.from_dict(obj, seen), where, n))
        except (KeyError, TypeError, ValueError) as e:
            bad.append((n, f"not a record ({e})"))
    out.problems = [f"{path}:{n}: {why}" if n else f"{path}: {why}" for n, why in sorted(bad)]
    return out


def this_interpreters(path: Path | None) -> list[Record]:
    """The records of one run file filed by this interpreter (or by one that did not say): one run
    may cover several environments (``run --python A --python B``), and only a record of this
    interpreter's own stands for it. None or a file not yet written: none."""
    if path is None or not Path(path).exists():
        return []
    return [rec for rec in load_file(Path(path)).records if rec.environment.executable in ("", sys.executable)]


def load_paths(paths: Iterable[Path]) -> Loaded:
    out = Loaded()
    for p in paths:
        one = load_file(p)
        out.entries += one.entries
        out.problems += one.problems
    return out


def record_key(rec: Record) -> tuple:
    """The default identity of a measurement: the case and its parameters."""
    return rec.case, json.dumps(rec.params, sort_keys=True)


def latest(items: list, key: Callable = record_key, record: Callable = lambda x: x) -> dict:
    """key(item) -> the newest item of that key, by its record's ``created``; ``record`` reads the
    Record out of an item (a Stored, a page row), so every reader picks the newest the same way."""
    out: dict = {}
    for item in sorted(items, key=lambda i: record(i).created):
        out[key(item)] = item
    return out


@dataclass(frozen=True)
class RecordStore:
    root: Path

    @classmethod
    def of_results(cls, results: Path) -> "RecordStore":
        """The store of a results folder (one holding asv's results and ``records/``)."""
        return cls(Path(results) / "records")

    @classmethod
    def committed(cls) -> "RecordStore":
        return cls.of_results(COMMITTED)

    # -- names -----------------------------------------------------------------------------------
    def run_file(self, machine: str, commit: str | None, run_id: str | None) -> Path:
        """The file of one run's records; a plain ``asv run`` (no run id) has one file per machine."""
        if not run_id:
            return self.root / machine / "asv-direct.jsonl"
        return self.root / machine / f"{(commit or 'nocommit')[:8]}-{run_id}.jsonl"

    @staticmethod
    def probe_log(run_file: Path) -> Path:
        """The what-fits probes of a run, beside its records (not *.jsonl: probes are not records)."""
        return run_file.with_name(run_file.stem + PROBES_SUFFIX)

    @staticmethod
    def earlier_probe_logs(run_file: Path) -> tuple[list[Path], list[Path]]:
        """The what-fits probes of the other runs filed beside ``run_file``: (on its machine, on
        the other machines)."""
        this, machine = RecordStore.probe_log(run_file), run_file.parent
        every = sorted(machine.parent.glob("*/*" + PROBES_SUFFIX))
        return ([p for p in every if p.parent == machine and p != this],
                [p for p in every if p.parent != machine])

    @staticmethod
    def begun_log(run_file: Path) -> Path:
        """The cases of a run as their processes began them (``harness.drive.asv.begun``)."""
        return run_file.with_name(run_file.stem + BEGUN_SUFFIX)

    @staticmethod
    def run_state(run_file: Path) -> Path:
        """Who runs (or last ran) a run: its pid, start time and command; see ``live_run``."""
        return run_file.with_name(run_file.stem + STATE_SUFFIX)

    def claim(self, run_file: Path, selection: dict | None = None) -> None:
        """Names this process as the one running ``run_file``'s run, and what the run measures
        (``selection``: the options that chose its cases, which a resume goes on with)."""
        import psutil
        me = psutil.Process()
        state = self.run_state(run_file)
        state.parent.mkdir(parents=True, exist_ok=True)
        write_whole(state, json.dumps({"pid": me.pid, "started": me.create_time(), "argv": sys.argv,
                                       "selection": selection}))

    @staticmethod
    def selection(run_file: Path) -> dict | None:
        """The selection ``claim`` wrote for ``run_file``'s run; None where its state is missing,
        unreadable or holds none."""
        chosen = (_run_state(RecordStore.run_state(run_file)) or {}).get("selection")
        return chosen if isinstance(chosen, dict) else None

    def live_run(self, run_id: str) -> dict | None:
        """The state of run ``run_id`` where its process still runs (on any machine's records
        here: one process, one run id), else None."""
        import psutil
        for path in sorted(self.root.glob(f"*/*-{run_id}{STATE_SUFFIX}")):  # none where root is missing
            state = _run_state(path)
            try:
                if state is not None and psutil.Process(state["pid"]).create_time() == state["started"]:
                    return state
            except (KeyError, TypeError, ValueError, psutil.Error):
                continue
        return None

    def files(self) -> list[Path]:
        return sorted(self.root.rglob("*.jsonl"))  # none where root is missing

    # -- resume ----------------------------------------------------------------------------------
    def resumable(self, run_id: str, machine: str, commit: str) -> Path:
        """The records file of run ``run_id`` to go on with, at this commit on this machine; a
        StoreError naming the fix where it is of another commit or machine, or absent."""
        if not run_id or NOT_A_RUN_ID.search(run_id):
            raise StoreError(f"--resume takes a run id as `harness run` printed it (e.g. 20261123T182937-9004fb), "
                             f"got {run_id!r}")
        path = self.run_file(machine, commit, run_id)
        try:
            refuse_unwritable(path)  # the run goes on appending to it
        except Refused as e:
            raise StoreError(f"--resume {run_id}: {e}") from None
        if path.exists():
            return path
        here = sorted((self.root / machine).glob(f"*-{run_id}.jsonl"))
        if here:
            was = here[0].name.partition("-")[0]
            raise StoreError(f"run {run_id} measured commit {was}, and this checkout is at {commit[:8]}: "
                             f"`git checkout {was}` to resume it, or start a new run without --resume")
        elsewhere = sorted(p.parent.name for p in self.root.glob(f"*/*-{run_id}.jsonl"))
        if elsewhere:
            raise StoreError(f"run {run_id} was measured on {', '.join(elsewhere)}, not on this machine ({machine})")
        runs = sorted(p.stem.split("-", 1)[1] for p in (self.root / machine).glob(f"{commit[:8]}-*.jsonl"))
        raise StoreError(f"no records of run {run_id} on {machine} in {self.root}; runs of {commit[:8]} here: "
                         f"{', '.join(runs[-5:]) or 'none'}")

    # -- reading and writing ---------------------------------------------------------------------
    def linked(self) -> list[Path]:
        """The folders under the root that are symbolic links: ``files`` does not descend into
        them, and no writer files records in one (``refuse_unwritable``)."""
        return sorted(Path(top) / name for top, folders, _ in os.walk(self.root) for name in folders
                      if os.path.islink(os.path.join(top, name)))

    def load(self) -> Loaded:
        """Every record under the root; each linked folder a problem naming it, as a writer refuses one."""
        out = load_paths(self.files())
        out.problems += [f"{p}: a symbolic link to a folder, whose records are neither read nor written: put the "
                         "folder itself there" for p in self.linked()]
        return out

    @staticmethod
    def append(path: Path, record: Record) -> None:
        append_line(path, record.to_dict())


def _run_state(path: Path) -> dict | None:
    """A run's state file as ``claim`` wrote it (read at most a record's length); None where it is
    missing, unreadable or not a JSON object."""
    try:
        with open_regular(path) as f:
            state = json.loads(f.read(MAX_LINE_BYTES))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def load_any(path: Path) -> Loaded:
    """Records of every *.jsonl under a folder (a store's root or a results folder), or of a file
    (anything but a regular one is refused by name)."""
    path = Path(path)
    return RecordStore(path).load() if path.is_dir() else load_file(path)


@dataclass(frozen=True)
class RunContext:
    """Where one run files its records: the store, the machine, and the run's id, commit and
    deadline (seconds since the epoch after which no case starts), and the pid of the
    ``harness run`` that started it. Without a run id (a plain
    ``asv run``) records go to the machine's ``asv-direct.jsonl``."""
    store: RecordStore
    machine: str
    run_id: str | None = None
    commit: str | None = None
    deadline: float | None = None
    parent_pid: int | None = None  # the ``harness run`` process: each benchmark dies with it
    # False: no step is run after the timed ones to trace the GPU-busy share (NVML's share of the
    # timed steps stands, where it read them): a compare's later rounds, judged on their times.
    trace_busy: bool = True

    @property
    def path(self) -> Path:
        return self.store.run_file(self.machine, self.commit, self.run_id)

    def to_json(self) -> str:
        return json.dumps({"records": str(self.store.root), "machine": self.machine, "run_id": self.run_id,
                           "commit": self.commit, "deadline": self.deadline, "parent_pid": self.parent_pid,
                           "trace_busy": self.trace_busy})

    @classmethod
    def from_json(cls, text: str) -> "RunContext":
        d = json.loads(text)
        return cls(RecordStore(Path(d["records"])), d["machine"], d.get("run_id"), d.get("commit"), d.get("deadline"),
                   d.get("parent_pid"), d.get("trace_busy", True))
