import json

import pytest

from harness.drive.commands import bootstrap
from harness.drive.commands import cli
from harness.cases import ceilings


def refused(capsys, argv) -> str:
    """The one line a refused command printed, having exited 2."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_unknown_case_names_the_known_ones(capsys):
    assert "known cases: beyond, ceilings" in refused(capsys, ["case", "nope"])


def test_bad_parameters_exit_2_naming_the_choices(capsys):
    """A bad parameter exited 1, the code of a case that failed."""
    assert "probe='fast' is not one of" in refused(capsys, ["case", "ceilings", "probe=fast"])
    assert "name=value" in refused(capsys, ["case", "ceilings", "host_copy"])
    assert "name=value" in refused(capsys, ["case", "ceilings", "=host_copy"])


def test_case_prints_its_record(capsys, monkeypatch):
    monkeypatch.setitem(ceilings.BUILDERS, "host_copy", lambda: ceilings.host_copy(nbytes=2**20))
    assert cli.main(["case", "ceilings", "probe=host_copy", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["outcome"] == "ok" and rec["params"] == {"probe": "host_copy"} and rec["work"] == {"bytes": 2**21}


def test_gpu_case_without_gpu_prints_the_skip(capsys):
    assert cli.main(["case", "ceilings", "probe=matmul_bf16"]) == 0
    assert "skipped" in capsys.readouterr().out


def test_devices_says_there_is_no_gpu(capsys):
    cli.main(["devices"])
    assert "no GPU" in capsys.readouterr().out


class Calls:
    def __init__(self):
        self.run, self.exec = [], []


@pytest.fixture
def calls(monkeypatch, tmp_path):
    c = Calls()
    monkeypatch.setattr(bootstrap, "VENV", tmp_path / ".venv")
    # every command bootstrap starts goes through _call; probes of .venv (`python -c`) answer yes
    monkeypatch.setattr(bootstrap, "_call", lambda cmd, **kw: 0 if cmd[1] == "-c" else c.run.append(cmd) or 0)
    monkeypatch.setattr(bootstrap.os, "execve", lambda exe, argv, env: c.exec.append((argv, env)))
    monkeypatch.delenv(bootstrap.REEXEC_ENV, raising=False)
    return c


def test_bootstrap_uses_this_python_when_it_has_everything(calls):
    bootstrap.ensure("test")  # the test run itself has every module
    assert calls.run == [] and calls.exec == []


def test_bootstrap_makes_a_venv_installs_cpu_torch_and_restarts_there(calls, monkeypatch):
    monkeypatch.setitem(bootstrap.NEEDS, "run", (("no_such_module_xyz",), "bench,torch"))
    monkeypatch.setattr(bootstrap, "has_nvidia_gpu", lambda: False)
    bootstrap.ensure("run")
    venv, pip = calls.run
    assert venv[-3:] == ["-m", "venv", str(bootstrap.VENV)]
    assert bootstrap.TORCH_CPU_DEFAULT in pip and pip[-2:] == ["-e", f"{bootstrap.REPO}[bench,torch]"]
    (argv, env), = calls.exec
    assert argv[1:3] == ["-m", "harness"] and env[bootstrap.REEXEC_ENV] == "1"


def test_bootstrap_on_a_gpu_box_lets_pip_pick_the_cuda_torch(calls, monkeypatch):
    monkeypatch.setitem(bootstrap.NEEDS, "run", (("no_such_module_xyz",), "bench,torch"))
    monkeypatch.setattr(bootstrap, "has_nvidia_gpu", lambda: True)
    bootstrap.ensure("run")
    assert not any(a.startswith("torch==") for a in calls.run[-1])


def test_bootstrap_gives_up_instead_of_looping(calls, monkeypatch):
    monkeypatch.setitem(bootstrap.NEEDS, "run", (("no_such_module_xyz",), "bench,torch"))
    monkeypatch.setenv(bootstrap.REEXEC_ENV, "1")
    with pytest.raises(SystemExit, match="still missing no_such_module_xyz"):
        bootstrap.ensure("run")


def test_wheelhouse_downloads_binary_wheels_for_the_named_python_and_platform(tmp_path):
    from harness.drive.commands import wheelhouse
    cmd = wheelhouse.command(tmp_path, "3.12", ["manylinux_2_17_x86_64"], ["torch==2.11.0"])
    assert cmd[3:5] == ["download", "--only-binary=:all:"]
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    assert cmd[cmd.index("--platform") + 1] == "manylinux_2_17_x86_64"
    assert "asv==0.6.6" in cmd and "asv-runner==0.3.2" in cmd and cmd[-1] == "torch==2.11.0"


def test_new_commands_parse():
    args = cli.parser().parse_args(["gate", "a", "b", "--threshold", "0.2"])
    assert args.func is cli._gate and args.threshold == 0.2 and args.standard_errors == 2.0
    assert cli.parser().parse_args(["pages", "--no-asv"]).no_asv
    args = cli.parser().parse_args(["run", "--python", "/a/python", "--python", "/b/python"])
    assert args.python == ["/a/python", "/b/python"]


def test_bootstrap_builds_chainers_wheel_aside_and_installs_it_from_there(calls, monkeypatch):
    monkeypatch.setitem(bootstrap.NEEDS, "test", (("no_such_module_xyz",), "bench,test,torch,chainer"))
    monkeypatch.setattr(bootstrap, "has_nvidia_gpu", lambda: False)
    bootstrap.ensure("test")
    venv, build_env, old_setuptools, wheel, pip = calls.run
    # the old setuptools goes into a throwaway environment in set-up's build folder, never into .venv's own
    assert "setuptools<70" in old_setuptools and old_setuptools[0] != str(bootstrap.venv_python())
    assert old_setuptools[0].startswith(f"{bootstrap.build_dir()}/")
    assert "--no-build-isolation" in wheel and bootstrap.CHAINER in wheel
    assert "--find-links" in pip and pip[-1] == f"{bootstrap.REPO}[bench,test,torch,chainer]"


def test_case_sets_up_like_run_so_python3_dash_m_harness_case_works_on_a_fresh_clone(monkeypatch):
    asked = []
    monkeypatch.setattr(bootstrap, "ensure",
                        lambda command: asked.append(command) or (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        cli.main(["case", "ceilings", "probe=host_copy"])
    assert asked == ["case"] and "asv" not in bootstrap.NEEDS["case"][0]


def test_run_files_results_locally_unless_asked_and_passes_the_profile(monkeypatch, tmp_path):
    """A plain run writes under .asv/results (git-ignored); --file into results/; --results DIR there."""
    from harness.drive.asv import suite
    from harness.drive.commands import bootstrap
    from harness.measure.records.store import COMMITTED, LOCAL
    seen = []
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    monkeypatch.setattr(suite, "run", lambda **kw: seen.append(kw) or 0)
    # No --profile reaches the run as None: a --resume goes on with its run's own, a new run takes "standard".
    assert cli.main(["run"]) == 0 and seen[-1]["results"] == LOCAL and seen[-1]["profile"] is None
    assert cli.main(["run", "--file", "--profile", "quick"]) == 0
    assert seen[-1]["results"] == COMMITTED and seen[-1]["profile"] == "quick"
    assert cli.main(["run", "--results", str(tmp_path)]) == 0 and seen[-1]["results"] == tmp_path


@pytest.mark.parametrize("argv, to_pytest", [
    (["test", "-k", "gate", "-x"], ["-k", "gate", "-x"]),
    (["test", "tests/test_gate.py", "-k", "gate", "-p", "no:cacheprovider"],
     ["tests/test_gate.py", "-k", "gate", "-p", "no:cacheprovider"]),
    (["test", "--", "-k", "gate"], ["-k", "gate"]),  # the form that was needed before
    (["test"], []),
])
def test_test_hands_every_argument_to_pytest_in_order(monkeypatch, argv, to_pytest):
    import pytest as pytest_module
    got = []
    monkeypatch.setattr(pytest_module, "main", lambda args: got.append(args) or 0)
    monkeypatch.chdir(bootstrap.REPO)  # _test goes to the repository; the test's folder is put back after
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # nothing for _test to change in this process
    assert cli.main(argv) == 0
    assert got == [["-q", *to_pytest]]


def test_test_s_workers_keep_their_bytecode_in_the_harness_cache_where_writing_it_is_off(monkeypatch):
    import os

    import pytest as pytest_module

    from harness.drive import bytecode
    monkeypatch.setattr(pytest_module, "main", lambda args: 0)
    monkeypatch.chdir(bootstrap.REPO)
    monkeypatch.setenv(bytecode.OFF, "1")
    monkeypatch.delenv(bytecode.PREFIX, raising=False)
    assert cli.main(["test"]) == 0
    assert bytecode.OFF not in os.environ and os.environ[bytecode.PREFIX] == str(bytecode.CACHE)


def test_other_commands_still_refuse_arguments_they_do_not_know(capsys):
    assert cli.main(["gate", "a.jsonl", "b.jsonl", "-k", "gate"]) == 2
    assert "unrecognized arguments: -k gate" in capsys.readouterr().err


def test_the_gates_old_option_name_still_works_and_says_its_new_name(capsys):
    assert cli.parser().parse_args(["gate", "a", "b", "--iqr-factor", "3"]).standard_errors == 3.0
    assert "--iqr-factor is now --standard-errors" in capsys.readouterr().err


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """The committed results/ and the local runs' .asv/results, each a folder of records here."""
    from harness.drive.commands import bootstrap
    from harness.measure.records import store
    committed, local = tmp_path / "results", tmp_path / "local"
    (committed / "records").mkdir(parents=True)
    monkeypatch.setattr(store, "COMMITTED", committed)
    monkeypatch.setattr(store, "LOCAL", local)
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    return committed, local


