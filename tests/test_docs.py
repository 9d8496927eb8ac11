"""`harness docs`: the committed results docs, the headline and the README's copy of it are what the
committed records give, made again here and compared; a local run cannot change what they are
made from; every family of benchmarks/ has its doc, and each doc covers its family's cases."""
import importlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.drive.commands import cli
from harness.measure.outcomes import OK
from harness.report import docs, specs
from harness.report.model import latest, load_rows
from harness.report.tables import machine_label

from conftest import FROZEN, plain

REPO = Path(__file__).resolve().parents[1]
STALE = "is stale: run `python3 -m harness docs` and commit what it changes"


def git_checkout() -> bool:
    return shutil.which("git") is not None and subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=REPO, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def every(made):
    """Every committed record, superseded ones included, as ``harness docs`` read them (``made``)."""
    return made[1]


@pytest.fixture(scope="module")
def rows(every):
    return latest(every)


@pytest.fixture(scope="module")
def frozen_rows():
    """The latest of the frozen records (tests/data/results): what the docs' behaviour is tested on."""
    return latest(load_rows(FROZEN))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, list]:
    """A folder ``harness docs --out`` wrote into, made once for the module, and the records it read:
    every test that reads what the committed records give reads this one run's files and records,
    rather than making the docs (or reading the records) again."""
    if not git_checkout():
        pytest.skip("not a git checkout: the docs are made from the records git holds")
    out = tmp_path_factory.mktemp("docs-out")
    read = []

    def load_rows_kept(results):  # the records docs.main reads, kept for the tests that read them too
        read.append(load_rows(results))
        return read[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(docs, "load_rows", load_rows_kept)
        assert docs.main(repo=REPO, out=out) == 0
    return out, read.pop()


@pytest.fixture(scope="module")
def written(made) -> Path:
    return made[0]


@pytest.fixture(scope="module")
def generated(written) -> dict:
    """Relative path -> text of every markdown file under docs/ that `harness docs` made."""
    return {p.relative_to(written).as_posix(): p.read_text() for p in (written / "docs").rglob("*.md")}


def test_every_committed_doc_is_what_the_committed_records_give(generated):
    on_disk = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
    assert on_disk == sorted(generated), "docs/ holds a file `harness docs` does not make, or lacks one it does"
    for rel, text in sorted(generated.items()):
        assert (REPO / rel).read_text() == text, f"{rel} {STALE}"


def test_the_readme_holds_the_headline_between_its_markers(generated):
    readme = (REPO / "README.md").read_text()
    assert docs.readme_headline(readme) == generated["docs/headline.md"], f"README.md's headline {STALE}"
    assert "](docs/headline.svg)" in readme


def test_the_readme_links_every_family_doc_and_stays_short():
    readme = (REPO / "README.md").read_text()
    for fam in specs.FAMILIES:
        assert f"](docs/results/{fam.name}.md)" in readme
    assert len(readme.splitlines()) <= 250
    assert "../" not in readme  # nothing outside the repository


def test_the_headline_chart_plots_each_technique_on_each_card(frozen_rows):
    grid = docs.headline_rows(frozen_rows)
    plotted = {t for (t, _), r in grid.items() if r.record.outcome == OK}
    machines = {m for _, m in grid}
    assert len(plotted) >= 5 and len(machines) >= 2
    svg = docs.headline_svg(frozen_rows)
    assert svg == docs.headline_svg(frozen_rows), "the same records must draw the same SVG"
    for name in sorted(plotted | machines):
        assert name in svg, f"the headline chart does not name {name}"


def test_the_committed_headline_chart_is_what_the_committed_records_draw(rows, written):
    grid = docs.headline_rows(rows)
    committed_svg = (REPO / "docs" / "headline.svg").read_text()
    for name in sorted({t for (t, _), r in grid.items() if r.record.outcome == OK} | {m for _, m in grid}):
        assert name in committed_svg, f"docs/headline.svg does not name {name}: it {STALE}"
    # matplotlib's SVG differs between its releases; under the release that drew it, byte for byte.
    import matplotlib
    drawn_by = re.search(r"Matplotlib v([^,<\s]+)", committed_svg)
    if drawn_by and drawn_by.group(1) == matplotlib.__version__:
        # `harness docs` drew it from the committed records (its run is shared: see ``written``)
        assert committed_svg == (written / "docs" / "headline.svg").read_text(), f"docs/headline.svg {STALE}"


def test_harness_docs_writes_into_a_folder_what_is_committed(tmp_path, written, generated):
    assert cli.parser().parse_args(["docs", "--out", str(tmp_path)]).func is cli._docs
    # `written` is docs.main's folder (exit 0); what it holds under docs/ is committed, byte for byte
    # (test_every_committed_doc_is_what_the_committed_records_give), and the rest is here
    assert sorted(p.relative_to(written).as_posix() for p in written.rglob("*") if p.is_file()) == sorted(
        [*generated, "docs/headline.svg", "README.md", docs.MARK])
    assert (written / "docs" / "headline.svg").read_text().lstrip().startswith("<?xml")
    assert docs.readme_headline((written / "README.md").read_text()) == generated["docs/headline.md"]


def test_a_local_run_cannot_change_what_the_docs_are_made_from(tmp_path):
    """Only what git holds (committed, or staged) is read: not a new file a run wrote, nor a
    change it made to a tracked one."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "clone"
    folder = repo / "results" / "records" / "box"
    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (folder / "a.jsonl").write_text('{"committed": 1}\n')
    (folder / "probes.fits-probes.ndjson").write_text("{}\n")
    for other in (docs.ESTIMATORS, docs.REPLAYS):  # the other estimators' figures, the predictions page's too
        (repo / other).write_text('{"committed": 1}\n')
    subprocess.run(["git", "add", "results"], cwd=repo, check=True)
    (repo / docs.REPLAYS).write_text('{"local": 2}\n')
    (folder / "a.jsonl").write_text('{"committed": 1}\n{"local": 2}\n')
    (folder / "b.jsonl").write_text('{"local": 3}\n')
    (folder / "local.fits-probes.ndjson").write_text("{}\n")
    got = docs.committed_results(repo, tmp_path / "out")
    # a committed run's probes come too: the predictions page fits on them
    assert sorted(p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file()) == sorted([
        "records/box/a.jsonl", "records/box/probes.fits-probes.ndjson",
        *(Path(other).relative_to("results").as_posix() for other in (docs.ESTIMATORS, docs.REPLAYS))])
    assert (got / "records" / "box" / "a.jsonl").read_text() == '{"committed": 1}\n'
    assert (got.parent / docs.REPLAYS).read_text() == '{"committed": 1}\n'


def test_outside_a_git_checkout_it_says_why(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    with pytest.raises(docs.DocsError, match="git clone"):
        docs.committed_results(tmp_path, tmp_path / "out")


def test_each_family_is_a_module_of_benchmarks_and_covers_its_cases():
    modules = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem not in ("__init__", "common"))
    assert sorted(f.name for f in specs.FAMILIES) == modules
    for fam in specs.FAMILIES:
        mod = importlib.import_module(f"benchmarks.{fam.name}")
        measured = {c.case for c in vars(mod).values() if isinstance(c, type) and getattr(c, "case", "")}
        assert measured == set(fam.cases), f"docs/results/{fam.name}.md covers {fam.cases}, benchmarks/ runs {measured}"
        assert {s.case for s in fam.specs} == set(fam.cases), f"a case of {fam.name} has no table"


def test_each_family_doc_says_where_its_figures_come_from(frozen_rows):
    generated = docs.generate(load_rows(FROZEN))
    for fam in specs.FAMILIES:
        text = plain(generated[f"docs/results/{fam.name}.md"])
        for r in frozen_rows:
            if r.case in fam.cases:
                assert machine_label(r) in text and (r.record.commit or "-")[:8] in text
                assert r.record.environment.libraries.get("torch", "-") in text
        assert "Generated by `python3 -m harness docs`" in text


@pytest.mark.parametrize("out", ["", "hostname", "hostname/docs"])
def test_an_out_that_names_no_folder_is_refused_before_anything_is_read_or_written(tmp_path, monkeypatch, capsys,
                                                                                     out):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostname").write_text("box\n")
    monkeypatch.setattr(docs, "committed_results", lambda *a: pytest.fail("the records were read before refusing"))
    assert cli.main(["docs", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "e.g. --out docs-out" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostname"]
    assert (tmp_path / "hostname").read_text() == "box\n"


def test_a_docs_folder_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(docs, "committed_results", lambda repo, dest: dest)
    monkeypatch.setattr(docs, "render", lambda repo, results: {"docs/headline.md": "x\n"})
    (tmp_path / "docs" / "headline.md").mkdir(parents=True)  # a folder where the file goes
    assert docs.main(repo=REPO, out=tmp_path) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "headline.md" in err and len(err.strip().splitlines()) == 1, err


# results/ named from the repository's root, the store's committed folder, asv's site of results/
READS_RESULTS = re.compile(r'REPO\s*/\s*"results\b|\bCOMMITTED\s*/|asv_site\.publish\(REPO, [^,()]*\)')


def test_no_test_reads_the_repositorys_results():
    """A test that read results/ would break when a new machine, run or version is filed: tests
    read conftest.FROZEN or records they plant; only the docs' freshness checks read what git
    holds (``docs.committed_results``), and say to run `python3 -m harness docs`."""
    found = [f"{p.name}:{n}: {line.strip()}" for p in sorted(Path(__file__).parent.glob("test_*.py"))
             for n, line in enumerate(p.read_text().splitlines(), start=1) if READS_RESULTS.search(line)]
    assert found == [], "read conftest.FROZEN or plant records in tmp_path instead:\n" + "\n".join(found)


def test_every_results_page_opens_with_its_answer_and_ends_with_how_and_where_from(generated):
    """The answer first: a sentence and the tables; how they were measured, the provenance and the
    inventory last. The headline's table comes before the paragraph that says what it is."""
    heads = ("## Tables", "## How these were measured", "## Where these figures come from", "## What is there")
    for path, text in generated.items():
        if not path.startswith("docs/results/") or path.endswith(("compares.md", "predict.md")):
            continue  # pages of their own readers, each opening with its own answer (a list, a score)
        at = [text.find(h) for h in heads if h in text]
        assert at == sorted(at) and at[0] == text.index("\n## ") + 1, (path, at)  # the first heading is the tables'
        first = text.find("\n### ") if "\n### " in text else text.index("## Tables\n\nNo committed records yet")
        assert first < text.find("## How these were measured"), path  # a table (or its absence said) before the method
    words = generated["docs/results/tricks.md"].split("\n## Tables")[0]
    assert "**The answer**" in words and "least device memory" in words  # the answer in words, before the tables
    head = generated["docs/headline.md"]
    # the command (one line, which keeps the table checkable against it), the table, then what it is
    assert head.index("```sh") < head.index("\n| ") < head.index("Every technique of")


def test_the_answer_in_words_names_the_least_memory_and_the_shortest_step_of_each_column(frozen_rows):
    from harness.report.specs import FAMILIES
    tricks = next(f for f in FAMILIES if f.name == "tricks")
    made = tricks.specs[0].grid(frozen_rows)
    said = docs.answer_words(tricks.specs[0], frozen_rows)
    for col, column in enumerate(made.head[1:]):
        ran = [row for _, cells in made.lines for _, row in cells[col:col + 1]
               if row is not None and row.record.outcome == "ok" and row.record.device_bytes()]
        least = min(ran, key=lambda r: (r.record.device_bytes(), r.record.timing.median_s))
        fastest = min(ran, key=lambda r: (r.record.timing.median_s, r.record.device_bytes()))
        assert (f"{column}: the least device memory `technique={least.record.params['technique']}` "
                f"({docs.gb(least.record.device_bytes())}), the shortest step "
                f"`technique={fastest.record.params['technique']}` ({fastest.record.timing.median_s:.4g} s)") in said
    assert docs.answer_words(None, frozen_rows) == ""
