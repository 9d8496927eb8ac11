"""The file each page is written to: data never chooses a path, and no two pages of a build share one.

A case's page is named after it (a slug where the name is not a plain word), its records' page
is ``provenance-`` and the same name (each family's records on a page of their own: one page of
every record grew too long to open). Two names can still meet after slugging (a case named
``Provenance`` slugs to what ``dd35a81646``'s records' page is called, and a case-insensitive disk
reads ``A.html`` as ``a.html``), so the names of a build are made unique together, after slugging:
a name another page also wants, or one of the build's fixed pages, gets a hash of its owner.
"""
from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RESERVED = {"index", "provenance", "style", "chooser", "seeds", "predict"}  # the build's own pages
FIXED = ("index.html", "provenance.html", "chooser.html", "seeds.html", "predict.html", "style.css")


class UnsafePath(ValueError):
    """A page would land outside the output folder, or on another page's file."""


def _digest(text: str, n: int = 10) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def page_name(case: str) -> str:
    """The page of a case: ``NAME.html`` where the name is a plain lower-case word, else a slug of it
    with a hash of the whole name, so no name leaves the folder (uniqueness is ``names``')."""
    if re.fullmatch(r"[a-z0-9_]{1,64}", case) and case not in RESERVED:
        return f"{case}.html"
    slug = re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")[:40] or "case"
    return f"{slug}-{_digest(case)}.html"


def inside(folder: Path, name: str) -> Path:
    """``folder / name``, refused (UnsafePath) where it resolves outside ``folder``."""
    path = (folder / name).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise UnsafePath(f"the page {name!r} would be written to {path}, outside {folder}")
    return path


def unique(wanted: dict[tuple[str, str], str], taken=FIXED) -> dict[tuple[str, str], str]:
    """Each key its wanted file name where no other key and no ``taken`` name claims it (compared
    casefolded, as a case-insensitive disk compares them); the others that name with a hash of
    their key, in key order, so a build names its pages the same way every time."""
    used = {t.casefold() for t in taken}
    claims = Counter(name.casefold() for name in wanted.values())
    out = {k: name for k, name in wanted.items() if claims[name.casefold()] == 1 and name.casefold() not in used}
    used |= {name.casefold() for name in out.values()}
    for key in sorted(set(wanted) - set(out)):
        stem, _, ext = wanted[key].rpartition(".")
        name = next(c for c in (f"{stem}-{_digest(repr((key, n)), 8)}.{ext}" for n in itertools.count())
                    if c.casefold() not in used)
        out[key] = name
        used.add(name.casefold())
    return out


@dataclass(frozen=True)
class Names:
    page: dict[str, str]  # case -> its family page
    provenance: dict[str, str]  # case -> its records' page


def names(cases) -> Names:
    """The pages of a build's cases, no two alike and none a fixed page's."""
    wanted = {}
    for case in set(cases):
        wanted[("page", case)] = page_name(case)
        wanted[("provenance", case)] = "provenance-" + page_name(case)
    got = unique(wanted)
    return Names({c: n for (kind, c), n in got.items() if kind == "page"},
                 {c: n for (kind, c), n in got.items() if kind == "provenance"})
