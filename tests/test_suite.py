"""The asv wiring: the suite is discovered as declared, asv check is clean, and the run hands
asv what it needs."""
import contextlib
import io
import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from harness.drive.asv import suite
from harness.drive.asv.bench import RUN_ENV
from harness.measure.instruments.machine import host_key
from harness.measure.records.store import RecordStore, RunContext, StoreError
from harness.cases.ceilings import CONTEXT_PROBES, GPU_PROBES, HOST_PROBES, MULTI_GPU_PROBES
from harness.measure.guards.safety import OPT_IN_ENV

from conftest import set_run

REPO = Path(__file__).resolve().parents[1]
ALLOCATORS = ["device_pool", "managed_pool", "async_pool"]
PATTERNS = ["stream", "reduce", "matmul", "gather"]
FROM_HOST = ["fault", "prefetch", "host_mapped", "read_mostly"]
GPU_POOLS = ["device_pool", "managed_pool"]
WAYS = ["device_pool", "managed_pool", "out_of_core", "zero_copy"]
TECHNIQUES = ["fp32", "tf32", "fp16_autocast", "bf16_autocast", "bf16_params", "checkpoint", "pad_longest", "seq_cap",
              "cpu_embedding", "tied_embeddings", "channels_last", "save_on_cpu", "cpu_offload", "drop_references",
              "keep_references", "adamw8bit", "adam_bf16_state", "adafactor", "sgd_momentum", "lora", "qlora",
              "attn_eager", "attn_flash", "attn_mem_efficient", "compile", "compile_max_autotune", "chunked_loss"]
