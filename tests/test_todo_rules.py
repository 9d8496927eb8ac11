"""``harness todo``'s words and edges (tests/test_todo.py has what is left of each profile): the
report's lines as printed, the refusal of an unknown machine, a --bench that matches nothing,
parameter sets written as patterns, classes without parameters, and records told apart by their
machine's folder whatever the order of their parameters."""
import json

import pytest

from harness.drive.asv import catalog
from harness.drive.commands import todo

from test_todo import BENCHES, bench, plant

A = todo.Bench("ceilings", "Device", ("track_seconds_per_step",), "('device_copy')", "ceilings",
               '{"probe": "device_copy"}')
B = todo.Bench("ceilings", "Device", ("track_seconds_per_step",), "('matmul_fp32')", "ceilings",
               '{"probe": "matmul_fp32"}')
C = todo.Bench("parallel", "LmSingle", ("track_seconds_per_step",), "", "parallel_lm", '{"strategy": "single"}')
HOST = todo.Bench("ceilings", "Host", ("track_peak_host_bytes", "track_seconds_per_step"), "('host_copy')", "ceilings",
                  '{"probe": "host_copy"}')


def test_the_report_counts_each_machines_sets_and_gives_each_class_its_command(monkeypatch):
    monkeypatch.setattr(todo, "benches", lambda: [A, B, C])
    held = {"box": {("ceilings", '{"probe": "device_copy"}')}}
    assert todo.report("full", ["box", "new"], held).splitlines() == [
        "box: 1 of 3 parameter sets of profile full filed, 2 to go",
        "  ceilings.Device: 1 to go: ('matmul_fp32')",
        "    python3 -m harness run --file --bench '^ceilings\\.Device\\.\\w+(\\(.matmul_fp32.\\))$'",
        "  parallel.LmSingle: 1 to go: ()",
        "    python3 -m harness run --file --bench '^parallel\\.LmSingle\\.\\w+$'",
        "new: 0 of 3 parameter sets of profile full filed, 3 to go",
        "  ceilings.Device: 2 to go: ('device_copy'), ('matmul_fp32')",
        "    python3 -m harness run --file --bench "
        "'^ceilings\\.Device\\.\\w+(\\(.device_copy.\\)|\\(.matmul_fp32.\\))$'",
        "  parallel.LmSingle: 1 to go: ()",
        "    python3 -m harness run --file --bench '^parallel\\.LmSingle\\.\\w+$'"]


@pytest.mark.parametrize("args, pattern", [
    ("('fp32', 1.5)", r"\(.fp32., 1\.5\)"),
    ("('a|b', '[x]*+?^$')", r"\(.a\|b., .\[x\]\*\+\?\^\$.\)"),
    ("", ""),
])
def test_a_parameter_set_is_written_as_a_pattern_that_matches_it_alone(args, pattern):
    assert todo._literal(args) == pattern


def test_an_unknown_machine_is_refused_naming_the_folder_those_there_and_this_box(tmp_path, monkeypatch, capsys):
    plant(tmp_path / "results", "box-a", [(bench("WhatFitsSequence", "('fp32', '16GB')"), "ok")])
    plant(tmp_path / "results", "box-b", [(bench("WhatFitsSequence", "('fp32', '16GB')"), "ok")])
    monkeypatch.setattr(todo, "this_machine", lambda: "this-box")
    assert todo.main("budget", ["typo"], str(tmp_path / "results")) == 2
    assert capsys.readouterr().err == (f"oombench todo: no records of typo under {tmp_path / 'results' / 'records'}; "
                                       "machines there: box-a, box-b, and this box is this-box\n")
    assert todo.main("budget", ["typo", "this-box"], str(tmp_path / "results")) == 2
    assert "no records of typo, this-box under" in capsys.readouterr().err
    empty = tmp_path / "empty"
    (empty / "records").mkdir(parents=True)
    assert todo.main("budget", ["typo"], str(empty)) == 2
    assert "machines there: none, and this box is this-box" in capsys.readouterr().err


def test_this_box_without_records_has_everything_to_go(tmp_path, monkeypatch, capsys):
    plant(tmp_path / "results", "box-a", [])
    monkeypatch.setattr(todo, "this_machine", lambda: "this-box")
    assert todo.main("budget", ["this-box"], str(tmp_path / "results")) == 0
    wanted = len(todo.selected("budget", BENCHES))
    assert capsys.readouterr().out.startswith(f"this-box: 0 of {wanted} parameter sets of profile budget filed")


