"""The fresh processes the harness starts keep compiled bytecode in a cache of their own where
the environment turns writing it off, so that each does not compile torch afresh."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.drive import bytecode
from harness.drive.asv import suite
from harness.drive.commands import compare
from harness.measure.records.store import RecordStore, RunContext

OFF, PREFIX = "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"


def imported(tmp_path, env, code: str = "import mod") -> str:
    """A fresh python that runs ``code`` (imports of ``tmp_path/src``) under ``env``: what it printed."""
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(tmp_path / "src")}).stdout.strip()


def pycs(root) -> list:
    return sorted(p for p in root.rglob("*.pyc") if "mod" in p.name) if root.exists() else []


@pytest.fixture
def source(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src/mod.py").write_text("X = 1\n")
    return tmp_path


def test_with_writing_off_each_process_compiles_afresh_and_the_cache_ends_that(source):
    raw = {k: v for k, v in os.environ.items() if k != PREFIX} | {OFF: "1"}
    imported(source, raw)
    assert pycs(source) == []  # what the harness works around: nothing is kept, so all is compiled again
    cache = source / "cache"
    imported(source, bytecode.for_children(raw, cache))
    [pyc] = pycs(cache)
    assert pycs(source / "src") == []  # never beside the sources
    written = pyc.stat().st_mtime_ns
    imported(source, bytecode.for_children(raw, cache))
    assert pyc.stat().st_mtime_ns == written  # the next process reads it instead of compiling


@pytest.mark.parametrize("environ", [{}, {OFF: ""}, {OFF: "1", PREFIX: "/theirs"}, {PREFIX: "/theirs"}],
                         ids=["unset", "empty", "prefix-set", "writing-on"])
def test_an_environment_that_keeps_bytecode_or_names_its_cache_is_left_as_it_is(environ, tmp_path):
    assert bytecode.for_children({"HOME": "/h", **environ}, tmp_path) == {"HOME": "/h", **environ}


def test_asv_benchmarks_and_compare_runs_get_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(OFF, "1")
    monkeypatch.delenv(PREFIX, raising=False)
    ctx = RunContext(RecordStore(tmp_path / "records"), "m", "run-r1", "abc")
    env = suite.asv_environment(ctx, allow_oversubscription=False)
    assert OFF not in env and env[PREFIX] == str(bytecode.CACHE)
    # A compare's run: a stand-in tree whose bench.measure says what its process was handed.
    tree = tmp_path / "tree"
    (tree / "harness/drive/asv").mkdir(parents=True)
    for init in ("harness", "harness/drive", "harness/drive/asv"):
        (tree / init / "__init__.py").write_text("")
    (tree / "harness/drive/asv/bench.py").write_text(
        "import json, os\ndef measure(case, **params):\n"
        f"    print(json.dumps([os.environ.get({OFF!r}), os.environ.get({PREFIX!r})]))\n")
    bench = compare.todo.Bench("ceilings", "Host", (), "", "ceilings", json.dumps({"probe": "host_copy"}))
    assert json.loads(compare.measure_in(tree, ctx, bench)) == [None, str(bytecode.CACHE)]


def test_warming_compiles_what_the_cache_lacks_once_past_a_module_that_fails(source, monkeypatch):
    """`harness test` compiles the tests' libraries into the cache before pytest's workers start: a
    package's submodule included, found without importing it here, and a module that raises as it
    is imported stops none of the others."""
    (source / "src/pkg/sub").mkdir(parents=True)
    (source / "src/pkg/__init__.py").write_text("")
    (source / "src/pkg/sub/__init__.py").write_text("")
    (source / "src/pkg/sub/deep.py").write_text("Y = 2\n")
    (source / "src/broken.py").write_text("raise RuntimeError('needs a GPU')\n")
    monkeypatch.syspath_prepend(str(source / "src"))
    monkeypatch.setattr(bytecode, "library_folders", lambda: [source / "src"])  # none of it installed by pip
    cache = source / "cache"
    env = {k: v for k, v in os.environ.items() if k != OFF} | {PREFIX: str(cache), "PYTHONPATH": str(source / "src")}
    wanted = ("broken", "pkg.sub.deep", "mod")
    assert [bytecode.cached(m, cache) for m in wanted] == [False, False, False]
    assert bytecode.warm(env, wanted) is True
    assert [bytecode.cached(m, cache) for m in wanted] == [True, True, True]
    assert pycs(source / "src") == []  # into the cache, never beside the sources
    written = {p: p.stat().st_mtime_ns for p in cache.rglob("*.pyc")}
    assert bytecode.warm(env, wanted) is False  # nothing left to do: no process started
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*.pyc")} == written
    (source / "src/fresh.py").write_text("Z = 3\n")
    off = {k: v for k, v in env.items() if k != PREFIX} | {OFF: "1"}
    assert bytecode.warm(off, ("fresh",)) is False  # writing off and no cache named: nothing would be kept
    assert not bytecode.cached("fresh", cache) and not bytecode.cached("fresh", None)
    on = {k: v for k, v in env.items() if k not in (PREFIX, OFF)}
    assert bytecode.warm(on, ("fresh",)) is True and bytecode.cached("fresh", None)  # beside it, as Python keeps it


@pytest.fixture
def installed(source, monkeypatch):
    """``source/src`` as pip leaves a package: its bytecode compiled beside it, in ``__pycache__``,
    with an optimised level and another interpreter's file there too; the only library folder."""
    import py_compile
    (source / "src/pkg").mkdir()
    (source / "src/pkg/__init__.py").write_text("")
    (source / "src/pkg/mod2.py").write_text("X = 1\n")
    shipped = source / "src/pkg/__pycache__"
    for name in ("__init__", "mod2"):  # beside the source, whatever prefix this process has
        tagged = f"{name}.{sys.implementation.cache_tag}.pyc"
        py_compile.compile(str(source / f"src/pkg/{name}.py"), str(shipped / tagged), doraise=True)
    (shipped / "mod2.cpython-27.pyc").write_bytes(b"another interpreter's")
    (shipped / f"mod2.{sys.implementation.cache_tag}.opt-1.pyc").write_bytes(b"python -O's")
    monkeypatch.setattr(bytecode, "library_folders", lambda: [source / "src"])
    monkeypatch.syspath_prepend(str(source / "src"))
    return source


