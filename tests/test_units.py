"""One way to write a figure (three significant digits, one decimal at least), bytes (GB, 10^9
bytes; MB below 1 GB), rates (datasheet units) and times, and no page, table, gate or error
message that writes bytes another way."""
import ast
import re
from pathlib import Path

import pytest

from harness.measure.guards.budget import resolve
from harness import units
from harness.units import figure, gb, gbs, minutes, ms, rate

from conftest import fake_devices

HARNESS = Path(__file__).resolve().parents[1] / "harness"
H100_MEMORY = 81559 * 2**20  # what NVML reports for an H100 80GB: 85.5 x 10^9 bytes


def test_a_figure_keeps_three_significant_digits_and_one_decimal_at_least():
    assert [figure(v) for v in (1234.56, 12.34, 1.234, 0.1234, 0.02346, 0)] == \
        ["1,234.6", "12.3", "1.23", "0.123", "0.0235", "0.0"]
    assert figure(-3.2) == "-3.20"
    # rounding up to the next power of ten takes that power's decimals
    assert figure(9.996) == "10.0" and figure(0.09996) == "0.100" and figure(0.9996) == "1.00"


def test_bytes_are_decimal_gb():
    assert gb(80e9) == "80.0 GB"
    assert gb(2**30) == "1.07 GB"  # a GiB is 1.07 GB, never "1.0"
    assert gb(H100_MEMORY) == "85.5 GB"
    assert gb(1_234.5e9) == "1,234.5 GB"
    assert (units.MiB, units.GiB) == (1024**2, 1024**3)  # buffers are cut in binary sizes, written in GB
    assert gb(units.GiB) == "1.07 GB"


def test_below_one_gb_is_written_in_mb():
    assert gb(5e8) == "500.0 MB"
    assert gb(64 * 10**6) == "64.0 MB"
    assert gb(2**20) == "1.05 MB"
    assert gb(999.96e6) == "1.00 GB"  # rounds to 1,000.0 MB: written as GB instead
    assert gb(0) == "0.0 MB"


def test_nothing_is_a_dash():
    assert gb(None) == "-"
    assert gbs([]) == "-" and gbs([None, None]) == "-"


def test_several_figures_share_one_unit_written_once():
    assert gbs([4.8e9, 5.6e9]) == "4.80 / 5.60 GB"
    assert gbs([0.5e9, 1.2e9]) == "0.500 / 1.20 GB"  # the largest picks the unit
    assert gbs([3e8, 7e8]) == "300.0 / 700.0 MB"
    assert gbs([None, 5.6e9]) == "5.60 GB"


def test_rates_keep_their_datasheet_units():
    assert rate(2.5e12, "flops") == "2.50 TFLOP/s"
    assert rate(3.35e12, "bytes") == "3,350.0 GB/s"
    assert rate(25e9, "h2d_bytes") == "25.0 GB/s host-to-device"
    assert rate(12_345, "tokens") == "12.3 k tokens/s"
    assert rate(2e6, "edges") == "2.00 M edges/s"
    assert rate(23.5, "samples") == "0.0235 k samples/s"  # never 0.0
    with pytest.raises(KeyError):
        rate(1.0, "steps")


def test_a_step_time_is_in_milliseconds_whatever_its_size_and_a_wall_time_in_minutes():
    assert ms(5e-5) == "0.0500 ms"
    assert ms(0.0123) == "12.3 ms"
    assert ms(2.2771) == "2,277.1 ms"
    assert minutes(750) == "12.5 min" and minutes(90) == "1.50 min"


def test_messages_write_bytes_through_units():
    from harness.measure.outcomes import Skip
    from harness.measure.guards.safety import ManagedGuard, OversubscriptionRefused
    from harness.measure.guards.workingset import need_host

    with pytest.raises(OversubscriptionRefused, match=r"allocation of 60\.0 GB refused.*cap of 90\.0 GB"):
        ManagedGuard(free_bytes=100 * 10**9, fraction=0.9, allow_oversubscription=False,
                     allocated=40 * 10**9).check(60 * 10**9)
    with pytest.raises(Skip, match=r"needs 30\.0 GB of host memory; the limit is 0\.5 of the 40\.0 GB available "
                                   r"\(20\.0 GB\)"):
        need_host(30 * 10**9, "x", available=40 * 10**9)
    with pytest.raises(Skip, match=r"larger than this card \(25\.8 GB\)"):
        resolve("40GB", 24 * 2**30, None)



def test_the_box_is_described_in_gb_and_asvs_key_keeps_its_form():
    from harness.measure.instruments.devices import describe
    from harness.measure.instruments.environment import snapshot
    from harness.measure.instruments.machine import machine_info

    d = fake_devices("NVIDIA H100 80GB HBM3", total=H100_MEMORY)
    assert describe(d) == "1 x NVIDIA H100 80GB HBM3 (85.5 GB, sm_90), driver 580.159.04, CUDA 13.0"
    # asv files results by this field: the form results/ already holds, or the history would split
    assert machine_info(snapshot(d))["gpu"].startswith("1 x NVIDIA H100 80GB HBM3 (81559 MiB, sm_90), ")


# -- no other way of writing bytes left in the source ---------------------------------------------

