"""Random and hostile record lines fed to the record reader and the gate: never a traceback;
every line is a valid record or a problem named "file:line", and the gate either compares or
exits 2 with a message that names the file and line.

Example counts come from the hypothesis profile (tests/conftest.py): OOMBENCH_HYPOTHESIS=thorough
runs ten thousand."""
import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.measure.records.store import load_file
from harness.report import gate, markdown

from conftest import FROZEN

REAL = (FROZEN / "records/nvidia-h100-80gb-hbm3-x1/bfa680ee-20261124T003930-ab748b.jsonl").read_text().splitlines()
VALID = json.loads(REAL[0])

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=10**300, max_value=10**400)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
           | st.sampled_from(["x" * 100_000, "\x00\ufffd", "../../etc/passwd", "1e400"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
PATHS = [("case",), ("params",), ("params", "probe"), ("outcome",), ("timing",), ("timing", "median_s"),
         ("timing", "q25_s"), ("timing", "steps"), ("timing", "samples_s"), ("memory",),
         ("memory", "host.max_rss"), ("work", "bytes"), ("gpu_busy",), ("gpu_busy", "fraction"), ("environment",),
         ("environment", "devices"), ("environment", "devices", "gpus"), ("environment", "cpu"),
         ("environment", "host"), ("created",), ("schema",), ("requested_bytes",), ("reason",), ("unknown",)]


def mutated(path: tuple, value) -> str:
    """The valid record with the field at ``path`` replaced by ``value``."""
    rec = json.loads(json.dumps(VALID))
    node = rec
    for name in path[:-1]:
        node = node.setdefault(name, {}) if isinstance(node.get(name, {}), dict) else node
    node[path[-1]] = value
    return json.dumps(rec)


lines = (json_values.map(json.dumps)
         | st.builds(mutated, st.sampled_from(PATHS), json_values)
         | st.text(max_size=200)
         | st.sampled_from(REAL[:3]))
garbage = st.binary(max_size=300)


def contents(draw_lines, blobs) -> bytes:
    return b"\n".join(line.encode("utf-8", "surrogatepass") for line in draw_lines) + b"".join(blobs)


files = st.builds(contents, st.lists(lines, max_size=5), st.lists(garbage, max_size=1))


def non_blank(data: bytes) -> int:
    return sum(1 for line in data.decode(errors="replace").splitlines() if line.strip())


def sane(rec) -> bool:
    """What a read record guarantees to every reader."""
    t = rec.timing
    return ((t is None or (all(math.isfinite(x) and x > 0 for x in (t.median_s, t.q25_s, t.q75_s, t.min_s, t.max_s))
                           and all(math.isfinite(s) and s > 0 for s in t.samples_s)))
            and all(type(v) is int and v >= 0 for v in rec.memory.values()))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(files)
def test_the_reader_keeps_every_line_as_a_record_or_a_named_problem(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.jsonl"
        path.write_bytes(data)
        loaded = load_file(path)
    assert len(loaded.entries) + len(loaded.problems) == non_blank(data)
    assert all(p.startswith(f"{path}:") and p.count("\n") == 0 for p in loaded.problems)
    assert all(sane(r) for r in loaded.records)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(files, st.booleans())
def test_the_gate_compares_or_exits_2_naming_the_file_and_line(data, hostile_base):
    with tempfile.TemporaryDirectory() as tmp:
        real, hostile = Path(tmp) / "real.jsonl", Path(tmp) / "hostile.jsonl"
        real.write_text("\n".join(REAL[:3]) + "\n")
        hostile.write_bytes(data)
        base, new = (hostile, real) if hostile_base else (real, hostile)
        (Path(tmp) / "no-history").mkdir()
        rc, text = gate.gate(base, new, history=Path(tmp) / "no-history")
        problems = load_file(hostile).problems
    assert rc in (0, 1, 2)
    if problems:
        # The refusal names the problem as one line of visible text (runs of spaces as one).
        assert rc == 2 and text.splitlines()[0].startswith(markdown.one_line(f"oombench gate: {problems[0]}"))
    elif rc == 2:
        assert text.startswith("oombench gate:") or "nothing was compared" in text
