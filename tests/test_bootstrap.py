"""Set-up once: every command sets up .venv when it must, and trusts the stamp afterwards; one
set-up at a time, and a kill during it leaves no pip running and no stamp.

The tests run on a temporary .venv, with the commands bootstrap starts (``_call``) and os.execve
recorded or with a fake pip, so the real .venv is never touched; the last runs `python3 -m
harness machine` for real.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.drive.commands import bootstrap, cli

MODULES = ("numpy", "psutil", "pynvml")


class Exec(Exception):
    """os.execve does not return: the recorder raises this to stop the command there too."""


@pytest.fixture
def fake(monkeypatch, tmp_path):
    rec = type("Recorder", (), {"run": [], "exec": []})()
    monkeypatch.setattr(bootstrap, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(bootstrap, "has_nvidia_gpu", lambda: False)
    # Every command bootstrap starts goes through _call; the probes of .venv (`python -c`) answer yes.
    monkeypatch.setattr(bootstrap, "_call", lambda cmd, **kw: 0 if cmd[1] == "-c" else rec.run.append(cmd) or 0)

    def execve(exe, argv, env):
        rec.exec.append((exe, argv, env))
        raise Exec

    monkeypatch.setattr(bootstrap.os, "execve", execve)
    monkeypatch.delenv(bootstrap.REEXEC_ENV, raising=False)
    monkeypatch.delenv(bootstrap.TORCH_CPU_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["harness", "machine"])
    return rec


def plain_interpreter(monkeypatch):
    """This interpreter as python3 without the project's dependencies (the system one)."""
    monkeypatch.setattr(bootstrap, "missing", lambda modules: list(modules))


def make_venv(extras, pyproject=None, torch="default"):
    python = bootstrap.venv_python()
    python.parent.mkdir(parents=True)
    python.touch()
    bootstrap.write_stamp(list(extras))
    if pyproject or torch != "default":
        stamp = json.loads((bootstrap.VENV / bootstrap.STAMP).read_text())
        stamp["pyproject"] = pyproject or stamp["pyproject"]
        stamp["torch"] = stamp["torch"] if torch == "default" else torch
        (bootstrap.VENV / bootstrap.STAMP).write_text(json.dumps(stamp))


def installed(run) -> set[str]:
    """The extras of the one `pip install -e REPO[...]` among the recorded commands."""
    pips = [c for c in run if c[2:4] == ["pip", "install"] and "-e" in c]
    assert len(pips) == 1, run
    project = pips[0][-1]
    return set(project.partition("[")[2].rstrip("]").split(",")) - {""}


def subcommands() -> list[str]:
    sub = next(a for a in cli.parser()._actions if isinstance(a, cli.argparse._SubParsersAction))
    return list(sub.choices)


def test_every_documented_command_has_needs():
    for name in subcommands():
        modules, extras = bootstrap.NEEDS[name]
        known = {"bench", "test", "torch", "pages", "chainer", "gate", "models", "ways"}
        assert set(bootstrap.split(extras)) <= known, name
    for name in ("devices", "machine", "summary", "table", "gate"):
        assert set(MODULES) <= set(bootstrap.NEEDS[name][0]), name


def minimal_argv(name) -> list[str]:
    """The command with a dummy value for each required argument."""
    sub = next(a for a in cli.parser()._actions if isinstance(a, cli.argparse._SubParsersAction))
    argv = [name]
    for action in sub.choices[name]._actions:
        if not action.option_strings:
            argv += ["x"] if action.nargs in (None, "+") else []
        elif action.required:
            argv += [action.option_strings[0], "x"]
    return argv


@pytest.mark.parametrize("name", subcommands())
def test_every_command_sets_up_first_with_its_own_needs(name, monkeypatch):
    asked = []

    def ensure(command):
        asked.append(command)
        raise Exec

    monkeypatch.setattr(bootstrap, "ensure", ensure)
    with pytest.raises(Exec):
        cli.main(minimal_argv(name))
    # docs asks for "pages": another name is fine as long as the needs are the command's own.
    assert len(asked) == 1 and bootstrap.NEEDS[asked[0]] == bootstrap.NEEDS[name]