SEED_003 = ["resnet50_1024", "resnet50_2048"]
EMULATED = ["p100-16gb", "16GB", "24GB", "40GB", "80GB"]
# benchmark class -> (parameter names, parameter values, what it tracks beside seconds)
CLASSES = {
    "ceilings.Host": (["probe"], [HOST_PROBES], "host"),
    "ceilings.Device": (["probe"], [GPU_PROBES], "device"),
    "ceilings.Peer": (["probe"], [MULTI_GPU_PROBES], "device"),
    "ceilings.Context": (["probe"], [CONTEXT_PROBES], "device"),
    "unified.Allocators": (["allocator", "pattern", "fraction"], [ALLOCATORS, PATTERNS, [0.1, 0.4, 0.8, 1.5]],
                           "device"),
    "unified.Placements": (["placement", "pattern", "fraction"], [FROM_HOST, PATTERNS, [0.02, 0.1, 1.5]], "device"),
    "unified.OutOfCore": (["pattern", "fraction"], [["stream", "reduce"], [0.02, 0.1, 1.5]], "device"),
    "unified.Seed": (["fraction"], [[0.4, 0.8, 1.5]], "device"),
    "unified.Beyond": (["way", "pattern", "budget", "times"],
                       [WAYS, PATTERNS, ["16GB", "24GB", "40GB"], [1.5, 3.0]], "device"),
    "unified.Seed000": (["way", "budget"], [WAYS, ["p100-16gb", "16GB", "card"]], "device"),
    "chainer_pool.GcnCpu": (["nodes"], [[2**14]], "host"),
    "chainer_pool.Gcn": (["pool", "nodes"], [GPU_POOLS, [2**14, 2**16, 2**18, 2**20, 2**21]], "device"),
    "chainer_pool.TorchGcnCpu": (["nodes"], [[2**14]], "host"),
    "chainer_pool.TorchGcn": (["nodes"], [[2**14, 2**16, 2**18, 2**20, 2**21]], "device"),
    "chainer_pool.MlpCpu": (["batch"], [[256]], "host"),
    "chainer_pool.Mlp": (["pool", "batch"], [GPU_POOLS, [256, 4096, 65536, 262144]], "device"),
    "chainer_pool.MlpBeyond": (["pool"], [GPU_POOLS], "device"),
    "chainer_pool.CnnCpu": (["batch"], [[128]], "host"),
    "chainer_pool.Cnn": (["pool", "batch"], [GPU_POOLS, [128, 1024, 4096, 8192]], "device"),
    "parallel.ResnetSingle": (["image_size"], [[224, 1024, 2048]], "device"),
    "parallel.ResnetDataParallel": (["strategy", "gpus", "image_size"],
                                    [["dp", "ddp", "fsdp"], [1, 2, 4, 8], [1024, 2048]], "device"),
    "parallel.ResnetScalingSingle": ([], [], "device"),
    "parallel.ResnetScaling": (["strategy", "gpus"], [["dp", "ddp", "fsdp"], [1, 2, 4, 8]], "device"),
    "parallel.ResnetModelParallel": (["gpus", "image_size", "cut"], [[2, 4, 8], [1024, 2048], ["balanced", "seed003"]],
                                     "device"),
    "parallel.ResnetPipeline": (["gpus", "micro_batches", "image_size", "cut"],
                                [[2, 4, 8], [2, 5, 10], [1024, 2048], ["balanced", "seed003"]], "device"),
    "parallel.ResnetTwoNodes": (["image_size", "transport"], [[1024, 2048], ["fast", "sockets"]], "device"),
    "parallel.LmSingle": ([], [], "device"),
    "parallel.LmDataParallel": (["strategy", "gpus"], [["dp", "ddp", "fsdp"], [1, 2, 4, 8]], "device"),
    "parallel.LmModelParallel": (["gpus"], [[2, 4, 8]], "device"),
    "parallel.LmPipeline": (["gpus", "micro_batches"], [[2, 4, 8], [2, 4, 8]], "device"),
    "parallel.LmTwoNodes": (["transport"], [["fast", "sockets"]], "device"),
    "parallel.LmCpuSingle": ([], [], "host"),
    "parallel.LmCpu": (["strategy"], [["ddp", "naive_mp", "fsdp"]], "host"),
    "parallel.LmCpuPipeline": (["micro_batches"], [[2, 4]], "host"),
    "tricks.TricksCpu": (["technique"], [TECHNIQUES], "host"),
    "tricks.Techniques": (["workload", "technique"], [["lm", "encdec"], TECHNIQUES], "device"),
    "tricks.Accumulation": (["technique", "micro_batch"], [["fp32", "bf16_autocast"], [1, 2, 4, 8, 16, 32, 64]],
                            "device"),
    "tricks.Vocabulary": (["technique", "vocab"], [["fp32", "tied_embeddings", "cpu_embedding", "bf16_autocast"],
                                                   [8192, 32000, 50304, 128256, 256000]], "device"),
    "tricks.LongSequence": (["technique", "width", "seq_len"], [["fp32", "bf16_autocast", "checkpoint"], [1024, 2048],
                                                                [2048, 4096, 8192, 16384, 32768]], "device"),
    "tricks.SequenceCap": (["technique", "seq_len"], [["pad_longest", "seq_cap"], [512, 1024, 2048]], "device"),
    "tricks.ResnetSeed": (["workload", "technique"], [["resnet50_1024", "resnet50_2048"],
                                                      ["fp32", "tf32", "fp16_autocast", "bf16_autocast", "bf16_params",
                                                       "checkpoint"]], "device"),
    "tricks.Seed003Budget": (["workload", "technique", "budget"],
                             [SEED_003, ["fp32", "fp16_autocast", "bf16_autocast", "bf16_params", "checkpoint",
                                         "channels_last", "save_on_cpu", "cpu_offload"], EMULATED], "device"),
    "tricks.Seed003Accumulation": (["workload", "micro_batch", "budget"], [SEED_003, [5, 2, 1], EMULATED], "device"),
    "tricks.Seed003Combined": (["workload", "technique", "micro_batch", "budget"],
                               [SEED_003, ["tf32", "bf16_autocast", "fp16_autocast", "tf32+checkpoint",
                                           "bf16_autocast+checkpoint", "fp16_autocast+checkpoint",
                                           "bf16_autocast+save_on_cpu", "bf16_autocast+cpu_offload"],
                                [10, 5, 2], ["16GB"]], "device"),
    # the newer knobs on the leading combination, and the attention kernels at 4096 tokens
    "tricks.NewerCombined": (["technique"], [["bf16_autocast+checkpoint", *(f"bf16_autocast+checkpoint+{t}" for t in (
        "adamw8bit", "adam_bf16_state", "adafactor", "sgd_momentum", "lora", "qlora", "attn_eager", "attn_flash",
        "attn_mem_efficient", "compile", "compile_max_autotune", "chunked_loss"))]], "device"),
    "tricks.AttentionLong": (["technique"], [["fp32", "bf16_autocast", "attn_eager", "attn_flash", "attn_mem_efficient",
                                              "bf16_autocast+attn_eager", "bf16_autocast+attn_flash",
                                              "bf16_autocast+attn_mem_efficient"]], "device"),
    "ceilings.Pageable": (["direction", "size_mib"], [["h2d", "d2h"], [64, 128, 256, 512, 1024, 2048]], "device"),
    # the models pyproject.toml names ([tool.oombench.models]): the Llama-style 1B decoder, on the GPU only
    "models.Models": (["model"], [["llama-1b"]], "device"),
}
EXPECTED = {}
for cls, (names, values, where) in CLASSES.items():
    EXPECTED[f"{cls}.track_seconds_per_step"] = ("seconds", names, values)
    EXPECTED[f"{cls}.track_peak_{where}_bytes"] = ("bytes", names, values)
