"""Ways out as knobs: a way's one name (today's techniques as shorthands, any order of a
combination filed in one, contradictions refused in one line), each knob's piece applied alone
and together on a tiny CPU model, and old names building the trainer they always built."""
import contextlib
import os
from dataclasses import fields

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import cases
from harness.drive.runner import execute
from harness.measure.outcomes import Skip
from harness.report import markdown
from harness.workloads.training import reference
from harness.workloads.training import tricks as trick_steps
from harness.workloads.training import allocator, ways
from harness.workloads.training.ways import Way

from test_tricks import STEP, TINY
from conftest import make_trainer

SINGLE = list(trick_steps.TECHNIQUES)


@pytest.mark.parametrize("name", SINGLE)
def test_every_single_technique_names_itself(name):
    assert ways.parse(name).name == name


@pytest.mark.parametrize("text, way", [
    ("fp32", Way()), ("checkpoint", Way(checkpoint=True)), ("fp32+checkpoint", Way(checkpoint=True)),
    ("checkpoint+bf16_autocast", Way(precision="bf16_autocast", checkpoint=True)),
    ("save_on_cpu+bf16_autocast", Way(precision="bf16_autocast", offload="save_on_cpu")),
    ("expandable+tf32", Way(precision="tf32", allocator="expandable")),
])
def test_shorthands_and_combinations_parse_to_their_knobs(text, way):
    assert ways.parse(text) == way


def test_a_combination_has_one_name_in_the_order_of_the_knobs():
    assert ways.canonical("checkpoint+bf16_autocast") == "bf16_autocast+checkpoint"
    assert ways.canonical("fp32+checkpoint") == "checkpoint"  # fp32 is every knob at its default
    assert ways.canonical("keep_references+cpu_offload+checkpoint+tf32") == \
        "tf32+checkpoint+cpu_offload+keep_references"


@pytest.mark.parametrize("text, match", [
    ("bf16_autocast+fp16_autocast", "sets the precision twice"),
    ("fp32+tf32", "sets the precision twice"),
    ("checkpoint+checkpoint", "sets the checkpoint twice"),
    ("cpu_embedding+tied_embeddings", "sets the embedding twice"),
    ("save_on_cpu+cpu_offload", "sets the offload twice"),
    ("cpu_embedding+cpu_offload", "both decide where the parameters live"),
    ("bf16+checkpoint", "unknown knob 'bf16'"),
    ("checkpoint+", "unknown knob ''"),
    ("", "a way is knob names"),
])
def test_contradictions_and_unknown_knobs_are_refused_in_one_line(text, match):
    with pytest.raises(ValueError, match=match) as e:
        ways.parse(text)
    assert "\n" not in str(e.value)


# The single ways in the order asv's benchmark names and the profiles list them: a registry that
# moved one would rename benchmarks and leave history behind.
ORDER = ["fp32", "tf32", "fp16_autocast", "bf16_autocast", "bf16_params", "checkpoint", "pad_longest", "seq_cap",
         "cpu_embedding", "tied_embeddings", "channels_last", "save_on_cpu", "cpu_offload", "drop_references",
         "keep_references"]
# The newer ways, registered after them: optimizer state, LoRA, attention kernels, compile, the loss.
NEWER = ["adamw8bit", "adam_bf16_state", "adafactor", "sgd_momentum", "lora", "qlora", "attn_eager", "attn_flash",
         "attn_mem_efficient", "compile", "compile_max_autotune", "chunked_loss"]
