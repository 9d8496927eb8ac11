"""A folder of wheels for a box without internet: the platform tags pip is given (a manylinux_2_N
box installs every older manylinux wheel), the download command, and what is said when pip
fails or succeeds. No download runs here: pip's call is stood in for."""
import sys

from harness.drive.commands import wheelhouse

OLDER_THAN_28 = [f"manylinux_2_{v}_x86_64" for v in range(27, 16, -1)]


def test_a_manylinux_tag_brings_every_older_one_down_to_2014():
    assert wheelhouse.expand(["manylinux_2_28_x86_64"]) == ["manylinux_2_28_x86_64", *OLDER_THAN_28,
                                                            "manylinux2014_x86_64"]
    assert wheelhouse.expand(["manylinux_2_17_x86_64"]) == ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def test_other_tags_pass_as_they_are_and_none_is_named_twice():
    assert wheelhouse.expand(["macosx_11_0_arm64", "manylinux2014_aarch64"]) == ["macosx_11_0_arm64",
                                                                                 "manylinux2014_aarch64"]
    assert wheelhouse.expand(["manylinux_2_18_x86_64", "manylinux_2_17_x86_64"]) == [
        "manylinux_2_18_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    assert wheelhouse.expand(["manylinux_2_28_aarch64"]) == ["manylinux_2_28_aarch64"]  # x86_64's tags only


def test_the_command_downloads_binary_wheels_for_the_python_and_platforms_named(tmp_path):
    cmd = wheelhouse.command(tmp_path, "3.12", ["manylinux_2_18_x86_64"], ["torch==2.11.0"])
    assert cmd == [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", "3.12",
                   "--implementation", "cp", "-d", str(tmp_path), "--platform", "manylinux_2_18_x86_64",
                   "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                   *wheelhouse.BASE, "torch==2.11.0"]


def test_a_failed_download_names_what_to_check_and_a_good_one_how_to_use_the_folder(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "new" / "wheels"
    called = []
    monkeypatch.setattr(wheelhouse.subprocess, "call", lambda cmd: called.append(cmd) or 1)
    platforms = ["manylinux_2_17_x86_64", "macosx_11_0_arm64"]
    assert wheelhouse.build(dest, "3.12", platforms, ["x==1"]) == 1 and dest.is_dir()
    assert called == [wheelhouse.command(dest, "3.12", platforms, ["x==1"])]
    out, err = capsys.readouterr()
    assert out == "oombench: " + " ".join(called[0]) + "\n"
    assert err == ("oombench: pip download failed: check the package names and versions, and that each has a binary "
                   "wheel for Python 3.12 on manylinux_2_17_x86_64, macosx_11_0_arm64 (a source-only package, such "
                   "as chainer, must be built into a wheel first: pip wheel chainer==7.8.1 -w DIR)\n")

    def fetched(cmd):
        (dest / "a-1-py3-none-any.whl").write_text("")
        (dest / "b-1-py3-none-any.whl").write_text("")
        return 0
    monkeypatch.setattr(wheelhouse.subprocess, "call", fetched)
    assert wheelhouse.build(dest, "3.12", ["manylinux_2_17_x86_64"], []) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [f"oombench: 2 wheels in {dest}. On the offline box:",
                       f"  PIP_NO_INDEX=1 PIP_FIND_LINKS={dest.resolve()} python3 -m asv run --config "
                       "asv.versions.conf.json ...",
                       f"  pip install --no-index --find-links {dest.resolve()} asv asv-runner   # for -E existing"]
