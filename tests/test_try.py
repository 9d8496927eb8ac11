"""`harness try`: a model brought in a file, end to end on the CPU (its answer per card, its records),
the refusals before any case runs, the built-in architectures, and the same model tracked through a
plain `asv run` of a clone whose pyproject.toml names it."""
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.drive.commands import cli
from harness.measure.records.store import load_file
from harness.units import ms
from harness.workloads.training import user_model

from tests.test_asv_front import clone, git  # noqa: F401 (the module's clone of this working tree)

REPO = Path(__file__).resolve().parents[1]
MODELS = "tests/data/try_models.py"


@pytest.fixture(scope="module")
def tried(tmp_path_factory):
    """One `try` of the small model: fp32 and checkpointing on the whole card, then the P100."""
    results = tmp_path_factory.mktemp("try") / "results"
    # In this process, which has torch imported already, as the command's own entry runs it: a
    # killed try (below) is the one started as a program.
    argv = [f"{MODELS}:tiny", "--batch", "4", "--card", "p100-16gb", "--ways", "checkpoint", "--results", str(results)]
    done = subprocess.CompletedProcess(["try", *argv], *in_process(*argv))
    (path,) = results.glob("records/*/*.jsonl")
    return Tried(done, load_file(path).records, results, path)


class Tried(tuple):
    """(the finished command, its records), and the results folder and file they were filed into."""

    def __new__(cls, done, records, results, path):
        made = super().__new__(cls, (done, records))
        made.results, made.path = results, path
        return made


def test_try_prices_its_processes_first_then_answers_each_card_and_files_every_case(tried):
    done, records = tried
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0].startswith(f"oombench try {MODELS}:tiny (") and "2 ways on the whole card, then 1 cards" in lines[0]
    assert "3 processes of 7 steps" in lines[0] and "checked on the CPU at batch 1" in lines[0]
    by_way = {(r.params["technique"], r.params["budget"]): r for r in records}
    fp32, checkpoint = by_way["fp32", "card"], by_way["checkpoint", "card"]
    # the faster of the two on this box (a loaded CPU may time either first) is tried under the card
    fastest = min((fp32, checkpoint), key=lambda r: r.timing.median_s)
    way = fastest.params["technique"]
    assert set(by_way) == {("fp32", "card"), ("checkpoint", "card"), (way, "p100-16gb")}
    assert all(r.case == "try" and r.params["batch"] == 4 and r.params["device"] == "cpu" for r in records)
    assert fp32.ok and checkpoint.ok and fp32.check["reference"] == "itself"
    # checkpointing recomputes the same sums: held to fp32's own record's curve, and on it
    assert checkpoint.check["reference_first_run"] == "this run's fp32 record"
    assert checkpoint.check["reference_losses"] == fp32.check["losses"] and checkpoint.check["deviation"] < 1e-5
    # which the CPU cannot emulate: skipped, with the reason
    assert by_way[(way, "p100-16gb")].outcome == "skipped"
    (answer,) = [line for line in lines if line.startswith("p100-16gb: ")]
    step = ms(fastest.timing.median_s)
    assert answer == (f"p100-16gb: not emulated on this cpu (budget p100-16gb emulates a smaller card in torch's "
                      f"CUDA allocator, and nothing caps memory on the CPU); fastest here {way}, batch 4, "
                      f"{step} a step")
    assert lines.index(answer) > max(i for i, line in enumerate(lines) if line.startswith("  "))  # after the cases
    assert lines[-1].startswith("oombench try: 3 processes in ") and lines[-1].endswith(f"records in {tried.path}")
    (row,) = [line for line in lines if line.startswith("| checkpoint ")]
    assert ms(checkpoint.timing.median_s) in row and f"{checkpoint.check['loss_last']:.4g}" in row


