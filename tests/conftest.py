import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock
from hypothesis import settings

# Under xdist, one worker per core: the BLAS and OpenMP threads of NumPy and torch, one per core in
# each worker and in each process a test starts, would leave the cores' count squared threads
# spinning on each other. Set before the harness's imports below (NumPy's OpenBLAS reads it when
# it loads, and the tables load NumPy), so that the processes the tests start inherit it too.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

from harness.drive import bytecode
from harness.drive.asv.bench import RUN_ENV
from harness.measure.instruments.devices import GPU, Devices
from harness.measure.records.store import RecordStore, RunContext
from harness.report import tables as _tables

# Where the environment turns bytecode writing off (as many images do), each xdist worker would
# compile and rewrite the asserts of every test module afresh, and each process a test starts (a
# rank, a probe, `harness run`) would compile the harness again: as `python3 -m harness test` does,
# plain pytest keeps that bytecode in the harness's own cache, never beside the sources. Set before
# the workers start (this conftest loads first) and the test modules are imported.
_kept = bytecode.for_children(os.environ)
if _kept != dict(os.environ):
    os.environ.pop(bytecode.OFF, None)
    os.environ.update(_kept)
    sys.dont_write_bytecode, sys.pycache_prefix = False, _kept[bytecode.PREFIX]

# Property-based tests: a few hundred examples each by default, so the suite stays fast;
# OOMBENCH_HYPOTHESIS=thorough runs ten thousand.
settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("thorough", max_examples=10_000, deadline=None)
settings.load_profile(os.environ.get("OOMBENCH_HYPOTHESIS", "ci"))

# What the tests import that takes longest to compile: compiled once into the bytecode cache before
# pytest's workers start (where the cache lacks it, ``pytest_configure``), not by each worker at once.
WARM_FOR_TESTS = ("torch", "scipy.stats", "matplotlib.pyplot", "hypothesis", "playwright.sync_api", "markdown_it",
                  "transformers", "transformers.models.llama.modeling_llama", "transformers.models.vit.modeling_vit",
                  "transformers.models.gpt2.modeling_gpt2", "transformers.models.bert.modeling_bert", "peft",
                  "torchao.quantization", "torchao.optim", "asv", "xdist")

# No GPU here: without a software rasteriser nor GPU compositing, Chromium paints on its CPU path
# alone, which spends less of the cores the other workers share.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-software-rasterizer", "--disable-gpu-compositing", "--disable-extensions", "--mute-audio"]

# xdist hands each worker whole files (`--dist loadfile`) in the order they are collected
# (`--no-loadscope-reorder`: by default it hands them out by their count of tests, most first, which
# leaves for last the few-test files that start processes, and one worker idle while the other
# runs them). The files that take longest are collected first, the rest after them in pytest's
# order: a scheduling hint only, which changes what runs in no test.
LONGEST_FIRST = ("test_kills_ranks.py", "test_try.py", "test_pages_browser.py", "test_fits.py", "test_launch.py",
                 "test_parallel.py", "test_pages.py", "test_kills.py", "test_chainer.py", "test_tricks.py",
                 "test_asv_front.py", "test_try_newer.py", "test_ways_newer.py", "test_docs.py", "test_compare.py",
                 "test_pages_screens.py", "test_pages_hostile.py", "test_ways_out.py", "test_compare_resume.py")


def pytest_xdist_auto_num_workers(config):
    """One worker more than the logical CPUs (``-n auto``): the heaviest tests spend part of their
    time waiting on the processes they start (ranks, probes, a killed run, asv, Chromium), and a
    worker more keeps the cores busy meanwhile."""
    return (os.cpu_count() or 1) + 1


def pytest_configure(config):
    """Before xdist starts its workers: where the cache lacks the bytecode of the libraries the
    tests import (a fresh clone under ``PYTHONDONTWRITEBYTECODE``, whose cache is the clone's own,
    run by plain pytest or by `harness test`), compile them once into it, rather than have each
    worker compile the same modules at the same time."""
    workers_to_start = getattr(config.option, "dist", "no") != "no" and not config.option.collectonly
    if os.environ.get("PYTEST_XDIST_WORKER") or not workers_to_start:
        return
    prefix = os.environ.get(bytecode.PREFIX)
    if os.environ.get(bytecode.OFF) and not prefix:
        return  # the workers keep no bytecode either: nothing compiled here would serve them
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False  # where and as the workers will
    bytecode.warm(os.environ, WARM_FOR_TESTS)
    _rewrite_once(config)


