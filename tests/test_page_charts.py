"""What a family page's table and charts are made of, on made-up rows (tests/test_pages*.py build
and open whole sites): which machines take a column, which parameter sets fold into the counted
line and what it says, how each technique is named, coloured and marked, and the JSON a chart
draws."""
from types import SimpleNamespace

from harness.measure.outcomes import OK, SKIPPED
from harness.report import families
from harness.report.pages import charts, tableview
from harness.units import GB


def row(params, outcome=OK, machine="h100", env=("h100", "torch 2.11"), reason=None, peak=None, rate=None,
        workload=None, technique=None, gpu_memory=80 * GB):
    record = SimpleNamespace(params=params, outcome=outcome, reason=reason)
    return SimpleNamespace(record=record, machine=machine, environment_key=env, workload=workload or {},
                           technique=technique if technique is not None else params, case="made_up",
                           peak=lambda: peak, rate=lambda: rate, gpu_memory=gpu_memory)


# -- the table -------------------------------------------------------------------------------------

def test_a_box_that_skipped_every_row_takes_no_column():
    cpu = [row({"b": 1}, SKIPPED, "cpu", ("cpu", "-"), "needs 1 GPU(s)"), row({"b": 2}, SKIPPED, "cpu", ("cpu", "-"))]
    gpu = [row({"b": 1}), row({"b": 2}, SKIPPED)]
    assert tableview.measured_boxes(cpu + gpu) == gpu
    assert tableview.measured_boxes(cpu) == []


def test_a_skips_reason_is_cut_at_its_first_colon_or_semicolon_on_one_line():
    assert tableview.short_reason(row({}, reason="needs 1 GPU(s), this box has no GPU: NVML")) == \
        "needs 1 GPU(s), this box has no GPU"
    assert tableview.short_reason(row({}, reason="too big; try less: now")) == "too big"
    assert tableview.short_reason(row({}, reason="two\n  lines")) == "two lines"
    assert tableview.short_reason(row({}, reason=None)) == "no reason given"
    assert tableview.short_reason(row({}, reason="x" * 100)) == "x" * 80


def test_the_table_shows_each_parameter_set_measured_somewhere_and_counts_the_rest_with_why():
    a, b = ("h100", "t"), ("h200", "t")
    rows = [row({"n": 1}, env=a), row({"n": 1}, SKIPPED, "h200", b, "no room: x"),
            row({"n": 2}, SKIPPED, env=a, reason="needs 2 GPU(s): x"),
            row({"n": 2}, SKIPPED, "h200", b, "needs 2 GPU(s): y"),
            row({"n": 3}, SKIPPED, env=a, reason="no room: z"), row({"n": 4}, machine="h200", env=b)]
    got = tableview.family_table(rows)
    assert got["envs"] == [a, b]
    assert list(got["shown"]) == ["n=1", "n=4"] and set(got["shown"]["n=1"]) == {a, b}
    assert list(got["folded"]) == ["n=2", "n=3"]
    assert got["folded_line"] == "2 parameter set(s) skipped here (needs 2 GPU(s): 2; no room: 1), 1 cell(s) not run"
    assert tableview.family_table([row({"n": 1}, env=a)])["folded_line"] == ""


def test_the_counted_line_names_four_reasons_at_most_by_count():
    folded = {f"n={i}": {("m", "t"): row({"n": i}, SKIPPED, reason=f"r{i % 5}" + ": x" * 0)} for i in range(12)}
    assert tableview.folded_line(folded, boxes=1) == \
        "12 parameter set(s) skipped here (r0: 3; r1: 3; r2: 2; r3: 2; ...)"
    four = {k: v for k, v in folded.items() if k in ("n=0", "n=1", "n=2", "n=3")}
    assert tableview.folded_line(four, boxes=1) == "4 parameter set(s) skipped here (r0: 1; r1: 1; r2: 1; r3: 1)"


# -- the charts ------------------------------------------------------------------------------------

def test_each_technique_is_named_by_what_differs_within_its_chart():
    techniques = [{"budget": "card", "micro": 8, "t": "fp32"}, {"budget": "card", "micro": 4, "t": "fp32"}]
    assert charts.legend_names(techniques) == ["micro=8", "micro=4"]
    assert charts.legend_names([{"t": "fp32"}]) == ["t=fp32"]
    assert charts.legend_names([{"a": 1}, {"a": 1, "b": 2}]) == ["b=None", "b=2"]


def test_points_take_a_colour_each_then_the_next_marker_filled_on_the_frontier_only():
    rows = [row({"i": i}, peak=(i + 1) * GB, rate=(100.0 - (i % 2) * 99, "tokens/s")) for i in range(12)]
    pts = charts.points(rows)
    assert [p.colour for p in pts[:10]] == list(charts.COLOURS) and pts[10].colour == charts.COLOURS[0]
    assert {p.marker for p in pts[:10]} == {"circle"} and {p.marker for p in pts[10:]} == {"rect"}
    assert [p.front for p in pts] == [True] + [False] * 11  # the first has the least memory and the most rate
    assert pts[0].glyph == "●" and pts[1].glyph == "○" and pts[10].glyph == "□"
    assert (pts[3].name, pts[3].peak, pts[3].rate) == ("i=3", 4 * GB, 1.0)


