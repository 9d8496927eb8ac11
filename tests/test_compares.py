"""docs/results/compares.md: every compare on file, its plan, hosts, times and the gate's verdict
over its records, made from planted compare folders (never from what happens to be committed)."""
import json
import re
from pathlib import Path

from gate_records import H200, record, write
from harness.report import compares

MACHINE = "nvidia-h100-80gb-hbm3-x1"
BASE_ROUNDS = (0.0100, 0.01001, 0.00999)
CASES = ({"probe": "device_copy"}, {"probe": "matmul_fp32"})


def side(folder: Path, commit: str, medians, *, cases=CASES, host="host-a", t0=0.0, flat=False, **kw) -> None:
    """One side's rounds of ``cases``, a file per round, as a compare files them (``flat``: the
    files straight under the side's folder, as compares filed them before they had a store)."""
    where = folder if flat else folder / "records" / MACHINE
    where.mkdir(parents=True)
    for r, median in enumerate(medians, 1):
        recs = [record(params=p, median=median, n=20, host=host, created=t0 + 10 * r + i, commit=commit,
                       run=f"20990101T000000-abcdef-r{r}", **kw) for i, p in enumerate(cases)]
        write(where / f"{commit[:8]}-20990101T000000-abcdef-r{r}.jsonl", recs)


def state(folder: Path, base: str, new: str, cases: int, **kw) -> None:
    data = {"commits": {"base": base, "new": new}, "revs": [base[:7], new[:7]], "rounds": 3,
            "benches": [{"name": f"b{i}"} for i in range(cases)], "threshold": 0.0, "measured_s": 600.0,
            "sittings": 2, "shared_runs": 0,
            "round_s": {f"{s} r{r}": 90.0 + r for s in ("base", "new") for r in (1, 2, 3)}}
    (folder / "compare.json").write_text(json.dumps({**data, **kw}))


def compare(root: Path, name: str, base: str, new: str, new_medians, *, planned=None, new_kw=None, state_kw=None,
            **kw) -> Path:
    folder = root / "compare" / MACHINE / name
    side(folder / "base", base, BASE_ROUNDS, **kw)
    side(folder / "new", new, new_medians, **{**kw, **(new_kw or {})})
    state(folder, base, new, planned or len(kw.get("cases", CASES)), **(state_kw or {}))
    return folder


def only(root: Path) -> compares.Compare:
    (found,) = compares.find(root)
    return found


def test_an_a_a_compare_reads_as_such_and_passes(tmp_path):
    compare(tmp_path, "aa", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001])
    c = only(tmp_path)
    assert c.a_a and c.done and (c.cases, c.rounds, c.runs, c.planned) == (2, 3, 12, 12)
    assert c.verdict.startswith("PASS: 0 regression(s) in 2 case(s)") and c.flagged == ()
    assert c.hosts == ("host-a",) and c.measured_s == 600.0 and c.round_s == (91.0, 93.0)


def test_a_slowdown_of_every_new_round_fails_and_names_its_case(tmp_path):
    compare(tmp_path, "ab", "a" * 40, "b" * 40, [m * 1.03 for m in BASE_ROUNDS])
    c = only(tmp_path)
    assert not c.a_a and c.verdict.startswith("FAIL: 2 regression(s)")
    assert len(c.flagged) == 2 and all("slower" in f and "time" in f for f in c.flagged)
    page = compares.page([c], "<!-- generated -->")
    assert "aaaaaaaa → bbbbbbbb |" in page and "(A/A)" not in page
    assert "`ab` flagged:" in page and "probe\\=matmul\\_fp32" in page


def test_a_compare_in_progress_says_how_many_runs_are_on_record(tmp_path):
    compare(tmp_path, "half", "a" * 40, "a" * 40, BASE_ROUNDS, planned=4)
    c = only(tmp_path)
    assert not c.done and (c.runs, c.planned) == (12, 24)
    assert "12 of 24 (not finished)" in compares.page([c], "")


def test_a_compare_filed_before_its_state_was_kept_is_read_from_its_records(tmp_path):
    folder = tmp_path / "compare" / MACHINE / "old"
    side(folder / "base", "a" * 40, BASE_ROUNDS, flat=True)
    side(folder / "new", "c" * 40, [m * 1.03 for m in BASE_ROUNDS], flat=True)
    c = only(tmp_path)
    assert c.commits == ("a" * 40, "c" * 40) and (c.cases, c.rounds, c.runs, c.planned) == (2, 3, 12, 12)
    assert c.measured_s is None and c.round_s is None and c.verdict.startswith("FAIL")
    (row,) = [line for line in compares.page([c], "").splitlines() if line.startswith("| `old`")]
    cells = [cell.strip() for cell in row.split("|")]
    assert cells[6:8] == ["not kept", "not kept"]  # measuring, one round
    assert cells[3:5] == ["2 × 3", "12"] and c.shared_runs == 0 and "beside" not in row


