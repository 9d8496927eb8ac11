""""Which way out?": the rule on hand-made trials, and the answers for the issue's questions on
records planted here (never the committed results)."""
import dataclasses
import json
import re

import pytest

from harness.measure.guards.budget import CARDS
from harness.measure.instruments.environment import snapshot
from harness.measure.records.record import Record
from harness.measure.instruments.timing import Timing
from harness.report import model
from harness.report.pages import chooser
from harness.report.pages.chooser import Trial

from conftest import fake_devices

G = 10**9
H100 = fake_devices(name="NVIDIA H100 80GB HBM3", total=81559 * 2**20)
ENV = snapshot(H100)
LM = {"device": "cuda", "workload": "lm", "batch": 16, "seq_len": 1024, "vocab": 32000, "width": 1024, "depth": 12}
RESNET = {"device": "cuda", "workload": "resnet50_1024", "batch": 10, "vocab": 32000, "width": 1024, "depth": 12,
          "seq_len": 1024}


def record(case, params, outcome="ok", device=None, step=0.1, check=None, requested=None):
    memory = {"device.used.gpu0": device, "device.used_before.gpu0": 0} if device is not None else {}
    timing = Timing(step, step, step, step, step, 3, 0) if outcome == "ok" else None
    short = {"short_of": "device"} if outcome == "does_not_fit" else {}
    return Record(case=case, params=params, outcome=outcome, environment=ENV, timing=timing, memory=memory,
                  check={**short, **(check or {})}, requested_bytes=requested)


def rows(*records):
    return [model.Row(f"r-{i}", rec, "results/records/planted.jsonl", i + 1) for i, rec in enumerate(records)]


def picked(recs, card, workload):
    sid = f"{card}--{workload}"
    section = next(s for s in chooser.view(rows(*recs))["sections"] if s["id"] == sid)
    ways = lambda key: [json.loads(t.way) for t, *_ in section[key]]
    return ways("needless"), ways("answer"), ways("apart"), section


def left(section) -> dict:
    return dict(section["left"])


# -- seed 000 ---------------------------------------------------------------------------------------

UNEVICTED = {"budget_enforced": False, "evicted": False}
SEED000 = [
    record("seed000", {"way": "device_pool", "budget": "p100-16gb"}, "does_not_fit", requested=int(25.77 * G)),
    record("seed000", {"way": "device_pool", "budget": "16GB"}, "does_not_fit", requested=int(25.77 * G)),
    record("seed000", {"way": "device_pool", "budget": "card"}, device=int(26.4 * G), step=0.004),
    record("seed000", {"way": "managed_pool", "budget": "16GB"}, device=int(26.86 * G), step=0.0059, check=UNEVICTED),
    record("seed000", {"way": "out_of_core", "budget": "16GB"}, device=int(2.2 * G), step=0.33),
    record("seed000", {"way": "zero_copy", "budget": "16GB"}, device=int(0.6 * G), step=0.35),
]


def test_seed000_on_a_16gb_card_offers_host_ways_and_shows_managed_memory_apart_never_ranked():
    needless, ways, apart, section = picked(SEED000, "p100-16gb", "seed000")
    # both under the same cap: zero_copy saves more of the plain run's 26.4 GB, so it ranks first
    assert needless == [] and ways == [{"way": "zero_copy"}, {"way": "out_of_core"}]
    assert apart == [{"way": "managed_pool"}] and "device_pool" not in json.dumps(ways)
    assert left(section)["device pool"].startswith("ran out of memory under the Tesla P100-PCIE-16GB emulation")


def test_seed000_on_an_80gb_card_needs_no_way_out_and_the_h100_answers_from_its_whole_card():
    for card in ("a100-80gb", "h100-80gb", "m8"):
        needless, ways, apart, _ = picked(SEED000, card, "seed000")
        assert needless == [{"way": "device_pool"}], card
        assert {"way": "device_pool"} not in ways and apart == [{"way": "managed_pool"}]


# -- the LM on a 24 GB card ----------------------------------------------------------------------

def lm(technique, device, step, micro=16):
    return record("tricks", {**LM, "technique": technique, "micro_batch": micro, "budget": "card"},
                  device=int(device * G), step=step)


