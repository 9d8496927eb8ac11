"""The README's "For asv users" commands, run as written by a shell (one tiny CPU benchmark in place
of the README's --bench) from the root of a fresh clone of this working tree after `harness run`:
each exits 0, each benchmark runs once in one environment, asv files under the name `harness run`
gave the box (so `asv compare` finds one machine), the records name the commit and the run, the
site is published and served, compare reads it, and git status stays clean."""
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.drive.asv import suite

REPO = Path(__file__).resolve().parents[1]
# One CPU case, two figures (seconds, bytes): the matmul, whose measurement is the shortest.
TINY = r"^ceilings\.Host\.\w+\(.cpu_matmul_fp32.\)"


def readme_lines() -> list[str]:
    part = (REPO / "README.md").read_text().split("## For asv users", 1)[1]
    block = part.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def readme_commands() -> list[list[str]]:
    return [shlex.split(line, comments=True) for line in readme_lines()]


def shims(folder: Path) -> Path:
    """``python3`` and ``asv`` as the README's shell finds them once set up: this interpreter's."""
    folder.mkdir()
    for name, run in (("python3", f'"{sys.executable}"'), ("asv", f'"{sys.executable}" -m asv')):
        (folder / name).write_text(f"#!/bin/sh\nexec {run} \"$@\"\n")
        (folder / name).chmod(0o755)
    return folder


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clone of this working tree as it is (uncommitted changes committed in the clone), on main."""
    root = tmp_path_factory.mktemp("asv-front")
    repo = root / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    for name in git(REPO, "ls-files", "-m", "-o", "--exclude-standard", "-z").split("\0"):
        if name and (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    for name in git(REPO, "ls-files", "-d", "-z").split("\0"):
        if name:
            (repo / name).unlink(missing_ok=True)
    git(repo, "switch", "-q", "-C", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "working tree")
    return repo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as page:
            return page.status == 200
    except OSError:
        return False


def test_the_readme_s_asv_commands_work_after_harness_run_and_leave_git_clean(clone, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OOMBENCH_", "ASV")) and k != "PYTHONPATH"}
    env["HOME"] = str(tmp_path)  # asv's machine file, kept out of the user's home
    env["PATH"] = f"{shims(tmp_path / 'bin')}{os.pathsep}{env.get('PATH', '')}"
    commands = readme_commands()
    assert [c[:2] for c in commands] == [["asv", "machine"], ["asv", "check"], ["asv", "run"], ["asv", "publish"],
                                         ["asv", "preview"], ["asv", "compare"]]
    # a newcomer's first command: the suite's CPU part, here the one tiny case
    first = subprocess.run([sys.executable, "-m", "harness", "run", "--bench", TINY, "--no-publish"], cwd=clone,
                           env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    ran_once(clone)
    for line, cmd in zip(readme_lines(), commands):
        if cmd[1] == "run":
            line = line.replace(cmd[cmd.index("--bench") + 1], shlex.quote(TINY), 1)
        if cmd[1] == "preview":
            preview(["bash", "-c", f"exec {shlex.join(cmd)} --port \"$0\""], clone, env, port_arg=False)
            # and the one `harness run` prints at its end (its interpreter, not whatever python is first)
            preview(shlex.split(suite.preview_command(clone / ".asv" / "html")), clone, env)
            continue
        done = subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{line}:\n{done.stdout}\n{done.stderr}"
        if cmd[1] == "run":
            assert re.search(r"\(1 commits \* 1 environments \* 2 benchmarks\)", done.stdout), done.stdout
            ran_once(clone, runs=2)
            machines = [p.parent.name for p in (clone / ".asv" / "results").glob("*/machine.json")]
            assert len(machines) == 1, machines  # asv's run and harness run's: one machine
        if cmd[1] == "compare":
            assert "ceilings.Host.track_seconds_per_step" in done.stdout
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""


def ran_once(clone: Path, runs: int = 1) -> None:
    """One asv result file (one environment), and per run one record for both figures, named for HEAD and the run."""
    head = git(clone, "rev-parse", "HEAD").strip()
    results = clone / ".asv" / "results"
    assert len([p for p in results.glob("*/*.json") if p.name not in ("machine.json", "benchmarks.json")]) == 1
    files = sorted(results.glob("records/*/*.jsonl"))
    assert len(files) == runs, files
    for records in files:
        (line,) = records.read_text().splitlines()
        record = json.loads(line)
        assert record["case"] == "ceilings" and record["params"] == {"probe": "cpu_matmul_fp32"}
        assert record["commit"] == head and re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{6}", record["run_id"])
        assert records.name == f"{head[:8]}-{record['run_id']}.jsonl"


def preview(args: list[str], clone: Path, env: dict, port_arg: bool = True) -> None:
    port = free_port()
    proc = subprocess.Popen([*args, *(["--port"] * port_arg), str(port)], cwd=clone, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not serves(f"http://127.0.0.1:{port}/index.html"):
            assert proc.poll() is None and time.monotonic() < deadline, "asv preview served nothing"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_outside_harness_run_a_record_names_the_commit_asv_built_or_the_checkout_s_head(tmp_path):
    from harness.drive.asv.bench import context
    from harness.measure.instruments.devices import Devices
    built = context(Devices(reason="test"), tmp_path, environ={"ASV_COMMIT": "c" * 40})
    assert built.commit == "c" * 40 and built.run_id is None  # not under an asv run: no run to name
    assert context(Devices(reason="test"), tmp_path, environ={}).commit == git(REPO, "rev-parse", "HEAD").strip()
