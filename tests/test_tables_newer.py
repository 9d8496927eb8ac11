"""The newer ways in the tables: what the first step spent compiling, apart from the step; a ranking
under a named card that puts the ways whose device peak is past it after the rest; and a record run
under the emulation of a card that cannot run its way (bf16 on a P100), read as skipped with why, so
no table, answer or page shows it as that card's. On records planted here, never the committed results."""
import dataclasses
import json

import pytest

from harness.measure.instruments.environment import snapshot
from harness.measure.outcomes import OK, SKIPPED
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report import docs, specs, tables
from harness.report.model import load_rows

from conftest import fake_devices, plain

G = 10**9
H100 = snapshot(fake_devices(name="NVIDIA H100 80GB HBM3", total=81559 * 2**20))
LM = {"device": "cuda", "workload": "lm", "batch": 16, "micro_batch": 16, "vocab": 32000, "width": 1024,
      "depth": 12, "seq_len": 1024, "budget": "card"}
L4_TOTAL = 23034 * 2**20  # the l4-24gb card's total, as nvidia-smi reports it: 24.15 GB


def lm(technique, step, device, check=None) -> Record:
    return Record(case="tricks", params={**LM, "technique": technique}, outcome=OK, environment=H100,
                  timing=Timing(step, step, step, step, step, 3, 0), check={"loss_last": 2.9, **(check or {})},
                  memory={"allocator.gpu0.max_allocated": int(device) - G, "device.used.gpu0": int(device),
                          "device.used_before.gpu0": 0})


