"""What the estimators people reach for say of a what-fits case, run on the CPU against the same
model built on the meta device (no weights allocated): accelerate's ``estimate-memory`` (its
``calculate_maximum_sizes`` and ``estimate_training_usage``: weights, gradients and Adam, the
largest of its stages), DeepSpeed's ZeRO-2 model states (``model_to_params`` and
``estimate_zero2_model_states_mem_needs``, which ``estimate_zero2_model_states_mem_needs_all_live``
prints; one GPU, offloaded where the way offloads) and the Megatron activation formula
(Korthikanti et al., 2022: s*b*h*(34 + 5*a*s/h) bytes a layer, without recomputation) on top of
the model states accelerate counts. accelerate and DeepSpeed count no activations, so they name a
peak and no size; the formula grows with the batch and the sequence, so it names both.

``python -m harness.workloads.search.estimators RESULTS`` writes ``RESULTS/estimators.json`` for
every case the committed what-fits records searched (the docs read it: no optional extra is
needed to write them). Needs ``pip install 'oombench[estimators]'``.
"""
from __future__ import annotations

import json
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

FILE = "estimators.json"
MEGATRON = (34, 5)  # the formula's two constants: s*b*h*(34 + 5*a*s/h) bytes of activations a layer
SHAPE = ("workload", "technique", "vocab", "width", "depth", "seq_len")


def _need():
    from harness.measure.guards.requirements import need_module
    hint = "pip install 'oombench[estimators]'"
    return need_module("accelerate", hint), need_module("deepspeed", hint)


def meta_model(workload: str, technique: str, vocab: int, width: int, depth: int, seq_len: int):
    """The case's model as ``tricks`` builds it, on the meta device: shapes only."""
    import torch
    with torch.device("meta"):
        return _model(workload, technique, vocab, width, depth, seq_len)


@cache
def deepspeed_parameters(workload: str, technique: str, vocab: int, width: int, depth: int, seq_len: int) -> int:
    """DeepSpeed's count of the model's parameters, off the model built on the CPU: it counts them
    by storage (``data_ptr``), which every meta tensor shares."""
    from deepspeed.runtime.zero.stage_1_and_2 import model_to_params
    return model_to_params(_model(workload, technique, vocab, width, depth, seq_len))


def _model(workload: str, technique: str, vocab: int, width: int, depth: int, seq_len: int):
    """The case's model as ``tricks`` builds it, on the device in force."""
    from harness.workloads.training.models import LMConfig, transformer_lm
    from harness.workloads.training.tricks import heads
    from harness.workloads.training.ways import parse
    if workload != "lm":
        raise ValueError(f"the estimators here take the LM, not {workload!r}: run them with workload=lm")
    way = parse(technique)
    return transformer_lm(LMConfig(vocab=vocab, width=width, depth=depth, heads=heads(width), seq_len=seq_len,
                                   tie_embeddings=way.embedding == "tied_embeddings"))


def estimate(workload: str, technique: str, vocab: int, width: int, depth: int, seq_len: int) -> dict:
    """Each estimator's figures for one case: ``accelerate`` and ``deepspeed`` (peak bytes on the
    GPU, whatever the size), ``megatron`` (the peak's polynomial in the size searched, lowest
    power first, along ``batch`` at ``seq_len`` and along ``seq_len`` at batch 1)."""
    from accelerate.commands.estimate import calculate_maximum_sizes, estimate_training_usage
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    from harness.workloads.training.tricks import heads
    from harness.workloads.training.ways import HALF, parse
    way = parse(technique)
    model = meta_model(workload, technique, vocab, width, depth, seq_len)
    total, _ = calculate_maximum_sizes(model)
    stages = estimate_training_usage(total, "bfloat16" if way.precision in HALF else "float32")
    parameters = deepspeed_parameters(workload, technique, vocab, width, depth, seq_len)
    _, deepspeed_gpu = estimate_zero2_model_states_mem_needs(parameters, 1, 1, cpu_offload=way.offload == "cpu_offload")
    states = stages["model"] + stages["gradients"] + stages["optimizer"]
    linear, square = MEGATRON
    a, h, s = heads(width), width, seq_len
    return {"parameters": parameters, "accelerate": max(stages.values()), "deepspeed": deepspeed_gpu,
            "megatron": {"batch": [states, depth * s * h * (linear + square * a * s / h)],
                         "seq_len": [states, depth * h * linear, depth * square * a]}}


def shapes(results: Path) -> list[dict]:
    """The shapes (``SHAPE``) the committed what-fits records searched, each once."""
    from harness.measure.records.store import RecordStore
    seen = []
    for record in RecordStore.of_results(results).load().records:
        if record.case == "fits" and record.params.get("workload") == "lm":
            shape = {k: record.params[k] for k in SHAPE}
            if shape not in seen:
                seen.append(shape)
    return seen


def write(results: Path) -> Path:
    """``results``/estimators.json: each shape's figures, and the versions that made them."""
    _need()
    table = [{"shape": shape, **estimate(**shape)} for shape in shapes(results)]
    out = Path(results) / FILE
    out.write_text(json.dumps({"versions": {p: metadata.version(p) for p in ("accelerate", "deepspeed", "torch")},
                               "cases": table}, indent=1, sort_keys=True) + "\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m harness.workloads.search.estimators RESULTS_DIR")
    print(write(Path(sys.argv[1])))
