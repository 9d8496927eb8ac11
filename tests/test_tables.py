"""`harness table`: markdown tables made from real record files, with the answers the records hold,
the newest record winning, the declared order of the parameters, and a clear message for bad input."""
import functools
import json
import pickle
import re
import shlex
from pathlib import Path

import pytest

from harness.cases import tricks as tricks_case
from harness.drive.commands import cli
from harness.report import tables
from harness.report.model import load_rows

from conftest import FROZEN, plain, render, results_with, table

REPO = Path(__file__).resolve().parents[1]
RECORDS = FROZEN / "records"
H100_FITS = RECORDS / "nvidia-h100-80gb-hbm3-x1/d570cdd1-20261123T171437-2de948.jsonl"  # fp32, every budget
H200_FITS = RECORDS / "nvidia-h200-x1/203233bf-20261123T164450-f5f3ac.jsonl"
H100_ACCUMULATION = RECORDS / "nvidia-h100-80gb-hbm3-x1/d570cdd1-20261123T172337-7ef404.jsonl"
H200_ACCUMULATION = RECORDS / "nvidia-h200-x1/e10b46f1-20261123T180632-c58770.jsonl"
H200_X2 = RECORDS / "nvidia-h200-x2/65529e88-20261122T204332-af3624.jsonl"
X2_RESNET = [RECORDS / "nvidia-h200-x2" / f for f in (  # data parallel; single, naive_mp and pipeline
    "547959eb-20261124T223655-eca108.jsonl", "547959eb-20261124T224154-16faa6.jsonl")]
# One H100 host, three stacks at one commit: the box's own (CuPy 14.2, NumPy 2.5.2) and CuPy 14.2
# with NumPy 2.0.2 measured after it.
H100_OWN_STACK = RECORDS / "nvidia-h100-80gb-hbm3-x1/04b02c05-20261124T152215-bca6a6.jsonl"
H100_NUMPY_20 = RECORDS / "nvidia-h100-80gb-hbm3-x1/04b02c05-20261124T153549-05cb47.jsonl"
# ResNet50 at 2048²: activations on the CPU past the host's share at 24/40/80GB, written before a
# record kept which memory ran short (its reason says); fp32 over 24GB on the card, from another run.
H100_SEED003_HOST = RECORDS / "nvidia-h100-80gb-hbm3-x1/80ceb4a4-20261125T013736-7458f0.jsonl"
H100_SEED003_DEVICE = RECORDS / "nvidia-h100-80gb-hbm3-x1/1a42ca54-20261125T000408-6c698a.jsonl"
# One sequence per step at widths 1024 and 2048, all trained at Adam's 1e-3 before the rate fell with width.
H100_LONG_1024 = RECORDS / "nvidia-h100-80gb-hbm3-x1/c49a7c17-20261124T191944-561a26.jsonl"
H100_LONG_2048 = RECORDS / "nvidia-h100-80gb-hbm3-x1/80ceb4a4-20261125T014609-dbc1ce.jsonl"
# ResNet50 at 2048², accumulation over micro-batches of 2 under 40GB: its loss check failed after
# its steps (BatchNorm), written before a failed record kept its timing; and one whose process died.
H200_MICRO2_FAILED = RECORDS / "nvidia-h200-x1/8001cb6b-20261125T043847-06b84a.jsonl"
H100_SEED003_DIED = RECORDS / "nvidia-h100-80gb-hbm3-x1/1a42ca54-20261125T001045-5b4edc.jsonl"
# Two H100 hosts of one session: the first measured its ceilings, then working sets past 24GB; the
# second measured its own ceilings later, beside a what-fits search.
H100_HOST_A_CEILINGS = RECORDS / "nvidia-h100-80gb-hbm3-x1/b2b2626b-20261125T063343-6bf09b.jsonl"
H100_HOST_A_BEYOND = RECORDS / "nvidia-h100-80gb-hbm3-x1/b2b2626b-20261125T064838-6ddbf7.jsonl"
H100_HOST_B_CEILINGS = RECORDS / "nvidia-h100-80gb-hbm3-x1/b2b2626b-20261125T065217-891639.jsonl"


def fits_table(root) -> list[str]:
    return render(load_rows(root), "fits", ["technique", "machine"], "budget", ["check:max_batch"])[0].splitlines()


def test_the_fits_table_holds_each_cards_answers_in_the_declared_budget_order(tmp_path):
    lines = fits_table(results_with(tmp_path, H100_FITS, H200_FITS))
    assert lines[0] == "| technique, machine | budget 16GB | budget 24GB | budget 40GB | budget 80GB | budget card |"
    # searched under the old cap (∘), which the whole card never had, and before today's rule (△)
    assert lines[2] == "| fp32, H100 80GB HBM3 | 9∘△ | 16∘△ | 27∘△ | 56∘△ | 59△ |"
    assert lines[3] == "| fp32, H200 | 9∘△ | 16∘△ | 27∘△ | 56∘△ | 106△ |"


