"""A folder of wheels, built on a machine with internet, from which a box without it installs.

``pip download`` fetches binary wheels for a named Python and platform (not this machine's), with
their dependencies. On the offline box, ``PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR`` makes every pip
that asv starts (the project's build and each ``-E virtualenv`` environment's requirements) take
its packages from the folder instead of an index. Standard library only: it runs before set-up.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# What asv and the harness need, pinned like pyproject's `bench` extra, plus the build backend
# that asv's virtualenv environments use to build the project from the commit.
BASE = ["asv==0.6.6", "asv-runner==0.3.2", "virtualenv", "numpy", "psutil", "nvidia-ml-py", "tabulate",
        "setuptools>=64", "wheel", "pip"]


def expand(platforms: list[str]) -> list[str]:
    """pip takes --platform tags literally: a manylinux_2_N box also installs every older
    manylinux wheel (most wheels are manylinux_2_17 / manylinux2014), so name those too."""
    out = []
    for p in platforms:
        out.append(p)
        head, sep, _ = p.partition("_x86_64")
        if p.startswith("manylinux_2_") and sep:
            glibc = int(head.split("_")[2])
            out += [f"manylinux_2_{v}_x86_64" for v in range(glibc - 1, 16, -1)] + ["manylinux2014_x86_64"]
    return list(dict.fromkeys(out))


def command(dest: Path, python: str, platforms: list[str], extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", "-d", str(dest)]
    for p in expand(platforms):
        cmd += ["--platform", p]
    return cmd + BASE + extra


def build(dest: Path, python: str, platforms: list[str], extra: list[str]) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = command(dest, python, platforms, extra)
    print("oombench:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        print("oombench: pip download failed: check the package names and versions, and that each has a "
              f"binary wheel for Python {python} on {', '.join(platforms)} (a source-only package, such as "
              "chainer, must be built into a wheel first: pip wheel chainer==7.8.1 -w DIR)", file=sys.stderr)
        return rc
    print(f"oombench: {len(list(dest.glob('*.whl')))} wheels in {dest}. On the offline box:\n"
          f"  PIP_NO_INDEX=1 PIP_FIND_LINKS={dest.resolve()} python3 -m asv run --config asv.versions.conf.json ...\n"
          f"  pip install --no-index --find-links {dest.resolve()} asv asv-runner   # for -E existing")
    return 0
