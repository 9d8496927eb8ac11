"""The words and modes of the folders a command owns (tests/test_owned.py has which folders are free):
the refusal's exact line, names shown on one line, the marker as written, the mode a built folder
is given, and whether a builder is still alive."""
import json
import os
import subprocess
import sys

import pytest

from harness.measure.guards import owned

MARK = ".oombench-test"


def theirs(folder, *names):
    folder.mkdir()
    for name in names:
        (folder / name).write_text("theirs")
    return folder


@pytest.mark.parametrize("names, shown", [
    (("a", "b", "c"), "a, b, c"),
    (("a", "b", "c", "d"), "a, b, c and 1 more"),
    (("e", "d", "c", "b", "a"), "a, b, c and 2 more"),
])
def test_the_refusal_names_three_foreign_entries_and_counts_the_rest(tmp_path, names, shown):
    folder = theirs(tmp_path / "site", *names)
    assert owned.refusal(folder, MARK, "--out") == (
        f"--out {folder} holds what oombench did not make ({shown}) and would be replaced whole: "
        f"name a new folder, e.g. --out {tmp_path / 'site-2'}")


def test_without_a_flag_the_refusal_names_bare_paths(tmp_path):
    (tmp_path / "x").write_text("a file")
    assert owned.refusal(tmp_path / "x", MARK) == \
        f"{tmp_path / 'x'} is not a folder: name a new one, e.g. {tmp_path / 'x-2'}"


def test_a_name_with_control_characters_is_shown_on_one_line_escaped(tmp_path):
    folder = theirs(tmp_path / "site", "new\nline", "esc\x1b[2J", "back\\slash")
    assert "did not make (back\\slash, esc\\x1b[2J, new\\nline)" in owned.refusal(folder, MARK)


def test_an_unreadable_folder_is_refused_with_the_reason(tmp_path, monkeypatch):
    folder = theirs(tmp_path / "site", "a")

    def unreadable(*_):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(owned, "foreign", unreadable)
    assert owned.refusal(folder, MARK, "--out") == (
        f"--out {folder} cannot be read (Permission denied): name a new folder, e.g. --out {tmp_path / 'site-2'}")


def test_the_marker_lists_every_entry_but_itself_with_its_maker_as_indented_json(tmp_path):
    folder = theirs(tmp_path / "site", "b.html", "a.html")
    (folder / MARK).write_text("stale")
    owned.mark(folder, MARK, "harness pages")
    assert (folder / MARK).read_text() == \
        '{\n "made_by": "harness pages",\n "entries": [\n  "a.html",\n  "b.html"\n ]\n}\n'
    assert json.loads((folder / MARK).read_text())["entries"] == ["a.html", "b.html"]


def test_umask_is_read_without_changing_it():
    before = os.umask(0o027)
    try:
        assert owned.umask() == 0o027 and owned.umask() == 0o027
    finally:
        os.umask(before)


def test_a_built_folder_gets_the_mode_a_plain_mkdir_would_give(tmp_path):
    before = os.umask(0o027)
    try:
        folder = tmp_path / "built"
        folder.mkdir(mode=0o700)
        owned.open_as_umask(folder)
        assert (folder.stat().st_mode & 0o777) == 0o750
    finally:
        os.umask(before)


def test_a_builder_is_asked_after_with_signal_0_and_another_users_counts_as_alive(monkeypatch):
    sent = []

    def kill(pid, sig):
        sent.append((pid, sig))
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(owned.os, "kill", kill)
    assert owned.pid_alive(1) and sent == [(1, 0)]  # signal 0: asked, never signalled


def test_a_builder_is_alive_while_its_process_is():
    assert owned.pid_alive(os.getpid())
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    assert not owned.pid_alive(gone)


def test_nothing_is_removed_beside_a_target_whose_folder_is_missing(tmp_path):
    assert owned.remove_stale(tmp_path / "missing" / "out", ("building",)) == []