LM_RECORDS = [lm("fp32", 24.50, 0.455), lm("tf32", 24.50, 0.16), lm("bf16_autocast", 18.97, 0.077),
              lm("cpu_offload", 24.42, 0.835), lm("seq_cap", 24.03, 0.455), lm("checkpoint", 11.77, 0.547),
              record("tricks", {**LM, "technique": "pad_longest", "micro_batch": 16, "budget": "card"},
                     "does_not_fit", requested=int(8.4 * G))]  # the LM runs out of memory somewhere: a question


def test_the_lm_on_a_24gb_card_offers_no_way_whose_device_peak_is_past_the_card_nor_a_precision_of_the_same_run():
    needless, ways, _, section = picked(LM_RECORDS, "l4-24gb", "lm")  # 23,034 MiB: 24.15 GB
    assert needless == []  # fp32 holds 24.50 GB on the device
    techniques = [w["technique"] for w in ways]
    assert techniques == ["checkpoint", "bf16_autocast", "seq_cap"]  # most device memory saved first
    assert "cpu_offload" not in techniques and not {"fp32", "tf32"} & set(techniques)
    assert "TF32 matmuls" not in left(section)  # no way out, so not "not offered" either
    assert "past this card's 24.2 GB" in left(section)["parameters and optimizer on the CPU"]


def test_when_the_plain_run_fits_the_answer_says_no_way_out_needed_first():
    needless, ways, _, _ = picked(LM_RECORDS, "a100-40gb", "lm")
    assert [(w["technique"], w["micro_batch"]) for w in needless] == [("fp32", 16)]
    assert "tf32" not in [w["technique"] for w in ways] and "cpu_offload" in [w["technique"] for w in ways]


# -- ResNet50 at 1024 px on a 16 GB card ---------------------------------------------------------------

def resnet(technique, budget, outcome="ok", device=None, step=0.1, micro=10):
    return record("tricks", {**RESNET, "technique": technique, "micro_batch": micro, "budget": budget}, outcome,
                  None if device is None else int(device * G), step)


def test_resnet50_at_1024_on_a_16gb_card_offers_what_ran_under_its_emulation_and_never_what_did_not_fit_it():
    recs = [resnet("bf16_autocast", "rtx4090-24gb", device=12.7, step=0.08),
            resnet("fp32", "p100-16gb", "does_not_fit"), resnet("fp32", "card", device=21.0, step=0.2),
            resnet("bf16_autocast", "p100-16gb", device=12.7, step=0.08),
            resnet("fp32", "p100-16gb", device=12.1, step=0.3, micro=5),
            resnet("checkpoint", "16GB", device=9.9, step=0.33),
            resnet("channels_last", "p100-16gb", "does_not_fit"),
            resnet("channels_last", "card", device=16.5, step=0.2)]
    needless, ways, _, section = picked(recs, "rtx4090-24gb", "resnet50_1024")
    assert [w["micro_batch"] for w in needless] == [10]  # 21 GB on the whole card fits 24,564 MiB
    # shown under a named card's emulation first (micro-batch 5 saves the most), then under a cap, then on a card
    assert [(w["technique"], w["micro_batch"]) for w in ways] == [("fp32", 5), ("bf16_autocast", 10),
                                                                   ("checkpoint", 10), ("channels_last", 10)]
    offered = dict((json.loads(o.way)["technique"], o) for o, *_ in section["answer"])
    assert offered["bf16_autocast"].on[0].trial.row.record.params["budget"] == "rtx4090-24gb"  # linked to that record
    needless, ways, _, section = picked(recs, "p100-16gb", "resnet50_1024")
    assert needless == [] and [(w["technique"], w["micro_batch"]) for w in ways] == [("fp32", 5), ("checkpoint", 10)]
    assert left(section)["bf16 autocast"] == "needs compute capability 8.0; Tesla P100-PCIE-16GB has 6.0"
    assert "ran out of memory" in left(section)["channels last"]  # under its own emulation


