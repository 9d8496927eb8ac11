"""What a user hands the harness, checked before any work: paths by kind, permission and free
space, numbers by bound. Each check raises ``Refused`` with one line that names the fix; the
command line prints it and exits 2. The record store opens files through ``open_regular``, so a
FIFO or a device named like a record file is refused instead of hanging or filling memory.

Standard library only: the command line checks its arguments with it before set-up.
"""
from __future__ import annotations

import errno
import math
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from harness.units import GB, gb

# The least free space a folder the harness writes into must have: records and asv's result
# files are small, and a run that starts with less fills the disk mid-case.
MIN_FREE_BYTES = 16 * 10**6
# A record is a few kB: a longer line is no record, and reading it whole could exhaust memory.
MAX_LINE_BYTES = 1 << 20
# What no run id holds: a glob's wildcards, a path's separators, white space.
NOT_A_RUN_ID = re.compile(r"[*?\[\]/\\\s]")


class Refused(ValueError):
    """A path or value that cannot be used; the message, one line, names the fix."""


def _named(path, what: str, kind: str) -> Path:
    text = os.fspath(path) if path is not None else ""
    if not text.strip():
        raise Refused(f"{what} takes {kind}, got {text!r}")
    if "\0" in text:
        raise Refused(f"{what} takes {kind}, and {text!r} holds a NUL byte")
    return Path(text)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


kind_of = _kind  # what a mode names ("a FIFO", "a folder"), for messages elsewhere


def _stat(path: Path, what: str) -> os.stat_result | None:
    """The path's stat (symlinks followed), None where nothing is there; a path that cannot be
    looked up at all (too long, a loop of links, no permission) is refused."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise Refused(f"{what} {_show(path)} cannot be used ({e.strerror}): name another path") from None


def _show(path: Path) -> str:
    text = str(path)
    return repr(text[:120] + "…") if len(text) > 120 else repr(text) if not text.isprintable() else text


def _nearest_existing(path: Path, what: str) -> Path:
    """The nearest folder that exists at or above ``path``: where it would be made."""
    for up in (path.absolute(), *path.absolute().parents):
        st = _stat(up, what)
        if st is None:
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(f"{what} {_show(path)} is under {_show(up)}, which is {_kind(st.st_mode)}: "
                          f"name a path that is not inside {_kind(st.st_mode)}")
        return up
    raise Refused(f"{what} {_show(path)}: no folder above it exists")


def _probe(folder: Path, what: str, path: Path) -> None:
    """A real write: root passes ``os.access`` on a folder whose files it still cannot create
    (an immutable folder, a full quota); a file made and dropped at once shows it."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise Refused(f"{what} {_show(path)}: {folder} cannot be written ({e.strerror}): "
                      "name a folder you can write") from None


def writable_folder(path, what: str, min_free: int = MIN_FREE_BYTES) -> Path:
    """A folder the harness may write into, existing or to be made: never a file or under one,
    writable (checked by access and by a probe write), with ``min_free`` bytes free."""
    p = _named(path, what, "a folder")
    st = _stat(p, what)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{what} takes a folder: {_show(p)} is {_kind(st.st_mode)}")
    folder = p if st is not None else _nearest_existing(p, what)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise Refused(f"{what} {_show(p)}: {folder} is read-only for this user: name a folder you can write")
    _probe(folder, what, p)
    free = shutil.disk_usage(folder).free
    if free < min_free:
        raise Refused(f"{what} {_show(p)}: the disk holding {folder} has {gb(free)} free (at least "
                      f"{gb(min_free)} needed): free space there or name a folder on another disk")
    return p


def output_file(path, what: str) -> Path:
    """A file the harness will write whole (replacing any file there): not a folder, not a FIFO
    or device, in a folder it can write."""
    p = _named(path, what, "a file")
    if os.fspath(path).endswith(os.sep):
        raise Refused(f"{what} takes a file: {_show(p)} ends in {os.sep}, naming a folder")
    st = _stat(p, what)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise Refused(f"{what} takes a file: {_show(p)} is {_kind(st.st_mode)}")
    if st is not None and not os.access(p, os.W_OK):
        raise Refused(f"{what} {_show(p)} is read-only for this user: name a file you can write")
    writable_folder(p.parent, what)
    return p