def test_an_old_compare_cut_short_is_taken_as_it_stands(tmp_path):
    """Without its state no plan is known: the runs on record are the compare, and NEW's short side counts."""
    folder = tmp_path / "compare" / MACHINE / "old"
    side(folder / "base", "a" * 40, BASE_ROUNDS, flat=True)
    side(folder / "new", "a" * 40, BASE_ROUNDS[:2], flat=True)
    c = only(tmp_path)
    assert (c.rounds, c.runs, c.planned) == (3, 10, 10) and c.done


def test_a_round_time_missing_from_the_state_is_not_quoted(tmp_path):
    folder = compare(tmp_path, "aa", "a" * 40, "a" * 40, BASE_ROUNDS)
    state(folder, "a" * 40, "a" * 40, 2, round_s={"base r1": 90.0})
    assert only(tmp_path).round_s is None


def test_the_folders_own_report_is_quoted_beside_the_verdict_made_again(tmp_path):
    folder = compare(tmp_path, "ab", "a" * 40, "b" * 40, BASE_ROUNDS)
    assert only(tmp_path).reported == ""
    (folder / "interim-report.md").write_text("## head\n\n**PASS\\: 0 regression\\(s\\) in 1 case\\(s\\) "
                                              "compared\\; 0 retired**\n")
    assert only(tmp_path).reported == "PASS: 0 regression(s) in 1 case(s) compared (interim)"
    (folder / "report.md").write_text("x\n**FAIL\\: 1 regression\\(s\\) \\(1 slower\\) in 2 case\\(s\\) "
                                      "compared\\; 0 retired**\n")
    c = only(tmp_path)
    assert c.reported == "FAIL: 1 regression(s) (1 slower) in 2 case(s) compared"
    assert c.verdict.startswith("PASS") and c.reported in compares.page([c], "")


def test_compares_measured_at_once_on_one_host_are_marked_beside_each_other(tmp_path):
    compare(tmp_path, "g0", "a" * 40, "a" * 40, BASE_ROUNDS)
    compare(tmp_path, "g1", "a" * 40, "a" * 40, BASE_ROUNDS)
    compare(tmp_path, "later", "a" * 40, "a" * 40, BASE_ROUNDS, t0=1000.0)
    compare(tmp_path, "elsewhere", "a" * 40, "a" * 40, BASE_ROUNDS, host="host-b")
    found = {c.name: c for c in compares.find(tmp_path)}
    assert [o.name for o in compares.beside(found["g0"], list(found.values()))] == ["g1"]
    assert compares.beside(found["later"], list(found.values())) == []
    assert compares.beside(found["elsewhere"], list(found.values())) == []
    assert compares.page(list(found.values()), "").count("measured beside 1 other compare(s) on this host") == 2



def test_compares_whose_times_overlap_in_any_way_are_beside_each_other():
    def at(name, first, last):
        return compares.Compare(machine=MACHINE, name=name, commits=("a", "a"), cases=1, rounds=3, runs=6, planned=6,
                                hosts=("host-a",), measured_s=None, round_s=None, shared_runs=0, verdict="", flagged=(),
                                reported="", compared=1, span=(first, last))
    c = at("c", 10.0, 20.0)
    others = [c, at("inside", 12.0, 18.0), at("around", 5.0, 25.0), at("ends-as-it-begins", 0.0, 10.0),
              at("begins-as-it-ends", 20.0, 30.0), at("before", 0.0, 9.0), at("after", 21.0, 30.0)]
    assert [o.name for o in compares.beside(c, others)] == ["inside", "around", "ends-as-it-begins",
                                                            "begins-as-it-ends"]
    assert [o.name for o in compares.beside(others[1], others)] == ["c", "around"]


def test_a_folder_with_a_side_of_no_record_is_left_out_and_none_found_says_so(tmp_path):
    folder = tmp_path / "compare" / MACHINE / "empty"
    (folder / "base" / "records").mkdir(parents=True)
    (folder / "new" / "records").mkdir(parents=True)
    assert compares.find(tmp_path) == []
    side(tmp_path / "compare" / MACHINE / "new-only" / "new", "a" * 40, BASE_ROUNDS)
    side(tmp_path / "compare" / MACHINE / "base-only" / "base", "a" * 40, BASE_ROUNDS)
    assert compares.find(tmp_path) == []
    assert "No compare is on file yet." in compares.page([], "")


