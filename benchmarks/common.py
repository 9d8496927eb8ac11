"""What every benchmark class tracks of its case's record. asv treats bigger as worse: seconds
per step and bytes go up when things get worse, so those are what it tracks; rates belong in the
project's own pages. Names starting with "_" are not collected by asv as benchmarks."""
from pathlib import Path

from harness.drive.asv.bench import measure
from harness.measure.workload import BENCHMARK_TIMEOUT_S

# Under a plain `asv run` (not `python3 -m harness run`, which names the run's results folder),
# records go to this checkout's local results, outside git. In an `asv run -E virtualenv`
# environment the harness is an installed wheel: the folder is found from this file, not from it.
FALLBACK_RESULTS = Path(__file__).resolve().parents[1] / ".asv" / "results"


class _Case:
    case = ""
    fixed = {}  # parameters of the case that this class holds constant
    timeout = BENCHMARK_TIMEOUT_S

    def setup(self, *values):
        self.record = measure(self.case, FALLBACK_RESULTS, **self.fixed, **dict(zip(self.param_names, values)))

    def track_seconds_per_step(self, *values):
        return self.record.timing.median_s

    track_seconds_per_step.unit = "seconds"


class _OnDevice(_Case):
    def track_peak_device_bytes(self, *values):
        return self.record.device_bytes()

    track_peak_device_bytes.unit = "bytes"


class _OnHost(_Case):
    def track_peak_host_bytes(self, *values):
        return self.record.host_bytes()

    track_peak_host_bytes.unit = "bytes"
