"""Short machine and environment labels on asv's own site.

asv builds every label on its site from the ``params`` of the result files: the selectors list
their values, a graph's legend joins those that differ between the lines it draws, and each
graph's file is named by them (``asv.graph.Graph.get_file_path``, which asv.js's
``graph_to_path`` repeats to find it). Left as ``harness run`` writes them, a legend read
"gpu-no GPU (no NVIDIA GPU visible (NVML: ...))" or "python-/opt/torch/.venv/bin/python3".

So the labels are changed where asv reads them, not in what it wrote: ``labelled_copy`` copies
the asv side of a results folder with short params, and asv publishes from the copy, deriving
paths, selectors, legends, regressions and summaries from the same values. Rewriting the finished
site instead would mean renaming graph files to match the paths asv's JavaScript computes, in
every file that names them: a copy of asv's internals to keep in step with each release. The
results folder is only read: its result files and machine.json keep the full description, and
so does the copy's machine.json, which the site shows as each machine's tooltip.

A result of asv's ``existing`` environment (how ``harness run`` runs) names only its
interpreter's path. Its copy names what the interpreter held instead, as asv's own matrix
environments do: ``python`` its version and one param per library the pages compare
(``model.VERSION_LIBS``), read from the records that run wrote. asv's legend shows only the
params that differ between its lines, so two interpreters on one box are labelled by the library
versions that tell them apart ("cupy-cuda13x-13.6.0" against "cupy-cuda13x-14.2.0").
"""
from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

from harness.measure.instruments.environment import Environment
from harness.measure.instruments.machine import gpu_label, machine_name
from harness.measure.records.store import RecordStore
from harness.report.model import VERSION_LIBS

Environments = dict[tuple[str, str], list[tuple[float, Environment]]]


def record_environments(results: Path) -> Environments:
    """(machine, commit) -> (created, environment) of each record of that box at that commit."""
    out: Environments = defaultdict(list)
    for rec in RecordStore.of_results(results).load().records:
        env = rec.environment
        out[(machine_name(env.devices, env.cpu), rec.commit or "")].append((rec.created, env))
    return out


def environment_of(envs: Environments, machine: str, commit: str, python: str) -> Environment | None:
    """The environment behind one asv result: its latest record from that interpreter (asv keeps
    the latest result of a commit), else from an unnamed one (records from before the
    interpreter was kept held one per run), else that interpreter's latest at another commit;
    None where no record says."""
    found = envs.get((machine, commit), [])
    for wanted in (python, ""):
        same = [(created, env) for created, env in found if (env.executable or "") == wanted]
        if same:
            return max(same, key=lambda pair: pair[0])[1]
    # A result whose records did not come back with it: the interpreter as that box last recorded
    # it at any commit, so its line keeps the label of its neighbours instead of a path.
    other = [(created, env) for (m, _), pairs in envs.items() if m == machine for created, env in pairs
             if python and env.executable == python]
    return max(other, key=lambda pair: pair[0])[1] if other else None


def interpreter_name(path: str) -> str:
    """An interpreter's path cut to its last four parts ("torch/.venv/bin/python3"), at most 40
    characters: the label where no record names its libraries."""
    name = str(Path(*Path(path).parts[-4:]))
    return name if len(name) <= 40 else "..." + name[-37:]


def stack(env: Environment | None, python: str, level: int) -> dict[str, str]:
    """An existing environment's params at a level of detail: 0, python version and the libraries
    the pages compare; 1, every library recorded; 2, also the interpreter's short name; 3, its
    whole path. A level up is taken only where two interpreters would share a label."""
    if env is None:
        return {"python": interpreter_name(python) if level < 3 else python}
    libs = env.libraries if level >= 1 else {k: v for k, v in env.libraries.items() if k in VERSION_LIBS}
    where = {2: {"interpreter": interpreter_name(python)}, 3: {"interpreter": python}}.get(level, {})
    return {"python": env.python, **libs, **where}


def short_params(result: dict, envs: Environments, level: int) -> dict:
    """One result's params for the site: its machine, the GPU label, its environment. The other
    machine fields (os, cpu, ram, driver, ...) are fixed by the machine's name (machine.py) and
    shown in its tooltip; as params they only lengthened the legends."""
    params = result["params"]
    out = {"machine": params["machine"]}
    if "gpu" in params:
        out["gpu"] = gpu_label(params)
    python = params.get("python") or ""  # pragma: no mutate (any stand-in that is no absolute path reads the same)
    if os.path.isabs(python) and not result.get("requirements"):
        env = environment_of(envs, params["machine"], result.get("commit_hash", ""), python)
        return out | stack(env, python, level)
    # asv's own matrix environments already say python version and requirements in short.
    return out | {k: v for k, v in params.items() if k == "python" or k in (result.get("requirements") or {})}


def machine_params(results: list[dict], envs: Environments) -> list[dict]:
    """Short params for one machine's results, at the first level at which no two interpreters
    of one commit share them (asv would draw them as one line, a commit's points overwritten)."""
    for level in range(4):
        params = [short_params(r, envs, level) for r in results]
        by_commit = defaultdict(set)
        for r, p in zip(results, params):
            by_commit[r.get("commit_hash")].add((r.get("env_name"), json.dumps(p, sort_keys=True)))
        if all(len({env for env, _ in pairs}) == len({p for _, p in pairs}) for pairs in by_commit.values()):
            break
    return params


def read_result(path: Path) -> dict | None:
    """A result file as JSON, or None where it is not one with params (copied as it is: asv then
    says what is wrong with it, as it would have)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("params"), dict) else None


def copy_machine(folder: Path, dest: Path, envs: Environments) -> None:
    """One machine's folder: each result file with short params, anything else (machine.json, a
    file that is no result) as it is."""
    dest.mkdir(parents=True)
    paths = sorted(folder.glob("*.json"))
    read = {p: read_result(p) for p in paths}
    good = [p for p in paths if read[p] is not None and "machine" in read[p]["params"]]
    for path, params in zip(good, machine_params([read[p] for p in good], envs)):
        (dest / path.name).write_text(json.dumps(read[path] | {"params": params}))
    for path in set(paths) - set(good):
        shutil.copy2(path, dest)


def labelled_copy(results: Path, dest: Path) -> Path:
    """The asv side of ``results`` (benchmarks.json and each machine's folder) copied into
    ``dest`` with short params; returns ``dest``. Records, logs and other files stay behind."""
    results = Path(results)
    envs = record_environments(results)
    dest.mkdir(parents=True, exist_ok=True)
    if (results / "benchmarks.json").exists():
        shutil.copy2(results / "benchmarks.json", dest)
    for machine_json in sorted(results.glob("*/machine.json")):
        copy_machine(machine_json.parent, dest / machine_json.parent.name, envs)
    return dest