# What fits tracks only the budget per fitting sample: its one timed step is the search, not training.
FITS = (["technique", "budget"], [["fp32", "bf16_autocast", "checkpoint"], ["16GB", "24GB", "40GB", "80GB", "card"]])
FITS_BATCH = (FITS[0], [FITS[1][0] + ["save_on_cpu", "cpu_offload", "drop_references", "keep_references"], FITS[1][1]])
EXPECTED["tricks.WhatFits.track_budget_bytes_per_sample"] = ("bytes", *FITS_BATCH)
EXPECTED["tricks.WhatFitsSequence.track_budget_bytes_per_token"] = ("bytes", *FITS)
EXPECTED["tricks.WhatFitsCombined.track_budget_bytes_per_sample"] = (
    "bytes", FITS[0], [["bf16_autocast+checkpoint", "bf16_params+checkpoint", "bf16_autocast+checkpoint+cpu_offload"],
                       FITS[1][1]])
EXPECTED["tricks.WhatFitsNewer.track_budget_bytes_per_sample"] = (
    "bytes", FITS[0], [["bf16_autocast+checkpoint+sgd_momentum", "bf16_autocast+checkpoint+attn_flash",
                        "bf16_autocast+checkpoint+chunked_loss"], ["24GB"]])
# The allocator settings: the step and the bytes the allocator held (its reserve), the figure
# fragmentation moves; the CuPy pools likewise; what fits under 24 GB per setting.
SETTINGS = ["default", "expandable", "async", "gc0.6", "split512"]
FRAGMENTATION = {
    "fragmentation.LmShapes": (["shapes", "allocator"], [["uniform128-4096", "pow2_128-4096", "fixed1024"], SETTINGS]),
    "fragmentation.LmEverydayLoop": (["shapes", "allocator"], [["uniform128-4096", "pow2_128-4096"], SETTINGS]),
    "fragmentation.LmDrawOrder": (["draws", "allocator"], [[1, 2], SETTINGS]),
    "fragmentation.ResnetShapes": (["shapes", "allocator"], [["uniform224-1024", "fixed1024"], SETTINGS]),
    "fragmentation.LmBudget": (["allocator", "budget"], [SETTINGS, ["24GB"]]),
    "fragmentation.ResnetBudget": (["allocator", "budget"], [SETTINGS, ["16GB"]]),
    "fragmentation.CupyPools": (["pool", "shapes"], [["device_pool", "async_pool", "limited_pool"],
                                                     ["uniform128-4096", "fixed1024"]]),
}
for cls, (names, values) in FRAGMENTATION.items():
    EXPECTED[f"{cls}.track_seconds_per_step"] = ("seconds", names, values)
    EXPECTED[f"{cls}.track_peak_reserved_bytes"] = ("bytes", names, values)
