"""A second library stack on a box whose GPU stack is already installed: an environment that
sees everything this interpreter has, except for the wheels given, which come first.

A GPU box is set up once (torch, CuPy, CUDA, often in its own venv) and often has no internet, so
comparing CuPy 13 with CuPy 14, or NumPy 2.0 with 2.5, cannot mean building a new environment
from an index. ``python -m venv --system-site-packages`` does not help when the GPU stack itself
lives in a venv: the new one would see the base interpreter's packages, not the GPU venv's. So
the stack is a bare venv whose site-packages holds the given wheels, plus one ``.pth`` line that
adds this interpreter's own site folders after them (``site.addsitedir``, so their ``.pth``
files, CUDA wheels' among them, still run). Its interpreter has its own path, which asv needs to
tell two ``existing`` environments apart (``harness run --python STACK/bin/python --python
python3``), and ``importlib.metadata`` reads the stack's versions first, so records say which
stack measured. Standard library only: it runs before set-up.
"""
from __future__ import annotations

import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

from harness.measure.guards import owned

PTH = "oombench-base.pth"
MARK = ".oombench-stack"  # lists what `stack` made: a folder holding only that, `stack` may make again


def base_site_dirs() -> list[str]:
    """This interpreter's site folders, in its own order (a venv's first, then the system's)."""
    dirs = list(site.getsitepackages())
    user = site.getusersitepackages()
    if site.ENABLE_USER_SITE and user:
        dirs.append(user)
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def refusal(dest: Path, wheels: list[Path]) -> str | None:
    """What is wrong with the request, in one line that names the fix; None if nothing."""
    if not wheels:
        return "give at least one wheel (.whl) to put in front of this interpreter's packages"
    for w in wheels:
        if w.suffix != ".whl" or not w.is_file():
            return (f"{w} is not a wheel file: download it first, e.g. `python3 -m pip download --no-deps "
                    f"--only-binary=:all: -d wheels cupy-cuda13x==13.6.0`")
        if not _whole(w):
            return (f"{w} is not a whole wheel (no zip, or no .dist-info/WHEEL in it): download it again, e.g. "
                    "`python3 -m pip download --no-deps --only-binary=:all: -d wheels cupy-cuda13x==13.6.0`")
    return owned.refusal(dest, MARK)


def _whole(wheel: Path) -> bool:
    """Whether ``wheel`` is a zip whose directory names a ``.dist-info/WHEEL`` (read from its end:
    a GB wheel is not read whole)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            return any(n.count("/") == 1 and n.endswith(".dist-info/WHEEL") for n in z.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


class StackError(RuntimeError):
    """The stack could not be made; the message names the fix."""


def site_packages(dest: Path) -> Path:
    v = sys.version_info
    return dest / "lib" / f"python{v.major}.{v.minor}" / "site-packages"


def make(dest: Path, wheels: list[Path]) -> Path:
    """The stack's interpreter, after installing ``wheels`` (without their dependencies: the rest
    of the stack is this interpreter's) into a venv that falls back on this interpreter's packages.
    ``dest`` is new, empty or an earlier stack (``refusal`` says so): creating clears it."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(dest)
    owned.mark(dest, MARK, "python3 -m harness stack, which clears this folder when asked to make it again")
    target = site_packages(dest)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--disable-pip-version-check", "--target", str(target), *map(str, wheels)])
    if done.returncode != 0:
        raise StackError(f"pip could not install {', '.join(w.name for w in wheels)} (its message above): download "
                         f"the wheel again, or pick one built for Python {sys.version_info.major}."
                         f"{sys.version_info.minor} on this platform")
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in base_site_dirs())
    (target / PTH).write_text(lines)
    return dest / "bin" / "python"


def main(dest: str, wheels: list[str]) -> int:
    dest_path, wheel_paths = Path(dest).absolute(), [Path(w) for w in wheels]
    why = refusal(dest_path, wheel_paths)
    if why:
        print(f"oombench stack: {why}", file=sys.stderr)
        return 2
    try:
        python = make(dest_path, wheel_paths)
    except (StackError, OSError) as e:
        print(f"oombench stack: {e if isinstance(e, StackError) else f'cannot make {dest}: {e.strerror or e}'}",
              file=sys.stderr)
        return 2
    print(f"oombench: {python} sees {', '.join(w.name for w in wheel_paths)} first, then this interpreter's "
          f"packages. Measure both stacks in one run:\n  python3 -m harness run --profile versions "
          f"--python {python} --python {sys.executable}")
    return 0