def _rewrite_once(config, folder: Path = Path(__file__).parent) -> None:
    """Each worker collects every test file: where a quarter of them or more lack their
    assert-rewritten bytecode (a fresh clone, another Python or pytest), every worker would rewrite
    and compile them all at once. The controller rewrites them first, as pytest's import hook
    would, without importing them; a few files edited since are left to the workers. The hook's
    helpers are pytest's own but private: where they are gone, the workers rewrite as they would."""
    try:
        from _pytest.assertion.rewrite import PYTEST_TAG, _rewrite_test, _write_pyc, assertstate_key, get_cache_dir
    except ImportError:
        return
    state = config.stash.get(assertstate_key, None)  # absent under --assert=plain: nothing to rewrite
    files = sorted(folder.glob("test_*.py"))
    pycs = {f: get_cache_dir(f) / f"{f.stem}.{PYTEST_TAG}.pyc" for f in files}
    lacking = [f for f in files if not pycs[f].exists()]
    if state is None or len(lacking) * 4 < len(files):
        return
    print(f"oombench: rewriting the asserts of {len(lacking)} test files (once)", file=sys.stderr, flush=True)
    for f in lacking:
        pycs[f].parent.mkdir(parents=True, exist_ok=True)
        try:
            stamp, code = _rewrite_test(f, config)  # the source's hash (pytest 9) or stat (8), as _write_pyc takes
            _write_pyc(state, code, stamp, pycs[f])
        except TypeError:  # a pytest whose helpers take other arguments
            return


# Files whose tests import Hugging Face's libraries (transformers, peft, torchao: seconds of CPU each
# import) are handed to one worker as one unit, so that one worker imports them rather than each.
SHARED_IMPORTS = dict.fromkeys(("test_try.py", "test_tricks.py", "test_try_newer.py", "test_ways_newer.py"),
                               "hugging-face-libraries")


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, each file a unit but the files of ``SHARED_IMPORTS``, which share one."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedImports(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_IMPORTS.get(Path(path).name, path)

    return SharedImports(config, log)


def pytest_collection_modifyitems(items):
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: each file's own order kept


# Records and asv results cut once from results/ and frozen here: tests read these, never the
# repository's results/, so that filing a new machine's, run's or version's results moves no test.
FROZEN = Path(__file__).resolve().parent / "data" / "results"


@pytest.fixture(scope="session")
def frozen_pages(tmp_path_factory) -> Path:
    """pages/ built from the frozen records standing for the committed results/ (so no local label),
    built once for the whole run: under xdist the first worker that needs them builds them, under
    a lock, in the folder the workers share, and the others read that build. Tests only read it."""
    return _built_once(tmp_path_factory, "pages", _build_frozen_pages)


@pytest.fixture(scope="session")
def frozen_site(frozen_pages) -> Path:
    """``frozen_pages`` and asv's html/ of the same records side by side, as `python3 -m harness
    pages` lays them out: the folder that holds both."""
    _built_once(None, "html", _publish_frozen, root=frozen_pages.parent)
    return frozen_pages.parent


def _build_frozen_pages(out: Path) -> None:
    from harness.report.pages import build
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "COMMITTED", FROZEN)  # the frozen copy stands for the committed results/
        assert build.main(out=str(out)) == 0


def _publish_frozen(html: Path) -> None:
    from harness.drive.asv import asv_site
    assert asv_site.publish(Path(__file__).resolve().parents[1], html, FROZEN) == 0


def _built_once(tmp_path_factory, name: str, make, root: Path | None = None) -> Path:
    """``root / name``, made by ``make`` unless an earlier worker of this run made it whole."""
    if root is None:
        base = tmp_path_factory.getbasetemp()
        root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "frozen-site"
        root.mkdir(exist_ok=True)
    path, done = root / name, root / f".{name}.done"
    with FileLock(str(root / f".{name}.lock")):
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)  # a worker that failed half way left it
            make(path)
            done.touch()
    return path


@pytest.fixture(autouse=True)
def no_earlier_compares(tmp_path_factory, monkeypatch):
    """A compare's gate reads the committed compares for how far host-bound steps scatter; tests
    see none unless they plant them (``gate(..., prior=...)``), whatever is committed."""
    monkeypatch.setattr("harness.report.gate.COMPARES", tmp_path_factory.mktemp("no-compares"))


@pytest.fixture(autouse=True)
def no_recorded_programmes(tmp_path_factory, monkeypatch):
    """The what-fits search starts from the replay where the committed results hold its GPU's
    programmes; tests see none unless they plant them, whatever is committed."""
    monkeypatch.setattr("harness.cases.fits.PROGRAMMES", tmp_path_factory.mktemp("no-programmes"))