EXPECTED["fragmentation.WhatFitsAllocator.track_budget_bytes_per_sample"] = ("bytes", ["allocator"], [SETTINGS])
# The tools on a long history: one command's wall time; its memory is the command's, not this process's.
EXPECTED["tooling.ToolsCpu.track_seconds_per_step"] = ("seconds", ["probe"], [["gate_50k", "pages_50k"]])


def asv_env(tmp_path):
    env = suite.asv_environment(RunContext(RecordStore(tmp_path / "records"), "test-machine", "test", "0" * 40),
                                allow_oversubscription=False)
    env["HOME"] = str(tmp_path)  # asv's machine file, kept out of the user's home
    return env


@pytest.fixture(scope="module")
def discovered(tmp_path_factory):
    out = tmp_path_factory.mktemp("asv") / "benchmarks.json"
    from asv_runner.discovery import _discover  # what `asv run` calls in each environment
    _discover((str(REPO / "benchmarks"), str(out)))
    return {b["name"]: b for b in json.load(open(out))}


def test_every_expected_benchmark_is_discovered_with_its_parameters(discovered):
    assert set(discovered) == set(EXPECTED)
    for name, (unit, names, values) in EXPECTED.items():
        b = discovered[name]
        # asv treats bigger as worse: only seconds and bytes are tracked, never a rate.
        assert b["type"] == "track" and b["unit"] == unit
        assert b["param_names"] == names
        assert b["params"] == [[repr(v) for v in vs] for vs in values]


def test_asv_check_is_clean(tmp_path):
    done = subprocess.run([sys.executable, "-m", "asv", "check", "-E", f"existing:{sys.executable}"],
                          cwd=REPO, env=asv_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No problems found" in done.stdout


def conf(name: str) -> dict:
    from asv.util import load_json
    return load_json(str(REPO / name), js_comments=True)


def test_config_runs_each_case_in_its_own_process_in_the_existing_environment_outside_git():
    default = conf("asv.conf.json")
    assert default["launch_method"] == "spawn"
    assert default["environment_type"] == "existing" and "matrix" not in default  # --python=same: one environment
    assert default["results_dir"] == ".asv/results" and default["benchmark_dir"] == "benchmarks"
    ignored = subprocess.run(["git", "check-ignore", "-q", ".asv/results/x/machine.json"], cwd=REPO)
    assert ignored.returncode == 0  # a plain asv run never writes where git looks


def test_the_versions_config_differs_from_the_default_only_in_its_environments():
    default, versions = conf("asv.conf.json"), conf("asv.versions.conf.json")
    built = {"environment_type", "pythons", "matrix", "build_command", "install_command"}
    assert {k: v for k, v in versions.items() if k not in built} == {k: v for k, v in default.items() if k not in built}
    assert versions["environment_type"] == "virtualenv" and "torch" in versions["matrix"]["req"]


def test_virtualenv_runs_keep_the_matrix_versions():
    """The project goes into each virtualenv without its dependencies (asv's default reinstalls
    them at their newest release, undoing the matrix), so the matrix must name every one."""
    import re
    import tomllib
    versions = conf("asv.versions.conf.json")
    assert all("--no-deps" in c for c in versions["install_command"] + versions["build_command"])
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in deps}
    assert names <= set(versions["matrix"]["req"]), names - set(versions["matrix"]["req"])