def plant(tmp_path, records: list[Record]):
    folder = tmp_path / "results" / "records" / "planted"
    folder.mkdir(parents=True)
    (folder / "planted.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return tmp_path / "results"


def lines(text: str) -> dict:
    """Each row of a printed table: its label -> its one cell."""
    return {cells[0]: cells[1] for cells in (line.strip("| ").split(" | ") for line in plain(text).splitlines()[2:]
                                             if line.startswith("|"))}


@pytest.fixture(scope="module")
def ranked_rows(tmp_path_factory):
    """The LM's ways on one H100: compiled ones, and two whose device peak is past an L4's total though fast."""
    recs = [lm("fp32", 0.455, 24.0 * G), lm("bf16_autocast+checkpoint", 0.096, 12.8 * G),
            lm("bf16_autocast+checkpoint+compile", 0.080, 11.9 * G, {"compile_s": 41.26}),
            lm("adamw8bit", 0.454, 24.0 * G, {"compile_s": 23.5}),
            lm("compile", 0.300, 20.0 * G),  # a compiling way whose record kept no compile time
            lm("bf16_autocast", 0.077, L4_TOTAL + 1), lm("keep_references", 0.050, 28.2 * G),
            lm("checkpoint", 0.550, L4_TOTAL)]  # at the card's total: it fits
    return load_rows(plant(tmp_path_factory.mktemp("ranked"), recs))


def test_the_compile_time_is_a_figure_of_its_own_beside_the_step_and_only_for_a_way_that_compiles(ranked_rows):
    cells = lines(tables.table(ranked_rows, "tricks", ["technique"], "machine", ["step", "compile"]))
    assert cells["bf16_autocast+checkpoint+compile"] == "80.0 ms, 41.3 s to compile"  # the step holds none of it
    assert cells["adamw8bit"] == "454.0 ms, 23.5 s to compile"
    assert cells["compile"] == "300.0 ms, compile time not kept"
    assert cells["bf16_autocast+checkpoint"] == "96.0 ms"  # nothing compiled: no figure, no dash


def test_ranked_under_a_card_the_ways_past_its_total_follow_those_within_it_each_marked(ranked_rows):
    args = (ranked_rows, "tricks", ["technique"], "machine", ["step"])
    order = list(lines(tables.table(*args, rank=True, card="l4-24gb")))
    assert order == ["bf16_autocast+checkpoint+compile", "bf16_autocast+checkpoint", "compile", "adamw8bit",
                     "fp32", "checkpoint", "keep_references", "bf16_autocast"]
    text = tables.table(*args, rank=True, card="l4-24gb")
    assert lines(text)["keep_references"] == "50.0 ms↑" and lines(text)["checkpoint"] == "550.0 ms"
    assert "↑ not shown to fit the NVIDIA L4 (l4-24gb)" in text and "past the card's 24.2 GB total" in text
    # without the card, or unranked, the step alone orders and nothing is marked
    assert list(lines(tables.table(*args, rank=True)))[:2] == ["keep_references", "bf16_autocast"]
    assert "↑" not in tables.table(*args, card="l4-24gb")


def test_the_docs_rank_every_way_on_the_lm_under_an_l4_with_its_compile_time():
    title = "Every way on the LM, ranked under a 24 GB card"
    (spec,) = [s for f in specs.FAMILIES for s in f.specs if s.title == title]
    assert spec.command().endswith("--show step,peak,loss,compile --where workload=lm --where batch=16 "
                                   "--where seq_len=1024 --versus technique=fp32 --rank --card l4-24gb")


# -- issue 69: no answer for a card that cannot run the way -----------------------------------------

def tried(technique, budget, target="vit-l16", step=0.055) -> Record:
    return Record(case="try", params={"device": "cuda", "target": target, "batch": 32, "seq_len": 0,
                                      "technique": technique, "budget": budget},
                  outcome=OK, environment=H100, timing=Timing(step, step, step, step, step, 3, 0),
                  check={"loss_last": 1.4}, memory={"allocator.gpu0.max_allocated": 10 * G,
                                                    "device.used.gpu0": 12 * G, "device.used_before.gpu0": 0})


@pytest.fixture(scope="module")
def p100_answers(tmp_path_factory):
    """try's answers as filed before it checked a card's capability: bf16 ways under the P100's emulation."""
    recs = [tried("fp32", "card", step=0.29), tried("bf16_autocast", "card"), tried("checkpoint", "card", step=0.37),
            tried("fp32", "p100-16gb", step=0.29), tried("bf16_autocast", "p100-16gb"),
            tried("bf16_params+checkpoint", "p100-16gb", step=0.19), tried("bf16_autocast", "l4-24gb")]
    results = plant(tmp_path_factory.mktemp("try"), recs)
    return results, load_rows(results)


def test_a_way_run_under_a_card_that_cannot_run_it_is_read_as_skipped_with_why_and_the_file_keeps_it(p100_answers):
    results, rows = p100_answers
    by = {(r.record.params["technique"], r.record.params["budget"]): r.record for r in rows}
    assert by[("bf16_autocast", "p100-16gb")].outcome == SKIPPED
    assert by[("bf16_autocast", "p100-16gb")].reason == (
        "no answer for the card it was emulated for: bf16_autocast under p100-16gb (it needs compute capability 8.0; "
        "Tesla P100-PCIE-16GB has 6.0)")
    assert by[("bf16_params+checkpoint", "p100-16gb")].outcome == SKIPPED
    # what the card runs, and the same way under a card that runs it, stay answers
    assert {by[k].outcome for k in [("fp32", "p100-16gb"), ("bf16_autocast", "l4-24gb"), ("bf16_autocast", "card")]} \
        == {OK}
    filed = [json.loads(x) for x in (results / "records" / "planted" / "planted.jsonl").read_text().splitlines()]
    assert {r["outcome"] for r in filed} == {OK}  # read so, never rewritten


def test_no_table_or_answer_names_a_way_as_the_answer_of_a_card_that_cannot_run_it(p100_answers):
    _, rows = p100_answers
    spec = next(s for f in specs.FAMILIES if f.name == "models" for s in f.specs)  # the table of every model
    text = spec.render(rows)
    row = {cells[0]: cells[1:] for cells in (line.strip("| ").split(" | ") for line in plain(text).splitlines()[2:])
           if cells[0].startswith("vit-l16, 32, 0, bf16")}
    assert row["vit-l16, 32, 0, bf16_autocast"][0] == "skipped⊘"  # the p100-16gb column, first
    assert row["vit-l16, 32, 0, bf16_autocast"][1].startswith("55.0 ms")  # l4-24gb's answer stands
    assert "⊘ no answer for the card it was emulated for, read as skipped (the record is kept): bf16_autocast under " \
           "p100-16gb (it needs compute capability 8.0; Tesla P100-PCIE-16GB has 6.0)." in text
    # a way that ran under that card alone leaves the table, with the same reason
    assert "bf16_params+checkpoint (skipped: no answer for the card it was emulated for: bf16_params+checkpoint " \
           "under p100-16gb" in text
    answer = docs.answer_words(spec, rows)
    assert "p100-16gb" not in answer and "budget card" in answer


def test_the_models_page_keeps_such_a_record_out_of_its_answers_and_folds_it_with_why(p100_answers):
    from harness.report.pages import build
    _, rows = p100_answers
    view = build.family_view("try", rows, rows)
    shown = [(ln["row"].record.params["budget"], ln["row"].record.params["technique"])
             for s in view["sections"] for ln in s["lines"] + s["budget_lines"]]
    assert ("p100-16gb", "fp32") in shown and ("l4-24gb", "bf16_autocast") in shown
    assert not [way for budget, way in shown if budget == "p100-16gb" and way.startswith("bf16")]
    assert "skipped here (no answer for the card it was emulated for: 2)" in view["folded_line"]


def test_a_spec_made_for_each_machine_ranks_every_gpu_by_its_own_steps(tmp_path):
    h200 = snapshot(fake_devices(name="NVIDIA H200"))
    recs = [lm("fp32", 0.45, 24 * G), lm("bf16_autocast", 0.08, 19 * G), lm("checkpoint", 0.55, 12 * G)]
    recs += [dataclasses.replace(r, environment=h200, timing=Timing(s, s, s, s, s, 3, 0))
             for r, s in zip(recs, (0.44, 0.60, 0.07))]  # the H200's own order is another
    recs.append(lm("lora", 0.39, 22 * G))  # the H100 alone ran it
    rows = load_rows(plant(tmp_path, recs))
    spec = specs.Spec("tricks", "technique", show="step", where=("workload=lm",), rank=True, card="l4-24gb",
                      each_machine=True, title="Ranked")
    made = spec.for_rows(rows)
    assert [s.title for s in made] == ["Ranked: H100 80GB HBM3", "Ranked: H200"]
    assert made[1].command().endswith("--where workload=lm --where machine=H200 --rank --card l4-24gb")
    assert list(lines(made[0].render(rows))) == ["bf16_autocast", "lora", "fp32", "checkpoint"]
    assert list(lines(made[1].render(rows))) == ["checkpoint", "fp32", "bf16_autocast"]
    assert specs.Spec("tricks", "technique", where=("workload=encdec",), each_machine=True).for_rows(rows) == [
        specs.Spec("tricks", "technique", where=("workload=encdec",), each_machine=True)]  # none ran: "no record yet"
