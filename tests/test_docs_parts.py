"""The parts of ``harness docs`` that say where figures come from and put them in place, each on
made-up input (tests/test_docs.py makes the whole docs from the committed records): the records'
names, the CuPy and GPU columns, a table's section, the README's generated parts, the profile
times, and the folder the docs may be written to."""
import json
from types import SimpleNamespace

import pytest

from harness.report import docs
from harness.report.selection import Select

from conftest import fake_devices


def row_from(source: str = "", gpus=()):
    devices = SimpleNamespace(gpus=gpus)
    return SimpleNamespace(source=source, record=SimpleNamespace(environment=SimpleNamespace(devices=devices)))


@pytest.mark.parametrize("source, glob", [
    ("results/records/nvidia-h200-x1/b03788d3-20261127T043736-942ce1.jsonl",
     "results/records/nvidia-h200-x1/b03788d3-*"),
    ("results/records/cpu-x/asv-direct.jsonl", "results/records/cpu-x/asv-direct.jsonl"),
    ("results/records/cpu-x/B03788D3-run.jsonl", "results/records/cpu-x/B03788D3-run.jsonl"),  # not a commit's digits
    ("results/records/cpu-x/b03788d-run.jsonl", "results/records/cpu-x/b03788d-run.jsonl"),
])
def test_records_are_named_by_their_commits_files_or_by_their_own_name(source, glob):
    assert docs._records_glob(row_from(source)) == glob


@pytest.mark.parametrize("libs, cupy", [
    ({"cupy-cuda13x": "14.2.0", "cupy-cuda12x": "13.6.0", "cupy": "1"}, "14.2.0"),
    ({"cupy-cuda12x": "13.6.0", "cupy": "1"}, "13.6.0"),
    ({"cupy": "12.0.0"}, "12.0.0"),
    ({"torch": "2.11.0"}, "-"),
])
def test_the_cupy_column_is_the_wheel_for_the_newest_cuda_installed(libs, cupy):
    assert docs._cupy(libs) == cupy


def test_the_gpu_column_counts_each_model_and_says_each_where_there_are_several():
    one = fake_devices("NVIDIA H100 80GB HBM3", count=1, total=81559 * 2**20).gpus
    two = fake_devices("NVIDIA H200", count=2, total=143771 * 2**20).gpus
    assert docs._gpus(row_from(gpus=one)) == "1 x H100 80GB HBM3 (85.5 GB)"
    assert docs._gpus(row_from(gpus=two)) == "2 x H200 (150.8 GB each)"
    assert docs._gpus(row_from(gpus=one + two)) == "1 x H100 80GB HBM3 (85.5 GB), 2 x H200 (150.8 GB each)"
    assert docs._gpus(row_from(gpus=())) == "none"


def spec(printed=None, quiet=False, raises=None):
    def render(rows):
        if raises:
            raise ValueError(raises)
        assert rows == ["the rows"]
        return printed
    return SimpleNamespace(render=render, command=lambda: "python3 -m harness table x", title="T", text="Why.",
                           quiet=quiet, bench=(Select("x"),))


def test_a_tables_section_is_its_title_text_command_and_the_printed_table():
    head = "### T\n\nWhy.\n\n```sh\npython3 -m harness table x\n```\n\n"
    rows = ["the rows"]
    assert docs.table_section(spec("| a |"), rows) == head + "| a |\n"
    assert docs.table_section(spec(None), rows) == head + \
        "No committed record matches yet: `python3 -m harness run --bench '^x\\.'` measures them.\n"
    assert docs.table_section(spec(None, quiet=True), rows) == ""
    assert docs.table_section(spec("| a |", quiet=True), rows) == head + "| a |\n"
    with pytest.raises(docs.DocsError) as e:
        docs.table_section(spec(raises="no such column"), rows)
    assert str(e.value) == ("the table `python3 -m harness table x` cannot be made from the records: no such column. "
                            "Change its Spec in harness/report/specs.py")


README = ("# x\n<!-- headline:start -->\nold\n<!-- headline:end -->\n"
          "mid\n<!-- profile-times:start -->\nt\n<!-- profile-times:end -->\nend\n")