def test_benchmarks_see_the_harness_and_keep_nvlink_multicast_off(monkeypatch):
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # even if the caller's shell says otherwise
    ctx = RunContext(RecordStore(REPO / ".asv" / "results" / "records"), "m", "r", "c" * 40)
    env = suite.asv_environment(ctx, allow_oversubscription=False)
    assert env["ASV_PYTHONPATH"].split(":")[0] == str(REPO)
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert OPT_IN_ENV not in env
    assert suite.asv_environment(ctx, allow_oversubscription=True)[OPT_IN_ENV] == "1"
    assert RunContext.from_json(env[RUN_ENV]) == ctx  # the run crosses asv's process boundary whole


def test_several_pythons_become_several_existing_environments(tmp_path):
    a = sys.executable
    assert suite.environments([a, a]) == ["-E", f"existing:{a}", "-E", f"existing:{a}"]
    assert suite.environments(None) == ["-E", f"existing:{sys.executable}"]
    with pytest.raises(SystemExit, match="--python /path/to/venv/bin/python"):
        suite.environments([str(tmp_path / "no-python")])


def test_one_run_over_two_environments_reads_back_only_its_own_record(records_dir, monkeypatch):
    """asv runs seconds and bytes in separate processes and the second reads the first's record:
    under `run --python A --python B` (one run id) B must not take A's."""
    from dataclasses import replace

    from harness.measure.records import record
    from harness.drive.asv import bench
    from harness.measure.instruments.environment import snapshot
    ctx = set_run(monkeypatch, records_dir, run_id="run-1")
    other = record.Record(case="ceilings", params={"probe": "host_copy"}, outcome="skipped", reason="other env",
                          run_id="run-1", environment=replace(snapshot(), executable="/elsewhere/python"))
    RecordStore.append(ctx.path, other)
    assert bench._earlier(ctx, "ceilings", {"probe": "host_copy"}) is None
    RecordStore.append(ctx.path, replace(other, environment=snapshot()))
    assert bench._earlier(ctx, "ceilings", {"probe": "host_copy"}) is not None


def test_benchmarks_file_records_in_this_checkout_wherever_the_harness_is_installed(monkeypatch):
    """Under a plain ``asv run`` (no run context) records go to this checkout's local results,
    never into results/ (committed) and never inside an installed harness."""
    import importlib
    monkeypatch.delenv(RUN_ENV, raising=False)
    sys.path.insert(0, str(REPO))
    try:
        common = importlib.reload(importlib.import_module("benchmarks.common"))
    finally:
        sys.path.remove(str(REPO))
    assert common.FALLBACK_RESULTS == REPO / ".asv" / "results"
    from harness.drive.asv.bench import context
    from harness.measure.instruments.devices import Devices
    assert context(Devices(reason="test"), common.FALLBACK_RESULTS).store.root == REPO / ".asv" / "results" / "records"


def benchmark_classes():
    from harness.drive.asv.catalog import classes
    for family, name, cls in classes():
        yield f"{family}.{name}", cls


def test_every_benchmark_names_each_parameter_of_its_case_once_with_allowed_values():
    """asv calls setup only on a box that runs the class: a parameter fixed and swept at once, or
    one the case does not know, would fail there, on the GPU, not here."""
    import itertools
    from harness import cases
    seen = 0
    for name, cls in benchmark_classes():
        case = cases.get(cls.case)
        if hasattr(cls, "case_params"):  # its parameters name models, each mapped to all of the case's
            for values in itertools.product(*cls.params):
                params = cls.case_params(*values)
                assert dict(case.config(params).params) == params, f"{name}: {params} is not as {case.name} declares it"
            seen += 1
            continue
        fixed, swept = set(cls.fixed), set(cls.param_names)
        assert not fixed & swept, f"{name}: {sorted(fixed & swept)} both fixed and swept"
        assert fixed | swept == set(case.params), f"{name}: differs from {case.name}'s {sorted(case.params)}"
        for values in itertools.product(*cls.params):
            params = {**cls.fixed, **dict(zip(cls.param_names, values))}
            assert dict(case.config(params).params) == params, f"{name}: {params} is not as {case.name} declares it"
        seen += 1
    assert seen >= 20