def readable(path, what: str, kind: str = "any", wanted: str | None = None) -> Path:
    """A path to read: it exists, is readable, and is a folder (``kind="folder"``), a regular
    file (``"file"``) or either (``"any"``); ``wanted`` names what it should be, for the message."""
    wanted = wanted or {"folder": "a folder", "file": "a file", "any": "a file or folder"}[kind]
    p = _named(path, what, wanted)
    st = _stat(p, what)
    if st is None:
        raise Refused(f"{what} {_show(p)} does not exist: name {wanted} that does")
    is_dir, is_file = stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)
    if not (is_dir and kind != "file" or is_file and kind != "folder"):
        raise Refused(f"{what} takes {wanted}: {_show(p)} is {_kind(st.st_mode)}")
    if not os.access(p, os.R_OK | (os.X_OK if is_dir else 0)):
        raise Refused(f"{what} {_show(p)} is not readable for this user: name one you can read")
    return p


def results_folder(path, what: str = "--results") -> Path:
    """A results folder to read: one that holds ``records/``."""
    p = readable(path, what, "folder")
    if not (p / "records").is_dir():
        raise Refused(f"{what} {_show(p)} holds no records/ folder: name the results folder that holds records/")
    return p


def open_regular(path):
    """``path`` opened for reading in binary, where it is a regular file (a symlink's target
    checked); ``Refused`` naming the file otherwise. Opened without blocking, so a FIFO put in
    its place between the check and the open is found, not waited on."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{path} is {_kind(st.st_mode)}, not a regular file: remove it or put the file there")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Refused(f"{path} is {_kind(mode)}, not a regular file: remove it or put the file there")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def lines(f, limit: int = MAX_LINE_BYTES):
    """The lines of a binary file without their newlines, each read at most ``limit`` bytes at a
    time; a longer one is skipped and given as None."""
    while True:
        chunk = f.readline(limit + 1)
        if not chunk:
            return
        if chunk.endswith(b"\n") or len(chunk) <= limit:
            yield chunk.rstrip(b"\n")
            continue
        while chunk and not chunk.endswith(b"\n"):
            chunk = f.readline(limit)
        yield None


def write_whole(path, text: str) -> None:
    """``text`` as the whole of ``path``: written beside it, synced, then moved over it; where
    that fails (a full disk), the partial copy is removed and the old file is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(text.encode())  # UTF-8 whatever the locale, as str.encode always is
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def disk_is_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full(path, run_id: str | None = None) -> str:
    """The message for a write that found no space under ``path``: which disk, and the way on."""
    folder = Path(path)
    folder = folder if folder.is_dir() else folder.parent
    try:
        free = f"{gb(shutil.disk_usage(folder).free)} free"
    except OSError:
        free = "its free space unknown"
    again = f", then `python3 -m harness run --resume {run_id}` measures the rest" if run_id else ""
    return f"the disk holding {folder} is full ({free}; no space left on device): free space there{again}"


def disk_nearly_full(path) -> bool:
    """Whether the disk holding ``path`` has less than ``MIN_FREE_BYTES`` free: a case that died
    writing there most likely died of it."""
    try:
        return shutil.disk_usage(path).free < MIN_FREE_BYTES
    except OSError:
        return False


# Host memory a user may state, in GB: more than any host has is a typo.
HOST_MEMORY_ENV = "OOMBENCH_HOST_MEMORY_GB"
HOST_MEMORY_MAX_GB = 100_000


def bounded(text: str, what: str, unit: str, high: float, example: str) -> float:
    """``text`` as a finite number above 0 and at most ``high``; ``Refused`` naming ``what`` otherwise."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= high):
        raise Refused(f"{what} must be a number of {unit} above 0 and at most {high:g} (e.g. {example}), "
                      f"got {text!r}")
    return value


def host_memory_bytes(environ=None) -> int | None:
    """The host memory ``OOMBENCH_HOST_MEMORY_GB`` states, in bytes; None where it is unset."""
    environ = os.environ if environ is None else environ
    stated = environ.get(HOST_MEMORY_ENV)
    if stated is None or stated == "":
        return None
    gbs = bounded(stated, HOST_MEMORY_ENV, "GB", HOST_MEMORY_MAX_GB, f"{HOST_MEMORY_ENV}=512")
    return int(gbs * GB)
