"""A way out: the knobs one training step of ``tricks`` runs with, and its one name.

Each knob is its own parameter of ``Way`` and its own small piece of ``harness.workloads.tricks``
(applied to the model, the step or the process), so a combination is the pieces together:

- ``precision``: fp32 (the reference), tf32, fp16_autocast, bf16_autocast, bf16_params;
- ``checkpoint``: every block recomputed in backward;
- ``offload``: what the forward saves kept on the host (save_on_cpu), or parameters, gradients
  and optimizer state there (cpu_offload);
- ``data``: a ragged LM batch padded to its longest sequence (pad_longest) or cut at ``seq_len``
  (seq_cap);
- ``embedding``: the LM's token embedding on the CPU (cpu_embedding), or input and output
  embeddings one matrix (tied_embeddings);
- ``channels_last``: ResNet's weights and images in NHWC;
- ``references``: the loop every way runs drops the previous step's logits before the next
  forward; drop_references names that loop as a way of its own (seed 002's advice),
  keep_references is the everyday loop that keeps them;
- ``allocator``: a setting of torch's caching allocator for the whole process
  (``PYTORCH_CUDA_ALLOC_CONF``), read once when CUDA starts.

The accumulation micro-batch is the case's own ``micro_batch`` parameter.

A way's name is its knobs' values joined by "+" in the order of ``Way``'s fields, each knob at
its default left out: "bf16_autocast+checkpoint". The way with every knob at its default is
"fp32", and today's single techniques are the ways of one knob, so each names itself as it
always has ("checkpoint" is fp32 with checkpointing). Any order parses; ``name`` gives the one
canonical order, so one way has one name. A knob given twice, or two knobs that decide the same
thing, is refused with one line naming the fix.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from harness.measure.outcomes import Skip
from harness.workloads import allocator as settings

SEP = "+"
# The named allocator settings are ``harness.workloads.allocator``'s: one list for every case.
ALLOCATORS = tuple(settings.TORCH)


@dataclass(frozen=True)
class Way:
    precision: str = "fp32"
    checkpoint: bool = False
    offload: str = ""
    data: str = ""
    embedding: str = ""
    channels_last: bool = False
    references: str = ""
    allocator: str = "default"

    @property
    def name(self) -> str:
        named = [value_token(f.name, getattr(self, f.name)) for f in fields(self)
                 if getattr(self, f.name) != f.default]
        return SEP.join(t for t in named if t) or "fp32"

    def tokens(self) -> tuple[str, ...]:
        """The knobs' values as tokens, the precision always (fp32 included): what the check reads
        its tolerance from."""
        named = [value_token(f.name, getattr(self, f.name)) for f in fields(self)
                 if f.name == "precision" or getattr(self, f.name) != f.default]
        return tuple(t for t in named if t)

    def process_env(self) -> dict:
        """The environment the case's fresh process needs before torch starts."""
        return settings.environ_with(self.allocator, {})

    def __str__(self) -> str:
        return self.name


# knob -> the tokens that set it, each to its own name (a flag: to True).
KNOBS = {
    "precision": ("fp32", "tf32", "fp16_autocast", "bf16_autocast", "bf16_params"),
    "checkpoint": ("checkpoint",),
    "offload": ("save_on_cpu", "cpu_offload"),
    "data": ("pad_longest", "seq_cap"),
    "embedding": ("cpu_embedding", "tied_embeddings"),
    "channels_last": ("channels_last",),
    "references": ("drop_references", "keep_references"),
    "allocator": tuple(a for a in ALLOCATORS if a != "default"),
}
FLAGS = {f.name for f in fields(Way) if f.type in (bool, "bool")}
TOKENS = {token: knob for knob, tokens in KNOBS.items() for token in tokens}
# Knobs that both decide where the model's parameters live: no placement does both.
CONFLICTS = ((frozenset({"cpu_embedding", "cpu_offload"}), "both decide where the parameters live"),)
LM_ONLY = ("pad_longest", "seq_cap", "cpu_embedding", "drop_references", "keep_references")
IMAGE_ONLY = ("channels_last",)  # a memory format of 4-d image tensors
TOKEN_ONLY = ("tied_embeddings",)  # the token models: lm, encdec


def value_token(knob: str, value) -> str | None:
    if knob in FLAGS:
        return KNOBS[knob][0] if value else None
    return value or None


def parse(text) -> Way:
    """The way ``text`` names (a ``Way`` passes through); ValueError, one line naming the fix,
    for an unknown knob, a knob set twice or knobs that contradict each other."""
    if isinstance(text, Way):
        return text
    if not isinstance(text, str) or not text:
        raise ValueError(f"a way is knob names joined by {SEP!r} (e.g. bf16_autocast{SEP}checkpoint), got {text!r}")
    tokens = text.split(SEP)
    unknown = [t for t in tokens if t not in TOKENS]
    if unknown:
        raise ValueError(f"{text!r}: unknown knob {unknown[0]!r}; a way joins by {SEP!r} knobs of: {', '.join(TOKENS)}")
    seen = {}
    for token in tokens:
        knob = TOKENS[token]
        if knob in seen:
            raise ValueError(f"{text!r} sets the {knob} twice ({seen[knob]}, {token}): keep one")
        seen[knob] = token
    for pair, why in CONFLICTS:
        if pair <= set(tokens):
            raise ValueError(f"{text!r}: {' and '.join(sorted(pair))} {why}: keep one")
    return Way(**{knob: True if knob in FLAGS else token for knob, token in seen.items()})


def canonical(text) -> str:
    """The one name of the way ``text`` names."""
    return parse(text).name


def applies(way: Way, workload: str, image_models, token_models) -> None:
    """Skips a way with a knob that means nothing for ``workload``, naming the knob."""
    for token in way.tokens():
        if token in LM_ONLY and workload != "lm":
            raise Skip(f"{token} applies to workload lm only, not {workload}")
        if token in IMAGE_ONLY and workload not in image_models:
            raise Skip(f"{token} applies to the image models ({', '.join(image_models)}) only, not {workload}")
        if token in TOKEN_ONLY and workload not in token_models:
            raise Skip(f"{token} needs a token model ({', '.join(token_models)}), not {workload}")


class Names(tuple):
    """The values a ``technique`` parameter declares (the single ways, for grids and listings),
    which also takes any combination: ``pick`` parses a value to its canonical name."""

    def pick(self, value) -> str:
        return canonical(value)