def test_a_run_resumes_only_where_its_records_are_and_at_their_commit(tmp_path):
    root, commit = tmp_path / "records", "abcdef12" + "0" * 32
    (root / "box").mkdir(parents=True)
    (root / "box" / "abcdef12-20261123T170800-28da03.jsonl").write_text("")
    (root / "box" / "99999999-20261122T100000-aaaaaa.jsonl").write_text("")
    (root / "other-box").mkdir()
    (root / "other-box" / "abcdef12-20261123T180000-bbbbbb.jsonl").write_text("")
    store = RecordStore(root)
    store.resumable("20261123T170800-28da03", "box", commit)  # its records, its commit: goes on
    with pytest.raises(StoreError, match="measured commit 99999999.*`git checkout 99999999`"):
        store.resumable("20261122T100000-aaaaaa", "box", commit)
    with pytest.raises(StoreError, match="measured on other-box, not on this machine"):
        store.resumable("20261123T180000-bbbbbb", "box", commit)
    with pytest.raises(StoreError,
                       match="no records of run nope on box in .*; runs of abcdef12 here: 20261123T170800-28da03"):
        store.resumable("nope", "box", commit)
    for bad in ("", "*", "2026*"):
        with pytest.raises(StoreError, match="--resume takes a run id"):
            store.resumable(bad, "box", commit)


class Flushes(io.StringIO):
    """stdout that keeps what was flushed: a note printed before asv starts must be flushed to
    come before asv's own output in a log."""
    def __init__(self):
        super().__init__()
        self.flushed, self._at = [], 0

    def flush(self):
        if self.tell() > self._at:
            self.flushed.append(self.getvalue()[self._at:])
            self._at = self.tell()


def test_a_resume_goes_on_with_the_cases_its_run_chose(tmp_path, capsys):
    """A stopped run's skips say `harness run --resume ID` measures the rest: without the run's own
    --bench that command went on with the default profile instead."""
    from harness.drive.asv.suite import RunRefused, Selection, resumed
    store = RecordStore(tmp_path)
    run = store.run_file("box", "abcdef12", "r1")
    run.parent.mkdir(parents=True)
    store.claim(run, asdict(Selection("tricks\\.", "standard", True, ("/venv/bin/python",))))
    own = Selection("tricks\\.", "standard", True, ("/venv/bin/python",))
    assert resumed(store, run, "r1", Selection()) == own
    assert resumed(store, run, "r1", own) == own  # the same options, given again: the same run
    for asked, flag in ((Selection(bench="ceilings"), "--bench"), (Selection(profile="full"), "--profile"),
                        (Selection(python=("/other/python",)), "--python")):
        with pytest.raises(RunRefused) as e:
            resumed(store, run, "r1", asked)
        assert str(e.value) == ("run r1 measures --bench 'tricks\\.' --quick --python /venv/bin/python, and a resume "
                                f"goes on with the same cases: leave {flag} out, or start a new run without --resume")
    store.claim(run, asdict(Selection(profile="budget")))
    with pytest.raises(RunRefused, match=r"^run r1 measures --profile budget, .* leave --quick out"):
        resumed(store, run, "r1", Selection(quick=True))
    assert capsys.readouterr().out == ""


def test_a_new_run_without_a_profile_or_bench_measures_the_standard_profile(tmp_path, monkeypatch):
    from harness.drive.asv.suite import Selection
    seen = []
    monkeypatch.setattr(suite, "_locked_run", lambda store, chosen, *rest: seen.append(chosen) or 0)
    assert suite.run(results=tmp_path) == 0 and suite.run(bench="ceilings", quick=True, results=tmp_path) == 0
    assert seen == [Selection(profile="standard"), Selection("ceilings", "standard", True)]


@pytest.mark.parametrize("state", [None, '{"pid": 1}', '{"selection": {"bench": 3}}',
                                   '{"selection": {"python": "/venv/bin/python"}}', "not json"])
