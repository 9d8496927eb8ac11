"""The house's layering, as pyproject.toml declares it: no module imports from a layer above its
own (drive > report > cases > workloads > measure > units), with no import ignored."""
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_layers_contract_is_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_the_contract_ignores_no_import_and_names_every_package():
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = conf["contracts"]
    assert contract["type"] == "layers" and "ignore_imports" not in contract
    packages = {p.name for p in (REPO / "harness").iterdir() if (p / "__init__.py").exists()}
    assert {layer.split(".")[1] for layer in contract["layers"]} == packages | {"units"}
