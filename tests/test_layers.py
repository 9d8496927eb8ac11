"""The house's layering, as pyproject.toml declares it: no module imports from a layer above its
own (benchmarks > drive > report > cases > workloads > measure > units), each family's rooms are
layered the same way, the workload families stand apart, and no case imports another case."""
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {c["name"]: c for c in CONF["contracts"]}


def _rooms(package: Path) -> set[str]:
    """The subpackages and modules directly under ``package``, by name."""
    return {p.stem for p in package.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")}


def _layered(contract) -> set[str]:
    return {name.strip() for layer in contract["layers"] for name in layer.split("|")}


def test_every_contract_is_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in done.stdout


def test_the_benchmarks_sit_on_top_of_the_harness():
    assert CONF["root_packages"] == ["harness", "benchmarks"]
    (top,) = [c for c in CONTRACTS.values() if c["type"] == "layers" and "containers" not in c]
    assert top["layers"][0] == "benchmarks"
    packages = {p.name for p in (REPO / "harness").iterdir() if (p / "__init__.py").exists()}
    assert {layer.split(".")[1] for layer in top["layers"][1:]} == packages | {"units"}


def test_no_layer_ignores_an_import():
    for contract in CONTRACTS.values():
        if contract["type"] in ("layers", "independence"):
            assert "ignore_imports" not in contract, contract["name"]


def test_each_family_places_every_room_it_holds():
    # A room added to drive, measure or workloads is placed in its family's layers, or this fails.
    families = {c["containers"][0]: c for c in CONTRACTS.values() if "containers" in c}
    for family in ("harness.drive", "harness.measure", "harness.workloads"):
        rooms = _rooms(REPO / family.replace(".", "/"))
        assert _layered(families[family]) == rooms, family
    # Report's layering names only the three that once made a loop: pages read tables, tables the rows.
    assert families["harness.report"]["layers"] == ["pages", "tables", "model"]


def test_the_workload_families_are_independent():
    (apart,) = [c for c in CONTRACTS.values() if c["type"] == "independence"]
    top = CONTRACTS["workloads: search | parallelism | chainer | synthetic | copies > training > cupy"]["layers"][0]
    assert {m.rsplit(".", 1)[1] for m in apart["modules"]} == {n.strip() for n in top.split("|")}


def test_no_case_imports_another_and_every_case_is_held_to_it():
    (contract,) = [c for c in CONTRACTS.values() if c["type"] == "forbidden"]
    cases = {f"harness.cases.{p.stem}" for p in (REPO / "harness" / "cases").glob("*.py")} - {
        "harness.cases.__init__", "harness.cases.base"}
    assert set(contract["source_modules"]) == set(contract["forbidden_modules"]) == cases
    # Each import still allowed is named with both ends inside harness.cases (none may hide a family).
    for ignored in contract.get("ignore_imports", []):
        source, target = (side.strip() for side in ignored.split("->"))
        assert source in cases and target in cases, ignored