def test_the_a_a_tally_counts_flagged_lines_apart_for_compares_that_shared_their_host(tmp_path):
    compare(tmp_path, "alone", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001], t0=5000.0)
    compare(tmp_path, "g0", "a" * 40, "a" * 40, [m * 1.03 for m in BASE_ROUNDS])  # a false flag, on a shared host
    compare(tmp_path, "g1", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001])
    compare(tmp_path, "ab", "a" * 40, "b" * 40, [m * 1.03 for m in BASE_ROUNDS], t0=9000.0)  # not A/A: not counted
    found = compares.find(tmp_path)
    assert compares.a_a_tally(found, found) == (
        "A/A compares with the host to themselves: 1, over 2 case verdict(s), 0 line(s) flagged; "
        "A/A compares beside other compares on their host: 2, over 4 case verdict(s), 2 line(s) flagged.")
    assert compares.a_a_tally([c for c in found if c.name == "ab"], found) == "No A/A compare on this kind yet."


PLANTED = tuple({"probe": f"planted_{i}"} for i in range(6))  # cases no committed history knows


def test_the_verdict_judges_every_round_not_the_last_alone(tmp_path):
    compare(tmp_path, "one-bad-round", "a" * 40, "b" * 40, [0.01, 0.010005, 0.0115], cases=PLANTED[:1])
    assert only(tmp_path).verdict.startswith("PASS")  # the last round alone reads 15% slower


def test_the_floors_are_learned_from_bases_rounds_and_the_states_threshold_raises_them(tmp_path):
    folder = compare(tmp_path, "ab", "a" * 40, "b" * 40, [m * 1.03 for m in BASE_ROUNDS], cases=PLANTED[:1])
    assert only(tmp_path).verdict.startswith("FAIL")  # under the 5% default floor, over BASE's rounds' 1%
    state(folder, "a" * 40, "b" * 40, 1, threshold=0.05)
    assert only(tmp_path).verdict.startswith("PASS")


def test_a_compare_the_gate_cannot_judge_says_why(tmp_path):
    compare(tmp_path, "kinds", "a" * 40, "b" * 40, BASE_ROUNDS, new_kw={"gpu": H200})
    c = only(tmp_path)
    assert c.verdict.startswith("not comparable: BASE is nvidia-h100") and c.compared == 0 and c.flagged == ()


def test_a_host_no_record_names_is_left_out_of_the_hosts(tmp_path):
    compare(tmp_path, "cpu", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001], gpu=None, host="")
    assert only(tmp_path).hosts == ()


def test_an_unreadable_report_is_no_report(tmp_path):
    folder = compare(tmp_path, "ab", "a" * 40, "b" * 40, BASE_ROUNDS)
    (folder / "report.md").write_bytes(b"**PASS\\: \xff**\n")
    (folder / "interim-report.md").write_text("no verdict line here\n")
    assert only(tmp_path).reported == ""


def test_the_page_says_what_each_compare_is(tmp_path):
    compare(tmp_path, "20990101T0000-aa", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001])
    compare(tmp_path, "20990101T0100-ab", "a" * 40, "b" * 40, [m * 1.03 for m in BASE_ROUNDS], cases=PLANTED,
            planned=7, t0=5000.0, state_kw={"shared_runs": 2, "measured_s": 75.0, "round_s": {}})
    (tmp_path / "compare" / MACHINE / "20990101T0000-aa" / "report.md").write_text("**PASS\\: 0 regression\\(s\\)**\n")
    assert compares.page(compares.find(tmp_path), "<!-- generated -->") == PAGE