def import_prints(tmp_path, cache, code: str) -> str:
    return imported(tmp_path, {k: v for k, v in os.environ.items() if k != OFF} | {PREFIX: str(cache)}, code)


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_fresh_cache_reads_the_bytecode_installed_beside_the_sources_and_compiles_none(installed, monkeypatch,
                                                                                         link):
    if link == "symbolic":  # the cache on another file system than the packages
        monkeypatch.setattr(os, "link", lambda *a: (_ for _ in ()).throw(OSError(18, "cross-device link")))
    cache = installed / "cache"
    shipped = installed / "src/pkg/__pycache__" / f"mod2.{sys.implementation.cache_tag}.pyc"
    assert not bytecode.cached("pkg.mod2", cache)
    assert bytecode.seed(cache, [installed / "src"]) == 2  # pkg/__init__ and pkg/mod2, this interpreter's only
    assert sorted(p.name for p in cache.rglob("*.pyc")) == sorted(
        f"{m}.{sys.implementation.cache_tag}.pyc" for m in ("__init__", "mod2"))
    [kept] = cache.rglob("mod2.*.pyc")
    assert kept.samefile(shipped) and kept.is_symlink() == (link == "symbolic")
    assert bytecode.cached("pkg.mod2", cache) and bytecode.warm(
        {k: v for k, v in os.environ.items() if k != OFF} | {PREFIX: str(cache)}, ("pkg.mod2",)) is False
    linked = kept.lstat().st_ino, kept.lstat().st_mtime_ns
    assert import_prints(installed, cache, "import pkg.mod2; print(pkg.mod2.X)") == "1"
    assert (kept.lstat().st_ino, kept.lstat().st_mtime_ns) == linked and kept.samefile(shipped)  # read, not written
    assert bytecode.seed(cache, [installed / "src"]) == 0


def test_a_stale_linked_file_is_compiled_again_in_the_cache_and_the_package_s_own_left_as_pip_wrote_it(installed):
    cache = installed / "cache"
    shipped = installed / "src/pkg/__pycache__" / f"mod2.{sys.implementation.cache_tag}.pyc"
    pip_wrote = shipped.read_bytes()
    bytecode.seed(cache, [installed / "src"])
    (installed / "src/pkg/mod2.py").write_text("X = 22\n")  # edited after install: another size
    assert import_prints(installed, cache, "import pkg.mod2; print(pkg.mod2.X)") == "22"
    [kept] = cache.rglob("mod2.*.pyc")
    assert not kept.samefile(shipped) and not kept.is_symlink() and shipped.read_bytes() == pip_wrote


def test_the_cache_is_linked_again_only_where_a_library_folder_changed(installed):
    env = {PREFIX: str(installed / "cache")}
    assert bytecode.seeded(env) is env and len(list((installed / "cache").rglob("*.pyc"))) == 2
    for pyc in (installed / "cache").rglob("*.pyc"):
        pyc.unlink()
    bytecode.seeded(env)
    assert list((installed / "cache").rglob("*.pyc")) == []  # nothing changed: no walk
    (installed / "src/new").mkdir()  # pip adds a package
    (installed / "src/new/__pycache__").mkdir()
    (installed / "src/new/__pycache__" / f"m.{sys.implementation.cache_tag}.pyc").write_bytes(b"")
    bytecode.seeded(env)
    assert len(list((installed / "cache").rglob("*.pyc"))) == 3
    bytecode.seeded({})  # no cache named: nothing to seed, nothing written
    assert not (installed / "src/cache").exists()