def test_the_readmes_parts_are_replaced_between_their_markers_and_the_rest_kept():
    new = docs.refresh_readme(README, "NEW HEAD\n", "NEW TIMES\n")
    assert new == README.replace("\nold\n", "\nNEW HEAD\n").replace("\nt\n", "\nNEW TIMES\n")
    assert docs.readme_part(new, "headline") == "NEW HEAD\n" and docs.readme_headline(new) == "NEW HEAD\n"
    assert docs.readme_part(new, "profile-times") == "NEW TIMES\n"
    assert docs.refresh_readme(README, "H\n") == README.replace("\nold\n", "\nH\n")  # no times: theirs kept


def test_a_part_at_the_very_start_is_found_and_only_the_first_pair_of_markers_is_the_part():
    top = "<!-- headline:start -->\nold\n<!-- headline:end -->\n"
    quoted = top + "a README that quotes its markers: <!-- headline:start -->x<!-- headline:end -->\n"
    assert docs.readme_part(top, "headline") == "old\n"
    assert docs.refresh_readme(quoted, "H\n") == quoted.replace("\nold\n", "\nH\n", 1)
    assert docs.readme_part(quoted, "headline") == "old\n"


@pytest.mark.parametrize("broken", [
    "# x\n<!-- headline:end -->\nold\n<!-- headline:start -->\n",  # the wrong way round
    "# x\n<!-- headline:start -->\nold\n",
    "# x\n",
])
def test_a_readme_without_a_pair_of_markers_is_refused_naming_them(broken):
    with pytest.raises(docs.DocsError) as e:
        docs.refresh_readme(broken, "H\n")
    assert str(e.value) == ("README.md has no <!-- headline:start --> ... <!-- headline:end --> pair "
                            "to put the headline between")
    with pytest.raises(docs.DocsError) as e:
        docs.readme_part(broken, "headline")
    assert str(e.value) == "README.md has no <!-- headline:start --> ... <!-- headline:end --> pair"


def test_profile_times_are_a_table_of_each_profile_on_each_gpu_with_the_calls_of_a_resumed_run(tmp_path):
    path = tmp_path / "times.json"
    path.write_text(json.dumps({"commit": "abc12345", "runs": [
        {"profile": "quick", "gpu": "NVIDIA H200", "calls_s": [80]},
        {"profile": "standard", "gpu": "NVIDIA H200", "calls_s": [574, 37]},
        {"profile": "standard", "gpu": "A CPU", "calls_s": [141]},
        {"profile": "budget", "gpu": "A CPU", "calls_s": [9]}]}))
    assert docs.profile_times_md(path) == (
        "| profile   | A CPU        | NVIDIA H200           |\n"
        "|:----------|:-------------|:----------------------|\n"
        "| quick     | not measured | 1.33 min              |\n"
        "| standard  | 2.35 min     | 10.2 min (574 + 37 s) |\n"
        "| full      | not measured | not measured          |\n"
        "\nMeasured at commit abc12345; runs, logs and how each was timed: `results/profile-times.json`, "
        "`results/logs/`.\n")


def test_the_docs_folder_must_be_a_folder_named(tmp_path):
    assert docs.out_problem(None) is None and docs.out_problem(tmp_path / "new") is None
    assert docs.out_problem("") == ("--out '' names no folder: name one, e.g. --out docs-out, "
                                    "or leave --out out for the repository")
    (tmp_path / "f").write_text("x")
    assert docs.out_problem(tmp_path / "f") == \
        f"--out {tmp_path / 'f'}: {tmp_path / 'f'} is a file, not a folder: name a folder, e.g. --out docs-out"
    assert docs.out_problem(tmp_path / "f" / "sub") == \
        f"--out {tmp_path / 'f' / 'sub'}: {tmp_path / 'f'} is a file, not a folder: name a folder, e.g. --out docs-out"


def test_only_the_files_that_changed_are_written(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "same.md").write_text("same\n")
    (tmp_path / "docs" / "old.md").write_text("old\n")
    written = docs.write(tmp_path, {"docs/same.md": "same\n", "docs/old.md": "new\n", "docs/a/b/new.md": "n\n"})
    assert written == [tmp_path / "docs/a/b/new.md", tmp_path / "docs/old.md"]
    assert (tmp_path / "docs/old.md").read_text() == "new\n" and (tmp_path / "docs/a/b/new.md").read_text() == "n\n"
