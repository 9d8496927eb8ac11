"""What ``harness.measure.guards.inputs`` promises, function by function: each refusal names the path,
what it was given for and the fix; a line longer than the cap is skipped and the next one read;
a failed whole-file write leaves the old file and no partial copy; a full disk is named with its
free space; numbers are bounded; host memory is read from its variable. In-process and quick:
tests/test_inputs_hostile.py drives the same checks through the command line."""
import errno
import io
import os
import socket
import stat
import types
from pathlib import Path

import pytest

from harness.measure.guards import inputs
from harness.measure.guards.inputs import Refused

FIFO_KIND = "a FIFO"


def free_space(monkeypatch, free, asked=None):
    """Every disk has ``free`` bytes free; the paths asked about are appended to ``asked``."""
    def usage(path):
        if asked is not None:
            asked.append(Path(path))
        return types.SimpleNamespace(total=10**12, used=10**12 - free, free=free)
    monkeypatch.setattr(inputs.shutil, "disk_usage", usage)


def permissions(monkeypatch, allowed: dict):
    """``os.access`` as it answers a user without root: each path in ``allowed`` grants only the
    bits given there. Tests run as root, which passes most permission checks whatever the bits."""
    real = os.access

    def access(path, mode, *a, **k):
        for p, bits in allowed.items():
            if Path(path) == Path(p):
                return mode & ~bits == 0
        return real(path, mode, *a, **k)
    monkeypatch.setattr(inputs.os, "access", access)


def refusal(call, *args, **kw) -> str:
    with pytest.raises(Refused) as raised:
        call(*args, **kw)
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "run.jsonl"
    os.mkfifo(path)
    return path


def open_fds() -> set:
    return set(os.listdir("/proc/self/fd"))


# -- names: empty, blank, NUL, too long, a loop of links -------------------------------------------
@pytest.mark.parametrize("given", [None, "", "   "])
def test_an_empty_name_is_refused_saying_what_it_takes(given):
    assert refusal(inputs.writable_folder, given, "--results") == f"--results takes a folder, got {given or ''!r}"
    assert refusal(inputs.output_file, given or "", "--report") == f"--report takes a file, got {given or ''!r}"
    assert refusal(inputs.readable, given, "--history", "folder") == f"--history takes a folder, got {given or ''!r}"


def test_a_name_with_a_nul_byte_is_refused(tmp_path):
    name = str(tmp_path / "a\0b")
    assert refusal(inputs.writable_folder, name, "--results") == \
        f"--results takes a folder, and {name!r} holds a NUL byte"


def test_a_name_too_long_to_look_up_is_refused_shortened(tmp_path):
    long = tmp_path / ("n" * 300)
    shown = repr(str(long)[:120] + "…")
    assert refusal(inputs.writable_folder, long, "--results") == \
        f"--results {shown} cannot be used ({os.strerror(errno.ENAMETOOLONG)}): name another path"
    assert refusal(inputs.readable, long, "--history") == \
        f"--history {shown} cannot be used ({os.strerror(errno.ENAMETOOLONG)}): name another path"


def test_a_file_name_too_long_to_look_up_is_refused_naming_what_it_is_for(tmp_path):
    long = tmp_path / ("n" * 300)
    assert refusal(inputs.output_file, long, "--report") == \
        (f"--report {str(long)[:120] + '…'!r} cannot be used ({os.strerror(errno.ENAMETOOLONG)}): "
         "name another path")


def test_a_folder_above_that_cannot_be_looked_up_is_refused_naming_what_it_is_for(tmp_path, monkeypatch):
    """As where a folder above is locked between the checks: the refusal still says which option."""
    real, locked, target = os.stat, tmp_path / "locked", tmp_path / "locked" / "res"

    def stat_(path, *a, **k):
        if Path(path) == locked:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, *a, **k)
    monkeypatch.setattr(inputs.os, "stat", stat_)
    assert refusal(inputs.writable_folder, target, "--results") == \
        f"--results {locked} cannot be used ({os.strerror(errno.EACCES)}): name another path"


def test_a_loop_of_links_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert refusal(inputs.readable, tmp_path / "a", "--history") == \
        f"--history {tmp_path / 'a'} cannot be used ({os.strerror(errno.ELOOP)}): name another path"