def test_a_resume_of_a_run_that_does_not_say_its_cases_goes_on_with_the_command_s(tmp_path, capsys, state):
    from harness.drive.asv.suite import Selection, resumed
    store = RecordStore(tmp_path)
    run = tmp_path / "box" / "abcdef12-r1.jsonl"
    run.parent.mkdir()
    if state is not None:
        RecordStore.run_state(run).write_text(state)
    asked = Selection(bench="ceilings")
    out = Flushes()
    with contextlib.redirect_stdout(out):
        assert resumed(store, run, "r1", asked) == asked
    assert out.flushed == ["oombench: run r1 does not say which cases it measures (its state is missing "
                           "or older): going on with this command's, --bench ceilings\n"]


def test_a_selection_reads_back_as_written_and_names_its_options():
    from harness.drive.asv.suite import Selection
    assert Selection().flags() == "--profile standard"
    assert Selection(profile="budget", quick=True).flags() == "--profile budget --quick"
    assert Selection("a b", "full", False, ("/p 1", "/p2")).flags() == "--bench 'a b' --python '/p 1' --python /p2"
    assert Selection.of({"bench": "x"}) == Selection("x", None, False, ())
    assert Selection.of({"profile": "quick", "quick": True, "python": ["/p"]}) == Selection(None, "quick", True,
                                                                                            ("/p",))
    for bad in ({"bench": 1}, {"profile": ["x"]}, {"quick": "yes"}, {"python": "/p"}, {"python": [1]}):
        assert Selection.of(bad) is None, bad


def test_a_resume_refused_by_the_store_is_refused_by_the_run_with_its_message(tmp_path):
    store = RecordStore(tmp_path)
    (tmp_path / "box").mkdir()
    (tmp_path / "box" / "abcdef12-r1.jsonl").write_text("")
    assert suite.resumable(store, "r1", "box", "abcdef1299") == tmp_path / "box" / "abcdef12-r1.jsonl"
    with pytest.raises(suite.RunRefused) as e:
        suite.resumable(store, "r1", "other", "abcdef1299")
    with pytest.raises(StoreError) as direct:
        store.resumable("r1", "other", "abcdef1299")
    assert str(e.value) == str(direct.value) == "run r1 was measured on box, not on this machine (other)"


def test_an_interpreter_that_is_not_one_stops_the_run_naming_the_fix(tmp_path):
    assert suite.environments(None) == ["-E", f"existing:{sys.executable}"]
    with pytest.raises(SystemExit) as e:
        suite.environments([sys.executable, str(tmp_path / "python")])
    assert str(e.value) == (f"oombench: {tmp_path / 'python'} is not an executable python: pass the interpreter of an "
                            "environment that has the project's requirements, e.g. --python /path/to/venv/bin/python")


def test_every_benchmark_class_sets_up_on_a_box_without_a_gpu(records_dir, monkeypatch):
    """asv calls setup with each parameter set: on the CPU a GPU class must be skipped with its
    reason (NotImplementedError), never break on a name or a parameter."""
    import itertools

    from harness.drive.asv import bench
    from harness.measure.instruments.devices import Devices
    monkeypatch.setattr(bench, "discover", lambda: Devices(reason="no NVIDIA GPU visible (test)"))
    gpu_classes = [cls for _, cls in benchmark_classes() if "Cpu" not in cls.__name__ and cls.__name__ != "Host"]
    assert len(gpu_classes) > 15
    for cls in gpu_classes:  # the CPU classes measure for real: the CPU run covers them
        values = next(itertools.product(*cls.params)) if cls.params else ()
        with pytest.raises(NotImplementedError, match="GPU"):
            cls().setup(*values)


