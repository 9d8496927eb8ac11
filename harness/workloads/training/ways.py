"""A way out: the knobs one training step of ``tricks`` runs with, and its one name.

Each knob is its own parameter of ``Way`` and its own small piece of the step that
``harness.workloads.training.tricks.make_trainer`` builds (applied to the model, the step or the
process), so a combination is the pieces together:

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
- ``optimizer``: what keeps the optimizer's state: Adam with two fp32 moments (the default),
  torchao's 8-bit AdamW (adamw8bit), Adam with bf16 moments (adam_bf16_state), Adafactor's
  factored second moment (adafactor) or SGD with one momentum buffer (sgd_momentum);
- ``lora``: the model frozen, low-rank adapters (peft) on its attention and MLP projections trained
  (lora), the adapted linear layers' frozen weights in 4-bit NF4 beneath them (qlora);
- ``attention``: the attention kernel: the scores materialised (attn_eager), or SDPA's flash or
  memory-efficient kernel alone (attn_flash, attn_mem_efficient); by default SDPA picks;
- ``compile``: the model through torch.compile (compile) or its max-autotune mode without CUDA
  graphs (compile_max_autotune);
- ``loss``: the output projection and cross-entropy over chunks of tokens (chunked_loss), so the
  whole logits never exist;
- ``allocator``: a setting of torch's caching allocator for the whole process
  (``PYTORCH_CUDA_ALLOC_CONF``), read once when CUDA starts.

The accumulation micro-batch is the case's own ``micro_batch`` parameter.

Each value a knob takes is registered once (``register``) with all that is known of it: the knob
it sets, the workloads it means something for, its loss tolerance and sidedness, whether it grows
in host memory and the GPU capability it needs. A way's facts are its values' (``Way.tolerance``
and the like), and every list of ways (``TECHNIQUES``, ``TOLERANCE``, ``LM_ONLY``, ...) is read
from the registry: a new value is one more registration, beside its piece. ``applies`` and
``runnable`` skip a way that means nothing for a workload or that this machine cannot run.

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
from harness.workloads.training import allocator as settings

SEP = "+"
# The named allocator settings are ``harness.workloads.training.allocator``'s: one list for every case.
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
    optimizer: str = ""
    lora: str = ""
    attention: str = ""
    compile: str = ""
    loss: str = ""
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

    def values(self) -> tuple[Value, ...]:
        """The registered values of ``tokens``, with their facts."""
        return tuple(REGISTRY[t] for t in self.tokens())

    # A way of several knobs is held to the largest of its knobs' tolerances: the knobs that only
    # reorder sums perturb the curve as the lowest precision among them does, by far less; and to
    # fp32's curve from above only where one of its knobs changes the model or the data.
    @property
    def tolerance(self) -> float:
        """The gap a way's curve may keep from fp32's: the largest of its knobs' tolerances."""
        return max(v.tolerance for v in self.values())

    @property
    def one_sided(self) -> bool:
        """Whether a way is held to fp32's curve from above only: one of its knobs changes the model or data."""
        return any(v.one_sided for v in self.values())

    @property
    def grows_on_host(self) -> bool:
        """Whether a knob keeps what grows with the batch in host memory: no two such processes should
        share a host."""
        return any(v.grows_on_host for v in self.values())

    @property
    def capability(self) -> tuple[int, int] | None:
        """The least CUDA compute capability on which every knob runs as intended; None where none
        asks for one. Declared, not enforced: nothing skips on it."""
        return max((v.capability for v in self.values() if v.capability), default=None)

    @property
    def words(self) -> str:
        """The way in a reader's words, its knobs joined by " + ": "bf16 autocast + checkpointing"."""
        said = [v.said for v in self.values() if v.token != "fp32" or len(self.tokens()) == 1]
        return " + ".join(said)

    @property
    def changes(self) -> tuple[str, ...]:
        """What of the training its knobs change (the model, the data), each once; () where none does."""
        return tuple(dict.fromkeys(v.changes for v in self.values() if v.changes))

    @property
    def falls(self) -> float | None:
        """The share of its first loss a way's loss must fall by within the run, where one of its
        knobs declares that criterion of its own instead of fp32's curve; None where none does."""
        return max((v.falls for v in self.values() if v.falls is not None), default=None)

    @property
    def compiles(self) -> bool:
        """Whether its first step compiles code (torch.compile): its time is reported apart."""
        return any(v.compiles for v in self.values())

    @property
    def needs(self) -> tuple[str, ...]:
        """The Python modules its knobs need beyond torch."""
        return tuple(dict.fromkeys(m for v in self.values() for m in v.needs))

    def __str__(self) -> str:
        return self.name


# What a value may mean something for (``Value.only``): every workload, the LM alone, the image
# models or the token models (the case names which models those are: ``applies``).
EVERY, ONLY_LM, ONLY_IMAGES, ONLY_TOKENS = "", "lm", "image models", "token models"


@dataclass(frozen=True)
class Value:
    """One value of one knob, named by its token, with all that is known of it.

    ``tolerance``: the largest gap allowed between a way's loss curve and fp32's at any step of
    the same training (same model, data and seed), as a share of the loss at the start: the scale
    of the task (ln of the classes for a fresh classifier). A share of each step's own loss would
    not do: a model that memorises its batch drives the loss towards zero, where rounding alone is
    a large share. ``one_sided``: held to it above fp32's curve only. ``grows_on_host``: what it
    keeps in host memory grows with the batch and the sequence. ``capability``: the least CUDA
    compute capability it runs as intended on (declared, not enforced: nothing skips on it).
    ``half``: it computes in a 16-bit float, which a CPU without such units runs on slow
    reference kernels. ``falls``: held to a criterion of its own instead of fp32's curve (it trains
    other weights, or by another rule): its last loss at most (1 - falls) of its first; fp32's
    curve is recorded beside it, not held against it. ``compiles``: its first step compiles code
    (reported apart from the step). ``needs``: the module it needs beyond torch (a skip without it).
    ``cuda_only``: no CPU kernel runs it (a skip there)."""
    token: str
    knob: str
    tolerance: float
    only: str = EVERY
    one_sided: bool = False
    grows_on_host: bool = False
    capability: tuple[int, int] | None = None
    half: bool = False
    words: str = ""  # its name in a reader's words, where the token's own do not say it
    changes: str = ""  # what of the training it changes ("the model", "the data"): "" where it trains the same
    falls: float | None = None
    compiles: bool = False
    needs: tuple[str, ...] = ()  # the Python modules beyond torch it imports
    cuda_only: bool = False
    # Its price is the GPU's question alone, though it runs on the CPU (qlora: LoRA's step on a
    # base dequantised at every matmul): the suite's CPU profile leaves it out, as it does compiles.
    gpu_priced: bool = False

    @property
    def said(self) -> str:
        """The value in a reader's words: ``words``, else its token with spaces."""
        return self.words or self.token.replace("_", " ")


REGISTRY: dict[str, Value] = {}


def register(token: str, knob: str, tolerance: float, **facts) -> Value:
    """Registers one value of ``knob``; the single ways are listed in the order of registration."""
    value = Value(token, knob, tolerance, **facts)
    if token in REGISTRY:
        raise ValueError(f"{token!r} is registered already: a token names one value")
    if knob not in {f.name for f in fields(Way)}:
        raise ValueError(f"{token!r}: {knob!r} is no knob of Way: add the field first")
    if value.only not in (EVERY, ONLY_LM, ONLY_IMAGES, ONLY_TOKENS):
        raise ValueError(f"{token!r}: only={value.only!r} is none of {ONLY_LM!r}, {ONLY_IMAGES!r}, {ONLY_TOKENS!r}")
    REGISTRY[token] = value
    return value


# Techniques that compute the same sums in another order (recomputed activations, the embedding
# looked up on the CPU, gradients accumulated over micro-batches) drift only by rounding and by the
# order of the GPU's atomic sums.
ROUNDING = 2e-3
AMPERE, VOLTA = (8, 0), (7, 0)  # tensor cores compute TF32 and bf16 from Ampere on, fp16 from Volta on

# Lower precisions drift by their mantissa: TF32 and fp16 keep 10 bits, bf16 8, and bf16
# parameters lose small updates for want of an fp32 master copy.
register("fp32", "precision", ROUNDING)
register("tf32", "precision", 1e-2, capability=AMPERE, words="TF32 matmuls")
register("fp16_autocast", "precision", 2e-2, capability=VOLTA, half=True)
register("bf16_autocast", "precision", 3e-2, capability=AMPERE, half=True)
register("bf16_params", "precision", 5e-2, capability=AMPERE, half=True, words="bf16 parameters",
         changes="the model")
register("checkpoint", "checkpoint", ROUNDING, words="checkpointing")
# Tied embeddings, padding and the cap change the model or the data themselves: learning faster
# than fp32 is no fault of theirs, and a model with one embedding matrix fewer may learn slower, so
# they are held only to a loose bound above fp32's curve.
register("pad_longest", "data", 0.1, only=ONLY_LM, one_sided=True, words="padded to the longest",
         changes="the data")
register("seq_cap", "data", 0.1, only=ONLY_LM, one_sided=True, words="sequences capped",
         changes="the data")
register("cpu_embedding", "embedding", ROUNDING, only=ONLY_LM, words="embedding on the CPU")
register("tied_embeddings", "embedding", 0.25, only=ONLY_TOKENS, one_sided=True, changes="the model")
# A memory format of 4-d image tensors. channels_last runs other convolution kernels (NHWC) in
# every layer of the forward and backward, each summing in its own order: rounding, but in every
# step and amplified as the batch is memorised, so it is held as TF32 is.
register("channels_last", "channels_last", 1e-2, only=ONLY_IMAGES)
# Activations kept on the CPU compute the very same sums (the saved tensors come back bit for
# bit): rounding at most. What they keep in host memory grows with the batch and the sequence:
# each process may take the host's share its guard allows (``offload.saving``), so no two of them
# should run on one host at once.
register("save_on_cpu", "offload", ROUNDING, grows_on_host=True, words="activations saved on the CPU")
# CPU offload computes the forward and backward as fp32 does and the Adam update on the CPU
# instead of the device: other kernels, rounding only.
register("cpu_offload", "offload", ROUNDING, words="parameters and optimizer on the CPU")
# drop_references is the loop every other technique runs (``harness.workloads.training.trainer``), named for
# seed 002's advice; keep_references is the everyday loop it is measured against: the previous
# step's logits (batch x seq x vocab floats) alive through the next forward. The two loops compute
# the very same sums (keeping a reference changes no value): rounding at most.
register("drop_references", "references", ROUNDING, only=ONLY_LM)
register("keep_references", "references", ROUNDING, only=ONLY_LM)
# Optimizer state. 8-bit moments (torchao's blockwise quantisation, 256 values a block) and bf16
# moments (8 bits of mantissa) change every update by their rounding, compounded over the steps as
# bf16 parameters' lost updates are: held as bf16_params is, and bf16 moments as bf16 compute. Both
# run torchao's update, which torch.compile builds on the first step (Triton: Volta on). Adafactor and SGD are other
# rules altogether, at their own rates: no gap to Adam's curve says anything of them, so they are
# held to training at all (``TRAINS``).
# Held to training at all: the loss falls within the run by five times the gap rounding alone may
# open (``ROUNDING``), a fall no drift of the sums makes; a model that does not learn stays put.
TRAINS = 5 * ROUNDING
register("adamw8bit", "optimizer", 5e-2, capability=VOLTA, compiles=True, needs=("torchao",), words="8-bit AdamW")
register("adam_bf16_state", "optimizer", 3e-2, capability=VOLTA, compiles=True, needs=("torchao",),
         words="Adam with bf16 moments")
register("adafactor", "optimizer", 0.0, falls=TRAINS, words="Adafactor", changes="the optimizer")
register("sgd_momentum", "optimizer", 0.0, falls=TRAINS, words="SGD with momentum", changes="the optimizer")
# LoRA trains adapters of rank ``tricks.LORA_RANK`` on a frozen model: fewer weights, slower to
# learn than fp32 training them all, so it is held to training at all.
register("lora", "lora", 0.0, only=ONLY_LM, falls=TRAINS, needs=("peft",), words="LoRA adapters",
         changes="the weights trained")
# QLoRA: the same adapters, the frozen weights beneath the adapted linear layers in 4-bit NF4
# (torchao's, as torchtune's QLoRA), dequantised for each matmul (the LM's nn.MultiheadAttention,
# which peft adapts by adding to its weights, stays in its dtype): the forward computes with a
# rounded copy of the model, and only the adapters train, so it is held to training at all as lora.
register("qlora", "lora", 0.0, only=ONLY_LM, falls=TRAINS, needs=("peft", "torchao"), words="QLoRA (NF4 base)",
         changes="the weights trained", gpu_priced=True)
# The attention kernels compute one softmax(QK^T)V in other orders of sums (the eager one writes
# the scores out; flash and memory-efficient tile them): rounding in every layer of every step,
# amplified as the batch is memorised, held as TF32 is. Flash runs half inputs only on CUDA, from
# Ampere on (a skip otherwise, naming the fix).
register("attn_eager", "attention", 1e-2, only=ONLY_TOKENS, words="eager attention")
register("attn_flash", "attention", 1e-2, only=ONLY_TOKENS, capability=AMPERE, words="flash attention")
register("attn_mem_efficient", "attention", 1e-2, only=ONLY_TOKENS, cuda_only=True,
         words="memory-efficient attention")
# torch.compile fuses kernels, each reduction in its own order: rounding in every layer, as
# channels_last's. Inductor's Triton kernels run from Volta on.
register("compile", "compile", 1e-2, capability=VOLTA, compiles=True, words="torch.compile")
register("compile_max_autotune", "compile", 1e-2, capability=VOLTA, compiles=True,
         words="torch.compile, max-autotune")
