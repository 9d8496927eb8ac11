"""Tooling: how long the suite's own readers of records take at the size a long history reaches.

Each probe times one command, as a user runs it (a fresh interpreter, its imports included), on
a results folder of ``RECORDS`` made-up records (``harness.workloads.synthetic``, the same every
time, whatever is committed): ``gate_50k`` compares the first half of the runs (BASE, and the
history the floors are learned from) with the second (NEW); ``pages_50k`` builds the comparison
pages of all of them (``--no-asv``). The check: the command exited as it should and wrote what
it should. CPU only: runs on any box.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.cases.base import Case
from harness.measure.outcomes import CheckFailed
from harness.measure.workload import Workload
from harness.workloads import synthetic

RECORDS = 50_000
PROBES = ("gate_50k", "pages_50k")


def _folders(n: int) -> tuple[Path, Path, Path]:
    """(a results folder of ``n`` records, BASE: its first half of runs, NEW: its second half)."""
    root = Path(tempfile.mkdtemp(prefix="oombench-tooling-"))
    files = synthetic.write(root / "results", n)
    for side, part in (("base", files[: len(files) // 2]), ("new", files[len(files) // 2:])):
        for f in part:
            to = root / side / f.parent.name / f.name
            to.parent.mkdir(parents=True, exist_ok=True)
            to.hardlink_to(f)
    return root / "results", root / "base", root / "new"


# The folder holding this harness package: the commands run from there, so they are this code's,
# not those of another checkout installed in the same interpreter.
ROOT = Path(__file__).resolve().parents[2]


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT)


def _expect(done: subprocess.CompletedProcess, codes: tuple, what: str) -> None:
    if done.returncode not in codes:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CheckFailed(f"{what} exited {done.returncode}: {tail[0]}")


def tool(probe: str, n: int = RECORDS) -> Workload:
    results, base, new = _folders(n)
    out = results.parent / "pages"
    last = {}

    def step():
        if probe == "gate_50k":
            last["done"] = _harness("gate", str(base), str(new), "--cross-machine", "--history", str(base))
        else:
            last["done"] = _harness("pages", "--results", str(results), "--out", str(out), "--no-asv")

    def check() -> dict:
        done = last["done"]
        if probe == "gate_50k":
            _expect(done, (0, 1), "gate")  # a verdict either way: random steps may read as slower
            if "regression(s)" not in done.stdout:
                raise CheckFailed("gate printed no verdict")
        else:
            _expect(done, (0,), "pages")
            if not (out / "index.html").is_file() or not (out / "provenance.html").is_file():
                raise CheckFailed(f"pages wrote no index.html or provenance.html in {out}")
        return {"records": n, "command": probe.split("_")[0]}

    return Workload(step=step, check=check, work={"records": n}, warmup=0, repeat=3,
                    close=lambda: shutil.rmtree(results.parent, ignore_errors=True))


CASE = Case(name="tooling", params={"probe": PROBES}, build=lambda probe: tool(probe), doc=__doc__)