@pytest.mark.parametrize("args, says", [
    (["--deadline", "0"], "--deadline takes a positive number"), (["--deadline", "-5"], "--deadline takes"),
    (["--deadline", "nan"], "--deadline takes"), (["--deadline", "inf"], "--deadline takes"),
    (["--bench", "tricks.(Cpu"], "--bench takes a regular expression"),
    (["--resume", ""], "--resume takes one run id"), (["--resume", "*"], "--resume takes one run id"),
    (["--resume", "2026*"], "--resume takes one run id"), (["--results", "FILE"], "--results takes a folder"),
    (["--results", ""], "--results takes a folder"), (["--file", "--results", "DIR"], "give one of them"),
    (["--python", "/no/such/python"], "is not an executable python")])
def test_bad_run_arguments_are_refused_before_anything_runs(args, says, tmp_path, monkeypatch, capsys):
    """`--deadline 0`, `-5` and `nan` were accepted, `--resume ''` started afresh, and a bad --bench
    regex rewrote machine.json before asv's traceback."""
    from harness.drive.commands import bootstrap, cli
    (tmp_path / "FILE").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bootstrap, "ensure", lambda command: pytest.fail("set-up ran for refused arguments"))
    monkeypatch.setattr(suite, "run", lambda **kw: pytest.fail("the run started"))
    assert cli.main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err


def test_a_bad_bench_regex_is_refused_before_machine_json_is_touched(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "register_with_asv", lambda info: pytest.fail("machine.json rewritten"))
    with pytest.raises(suite.RunRefused, match="regular expression"):
        suite.run(bench="(", results=tmp_path)


def test_the_run_context_names_the_harness_so_benchmarks_can_watch_it(monkeypatch):
    from harness.drive.asv import bench
    ctx = RunContext(RecordStore(Path("/r")), "m", "r", "c", parent_pid=4242)
    assert RunContext.from_json(ctx.to_json()).parent_pid == 4242
    watched = []
    monkeypatch.setattr(bench, "watch", watched.append)
    monkeypatch.setattr(bench, "die_with_parent", lambda: None)
    bench._watch_harness(ctx)
    bench._watch_harness(RunContext(RecordStore(Path("/r")), "m"))  # a plain asv run: nothing to watch
    assert watched == [4242]


def test_a_chosen_subset_brings_the_device_ceilings_along_on_a_gpu_host_that_has_none(tmp_path, capsys):
    """Rates are read against their own host's ceilings: a --bench run on a new GPU host measures
    them too, once; the profile's own runs, a subset that names them and a host without GPUs
    need nothing added."""
    from dataclasses import replace
    from test_efficiency import ceiling, planted, record
    known = ceiling("h2d_pinned", 50.0, uuid="GPU-known")
    host_only = record("ceilings", {"probe": "host_copy"}, {"bytes": 10**9}, 0.1, uuid="GPU-host-only")
    store = RecordStore.of_results(planted(tmp_path, [known, host_only]))
    new_host = ceiling("h2d_pinned", 50.0, uuid="GPU-new").environment
    out = Flushes()
    with contextlib.redirect_stdout(out):
        assert suite.with_ceilings(store, new_host, r"^tricks\.") == [r"^tricks\.", suite.CEILINGS_BENCH]
    assert out.flushed == [f"oombench: this host ({host_key(new_host)}) has no device ceilings on file: they join the "
                           "run, so that its rates are read against its own\n"]
    assert suite.with_ceilings(store, host_only.environment, "x") == ["x", suite.CEILINGS_BENCH]
    assert suite.with_ceilings(store, known.environment, r"^tricks\.") == [r"^tricks\."]
    assert suite.with_ceilings(store, new_host, r"ceilings\.Device") == [r"ceilings\.Device"]
    assert suite.with_ceilings(store, new_host, None) == []
    no_gpu = replace(new_host, devices=replace(new_host.devices, gpus=[]))
    assert suite.with_ceilings(store, no_gpu, r"ceilings\.Host") == [r"ceilings\.Host"]
    named = replace(no_gpu, host={"id": "host-without-gpus"})  # a host known by name, yet no GPU: no ceilings
    assert suite.with_ceilings(store, named, r"^tricks\.") == [r"^tricks\."]
    assert re.search(suite.CEILINGS_BENCH, suite.CEILING_PROBE_NAME)
