"""Set-up on a fresh clone, so that the README's two commands need nothing done by hand.

Standard library only: this runs before any dependency is installed. If the interpreter that
started ``python3 -m harness`` already has what the command needs (a GPU box with its own
framework stack, plus asv carried as wheels when it has no internet), it is used as it is.
Otherwise a virtual environment ``.venv`` is made in the repository, the project is installed
into it with the extras the command needs, and the command starts again inside it.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv"
REEXEC_ENV = "OOMBENCH_BOOTSTRAPPED"
# Importable modules each command needs, and the extras of pyproject.toml that bring them.
# Chainer is not among run's modules: a GPU box's own interpreter without it is used as it is,
# and the Chainer cases skip there with the install command; .venv gets it all the same.
NEEDS = {
    "run": (("numpy", "psutil", "pynvml", "torch", "asv", "asv_runner"), "bench,torch,chainer"),
    "test": (("numpy", "psutil", "pynvml", "torch", "pytest", "asv", "asv_runner", "jinja2", "matplotlib",
              "playwright", "chainer", "scipy"), "bench,test,torch,pages,chainer"),
    "pages": (("numpy", "psutil", "pynvml", "asv", "asv_runner", "jinja2", "matplotlib"), "bench,pages"),
    # One case in this process: no asv. Chainer in the extras as for run, so that a .venv made
    # here is the same one run makes (and is not reinstalled for lacking it).
    "case": (("numpy", "psutil", "pynvml", "torch"), "bench,torch,chainer"),
}
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


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", *args[:1], "--quiet", "--disable-pip-version-check", *args[1:]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"oombench: set-up failed ({' '.join(cmd)}):\n{done.stdout}{done.stderr}")


def _has(python: Path, module: str) -> bool:
    if not Path(python).exists():
        return False
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0


def build_chainer_wheel(dest: Path) -> None:
    print(f"oombench: building {CHAINER} from its sdist (once)", file=sys.stderr, flush=True)
    env = dest / "build-env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    _pip(env / "bin" / "python", "install", *CHAINER_BUILD)
    _pip(env / "bin" / "python", "wheel", "--no-build-isolation", "--no-deps", "-w", str(dest), CHAINER)


def install(python: Path, extras: str) -> None:
    reqs = [f"{REPO}[{extras}]"]
    if not has_nvidia_gpu():
        reqs.insert(0, os.environ.get(TORCH_CPU_ENV, TORCH_CPU_DEFAULT))
    print(f"oombench: installing {' '.join(reqs)} into {VENV} (once)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="oombench-wheels-") as wheels:
        links = []
        if "chainer" in extras.split(",") and not _has(python, "chainer"):
            build_chainer_wheel(Path(wheels))
            links = ["--find-links", wheels]
        # -e applies to the project only; the pinned torch goes before it as a plain requirement.
        _pip(python, "install", *links, *reqs[:-1], "-e", reqs[-1])


def ensure(command: str) -> None:
    """Return when this interpreter can run ``command``; otherwise set up .venv and re-run there."""
    modules, extras = NEEDS[command]
    in_venv = Path(sys.prefix).resolve() == VENV.resolve()
    if not missing(modules):
        if in_venv and missing(("chainer",)):  # a .venv made before Chainer joined the suite
            install(venv_python(), extras)
            importlib.invalidate_caches()
        return
    if os.environ.get(REEXEC_ENV) and not in_venv:
        sys.exit(f"oombench: still missing {', '.join(missing(modules))} after set-up; see the README")
    if not venv_python().exists():
        print(f"oombench: creating {VENV}", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    install(venv_python(), extras)
    if in_venv:
        importlib.invalidate_caches()
        return
    env = dict(os.environ, **{REEXEC_ENV: "1"})
    os.execve(str(venv_python()), [str(venv_python()), "-m", "harness", *sys.argv[1:]], env)