# Each value's loss tolerance, as the check has held it since before the registry.
TOLERANCES = {"fp32": 2e-3, "checkpoint": 2e-3, "cpu_embedding": 2e-3, "tf32": 1e-2, "fp16_autocast": 2e-2,
              "bf16_autocast": 3e-2, "bf16_params": 5e-2, "tied_embeddings": 0.25, "pad_longest": 0.1, "seq_cap": 0.1,
              "save_on_cpu": 2e-3, "drop_references": 2e-3, "keep_references": 2e-3, "cpu_offload": 2e-3,
              "channels_last": 1e-2, "expandable": 2e-3, "async": 2e-3, "gc0.6": 2e-3, "split512": 2e-3,
              # the newer ways: those held to a criterion of their own (``falls``) have no gap to keep
              "adamw8bit": 5e-2, "adam_bf16_state": 3e-2, "adafactor": 0.0, "sgd_momentum": 0.0, "lora": 0.0,
              "qlora": 0.0,
              "attn_eager": 1e-2, "attn_flash": 1e-2, "attn_mem_efficient": 1e-2, "compile": 1e-2,
              "compile_max_autotune": 1e-2, "chunked_loss": 2e-3}


def test_the_single_ways_keep_their_order_and_every_list_of_them_comes_from_the_registry():
    assert list(trick_steps.TECHNIQUES) == ORDER + NEWER and list(trick_steps.PRECISION_TECHNIQUES) == ORDER[:5]
    assert isinstance(trick_steps.TECHNIQUES, ways.Names)
    assert list(ways.REGISTRY) == ORDER + NEWER + ["expandable", "async", "gc0.6", "split512"]
    assert ways.KNOBS == {"precision": tuple(ORDER[:5]), "checkpoint": ("checkpoint",),
                          "offload": ("save_on_cpu", "cpu_offload"), "data": ("pad_longest", "seq_cap"),
                          "embedding": ("cpu_embedding", "tied_embeddings"), "channels_last": ("channels_last",),
                          "references": ("drop_references", "keep_references"),
                          "optimizer": ("adamw8bit", "adam_bf16_state", "adafactor", "sgd_momentum"),
                          "lora": ("lora", "qlora"), "attention": ("attn_eager", "attn_flash", "attn_mem_efficient"),
                          "compile": ("compile", "compile_max_autotune"), "loss": ("chunked_loss",),
                          "allocator": ("expandable", "async", "gc0.6", "split512")}
    assert all(ways.REGISTRY[token].knob == knob for knob, tokens in ways.KNOBS.items() for token in tokens)
    assert list(ways.TOKENS) == [t for tokens in ways.KNOBS.values() for t in tokens]  # parse's error lists them so


def test_each_value_carries_the_facts_the_check_and_the_search_have_always_held_it_to():
    assert trick_steps.TOLERANCE == ways.TOLERANCE == TOLERANCES
    assert {t: v.tolerance for t, v in ways.REGISTRY.items()} == TOLERANCES
    assert set(trick_steps.ONE_SIDED) == {"tied_embeddings", "pad_longest", "seq_cap"}
    assert trick_steps.GROWS_ON_HOST == ("save_on_cpu",)
    assert trick_steps.LM_ONLY == ways.LM_ONLY == ("pad_longest", "seq_cap", "cpu_embedding", "drop_references",
                                                   "keep_references", "lora", "qlora", "chunked_loss")
    assert trick_steps.IMAGE_ONLY == ("channels_last",)
    assert ways.TOKEN_ONLY == ("tied_embeddings", "attn_eager", "attn_flash", "attn_mem_efficient")
    # TF32, bf16 and flash attention need Ampere's tensor cores, fp16 and Triton (compile, and
    # torchao's compiled optimizer updates) Volta's: declared, not enforced
    assert ways.CAPABILITY == {"tf32": (8, 0), "bf16_autocast": (8, 0), "bf16_params": (8, 0),
                               "fp16_autocast": (7, 0), "attn_flash": (8, 0), "compile": (7, 0),
                               "compile_max_autotune": (7, 0), "adamw8bit": (7, 0), "adam_bf16_state": (7, 0)}
    # the ways held to training at all, not to Adam's curve; those that compile on their first step
    assert ways.registered(lambda v: v.falls is not None) == ("adafactor", "sgd_momentum", "lora", "qlora")
    assert ways.COMPILES == ("adamw8bit", "adam_bf16_state", "compile", "compile_max_autotune")
    # priced on the GPU alone though it runs on the CPU: left out of the CPU profile
    assert ways.GPU_PRICED == ("qlora",)
    # the 16-bit ones: TF32 keeps fp32 tensors, so it is no half precision
    assert ways.HALF == ("fp16_autocast", "bf16_autocast", "bf16_params")


def test_a_combination_has_its_knobs_facts():
    assert ways.parse("bf16_params+checkpoint").tolerance == 5e-2
    assert ways.parse("tf32+channels_last").tolerance == 1e-2 and ways.parse("expandable").tolerance == 2e-3
    assert ways.parse("tf32+tied_embeddings").tolerance == 0.25
    assert ways.parse("bf16_autocast+pad_longest").one_sided and not ways.parse("tf32").one_sided
    assert ways.parse("bf16_autocast+checkpoint+save_on_cpu").grows_on_host
    assert not ways.parse("bf16_autocast+cpu_offload").grows_on_host
    assert ways.parse("checkpoint+bf16_autocast").capability == (8, 0)
    assert ways.parse("fp16_autocast+checkpoint").capability == (7, 0)
    assert ways.parse("checkpoint+expandable").capability is None and Way().capability is None


def test_which_single_ways_mean_something_for_each_workload():
    no_image = [t for t in ORDER + NEWER if t != "channels_last"]
    assert list(trick_steps.techniques_for("lm")) == no_image
    assert list(trick_steps.techniques_for("encdec")) == [t for t in no_image if t not in trick_steps.LM_ONLY]
    assert list(trick_steps.techniques_for("resnet50_2048")) == ORDER[:6] + [
        "channels_last", "save_on_cpu", "cpu_offload", "adamw8bit", "adam_bf16_state", "adafactor", "sgd_momentum",
        "compile", "compile_max_autotune"]
    with pytest.raises(Skip, match=r"^channels_last applies to the image models \(resnet50, resnet50_1024, "
                                   r"resnet50_2048\) only, not lm$"):
        ways.applies(ways.parse("bf16_autocast+channels_last"), "lm", trick_steps.IMAGE_MODELS,
                     trick_steps.TOKEN_MODELS)
    with pytest.raises(Skip, match=r"^tied_embeddings needs a token model \(lm, encdec\), not resnet50$"):
        ways.applies(ways.parse("tied_embeddings"), "resnet50", trick_steps.IMAGE_MODELS, trick_steps.TOKEN_MODELS)


def test_the_asv_lists_of_single_ways_read_from_the_registry_keep_their_values():
    from benchmarks import tricks as benches
    assert benches.SEED_003_WAYS_OUT == ["fp32", "fp16_autocast", "bf16_autocast", "bf16_params", "checkpoint",
                                         "channels_last", "save_on_cpu", "cpu_offload"]
    assert benches.SequenceCap.params[0] == ["pad_longest", "seq_cap"]
    assert benches.ResnetSeed.params[1] == ORDER[:6] and benches.TricksCpu.params == [ORDER + NEWER]
    assert benches.NEWER == NEWER  # the newer knobs, alone and on bf16 autocast with checkpointing
    assert benches.NewerCombined.params[0] == ["bf16_autocast+checkpoint",
                                               *(f"bf16_autocast+checkpoint+{t}" for t in NEWER)]
    assert benches.AttentionLong.params[0] == ["fp32", "bf16_autocast", "attn_eager", "attn_flash",
                                               "attn_mem_efficient", "bf16_autocast+attn_eager",
                                               "bf16_autocast+attn_flash", "bf16_autocast+attn_mem_efficient"]
    assert benches.WhatFitsNewer.params[0] == ["bf16_autocast+checkpoint+sgd_momentum",
                                               "bf16_autocast+checkpoint+attn_flash",
                                               "bf16_autocast+checkpoint+chunked_loss"]
    assert not set(ways.COMPILES) & {t for w in benches.WhatFitsNewer.params[0] for t in ways.parse(w).tokens()}


@pytest.mark.parametrize("token, knob, facts, match", [
    ("checkpoint", "checkpoint", {}, "registered already"),
    ("bf16", "dtype", {}, "no knob of Way"),
    ("bf16", "precision", {"only": "gpt"}, "only='gpt' is none of"),
])
def test_a_value_is_registered_once_for_a_knob_of_way_and_a_known_kind_of_workload(token, knob, facts, match):
    before = dict(ways.REGISTRY)
    with pytest.raises(ValueError, match=match):
        ways.register(token, knob, 1e-2, **facts)
    assert ways.REGISTRY == before


def test_an_unknown_value_is_no_way_and_names_the_registered_ones():
    with pytest.raises(ValueError, match="unknown knob 'fp8'; a way joins by '\\+' knobs of: fp32, tf32, ") as e:
        ways.parse("fp8+checkpoint")
    assert str(e.value).endswith("keep_references, " + ", ".join(NEWER) + ", expandable, async, gc0.6, split512")


def test_the_tricks_config_files_a_combination_by_its_one_name_and_refuses_a_contradiction():
    case = cases.get("tricks")
    assert case.config(dict(TINY, technique="checkpoint+bf16_autocast")).technique == "bf16_autocast+checkpoint"
    assert case.config(dict(TINY, technique="fp32")).technique == "fp32"
    with pytest.raises(ValueError, match="case 'tricks': technique: 'tf32\\+bf16_params' sets the precision twice"):
        case.value("technique", "tf32+bf16_params")
    assert list(case.params["technique"]) == SINGLE  # the grids still list the single ways


def knob_values(knob):
    default = next(f.default for f in fields(Way) if f.name == knob)
    return st.sampled_from([default, *(True if knob in ways.FLAGS else t for t in ways.KNOBS[knob])])


WAYS = st.builds(Way, **{knob: knob_values(knob) for knob in ways.KNOBS}).filter(
    lambda w: w.offload != "cpu_offload" or (w.embedding != "cpu_embedding" and w.lora != "qlora"))


@settings(max_examples=100, deadline=None)
@given(WAYS, st.randoms(use_true_random=False))
def test_a_way_round_trips_through_its_name_in_any_order(way, random):
    tokens = way.name.split("+")
    random.shuffle(tokens)
    assert ways.parse("+".join(tokens)) == way and ways.parse(way.name).name == way.name


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([*ways.TOKENS, "bf16", "x+y"]), min_size=1, max_size=5))
def test_any_text_parses_to_a_way_named_by_its_own_tokens_or_is_refused_in_one_line(tokens):
    text = "+".join(tokens)
    try:
        way = ways.parse(text)
    except ValueError as e:
        assert "\n" not in str(e)
        return
    assert set(way.name.split("+")) <= set(tokens) and ways.parse(way.name) == way


def shape(trainer):
    """What a trainer's knobs decided, read from the trainer itself."""
    model = trainer.model
    return {"checkpoint": model.checkpoint_blocks, "precision": trainer.prec.name,
            "dtypes": {p.dtype for p in model.parameters()}, "saving": trainer.saving is not contextlib.nullcontext,
            "keep": trainer.keep_references, "embedding_on": model.embed.weight.device.type,
            "forward": type(trainer.forward).__name__, "tied": model.head.weight is model.embed.weight,
            "positions": model.position.weight.shape[0]}


def built(technique, **kw):
    trainer, work = make_trainer(**dict(STEP, way=ways.parse(technique), **kw))
    try:
        return shape(trainer), work
    finally:
        trainer.close()


@pytest.fixture(scope="module")
def fp32_shape():
    """What fp32's trainer decided: built when a test first asks, not when pytest collects (every
    xdist worker collects this module, only one runs it)."""
    return built("fp32")[0]


# What each old name built before it was a knob, as the differences from fp32's trainer.
OLD = {"tf32": {"precision": "tf32"}, "fp16_autocast": {"precision": "fp16_autocast"},
       "bf16_autocast": {"precision": "bf16_autocast"},
       "bf16_params": {"precision": "bf16_params", "dtypes": {torch.bfloat16}},
       "checkpoint": {"checkpoint": True}, "save_on_cpu": {"saving": True},
       "keep_references": {"keep": True, "forward": "KeptOutput"}, "drop_references": {},
       "cpu_embedding": {"forward": "CpuEmbedding"}, "tied_embeddings": {"tied": True}}


@pytest.mark.parametrize("technique", sorted(OLD))
def test_an_old_name_builds_the_trainer_it_always_built(technique, fp32_shape):
    assert built(technique)[0] == dict(fp32_shape, **OLD[technique])


def test_the_data_knobs_build_one_model_for_the_outlier_and_count_only_real_tokens():
    padded, capped = built("pad_longest"), built("seq_cap")
    assert padded[0]["positions"] == capped[0]["positions"] > STEP["seq_len"]
    assert capped[1]["tokens"] < padded[1]["tokens"]


def test_combined_knobs_each_do_their_part(fp32_shape):
    got, _ = built("bf16_params+checkpoint+save_on_cpu+keep_references")
    assert got == dict(fp32_shape, precision="bf16_params", dtypes={torch.bfloat16}, checkpoint=True, saving=True,
                       keep=True, forward="KeptOutput")
    got, _ = built("cpu_embedding+checkpoint+bf16_autocast")
    assert got == dict(fp32_shape, precision="bf16_autocast", checkpoint=True, forward="CpuEmbedding")


def losses(technique, steps=4, **kw):
    way = ways.parse(technique)
    return trick_steps.trained(steps, **dict(STEP, way=way, **kw))


def test_checkpointing_under_bf16_draws_bf16s_curve():
    bf16, both = losses("bf16_autocast"), losses("bf16_autocast+checkpoint")
    assert reference.curve_gap(both, bf16)[1] <= trick_steps.TOLERANCE["checkpoint"]
    assert both != losses("fp32")  # bf16 itself did change the sums


def test_accumulated_micro_batches_draw_the_whole_batchs_curve_under_a_combination():
    # TF32 is fp32 on the CPU: accumulation may change the sums only by their order
    whole, accumulated = losses("tf32+checkpoint"), losses("tf32+checkpoint", micro_batch=1)
    assert reference.curve_gap(accumulated, whole)[1] <= trick_steps.TOLERANCE["fp32"]


def test_a_combination_is_checked_against_fp32_within_the_largest_of_its_knobs_tolerances():
    assert ways.parse("bf16_autocast+checkpoint").tolerance == trick_steps.TOLERANCE["bf16_autocast"]
    assert ways.parse("checkpoint").tolerance == trick_steps.TOLERANCE["checkpoint"]
    assert ways.parse("bf16_autocast+seq_cap").one_sided and not ways.parse("bf16_autocast+checkpoint").one_sided
    rec = execute("tricks", dict(TINY, technique="checkpoint+tf32", micro_batch=2))
    assert rec.ok, rec.reason
    assert rec.params["technique"] == "tf32+checkpoint"
    assert rec.check["reference"] == "fp32" and rec.check["tolerance"] == trick_steps.TOLERANCE["tf32"]
    assert 0 <= rec.check["deviation"] <= rec.check["tolerance"]


def test_a_knob_that_means_nothing_for_the_workload_skips_the_combination_naming_it():
    rec = execute("tricks", dict(TINY, workload="encdec", technique="bf16_autocast+seq_cap"))
    assert rec.outcome == "skipped" and "seq_cap applies to workload lm only" in rec.reason


def test_the_allocator_knob_is_set_before_torch_starts_and_refused_after(monkeypatch):
    environ = {}
    allocator.use_torch(Way().allocator, environ)
    assert environ == {}  # torch's default: nothing set
    with pytest.raises(RuntimeError, match="before torch is imported"):  # torch is imported here
        allocator.use_torch(ways.parse("expandable").allocator, environ)
    environ.update(allocator.environ_with("expandable", {}))  # as the fresh process that set it holds it
    allocator.use_torch(ways.parse("bf16_autocast+expandable").allocator, environ)
    assert environ == allocator.environ_with("expandable", {})


def test_a_fresh_process_takes_the_allocator_setting_before_torch_is_imported():
    import subprocess
    import sys
    from pathlib import Path
    # the case's module and its pieces import without starting torch: the setting still counts then
    code = ("import os, sys; import harness.cases.tricks; from harness.workloads.training import allocator, ways; "
            "assert 'torch' not in sys.modules; allocator.use_torch(ways.parse('async').allocator); "
            "print(os.environ['PYTORCH_CUDA_ALLOC_CONF'])")
    env = {k: v for k, v in os.environ.items() if k not in allocator.ENV_VARS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "backend:cudaMallocAsync"


def test_a_table_ranks_a_combination_beside_single_ways_against_fp32_on_the_card(tmp_path):
    from harness.measure.instruments.environment import snapshot
    from harness.measure.records.record import Record, Timing
    from harness.measure.records.store import RecordStore
    from harness.report import tables
    from harness.report.model import load_rows
    path = tmp_path / "results" / "records" / "test-machine" / "0000000-20261126T000000-000000.jsonl"
    path.parent.mkdir(parents=True)
    resnet = dict(TINY, device="cuda", workload="resnet50_1024", batch=10, micro_batch=10)
    for technique, budget, seconds in (("fp32", "card", 1.0), ("checkpoint+bf16_autocast", "16GB", 0.5),
                                       ("checkpoint", "16GB", 1.5)):
        params = cases.get("tricks").config(dict(resnet, technique=technique, budget=budget)).params
        RecordStore.append(path, Record(case="tricks", params=dict(params), outcome="ok", environment=snapshot(),
                                        work={"samples": 10}, timing=Timing(seconds, seconds, seconds, seconds, seconds,
                                                                            10, 1)))
    rows = load_rows(tmp_path / "results")
    case = cases.get("tricks")
    where = tables.where_of(case, ["workload=resnet50_1024", "technique=checkpoint+bf16_autocast"], "--where")
    assert where["technique"] == "bf16_autocast+checkpoint"
    text = tables.render(rows, "tricks", ["technique"], "budget", ["step"], {"workload": "resnet50_1024"},
                         versus=tables.versus_pairs(case, "technique=fp32,budget=card"))[0].splitlines()
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in text[2:]]
    assert cells == [[markdown.cell(c) for c in row] for row in (
        ["fp32", "not run", "1,000.0 ms"], ["checkpoint", "1,500.0 ms (1.50x)", "not run"],
        ["bf16_autocast+checkpoint", "500.0 ms (0.50x)", "not run"])]


def test_a_way_says_itself_in_a_reader_s_words_and_what_of_the_training_it_changes():
    from harness.workloads.training import ways
    assert ways.parse("checkpoint+bf16_autocast").words == "bf16 autocast + checkpointing"
    assert ways.parse("fp32").words == "fp32" and ways.parse("tf32").words == "TF32 matmuls"
    assert ways.parse("tied_embeddings").changes == ("the model",)
    assert ways.parse("bf16_params+seq_cap").changes == ("the model", "the data")
    assert ways.parse("cpu_offload+checkpoint").changes == ()  # the same sums, elsewhere
    assert {t for t, v in ways.REGISTRY.items() if v.changes} == {"bf16_params", "pad_longest", "seq_cap",
                                                                  "tied_embeddings", "adafactor", "sgd_momentum",
                                                                  "lora", "qlora"}
    # another rule of training, or fewer weights trained: said, as the loss they are held to differs
    assert ways.parse("bf16_autocast+checkpoint+lora").changes == ("the weights trained",)
    assert ways.parse("bf16_autocast+checkpoint+lora").words == "bf16 autocast + checkpointing + LoRA adapters"
