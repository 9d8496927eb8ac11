"""Bounds and one-line refusals, before any work: the multi-node arguments and SLURM's variables,
a rendezvous host that does not resolve (asked once, within a bound), --package values that pip
would read as its options, a --history without records, a corrupt wheel or an unwritable folder
for ``stack``, a read-only .asv for ``pages``, and names in records too long for any page."""
import json
import os
import socket
import time
import zipfile

import pytest

from harness.drive.commands import bootstrap, cli, stack
from harness.measure.records.record import NAME_MAX, Record
from harness.workloads.parallelism import nodes as nodes_module
from harness.workloads.parallelism.nodes import Nodes

from test_record import sample_record


class Ran(Exception):
    """The command went past its refusals (to set-up)."""


@pytest.fixture
def refused(monkeypatch, capsys):
    """``cli.main(argv)``'s exit status and its stderr, failing where set-up was reached."""
    def ensure(command):
        raise Ran(command)
    monkeypatch.setattr(bootstrap, "ensure", ensure)

    def call(argv):
        rc = cli.main(argv)
        # a reading command first says which results it reads (a note, not the refusal)
        err = "".join(line for line in capsys.readouterr().err.splitlines(keepends=True)
                      if not line.startswith(f"oombench {argv[0]}: reading "))
        assert len(err.strip().splitlines()) == 1, err
        return rc, err
    return call