def test_the_newest_record_of_a_case_wins_and_a_missing_one_says_not_run(tmp_path):
    root = results_with(tmp_path, H200_FITS)
    rec = json.loads(H200_FITS.read_text().splitlines()[-1])  # the card budget
    rec["created"] += 3600
    rec["check"]["max_batch"] = 105
    (root / "records" / H200_FITS.parent.name / "later.jsonl").write_text(json.dumps(rec) + "\n")
    assert fits_table(root)[2].endswith("| 56∘△ | 105△ |")
    rec["params"]["technique"] = "checkpoint"
    (root / "records" / H200_FITS.parent.name / "later.jsonl").write_text(json.dumps(rec) + "\n")
    assert fits_table(root)[3] == "| checkpoint, H200 | not run | not run | not run | not run | 105△ |"


def test_a_machine_measured_under_several_stacks_shows_its_newest_releases_not_its_latest_run(tmp_path):
    root = results_with(tmp_path, H100_OWN_STACK, H100_NUMPY_20)
    numpy_of = {}
    for f in (H100_OWN_STACK, H100_NUMPY_20):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec["case"] == "seed000" and rec["params"]["way"] == "out_of_core" and rec["outcome"] == "ok":
                numpy_of[rec["environment"]["libraries"]["numpy"]] = rec["timing"]["median_s"]
    assert set(numpy_of) == {"2.5.2", "2.0.2"} and numpy_of["2.5.2"] != numpy_of["2.0.2"]
    lines = render(load_rows(root), "seed000", ["way"], "budget", ["step"])[0].splitlines()
    row = next(line for line in lines if line.startswith("| out_of_core |"))
    assert row == f"| out_of_core | {numpy_of['2.5.2'] * 1e3:,.1f} ms |"


def test_cells_show_the_figures_asked_for_and_what_did_not_fit(tmp_path):
    root = results_with(tmp_path, H100_ACCUMULATION)
    lines = render(load_rows(root), "tricks", ["micro_batch"], "technique", ["step", "peak", "loss"],
                         {"batch": "64"})[0].splitlines()
    assert lines[0] == "| micro_batch | technique fp32 | technique bf16_autocast |"
    assert lines[2] == "| 1 | 2,277.1 ms, 4.77 / 5.63 GB, 5.556 | 1,879.8 ms, 4.79 / 5.65 GB, 5.556 |"
    assert lines[-1].startswith("| 64 | does not fit (a 8.39 GB request failed) | 268.0 ms, 57.7 / 61.2 GB")


def test_versus_gives_each_figure_as_a_multiple_of_the_base_rows(tmp_path):
    root = results_with(tmp_path, H100_ACCUMULATION)
    lines = render(load_rows(root), "tricks", ["micro_batch"], "technique", ["step", "peak"],
                         {"batch": "64"}, versus=(("micro_batch", "64"),))[0].splitlines()
    # bf16 autocast: 1,879.8 ms against 268.0 ms at 64 at once, 4.8 against 57.7 GB allocated
    # fp32 has no 64
    assert lines[2] == "| 1 | 2,277.1 ms, 4.77 / 5.63 GB | 1,879.8 ms (7.01x), 4.79 / 5.65 GB (0.08x) |"
    assert lines[-1] == "| 64 | does not fit (a 8.39 GB request failed) | 268.0 ms, 57.7 / 61.2 GB |"
    across = render(load_rows(root), "tricks", ["micro_batch"], "technique", ["step"], {"batch": "64"},
                          versus=(("technique", "fp32"),))[0].splitlines()
    assert across[2] == "| 1 | 2,277.1 ms | 1,879.8 ms (0.83x) |"


H100_SEED003 = [RECORDS / "nvidia-h100-80gb-hbm3-x1" / f for f in (
    "3b3a8a83-20261124T130742-3c9c2b.jsonl", "3b3a8a83-20261124T131709-83bdf1.jsonl")]


def test_versus_several_values_reads_each_way_out_under_a_budget_against_fp32_on_the_card(tmp_path):
    rows = load_rows(results_with(tmp_path, *H100_SEED003))
    lines = render(rows, "tricks", ["technique", "micro_batch"], "budget", ["step"],
                          {"workload": "resnet50_1024", "batch": "10"},
                          versus=(("technique", "fp32"), ("micro_batch", "10"), ("budget", "card")))[0].splitlines()
    by = {line.split(" |")[0][2:]: line for line in lines[2:]}
    fp32 = next(r for r in rows if r.record.params.get("workload") == "resnet50_1024" and r.record.ok
                and r.record.params["technique"] == "fp32" and r.record.params["budget"] == "card")
    checkpoint = next(r for r in rows if r.record.params.get("workload") == "resnet50_1024" and r.record.ok
                      and r.record.params["technique"] == "checkpoint" and r.record.params["budget"] == "16GB")
    ratio = checkpoint.record.timing.median_s / fp32.record.timing.median_s
    assert f"({ratio:.2f}x)" in by["checkpoint, 10"].split(" | ")[1]  # the 16GB column, against fp32 on the card
    assert by["fp32, 10"].split(" | ")[1].startswith("does not fit")
    assert "x)" not in by["fp32, 10"].split(" | ")[2]  # the base itself carries no ratio


