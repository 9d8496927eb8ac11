"""The box's physical limits: every other figure is read against these."""
from harness.cases.ceilings import GPU_PROBES, HOST_PROBES, MULTI_GPU_PROBES
from harness.runner import measure


class _Probe:
    param_names = ["probe"]
    timeout = 300

    def setup(self, probe):
        self.record = measure("ceilings", probe=probe)

    def track_seconds_per_step(self, probe):
        return self.record.timing.median_s

    track_seconds_per_step.unit = "seconds"


class Host(_Probe):
    params = [list(HOST_PROBES)]

    def track_peak_host_bytes(self, probe):
        return self.record.memory["host.max_rss"]

    track_peak_host_bytes.unit = "bytes"


class Device(_Probe):
    params = [list(GPU_PROBES)]

    def track_peak_device_bytes(self, probe):
        return self.record.device_bytes()

    track_peak_device_bytes.unit = "bytes"


class Peer(Device):
    params = [list(MULTI_GPU_PROBES)]
