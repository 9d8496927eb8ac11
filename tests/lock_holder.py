"""Another process holding a lock, for the tests of who waits on whom (tests/test_locks.py, and
the launch that tests/test_launch.py shares between its tests)."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOLD = ("import sys, time; from pathlib import Path; from harness.measure.guards import locks\n"
        "with locks.held(Path(sys.argv[1]), 'the test lock'):\n"
        "    print('held', flush=True); time.sleep(float(sys.argv[2]))\n")


def hold(lock: Path, seconds: float = 30) -> subprocess.Popen:
    """Another process holding ``lock`` (its own command line says 'the-holder')."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(seconds), "the-holder"], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc
