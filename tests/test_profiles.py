"""Profiles select benchmarks the way asv does: each expression against ``module.Class.method``
followed by the parameter set as Python literals."""
import re

import pytest

from harness.drive.asv import profiles
from harness.drive.commands import todo

FAMILIES = ("ceilings", "unified", "chainer_pool", "parallel", "tricks")


def asv_names() -> list[str]:
    """Every (benchmark, parameter set) as asv names it for --bench matching."""
    return [n for b in todo.benches() for n in b.names()]


def selected(profile: str) -> set[str]:
    exprs = profiles.benchmarks(profile)
    return {n for n in NAMES if not exprs or any(re.search(e, n) for e in exprs)}


NAMES = asv_names()


@pytest.mark.parametrize("profile", ["quick", "standard", "budget", "versions", "fragmentation"])
def test_every_expression_selects_something(profile):
    for expr in profiles.benchmarks(profile):
        assert any(re.search(expr, n) for n in NAMES), f"{profile}: {expr} matches no benchmark"


def test_quick_takes_one_value_per_family_and_standard_holds_quick():
    quick, standard, full = selected("quick"), selected("standard"), selected("full")
    assert {n.split(".")[0] for n in quick} == set(FAMILIES)
    assert quick <= standard < full and full == set(NAMES)
    per_class = {}
    for n in quick:
        per_class.setdefault(n.split(".track_")[0], set()).add(n.partition("(")[2])
    # a GPU class of the quick profile measures one parameter set (its CPU twin, one more)
    assert all(len(sets) == 1 for sets in per_class.values()), per_class


def test_standard_compares_cards_on_every_trick_and_every_ceiling():
    standard = selected("standard")
    from harness.workloads.training.tricks import TECHNIQUES
    for technique in TECHNIQUES:
        assert any(f"tricks.Techniques.track_seconds_per_step('lm', '{technique}')" == n for n in standard)
    assert {n for n in NAMES if n.startswith("ceilings.Device.")} <= standard
    assert not any("WhatFits" in n for n in standard)  # minutes per search: full only


def test_budget_takes_every_way_past_16gb_and_the_cupy_part_is_its_own_list():
    budget = selected("budget")
    # the torch part joins it
    assert set(profiles.expressions(profiles.BUDGET_CUPY)) <= set(profiles.benchmarks("budget"))
    for way in ("device_pool", "managed_pool", "out_of_core", "zero_copy"):
        for times in (1.5, 3.0):
            assert f"unified.Beyond.track_seconds_per_step('{way}', 'stream', '16GB', {times})" in budget
        assert f"unified.Seed000.track_seconds_per_step('{way}', '16GB')" in budget
        assert f"unified.Seed000.track_seconds_per_step('{way}', 'card')" not in budget
    assert "unified.Beyond.track_seconds_per_step('zero_copy', 'stream', '40GB', 1.5)" in budget
    assert "unified.Beyond.track_seconds_per_step('zero_copy', 'stream', '40GB', 3.0)" not in budget  # host memory
    assert {"chainer_pool.MlpBeyond.track_seconds_per_step('device_pool')",
            "chainer_pool.MlpBeyond.track_seconds_per_step('managed_pool')"} <= budget


def test_budget_holds_the_whole_of_seed_001s_and_002s_what_fits_tables():
    # The seeds' pages show every technique under every budget: a cell no profile fills would stay
    # "not run" with nothing in `harness todo` to say so.
    fits = {n for n in NAMES if n.startswith(("tricks.WhatFits.", "tricks.WhatFitsSequence."))}
    assert any("('checkpoint', '40GB')" in n for n in fits) and fits <= selected("budget")


def test_versions_takes_only_cupy_and_chainer_cases_each_pool_and_way():
    versions = selected("versions")
    assert versions and all(n.startswith(("unified.", "chainer_pool.")) for n in versions)
    assert not any("TorchGcn" in n or "Cpu" in n for n in versions)  # torch and CPU twins: not the stacks compared
    for way in ("device_pool", "managed_pool", "out_of_core", "zero_copy"):
        assert f"unified.Seed000.track_seconds_per_step('{way}', '16GB')" in versions
    for pool in ("device_pool", "managed_pool"):
        assert f"chainer_pool.Gcn.track_seconds_per_step('{pool}', 16384)" in versions
        assert f"chainer_pool.Mlp.track_seconds_per_step('{pool}', 4096)" in versions
    assert "unified.OutOfCore.track_seconds_per_step('stream', 0.1)" in versions


def test_an_unknown_profile_names_the_choices():
    with pytest.raises(ValueError, match="quick, standard, budget, versions, fragmentation, full"):
        profiles.benchmarks("fast")