def test_records_of_two_machines_are_never_folded_into_one_cell(tmp_path):
    rows = load_rows(results_with(tmp_path, H100_ACCUMULATION, H200_ACCUMULATION))
    with pytest.raises(ValueError, match="differ in machine H100 80GB HBM3 and H200: add machine to --down"):
        table(rows, "tricks", ["micro_batch"], "technique", ["step"], {"batch": "64"})
    lines = render(rows, "tricks", ["micro_batch", "machine"], "technique", ["peak"], {"batch": "64"})[0].splitlines()
    assert lines[-2:] == ["| 64, H100 80GB HBM3 | does not fit (a 8.39 GB request failed) | 57.7 / 61.2 GB |",
                          "| 64, H200 | 83.2 / 91.1 GB | 57.7 / 61.2 GB |"]
    one, _ = render(rows, "tricks", ["micro_batch"], "technique", ["peak"], {"batch": "64", "machine": "H200"})
    assert one.splitlines()[-1] == "| 64 | 83.2 / 91.1 GB | 57.7 / 61.2 GB |"


def test_a_box_of_several_gpus_is_named_with_their_count(tmp_path):
    (row,) = [r for r in load_rows(results_with(tmp_path, H200_X2))][:1]
    assert tables.machine_label(row) == "H200 x2"


def test_scaling_reads_each_strategy_against_single_on_the_same_box(tmp_path):
    rows = load_rows(results_with(tmp_path, *X2_RESNET))
    lines = render(rows, "parallel_resnet50", ["strategy", "gpus", "micro_batches"], "image_size",
                          ["scaling"], versus=(("strategy", "single"), ("gpus", "1"), ("micro_batches", "1")))[0]
    by = {line.split(" |")[0][2:]: line.split(" | ")[1:] for line in lines.splitlines()[2:]}
    step = {(r.record.params["strategy"], r.record.params["gpus"], r.record.params["micro_batches"],
             r.record.params["image_size"]): r.record.timing.median_s for r in rows}
    for strategy, gpus, micro in (("ddp", 2, 1), ("naive_mp", 2, 1), ("pipeline", 2, 5), ("dp", 1, 1)):
        want = step["single", 1, 1, 2048] / (gpus * step[strategy, gpus, micro, 2048])
        assert by[f"{strategy}, {gpus}, {micro}"][-1].startswith(f"{want:.2f} of linear")
    assert by["single, 1, 1"][-1].rstrip(" |") == "-"  # the baseline is not read against itself