def test_what_is_missing_is_taken_from_the_benches_given(tmp_path):
    plant(tmp_path / "results", "box", [])
    assert todo.missing("full", "box", tmp_path / "results", [A, C]) == [A, C]


def test_todo_reads_the_committed_results_and_local_runs_together_unless_given_a_folder(monkeypatch, tmp_path,
                                                                                          capsys):
    committed, local = tmp_path / "results", tmp_path / "local"
    plant(committed, "box", [(bench("WhatFitsSequence", "('fp32', '16GB')"), "ok")])
    plant(local, "box", [(bench("WhatFitsSequence", "('bf16_autocast', '16GB')"), "ok")])
    monkeypatch.setattr(todo, "COMMITTED", committed)
    monkeypatch.setattr(todo, "LOCAL", local)
    monkeypatch.setattr(todo, "this_machine", lambda: "box")
    assert todo.main("budget", None, None) == 0
    out, err = capsys.readouterr()
    both = todo.filed_anywhere([committed, local])["box"]
    assert len(both) == 2 and out.startswith(f"box: 2 of {len(todo.selected('budget', todo.benches()))}")
    assert err.count("\n") == 1 and "this box (box)" in err
    assert todo.main("budget", None, str(local)) == 0 and capsys.readouterr().out.startswith("box: 1 of")


def test_todo_checks_run_s_profile_and_lists_no_gpu_work_for_a_box_without_one(monkeypatch):
    from harness.drive.commands import cli
    assert cli.parser().parse_args(["todo"]).profile == "standard" == todo.profiles.DEFAULT
    monkeypatch.setattr(todo, "benches", lambda: [A, B, C, HOST])
    cpu = todo.report("full", ["cpu-amd-epyc"], {}).splitlines()
    assert cpu[0] == "cpu-amd-epyc: 0 of 1 parameter sets of profile full (no GPU: the sets that run on the CPU) " \
                     "filed, 1 to go" and "ceilings.Device" not in "\n".join(cpu)
    assert todo.report("full", ["nvidia-h100-x1"], {}).startswith("nvidia-h100-x1: 0 of 4 ")


def test_this_machine_is_named_for_its_gpus_else_its_cpu(monkeypatch):
    from harness.measure.instruments import environment, machine
    monkeypatch.setattr(environment, "snapshot", lambda: type("E", (), {"devices": "D", "cpu": "C"})())
    monkeypatch.setattr(machine, "machine_name", lambda devices, cpu: f"{devices}+{cpu}")
    assert todo.this_machine() == "D+C"


def test_a_bench_that_matches_nothing_is_refused_with_an_example_and_a_class_alone_matches():
    assert todo.unmatched(r"^ceilings\.Device\.track_seconds_per_step$", [A, B]) is None  # without its parameters
    assert todo.unmatched("matmul_fp32", [A, B]) is None
    assert todo.unmatched("nothing", [A, B]) == (
        "--bench 'nothing' matches no benchmark: benchmarks are named family.Class.method(params), e.g. "
        "ceilings.Device.track_seconds_per_step, the classes those of benchmarks/*.py")
    assert todo.unmatched(r"^tricks\.Techniques\.") is None  # every benchmark of benchmarks/ by default


def test_a_class_without_parameters_is_one_bench_and_helpers_are_no_family():
    single = [b for b in catalog.benches() if b.cls == "LmSingle"]  # made here: BENCHES was made at import
    assert len(single) == 1 and single[0].args == ""
    assert single[0].names()[0] == "parallel.LmSingle.track_peak_device_bytes"
    families = catalog.families()
    assert "common" not in families and "__init__" not in families and "tricks" in families
    assert {b.family for b in BENCHES} <= set(families)
    assert all(b.case for b in BENCHES)


def test_a_record_is_filed_under_its_machines_folder_whatever_the_order_of_its_parameters(tmp_path):
    b = bench("WhatFitsSequence", "('fp32', '16GB')")
    results = plant(tmp_path / "results", "box-a", [(b, "ok")])
    plant(results, "box-b", [(b, "ok")])
    held = todo.filed(results)
    assert (b.case, b.params) in held["box-a"] and (b.case, b.params) in held["box-b"]
    path = results / "records" / "box-a" / "0123abcd-20261124T000000-aaaaaa.jsonl"
    rec = json.loads(path.read_text())
    rec["params"] = dict(reversed(list(rec["params"].items())))
    path.write_text(json.dumps(rec) + "\n")
    assert (b.case, b.params) in todo.filed(results)["box-a"]
