"""The suite's own tools on a long history: the gate and the pages on 50,000 made-up records.
CPU only; seconds per step is one command's wall time, a fresh interpreter's imports included."""
from harness.cases.tooling import PROBES

from benchmarks.common import _Case


class ToolsCpu(_Case):
    case = "tooling"
    param_names = ["probe"]
    params = [list(PROBES)]
    timeout = 900
