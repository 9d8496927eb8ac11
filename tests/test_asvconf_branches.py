"""The branches and folders asv is given, on a clone made here (tests/test_asvconf.py has the
folders of commands side by side): the checked-out branch is added, branches this clone lacks are
dropped, a clone with none is refused naming the fix, paths are made absolute and the results
folder can be replaced."""
import json

import pytest

from harness.drive.asv import asvconf

from conftest import git, git_repo

CONF = {"version": 1, "repo": ".", "branches": ["main", "release"], "results_dir": "results",
        "benchmark_dir": "benchmarks", "html_dir": ".asv/html", "env_dir": ".asv/env", "project": "x"}


def clone(tmp_path, branch="main", conf=CONF):
    repo = git_repo(tmp_path / "repo", branch)
    (repo / "asv.conf.json").write_text("// asv allows comments\n" + json.dumps(conf))
    return repo, lambda *a: git(repo, *a)


def test_git_answers_its_output_stripped_or_nothing_on_failure(tmp_path):
    repo, _ = clone(tmp_path)
    assert asvconf.git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert asvconf.git(repo, "rev-parse", "--verify", "--quiet", "refs/heads/nope") == ""
    assert asvconf.git(tmp_path, "rev-parse", "HEAD") == ""  # not a clone
    assert asvconf.git(repo, "rev-parse", "nope") == ""  # it failed, whatever it printed


def test_the_checked_out_branch_is_added_and_branches_the_clone_lacks_are_dropped(tmp_path):
    repo, run = clone(tmp_path)
    run("switch", "-q", "-c", "feature")
    conf = asvconf.fitted(repo)
    assert conf["branches"] == ["main", "feature"]  # "release" is not in this clone
    assert conf["project"] == "x"


def test_paths_are_made_absolute_and_the_results_folder_replaced_where_given(tmp_path):
    repo, _ = clone(tmp_path)
    conf = asvconf.fitted(repo)
    assert {k: conf[k] for k in asvconf.PATHS} == {
        "repo": str(repo.resolve()), "results_dir": str((repo / "results").resolve()),
        "benchmark_dir": str((repo / "benchmarks").resolve()), "html_dir": str((repo / ".asv/html").resolve()),
        "env_dir": str((repo / ".asv/env").resolve())}
    assert asvconf.fitted(repo, tmp_path / "mine")["results_dir"] == str((tmp_path / "mine").resolve())


def test_a_detached_head_adds_no_branch(tmp_path):
    repo, run = clone(tmp_path)
    run("switch", "-q", "--detach")
    assert asvconf.fitted(repo)["branches"] == ["main"]


def test_a_clone_with_none_of_the_branches_is_refused_naming_them_and_the_fix(tmp_path):
    repo, run = clone(tmp_path, branch="topic")
    run("switch", "-q", "--detach")
    with pytest.raises(SystemExit) as e:
        asvconf.fitted(repo)
    assert str(e.value) == ("oombench: asv files and publishes results by branch, and this clone has none of main, "
                            "release: check out a branch (git switch -c NAME)")
    repo2, run2 = clone(tmp_path / "2", branch="topic", conf={k: v for k, v in CONF.items() if k != "branches"})
    run2("switch", "-q", "--detach")
    with pytest.raises(SystemExit, match="has none of asv.conf.json branches: check out a branch"):
        asvconf.fitted(repo2)


def test_the_private_config_is_the_fitted_one_as_a_file_removed_after(tmp_path):
    repo, _ = clone(tmp_path)
    with asvconf.private_config(repo, tmp_path / "r") as path:
        assert json.loads(path.read_text()) == asvconf.fitted(repo, tmp_path / "r")
        assert path.parent.parent == repo / ".asv"
    assert not path.exists()