def test_a_stamp_that_covers_the_command_means_no_pip_and_no_probe(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench", "torch", "chainer"])
    with pytest.raises(Exec):
        bootstrap.ensure("case")
    assert fake.run == []
    (exe, argv, env), = fake.exec
    assert argv == [str(bootstrap.venv_python()), "-m", "harness", "machine"] and env[bootstrap.REEXEC_ENV] == "1"


def test_inside_the_venv_a_covering_stamp_costs_nothing(fake, monkeypatch):
    make_venv(["bench", "torch", "chainer"])
    monkeypatch.setattr(sys, "prefix", str(bootstrap.VENV))
    bootstrap.ensure("case")  # this interpreter has numpy, psutil, pynvml and torch
    assert fake.run == [] and fake.exec == []


def test_a_venv_with_more_extras_serves_the_light_commands(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench", "test", "torch", "pages", "chainer", "gate"])
    for name in ("devices", "machine", "summary", "table", "gate"):
        with pytest.raises(Exec):
            bootstrap.ensure(name)
    assert fake.run == [] and len(fake.exec) == 5


def test_a_missing_extra_installs_the_union_once_and_stamps_it(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench", "pages", "chainer"])
    with pytest.raises(Exec):
        bootstrap.ensure("case")
    assert installed(fake.run) == {"bench", "pages", "torch", "chainer"}
    assert len(fake.run) == 1  # .venv is there and its stamp vouches for chainer: no venv, no build
    assert bootstrap.TORCH_CPU_DEFAULT in fake.run[0]
    assert bootstrap.covers(bootstrap.read_stamp(), "bench,pages,torch,chainer")
    fake.run.clear()
    with pytest.raises(Exec):
        bootstrap.ensure("case")
    assert fake.run == []


def test_an_edited_pyproject_reinstalls_everything_that_was_there(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench", "torch", "chainer"], pyproject="0" * 64)
    with pytest.raises(Exec):
        bootstrap.ensure("machine")
    assert installed(fake.run) == {"bench", "torch", "chainer"} and len(fake.run) == 1
    assert bootstrap.read_stamp()["pyproject"] == bootstrap.pyproject_hash()


def test_a_changed_torch_pin_reinstalls(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench", "torch"])
    monkeypatch.setenv(bootstrap.TORCH_CPU_ENV, "torch==2.4.0")
    with pytest.raises(Exec):
        bootstrap.ensure("machine")
    assert "torch==2.4.0" in fake.run[0] and bootstrap.read_stamp()["torch"] == "torch==2.4.0"


def test_the_light_commands_install_no_torch(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    with pytest.raises(Exec):
        bootstrap.ensure("gate")
    venv, pip = fake.run
    assert venv[-3:] == ["-m", "venv", str(bootstrap.VENV)]
    assert pip[-2:] == ["-e", f"{bootstrap.REPO}[gate]"] and not any(a.startswith("torch") for a in pip)
    assert bootstrap.read_stamp()["extras"] == ["gate"]


def test_chainer_is_built_only_when_the_stamp_lacks_it(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench", "torch"])
    no_chainer = lambda cmd, **kw: fake.run.append(cmd) or int(cmd[1] == "-c" and "chainer" in cmd[2])
    monkeypatch.setattr(bootstrap, "_call", no_chainer)
    with pytest.raises(Exec):
        bootstrap.ensure("run")
    has_pip, probe, build_env, old_setuptools, wheel, pip = fake.run  # .venv asked first: no chainer there
    assert "pip" in has_pip[2]
    assert probe[1] == "-c" and "chainer" in probe[2]
    assert "--no-build-isolation" in wheel and "--find-links" in pip


def test_pip_prints_to_the_terminal_and_a_failure_names_the_fix(fake, monkeypatch):
    seen = []
    monkeypatch.setattr(bootstrap, "_call", lambda cmd, **kw: seen.append(kw) or 1)
    with pytest.raises(SystemExit, match=r"(?s)set-up failed: `.*pip install.*` exited 1.*python3 -m harness machine"):
        bootstrap._pip(Path(sys.executable), "install", "nothing")
    assert "capture_output" not in seen[0] and seen[0].get("stdout") == 2


def test_a_failed_install_leaves_no_stamp(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench"], pyproject="0" * 64)
    monkeypatch.setattr(bootstrap, "_call", lambda cmd, **kw: 0 if cmd[1] == "-c" else 1)
    with pytest.raises(SystemExit, match="set-up failed"):
        bootstrap.ensure("machine")
    assert bootstrap.read_stamp() is None


def test_a_plain_python3_running_machine_re_executes_in_the_venv(fake, monkeypatch, capsys):
    plain_interpreter(monkeypatch)
    make_venv([])
    with pytest.raises(Exec):
        cli.main(["machine"])
    (exe, argv, env), = fake.exec
    assert exe == str(bootstrap.venv_python()) and argv[1:] == ["-m", "harness", "machine"]
    assert fake.run == [] and capsys.readouterr().out == ""


def stamp_is_current() -> bool:
    return bootstrap.covers(bootstrap.read_stamp(), "") and bootstrap.venv_python().exists()


@pytest.mark.skipif(not stamp_is_current(), reason="no stamped .venv yet: python3 -m harness test makes one")
def test_python3_dash_m_harness_machine_from_the_system_python():
    # The system python3, not this venv's: .venv/bin off PATH, and no re-exec marker inherited.
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if Path(p).resolve() != (bootstrap.VENV / "bin").resolve())
    env = {k: v for k, v in os.environ.items() if k not in (bootstrap.REEXEC_ENV, "VIRTUAL_ENV", "PYTHONPATH")}
    start = time.monotonic()
    done = subprocess.run(["/usr/bin/env", "python3", "-m", "harness", "machine"], cwd=bootstrap.REPO,
                          env={**env, "PATH": path}, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert "machine" in json.loads(done.stdout)
    assert "installing" not in done.stderr, f"the stamp was not trusted ({took:.1f} s)"


# A command in a fresh clone, as its own process: this interpreter without the project's
# dependencies, .venv at argv[1], the re-exec into .venv printed instead of done.
DRIVER = """
import os, sys
from pathlib import Path
from harness.drive.commands import bootstrap
bootstrap.VENV = Path(sys.argv[1])
bootstrap.missing = lambda modules: list(modules)
bootstrap.has_nvidia_gpu = lambda: False
os.execve = lambda exe, argv, env: (print("exec", exe, flush=True), os._exit(0))
sys.argv = ["harness", "gate"]
bootstrap.ensure("gate")
"""
# .venv's python: its probes find pip; `-m pip ...` logs itself, makes a temporary folder where pip
# makes them (TMPDIR), starts a child of its own and waits for the test to let it finish (a file named go).
FAKE_PYTHON = """#!/bin/sh
[ "$1" = "-c" ] && exit 0
echo "$$ $*" >> "$STATE/pip.log"
mkdir -p "${TMPDIR:-/tmp}/pip-unpack-$$"
sleep 300 &
echo $! > "$STATE/child.pid"
echo $$ > "$STATE/pip.pid"
while [ ! -e "$STATE/go" ]; do sleep 0.05; done
kill $!
"""


@pytest.fixture
def clone(tmp_path):
    venv, state = tmp_path / ".venv", tmp_path / "state"
    (venv / "bin").mkdir(parents=True)
    state.mkdir()
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if k != bootstrap.REEXEC_ENV}
    env.update(STATE=str(state), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(bootstrap.REPO))

    started = []

    def start():
        err = open(tmp_path / f"err-{time.monotonic_ns()}", "w+")
        proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(venv)], cwd=bootstrap.REPO, env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        proc.err = err
        started.append(proc)
        return proc
    yield type("Clone", (), {"venv": venv, "state": state, "tmp": tmp_path / "tmp", "start": staticmethod(start)})
    (state / "go").touch()  # a failed test leaves no fake pip waiting
    for proc in started:
        proc.terminate()
        proc.communicate(timeout=30)


def wait_for(check, what, timeout=60):
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"  # a zombie is ended
    except (OSError, IndexError):
        return True


def stderr_of(proc) -> str:
    proc.err.seek(0)
    return proc.err.read()


def test_a_second_command_waits_for_the_set_up_and_uses_it(clone):
    first = clone.start()
    wait_for(lambda: (clone.state / "pip.pid").exists(), "the first command's pip")
    second = clone.start()
    holder = f"waits for pid {first.pid} (python3 -m harness gate)"
    wait_for(lambda: holder in stderr_of(second) or second.poll() is not None, "the second command to wait")
    assert holder in stderr_of(second)
    (clone.state / "go").touch()
    for proc in (first, second):
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.startswith("exec"), stderr_of(proc)
    assert len((clone.state / "pip.log").read_text().splitlines()) == 1  # the second used the first's
    assert bootstrap.covers(json.loads((clone.venv / bootstrap.STAMP).read_text()), "gate")


def test_a_kill_during_set_up_ends_pip_and_what_it_started_and_leaves_no_stamp(clone):
    proc = clone.start()
    wait_for(lambda: (clone.state / "child.pid").exists() and (clone.state / "pip.pid").exists(), "pip")
    pids = [int((clone.state / name).read_text()) for name in ("pip.pid", "child.pid")]
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "set-up stopped by SIGTERM" in stderr_of(proc)
    wait_for(lambda: all(gone(pid) for pid in pids), "pip and its child to end", timeout=10)
    assert not (clone.venv / bootstrap.STAMP).exists()
    assert list(clone.tmp.iterdir()) == []  # pip's and the install's temporary folders: none in the system's
    assert [p.name for p in (clone.venv / bootstrap.BUILD).iterdir()][0].startswith("pip-unpack-")  # but in .venv