def chromium() -> str:
    """Debian's chromium-headless-shell where it is installed, else its chromium: the shell is
    Chromium's own headless build (the one Playwright drives by default), the same Blink and the
    same device emulation without the desktop browser's processes, which spend the cores the
    other workers share."""
    path = (shutil.which("chromium-headless-shell") or shutil.which("chromium")
            or shutil.which("chromium-browser"))
    if not path:
        pytest.skip("Debian's chromium is not installed and could not be: apt-get install -y chromium-headless-shell "
                    "(.ci/run does this when apt is available)")
    return path


# An iPhone 12-class phone as Chromium emulates one (CDP's device metrics override with mobile on,
# and touch): a page without a viewport tag is laid out 980 px wide there and shown shrunk.
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 3, "is_mobile": True, "has_touch": True}


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for every test of this worker that reads pages: each module opens its
    own tabs and contexts in it and closes them, rather than starting a browser of its own."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    with sync_api.sync_playwright() as pw:
        started = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        yield started
        started.close()


@pytest.fixture
def no_gpu():
    return Devices(reason="no NVIDIA GPU visible (test)")


class FakePool:
    """CuPy's MemoryPool as far as a budget uses it: set_limit, and a malloc that honours it."""
    def __init__(self):
        self.limit, self.used = 0, 0

    def set_limit(self, size):
        self.limit = size

    def malloc(self, n):
        if self.limit and self.used + n > self.limit:
            raise MemoryError(f"Out of memory allocating {n:,} bytes")
        self.used += n


def git(repo: Path, *args: str) -> str:
    """git in ``repo`` as the tests' author, its output stripped; a failure fails the test."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def git_repo(path: Path, branch: str = "main") -> Path:
    """A repository at ``path``, on ``branch``, with one commit (of a.txt)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    (path / "a.txt").write_text("a\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "first")
    return path


def fake_devices(name="NVIDIA H200", count=1, total=143771 * 2**20, free=None):
    gpus = tuple(GPU(index=i, name=name, memory_total=total, memory_free=free if free is not None else total - 2**30,
                     compute_capability="9.0", uuid=f"GPU-{i}") for i in range(count))
    peer = tuple(tuple(True for _ in range(count)) for _ in range(count))
    return Devices(gpus=gpus, driver="580.159.04", cuda_driver="13.0", peer=peer)


def set_run(monkeypatch, records, **fields):
    """Hands a run's context to ``harness.drive.asv.bench`` as ``harness run`` does, through its one
    environment variable: the records under ``records``, on "test-machine", with ``fields``."""
    ctx = RunContext(RecordStore(records), "test-machine", **fields)
    monkeypatch.setenv(RUN_ENV, ctx.to_json())
    return ctx


@pytest.fixture
def records_dir(tmp_path, monkeypatch):
    """Measurements filed under a temporary folder, never into the repository's results/."""
    set_run(monkeypatch, tmp_path / "records")
    return tmp_path / "records"


def results_with(root: Path, *files: Path) -> Path:
    """A results folder under ``root`` holding copies of committed records, each in its machine's folder."""
    results = root / "results"
    for f in files:
        dest = results / "records" / f.parent.name / f.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
    return results


def plain(text: str) -> str:
    """A markdown text with its pipe tables as one reads them: each row ``| a | b |`` with its
    cells unescaped and unpadded (tabulate pads them, ``markdown.cell`` escapes them)."""
    def unescape(cell: str) -> str:
        return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", cell.strip())

    return "\n".join("| " + " | ".join(unescape(c) for c in re.split(r"(?<!\\)\|", line)[1:-1]) + " |"
                     if line.startswith("|") else line for line in text.split("\n"))


def render(*args, **kwargs) -> tuple[str, list[str]]:
    """``tables.render``, its table as one reads it (``plain``)."""
    text, notes = _tables.render(*args, **kwargs)
    return plain(text), notes


def table(*args, **kwargs) -> str:
    return plain(_tables.table(*args, **kwargs))


def make_trainer(**shape):
    """``tricks.make_trainer`` at ``shape`` (its ``way`` a ``Way``) in the way's ``Precision``, as
    the case's process piece yields it (TF32 is fp32 on the CPU: nothing else to put in force)."""
    from harness.workloads.training import tricks
    from harness.workloads.training.precision import precision
    return tricks.make_trainer(prec=precision(shape["way"].precision), **shape)