@pytest.mark.parametrize("text, shown", [("a" * 120, "a" * 120), ("a" * 121, repr("a" * 120 + "…")),
                                         ("tab\there", repr("tab\there")), ("/plain/path é", "/plain/path é")])
def test_a_path_is_shown_whole_up_to_120_characters_and_quoted_when_unprintable(text, shown):
    assert inputs._show(Path(text)) == shown


@pytest.mark.parametrize("mode, kind", [(stat.S_IFDIR, "a folder"), (stat.S_IFREG, "a file"), (stat.S_IFIFO, FIFO_KIND),
                                        (stat.S_IFCHR, "a character device"), (stat.S_IFBLK, "a block device"),
                                        (stat.S_IFSOCK, "a socket"), (0, "not a file")])
def test_each_kind_of_path_is_named(mode, kind):
    assert inputs._kind(mode | 0o644) == kind


# -- a folder to write ----------------------------------------------------------------------------
def test_an_existing_folder_is_taken_as_given(tmp_path):
    assert inputs.writable_folder(str(tmp_path), "--results") == tmp_path


def test_a_folder_to_be_made_is_checked_where_it_would_be_made(tmp_path, monkeypatch):
    asked = []
    free_space(monkeypatch, 10**9, asked)
    target = tmp_path / "a" / "b" / "c"
    assert inputs.writable_folder(target, "--results") == target
    assert asked == [tmp_path] and not (tmp_path / "a").exists()


def test_a_relative_folder_to_be_made_is_taken_relative_to_the_working_folder(tmp_path, monkeypatch):
    asked = []
    free_space(monkeypatch, 10**9, asked)
    monkeypatch.chdir(tmp_path)
    assert inputs.writable_folder("new/sub", "--results") == Path("new/sub")
    assert asked == [tmp_path]


def test_an_existing_relative_folder_is_named_as_given(tmp_path, monkeypatch):
    (tmp_path / "res").mkdir()
    monkeypatch.chdir(tmp_path)
    free_space(monkeypatch, 10**6)
    assert refusal(inputs.writable_folder, "res", "--results") == \
        ("--results res: the disk holding res has 1.00 MB free (at least 16.0 MB needed): "
         "free space there or name a folder on another disk")


def test_a_file_given_as_a_folder_is_refused(tmp_path):
    (tmp_path / "file").write_text("a user's file\n")
    assert refusal(inputs.writable_folder, tmp_path / "file", "--results") == \
        f"--results takes a folder: {tmp_path / 'file'} is a file"


def test_a_folder_under_a_file_is_refused_naming_the_file(tmp_path):
    (tmp_path / "file").write_text("a user's file\n")
    target = tmp_path / "file" / "sub" / "deeper"
    assert refusal(inputs.writable_folder, target, "--results") == \
        (f"--results {target} is under {tmp_path / 'file'}, which is a file: "
         "name a path that is not inside a file")


def test_a_folder_with_nothing_above_it_is_refused(tmp_path, monkeypatch):
    """Only where even / cannot be found; the message still names the path."""
    def nothing(path, *a, **k):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    target = tmp_path / "x"
    monkeypatch.setattr(inputs.os, "stat", nothing)
    assert refusal(inputs.writable_folder, target, "--results") == f"--results {target}: no folder above it exists"


@pytest.mark.parametrize("bits", [os.R_OK | os.X_OK, os.R_OK | os.W_OK])
def test_a_folder_without_write_or_search_permission_is_refused(tmp_path, monkeypatch, bits):
    permissions(monkeypatch, {tmp_path: bits})
    target = tmp_path / "res"
    assert refusal(inputs.writable_folder, target, "--results") == \
        f"--results {target}: {tmp_path} is read-only for this user: name a folder you can write"


