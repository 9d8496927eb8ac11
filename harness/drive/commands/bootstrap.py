"""Set-up on a fresh clone, so that the README's two commands need nothing done by hand.

Standard library only: this runs before any dependency is installed. If the interpreter that
started ``python3 -m harness`` already has what the command needs (a GPU box with its own
framework stack, plus asv carried as wheels when it has no internet), it is used as it is.
Otherwise a virtual environment ``.venv`` is made in the repository, the project is installed
into it with the extras the command needs, and the command starts again inside it.

Set up once: after each install a stamp in .venv records the extras installed, a hash of
pyproject.toml and the torch pin. While the stamp covers what a command needs, the command goes
straight to .venv (one exec, no pip, no probe); pip runs again only for a new extra or an edited
pyproject.toml, and then installs the union, so that one .venv serves every command.

One set-up at a time: commands started side by side in a fresh clone wait for the one that sets
up (a line names its pid) and then use what it made. The lock is ``fcntl.flock`` on a file beside
.venv, not the filelock library the rest of the project uses: nothing is installed yet. pip runs
in a process group of its own; SIGTERM, SIGINT or SIGHUP during set-up ends that group, and the
.venv is left either whole (stamped) or without a stamp, which the next command redoes.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.measure.guards.signals import handlers

REPO = Path(__file__).resolve().parents[3]
VENV = REPO / ".venv"
REEXEC_ENV = "OOMBENCH_BOOTSTRAPPED"
STAMP = "oombench-setup.json"  # in VENV: what the last successful install put there
# In VENV: pip's temporary folders (TMPDIR) and the wheels set-up builds, so that a set-up killed
# mid-install leaves them in the tree it owns, where the next set-up clears them, never in /tmp.
BUILD = "oombench-build"
# pyproject's own dependencies: enough for the commands that only read or describe (tabulate: their tables).
BASE = ("numpy", "psutil", "pynvml", "filelock", "tabulate")
# Importable modules each command needs, and the extras of pyproject.toml that bring them.
# Chainer is not among run's modules: a GPU box's own interpreter without it is used as it is,
# and the Chainer cases skip there with the install command; .venv gets it all the same.
NEEDS = {
    "run": ((*BASE, "torch", "asv", "asv_runner"), "bench,torch,chainer"),
    "test": ((*BASE, "torch", "pytest", "xdist", "pytest_timeout", "asv", "asv_runner", "jinja2", "matplotlib",
              "playwright", "chainer", "scipy", "hypothesis", "markdown_it", "tabulate", "ruff", "transformers",
              "torchao", "peft"),
             "bench,test,torch,pages,chainer,gate,models,ways"),
    # scipy (the gate extra): the noise floors the pages read a change of library versions against.
    "pages": ((*BASE, "asv", "asv_runner", "jinja2", "matplotlib", "scipy"), "bench,pages,gate"),
    # One case in this process: no asv. Chainer in the extras as for run, so that a .venv made
    # here is the same one run makes.
    "case": ((*BASE, "torch"), "bench,torch,chainer"),
    # A model brought to `try` runs as a case does; the built-in ones are transformers' (models).
    "try": ((*BASE, "torch", "tabulate"), "bench,torch,chainer,gate,models"),
    "devices": (BASE, ""),
    "machine": (BASE, ""),
    "summary": (BASE, ""),
    "table": (BASE, ""),
    "todo": (BASE, ""),
    "gate": ((*BASE, "scipy"), "gate"),
    # pip download for another box: pip is all it needs.
    "wheelhouse": (("pip",), ""),
    # A stack overlays the interpreter that runs it (the box's GPU stack): pip is all it needs.
    "stack": (("pip",), ""),
}
# compare measures as run does and then gates: one set-up with both's needs.
NEEDS["compare"] = (tuple(dict.fromkeys(NEEDS["run"][0] + NEEDS["gate"][0])), "bench,torch,chainer,gate")
NEEDS["mutate"] = ((*NEEDS["test"][0], "mutmut"), NEEDS["test"][1])  # the tests, under a mutation tester
NEEDS["docs"] = NEEDS["pages"]  # the docs are written from the same records, with the same stack
NEEDS["programmes"] = NEEDS["try"]  # the probe's training step, and the records the score reads
# Chainer 7.8.1, the last release, is an sdist whose setup.py imports pkg_resources, which
# setuptools 81 removed, and pip builds it in isolation with the newest setuptools. So it is
# built once, as a wheel, in a throwaway environment with an older setuptools and no build
# isolation, and pip takes that wheel through --find-links: .venv keeps the setuptools torch needs.
CHAINER = "chainer==7.8.1"
CHAINER_BUILD = ("setuptools<70", "wheel")
# Without a GPU, the newest torch from PyPI would pull several GB of CUDA libraries it cannot
# use: pin the CPU build (the development and CI machines hold a local wheel of 2.13.0).
TORCH_CPU_ENV = "OOMBENCH_TORCH_SPEC"
TORCH_CPU_DEFAULT = "torch==2.13.0"


def missing(modules) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def has_nvidia_gpu() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia").exists()


def venv_python() -> Path:
    return VENV / "bin" / "python"


def split(extras: str) -> list[str]:
    return [e for e in extras.split(",") if e]


def torch_spec(extras) -> str | None:
    """The torch requirement pinned before the project's, or None where pip picks (a GPU box)."""
    if "torch" not in extras or has_nvidia_gpu():
        return None
    return os.environ.get(TORCH_CPU_ENV, TORCH_CPU_DEFAULT)


