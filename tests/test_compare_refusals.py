"""A compare's refusals and lines, word for word, on a clone made here (tests/test_compare.py runs
whole compares of this repository): a commit git does not know, a dirty working tree, a --bench
that is no expression or selects nothing, what one run's line says, and the compare's own lines
put above the gate's report."""
import pytest

from harness.drive.commands import compare, todo
from harness.drive.commands.compare_state import CompareRefused

from conftest import git, git_repo


@pytest.fixture
def repo(tmp_path):
    return git_repo(tmp_path / "repo")


def refusal(fn, *args) -> str:
    with pytest.raises(CompareRefused) as e:
        fn(*args)
    return str(e.value)


def test_a_commit_is_resolved_to_its_hash_and_an_unknown_one_refused_naming_the_fix(repo):
    head = git(repo, "rev-parse", "HEAD")
    assert compare.resolve(repo, "main", "BASE") == head and compare.resolve(repo, head[:7], "NEW") == head
    for rev in ("nope", " ", "HEAD:a.txt"):  # unknown, blank, a blob rather than a commit
        assert refusal(compare.resolve, repo, rev, "NEW") == (
            f"NEW {rev!r} is not a commit of {repo}: name a branch, tag or hash that `git rev-parse` knows "
            "(fetch it first)")


def test_a_dirty_tree_is_refused_naming_a_change_and_untracked_files_are_no_change(repo):
    (repo / "new.txt").write_text("untracked\n")
    compare.refuse_dirty(repo)
    (repo / "a.txt").write_text("edited\n")
    assert refusal(compare.refuse_dirty, repo) == ("the working tree has 1 uncommitted change(s) (e.g. a.txt): compare "
                                                   "measures commits: commit or stash them first")
    said = refusal(compare.refuse_dirty, repo.parent)
    assert said.startswith(f"{repo.parent} is not a git checkout (") and said.endswith("): run compare in a clone")


def test_a_bench_must_be_an_expression_that_selects_something():
    assert refusal(compare.chosen, "quick", "ceilings[").startswith(
        "--bench takes a regular expression over benchmark names (e.g. --bench 'ceilings\\.Host'): "
        "'ceilings[' is not one (")
    assert refusal(compare.chosen, "quick", "^nothing$") == (
        "--bench '^nothing$' selects no benchmark: see benchmarks/ for the names (module.Class.method(parameters))")


def test_one_bench_is_chosen_per_case_and_parameters_from_the_bench_else_the_profile(monkeypatch):
    a = todo.Bench("f", "A", ("track_x",), "(1)", "c", '{"n": 1}')
    twin = todo.Bench("f", "B", ("track_x",), "(1)", "c", '{"n": 1}')  # two classes, one measurement
    b = todo.Bench("f", "A", ("track_x",), "(2)", "c", '{"n": 2}')
    monkeypatch.setattr(todo, "benches", lambda: [a, twin, b])
    assert compare.chosen("quick", r"\(1\)") == [twin]
    monkeypatch.setattr(compare.profiles, "benchmarks", lambda profile: [r"^f\.A\."] if profile == "mine" else [])
    assert compare.chosen("mine", None) == [a, b]
    # An empty --bench chose nothing: running the whole profile instead would run what was not asked for.
    assert refusal(compare.chosen, "mine", " ").startswith("--bench takes a regular expression over benchmark names, "
                                                           "got ' ': name one")
    monkeypatch.setattr(compare.profiles, "benchmarks", lambda profile: [r"^nothing"])
    assert refusal(compare.chosen, "mine", None) == (
        "--profile mine selects no benchmark: see benchmarks/ for the names (module.Class.method(parameters))")


def test_a_runs_line_is_its_last_records_row_else_the_end_of_its_output(monkeypatch):
    monkeypatch.setattr(compare, "row", lambda rec: [rec, "ok", "1.0 ms"])
    bench = todo.Bench("f", "A", ("track_x",), "(1)", "c", '{"n": 1}')
    assert compare.told(["first", "last"], bench, "ignored") == "last  ok  1.0 ms"
    out = "x" * 10 + "y" * compare.SHOWN_OUTPUT
    assert compare.told([], bench, out) == 'c {"n": 1}: no record; its output ended:\n' + "y" * compare.SHOWN_OUTPUT
    assert compare.told([], bench, None) == 'c {"n": 1}: no record; its output ended:\n'


def test_the_compares_lines_go_above_the_gates_report_written_whole(tmp_path):
    report = tmp_path / "report.md"
    compare.headed(report, ["## head", "line"])
    assert report.read_text() == "## head\nline\n\n"
    report.write_text("the gate's\n")
    compare.headed(report, ["## head"])
    assert report.read_text() == "## head\n\nthe gate's\n" and [p.name for p in tmp_path.iterdir()] == ["report.md"]
