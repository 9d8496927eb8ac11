"""`harness table --rank`: rows by the step of their cell in the first column, fastest first, then
the rows that did not fit or failed there, then those not run there, each in the usual order; with
--versus reading a value --where fixes, the Spec that quotes it, and the message for a rank without
a step. On records planted here, never the committed results."""
import json
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.drive.commands import cli
from harness.measure.instruments.environment import snapshot
from harness.measure.outcomes import DOES_NOT_FIT, FAILED, OK, SKIPPED
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report import specs, tables
from harness.report.model import load_rows

from conftest import fake_devices, plain

G = 10**9
H100 = snapshot(fake_devices(name="NVIDIA H100 80GB HBM3", total=81559 * 2**20))  # the first machine column
H200 = snapshot(fake_devices(name="NVIDIA H200"))
SEED = {"device": "cuda", "workload": "resnet50_1024", "batch": 10, "vocab": 32000, "width": 1024, "depth": 12,
        "seq_len": 1024}
WHERE = {"workload": "resnet50_1024", "batch": "10", "budget": "16GB"}
DOWN = ["technique", "micro_batch"]


def record(env, technique, micro, outcome=OK, step=0.1, budget="16GB", allocated=4 * G) -> Record:
    """A seed 003 record; a failed one failed its loss check after its steps, and kept their timing."""
    timed = outcome in (OK, FAILED)
    timing = Timing(step, step, step, step, step, 3, 0) if timed else None
    check = {"deviation": 0.3, "tolerance": 0.01, "reference": "fp32"} if outcome == FAILED else {}
    memory = {"allocator.gpu0.max_allocated": allocated, "device.used.gpu0": allocated + G,
              "device.used_before.gpu0": 0} if timed else {}
    return Record(case="tricks", params={**SEED, "technique": technique, "micro_batch": micro, "budget": budget},
                  outcome=outcome, environment=env, timing=timing,
                  memory=memory, check={**check, **({"short_of": "device"} if outcome == DOES_NOT_FIT else {})})


def plant(tmp_path, records: list[Record]):
    folder = tmp_path / "results" / "records" / "planted"
    folder.mkdir(parents=True)
    (folder / "planted.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return tmp_path / "results"


def labels(text: str) -> list[str]:
    """The label of each row of a printed table, top to bottom."""
    return [line.split(" | ")[0].lstrip("| ") for line in plain(text).splitlines()[2:] if line.startswith("|")]


# The H100 (the first column) against the H200, whose own order differs: the H100's decides.
PLANTED = [
    record(H100, "tf32", 5, step=0.3), record(H200, "tf32", 5, step=0.01),
    record(H100, "bf16_autocast", 10, step=0.1), record(H200, "bf16_autocast", 10, step=0.2),
    record(H100, "checkpoint", 10, step=0.2), record(H200, "checkpoint", 10, step=0.3),
    record(H100, "checkpoint", 5, FAILED, step=0.05), record(H200, "checkpoint", 5, step=0.02),  # fastest, failed
    record(H100, "fp32", 10, DOES_NOT_FIT), record(H200, "fp32", 10, DOES_NOT_FIT),
    record(H100, "fp16_autocast", 10, SKIPPED), record(H200, "fp16_autocast", 10, step=0.03),
    record(H200, "save_on_cpu", 10, step=0.04),  # not run on the H100
]
USUAL = ["fp32, 10", "tf32, 5", "fp16_autocast, 10", "bf16_autocast, 10", "checkpoint, 5", "checkpoint, 10",
         "save_on_cpu, 10"]
RANKED = ["bf16_autocast, 10", "checkpoint, 10", "tf32, 5",  # by the H100's step
          "fp32, 10", "checkpoint, 5",  # did not fit, failed: in the usual order
          "fp16_autocast, 10", "save_on_cpu, 10"]  # skipped, not run: in the usual order


def test_rank_orders_rows_by_the_first_columns_step_then_did_not_fit_or_failed_then_not_run(tmp_path):
    rows = load_rows(plant(tmp_path, PLANTED))
    usual = tables.table(rows, "tricks", DOWN, "machine", ["step"], WHERE)
    assert labels(usual) == USUAL
    ranked = tables.table(rows, "tricks", DOWN, "machine", ["step", "peak"], WHERE, rank=True)
    assert labels(ranked) == RANKED
    # the cells move with their rows: each still shows its own record
    line = next(x for x in plain(ranked).splitlines() if x.startswith("| checkpoint, 5 |"))
    assert line.split(" | ")[1].startswith("failed (loss gap 0.3 from fp32") and "20.0 ms" in line.split(" | ")[2]


def test_rank_reads_the_first_column_whatever_is_across(tmp_path):
    card = [record(H100, t, m, step=s, budget="card") for t, m, s in (("tf32", 5, 0.01), ("fp32", 10, 0.02))]
    rows = load_rows(plant(tmp_path, PLANTED + card))
    where = {"workload": "resnet50_1024", "batch": "10", "machine": "H100 80GB HBM3"}
    head, *_ = plain(tables.table(rows, "tricks", DOWN, "budget", ["step"], where)).splitlines()
    assert head.startswith("| technique, micro_batch | budget 16GB |")  # the declared order: 16GB first
    ranked = tables.table(rows, "tricks", DOWN, "budget", ["step"], where, rank=True)
    assert labels(ranked)[:3] == ["bf16_autocast, 10", "checkpoint, 10", "tf32, 5"]  # 16GB's steps, not card's


def test_ties_keep_the_usual_order_whatever_order_the_records_were_filed_in(tmp_path):
    # filed bf16 first; alphabetically bf16 comes first too; the usual (declared) order puts tf32 first
    tied = [record(H100, "bf16_autocast", 10, step=0.1), record(H100, "tf32", 10, step=0.1),
            record(H100, "fp32", 10, step=0.1)]
    rows = load_rows(plant(tmp_path, tied))
    ranked = tables.table(rows, "tricks", DOWN, "machine", ["step"], WHERE, rank=True)
    assert labels(ranked) == ["fp32, 10", "tf32, 10", "bf16_autocast, 10"]


def fake(outcome: str | None, step: float) -> SimpleNamespace | None:
    if outcome is None:
        return None  # not run
    return SimpleNamespace(record=SimpleNamespace(outcome=outcome, timing=SimpleNamespace(median_s=step)))


@settings(max_examples=100)
@given(st.lists(st.tuples(st.sampled_from([None, OK, SKIPPED, DOES_NOT_FIT, FAILED]),
                          st.sampled_from([0.1, 0.2, 0.3])), max_size=12))
def test_rank_is_a_stable_partition_by_whether_a_row_ran_then_by_its_step(cells):
    keys = [(i,) for i in range(len(cells))]
    at = {((i,), "first"): fake(*c) for i, c in enumerate(cells) if c[0] is not None}
    at.update({((i,), "second"): fake(OK, 1 - c[1]) for i, c in enumerate(cells)})  # another order beside it
    out = tables.ranked(keys, at, "first")
    group = {None: 2, SKIPPED: 2, DOES_NOT_FIT: 1, FAILED: 1, OK: 0}
    place = [(group[cells[i][0]], cells[i][1] if cells[i][0] == OK else 0, i) for (i,) in out]
    assert place == sorted(place)  # groups in order, steps rising, ties in the order given


def test_versus_reads_each_way_against_a_value_the_where_fixes_and_ranks_the_same(tmp_path):
    base = [record(H100, "fp32", 10, step=0.4, budget="card", allocated=8 * G),
            record(H200, "fp32", 10, step=0.5, budget="card", allocated=8 * G)]
    rows = load_rows(plant(tmp_path, PLANTED + base))
    versus = (("technique", "fp32"), ("micro_batch", 10), ("budget", "card"))
    ranked = tables.table(rows, "tricks", DOWN, "machine", ["step", "peak"], WHERE, versus, rank=True)
    assert labels(ranked) == RANKED
    cells = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in plain(ranked).splitlines()[2:]}
    # against fp32 on the whole card of the same machine: 100 ms of 400 on the H100, 200 of 500 on the H200
    assert cells["bf16_autocast, 10"][0] == "100.0 ms (0.25x), 4.00 / 5.00 GB (0.50x)"
    assert cells["bf16_autocast, 10"][1].startswith("200.0 ms (0.40x), 4.00 / 5.00 GB (0.50x)")
    # no base where no record holds the value: the figures, no multiples
    alone = tables.table(load_rows(plant(tmp_path / "b", PLANTED)), "tricks", DOWN, "machine", ["step"], WHERE,
                         versus, rank=True)
    assert labels(alone) == RANKED and "x)" not in alone