@pytest.mark.parametrize("args, says", [
    ((None, 1, None, None), "--node-rank describes one node of several: pass --nnodes N"),
    ((1, 0, None, None), "--node-rank describes one node of several"),
    ((None, None, "head:29500", None), "--rdzv-endpoint describes one node of several"),
    ((None, None, None, "job7"), "--rdzv-id describes one node of several"),
    ((2, 0, "head:0", None), "'head:0' is not HOST:PORT with a port of 1..65535"),
    ((2, 0, "head:70000", None), "is not HOST:PORT"),
    ((2, 0, "head:http", None), "is not HOST:PORT"),
    ((2, 0, ":29500", None), "is not HOST:PORT"),
])
def test_launcher_arguments_that_do_not_add_up_are_refused_naming_the_fix(args, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        Nodes.of_launcher(*args, environ={})


def test_an_ipv6_endpoint_is_host_and_port():
    assert nodes_module.split_endpoint("[fe80::1]:29500") == ("fe80::1", 29500)
    assert Nodes.of_launcher(2, 1, "[::1]:29500", None, environ={}).endpoint == "[::1]:29500"


@pytest.mark.parametrize("environ, name", [
    ({"SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "x", "MASTER_ADDR": "n1"}, "SLURM_NODEID='x'"),
    ({"SLURM_STEP_NUM_NODES": "two"}, "SLURM_STEP_NUM_NODES='two'"),
    ({"SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "-1", "MASTER_ADDR": "n1"}, "SLURM_NODEID='-1'"),
])
def test_a_slurm_variable_that_is_not_a_number_is_named(environ, name):
    with pytest.raises(ValueError, match=f"^{name} is not a number"):
        Nodes.of_launcher(None, None, None, None, environ=environ)


def test_a_host_that_does_not_resolve_is_named_once_and_a_hanging_resolver_is_bounded(monkeypatch):
    asked = []

    def unknown(host, port, **kw):
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    assert nodes_module.unresolved("head:29500") == (
        "--rdzv-endpoint head:29500: head does not resolve (Name or service not known): name a host every node "
        "can resolve (e.g. the first node's hostname, or its address)")
    assert asked == ["head"]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **kw: time.sleep(3))
    start = time.monotonic()
    said = nodes_module.unresolved("slow:29500", timeout_s=0.2)
    assert time.monotonic() - start < 1 and "slow did not resolve within 0 s" in said
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **kw: [("ok",)])
    assert nodes_module.unresolved("head:29500") is None


def test_run_refuses_a_node_rank_without_nnodes_and_an_unresolved_host_before_set_up(refused, monkeypatch):
    rc, err = refused(["run", "--node-rank", "1"])
    assert rc == 2 and "--node-rank describes one node of several" in err
    monkeypatch.setattr(nodes_module, "unresolved", lambda endpoint, timeout_s=10: f"{endpoint}: no such host")
    rc, err = refused(["run", "--nnodes", "2", "--rdzv-endpoint", "nowhere:29500"])
    assert rc == 2 and "nowhere:29500: no such host" in err
    monkeypatch.setenv("SLURM_STEP_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_NODEID", "x")
    rc, err = refused(["run"])
    assert rc == 2 and "SLURM_NODEID='x' is not a number" in err and "invalid literal" not in err


@pytest.mark.parametrize("package", ["--index-url=http://example.invalid/simple", "-rreqs.txt", " -e .", ""])
def test_a_package_that_pip_would_read_as_an_option_is_refused(refused, tmp_path, package):
    rc, err = refused(["wheelhouse", str(tmp_path / "w"), "--python", "3.12", f"--package={package}"])
    assert rc == 2 and "--package takes a requirement such as torch==2.11.0" in err
    assert not (tmp_path / "w").exists()


def test_a_history_without_records_is_refused_not_read_as_too_thin(refused, tmp_path, monkeypatch):
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    base = tmp_path / "base.jsonl"
    base.write_text(json.dumps(sample_record().to_dict()) + "\n")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.jsonl").write_text("not json\n")
    rc, err = refused(["gate", str(base), str(base), "--history", str(tmp_path / "junk")])
    assert rc == 2 and f"--history {tmp_path / 'junk'} holds no records" in err


def wheel(path, whole=True):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        if whole:
            z.writestr("pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def test_stack_refuses_a_corrupt_wheel_and_an_unwritable_folder_in_one_line(tmp_path, capsys, refused):
    good, torn = wheel(tmp_path / "pkg-1.0-py3-none-any.whl"), tmp_path / "torn-1.0-py3-none-any.whl"
    torn.write_bytes(good.read_bytes()[:40])
    zipless = wheel(tmp_path / "bare-1.0-py3-none-any.whl", whole=False)
    for bad in (torn, zipless):
        assert stack.main(str(tmp_path / "st"), [str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"{bad} is not a whole wheel" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "st").exists()
    (tmp_path / "file").write_text("x")
    rc, err = refused(["stack", str(tmp_path / "file" / "st"), str(good)])  # a folder under a file: no one can
    assert rc == 2 and "DEST" in err and "file" in err


def test_stack_says_in_one_line_where_pip_cannot_install_a_wheel(tmp_path, capsys, monkeypatch):
    good = wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    monkeypatch.setattr(stack.subprocess, "run", lambda *a, **kw: type("Done", (), {"returncode": 1})())
    assert stack.main(str(tmp_path / "st"), [str(good)]) == 2
    err = capsys.readouterr().err
    assert "pip could not install pkg-1.0-py3-none-any.whl" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("read_only", [False, True])
def test_pages_refuses_an_asv_folder_it_cannot_write_before_publishing(refused, monkeypatch, tmp_path, read_only):
    monkeypatch.setattr(bootstrap, "ensure", lambda command: None)
    monkeypatch.setattr(bootstrap, "REPO", tmp_path)
    from harness.drive.asv import asv_site
    from harness.report.pages import build
    monkeypatch.setattr(build, "check_args", lambda results, out: None)
    monkeypatch.setattr(asv_site, "publish", lambda *a: pytest.fail("asv publish ran"))
    if not read_only:
        (tmp_path / ".asv").write_text("a file where the folder goes\n")
        rc, err = refused(["pages"])
        assert rc == 2 and ".asv folder" in err and "takes a folder" in err
        return
    (tmp_path / ".asv").mkdir()
    (tmp_path / ".asv").chmod(0o500)
    try:
        if os.access(tmp_path / ".asv", os.W_OK):
            pytest.skip("this user writes a read-only folder (root)")
        rc, err = refused(["pages"])
    finally:
        (tmp_path / ".asv").chmod(0o700)
    assert rc == 2 and ".asv folder" in err and "read-only" in err


@pytest.mark.parametrize("where", ["case", "gpu", "cpu", "cuda_driver"])
def test_a_record_whose_names_are_megabytes_long_is_refused_at_read_naming_the_field(where):
    d = json.loads(json.dumps(sample_record().to_dict()))
    long = "x" * (NAME_MAX + 1)
    if where == "case":
        d["case"] = long
    elif where == "gpu":
        d["environment"]["devices"]["gpus"][0]["name"] = long
    elif where == "cpu":
        d["environment"]["cpu"] = long
    else:
        d["environment"]["devices"]["cuda_driver"] = long
    with pytest.raises(ValueError, match=f"at most {NAME_MAX}|1 to {NAME_MAX} characters"):
        Record.from_dict(d)
    d = json.loads(json.dumps(sample_record().to_dict()))
    d["case"] = "x" * NAME_MAX
    assert Record.from_dict(d).case == d["case"]  # the bound itself is a name


def test_pages_refuses_an_out_under_a_file_in_one_line(tmp_path, capsys):
    from harness.report.pages import build
    from conftest import FROZEN
    (tmp_path / "file").write_text("x\n")
    said = build.check_args(str(FROZEN), str(tmp_path / "file" / "pages"))
    assert said is not None and "--out" in said and "is a file" in said
    assert build.main(results=str(FROZEN), out=str(tmp_path / "file" / "pages")) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert (tmp_path / "file").read_text() == "x\n"