@pytest.mark.parametrize("argv, message", [
    (["table", "trick", "--down", "technique"], "unknown case 'trick'; known cases: beyond, ceilings"),
    (["table", "fits", "--down", "techniq"], "fits has no parameter 'techniq': choose from device, workload"),
    (["table", "fits", "--down", "technique", "--show", "speed"],
     "unknown figure 'speed': choose from step, rate, eff, peak, scaling, loss, compile or check:KEY"),
    (["table", "fits", "--down", "technique,budget", "--show", "check:max_batchx"],
     "no record of fits here holds check key 'max_batchx': its records hold budget_bytes, budget_bytes_per_sample, "
     "card_bytes, known_fit,"),
    (["table", "fits", "--down", "technique", "--versus", "budget"], "--versus takes name=value, got 'budget'"),
    (["table", "ceilings", "--down", "probe"], "no records of ceilings match anything: run the case first"),
    (["table", "fits", "--down", "technique", "--where", "budget"], "--where takes name=value"),
    (["table", "fits", "--down", "technique", "--where", "workload=gpt"],
     "workload='gpt' is not one of: lm, encdec, resnet50"),
    (["table", "fits", "--down", "technique", "--where", "workload=encdec"],
     "no records of fits match {'workload': 'encdec'}: run the case first, or check --where against"),
    (["table", "fits", "--down", "technique", "--versus", "budget=12GB"], "budget='12GB' is not one of: 16GB"),
    (["table", "fits", "--down", "technique", "--versus", "workload=lm"], "needs workload down or across"),
    (["table", "fits", "--down", "technique", "--show", "scaling"],
     "--show scaling reads each strategy against the one-GPU run of its workload: name that run with --versus"),
])
def test_bad_input_exits_2_with_one_line_naming_the_fix(tmp_path, capsys, argv, message):
    root = results_with(tmp_path, H200_FITS)
    assert cli.main(argv + ["--results", str(root)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and message in out.err and len(out.err.strip().splitlines()) == 1


DOCS = sorted((REPO / "docs" / "results").glob("*.md")) + [REPO / "docs" / "headline.md"]
QUOTED = r"```sh\npython3 -m harness table ([^\n]+)\n```\n\n"
NOTES = r"(?:\n(?:[†§‡]|Peaks here)[^\n]*\n)*"  # the footnotes the command prints after its table


def docs_tables() -> list[tuple[str, str, str, str]]:
    """(doc, command, the table and footnotes printed under it, the doc's text) for every `harness
    table` command in docs/, and in the README's headline."""
    out = []
    for path in DOCS + [REPO / "README.md"]:
        text = path.read_text()
        out += [(path.name, args, printed, text)
                for args, printed in re.findall(QUOTED + r"((?:\|[^\n]*\n)+" + NOTES + ")", text)]
    return out


@pytest.fixture(scope="module")
def committed_results(tmp_path_factory) -> Path:
    """results/ as git holds it: what a local run writes, tracked or not, never reaches these tests."""
    from harness.report.docs import committed_results
    return committed_results(REPO, tmp_path_factory.mktemp("committed"))


@pytest.fixture(scope="module")
def committed_rows(committed_results) -> bytes:
    """The committed records as ``harness table`` loads them, pickled: the docs quote dozens of
    tables, and reading every record again for each would be most of this file's time. Each row's
    keys (pure functions of its record, computed on first use) are computed once here and travel
    in the copy the commands share, rather than again in each; a second copy is what the shared
    one is checked against once every command has read it."""
    rows = load_rows(committed_results)
    for row in rows:
        _ = row.params_key, row.environment_key
    return pickle.dumps(rows)


def test_every_table_the_docs_quote_is_what_the_command_prints_from_results(capsys, committed_results,
                                                                             committed_rows, monkeypatch):
    rows = pickle.loads(committed_rows)

    def load_once(results):
        assert Path(results) == committed_results
        return list(rows)  # a list of its own for each command; the rows are checked unchanged at the end

    monkeypatch.setattr(tables, "load_rows", load_once)
    monkeypatch.setattr(cli, "parser", functools.cache(cli.parser))  # built once, not once a command
    quoted = docs_tables()
    assert len(quoted) >= 12
    # compares.md and predict.md are pages their own readers make, quoting no `harness table`
    empty = {p.name for p in DOCS if "## Tables\n\nNo committed records yet" in p.read_text()}  # a family not yet run
    unquoting = {"parallel.md", "compares.md", "predict.md"} | empty
    assert {doc for doc, *_ in quoted} >= {p.name for p in DOCS} - unquoting | {"README.md"}
    outs = {}  # a command quoted in several docs prints one table: run it once
    for doc, args, printed, text in quoted:
        if args not in outs:
            assert cli.main(["table", *shlex.split(args), "--results", str(committed_results)]) == 0
            outs[args] = capsys.readouterr().out
        out = outs[args]
        # A doc short of lines (the README's headline) may carry the footnotes in its prose instead.
        notes = [n.strip() for n in out[len(printed):].split("\n\n") if n.strip()]
        assert out.startswith(printed) and all(n in text for n in notes), \
            (f"{doc}'s table under `harness table {args}` is stale: "
             "run `python3 -m harness docs` and commit what it changes")
    # no command changed a row the others read: each printed what the records alone give
    assert rows == pickle.loads(committed_rows)


def test_a_command_the_docs_quote_without_a_table_has_no_records_to_print(committed_results, capsys):
    for path in DOCS:
        for args in re.findall(QUOTED + "No committed record matches yet", path.read_text()):
            assert cli.main(["table", *shlex.split(args), "--results", str(committed_results)]) == 2
            assert "no records of" in capsys.readouterr().err


CPU_STANDARD = RECORDS / "cpu-amd-epyc/bfa680ee-20261124T003859-187d27.jsonl"  # GPU cases skipped there
H100_STANDARD = RECORDS / "nvidia-h100-80gb-hbm3-x1/bfa680ee-20261124T003930-ab748b.jsonl"


def test_a_box_that_skipped_every_record_of_a_table_takes_no_column_but_a_skip_beside_figures_stays(tmp_path):
    """Likewise a row every box skipped takes no line."""
    root = results_with(tmp_path, CPU_STANDARD, H100_STANDARD)
    text, notes = render(load_rows(root), "ceilings", ["probe"], "machine", ["rate"], {})
    lines = text.splitlines()
    assert lines[0] == "| probe | machine AMD EPYC | machine H100 80GB HBM3 |"  # the CPU box ran host probes
    # a row no box ran (two GPUs needed, neither had them) takes no line: a footnote names it and why
    assert not any(line.startswith("| p2p_copy") for line in lines) and len(lines) == 2 + 11
    assert notes == ["Left out, no machine ran them: p2p_copy (skipped: needs 2 GPU(s), this box has no GPU: no NVIDIA "
                     "GPU visible (NVML: NVML Shared Library Not Found); run it on a box with 2 or more)."]
    row = {line.split(" | ")[0]: line for line in lines[2:]}
    assert row["| device_copy"].split(" | ")[1] == "skipped"  # a skip on a box that measured others stays
    gpu_only = render(load_rows(root), "tricks", ["technique"], "machine", ["rate"],
                            {"device": "cuda"})[0].splitlines()
    assert gpu_only[0] == "| technique | machine H100 80GB HBM3 |"  # the CPU box skipped all of them


H100_ACCUMULATION_1024 = RECORDS / "nvidia-h100-80gb-hbm3-x1/3b3a8a83-20261124T131709-83bdf1.jsonl"
H100_ACCUMULATION_2048 = RECORDS / "nvidia-h100-80gb-hbm3-x1/3562a3a9-20261124T211613-e2b22e.jsonl"


def test_a_loss_not_held_against_the_whole_batch_is_marked_and_says_why(tmp_path):
    """Under 16GB at 2048 x 2048 no whole-batch fp32 reference fit beside the case (the check then
    had the case's own micro-batches, or nothing): its loss is marked; one held against fp32 with
    checkpointing on the whole batch is not."""
    root = results_with(tmp_path, H100_ACCUMULATION_1024, H100_ACCUMULATION_2048)
    text, notes = render(load_rows(root), "tricks", ["workload", "micro_batch"], "budget", ["loss"],
                                where={"technique": "fp32", "batch": 10})
    cells = {tuple(line.split(" | ")[0].strip("| ").split(", ")): line for line in text.splitlines()}
    assert cells[("resnet50_2048", "1")].endswith("° |") and cells[("resnet50_2048", "2")].endswith("° |")
    assert "°" not in cells[("resnet50_1024", "5")]
    assert tables.NOTES[tables.PART_CHECKED] in notes


def test_a_case_short_of_host_memory_says_so_and_one_short_of_the_cards_names_the_failed_request(tmp_path):
    root = results_with(tmp_path, H100_SEED003_HOST, H100_SEED003_DEVICE)
    def row(technique):
        lines = render(load_rows(root), "tricks", ["technique"], "budget", ["step"],
                              {"workload": "resnet50_2048", "batch": "10"})[0].splitlines()
        return next(line for line in lines if line.startswith(f"| {technique} |"))
    assert row("save_on_cpu") == "| save_on_cpu |" + " does not fit in host memory (67.1 GB asked) |" * 3
    assert row("fp32").startswith("| fp32 | does not fit (a 2.68 GB request failed) |")
    # a record that keeps the memory it ran short of is read by it, whatever its reason says
    host_file = root / "records" / H100_SEED003_HOST.parent.name / H100_SEED003_HOST.name
    recs = [json.loads(line) for line in host_file.read_text().splitlines()]
    for rec in recs:
        if rec["outcome"] == "does_not_fit":
            rec["check"] = {"short_of": "device"}
    host_file.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert "does not fit (a 67.1 GB request failed)" in row("save_on_cpu")


def test_a_loss_trained_at_another_rate_than_todays_code_gives_its_model_is_marked_and_its_step_is_not(tmp_path):
    root = results_with(tmp_path, H100_LONG_1024, H100_LONG_2048)
    def lines_of():
        return table(load_rows(root), "tricks", ["width", "seq_len"], "technique", ["step", "loss"],
                     {"workload": "lm", "batch": "1"}).splitlines()
    lines = lines_of()
    row = {tuple(line.split(" | ")[0].strip("| ").split(", ")): line for line in lines if line.startswith("| ")}
    assert "◊" not in row["1024", "2048"] and "◊" not in row["1024", "4096"]  # 1024 still trains at 1e-3
    assert row["2048", "4096"].count("◊") == 3  # fp32, bf16 and checkpoint: each loss, not each step
    assert "ms◊" not in row["2048", "4096"] and "failed (loss gap 0.16 from fp32, 0.03 allowed)◊" in row["2048", "2048"]
    assert lines[-1].startswith("◊ trained at another Adam rate")
    # a record that says it trained at today's rate for its width carries no mark
    path = root / "records" / H100_LONG_2048.parent.name / H100_LONG_2048.name
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in recs:
        rec["check"]["lr"] = 5e-4 if rec["params"]["width"] == 2048 else 1e-3
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert not any("◊" in line for line in lines_of())


def test_a_way_out_that_failed_its_loss_check_after_its_steps_still_shows_what_its_steps_cost(tmp_path):
    root = results_with(tmp_path, H200_MICRO2_FAILED, H100_SEED003_DIED)
    def cells(show):
        lines = render(load_rows(root), "tricks", ["technique", "micro_batch"], "budget", show,
                              {"workload": "resnet50_2048", "batch": "10"})[0].splitlines()
        rows = [line.strip("| ").split(" | ") for line in lines[2:]]
        return {tuple(row[0].split(", ")): row[1:] for row in rows}  # columns: budget 24GB, 40GB
    verdict = "failed (loss gap 0.014 from fp32, 0.0048 allowed)"
    # no timing was kept then: the peak of its steps, and no step
    assert cells(["step", "peak"])["fp32", "2"][1] == verdict + ": 16.3 / 17.7 GB"
    assert cells(["step"])["fp32", "2"][1] == verdict  # asked only for the step it has not
    # todo lists it again for its step time; no Adam-rate mark: its loss and verdict are today's
    untimed = next(r.record for r in load_rows(root) if r.record.params.get("micro_batch") == 2)
    assert tricks_case.CASE.outdated(untimed) and "◊" not in cells(["step", "peak", "loss"])["fp32", "2"][1]
    assert cells(["step", "peak"])["save_on_cpu", "10"][0] == "failed (its process died: killed or crashed)"
    # a record that kept its timing shows its step too
    path = root / "records" / H200_MICRO2_FAILED.parent.name / H200_MICRO2_FAILED.name
    rec = json.loads(path.read_text())
    rec["timing"] = {"median_s": 0.5, "q25_s": 0.5, "q75_s": 0.5, "min_s": 0.5, "max_s": 0.5, "steps": 10, "warmup": 2}
    path.write_text(json.dumps(rec) + "\n")
    assert cells(["step", "peak", "loss"])["fp32", "2"][1] == verdict + ": 500.0 ms, 16.3 / 17.7 GB"
    # a wrong answer (no loss curve held to a reference) is a failure and shows no cost at all
    rec["check"] = {"error": "relative error 1 over tolerance 1e-4"}
    path.write_text(json.dumps(rec) + "\n")
    assert cells(["step", "peak"])["fp32", "2"][1] == "failed"


def test_an_answer_searched_under_the_old_short_cap_is_marked_until_a_search_under_todays_replaces_it(tmp_path):
    # checkpoint at 40GB on the H100: 77 with torch capped at a share of NVML's total, 78 at the budget's bytes
    old = RECORDS / "nvidia-h100-80gb-hbm3-x1/0586d386-20261125T153851-dfded6.jsonl"
    new = RECORDS / "nvidia-h100-80gb-hbm3-x1/9009c493-20261125T171513-718970.jsonl"

    def checkpoint(root):
        lines = table(load_rows(root), "fits", ["technique", "machine"], "budget", ["check:max_batch"],
                             {"technique": "checkpoint"}).splitlines()
        row = next(line for line in lines if line.startswith("| checkpoint, H100"))
        return row.split(" | ")[-1].strip("| "), [line for line in lines if line.startswith("∘")]

    answer, notes = checkpoint(results_with(tmp_path / "old", old))
    assert answer == "77∘△" and notes and "today's search may fit one size more" in notes[0]
    answer, notes = checkpoint(results_with(tmp_path / "both", old, new))
    assert (answer, notes) == ("78△", [])  # searched before today's rule all the same
    # the whole card was never capped: the same record under it is no old-cap answer
    recs = [json.loads(line) for line in old.read_text().splitlines()]
    root = results_with(tmp_path / "card", old)
    for rec in recs:
        rec["params"]["budget"] = "card"
    (root / "records" / old.parent.name / old.name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = table(load_rows(root), "fits", ["technique", "machine"], "budget", ["check:max_batch"]).splitlines()
    assert any("| 77△ |" in line for line in lines) and not any("∘" in line for line in lines)


def test_an_answer_searched_before_today_s_rule_is_marked_until_one_searched_under_it_replaces_it(tmp_path):
    # checkpoint at 40GB on the H100, at the budget's bytes: 78, with only 79 seen not to fit
    new = RECORDS / "nvidia-h100-80gb-hbm3-x1/9009c493-20261125T171513-718970.jsonl"

    def checkpoint(root):
        lines = table(load_rows(root), "fits", ["technique", "machine"], "budget", ["check:max_batch"],
                      {"technique": "checkpoint"}).splitlines()
        row = next(line for line in lines if line.startswith("| checkpoint, H100"))
        return [c.strip() for c in row.strip("|").split("|")][3], [line for line in lines if line.startswith("△")]

    answer, notes = checkpoint(results_with(tmp_path / "before", new))
    assert answer == "78△" and notes and "harness todo` lists it to search again" in notes[0]
    recs = [json.loads(line) for line in new.read_text().splitlines()]
    root = results_with(tmp_path / "ruled", new)
    ruled = [dict(r, check=dict(r["check"], failed_below=[])) if r["case"] == "fits" else r for r in recs]
    (root / "records" / new.parent.name / new.name).write_text("".join(json.dumps(r) + "\n" for r in ruled))
    assert checkpoint(root) == ("78", [])


def test_a_rate_is_read_against_its_own_hosts_ceiling_though_a_later_host_of_the_kind_measured_one(tmp_path):
    def out_of_core(*files):
        text = render(load_rows(results_with(tmp_path / "-".join(f.stem for f in files), *files)), "beyond",
                             ["pattern", "budget"], "way", ["rate"], {"times": "1.5"})[0]
        return next(line for line in text.splitlines() if line.startswith("| reduce, 24GB |")).split(" | ")[-1]
    own = out_of_core(H100_HOST_A_CEILINGS, H100_HOST_A_BEYOND, H100_HOST_B_CEILINGS)
    assert "§" not in own
    assert own == out_of_core(H100_HOST_A_CEILINGS, H100_HOST_A_BEYOND)  # the later host changes nothing
    assert "§" in out_of_core(H100_HOST_A_BEYOND, H100_HOST_B_CEILINGS)  # only another host's: marked


def test_an_answer_the_hosts_memory_set_is_marked_and_explained_and_no_other_is(tmp_path):
    # save_on_cpu at 24GB on an H200: batch 33 kept more on the host than its guard allows
    source = RECORDS / "nvidia-h200-x1/cddf8cc1-20261125T120830-fd5868.jsonl"
    root = results_with(tmp_path, source)
    path = root / "records" / source.parent.name / source.name
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    def rows():
        lines = table(load_rows(root), "fits", ["technique", "machine"], "budget",
                             ["check:max_batch"]).splitlines()
        return {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}, lines
    before, lines = rows()
    assert not any(line.startswith("⌂") for line in lines)
    assert "⌂" not in before["save_on_cpu, H200"]  # filed before the check said what ran short
    for rec in recs:
        rec["check"]["host_short_at"] = 33 if rec["params"]["technique"] == "save_on_cpu" else 40
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    after, lines = rows()
    # searched under the old cap, yet the host set it: a larger cap would fit no more, so no ∘
    assert "| 32⌂ |" in after["save_on_cpu, H200"]
    assert "⌂" not in after["cpu_offload, H200"]  # 16 fit; the device refused 17 long before the host
    assert any(line.startswith("⌂ the host's memory, not the budget, set this answer") for line in lines)


# -- one cell's words ---------------------------------------------------------------------------------
@pytest.mark.parametrize("check, said", [
    ({"ended": "died"}, " (its process died: killed or crashed)"),
    ({"ended": "oom_killed"}, " (host memory ran out: the kernel's out-of-memory killer ended it)"),
    ({"ended": "disk_full"}, " (the disk it files into was full)"),
    ({"ended": "raised", "error": "ValueError: x\nat line 2"}, " (ValueError: x ↵ at line 2)"),
    ({"deviation": 0.0123, "tolerance": 0.002, "reference_spread": 0.001, "reference": "fp32 with checkpointing"},
     " (loss gap 0.012 from fp32 with checkpointing, 0.003 allowed)"),
    ({"deviation": 0.5, "tolerance": 0.1}, " (loss gap 0.5 from fp32, 0.1 allowed)"),
    # The spread allowed as many times as the check that made the record allowed it.
    ({"deviation": 0.0123, "tolerance": 0.002, "reference_spread": 0.001, "spread_factor": 2},
     " (loss gap 0.012 from fp32, 0.004 allowed)"),
    # Gap and allowance that round alike at two digits get as many more as tell them apart.
    ({"deviation": 0.0141, "tolerance": 0.01, "reference_spread": 0.00361},
     " (loss gap 0.0141 from fp32, 0.0136 allowed)"),
    ({"deviation": 0.0141, "tolerance": 0.0141}, " (loss gap 0.0141 from fp32, 0.0141 allowed)"),
    # Six digits at most: a gap within a millionth of its allowance reads as it.
    ({"deviation": 0.1000001, "tolerance": 0.1}, " (loss gap 0.1 from fp32, 0.1 allowed)"),
    ({"deviation": 0.5, "tolerance": True}, ""), ({"deviation": 0.5, "tolerance": 0.1, "ended": "raised2"}, ""),
    # A way held to a falling loss of its own (LoRA, Adafactor, SGD): how far it fell, not fp32's gap.
    ({"falls": 0.01, "fell": 0.0046, "deviation": 0.4, "reference": "fp32"},
     " (loss fell 0.0046 of its first, 0.01 asked)"),
    ({}, ""), (None, "")])
def test_a_failure_says_why(check, said):
    assert tables._why_failed(check) == said


def test_a_loss_is_the_last_one_a_check_kept_and_a_check_value_is_written_as_its_kind():
    assert tables.loss({"loss_last": 2.5, "loss": 3.0}) == 2.5 and tables.loss({"loss": 3}) == 3
    assert tables.loss({"loss": True}) is None and tables.loss({"loss": "2.5"}) is None and tables.loss({}) is None
    assert tables._check_value(None, "max_batch") == "-" and tables._check_value(12345, "max_batch") == "12,345"
    assert tables._check_value(True, "fits") == "True" and tables._check_value("a\nb", "error") == "a ↵ b"
    assert tables._check_value(2.5, "loss") == "2.5"
    assert tables._check_value(524_288_000, "context.cuda") == "524.3 MB"
    assert tables._check_value(524_288_000, "max_batch") == "524,288,000"


def test_a_rate_is_written_in_its_units_with_its_share_of_the_ceiling_that_bounds_it(tmp_path):
    rows = load_rows(results_with(tmp_path / "own", H100_HOST_A_CEILINGS, H100_HOST_A_BEYOND))
    ceilings = render(rows, "ceilings", ["probe"], "machine", ["rate", "eff"])[0].splitlines()
    # no ceiling of its own
    assert ceilings[2:4] == ["| device_copy | 2,984.2 GB/s, - |", "| h2d_pinned | 52.6 GB/s, - |"]
    assert ceilings[-1] == "| matmul_bf16 | 767.9 TFLOP/s, - |"
    beyond = render(rows, "beyond", ["pattern", "budget"], "way", ["rate"], {"times": "1.5"})[0].splitlines()
    # a rate of the primary unit reads as a share; one of the bytes over the host link names that link
    assert beyond[2] == ("| stream, 24GB | does not fit (a 36.0 GB request failed) | 3,029.9 GB/s "
                         "(1.02 of device copy) | 69.6 GB/s (h2d 0.88 of pinned H2D, 0.99 beside D2H) |")
    assert beyond[4] == ("| matmul, 24GB | does not fit (a 36.0 GB request failed) | 51.9 TFLOP/s "
                         "(1.02 of fp32 matmul) | not run |")
    other = load_rows(results_with(tmp_path / "other", H100_HOST_A_BEYOND, H100_HOST_B_CEILINGS))
    eff = render(other, "beyond", ["pattern", "budget"], "way", ["eff"], {"times": "1.5"})[0].splitlines()
    assert eff[3] == ("| reduce, 24GB | does not fit (a 36.0 GB request failed) | 0.96 of device copy§ "
                      "| h2d 0.95 of pinned H2D§ |")


def test_the_command_prints_the_table_its_footnotes_and_each_figure_against_the_base(tmp_path, capsys):
    results = results_with(tmp_path, H100_HOST_A_CEILINGS, H100_HOST_A_BEYOND, H100_ACCUMULATION, H100_SEED003_HOST,
                           H200_MICRO2_FAILED)

    def printed(*args) -> list[str]:
        assert tables.main(results, *args) == 0
        return plain(capsys.readouterr().out).splitlines()
    beyond = printed("beyond", "pattern,budget", "way", "rate,eff", ["times=1.5"], "way=managed_pool")
    assert beyond[2] == ("| stream, 24GB | does not fit (a 36.0 GB request failed) | 3,029.9 GB/s, "
                         "1.02 of device copy | 69.6 GB/s (0.02x), h2d 0.88 of pinned H2D, 0.99 beside D2H |")
    two = printed("beyond", "pattern,budget", "way", "rate", ["times=1.5"], "way=managed_pool,budget=24GB")
    assert two[3] == ("| reduce, 24GB | does not fit (a 36.0 GB request failed) | 2,854.3 GB/s (0.96 of device copy) | "
                      "51.9 GB/s (h2d 0.99 of pinned H2D) (0.02x) |")
    tricks = printed("tricks", "micro_batch", "technique", "rate,peak", ["batch=64"], "technique=fp32")
    assert tricks[3] == "| 2 | 31.6 k tokens/s, 6.07 / 6.97 GB | 69.9 k tokens/s (2.21x), 5.64 / 6.70 GB (0.93x) |"
    assert tricks[-2:] == ["", "Peaks here cover the whole case (build, warm-up, steps and check): these records were "
                           "written before peaks covered the timed steps alone (schema 1)."]
    resnet = printed("tricks", "technique,micro_batch", "budget", "step,peak", ["workload=resnet50_2048"])
    assert resnet[2] == ("| fp32, 2 | not run | not run | failed (loss gap 0.014 from fp32, 0.0048 allowed): "
                         "16.3 / 17.7 GB | not run |")
    assert resnet[4].startswith("| save_on_cpu, 10 | does not fit in host memory (67.1 GB asked) |")
    assert tables.main(tmp_path, "tricks", "technique", "budget", "step", []) == 2
    assert capsys.readouterr().err == (f"oombench table: {tmp_path} holds no records/ folder: pass --results with the "
                                       "folder that holds records/ (results/ by default)\n")


def test_a_where_value_may_hold_an_equals_sign_and_a_machine_is_taken_as_written():
    case = tables.cases.get("tricks")
    assert tables.where_of(case, ["machine=H100 80GB HBM3"]) == {"machine": "H100 80GB HBM3"}
    assert tables.where_of(case, ["machine=a=b"]) == {"machine": "a=b"}
    assert tables.where_of(case, ["batch=16"]) == {"batch": 16}


def test_what_did_not_fit_says_which_memory_and_the_request_only_where_known():
    from harness.measure.records.record import Record
    from harness.measure.instruments.environment import snapshot
    from harness.measure.instruments.devices import Devices
    env = snapshot(Devices(reason="test"))

    def short(of, requested=None):
        return Record(case="tricks", params={}, outcome="does_not_fit", environment=env, check={"short_of": of},
                      requested_bytes=requested)
    assert tables.does_not_fit(short("device")) == "does not fit"
    assert tables.does_not_fit(short("host")) == "does not fit in host memory"
    assert tables.does_not_fit(short("host", 2 * 10**9)) == "does not fit in host memory (2.00 GB asked)"
    ok = Record(case="tricks", params={}, outcome="ok", environment=env, memory={"device.used.gpu0": 5})
    assert tables.allocated_peak(ok) is None


def test_where_takes_alternatives_any_one_of_which_matches_and_checks_each():
    from harness import cases
    case = cases.get("tricks")
    where = tables.where_of(case, ["technique=fp32|checkpoint", "batch=16"])
    assert where == {"technique": ("fp32", "checkpoint"), "batch": 16}
    assert tables.holds("checkpoint", where["technique"]) and not tables.holds("tf32", where["technique"])
    assert tables.holds(16, where["batch"]) and not tables.holds(8, where["batch"])
    with pytest.raises(ValueError, match="no_such_way"):
        tables.where_of(case, ["technique=fp32|no_such_way"])
    # --versus names one base: a "|" there is no alternative
    with pytest.raises(ValueError):
        tables.where_of(case, ["technique=fp32|checkpoint"], "--versus")
