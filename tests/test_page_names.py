"""The file each page is written to, name by name (tests/test_pages_hostile.py builds whole sites
from hostile records): a plain case keeps its name, any other gets a slug and a hash of its
whole name, no two pages of a build share a file even on a case-insensitive disk, and no page
lands outside its folder. And the two ways every page writes parameters and ratios."""
import hashlib

import pytest

from harness.report.pages import fmt, names


def digest(text: str, n: int) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


@pytest.mark.parametrize("case, page", [
    ("tricks", "tricks.html"),
    ("parallel_lm", "parallel_lm.html"),
    ("a" * 64, "a" * 64 + ".html"),
    ("seed000", "seed000.html"),
])
def test_a_plain_lower_case_name_is_its_own_page(case, page):
    assert names.page_name(case) == page


@pytest.mark.parametrize("case, slug", [
    ("Tricks", "tricks"),
    ("../../etc/passwd", "etc-passwd"),
    ("a b--c", "a-b-c"),
    ("index", "index"),  # the build's own pages are reserved
    ("provenance", "provenance"),
    ("a" * 65, "a" * 40),
    ("???", "case"),
    ("", "case"),
    ("\ud800", "case"),  # a lone surrogate still hashes
])
def test_any_other_name_is_a_slug_and_a_hash_of_the_whole_name(case, slug):
    assert names.page_name(case) == f"{slug}-{digest(case, 10)}.html"


def test_a_page_inside_its_folder_is_given_and_one_outside_is_refused(tmp_path):
    assert names.inside(tmp_path, "a.html") == (tmp_path / "a.html").resolve()
    with pytest.raises(names.UnsafePath) as e:
        names.inside(tmp_path, "../a.html")
    assert str(e.value) == \
        f"the page '../a.html' would be written to {(tmp_path.parent / 'a.html').resolve()}, outside {tmp_path}"


def test_names_claimed_once_are_kept_and_those_claimed_twice_or_taken_get_their_owners_hash():
    wanted = {("page", "A"): "a.html", ("page", "a"): "a.html", ("page", "b"): "b.html",
              ("page", "x"): "X.html", ("page", "i"): "index.html"}
    got = names.unique(wanted)
    assert got[("page", "b")] == "b.html"
    assert got[("page", "x")] == "X.html"
    for key in (("page", "A"), ("page", "a"), ("page", "i")):
        stem = wanted[key].rpartition(".")[0]
        assert got[key] == f"{stem}-{digest(repr((key, 0)), 8)}.html"
    assert len({n.casefold() for n in got.values()}) == len(got)


def test_a_hashed_name_that_is_taken_too_tries_the_next_count():
    key = ("page", "a")
    first = f"a-{digest(repr((key, 0)), 8)}.html"
    got = names.unique({key: "a.html", ("page", "b"): "a.html"}, taken=("a.html", first.upper()))
    assert got[key] == f"a-{digest(repr((key, 1)), 8)}.html"


def test_a_build_names_each_case_a_page_and_a_records_page_none_alike():
    got = names.names(["tricks", "Tricks", "tricks"])
    assert got.page["tricks"] == "tricks.html" and got.provenance["tricks"] == "provenance-tricks.html"
    assert got.page["Tricks"] == f"tricks-{digest('Tricks', 10)}.html"
    assert got.provenance["Tricks"] == f"provenance-tricks-{digest('Tricks', 10)}.html"
    assert set(got.page) == set(got.provenance) == {"tricks", "Tricks"}
    plain = digest("Provenance", 10)  # a plain name whose records' page is what "Provenance" slugs to
    assert names.page_name("Provenance") == f"provenance-{plain}.html"
    clash = names.names(["Provenance", plain])
    pages = [*clash.page.values(), *clash.provenance.values()]
    assert len(set(pages)) == 4 and clash.page[plain] == f"{plain}.html"
    assert f"provenance-{plain}.html" not in pages  # wanted twice: neither owner keeps it


@pytest.mark.parametrize("params, text", [({"a": 1, "b": "x"}, "a=1 b=x"), ({}, "(none)")])
def test_parameters_are_written_in_their_order_or_none(params, text):
    assert fmt.fmt_params(params) == text


@pytest.mark.parametrize("ratio, text", [(None, "-"), (0.734, "0.73x"), (2.0, "2.00x"), (0.0, "0.00x")])
def test_a_ratio_is_two_decimals_and_a_dash_where_there_is_none(ratio, text):
    assert fmt.fmt_times(ratio) == text


def test_a_hash_goes_before_the_last_extension_only():
    key = ("page", "v")
    got = names.unique({key: "v1.2.html", ("page", "w"): "v1.2.html"})
    assert got[key] == f"v1.2-{digest(repr((key, 0)), 8)}.html"