def test_every_answer_on_the_page_links_to_its_record(tmp_path):
    from html import unescape

    from harness.report.pages import build
    folder = tmp_path / "results" / "records" / "planted"
    folder.mkdir(parents=True)
    (folder / "planted.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in SEED000 + LM_RECORDS))
    assert build.main(results=str(tmp_path / "results"), out=str(tmp_path / "pages")) == 0
    html = (tmp_path / "pages" / "chooser.html").read_text()
    body = re.search(r'<section class="choice" id="p100-16gb--seed000">(.*?)</section>', html, re.S).group(1)
    links = re.findall(r'<a href="([^"]+)" data-record="(r-[0-9a-f]+)" data-kind="(\w+)"', body)
    assert {kind for *_, kind in links} >= {"step", "apart", "device"}
    for href, rid, _ in links:
        page, anchor = unescape(href).split("#")
        assert anchor == rid and f'id="{rid}"' in (tmp_path / "pages" / page).read_text()
    assert "No way out needed" in re.search(r'id="a100-80gb--seed000">(.*?)</section>', html, re.S).group(1)


# -- the rule on hand-made trials ---------------------------------------------------------------------

def test_a_device_peak_past_the_card_never_fits_though_the_allocators_peak_would():
    t = Trial("x", "box", "ok", 85 * G, device=int(24.42 * G), step_s=0.1, allocated=20 * G)
    assert chooser.fits([t], int(24.15 * G)) is None and chooser.fits([t], 25 * G) == t


def test_a_does_not_fit_under_an_emulation_of_at_least_the_card_refutes_a_peak_measured_elsewhere():
    ok = Trial("x", "box", "ok", 85 * G, device=15 * G, step_s=0.1)
    short = Trial("x", "box", "does_not_fit", CARDS["p100-16gb"].total_bytes, named=True)
    assert chooser.fits([ok, short], CARDS["p100-16gb"].total_bytes) is None
    assert chooser.fits([ok, short], CARDS["rtx4090-24gb"].total_bytes) == ok
    cap = Trial("x", "box", "does_not_fit", 16 * G)  # a 16 x 10^9 cap is less than a 16,280 MiB card
    assert chooser.fits([ok, cap], CARDS["p100-16gb"].total_bytes) == ok
    big = Trial("x", "box", "does_not_fit", 16 * G, requested=20 * G)  # one request past the card
    assert chooser.fits([ok, big], CARDS["p100-16gb"].total_bytes) is None


def test_an_ok_run_under_the_cards_own_emulation_wins_and_a_failed_check_is_never_offered():
    own = Trial("x", "box", "ok", CARDS["v100-16gb"].total_bytes, device=16 * G, step_s=0.2, named=True)
    short = Trial("x", "box", "does_not_fit", CARDS["p100-16gb"].total_bytes, named=True)
    assert chooser.fits([own, short], CARDS["p100-16gb"].total_bytes) == own
    assert chooser.fits([own, Trial("x", "box", "failed", 85 * G)], CARDS["p100-16gb"].total_bytes) is None


def test_a_way_is_named_by_the_parameters_its_trials_do_not_all_share():
    ways = [json.dumps(w, sort_keys=True) for w in ({"technique": "fp32", "micro": 1},
                                                    {"technique": "bf16", "micro": 1},
                                                    {"technique": "bf16", "micro": 1, "extra": 2})]
    tried = [Trial(w, "box", "ok", 16 * G, step_s=0.1) for w in ways]
    same = chooser.shared(tried)
    assert same == {"micro"}  # "extra" is held by one way only: absent elsewhere is a value too
    assert [chooser.way_label(w, same) for w in ways] == ["fp32", "technique=bf16", "extra=2, technique=bf16"]
    assert chooser.way_label(ways[0], chooser.shared(tried[:1])) == "fp32"  # the registry names it
    assert chooser.way_label(json.dumps({"micro": 1}), {"micro"}) == "(one way)"
    assert chooser.way_label(json.dumps({"technique": "bf16_autocast+checkpoint", "micro_batch": 5}), set(),
                             batch=10) == "bf16 autocast + checkpointing, micro-batch 5"


def test_a_budget_is_named_for_what_it_was():
    assert chooser.ran_under("16GB") == "a 16GB allocator cap (context not charged)"
    assert chooser.ran_under("p100-16gb") == "the Tesla P100-PCIE-16GB emulation (context charged)"
    assert chooser.ran_under("card") == "the whole card"


def test_a_peak_at_the_card_fits_and_a_request_of_the_card_refutes_nothing():
    card = CARDS["p100-16gb"].total_bytes
    at = Trial("x", "box", "ok", 85 * G, device=card, step_s=0.1)
    assert chooser.fits([at], card) == at and chooser.fits([at], card - 1) is None
    ask = Trial("x", "box", "does_not_fit", 8 * G, requested=card)
    assert not chooser.refutes(ask, card) and chooser.refutes(ask, card - 1)


def test_the_closest_named_emulation_wins_and_else_the_smallest_memory_that_fit():
    card = CARDS["rtx4090-24gb"].total_bytes
    p100 = Trial("x", "box", "ok", CARDS["p100-16gb"].total_bytes, device=15 * G, step_s=0.1, named=True)
    own = Trial("x", "box", "ok", card, device=15 * G, step_s=0.1, named=True)
    cap = Trial("x", "box", "ok", 20 * G, device=15 * G, step_s=0.1)  # a cap: its context not charged
    small = Trial("x", "box", "ok", 10 * G, device=15 * G, step_s=0.1)
    assert chooser.fits([p100, cap], card) == p100  # a cap is no emulation of a card, however close
    assert chooser.fits([p100, own, cap], card) == own and chooser.fits([own, p100], card) == own
    assert chooser.fits([own, small], card) == own  # the card's own emulation, though a cap ran smaller
    whole = Trial("x", "box", "ok", 85 * G, device=15 * G, step_s=0.1)
    assert chooser.fits([whole, cap], card) == cap and chooser.fits([cap, whole], card) == cap


def reader(size, capability=(9, 0), machine=None):
    return chooser.Reader("x", "x", size, machine, "Some GPU", capability)


def test_an_answer_keeps_one_machine_s_trials_groups_ways_across_gpus_and_reads_each_against_its_own_gpu():
    def t(way, machine, step, device=G, budget="card", **kw):
        return Trial(json.dumps({"way": way}), machine, "ok", 85 * G, device=device, step_s=step, budget=budget, **kw)
    tried = [t("base", "a", 0.2, 30 * G), t("base", "b", 0.1, 30 * G), t("fast", "b", 0.05, 8 * G),
             t("fast", "a", 0.3, 8 * G), t("slow", "a", 0.6, 2 * G),
             t("managed", "a", 0.4, unevicted=True), t("managed", "b", 0.3, unevicted=True)]
    base = {json.dumps({"way": "base"})}
    found = chooser.answer(tried, reader(16 * G), base, set())
    assert found.needless == []  # the plain run holds 30 GB
    assert [o.way for o in found.ways] == [json.dumps({"way": "slow"}), json.dumps({"way": "fast"})]  # most saved
    fast = found.ways[1]
    assert [(m.trial.machine, m.saved, m.slowdown) for m in fast.on] == [("a", 22 * G, pytest.approx(1.5)),
                                                                                  ("b", 22 * G, 0.5)]
    assert [x.step_s for x in found.apart] == [0.3, 0.4]
    on_a = chooser.answer(tried, reader(16 * G), base, set(), "a")
    assert {m.trial.machine for o in on_a.ways for m in o.on} | {x.machine for x in on_a.apart} == {"a"}


def test_a_way_the_card_cannot_run_is_left_out_with_why_though_it_fits():
    tried = [Trial(json.dumps({"technique": "bf16_autocast"}), "a", "ok", 85 * G, device=G, step_s=0.1),
             Trial(json.dumps({"technique": "fp16_autocast"}), "a", "ok", 85 * G, device=G, step_s=0.1)]
    needs = lambda way: chooser.needs(way)
    volta = chooser.answer(tried, reader(16 * G, (7, 0)), set(), set(), needs=needs)
    assert [o.way for o in volta.ways] == [tried[1].way]
    assert volta.left == {tried[0].way: "needs compute capability 8.0; Some GPU has 7.0"}
    assert len(chooser.answer(tried, reader(16 * G, (8, 0)), set(), set(), needs=needs).ways) == 2
    unknown = chooser.answer(tried, reader(16 * G, None), set(), set(), needs=needs)
    assert len(unknown.ways) == 2  # a capability not known rules nothing out


def test_each_way_left_out_says_its_own_reason():
    def t(outcome, size=16 * G, device=None, budget="16GB", **kw):
        return Trial("w", "box", outcome, size, device=device, step_s=0.1 if outcome == "ok" else None, budget=budget,
                     **kw)
    card = reader(16 * G)
    assert chooser.why_not({"box": [t("failed")]}, card).startswith("failed on box")
    short = chooser.why_not({"box": [t("does_not_fit")]}, card)
    assert short.startswith("ran out of memory under a 16GB allocator cap")
    asked = chooser.why_not({"box": [t("does_not_fit", 8 * G, requested=20 * G)]}, card)
    assert asked.endswith("a 20.0 GB request failed")
    peak = chooser.why_not({"box": [t("ok", 85 * G, 30 * G, "card"), t("ok", 85 * G, 20 * G, "card")]}, card)
    assert peak == "its least device peak, 20.0 GB on box under the whole card, is past this card's 16.0 GB"
    assert chooser.why_not({"box": [t("skipped")]}, card).startswith("never measured")
    smaller = chooser.why_not({"box": [t("does_not_fit", 15 * G, budget="16GB")]}, card)
    assert smaller.startswith("no record decides: it ran out of memory under a 16GB allocator cap (context not "
                              "charged) on box")


def planted_row(case="seed000", params=None, outcome="ok", check=None, timing=True, memory=None, gpu=True,
                requested=None):
    rec = record(case, params if params is not None else {"way": "device_pool", "budget": "16GB"}, outcome, device=G,
                 check=check, requested=requested)
    changes = {"memory": {**rec.memory, **(memory or {})}}
    if timing and rec.timing is None:
        changes["timing"] = Timing(0.1, 0.1, 0.1, 0.1, 0.1, 3, 0)
    if not gpu:
        from harness.measure.instruments.devices import Devices
        changes["environment"] = snapshot(Devices(reason="no GPU (test)"))
    return rows(dataclasses.replace(rec, **changes))[0]


def test_a_row_is_a_trial_only_of_its_own_workload_on_a_gpu():
    seed, lm_wl = chooser.WORKLOADS[3], chooser.WORKLOADS[0]
    assert chooser.trial(planted_row(), seed) is not None
    assert chooser.trial(planted_row(), lm_wl) is None  # another case
    assert chooser.trial(planted_row("tricks", {**LM, "batch": 8, "technique": "fp32"}), lm_wl) is None  # another batch
    assert chooser.trial(planted_row(gpu=False), seed) is None
    whole = chooser.trial(planted_row(params={"way": "device_pool"}), seed)  # no budget: the whole card
    assert (whole.size, whole.named, whole.unevicted) == (81559 * 2**20, False, False)
    named = chooser.trial(planted_row(params={"way": "x", "budget": "p100-16gb"}), seed)
    assert (named.size, named.named) == (CARDS["p100-16gb"].total_bytes, True)


def test_a_trial_carries_what_the_rule_and_the_page_read():
    seed = chooser.WORKLOADS[3]
    card = chooser.trial(planted_row(params={"way": "m", "budget": "card"}, check=UNEVICTED), seed)
    assert not card.unevicted  # on the whole card, nothing was under a smaller budget to evict
    assert not chooser.trial(planted_row(check={"evicted": False}), seed).unevicted
    assert chooser.trial(planted_row(check=UNEVICTED), seed).unevicted
    failed = chooser.trial(planted_row(outcome="failed"), seed)
    assert failed.step_s is None and chooser.trial(planted_row(), seed).step_s == 0.1
    short = chooser.trial(planted_row(outcome="does_not_fit", timing=False, requested=5 * G), seed)
    assert (short.outcome, short.requested) == ("does_not_fit", 5 * G)
    peak = chooser.trial(planted_row(memory={"allocator.torch.max_allocated": 7 * G}), seed)
    assert peak.allocated == 7 * G


def test_each_card_is_labelled_with_its_size_and_capability_and_each_gpu_as_its_own_records_say():
    cards = chooser.cards(rows(*SEED000))
    p100 = next(c for c in cards if c.key == "p100-16gb")
    assert p100.label == "Tesla P100-PCIE-16GB (17.1 GB as nvidia-smi reports it)" and p100.capability == (6, 0)
    gpu = cards[-1]
    assert (gpu.label, gpu.size, gpu.capability) == (f"{gpu.machine} (85.5 GB, its own records)", 81559 * 2**20, (9, 0))


def test_a_machine_s_section_leaves_out_other_machines_and_what_is_shown_apart():
    wl = chooser.WORKLOADS[3]

    def t(way, machine, **kw):
        return Trial(json.dumps({"way": way}), machine, kw.pop("outcome", "ok"), 85 * G, step_s=0.1, **kw)
    tried = [t("device_pool", "a", device=90 * G), t("zero_copy", "b", device=90 * G),
             t("managed_pool", "a", device=G, unevicted=True), t("out_of_core", "b", device=G)]
    on_a = chooser.section(tried, wl, reader(16 * G, machine="a"))
    assert [label for label, _ in on_a["left"]] == ["device pool"] and [x.machine for x, _ in on_a["apart"]] == ["a"]
    assert on_a["answer"] == []  # b's way out is b's answer, not a's
    anywhere = chooser.section(tried, wl, reader(16 * G))
    assert [label for label, _ in anywhere["left"]] == ["device pool", "zero copy"]
    assert [(o.way, [m.trial.machine for m in o.on]) for o, *_ in anywhere["answer"]] == [
        (json.dumps({"way": "out_of_core"}), ["b"])]


def test_each_measured_gpu_s_own_section_answers_from_its_own_records_alone():
    h200 = snapshot(fake_devices())
    recs = [record("seed000", {"way": "device_pool", "budget": "16GB"}, "does_not_fit"),
            record("seed000", {"way": "zero_copy", "budget": "card"}, device=G),
            dataclasses.replace(record("seed000", {"way": "out_of_core", "budget": "card"}, device=G),
                                environment=h200)]
    own = {s["card"].split(" (")[0]: [json.loads(o.way)["way"] for o, *_ in s["answer"]]
           for s in chooser.view(rows(*recs))["sections"]
           if "its own records" in s["card"] and "seed" in s["workload"]}
    assert own == {"nvidia-h100-80gb-hbm3-x1": ["zero_copy"], "nvidia-h200-x1": ["out_of_core"]}


# -- what the page offers: cards' capabilities, workloads that ran out of memory, the intro --------

def test_no_16gb_pascal_or_volta_section_offers_a_bf16_or_tf32_way_and_each_says_why():
    recs = LM_RECORDS + [lm("bf16_autocast+checkpoint", 6.0, 0.09), lm("tf32+checkpoint", 11.7, 0.2),
                         lm("fp16_autocast", 15.0, 0.08)]
    sections = {s["id"]: s for s in chooser.view(rows(*recs))["sections"]}
    for card in ("p100-16gb", "v100-16gb"):
        s = sections[f"{card}--lm"]
        offered = " ".join(label for _, label, _ in s["answer"])
        assert offered and "bf16" not in offered and "TF32" not in offered, card
        assert "compute capability 8.0" in dict(s["left"])["bf16 autocast + checkpointing"]
    assert "fp16 autocast" in [label for _, label, _ in sections["v100-16gb--lm"]["answer"]]  # Volta: fp16 cores
    assert "fp16 autocast" in dict(sections["p100-16gb--lm"]["left"])
    assert "bf16 autocast + checkpointing" in [label for _, label, _ in sections["a100-40gb--lm"]["answer"]]


def test_the_newer_knobs_are_offered_where_their_records_fit_and_never_on_a_card_whose_capability_they_lack():
    # each newer knob's own capability, not its precision's: fp32 with compile or 8-bit AdamW needs Volta (Triton),
    # fp16 with the flash kernel needs Ampere though fp16 alone runs on Volta; SGD and LoRA need nothing
    recs = LM_RECORDS + [lm("checkpoint+compile", 10.0, 0.40), lm("checkpoint+adamw8bit", 9.0, 0.50),
                         lm("fp16_autocast+attn_flash", 15.0, 0.07), lm("fp16_autocast", 15.2, 0.08),
                         lm("checkpoint+sgd_momentum", 10.5, 0.52), lm("lora", 16.0, 0.39),
                         lm("bf16_autocast+checkpoint+chunked_loss", 6.6, 0.106),
                         lm("attn_eager", 38.3, 0.53)]
    sections = {s["id"]: s for s in chooser.view(rows(*recs))["sections"]}

    def offered(card):
        return {label for _, label, _ in sections[f"{card}--lm"]["answer"]}

    p100, v100, l4 = offered("p100-16gb"), offered("v100-16gb"), offered("l4-24gb")
    assert {"checkpointing + SGD with momentum", "LoRA adapters"} <= p100
    assert not {"checkpointing + torch.compile", "checkpointing + 8-bit AdamW", "fp16 autocast + flash attention",
                "bf16 autocast + checkpointing + loss over chunks of tokens"} & p100
    assert {"checkpointing + torch.compile", "checkpointing + 8-bit AdamW", "fp16 autocast"} <= v100
    assert "fp16 autocast + flash attention" not in v100
    assert {"fp16 autocast + flash attention", "bf16 autocast + checkpointing + loss over chunks of tokens",
            "checkpointing + torch.compile"} <= l4
    why = dict(sections["v100-16gb--lm"]["left"])
    assert why["fp16 autocast + flash attention"] == "needs compute capability 8.0; Tesla V100-SXM2-16GB has 7.0"
    assert dict(sections["p100-16gb--lm"]["left"])["checkpointing + torch.compile"] == \
        "needs compute capability 7.0; Tesla P100-PCIE-16GB has 6.0"
    # where the records say it does not fit, it is not offered, whatever the card runs
    assert "eager attention" not in l4
    assert "past this card's" in dict(sections["l4-24gb--lm"]["left"])["eager attention"]
    assert "eager attention" in offered("a100-40gb")


def test_a_way_that_changes_the_model_or_the_data_is_marked_and_its_loss_kept():
    recs = [dataclasses.replace(r, check={"loss_last": 2.1}) if r.params.get("technique") == "seq_cap" else r
            for r in LM_RECORDS]
    s = next(s for s in chooser.view(rows(*recs))["sections"] if s["id"] == "l4-24gb--lm")
    marked = {label: changed for _, label, changed in s["answer"]}
    assert marked["sequences capped"] == ("the data",) and marked["checkpointing"] == ()
    seq = next(o for o, label, _ in s["answer"] if label == "sequences capped")
    assert seq.on[0].trial.loss == 2.1


def test_only_workloads_that_ran_out_of_device_memory_somewhere_are_offered():
    gcn = [record("chainer_gcn", {"device": "cuda", "pool": p, "budget": "card"}, device=G)
           for p in ("device_pool", "managed_pool")]
    assert "chainer_gcn" not in dict(chooser.view(rows(*gcn))["workloads"])
    short = record("chainer_gcn", {"device": "cuda", "pool": "device_pool", "budget": "16GB"}, "does_not_fit")
    assert "chainer_gcn" in dict(chooser.view(rows(*gcn, short))["workloads"])


def test_the_intro_counts_what_each_offered_figure_ran_under():
    recs = [resnet("fp32", "card", device=21.0, step=0.2), resnet("fp32", "p100-16gb", "does_not_fit"),
            resnet("fp32", "p100-16gb", device=12.1, step=0.3, micro=5),
            resnet("checkpoint", "16GB", device=9.9, step=0.33)]
    text = chooser.view(rows(*recs))["intro"]
    count = lambda kind: sum(1 for s in chooser.view(rows(*recs))["sections"] for o, *_ in s["answer"]
                             for m in o.on if chooser.kind(m.trial.budget) == kind)
    named, cap = count("named"), count("cap")
    assert named and cap and f", {named} ran under a named card's emulation" in text
    assert f"{cap} under an allocator cap that charges no context" in text


def test_the_seeds_page_prices_seed_003_by_the_ways_a_p100_runs():
    from harness.report.pages import build
    recs = [resnet(t, b, device=d, step=s) for t, b, d, s in (
        ("fp32", "card", 21.0, 0.2), ("bf16_autocast", "16GB", 12.7, 0.08), ("tf32", "16GB", 21.0, 0.1),
        ("checkpoint", "16GB", 9.9, 0.33))]
    seed = next(s for s in build.seeds_view(rows(*recs)) if "cheapest ways for 1024" in s["title"])
    labels = [label for label, _ in seed["grid"].lines]
    assert labels and not [x for x in labels if "bf16" in x or "tf32" in x] and any("checkpoint" in x for x in labels)
    assert seed["command"].endswith("--card p100-16gb")  # the command printed above it says so
    (note,) = [n for n in seed["grid"].notes if n.startswith("Not offered")]
    assert "Tesla P100-PCIE-16GB cannot run, its compute capability being 6.0" in note
    assert "compute capability 8.0: TF32 matmuls, bf16 autocast." in note


def test_harness_table_card_leaves_out_what_the_card_cannot_run_and_refuses_an_unknown_card(tmp_path, capsys):
    from harness.report import tables
    recs = [resnet(t, "16GB", device=9.0, step=0.1) for t in ("fp32", "bf16_autocast", "fp16_autocast")]
    args = (rows(*recs), "tricks", ["technique"], "machine", ["step"], {"workload": "resnet50_1024"})
    v100 = tables.table(*args, card="v100-16gb")
    assert "| fp16_autocast" in v100 and "| bf16_autocast" not in v100
    assert "compute capability 8.0: bf16 autocast" in v100
    assert "| bf16_autocast" in tables.table(*args)  # no card: every way
    (tmp_path / "records").mkdir()
    assert tables.main(tmp_path, "tricks", "technique", "machine", "step", [], card="t4-16gb") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass one of p100-16gb" in err
