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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv"
REEXEC_ENV = "OOMBENCH_BOOTSTRAPPED"
# Importable modules each command needs, and the extras of pyproject.toml that bring them.
NEEDS = {
    "run": (("numpy", "psutil", "pynvml", "torch", "asv", "asv_runner"), "bench,torch"),
    "test": (("numpy", "psutil", "pynvml", "torch", "pytest", "asv", "asv_runner", "jinja2", "matplotlib",
              "playwright"), "bench,test,torch,pages"),
    "pages": (("numpy", "psutil", "pynvml", "asv", "asv_runner", "jinja2", "matplotlib"), "bench,pages"),
}
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


def install(python: Path, extras: str) -> None:
    reqs = [f"{REPO}[{extras}]"]
    if not has_nvidia_gpu():
        reqs.insert(0, os.environ.get(TORCH_CPU_ENV, TORCH_CPU_DEFAULT))
    print(f"oombench: installing {' '.join(reqs)} into {VENV} (once)", file=sys.stderr, flush=True)
    # -e applies to the project only; the pinned torch goes before it as a plain requirement.
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *reqs[:-1], "-e", reqs[-1]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"oombench: set-up failed ({' '.join(cmd)}):\n{done.stdout}{done.stderr}")


def ensure(command: str) -> None:
    """Return when this interpreter can run ``command``; otherwise set up .venv and re-run there."""
    modules, extras = NEEDS[command]
    if not missing(modules):
        return
    in_venv = Path(sys.prefix).resolve() == VENV.resolve()
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
