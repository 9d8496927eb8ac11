"""Set-up once: every command sets up .venv when it must, and trusts the stamp afterwards.

All but the last test run on a temporary .venv with subprocess.run and os.execve recorded, so the
real .venv is never touched; the last runs `python3 -m harness machine` for real.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.drive import bootstrap, cli

MODULES = ("numpy", "psutil", "pynvml")


class Exec(Exception):
    """os.execve does not return: the recorder raises this to stop the command there too."""


@pytest.fixture
def fake(monkeypatch, tmp_path):
    rec = type("Recorder", (), {"run": [], "exec": []})()
    monkeypatch.setattr(bootstrap, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(bootstrap, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(bootstrap.subprocess, "run",
                        lambda cmd, **kw: rec.run.append(cmd) or type("Done", (), {"returncode": 0})())

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
        assert set(bootstrap.split(extras)) <= {"bench", "test", "torch", "pages", "chainer", "gate"}, name
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
    probe_fails = lambda cmd, **kw: fake.run.append(cmd) or type("Done", (), {"returncode": int(cmd[1] == "-c")})()
    monkeypatch.setattr(bootstrap.subprocess, "run", probe_fails)
    with pytest.raises(Exec):
        bootstrap.ensure("run")
    probe, build_env, old_setuptools, wheel, pip = fake.run  # .venv asked first: no chainer there
    assert probe[1] == "-c" and "chainer" in probe[2]
    assert "--no-build-isolation" in wheel and "--find-links" in pip


def test_pip_prints_to_the_terminal_and_a_failure_names_the_fix(fake, monkeypatch):
    seen = []
    monkeypatch.setattr(bootstrap.subprocess, "run",
                        lambda cmd, **kw: seen.append(kw) or type("Done", (), {"returncode": 1})())
    with pytest.raises(SystemExit, match=r"(?s)set-up failed: `.*pip install.*` exited 1.*python3 -m harness machine"):
        bootstrap._pip(Path(sys.executable), "install", "nothing")
    assert "capture_output" not in seen[0] and seen[0].get("stdout") == 2


def test_a_failed_install_leaves_no_stamp(fake, monkeypatch):
    plain_interpreter(monkeypatch)
    make_venv(["bench"], pyproject="0" * 64)
    monkeypatch.setattr(bootstrap.subprocess, "run", lambda cmd, **kw: type("Done", (), {"returncode": 1})())
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