SPEC = specs.Spec("tricks", "technique,micro_batch", show="step,peak,loss", where=("budget=16GB", "batch=10"),
                  versus="technique=fp32,micro_batch=10,budget=card", rank=True)


def test_a_ranked_spec_quotes_the_command_that_prints_its_table(tmp_path, capsys):
    assert SPEC.command().endswith(" --rank") and " --rank" not in specs.Spec("tricks", "technique").command()
    base = [record(H100, "fp32", 10, step=0.4, budget="card"), record(H200, "fp32", 10, step=0.5, budget="card")]
    root = plant(tmp_path, PLANTED + base)
    assert cli.main(["table", *SPEC.args(), "--results", str(root)]) == 0
    printed = capsys.readouterr().out
    assert printed == SPEC.render(load_rows(root)) + "\n" and labels(printed) == RANKED


def test_the_seeds_doc_ranks_seed_003_under_a_16gb_card_before_each_grid():
    commands = [s.command() for s in specs.SEEDS]
    for w in ("resnet50_1024", "resnet50_2048"):
        ranked = next(i for i, c in enumerate(commands) if f"workload={w}" in c and "--rank" in c)
        assert "--where budget=16GB" in commands[ranked] and "--across" not in commands[ranked]
        assert f"workload={w}" in commands[ranked + 1] and "--across budget" in commands[ranked + 1]


def test_rank_without_a_step_to_rank_exits_2_naming_the_fix(tmp_path, capsys):
    root = plant(tmp_path, PLANTED)

    def refused(*args) -> str:
        assert cli.main(["table", "tricks", "--down", "technique,micro_batch", "--where", "budget=16GB", *args,
                         "--results", str(root)]) == 2
        out = capsys.readouterr()
        assert out.out == "" and len(out.err.strip().splitlines()) == 1
        return out.err

    assert refused("--show", "peak,loss", "--rank") == \
        "oombench table: --rank orders the rows by the step of their cell in the first column: add step to --show\n"
    # a --versus value neither down, across nor fixed by --where still has no row to be read against
    assert "needs seq_len down or across the table, or fixed by --where" in \
        refused("--show", "step", "--versus", "seq_len=1024", "--rank")
