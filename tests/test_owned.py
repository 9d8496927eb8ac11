"""Folders a command owns (harness.measure.guards.owned): one is replaced only where its marker lists all it
holds; any other entry, a file in its place or a link to elsewhere is refused with a fresh path."""
import json
import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.measure.guards import owned

MARK = ".oombench-test"
ENTRY = st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=12) \
    .filter(lambda n: n not in (".", "..", MARK))
FIXTURES_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@FIXTURES_OK
@given(made=st.sets(ENTRY, max_size=5), added=st.sets(ENTRY, max_size=3), dirs=st.sets(ENTRY, max_size=2))
def test_a_folder_is_free_exactly_when_its_marker_lists_all_it_holds(tmp_path_factory, made, added, dirs):
    folder = tmp_path_factory.mktemp("owned")
    for name in made:
        (folder / name).write_text("made")
    owned.mark(folder, MARK, "a test")
    for name in added - made:
        (folder / name).mkdir() if name in dirs else (folder / name).write_text("theirs")
    why = owned.refusal(folder, MARK, "--out")
    assert (why is None) == (added <= made), why
    if why:
        assert "did not make" in why and f"--out {folder.with_name(folder.name + '-2')}" in why
        assert "\n" not in why.replace(str(folder), "")  # one line, whatever the names


def test_no_marker_a_file_a_link_and_an_old_marker_are_refused_and_empty_or_missing_are_free(tmp_path):
    assert owned.refusal(tmp_path / "new", MARK) is None
    (tmp_path / "empty").mkdir()
    assert owned.refusal(tmp_path / "empty", MARK) is None
    (tmp_path / "file").write_text("x")
    (tmp_path / "file-2").mkdir()
    assert owned.refusal(tmp_path / "file", MARK).endswith(f"e.g. {tmp_path / 'file-3'}")
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert "not a folder" in owned.refusal(tmp_path / "link", MARK)
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "a.html").write_text("x")
    assert "did not make (a.html)" in owned.refusal(tmp_path / "theirs", MARK)
    (tmp_path / "theirs" / MARK).write_text("Built by an older version, which replaced this folder whole.\n")
    assert "older oombench" in owned.refusal(tmp_path / "theirs", MARK)
    (tmp_path / "theirs" / MARK).write_text(json.dumps({"made_by": "x", "entries": ["a.html"]}))
    assert owned.refusal(tmp_path / "theirs", MARK) is None


def test_only_the_temporary_folders_of_a_builder_that_is_gone_are_removed(tmp_path):
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    target = tmp_path / "out"
    keep = [f".out.building-{os.getpid()}-a", f".out.building-{gone}", ".out.building-x-b", f".other.old-{gone}-c",
            f"out.old-{gone}-d"]
    for name in [f".out.building-{gone}-e", f".out.old-{gone}-f", *keep]:
        (tmp_path / name).mkdir()
    (tmp_path / f".out.old-{gone}-g").write_text("a file, not a folder a build made")
    keep.append(f".out.old-{gone}-g")
    removed = owned.remove_stale(target, ("building", "old"))
    assert sorted(p.name for p in removed) == [f".out.building-{gone}-e", f".out.old-{gone}-f"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