def test_a_folder_whose_files_cannot_be_made_is_refused(tmp_path, monkeypatch):
    """As on a read-only mount, where root passes ``os.access``: the probe write shows it."""
    blocked = tmp_path / "ro"
    blocked.mkdir()
    made = inputs.tempfile.TemporaryFile

    def probe(*a, dir=None, **kw):
        if Path(dir) == blocked:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return made(*a, dir=dir, **kw)
    monkeypatch.setattr(inputs.tempfile, "TemporaryFile", probe)
    target = blocked / "res"
    assert refusal(inputs.writable_folder, target, "--results") == \
        (f"--results {target}: {blocked} cannot be written ({os.strerror(errno.EROFS)}): "
         "name a folder you can write")
    assert inputs.writable_folder(tmp_path / "res", "--results") == tmp_path / "res"
    assert list(blocked.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["ro"]


def test_a_folder_needs_16_mb_free_by_default(tmp_path, monkeypatch):
    free_space(monkeypatch, 16 * 10**6)
    assert inputs.writable_folder(tmp_path, "--results") == tmp_path
    free_space(monkeypatch, 16 * 10**6 - 1)
    assert refusal(inputs.writable_folder, tmp_path / "r", "--results") == \
        (f"--results {tmp_path / 'r'}: the disk holding {tmp_path} has 16.0 MB free (at least 16.0 MB needed): "
         "free space there or name a folder on another disk")


def test_a_folder_needs_the_free_space_asked_for(tmp_path, monkeypatch):
    free_space(monkeypatch, 5 * 10**9)
    assert inputs.writable_folder(tmp_path, "wheelhouse", min_free=5 * 10**9) == tmp_path
    assert "has 5.00 GB free (at least 6.00 GB needed)" in refusal(inputs.writable_folder, tmp_path, "wheelhouse",
                                                                  min_free=6 * 10**9)


# -- a file to write ------------------------------------------------------------------------------
def test_a_new_or_existing_file_in_a_writable_folder_is_taken(tmp_path):
    assert inputs.output_file(str(tmp_path / "report.md"), "--report") == tmp_path / "report.md"
    (tmp_path / "old.md").write_text("old\n")
    assert inputs.output_file(tmp_path / "old.md", "--report") == tmp_path / "old.md"


def test_a_file_name_ending_in_a_separator_is_refused_as_a_folder(tmp_path):
    name = str(tmp_path / "new") + os.sep
    assert refusal(inputs.output_file, name, "--report") == \
        f"--report takes a file: {tmp_path / 'new'} ends in {os.sep}, naming a folder"


def test_a_folder_or_fifo_given_as_a_file_to_write_is_refused(tmp_path, fifo):
    assert refusal(inputs.output_file, tmp_path, "--report") == f"--report takes a file: {tmp_path} is a folder"
    assert refusal(inputs.output_file, fifo, "--report") == f"--report takes a file: {fifo} is a FIFO"


def test_a_read_only_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "report.md"
    path.write_text("old\n")
    permissions(monkeypatch, {path: os.R_OK})
    assert refusal(inputs.output_file, path, "--report") == \
        f"--report {path} is read-only for this user: name a file you can write"


def test_a_file_to_write_is_refused_where_its_folder_cannot_be_written(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("a user's file\n")
    assert refusal(inputs.output_file, tmp_path / "file" / "report.md", "--report") == \
        f"--report takes a folder: {tmp_path / 'file'} is a file"
    free_space(monkeypatch, 10)
    assert refusal(inputs.output_file, tmp_path / "report.md", "--report").startswith(
        f"--report {tmp_path}: the disk holding {tmp_path} has")


# -- a path to read -------------------------------------------------------------------------------
def test_a_path_to_read_is_taken_by_kind(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text("{}\n")
    path.chmod(0o644)  # no execute bit: a file needs none to be read
    for kind in ("file", "any"):
        assert inputs.readable(str(path), "--history", kind) == path
    for kind in ("folder", "any"):
        assert inputs.readable(str(tmp_path), "--history", kind) == tmp_path


@pytest.mark.parametrize("kind, wanted", [("folder", "a folder"), ("file", "a file"), ("any", "a file or folder")])
def test_a_missing_path_to_read_is_refused_naming_what_to_give(tmp_path, kind, wanted):
    missing = tmp_path / "missing"
    assert refusal(inputs.readable, missing, "--history", kind) == \
        f"--history {missing} does not exist: name {wanted} that does"
    assert refusal(inputs.readable, tmp_path / "file" / "x", "--history", kind) == \
        f"--history {tmp_path / 'file' / 'x'} does not exist: name {wanted} that does"


def test_the_wrong_kind_of_path_to_read_is_refused(tmp_path, fifo):
    path = tmp_path / "file"
    path.write_text("x\n")
    assert refusal(inputs.readable, tmp_path, "BASE", "file") == f"BASE takes a file: {tmp_path} is a folder"
    assert refusal(inputs.readable, path, "--results", "folder") == f"--results takes a folder: {path} is a file"
    assert refusal(inputs.readable, fifo, "summary") == f"summary takes a file or folder: {fifo} is a FIFO"
    assert refusal(inputs.readable, "/dev/null", "summary", "file", wanted="a records file") == \
        "summary takes a records file: /dev/null is a character device"


def test_what_to_read_is_named_as_the_caller_wants(tmp_path):
    assert refusal(inputs.readable, tmp_path / "m", "summary", "any", wanted="a .jsonl file or a folder of them") == \
        f"summary {tmp_path / 'm'} does not exist: name a .jsonl file or a folder of them that does"


@pytest.mark.parametrize("bits", [os.W_OK | os.X_OK, os.R_OK | os.W_OK])
def test_an_unreadable_or_unsearchable_folder_is_refused(tmp_path, monkeypatch, bits):
    permissions(monkeypatch, {tmp_path: bits})
    assert refusal(inputs.readable, tmp_path, "--results", "folder") == \
        f"--results {tmp_path} is not readable for this user: name one you can read"


def test_an_unreadable_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "base.jsonl"
    path.write_text("{}\n")
    permissions(monkeypatch, {path: os.W_OK | os.X_OK})
    assert refusal(inputs.readable, path, "BASE", "file") == \
        f"BASE {path} is not readable for this user: name one you can read"


def test_a_results_folder_holds_records(tmp_path):
    assert refusal(inputs.results_folder, tmp_path) == \
        f"--results {tmp_path} holds no records/ folder: name the results folder that holds records/"
    (tmp_path / "records").write_text("not a folder\n")
    assert refusal(inputs.results_folder, tmp_path, "table --results").startswith(
        f"table --results {tmp_path} holds no")
    (tmp_path / "records").unlink()
    (tmp_path / "records").mkdir()
    assert inputs.results_folder(str(tmp_path)) == tmp_path
    assert refusal(inputs.results_folder, tmp_path / "records" / "x") == \
        f"--results {tmp_path / 'records' / 'x'} does not exist: name a folder that does"


# -- opening a record file ------------------------------------------------------------------------
def test_a_regular_file_is_opened_to_read_in_binary_and_blocking(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"{}\n\xff\n")
    with inputs.open_regular(path) as f:
        assert f.read() == b"{}\n\xff\n"
        assert os.get_blocking(f.fileno())
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    with inputs.open_regular(str(link)) as f:
        assert f.read() == b"{}\n\xff\n"


def test_a_fifo_a_folder_and_a_device_are_refused_not_opened(tmp_path, fifo):
    before = open_fds()
    assert refusal(inputs.open_regular, fifo) == \
        f"{fifo} is a FIFO, not a regular file: remove it or put the file there"
    assert refusal(inputs.open_regular, tmp_path) == \
        f"{tmp_path} is a folder, not a regular file: remove it or put the file there"
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    assert refusal(inputs.open_regular, str(tmp_path / "zero.jsonl")) == \
        f"{tmp_path / 'zero.jsonl'} is a character device, not a regular file: remove it or put the file there"
    assert open_fds() == before


def test_a_missing_file_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        inputs.open_regular(tmp_path / "missing.jsonl")


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert refusal(inputs.open_regular, path) == \
            f"{path} is a socket, not a regular file: remove it or put the file there"


def test_a_fifo_put_in_place_after_the_check_is_refused_without_waiting(tmp_path, fifo, monkeypatch):
    """The path is checked, then opened: a FIFO swapped in between is found on the open file,
    and the open does not wait for a writer that never comes."""
    regular = tmp_path / "regular"
    regular.write_text("x\n")
    real = os.stat

    def checked_before_the_swap(path, *a, **k):
        return real(regular if Path(path) == fifo else path, *a, **k)
    monkeypatch.setattr(inputs.os, "stat", checked_before_the_swap)
    before = open_fds()
    assert refusal(inputs.open_regular, fifo) == \
        f"{fifo} is a FIFO, not a regular file: remove it or put the file there"
    assert open_fds() == before


# -- reading lines with a cap ---------------------------------------------------------------------
class Reads(io.BytesIO):
    """A binary file that keeps the size of every read asked of it."""
    def __init__(self, data):
        super().__init__(data)
        self.sizes = []

    def readline(self, size=-1):
        self.sizes.append(size)
        return super().readline(size)


def read(data: bytes, limit: int) -> list:
    f = Reads(data)
    out = list(inputs.lines(f, limit))
    assert f.sizes and all(0 < s <= limit + 1 for s in f.sizes), f.sizes  # never more than the cap at once
    return out


def test_a_line_of_exactly_the_limit_is_read_and_one_byte_more_is_skipped():
    assert read(b"abcd\nabcde\nxy\n", 4) == [b"abcd", None, b"xy"]


def test_the_last_line_without_its_newline_is_read_up_to_the_limit():
    assert read(b"ab\nabcd", 4) == [b"ab", b"abcd"]
    assert read(b"ab\nabcde", 4) == [b"ab", None]


def test_a_line_many_times_the_limit_is_one_none_and_the_next_line_is_read():
    assert read(b"a" * 50 + b"\n" + b"b" * 8 + b"\nok\n", 4) == [None, None, b"ok"]
    assert read(b"a" * 50 + b"\n", 4) == [None]


def test_lines_keep_their_own_bytes_and_lose_only_the_newline():
    assert read(b"TAX\n\n  pad \t\r\n\xff\n", 8) == [b"TAX", b"", b"  pad \t\r", b"\xff"]
    assert read(b"", 8) == []


def test_the_default_cap_is_one_mebibyte():
    cap = 1 << 20
    assert list(inputs.lines(io.BytesIO(b"a" * cap + b"\n" + b"b" * (cap + 1) + b"\nc\n"))) == [b"a" * cap, None, b"c"]


# -- writing a file whole -------------------------------------------------------------------------
def test_a_file_written_whole_replaces_the_old_one_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "report.md"
    path.write_text("old, longer than the new text\n")
    inputs.write_whole(str(path), "new é\n")
    assert path.read_bytes() == "new é\n".encode("utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_the_text_is_on_disk_before_it_is_moved_over_the_file(tmp_path, monkeypatch):
    """Synced whole, beside the file (the same disk, so the move is one step), under a hidden
    name that no reader of ``*.jsonl`` takes for records, and one name per process."""
    path = tmp_path / "run.jsonl"
    path.write_text("old\n")
    real, seen = os.fsync, []

    def fsync(fd):
        written = Path(os.readlink(f"/proc/self/fd/{fd}"))
        seen.append((written, written.read_text(encoding="utf-8"), path.read_text()))
        real(fd)
    monkeypatch.setattr(inputs.os, "fsync", fsync)
    monkeypatch.setattr(inputs.os, "getpid", lambda: 101)
    inputs.write_whole(path, "new\n" * 3)
    monkeypatch.setattr(inputs.os, "getpid", lambda: 202)
    inputs.write_whole(path, "newer\n")
    (first, text, old), (second, _, _) = seen
    assert text == "new\n" * 3 and old == "old\n" and path.read_text() == "newer\n"
    assert first.parent == second.parent == tmp_path and first != second
    for tmp in (first, second):
        assert tmp.name.startswith(".") and not tmp.name.endswith(".jsonl")
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]


class FillsUp:
    """A file being written whose disk fills halfway through the text."""
    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["write", "encode", "fsync", "replace"])
def test_a_write_that_fails_leaves_the_old_file_and_no_partial_copy(tmp_path, monkeypatch, where):
    path = tmp_path / "run.jsonl"
    path.write_text("old\n")
    text = "new\n" * 100

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if where == "write":
        monkeypatch.setattr(inputs, "open", lambda *a, **k: FillsUp(open(*a, **k)), raising=False)
    elif where == "encode":
        text += "\udc80"  # a lone surrogate: no UTF-8 for it
    else:
        monkeypatch.setattr(inputs.os, where, no_space)
    with pytest.raises((OSError, UnicodeEncodeError)):
        inputs.write_whole(path, text)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]


# -- a full disk ----------------------------------------------------------------------------------
@pytest.mark.parametrize("error, full", [(OSError(errno.ENOSPC, "No space"), True),
                                         (OSError(errno.EDQUOT, "Quota"), True),
                                         (OSError(errno.EIO, "I/O"), False), (OSError("no errno"), False),
                                         (PermissionError(errno.EACCES, "denied"), False)])
def test_a_full_disk_or_quota_is_known_by_its_error(error, full):
    assert inputs.disk_is_full(error) is full


def test_an_error_that_is_no_os_error_is_no_full_disk():
    class Lookalike(Exception):
        errno = errno.ENOSPC
    assert inputs.disk_is_full(Lookalike()) is False
    assert inputs.disk_is_full(MemoryError()) is False


def test_a_full_disk_is_named_by_its_folder_with_its_free_space(tmp_path, monkeypatch):
    asked = []
    free_space(monkeypatch, 10**6, asked)
    assert inputs.disk_full(tmp_path) == \
        f"the disk holding {tmp_path} is full (1.00 MB free; no space left on device): free space there"
    assert inputs.disk_full(str(tmp_path / "run.jsonl"), "20261124T000000-abcdef") == \
        (f"the disk holding {tmp_path} is full (1.00 MB free; no space left on device): free space there, then "
         "`python3 -m harness run --resume 20261124T000000-abcdef` measures the rest")
    assert asked == [tmp_path, tmp_path]


def test_a_full_disk_whose_free_space_cannot_be_read_is_still_named(tmp_path, monkeypatch):
    def unreadable(path):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(inputs.shutil, "disk_usage", unreadable)
    assert inputs.disk_full(tmp_path / "gone" / "run.jsonl") == \
        (f"the disk holding {tmp_path / 'gone'} is full (its free space unknown; no space left on device): "
         "free space there")


def test_a_disk_is_nearly_full_below_16_mb(tmp_path, monkeypatch):
    asked = []
    free_space(monkeypatch, 16 * 10**6 - 1, asked)
    assert inputs.disk_nearly_full(tmp_path) is True
    free_space(monkeypatch, 16 * 10**6, asked)
    assert inputs.disk_nearly_full(tmp_path) is False
    assert asked == [tmp_path, tmp_path]

    def unreadable(path):
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    monkeypatch.setattr(inputs.shutil, "disk_usage", unreadable)
    assert inputs.disk_nearly_full(tmp_path / "gone") is False


# -- numbers --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [("5", 5.0), ("100", 100.0), (" 1e-3 ", 0.001), ("99.5", 99.5), (7, 7.0)])
def test_a_number_within_its_bounds_is_taken(text, value):
    assert inputs.bounded(text, "--step", "GB", 100, "--step 4") == value


@pytest.mark.parametrize("text", ["0", "-1", "100.0001", "1e400", "inf", "-inf", "nan", "lots", "", None, [1]])
def test_a_number_out_of_its_bounds_is_refused_naming_the_bounds_and_an_example(text):
    assert refusal(inputs.bounded, text, "--step", "GB", 100, "--step 4") == \
        f"--step must be a number of GB above 0 and at most 100 (e.g. --step 4), got {text!r}"


def test_a_fractional_bound_is_named_as_written():
    assert "at most 0.5 (e.g." in refusal(inputs.bounded, "0.6", "--share", "of memory", 0.5, "--share 0.2")


# -- host memory ----------------------------------------------------------------------------------
@pytest.mark.parametrize("stated, expected", [("512", 512 * 10**9), ("0.5", 5 * 10**8), ("100000", 10**14),
                                              ("1e-9", 1), (" 64 ", 64 * 10**9)])
def test_stated_host_memory_is_read_in_bytes(stated, expected):
    got = inputs.host_memory_bytes({"OOMBENCH_HOST_MEMORY_GB": stated})
    assert got == expected and type(got) is int


@pytest.mark.parametrize("environ", [{}, {"OOMBENCH_HOST_MEMORY_GB": ""}, {"OTHER": "512"}])
def test_host_memory_unset_or_empty_is_none(environ):
    assert inputs.host_memory_bytes(environ) is None


@pytest.mark.parametrize("stated", ["100001", "0", "-5", "inf", "nan", "lots", " "])
def test_stated_host_memory_out_of_bounds_is_refused(stated):
    assert refusal(inputs.host_memory_bytes, {"OOMBENCH_HOST_MEMORY_GB": stated}) == \
        ("OOMBENCH_HOST_MEMORY_GB must be a number of GB above 0 and at most 100000 "
         f"(e.g. OOMBENCH_HOST_MEMORY_GB=512), got {stated!r}")


def test_host_memory_is_read_from_the_environment_by_default(monkeypatch):
    monkeypatch.setenv("OOMBENCH_HOST_MEMORY_GB", "2")
    assert inputs.host_memory_bytes() == 2 * 10**9
    monkeypatch.delenv("OOMBENCH_HOST_MEMORY_GB")
    assert inputs.host_memory_bytes() is None