def in_process(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["try", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv, says", [
    ((f"{MODELS}:raises",), "the factory raised RuntimeError: no weights here: fix the factory"),
    ((f"{MODELS}:not_a_model",), "the factory's model is str, not a torch.nn.Module: return the module itself"),
    ((f"{MODELS}:wrong_targets",), "the loss cannot take the model's outputs for inputs 1x16 and targets 1x19"),
    ((f"{MODELS}:nan_loss",), "the loss of a batch of 1 is nan before any training: fix the model or its loss"),
    ((f"{MODELS}:absent",), f"{MODELS} defines no function 'absent': name a factory it defines"),
    (("tests/data/nowhere.py:tiny",), "no file tests/data/nowhere.py: give the path of a Python file"),
    (("no_such_package.models:tiny",), "importing no_such_package.models raised ModuleNotFoundError"),
    (("llama-7b",), "a target is a built-in name (llama-1b, llama-3b, gpt2-medium, bert-large, vit-l16)"),
    ((f"{MODELS}:wrong_targets", "--seq-len", "64"), "--seq-len does not apply: its factory takes no seq_len"),
    ((f"{MODELS}:tiny", "--card", "t4-16gb"), "--card t4-16gb is no card the suite emulates: pass some of p100-16gb"),
    ((f"{MODELS}:tiny", "--ways", "seq_cap"), "seq_cap sets the data knob, which the suite applies to its own"),
    ((f"{MODELS}:tiny", "--ways", "bf16_params+fp16_autocast"), "sets the precision twice"),
    ((f"{MODELS}:tiny", "--batch", "0"), "--batch takes a whole number from 1, got 0"),
])
def test_a_target_that_cannot_train_is_refused_in_one_line_before_any_case_runs(argv, says, tmp_path):
    results = tmp_path / "results"
    code, out, err = in_process(*argv, "--results", str(results))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("oombench try: ") and says in err, err
    assert not list(results.glob("records/**/*.jsonl"))  # nothing ran, nothing filed


def test_the_blocks_found_are_the_largest_list_of_like_modules():
    import torch
    from tests.data.try_models import Tiny
    model = Tiny()
    blocks = user_model.found_blocks(model)
    assert blocks == list(model.layers)  # not the Sequential inside each block, smaller
    mixed = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    assert user_model.found_blocks(mixed) == []  # unlike children are no blocks


def test_default_ways_are_fp32_first_each_saving_precision_with_checkpointing_and_the_leanest_offloaded():
    from harness.workloads.training import ways
    gpu, cpu = user_model.default_ways("cuda"), user_model.default_ways("cpu")
    assert gpu[0] == cpu[0] == "fp32"
    assert {"bf16_autocast+checkpoint", "bf16_params+checkpoint", "bf16_params+checkpoint+cpu_offload"} <= set(gpu)
    assert gpu[-1] == "checkpoint+cpu_offload"  # the last resort of a card that runs no bf16
    assert not {"tf32", "fp16_autocast", "save_on_cpu"} & set(gpu)  # they save nothing another way does not
    assert not any(ways.parse(w).precision in ways.HALF for w in cpu) and "checkpoint" in cpu
    every = user_model.every_way("cuda")
    assert set(gpu) <= set(every) and all(user_model.refused_knobs(ways.parse(w)) is None for w in every)


def test_registered_models_read_from_a_pyproject_with_their_defaults_and_refuse_a_bad_entry(tmp_path):
    from harness.cases.try_model import registered
    project = tmp_path / "pyproject.toml"
    project.write_text('[tool.oombench.models]\nsmall = "m.py:tiny"\nlong = {target = "m.py:tiny", batch = 8, '
                       'seq_len = 512, technique = "checkpoint"}\n')
    assert registered(project) == {
        "small": {"target": "m.py:tiny", "technique": "fp32", "budget": "card", "batch": 1, "seq_len": 0},
        "long": {"target": "m.py:tiny", "technique": "checkpoint", "budget": "card", "batch": 8, "seq_len": 512}}
    project.write_text('[tool.oombench.models]\nbad = {target = "m.py:tiny", batch = 0}\n')
    with pytest.raises(ValueError, match=r"\[tool.oombench.models\] bad: .*batch"):
        registered(project)
    assert registered(tmp_path / "absent.toml") == {}