def test_a_chart_is_drawn_per_workload_and_gpu_of_the_rows_that_ran_with_a_peak(monkeypatch):
    monkeypatch.setattr(charts, "memory_name",
                        lambda case: families.MEMORY_NAMES["device" if case == "tricks" else "host"])
    lm, cnn = {"workload": "lm"}, {"workload": "cnn"}
    rows = [row({"t": "a"}, workload=lm, peak=2 * GB, rate=(5.0, "tokens/s"), technique={"t": "a"}),
            row({"t": "b"}, workload=lm, peak=1 * GB, rate=(9.0, "tokens/s"), technique={"t": "b"}),
            row({"t": "c"}, workload=lm, peak=1 * GB, rate=(9.0, "samples/s"), technique={"t": "c"}),
            row({"t": "a"}, workload=cnn, env=("h200", "t"), peak=3 * GB, rate=(1.0, "samples/s")),
            row({"t": "x"}, SKIPPED, workload=lm), row({"t": "y"}, workload=lm, peak=None, rate=(1.0, "tokens/s"))]
    got = charts.charts_for("tricks", rows)
    assert [(c["title"], c["unit"], len(c["points"])) for c in got] == [  # the workload of the most ways first
        ("tricks on h100: workload=lm", "tokens/s", 2), ("tricks on h200: workload=cnn", "samples/s", 1)]
    lm_chart = got[0]
    assert lm_chart["workload"] == "workload=lm" and lm_chart["env"] == ("h100", "torch 2.11")
    assert lm_chart["x_label"] == "peak device memory gain (GB)" and lm_chart["y_label"] == "tokens/s"
    assert [p.name for p in lm_chart["points"]] == ["t=a", "t=b"] and lm_chart["frontier"] == [rows[1]]
    plain = charts.charts_for("ceilings", [row({}, peak=GB, rate=(1.0, "GB/s"))])
    assert plain[0]["title"] == "ceilings on h100" and plain[0]["memory"] == "peak host RSS"


def test_a_charts_json_gives_each_point_its_figures_in_words_and_the_frontier_by_memory(monkeypatch):
    monkeypatch.setattr(charts, "memory_name", lambda case: families.MEMORY_NAMES["device"])
    rows = [row({"t": "slow"}, peak=2 * GB, rate=(5.0, "tokens/s"), technique={"t": "slow", "u": "a" * 40}),
            row({"t": "lean"}, peak=1 * GB, rate=(4.0, "tokens/s"), technique={"t": "lean", "u": "b"}),
            row({"t": "best"}, peak=3 * GB, rate=(9.0, "tokens/s"), technique={"t": "best", "u": "b"})]
    (chart,) = charts.charts_for("tricks", rows)
    got = charts.spec(chart, lambda r: f"#{r.record.params['t']}")
    assert got["x_label"] == "peak device memory gain (GB)" and got["y_label"] == "tokens/s"
    first = got["points"][0]
    assert (first["x"], first["y"], first["href"], first["front"]) == (2.0, 5.0, "#slow", True)
    assert first["title"] == ["t=slow", "u=" + "a" * 40]  # wrapped for a 390 px screen, between words only
    assert charts.title_lines("allocator=default budget=16GB technique=bf16_autocast+checkpoint+cpu-offload") == [
        "allocator=default budget=16GB", "technique=bf16_autocast+checkpoint+cpu-offload"]  # never at a hyphen
    assert first["lines"] == ["5.00 tokens/s", "2.00 GB peak device memory gain", "on the Pareto frontier"]
    assert (first["colour"], first["marker"]) == (charts.COLOURS[0], "circle")
    rows.append(row({"t": "worse"}, peak=3 * GB, rate=(1.0, "tokens/s"), technique={"t": "worse", "u": "c"}))
    last = charts.spec(charts.charts_for("tricks", rows)[0], lambda r: "")["points"][-1]
    assert last["lines"] == ["1.00 tokens/s", "3.00 GB peak device memory gain"] and not last["front"]
    assert got["frontier"] == [{"x": 1.0, "y": 4.0}, {"x": 2.0, "y": 5.0}, {"x": 3.0, "y": 9.0}]


def test_a_workload_of_more_than_a_dozen_points_is_split_by_the_parameter_that_makes_fewest_charts():
    rows = [row({"b": b, "t": t}, peak=(t + 1) * GB, rate=(1.0 + t, "tokens/s"), technique={"b": b, "t": t})
            for b in ("16GB", "24GB", "card") for t in range(10)]
    got = charts.charts_for("made_up", rows)
    assert [(c["title"], len(c["points"])) for c in got] == [
        ("made_up on h100, b=16GB", 10), ("made_up on h100, b=24GB", 10), ("made_up on h100, b=card", 10)]
    assert all(p.row.technique["b"] == c["title"].rsplit("=", 1)[1] for c in got for p in c["points"])


def test_ways_no_parameter_groups_are_split_into_runs_of_like_size_by_peak():
    rows = [row({"t": t}, peak=(14 - t) * GB, rate=(1.0, "tokens/s"), technique={"t": t}) for t in range(14)]
    got = charts.charts_for("made_up", rows)
    assert [len(c["points"]) for c in got] == [7, 7]
    assert [c["title"] for c in got] == ["made_up on h100, peaks 1.00 GB to 7.00 GB",
                                         "made_up on h100, peaks 8.00 GB to 14.0 GB"]
    assert sorted(p.peak for c in got for p in c["points"]) == sorted(r.peak() for r in rows)  # each point once
    assert len(charts.charts_for("made_up", rows[:charts.MOST])) == 1  # a dozen stay one chart


def test_gpu_boxes_take_the_first_columns_of_the_table_a_cpu_box_the_last():
    cpu = row({"n": 1}, machine="cpu", env=("cpu-amd-epyc", "-"), gpu_memory=None)
    gpu = row({"n": 1}, machine="z", env=("nvidia-z", "-"))
    assert tableview.family_table([cpu, gpu])["envs"] == [("nvidia-z", "-"), ("cpu-amd-epyc", "-")]
