"""``harness docs --out D`` keeps a user's files as ``pages`` does: it writes only files it wrote
there before (listed in its marker) or new ones, and refuses, in one line before any record is
read, a D holding a README.md or a results page it did not write."""
import pytest

from harness.report import docs

FILES = {rel: f"made {rel}\n" for rel in docs.paths()}


@pytest.fixture
def rendered(monkeypatch):
    """docs.main without git or records: ``render`` gives FILES."""
    monkeypatch.setattr(docs, "committed_results", lambda repo, dest: dest)
    monkeypatch.setattr(docs, "render", lambda repo, results: dict(FILES))


@pytest.mark.parametrize("theirs", ["README.md", "docs/results/tricks.md", "docs/headline.md"])
def test_a_users_file_where_docs_would_write_is_refused_and_kept(tmp_path, rendered, monkeypatch, capsys, theirs):
    (tmp_path / theirs).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / theirs).write_text("mine\n")
    monkeypatch.setattr(docs, "committed_results", lambda *a: pytest.fail("the records were read before refusing"))
    assert docs.main(out=tmp_path) == 2
    err = capsys.readouterr().err
    assert theirs in err and f"e.g. --out {tmp_path}-2" in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / theirs).read_text() == "mine\n"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [theirs]


def test_a_link_where_docs_would_write_is_refused_and_its_target_kept(tmp_path, rendered, capsys):
    target = tmp_path / "elsewhere.md"
    target.write_text("theirs\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "README.md").symlink_to(target)
    assert docs.main(out=tmp_path / "out") == 2
    assert "README.md" in capsys.readouterr().err and target.read_text() == "theirs\n"


def test_docs_rewrites_what_it_wrote_and_keeps_every_other_file(tmp_path, rendered, capsys):
    (tmp_path / "notes.txt").write_text("mine\n")
    assert docs.main(out=tmp_path) == 0
    assert (tmp_path / "README.md").read_text() == FILES["README.md"]
    FILES["README.md"] = "made again\n"
    try:
        assert docs.main(out=tmp_path) == 0, capsys.readouterr().err
    finally:
        FILES["README.md"] = "made README.md\n"
    assert (tmp_path / "README.md").read_text() == "made again\n"
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_every_file_render_makes_is_one_the_marker_can_list(tmp_path, monkeypatch):
    monkeypatch.setattr(docs, "load_rows", lambda results: [])
    monkeypatch.setattr(docs, "generate", lambda rows: {k: "" for k in docs.paths() if k.endswith(".md")
                                                         and k not in ("README.md", docs.COMPARES_DOC)})
    monkeypatch.setattr(docs, "headline_svg", lambda rows: "")
    monkeypatch.setattr(docs, "compares_doc", lambda results: "")
    monkeypatch.setattr(docs, "refresh_readme", lambda *a: "")
    monkeypatch.setattr(docs, "profile_times_md", lambda path: "")
    assert sorted(docs.render(docs.REPO, tmp_path)) == docs.paths()