def test_a_built_in_architecture_is_built_without_weights_and_checked_on_the_meta_device():
    pytest.importorskip("transformers", reason="the models extra is absent: pip install 'oombench[models]'")
    seen = user_model.preflight("vit-l16", 2)
    # ViT-L/16: 24 blocks; 304 M parameters with its 1000-class head
    assert seen == {"parameters": 304_326_632, "blocks": 24, "batch": 2, "checked": "on the meta device", "refused": {}}


def test_a_model_named_in_pyproject_runs_through_plain_asv_run(clone, tmp_path):  # noqa: F811
    project = clone / "pyproject.toml"
    head = "[tool.oombench.models]\n"
    project.write_text(project.read_text().replace(head, f'{head}tiny = {{target = "{MODELS}:tiny", batch = 2}}\n'))
    git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "a model to track")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OOMBENCH_", "ASV")) and k != "PYTHONPATH"}
    env["HOME"] = str(tmp_path)
    asv = [sys.executable, "-m", "asv"]
    subprocess.run([*asv, "machine", "--yes"], cwd=clone, env=env, check=True, capture_output=True, timeout=120)
    done = subprocess.run([*asv, "run", "--python=same", "--quick", "--set-commit-hash", "HEAD", "--bench",
                           r"models\.ModelsCpu"], cwd=clone, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "1 benchmarks" not in done.stderr, done.stdout + done.stderr
    (path,) = (clone / ".asv" / "results").glob("records/*/*.jsonl")
    (record,) = load_file(path).records
    assert record.case == "try" and record.ok and record.params == {
        "device": "cpu", "target": f"{MODELS}:tiny", "technique": "fp32", "budget": "card", "batch": 2, "seq_len": 0}
    result = next(p for p in (clone / ".asv" / "results").glob("*/*.json") if p.name != "machine.json")
    assert "models.ModelsCpu.track_seconds_per_step" in json.loads(result.read_text())["results"]


def test_the_models_page_has_a_section_only_once_try_records_exist(tried):
    from harness.report import docs
    from harness.report.model import load_rows
    from harness.report.specs import FAMILIES
    (family,) = [f for f in FAMILIES if f.name == "models"]
    done, records = tried
    page = docs.family_doc(family, load_rows(tried.results))
    assert "## Each model's ways on the whole card, and the answer under each card" in page
    card = {r.params["technique"]: r for r in records if r.params["budget"] == "card"}
    way = min(card.values(), key=lambda r: r.timing.median_s).params["technique"]  # the one tried under the card
    (row,) = [line for line in page.splitlines() if line.startswith(f"| {MODELS}:tiny, 4, 0, {way} ")]
    assert ms(card[way].timing.median_s) in row and "skipped" in row  # the named card's column: not emulated
    assert "## Each model's ways" not in docs.family_doc(family, [])  # no records, no section


class Fake:
    """A record as `try` reads one: outcome, parameters, allocator peak and median step."""

    def __init__(self, technique, budget, batch, outcome, peak=None, step=None, levels=None, limit=None):
        from types import SimpleNamespace
        self.params = {"technique": technique, "budget": budget, "batch": batch}
        self.outcome, self.ok, self.reason = outcome, outcome == "ok", f"{outcome} here"
        self.memory = {} if peak is None else {"allocator.torch.max_allocated.cuda:0": peak, **(levels or {})}
        self.timing = None if step is None else SimpleNamespace(median_s=step)
        self.check, self.budget = {}, dict(limit or {})


def answered(batch: int, on_card, ways: dict, card: str = "l4-24gb") -> tuple[str, list]:
    """``Try.answer`` for ``card``, each case it runs under the card answered by ``on_card(technique, batch)``."""
    from types import SimpleNamespace

    from harness.drive.commands.tryout import Try
    t = object.__new__(Try)
    t.args, t.device = SimpleNamespace(target="m.py:f", batch=batch, seq_len=0), "cuda"
    ran = []

    def case(ctx, params):
        ran.append((params["technique"], params["batch"]))
        return Fake(params["technique"], params["budget"], params["batch"], *on_card(params["technique"],
                                                                                     params["batch"]))
    t.case, t.params = case, lambda w, budget="card", b=None: {"technique": w, "budget": budget,
                                                                "batch": batch if b is None else b}
    return t.answer(None, card, ways), ran


def test_a_card_gets_the_fastest_way_whose_peak_fits_it_and_what_fp32_would_need():
    ways = {"fp32": Fake("fp32", "card", 16, "ok", 31e9, 0.100), "bf16_autocast": Fake("bf16_autocast", "card", 16,
                                                                                        "ok", 25e9, 0.050),
            "bf16_autocast+checkpoint": Fake("bf16_autocast+checkpoint", "card", 16, "ok", 14e9, 0.070)}
    answer, ran = answered(16, lambda w, n: ("ok", 14.2e9, 0.212), ways)
    # bf16_autocast is faster but peaks over the card's 24.2 GB: never run under it
    assert ran == [("bf16_autocast+checkpoint", 16)]
    assert answer == ("l4-24gb: bf16_autocast+checkpoint, batch 16, 212.0 ms a step, 14.2 GB of 24.2 GB; "
                      "fp32 peaks at 31.0 GB at batch 16, over the card's 24.2 GB")


def test_where_no_way_fits_the_batch_the_leanest_way_s_largest_batch_is_searched_and_else_refused():
    ways = {"fp32": Fake("fp32", "card", 8, "ok", 60e9, 0.1), "checkpoint": Fake("checkpoint", "card", 8, "ok", 30e9,
                                                                                   0.2)}
    fits_up_to_3 = lambda w, n: ("ok", n * 7e9, 0.03 * n) if n <= 3 else ("does_not_fit",)
    answer, ran = answered(8, fits_up_to_3, ways)
    assert answer == "l4-24gb: no way fits batch 8; checkpoint, batch 3, 90.0 ms a step, 21.0 GB of 24.2 GB (the " \
                     "largest batch checkpoint fits; predicted 3 from batches 1 and 2)"
    # batches 1 and 2 first, then the prediction and the two after it: the rule's proof, no probe more
    assert ran == [("checkpoint", 1), ("checkpoint", 2), ("checkpoint", 3), ("checkpoint", 4), ("checkpoint", 5)]
    over = {"fp32": Fake("fp32", "card", 1, "ok", 40e9, 0.1),
            "checkpoint": Fake("checkpoint", "card", 1, "ok", 26e9, 1)}
    answer, _ = answered(1, lambda w, n: ("does_not_fit",), over)
    assert answer == ("l4-24gb: does not fit at batch 1 under any way on a 24.2 GB card: smallest peak 26.0 GB "
                      "with checkpoint")


def test_where_no_way_fits_the_first_answer_is_the_predictors_said_before_the_confirming_probes(capsys):
    ways = {"fp32": Fake("fp32", "card", 64, "ok", 90e9, 0.1), "checkpoint": Fake("checkpoint", "card", 64, "ok",
                                                                                    60e9, 0.2)}
    cap, said = 20e9, []

    def under_card(w, n):  # the allocator's cap binds its reserve: 2 GB and 1.5 GB a sample, 1 GB over what it holds
        said.append((n, capsys.readouterr().out))  # what was printed before this probe ran
        reserved = 2e9 + 1.5e9 * n
        return ("ok", reserved - 1e9, 0.01 * n, reserved) if reserved <= cap else ("does_not_fit",)

    def with_reserve(w, n):
        outcome, *rest = under_card(w, n)
        if outcome != "ok":
            return (outcome,)
        allocated, step, reserved = rest
        return outcome, allocated, step, {"allocator.torch.max_reserved.cuda:0": reserved}, {"limit_bytes": cap}

    answer, ran = answered(64, with_reserve, ways)
    assert [n for _, n in ran] == [1, 2, 12, 13, 14]  # (20 - 2) / 1.5 = 12 under the cap, not the card's 24.2 GB
    assert said[2][1] == "  l4-24gb: predicted, checkpoint fits batch 12 (the law through batches 1 and 2); " \
                         "confirming\n"  # the first answer, out before the probes that confirm it
    assert answer.endswith("(the largest batch checkpoint fits; predicted 12 from batches 1 and 2)")


def test_cpu_offload_runs_by_default_only_where_a_card_has_no_way_that_fits_without_it():
    from types import SimpleNamespace

    from harness.drive.commands.tryout import Try
    from harness.workloads.training.ways import parse
    t = object.__new__(Try)
    t.args = SimpleNamespace(ways=None, card=["l4-24gb", "a100-40gb"])
    lean = {"fp32": Fake("fp32", "card", 4, "ok", 30e9, 1),
            "bf16_params": Fake("bf16_params", "card", 4, "ok", 12e9, 1)}
    offload, checkpoint = parse("bf16_params+checkpoint+cpu_offload"), parse("checkpoint")
    assert t.needless(offload, lean) and not t.needless(checkpoint, lean)
    assert not t.needless(offload, {"fp32": lean["fp32"]})  # nothing fits the P100 yet
    assert not t.needless(offload, {**lean, "bf16_params": Fake("bf16_params", "card", 4, "failed", 12e9, 1)})
    t.args.ways = offload.name  # asked for: it runs
    assert not t.needless(offload, lean)
    # a P100 fits nothing it can run, but cannot run bf16 parameters offloaded either: not run for it
    t.args.ways, t.args.card = None, ["p100-16gb"]
    assert t.needless(offload, {"fp32": lean["fp32"]}) and not t.needless(parse("checkpoint+cpu_offload"), lean)


def test_a_card_is_never_answered_with_a_way_its_compute_capability_cannot_run():
    ways = {"fp32": Fake("fp32", "card", 4, "ok", 37e9, 1.0), "bf16_params": Fake("bf16_params", "card", 4, "ok",
                                                                                   21e9, 0.15),
            "checkpoint": Fake("checkpoint", "card", 4, "ok", 19e9, 1.3),
            "bf16_params+checkpoint": Fake("bf16_params+checkpoint", "card", 4, "ok", 9.6e9, 0.19)}
    fits_up_to_2 = lambda w, n: ("ok", n * 5e9, 0.3 * n) if n <= 2 else ("does_not_fit",)
    answer, ran = answered(4, fits_up_to_2, ways, card="p100-16gb")
    # the leanest way a P100 runs (checkpointing in fp32) is searched; no bf16 way is ever run under the card
    assert all(w == "checkpoint" for w, _ in ran), ran
    assert answer.startswith("p100-16gb: no way fits batch 4; checkpoint, batch 2, ")
    assert answer.endswith(" (not offered on a Tesla P100-PCIE-16GB, of compute capability 6.0: bf16_params, "
                           "bf16_params+checkpoint need 8.0)")
    # an A100 runs them all: its answer is the fastest way that fits, with nothing said of the rest
    answer, ran = answered(4, lambda w, n: ("ok", 21e9, 0.15), ways, card="a100-40gb")
    assert ran == [("bf16_params", 4)] and "not offered" not in answer


def test_a_killed_try_keeps_the_records_filed_so_far_and_leaves_no_case_running(tmp_path):
    import signal
    import time

    import psutil
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "try", f"{MODELS}:tiny", "--card", "p100-16gb",
                             "--ways", "checkpoint", "--results", str(results)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ,
                                                                                           PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 120
        while not [line for p in results.glob("records/*/*.jsonl") for line in p.read_text().splitlines()]:
            assert proc.poll() is None and time.monotonic() < deadline, "no record was filed"
            time.sleep(0.2)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    gone, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, f"cases outlived the killed try: {alive}"
    (path,) = results.glob("records/*/*.jsonl")
    kept = load_file(path).records
    assert kept and kept[0].case == "try" and kept[0].params["technique"] == "fp32" and kept[0].ok


def test_every_way_starts_from_the_weights_the_host_draws_whatever_device_is_the_default():
    """The CPU's generator and CUDA's draw other numbers from one seed: a model built on its device
    would start the ways built on the host (cpu_offload, bf16_params) from other weights than fp32's."""
    torch = pytest.importorskip("torch")
    with torch.device("meta"):  # stands for a device whose generator is not the host's
        first = user_model.built_on_host(f"{MODELS}:tiny", 0).model
    again = user_model.built_on_host(f"{MODELS}:tiny", 0).model
    assert {p.device.type for p in first.parameters()} == {"cpu"}
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
