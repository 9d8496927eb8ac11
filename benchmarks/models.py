"""The models a project tracks, as named in its pyproject.toml (``[tool.oombench.models]``: NAME =
"path/to/file.py:factory", or a table with target, batch, seq_len, technique, device), each trained
by the ``try`` case: asv runs, compares and publishes them as any other benchmark, and ``harness
gate`` holds them across commits. ``Models`` on the GPU, ``ModelsCpu`` on a box without one (a
model whose entry names one device is tracked on it only); no class where no model is named."""
import os
from pathlib import Path

from harness.cases.try_model import registered
from harness.workloads.training.user_model import PROJECT_ENV

from benchmarks.common import FALLBACK_RESULTS, _OnDevice, _OnHost, measure

PROJECT = Path(__file__).resolve().parents[1]
MODELS = registered(PROJECT / "pyproject.toml")


def _on(device: str) -> dict:
    """The models tracked on ``device``, each as the case's parameters but the device."""
    return {name: {k: v for k, v in params.items() if k != "device"} for name, params in MODELS.items()
            if params.get("device", device) == device}


class _Models:
    case = "try"
    device = ""
    models = {}
    param_names = ["model"]

    @classmethod
    def case_params(cls, name) -> dict:
        """The try case's parameters of the model named ``name`` (how the suite's catalog reads the class)."""
        return {"device": cls.device, **cls.models[name]}

    def setup(self, name):
        os.environ.setdefault(PROJECT_ENV, str(PROJECT))  # the models' relative paths are the project's
        self.record = measure(self.case, FALLBACK_RESULTS, **self.case_params(name))


if _on("cuda"):
    class Models(_Models, _OnDevice):
        device, models = "cuda", _on("cuda")
        params = [list(models)]

if _on("cpu"):
    class ModelsCpu(_Models, _OnHost):
        device, models = "cpu", _on("cpu")
        params = [list(models)]