def pyproject_hash() -> str:
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()


def read_stamp() -> dict | None:
    try:
        return json.loads((VENV / STAMP).read_text())
    except (OSError, ValueError):
        return None


def write_stamp(extras: list[str]) -> None:
    stamp = {"extras": extras, "pyproject": pyproject_hash(), "torch": torch_spec(extras)}
    VENV.mkdir(parents=True, exist_ok=True)
    tmp = VENV / (STAMP + ".tmp")
    tmp.write_text(json.dumps(stamp, indent=2) + "\n")
    os.replace(tmp, VENV / STAMP)  # a reader never sees half a stamp


def covers(stamp: dict | None, extras: str) -> bool:
    """Whether what the stamp says .venv holds is still what pyproject.toml asks, extras included."""
    if not stamp:
        return False
    held = stamp.get("extras", [])
    return (set(split(extras)) <= set(held) and stamp.get("pyproject") == pyproject_hash()
            and stamp.get("torch") == torch_spec(held))


def union(extras: str, stamp: dict | None) -> list[str]:
    """The command's extras, then those already in .venv: an install never drops what is there."""
    return list(dict.fromkeys([*split(extras), *((stamp or {}).get("extras", []))]))


class Stopped(BaseException):
    """A signal reached the command during set-up."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum, frame):
    raise Stopped(signum)


def _call(cmd: list[str], **kwargs) -> int:
    """``cmd``'s exit status. It runs in a process group of its own, which is ended, with all it
    started, however this call is left (a signal raising ``Stopped`` included)."""
    proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
    try:
        return proc.wait()
    finally:
        _end_group(proc)


def _end_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:  # the group is empty: it ended by itself
        proc.wait()
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _again() -> str:
    return " ".join(["python3 -m harness", *sys.argv[1:]])


def build_dir() -> Path:
    return VENV / BUILD


def _pip(python: Path, *args: str, quiet: bool = False) -> None:
    # Not captured: pip's progress shows while it works, and its errors above our message. Its
    # stdout goes to our stderr (fd 2), so that the command's own stdout (JSON, tables) stays clean.
    cmd = [str(python), "-m", "pip", *args[:1], *(["--quiet"] if quiet else []),
           "--disable-pip-version-check", *args[1:]]
    build_dir().mkdir(parents=True, exist_ok=True)
    rc = _call(cmd, stdout=2, env={**os.environ, "TMPDIR": str(build_dir())})
    if rc != 0:
        sys.exit(f"oombench: set-up failed: `{' '.join(cmd)}` exited {rc} (pip's output above).\n"
                 f"Fix what pip reports (network, index, disk), then run `{_again()}` again: {VENV} has no stamp, "
                 "so set-up starts over.")


def _venv(path: Path) -> None:
    """A virtual environment at ``path`` with pip; on one a killed set-up left, pip is put back."""
    cmd = [sys.executable, "-m", "venv", str(path)]
    if _call(cmd) != 0:
        sys.exit(f"oombench: set-up failed: `{' '.join(cmd)}` (output above). Fix what it reports, then run "
                 f"`{_again()}` again.")


def _has(python: Path, module: str) -> bool:
    if not Path(python).exists():
        return False
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return _call([str(python), "-c", probe], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


def build_chainer_wheel(dest: Path) -> None:
    print(f"oombench: building {CHAINER} from its sdist (once)", file=sys.stderr, flush=True)
    env = dest / "build-env"
    _venv(env)
    _pip(env / "bin" / "python", "install", *CHAINER_BUILD, quiet=True)
    _pip(env / "bin" / "python", "wheel", "--no-build-isolation", "--no-deps", "-w", str(dest), CHAINER)


def _needs_chainer_build(python: Path, extras: list[str], stamp: dict | None) -> bool:
    # A stamp that lists chainer vouches for it; without one (a .venv made before stamps), ask .venv.
    if "chainer" not in extras or "chainer" in (stamp or {}).get("extras", []):
        return False
    return not _has(python, "chainer")


def install(python: Path, extras: list[str], stamp: dict | None = None) -> None:
    project = f"{REPO}[{','.join(extras)}]" if extras else str(REPO)
    pin = [spec] if (spec := torch_spec(extras)) else []
    print(f"oombench: installing {' '.join([*pin, project])} into {VENV} (once)", file=sys.stderr, flush=True)
    (VENV / STAMP).unlink(missing_ok=True)  # half an install is no install: the next call retries
    shutil.rmtree(build_dir(), ignore_errors=True)  # what a killed set-up left: this one holds the lock
    build_dir().mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="oombench-wheels-", dir=build_dir()) as wheels:
        links = []
        if _needs_chainer_build(python, extras, stamp):
            build_chainer_wheel(Path(wheels))
            links = ["--find-links", wheels]
        # -e applies to the project only; the pinned torch goes before it as a plain requirement.
        _pip(python, "install", *links, *pin, "-e", project)
    shutil.rmtree(build_dir(), ignore_errors=True)
    write_stamp(extras)


def set_up(extras: str) -> None:
    """Make .venv if it is not there (or lacks pip: a set-up killed while making it) and install
    into it what the command needs."""
    if not _has(venv_python(), "pip"):
        print(f"oombench: creating {VENV}", file=sys.stderr, flush=True)
        _venv(VENV)
    stamp = read_stamp()
    install(venv_python(), union(extras, stamp), stamp)


def lock_path() -> Path:
    return VENV.with_name(VENV.name + ".lock")


@contextlib.contextmanager
def _one_at_a_time():
    """The set-up lock, held until the block ends; a command that must wait says for whom."""
    path = lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            print(f"oombench: pid {os.getpid()} waits for {holder}, which is setting up {VENV}",
                  file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} ({_again()})")
        lock.flush()
        yield


def _locked(work) -> None:
    """``work()`` under the set-up lock; SIGTERM, SIGINT and SIGHUP end it (pip included) and the
    command, leaving no stamp where the install did not finish."""
    with handlers(dict.fromkeys((signal.SIGTERM, signal.SIGINT, signal.SIGHUP), _stop)):
        try:
            with _one_at_a_time():
                work()
        except Stopped as e:
            print(f"oombench: set-up stopped by {e}: what it started (pip) was ended, and {VENV} is whole or has "
                  "no stamp, in which case the next command sets it up again", file=sys.stderr, flush=True)
            raise SystemExit(128 + e.signum) from None


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def _ensure_here(modules, extras: str) -> None:
    """Inside .venv: install only when the stamp falls short (or a module is gone)."""
    stamp = read_stamp()
    if not missing(modules) and (stamp is None or covers(stamp, extras)):
        return  # stamped and current, or a .venv made by hand that has it all: used as it is

    def work():
        importlib.invalidate_caches()
        stamp = read_stamp()
        if stamp is not None and covers(stamp, extras) and not missing(modules):
            return  # another command finished it while this one waited
        install(venv_python(), union(extras, stamp), stamp)
    _locked(work)
    importlib.invalidate_caches()
    if missing(modules):
        sys.exit(f"oombench: still missing {', '.join(missing(modules))} after set-up; see the README")


def ready(extras: str) -> bool:
    return covers(read_stamp(), extras) and venv_python().exists()


def ensure(command: str) -> None:
    """Return when this interpreter can run ``command``; otherwise set up .venv and re-run there."""
    modules, extras = NEEDS[command]
    if in_venv():
        return _ensure_here(modules, extras)
    if not missing(modules):
        return
    if os.environ.get(REEXEC_ENV):
        sys.exit(f"oombench: still missing {', '.join(missing(modules))} after set-up; see the README")
    if not ready(extras):
        _locked(lambda: ready(extras) or set_up(extras))  # after a wait, the stamp may cover it
    env = dict(os.environ, **{REEXEC_ENV: "1"})
    os.execve(str(venv_python()), [str(venv_python()), "-m", "harness", *sys.argv[1:]], env)
