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


def imported(tmp_path, env) -> None:
    """A fresh python that imports a module of ``tmp_path/src`` under ``env``."""
    subprocess.run([sys.executable, "-c", "import mod"], cwd=tmp_path, check=True,
                   env={**env, "PYTHONPATH": str(tmp_path / "src")})


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