PAGE = ("# Compares on one box: A/A and planted regressions\n\n<!-- generated -->\n\n" + compares.INTRO + """

## nvidia\\-h100\\-80gb\\-hbm3\\-x1

A/A compares with the host to themselves: 1, over 2 case verdict(s), 0 line(s) flagged.

| folder             | BASE → NEW                |   cases × rounds |          runs on record | hosts                                  |   measuring |            one round | verdict                                                | its report said       |
|:-------------------|:--------------------------|-----------------:|------------------------:|:---------------------------------------|------------:|---------------------:|:-------------------------------------------------------|:----------------------|
| `20990101T0000-aa` | aaaaaaaa → aaaaaaaa (A/A) |            2 × 3 |                      12 | host-a                                 |    10.0 min | 1.52 min to 1.55 min | PASS: 0 regression(s) in 2 case(s) compared            | PASS: 0 regression(s) |
| `20990101T0100-ab` | aaaaaaaa → bbbbbbbb       |            7 × 3 | 36 of 42 (not finished) | host-a; 2 run(s) beside other GPU work |    1.25 min |             not kept | FAIL: 6 regression(s) (6 slower) in 6 case(s) compared | no report             |

`20990101T0100-ab` flagged:
- ceilings probe\\=planted\\_0\\: time 10\\.0 ms → 10\\.3 ms \\(slower \\(rank p\\=1\\.8e\\-21\\)\\)
- ceilings probe\\=planted\\_1\\: time 10\\.0 ms → 10\\.3 ms \\(slower \\(rank p\\=1\\.8e\\-21\\)\\)
- ceilings probe\\=planted\\_2\\: time 10\\.0 ms → 10\\.3 ms \\(slower \\(rank p\\=1\\.8e\\-21\\)\\)
- ceilings probe\\=planted\\_3\\: time 10\\.0 ms → 10\\.3 ms \\(slower \\(rank p\\=1\\.8e\\-21\\)\\)
- ceilings probe\\=planted\\_4\\: time 10\\.0 ms → 10\\.3 ms \\(slower \\(rank p\\=1\\.8e\\-21\\)\\)
- ... and 1 more
""")  # noqa: E501  (the page as it is written: a table's rows are as wide as their cells)


def test_states_of_older_compares_and_hostile_ones_are_read_for_what_they_hold(tmp_path):
    folder = compare(tmp_path, "old-state", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001],
                     state_kw={"rounds": 6,
                               "round_s": {f"{s} r{r}": 90.0 for s in ("base", "new") for r in range(1, 7)}})
    data = json.loads((folder / "compare.json").read_text())
    del data["shared_runs"]
    (folder / "compare.json").write_text(json.dumps(data))
    c = only(tmp_path)
    assert (c.rounds, c.planned, c.shared_runs, c.round_s) == (6, 24, 0, (90.0, 90.0))
    assert re.search(r"\|\s+1\.50 min \|", compares.page([c], ""))
    (folder / "compare.json").write_text(json.dumps({**data, "benches": "not a list"}))
    c = only(tmp_path)
    assert (c.cases, c.rounds, c.planned, c.measured_s) == (2, 3, 12, None)


def test_the_page_lists_every_host_and_five_flagged_lines_without_more(tmp_path):
    compare(tmp_path, "ab", "a" * 40, "b" * 40, [m * 1.03 for m in BASE_ROUNDS], cases=PLANTED[:5])
    compare(tmp_path, "b", "a" * 40, "a" * 40, [0.010005, 0.009995, 0.01001], host="host-b")
    ab, b = compares.find(tmp_path)
    page = compares.page([ab], "")
    assert page.count("\n- ") == 5 and "more" not in page
    merged = compares.Compare(**{**ab.__dict__, "hosts": ("host-a", "host-b")})
    assert "| host-a, host-b" in compares.page([merged], "")


def test_an_empty_page_is_the_heading_the_intro_and_a_line_saying_so():
    assert compares.page([], "<!-- g -->") == ("# Compares on one box: A/A and planted regressions\n\n<!-- g -->\n\n"
                                               f"{compares.INTRO}\n\nNo compare is on file yet.\n")


def test_a_host_bound_steps_floor_takes_the_scatter_of_the_other_compares_on_file(tmp_path):
    """As ``harness compare`` judges: pageable copies' processes land in a few speeds, which three
    rounds of BASE may not show, and the earlier compares of the same results folder do."""
    pageable = {"case": "pageable", "cases": ({"direction": "h2d", "size_mib": 256},),
                "work": {"h2d_bytes": 256 * 2**20}}
    judged = tmp_path / "compare" / MACHINE / "b-judged"
    side(judged / "base", "c" * 40, (0.0316, 0.0299, 0.0301), t0=100.0, **pageable)
    side(judged / "new", "c" * 40, (0.0361, 0.0289, 0.0371), t0=110.0, **pageable)
    assert only(tmp_path).verdict.startswith("FAIL")  # BASE's three rounds alone: too tight a floor
    earlier = tmp_path / "compare" / MACHINE / "a-earlier"
    side(earlier / "base", "a" * 40, (0.0314, 0.0338, 0.0331), **pageable)
    side(earlier / "new", "a" * 40, (0.0354, 0.0361, 0.0374), t0=10.0, **pageable)
    assert {c.name: c.verdict for c in compares.find(tmp_path)}["b-judged"].startswith("PASS")
