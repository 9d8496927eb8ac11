"""``harness stack``'s words and files (tests/test_stack.py installs a real wheel and imports it):
the refusals, the site folders the stack falls back on, the marker and the .pth line it writes,
a failed install that stops it, and what it says it made. pip's call is stood in for here."""
import subprocess
import sys
import zipfile

import pytest

from harness.drive.commands import stack


def wheel(path):
    """The least file a wheel check takes for a whole wheel: a zip naming its .dist-info/WHEEL."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{path.name.split('-')[0]}-1.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def test_a_request_without_wheels_or_with_something_else_is_refused_naming_the_fix(tmp_path):
    assert stack.refusal(tmp_path / "s", []) == \
        "give at least one wheel (.whl) to put in front of this interpreter's packages"
    (tmp_path / "a.tar.gz").write_text("")
    (tmp_path / "dir.whl").mkdir()
    for w in (tmp_path / "a.tar.gz", tmp_path / "dir.whl", tmp_path / "missing.whl"):
        assert stack.refusal(tmp_path / "s", [w]) == (
            f"{w} is not a wheel file: download it first, e.g. `python3 -m pip download --no-deps "
            "--only-binary=:all: -d wheels cupy-cuda13x==13.6.0`")
    (tmp_path / "torn.whl").write_text("")  # a download cut short: no zip
    assert "is not a whole wheel" in stack.refusal(tmp_path / "s", [tmp_path / "torn.whl"])
    assert stack.refusal(tmp_path / "s", [wheel(tmp_path / "ok.whl")]) is None


def test_the_site_folders_are_this_interpreters_then_the_users_where_enabled_each_once(tmp_path, monkeypatch):
    venv_site, system, user = (tmp_path / n for n in ("venv", "system", "user"))
    for d in (venv_site, system, user):
        d.mkdir()
    monkeypatch.setattr(stack.site, "getsitepackages", lambda: [str(venv_site), str(system), str(venv_site),
                                                                 str(tmp_path / "gone")])
    monkeypatch.setattr(stack.site, "getusersitepackages", lambda: str(user))
    monkeypatch.setattr(stack.site, "ENABLE_USER_SITE", True)
    assert stack.base_site_dirs() == [str(venv_site), str(system), str(user)]
    monkeypatch.setattr(stack.site, "ENABLE_USER_SITE", False)
    assert stack.base_site_dirs() == [str(venv_site), str(system)]
    monkeypatch.setattr(stack.site, "ENABLE_USER_SITE", True)
    monkeypatch.setattr(stack.site, "getusersitepackages", lambda: "")
    assert stack.base_site_dirs() == [str(venv_site), str(system)]


def test_the_stack_is_a_marked_venv_whose_pth_adds_each_base_folder_after_its_wheels(tmp_path, monkeypatch):
    installed = []
    monkeypatch.setattr(stack.subprocess, "run",
                        lambda cmd: installed.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    monkeypatch.setattr(stack, "base_site_dirs", lambda: ["/base/a", "/base/b"])
    dest, wheel = tmp_path / "s", tmp_path / "x-1-py3-none-any.whl"
    python = stack.make(dest, [wheel])
    assert python == dest / "bin" / "python" and python.is_symlink()
    target = stack.site_packages(dest)
    assert installed == [[sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                          "--disable-pip-version-check", "--target", str(target), str(wheel)]]
    assert (target / stack.PTH).read_text() == ("import site; site.addsitedir('/base/a')\n"
                                                "import site; site.addsitedir('/base/b')\n")
    marker = (dest / stack.MARK).read_text()
    assert '"made_by": "python3 -m harness stack, which clears this folder when asked to make it again"' in marker
    assert not (dest / "bin" / "pip").exists()


def test_a_failed_install_stops_the_stack(tmp_path, monkeypatch):
    monkeypatch.setattr(stack.subprocess, "run", lambda cmd: subprocess.CompletedProcess(cmd, 1))
    with pytest.raises(stack.StackError, match="pip could not install x.whl"):
        stack.make(tmp_path / "s", [tmp_path / "x.whl"])


def test_main_refuses_in_one_line_or_says_how_to_measure_both_stacks(tmp_path, monkeypatch, capsys):
    assert stack.main(str(tmp_path / "s"), []) == 2
    assert capsys.readouterr().err == ("oombench stack: give at least one wheel (.whl) to put in front of this "
                                       "interpreter's packages\n")
    wheels = [tmp_path / "a-1-py3-none-any.whl", tmp_path / "b-2-py3-none-any.whl"]
    for w in wheels:
        wheel(w)
    monkeypatch.setattr(stack, "make", lambda dest, ws: dest / "bin" / "python")
    assert stack.main(str(tmp_path / "s"), [str(w) for w in wheels]) == 0
    python = (tmp_path / "s").absolute() / "bin" / "python"
    assert capsys.readouterr().out == (
        f"oombench: {python} sees a-1-py3-none-any.whl, b-2-py3-none-any.whl first, then this interpreter's packages. "
        f"Measure both stacks in one run:\n  python3 -m harness run --profile versions --python {python} "
        f"--python {sys.executable}\n")
