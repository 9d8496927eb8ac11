"""``pages`` killed: the ``asv publish`` it started dies with it (SIGKILL gives it no chance to
end its children), and the old site a kill mid-swap left beside ``.asv/html`` is removed by the
next publish, as long as the process it is named for is gone."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.drive.asv import asv_site

REPO = Path(__file__).resolve().parents[1]
# A pages process whose `asv publish` is a sleeper that writes its pid; the copy and config are stand-ins.
PAGES = """
import contextlib, sys
from pathlib import Path
from harness.drive.asv import asv_site
tmp = Path(sys.argv[1])
asv_site.ASV = (sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
                "time.sleep(60)", str(tmp / "asv.pid"))
asv_site.labelled_copy = lambda source, dest: dest
asv_site.private_config = lambda repo, copy: contextlib.nullcontext(tmp / "asv.conf.json")
asv_site.publish(tmp, tmp / "html", results=tmp)
"""


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"
    except (OSError, IndexError):
        return True


def wait_for(check, what: str, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_asv_publish_dies_with_a_killed_pages(tmp_path):
    pages = subprocess.Popen([sys.executable, "-c", PAGES, str(tmp_path)], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        wait_for(lambda: (tmp_path / "asv.pid").is_file() and (tmp_path / "asv.pid").read_text(), "asv publish")
        asv = int((tmp_path / "asv.pid").read_text())
        pages.send_signal(signal.SIGKILL)
        pages.wait(timeout=10)
        wait_for(lambda: gone(asv), "asv publish to die with pages", timeout=5)
    finally:
        pages.kill()
        pages.wait()
        if (tmp_path / "asv.pid").is_file() and not gone(pid := int((tmp_path / "asv.pid").read_text())):
            os.kill(pid, signal.SIGKILL)


def test_the_next_publish_removes_an_old_site_a_killed_one_left_and_no_live_ones(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    site, built = tmp_path / "html", tmp_path / "built"
    for path in (site, built):
        path.mkdir()
        (path / "index.html").write_text(path.name)
    left = tmp_path / f".html.old-{dead.pid}"
    live = tmp_path / f".html.old-{os.getppid()}"  # a publish running now, in another process
    for path in (left, live, tmp_path / ".html.old-x"):
        path.mkdir()
    asv_site.swap_in(built, site)
    assert (site / "index.html").read_text() == "built"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["html", live.name, ".html.old-x"])
