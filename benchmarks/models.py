"""The models a project tracks, as named in its pyproject.toml (``[tool.oombench.models]``: NAME =
"path/to/file.py:factory", or a table with target, batch, seq_len, technique), each trained by the
``try`` case: asv runs, compares and publishes them as any other benchmark, and ``harness gate`` holds
them across commits. ``Models`` on the GPU, ``ModelsCpu`` on a box without one; no class where
no model is named."""
import os
from pathlib import Path

from harness.cases.try_model import registered
from harness.workloads.training.user_model import PROJECT_ENV

from benchmarks.common import FALLBACK_RESULTS, _OnDevice, _OnHost, measure

PROJECT = Path(__file__).resolve().parents[1]
MODELS = registered(PROJECT / "pyproject.toml")


class _Models:
    case = "try"
    device = ""
    param_names = ["model"]
    params = [list(MODELS)]

    def setup(self, name):
        os.environ.setdefault(PROJECT_ENV, str(PROJECT))  # the models' relative paths are the project's
        self.record = measure(self.case, FALLBACK_RESULTS, device=self.device, **MODELS[name])


if MODELS:
    class Models(_Models, _OnDevice):
        device = "cuda"

    class ModelsCpu(_Models, _OnHost):
        device = "cpu"
