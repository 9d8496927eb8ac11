"""What a benchmark process under a plain ``asv run`` files its records under
(harness.drive.asv.plain_asv): the commit asv measured and the id of the ``asv run`` it descends from.
Processes are stood in for by objects with psutil's methods, so each ancestry is exact."""
import re
import time

import psutil
import pytest

from harness.drive.asv import plain_asv

from conftest import git, git_repo

RUN_ID = re.compile(r"\d{8}T\d{6}-[0-9a-f]{6}")


class Proc:
    """A stand-in for psutil.Process: a pid, a command line, a start time and its ancestors."""

    def __init__(self, pid, cmdline, started=1_800_000_000.0, parents=(), broken=False):
        self.pid, self._cmdline, self._started, self._parents, self._broken = pid, cmdline, started, parents, broken

    def cmdline(self):
        if self._broken:
            raise psutil.AccessDenied(self.pid)
        return self._cmdline

    def create_time(self):
        if self._broken:
            raise psutil.NoSuchProcess(self.pid)
        return self._started

    def parents(self):
        return list(self._parents)


ASV = ["/v/bin/python", "-m", "asv", "run", "--quick"]
SHELL = ["/bin/sh", "-c", "asv run"]


@pytest.mark.parametrize("cmdline, running", [
    (ASV, True),
    (["/v/bin/asv", "--config", "x.json", "run"], True),
    (["/v/bin/python", "/v/bin/asv", "continuous", "main", "HEAD"], True),
    (["asv", "find", "a..b", "bench"], True),
    (["/v/bin/python", "-m", "asv", "publish"], False),
    (["/v/bin/python", "-m", "asv", "--verbose"], False),  # no command at all
    (["/v/bin/python", "-m", "harness", "run"], False),
    (["/v/bin/python", "/v/lib/asv/benchmark.py", "run"], False),
    (["asv"], False),
    (["/v/bin/python", "-m", "asv.commands", "run"], False),
    (["/v/bin/python", "-m", "not-asv", "run"], False),
    ([], False),
])
def test_an_asv_run_is_told_by_its_command_line(cmdline, running):
    assert plain_asv.is_asv_run(cmdline) is running


def test_the_nearest_asv_run_among_a_process_s_ancestors_is_its_run():
    outer = Proc(10, ASV, started=1.0)
    inner = Proc(20, ["/v/bin/asv", "run"], started=2.0)
    me = Proc(30, ["python", "benchmark.py"], parents=[Proc(25, SHELL), inner, outer])
    assert plain_asv.asv_process(me) is inner
    assert plain_asv.asv_process(Proc(30, ["python"], parents=[Proc(25, SHELL)])) is None


def test_an_ancestor_that_cannot_be_read_ends_the_search_with_none():
    me = Proc(30, ["python"], parents=[Proc(25, SHELL, broken=True), Proc(10, ASV)])
    assert plain_asv.asv_process(me) is None


def test_every_process_of_one_asv_run_names_the_same_run_and_another_run_another():
    asv = Proc(10, ASV, started=time.mktime((2026, 11, 27, 4, 37, 36, 0, 0, -1)))
    first, second = (Proc(pid, ["python"], parents=[Proc(pid - 1, SHELL), asv]) for pid in (31, 41))
    rid = plain_asv.run_id(first)
    assert rid == plain_asv.run_id(second) and RUN_ID.fullmatch(rid) and rid.startswith("20261127T043736-")
    again = Proc(11, ASV, started=asv.create_time())  # another asv run begun in the same second
    assert plain_asv.run_id(Proc(51, ["python"], parents=[again])) not in (rid, None)
    later = Proc(10, ASV, started=asv.create_time() + 1)  # the pid reused by a later asv run
    assert plain_asv.run_id(Proc(61, ["python"], parents=[later])).startswith("20261127T043737-")


def test_outside_an_asv_run_or_where_it_is_gone_there_is_no_run_id():
    assert plain_asv.run_id(Proc(30, ["python"], parents=[Proc(1, ["init"])])) is None
    gone = Proc(10, ASV)
    gone.create_time = lambda: (_ for _ in ()).throw(psutil.NoSuchProcess(10))
    assert plain_asv.run_id(Proc(30, ["python"], parents=[gone])) is None
    assert plain_asv.run_id() is None  # this test process: pytest, no asv run above it


def test_the_commit_is_read_from_this_process_s_environment_unless_one_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv("ASV_COMMIT", "d" * 40)
    assert plain_asv.commit(tmp_path) == "d" * 40
    assert plain_asv.commit(tmp_path, {}) is None


def test_the_commit_is_asv_s_where_it_set_one_else_the_checkout_s_head(tmp_path):
    assert plain_asv.commit(tmp_path, {"ASV_COMMIT": "c" * 40}) == "c" * 40
    assert plain_asv.commit(tmp_path, {}) is None  # no checkout here: no commit to name
    head = git(git_repo(tmp_path), "rev-parse", "HEAD")
    assert plain_asv.commit(tmp_path, {"ASV_COMMIT": ""}) == head
    assert plain_asv.commit(tmp_path, {"OTHER": "x"}) == head
