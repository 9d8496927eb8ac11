"""``harness stack``: an environment whose given wheels come before this interpreter's packages,
which it still sees in full (the GPU stack of a box is not reinstalled to compare one library)."""
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from harness.drive.commands import stack


def fake_wheel(folder, name="tabulate", version="0.0.1"):
    """A wheel of a module that shadows one this interpreter has, marked so the test can tell."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.py", "MARK = 'stack'\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


PROBE = ("import importlib.metadata as m, sys, numpy, tabulate; "
         "print(m.version('tabulate'), tabulate.MARK, numpy.__version__, sys.executable)")


def test_the_stack_sees_its_wheel_first_and_everything_else_of_this_interpreter(tmp_path):
    pytest.importorskip("tabulate")
    import numpy
    python = stack.make(tmp_path / "s", [fake_wheel(tmp_path)])
    out = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    assert out[:3] == ["0.0.1", "stack", numpy.__version__]
    assert out[3] != sys.executable  # asv tells two ``existing`` environments apart by their interpreter
    # this interpreter is untouched
    base = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; print(m.version('tabulate'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert base != "0.0.1"


def test_bad_requests_are_refused_with_the_fix_before_anything_is_made(tmp_path, capsys):
    assert stack.main(str(tmp_path / "s"), []) == 2
    assert "at least one wheel" in capsys.readouterr().err
    assert stack.main(str(tmp_path / "s"), [str(tmp_path / "cupy.tar.gz")]) == 2
    assert "pip download" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert stack.main(str(tmp_path / "busy"), [str(fake_wheel(tmp_path))]) == 2
    assert f"name a new folder, e.g. {tmp_path / 'busy-2'}" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_environment_stack_did_not_make_is_refused_and_kept_whole(tmp_path, capsys):
    """A user's own venv, with a notes file in it: asking for a stack there clears nothing."""
    theirs = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(theirs)
    (theirs / "notes.txt").write_text("mine")
    before = snapshot(theirs)
    assert stack.main(str(theirs), [str(fake_wheel(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "did not make" in err and str(tmp_path / "venv-2") in err
    assert len(err.strip().splitlines()) == 1
    assert snapshot(theirs) == before


def test_a_stack_is_made_again_in_place_unless_something_else_was_put_in_it(tmp_path, capsys):
    dest = tmp_path / "s"
    assert stack.main(str(dest), [str(fake_wheel(tmp_path))]) == 0
    assert stack.main(str(dest), [str(fake_wheel(tmp_path, version="0.0.2"))]) == 0
    assert (stack.site_packages(dest) / "tabulate-0.0.2.dist-info").is_dir()
    assert not (stack.site_packages(dest) / "tabulate-0.0.1.dist-info").exists()
    (dest / "notes.txt").write_text("mine")
    assert stack.main(str(dest), [str(fake_wheel(tmp_path))]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert (dest / "notes.txt").read_text() == "mine"
    assert (stack.site_packages(dest) / "tabulate-0.0.2.dist-info").is_dir()