BINARY_UNIT = re.compile(r"\b[KMGTP]iB\b")
# Divisors that turn bytes into a figure someone wrote by hand: f"{n / 2**30:.1f} GiB". (10^6 and
# 10^9 are left out: they also make millions of parameters or GFLOP; UNIT_AFTER catches those.)
BYTE_SCALES = {2**20, 2**30}
BYTE_NAMES = {"GB", "MB", "GiB", "MiB"}
# A unit of bytes, time or rate written right after a figure (scaled, or with a format spec) in
# an f-string: f"{n / 1e9:.1f} GB", f"{t * 1e3:.3f} ms"; a name such as f"{n}GB" (the budget
# "16GB") is not a figure.
UNIT_AFTER = re.compile(r"^\s?([KMGT]i?B\b|ms\b|µs\b|min\b|(k |M |T)?[A-Za-z]+/s\b)")
# (file, function) that may still write a binary unit, and why.
ALLOWED = {("measure/instruments/machine.py", "_asv_memory"),  # asv's stored key, not a figure shown as such
           ("workloads/search/predict.py", None)}  # the patterns of torch's own out-of-memory message, read


def _number(node):
    """A constant or a constant expression (2**30, 1 << 20, 1e9), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.Mult, ast.LShift)):
        left, right = _number(node.left), _number(node.right)
        if left is not None and right is not None:
            return left ** right if isinstance(node.op, ast.Pow) else left * right if isinstance(node.op, ast.Mult) \
                else left << right
    return None


def _scale(node) -> bool:
    return (isinstance(node, ast.Name) and node.id in BYTE_NAMES) or _number(node) in BYTE_SCALES


def _offences(path: Path, root: Path = HARNESS) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    rel = path.relative_to(root).as_posix()
    found = []

    def visit(node, function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        allowed = (rel, function) in ALLOWED
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and BINARY_UNIT.search(node.value) and not allowed):
            found.append(f"{rel}:{node.lineno}: {node.value.strip()[:70]!r}")
        if (isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.BinOp)
                and isinstance(node.value.op, (ast.Div, ast.FloorDiv)) and _scale(node.value.right) and not allowed):
            found.append(f"{rel}:{node.lineno}: bytes scaled by hand in an f-string: {ast.unparse(node.value)}")
        if isinstance(node, ast.JoinedStr) and not allowed:
            for figure, text in zip(node.values, node.values[1:]):
                if (isinstance(figure, ast.FormattedValue) and isinstance(text, ast.Constant)
                        and (figure.format_spec or isinstance(figure.value, ast.BinOp))
                        and UNIT_AFTER.match(text.value)):
                    found.append(f"{rel}:{node.lineno}: a unit written by hand: "
                                 f"{{{ast.unparse(figure.value)}}}{text.value[:4]}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def python_sources():
    """Every module of the harness but units.py itself (where bytes are written) and asv's vendored code."""
    return [p for p in sorted(HARNESS.rglob("*.py")) if "asv_vendor" not in p.parts and p != HARNESS / "units.py"]


def test_the_source_check_catches_hand_written_bytes(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(n):\n    """GiB in a docstring is prose."""\n'
                   '    return f"{n / 2**30:.1f} GiB", f"{n / GB:.1f}", "12 MiB", f"{n // (1 << 20)} M"\n'
                   'SIZE = 2 * 2**30  # a size, not text\n'
                   'def g(n, p):\n    return f"{n / 1e9:,.1f} GB", f"{p / 1e6:.1f} M parameters", f"{p}GB budget"\n'
                   'def h(t, r):\n'
                   '    return f"{t * 1e3:,.3f} ms", f"{r / 1e12:.1f} TFLOP/s", f"{t / 60:.1f} min", f"{t}s"\n')
    assert sorted(o.split(": ", 1)[1] for o in _offences(bad, tmp_path)) == [
        "'12 MiB'", "'GiB'", "a unit written by hand: {n / 1000000000.0} GB",
        "a unit written by hand: {n / 2 ** 30} GiB",
        "a unit written by hand: {r / 1000000000000.0} TFL", "a unit written by hand: {t * 1000.0} ms",
        "a unit written by hand: {t / 60} min",
"bytes scaled by hand in an f-string: n / 2 ** 30",
        "bytes scaled by hand in an f-string: n / GB", "bytes scaled by hand in an f-string: n // (1 << 20)"]


def test_no_user_facing_text_writes_gib_or_mib():
    offences = [o for p in python_sources() for o in _offences(p)]
    templates = sorted((HARNESS / "report" / "pages" / "templates").glob("*"))
    offences += [f"{t.name}: {m.group()}" for t in templates for m in BINARY_UNIT.finditer(t.read_text())]
    assert offences == [], "write bytes, times and rates with harness.units:\n" + "\n".join(offences)


def test_units_stays_the_lowest_layer():
    tree = ast.parse(Path(units.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "math"}, imported


def test_a_size_just_under_1000_mb_stays_in_mb_at_its_digits():
    assert units.gb(999.7 * units.MB) == "999.7 MB"  # rounded whole it would be 1000: still under
    assert units.gb(999.96 * units.MB) == "1.00 GB"  # rounded to its digits it is 1000 MB: a GB


def test_a_rate_of_one_unit_is_written_to_three_digits():
    assert units.rate(1e12, "flops") == "1.00 TFLOP/s"
    assert units.rate(1.25e12, "flops") == "1.25 TFLOP/s"
    assert units.rate(0.5e12, "flops") == "0.500 TFLOP/s"