def test_budget_starts_with_seed_003_at_16gb_and_runs_only_one_gpu_rows():
    (first,) = profiles.expressions(profiles.BUDGET_TORCH[:1])
    hits = {n.split(".track_")[1] for n in NAMES if re.search(first, n)}
    ways_out = ("fp32", "fp16_autocast", "bf16_autocast", "bf16_params", "checkpoint", "channels_last", "save_on_cpu",
                "cpu_offload")
    assert hits == {f"{m}('resnet50_1024', '{t}', '16GB')" for m in ("seconds_per_step", "peak_device_bytes")
                    for t in ways_out}
    budget = selected("budget")
    assert "tricks.Seed003Budget.track_peak_device_bytes('resnet50_1024', 'fp32', '16GB')" in budget
    assert "tricks.Seed003Accumulation.track_seconds_per_step('resnet50_2048', 1, '80GB')" in budget
    parallel = {n for n in budget if n.startswith("parallel.")}
    for name in ("ResnetDataParallel.track_seconds_per_step('fsdp', 1, 2048)",
                 "LmDataParallel.track_seconds_per_step('dp', 1)", "LmSingle.track_seconds_per_step",
                 "ResnetSingle.track_seconds_per_step(224)"):
        assert f"parallel.{name}" in parallel
    assert not any(re.search(r"\('\w+', [248][,)]", n) or "ModelParallel" in n or "Pipeline" in n or "Cpu" in n
                   for n in parallel)

# -- the profiles as they were matched by hand, kept literally: the declarations must select the
# same benchmarks (asv's order of a profile's expressions may change, the set it runs may not) ---------

OLD_CPU = [r"^ceilings\.Host\.", r"^chainer_pool\.\w+Cpu\.", r"^parallel\.LmCpu",
           r"^tricks\.TricksCpu\.\w+\('(fp32|tf32|checkpoint|pad_longest|seq_cap|cpu_embedding|tied_embeddings|"
           r"save_on_cpu|cpu_offload|drop_references|keep_references|"
           # the newer knobs', but for those that compile on the first step
           r"adafactor|sgd_momentum|lora|attn_eager|attn_flash|chunked_loss)'\)"]