def local_run(local):
    (local / "records" / "box").mkdir(parents=True)
    (local / "records" / "box" / "abc-run.jsonl").write_text("")


def test_reading_commands_read_the_local_runs_first_and_say_which_in_one_line(folders, monkeypatch, capsys):
    from harness.report import tables
    committed, local = folders
    seen = []
    monkeypatch.setattr(tables, "main", lambda results, *a: seen.append(str(results)) or 0)
    table = ["table", "tricks", "--down", "technique"]
    assert cli.main(table) == 0 and seen[-1] == str(committed)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"reading the committed {committed}" in err and "harness run" in err
    local_run(local)
    assert cli.main(table) == 0 and seen[-1] == str(local)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"reading this checkout's local runs in {local}" in err
    assert cli.main([*table, "--results", str(committed)]) == 0 and seen[-1] == str(committed)
    assert capsys.readouterr().err == ""  # asked for: nothing to say


def test_pages_after_run_keeps_what_run_measured_in_both_sites(folders, monkeypatch):
    from harness.drive.asv import asv_site
    from harness.report.pages import build
    _, local = folders
    local_run(local)
    published, built = [], []
    monkeypatch.setattr(asv_site, "publish", lambda repo, site, results=None: published.append(results) or 0)
    monkeypatch.setattr(build, "check_args", lambda results, out: None)
    monkeypatch.setattr(build, "main", lambda results=None, out=None: built.append(results) or 0)
    assert cli.main(["pages"]) == 0
    assert published == [local] and built == [str(local)]  # asv's site and the comparison pages: run's records
    committed, _ = folders
    assert cli.main(["pages", "--results", str(committed)]) == 0 and published[-1] == committed  # as the workflow