# The loss over chunks of tokens computes each token's logits and cross-entropy as the whole does:
# the same sums, summed in another order over the chunks.
register("chunked_loss", "loss", ROUNDING, only=ONLY_LM, words="loss over chunks of tokens")
# An allocator setting changes where tensors live, not one sum.
for _setting in (a for a in ALLOCATORS if a != "default"):  # "default" is the knob's default: no token
    register(_setting, "allocator", ROUNDING)


def registered(fact) -> tuple[str, ...]:
    """The tokens of the registered values ``fact`` holds for, in the order of registration."""
    return tuple(token for token, value in REGISTRY.items() if fact(value))


# The knobs a practitioner is told to try beyond precision, checkpointing and offload: what keeps
# the optimizer's state, LoRA, the attention kernel, compile, the loss.
NEWER_KNOBS = ("optimizer", "lora", "attention", "compile", "loss")
# knob -> the tokens that set it, each to its own name (a flag: to True).
KNOBS = {f.name: registered(lambda v, knob=f.name: v.knob == knob) for f in fields(Way)}
FLAGS = {f.name for f in fields(Way) if f.type in (bool, "bool")}
TOKENS = {token: knob for knob, tokens in KNOBS.items() for token in tokens}
# Knobs that both decide where the model's parameters live: no placement does both.
CONFLICTS = ((frozenset({"cpu_embedding", "cpu_offload"}), "both decide where the parameters live"),
             # FSDP's offload shards plain weights: QLoRA's 4-bit ones are made on the device after placement
             (frozenset({"qlora", "cpu_offload"}), "both decide how the frozen weights are kept"))
# The single ways: one knob each, named as they always were. An allocator setting is none: it is a
# setting of the process, which a way may add (``expandable+tf32``).
SINGLE = registered(lambda v: v.knob != "allocator")
TOLERANCE = {token: value.tolerance for token, value in REGISTRY.items()}
ONE_SIDED = registered(lambda v: v.one_sided)
GROWS_ON_HOST = registered(lambda v: v.grows_on_host)
HALF = registered(lambda v: v.half)
COMPILES = registered(lambda v: v.compiles)
CUDA_ONLY = registered(lambda v: v.cuda_only)
GPU_PRICED = registered(lambda v: v.gpu_priced)
CAPABILITY = {token: value.capability for token, value in REGISTRY.items() if value.capability}
LM_ONLY = registered(lambda v: v.only == ONLY_LM)
IMAGE_ONLY = registered(lambda v: v.only == ONLY_IMAGES)
TOKEN_ONLY = registered(lambda v: v.only == ONLY_TOKENS)


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


def why_not(value: Value, workload: str, image_models, token_models) -> str | None:
    """Why ``value`` means nothing for ``workload``, naming it; None where it means something."""
    if value.only == ONLY_LM and workload != "lm":
        return f"{value.token} applies to workload lm only, not {workload}"
    if value.only == ONLY_IMAGES and workload not in image_models:
        return f"{value.token} applies to the image models ({', '.join(image_models)}) only, not {workload}"
    if value.only == ONLY_TOKENS and workload not in token_models:
        return f"{value.token} needs a token model ({', '.join(token_models)}), not {workload}"
    return None


def applies(way: Way, workload: str, image_models, token_models) -> None:
    """Skips a way with a knob that means nothing for ``workload``, naming the knob."""
    for value in way.values():
        reason = why_not(value, workload, image_models, token_models)
        if reason:
            raise Skip(reason)


def runnable(way: Way, device: str) -> None:
    """Skips a way this machine cannot run as meant, naming the fix: a knob's package missing,
    flash attention on CUDA without half inputs (its kernels take fp16 and bf16 only), or a knob
    with no CPU kernel (SDPA's memory-efficient attention) off CUDA."""
    import importlib.util
    for module in way.needs:
        if importlib.util.find_spec(module) is None:
            users = ", ".join(v.token for v in way.values() if module in v.needs)
            raise Skip(f"{users} needs {module}, which this Python lacks: pip install 'oombench[ways]'")
    if way.attention == "attn_flash" and device == "cuda" and not REGISTRY[way.precision].half:
        raise Skip(f"{way}: flash attention takes half inputs only on CUDA: add bf16_autocast or fp16_autocast")
    cuda_only = [v.token for v in way.values() if v.cuda_only]
    if cuda_only and device != "cuda":
        raise Skip(f"{way}: {', '.join(cuda_only)} runs on CUDA only (no CPU kernel): run it with device cuda")


class Names(tuple):
    """The values a ``technique`` parameter declares (the single ways, for grids and listings),
    which also takes any combination: ``pick`` parses a value to its canonical name."""

    def pick(self, value) -> str:
        return canonical(value)