OLD_QUICK = [
    r"^ceilings\.Host\.\w+\('host_copy'\)", r"^ceilings\.Device\.\w+\('device_copy'\)",
    r"^unified\.Allocators\.\w+\('managed_pool', 'stream', 0\.1\)",
    r"^chainer_pool\.GcnCpu\.", r"^chainer_pool\.Gcn\.\w+\('managed_pool', 16384\)",
    r"^parallel\.LmCpuSingle\.", r"^parallel\.LmSingle\.",
    r"^tricks\.TricksCpu\.\w+\('fp32'\)", r"^tricks\.Techniques\.\w+\('lm', 'fp32'\)",
]
OLD_STANDARD = OLD_CPU + [
    r"^ceilings\.(Device|Peer|Pageable)\.",
    r"^unified\.Allocators\.\w+\('\w+', 'stream', 0\.1\)", r"^unified\.OutOfCore\.\w+\('stream', 0\.1\)",
    r"^unified\.Seed\.\w+\(0\.4\)",
    r"^chainer_pool\.(Gcn|TorchGcn)\.\w+\(('\w+', )?16384\)", r"^chainer_pool\.Mlp\.\w+\('\w+', 4096\)",
    r"^parallel\.LmSingle\.", r"^parallel\.ResnetSingle\.\w+\(1024\)",
    r"^tricks\.Techniques\.\w+\('lm', ",
    r"^tricks\.ResnetSeed\.\w+\('resnet50_1024', ",
    r"^tricks\.ResnetSeed\.\w+\('resnet50_2048', '(fp32|bf16_autocast|checkpoint)'\)",
]
OLD_BUDGET_CUPY = [
    r"^unified\.OutOfCore\.", r"^unified\.Beyond\.\w+\('\w+', '\w+', '16GB', ",
    r"^unified\.Beyond\.\w+\('\w+', '\w+', '(24|40)GB', 1\.5\)", r"^unified\.Seed000\.\w+\('\w+', '16GB'\)",
    r"^chainer_pool\.MlpBeyond\.",
]
OLD_WAYS_OUT_LM = "(save_on_cpu|cpu_offload|drop_references|keep_references)"
OLD_SEED_003_COMBINED = [
    r"^tricks\.ResnetSeed\.\w+\('resnet50_(1024|2048)', 'fp32'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_1024', 'tf32', [52], '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_1024', '(tf32|bf16_autocast)\+checkpoint', 10, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_1024', 'bf16_autocast\+(save_on_cpu|cpu_offload)', 10, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_2048', 'bf16_autocast', 2, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_2048', '(bf16|fp16)_autocast\+checkpoint', 10, '16GB'\)",
    r"^tricks\.Seed003Combined\.\w+\('resnet50_2048', 'tf32\+checkpoint', 5, '16GB'\)",
]
OLD_BUDGET_TORCH = [
    r"^tricks\.Seed003Budget\.\w+\('resnet50_1024', '\w+', '16GB'\)",
    r"^tricks\.Seed003Accumulation\.\w+\('resnet50_1024', \d+, '16GB'\)",
    r"^tricks\.Seed003Budget\.\w+\('resnet50_2048', '\w+', '16GB'\)",
    r"^tricks\.Seed003Accumulation\.\w+\('resnet50_2048', \d+, '16GB'\)",
    r"^tricks\.Seed003(Budget|Accumulation)\.\w+\('resnet50_\d+', [^)]*'(24GB|40GB|80GB)'\)",
    OLD_SEED_003_COMBINED[0], r"^tricks\.Seed003Combined\.",
    r"^parallel\.(Resnet|Lm)Single\.",
    r"^parallel\.ResnetDataParallel\.\w+\('(dp|ddp|fsdp)', 1, \d+\)",
    r"^parallel\.LmDataParallel\.\w+\('(dp|ddp|fsdp)', 1\)",
    rf"^tricks\.Techniques\.\w+\('lm', '{OLD_WAYS_OUT_LM}'\)",
    r"^tricks\.LongSequence\.",
    r"^tricks\.WhatFitsSequence\.",
    r"^tricks\.WhatFits\.",
    r"^tricks\.WhatFitsCombined\.",
]
OLD_FRAGMENTATION = [
    r"^fragmentation\.LmShapes\.\w+\('uniform128-4096', '(default|expandable|async|split512)'\)",
    r"^fragmentation\.LmShapes\.\w+\('pow2_128-4096', '(default|expandable|async)'\)",
    r"^fragmentation\.LmEverydayLoop\.\w+\('(uniform128-4096|pow2_128-4096)', '(default|expandable|async)'\)",
    r"^fragmentation\.LmDrawOrder\.\w+\([12], '(default|expandable|async)'\)",
    r"^fragmentation\.LmShapes\.\w+\('fixed1024', 'default'\)",
    r"^fragmentation\.LmBudget\.\w+\('\w+(\.\d)?', '24GB'\)",
    r"^fragmentation\.ResnetShapes\.\w+\('uniform224-1024', '(default|expandable|async)'\)",
    r"^fragmentation\.ResnetShapes\.\w+\('fixed1024', 'default'\)",
    r"^fragmentation\.CupyPools\.",
    r"^fragmentation\.WhatFitsAllocator\.\w+\('expandable'\)",
]
OLD_VERSIONS = [
    r"^unified\.Allocators\.\w+\('\w+', 'stream', 0\.1\)", r"^unified\.OutOfCore\.\w+\('stream', 0\.1\)",
    r"^unified\.Seed000\.\w+\('\w+', '16GB'\)",
    r"^chainer_pool\.Gcn\.\w+\('\w+', 16384\)", r"^chainer_pool\.Mlp\.\w+\('\w+', 4096\)",
]
OLD_PROFILES = {"quick": OLD_QUICK, "standard": OLD_STANDARD, "budget": OLD_BUDGET_CUPY + OLD_BUDGET_TORCH,
                "versions": OLD_VERSIONS, "fragmentation": OLD_FRAGMENTATION, "full": []}


def matched(exprs: list[str]) -> set[str]:
    """The names asv runs for these --bench expressions (none: every one)."""
    return {n for n in NAMES if not exprs or any(re.search(e, n) for e in exprs)}


@pytest.mark.parametrize("profile", list(OLD_PROFILES))
def test_each_profile_selects_exactly_what_its_hand_written_expressions_did(profile):
    assert set(profiles.PROFILES) == set(OLD_PROFILES)
    now, then = selected(profile), matched(OLD_PROFILES[profile])
    assert now == then, (sorted(now - then)[:5], sorted(then - now)[:5])


@pytest.mark.parametrize("part, old", [
    ("CPU", OLD_CPU), ("QUICK", OLD_QUICK), ("STANDARD", OLD_STANDARD), ("BUDGET_CUPY", OLD_BUDGET_CUPY),
    ("BUDGET_TORCH", OLD_BUDGET_TORCH), ("SEED_003_COMBINED", OLD_SEED_003_COMBINED),
    ("FRAGMENTATION", OLD_FRAGMENTATION), ("VERSIONS", OLD_VERSIONS)])
def test_each_named_part_selects_what_it_did_expression_by_expression(part, old):
    # the parts keep their order too: the first expressions of a profile are the ones to run alone first
    declared = getattr(profiles, part)
    assert len(declared) == len(old)
    for select, expr in zip(declared, old):
        assert matched(profiles.expressions([select])) == matched([expr]), (select, expr)
