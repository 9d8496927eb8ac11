"""Which tables the docs and the pages show: each a ``harness table`` command (``Spec``) with its
title and the text above it, grouped per family of benchmarks (``FAMILIES``), the headline, and
one per seed's out-of-memory case (``SEEDS``). No figures: every figure is the table's, made from
the records when a page is written."""
from __future__ import annotations

import shlex

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from harness import cases
from harness.measure.outcomes import SKIPPED
from harness.report import capable, markdown, tables
from harness.report.selection import Select
from harness.workloads.training.trainer import LR, LR_WIDTH

if TYPE_CHECKING:  # a type only: the rows come from the reader that asks for a table
    from harness.report.model import Row

COMMAND = "python3 -m harness table"


@dataclass(frozen=True)
class Spec:
    """One ``harness table`` command, and what its table shows (no figures: those are the table's)."""
    case: str
    down: str
    across: str = tables.MACHINE
    show: str = "step,rate,peak"
    where: tuple[str, ...] = ()
    versus: str | None = None
    title: str = ""
    text: str = ""
    bench: tuple[Select, ...] = ()  # the asv benchmarks that measure it (`harness run --bench`)
    quiet: bool = False  # no section at all, rather than "no record yet", while no record matches
    rank: bool = False  # rows by their step in the first column (`harness table --rank`)
    card: str | None = None  # a named card: no way it cannot run; ranked, those past its total go after the rest
    each_machine: bool = False  # one table per machine that ran it (``for_rows``): each GPU ranked by its own steps

    def args(self) -> list[str]:
        out = [self.case, "--down", self.down]
        if self.across != tables.MACHINE:
            out += ["--across", self.across]
        out += ["--show", self.show]
        for pair in self.where:
            out += ["--where", pair]
        if self.versus:
            out += ["--versus", self.versus]
        return out + ["--rank"] * self.rank + ["--card", self.card] * bool(self.card)

    def command(self) -> str:
        """The command as a shell takes it: ``a|b`` alternatives quoted."""
        return f"{COMMAND} {shlex.join(self.args())}"

    def matches(self, row: Row) -> bool:
        if row.case != self.case:
            return False
        for pair in self.where:
            name, _, value = pair.partition("=")
            have = tables.machine_label(row) if name == tables.MACHINE else row.record.params.get(name)
            if not tables.holds(have, tuple(value.split("|")) if "|" in value else value):
                return False
        return True

    def for_rows(self, rows: list[Row]) -> list[Spec]:
        """The tables this spec makes of ``rows``: itself; or, ``each_machine``, one per machine that ran
        a row it matches (``--where machine=LABEL``, the label in its title), itself where none did."""
        if not self.each_machine:
            return [self]
        ran = sorted({tables.machine_label(r) for r in rows if self.matches(r) and r.record.outcome != SKIPPED})
        # The label is the GPU's own name: text in a heading, never markdown of its own.
        return [replace(self, where=(*self.where, f"{tables.MACHINE}={label}"),
                        title=f"{self.title}: {markdown.inline(label)}", each_machine=False)
                for label in ran] or [self]

    def grid(self, rows: list[Row]) -> tables.Grid | None:
        """The cells of the table the command prints from these rows; None where no record matches."""
        if not any(self.matches(r) for r in rows):
            return None
        case = cases.get(self.case)
        where = tables.where_of(case, list(self.where))
        versus = tables.versus_pairs(case, self.versus)
        left = []
        if self.card:
            rows, left = tables.runnable(rows, self.case, where, self.card)
        made = tables.grid(rows, self.case, self.down.split(","), self.across, self.show.split(","), where, versus,
                           self.rank, self.card)
        said = capable.note(self.card, left) if self.card else None
        return replace(made, notes=[*made.notes, said]) if said else made

    def render(self, rows: list[Row]) -> str | None:
        """What the command prints: the table, then its footnotes."""
        made = self.grid(rows)
        return None if made is None else made.markdown() + "".join(f"\n\n{n}" for n in made.notes)


@dataclass(frozen=True)
class Family:
    name: str  # the module of benchmarks/
    title: str
    cases: tuple[str, ...]
    intro: str
    specs: tuple[Spec, ...] = field(default_factory=tuple)
    compares: bool = True  # the first table's lines are ways of one workload (False: probes, commands), said in words


LM = ("workload=lm",)
RANKED_CARD = "l4-24gb"  # the 24 GB card the LM's ways are ranked under
ONE_GPU = "strategy=single,gpus=1,micro_batches=1,nodes=1,transport=fast"
PARALLEL_SHOW = "step,peak,scaling,loss"
PARALLEL_LM = Select("parallel", "LmSingle", "LmDataParallel", "LmModelParallel", "LmPipeline", "LmTwoNodes",
                     "LmCpuSingle", "LmCpu", "LmCpuPipeline")
PARALLEL_RESNET = Select("parallel", "ResnetSingle", "ResnetDataParallel", "ResnetScalingSingle", "ResnetScaling",
                         "ResnetModelParallel", "ResnetPipeline", "ResnetTwoNodes")
PARALLEL_TEXT = ("Step and peak also as a multiple of `single` on the same machine; the peak is the largest "
                 "GPU's. `of linear` is the scaling efficiency: single's step over the GPU count times the "
                 "strategy's, 1.00 where k GPUs cut the step k times.")
# Pageable copies swept over buffer sizes, where the suite declares the case: the ceiling the pages
# show is the best size; this table keeps the sweep.
PAGEABLE_SPECS = (
    Spec("pageable", "direction,size_mib", show="rate", title="Pageable copies by buffer size",
         text="Copies from and to pageable host memory at each buffer size, one column per box: the "
              "pages take the best size as the box's pageable ceiling.", bench=(Select("ceilings"),), quiet=True),
) if "pageable" in cases.names() else ()
# Tables both a family and a seed show, each with its own title and text.
LONG_SEQUENCE = Spec("tricks", "width,seq_len,machine", across="technique", show="step,rate,peak,loss",
                     where=("device=cuda", "batch=1"), bench=(Select("tricks", "LongSequence"),))
FITS_BATCH = Spec("fits", "technique,machine", across="budget", show="check:max_batch",
                  where=("over=batch", "allocator=default"),
                  bench=(Select("tricks", "WhatFits", "WhatFitsCombined", "WhatFitsNewer"),))
FITS_SEQUENCE = Spec("fits", "technique,machine", across="budget", show="check:max_seq_len",
                     where=("over=seq_len", "allocator=default"), bench=(Select("tricks", "WhatFitsSequence"),))
FRAGMENTATION_SHOW = "step,rate,peak,check:fragmentation"
# What an emulated card charges (``harness.measure.guards.budget``), as each box measured it in a fresh process.
CONTEXT_SPECS = tuple(
    Spec("ceilings", "probe", show=",".join(f"check:context.{s}" for s in stages), where=(f"probe=context_{lib}",),
         title=f"What {name} holds on the device before its first array", bench=(Select("ceilings", "Context"),),
         quiet=True,
         text=f"Bytes a fresh process held on the device outside {name}'s pool (NVML's figure for the process, "
              "else the card's used memory less what it was before) once CUDA started, then once a first matrix "
              "product loaded cuBLAS" + (", then once a first convolution loaded cuDNN" if "cudnn" in stages else "")
              + ": what an emulated card charges against its total.")
    for lib, name, stages in (("torch", "PyTorch", ("cuda", "cublas", "cudnn")), ("cupy", "CuPy", ("cuda", "cublas"))))
FAMILIES = (
    Family(
        "ceilings", "Ceilings: the box's physical limits", ("ceilings",) + tuple(s.case for s in PAGEABLE_SPECS),
        "Every other figure is read against these, measured by the suite on the same box: device-memory "
        "copy (bytes read plus written), host-to-device and device-to-host copies from pinned and from "
        "pageable memory, GPU-to-GPU, the matrix-multiply rate in fp32, tf32, fp16 and bf16, and, on the "
        "host side that CPU offload depends on, host memory copy and CPU fp32 matrix multiply. Buffers are "
        "far larger than any cache; inputs are random, outputs are poisoned before the run, and every "
        "result is checked afterwards (copies exactly, products against a float64 reference, with fp32 "
        "held tightly enough that a silent TF32 product fails). Pageable copies go through a staging "
        "buffer in the driver: the gap to the pinned figure is what `pin_memory=True` buys.",
        (Spec("ceilings", "probe", show="rate", title="Every probe, every box",
              text="The rate of each probe in datasheet units, one column per box; a probe the box cannot "
                   "run (GPU-to-GPU with one GPU) is skipped, one never run there says `not run`.",
              bench=(Select("ceilings"),)),) + CONTEXT_SPECS + PAGEABLE_SPECS, compares=False),
    Family(
        "unified", "Unified (managed) memory with CuPy, and what experts do instead",
        ("unified", "out_of_core", "unified_seed", "beyond", "seed000"),
        "The first way out people try is two lines of CuPy, "
        "`cupy.cuda.set_allocator(cupy.cuda.MemoryPool(cupy.cuda.malloc_managed).malloc)`, after which "
        "arrays larger than the GPU \"just work\", slowly. `unified` measures how slowly: `allocator` is "
        "`device_pool` (CuPy's default), `managed_pool` (the two lines, every request through the guard) or "
        "`async_pool` (`cudaMallocAsync`); `placement` of managed pages is `resident` (prefetched to the GPU "
        "once: the steady state) or starts every step with the whole set on the host: `fault` (the GPU's "
        "page faults move it), `prefetch` (an explicit `cudaMemPrefetchAsync` in the step), `host_mapped` "
        "(advised to stay on the host and mapped: the GPU reads and writes over the host link) or "
        "`read_mostly` (faults duplicate pages instead of moving them); `pattern` is `stream` (out = x + y), "
        "`reduce` (sum), `matmul` (float32, compute-bound) or `gather` (random reads from a table, as an "
        "embedding does), each with the bytes and FLOPs it must move counted and its result checked; "
        "`fraction` is the working set as a share of the card's total memory. Oversubscription (1.5) is "
        "declared everywhere and runs only with the opt-in (README, Safety): without it the managed cases "
        "skip with the reason and the device pools record `does not fit`.\n\n"
        "`out_of_core` is what experts use instead: the set stays in pinned host memory and is streamed "
        "through two device buffers on separate copy and compute streams, so that the copy of one chunk "
        "overlaps the compute of the one before. `unified_seed` is the scenario as users first meet it: "
        "three `size x size` float64 `cupy.ones` under the managed pool, summed, each step from an empty pool.\n\n"
        "Past the memory a card has, without oversubscribing a shared one: `budget` emulates a 16, 24, 40 or "
        "80 GB card by capping CuPy's pool (`set_limit`). `beyond` takes working sets of `times` (1.5 or 3) the "
        "budget by each `way`: `device_pool` (the capped pool: does not fit, with the bytes asked), "
        "`out_of_core` (pinned host memory streamed through buffers that fit the budget, chunks sized from the "
        "set), `zero_copy` (pinned host memory mapped for the GPU, read in place over the host link) and "
        "`managed_pool` (kept under the card's free memory by the guard: the budget caps nothing there and "
        "nothing is evicted, as each record's check says). `seed000` is seed 000 exactly: three "
        "float64 arrays of 2**30 elements and `c = a + b`, by the same ways.",
        tuple(Spec("unified", "allocator,placement,fraction", show="rate,peak", where=(f"pattern={p}",),
                   title=f"`unified`, pattern `{p}`",
                   text=f"Each allocator and placement at each working-set fraction, pattern `{p}`: the rate "
                        "the kernel's counted work implies, and the device memory it took.",
                   bench=(Select("unified", "Allocators", "Placements"),))
        for p in ("stream", "reduce", "matmul", "gather"))
        + (Spec("out_of_core", "pattern,fraction", show="rate,peak", title="`out_of_core`: pinned host memory, "
                "two streams", text="Chunked streaming from pinned host memory: the rate of the kernel's work "
                "and the device memory its two buffers took.", bench=(Select("unified", "OutOfCore"),)),
           Spec("unified_seed", "fraction", show="step,rate,peak", title="`unified_seed`: three arrays of ones, "
                "summed", text="The seed scenario at each fraction of the card: the step (allocation, first "
                "touch and the sum), the rate of useful traffic, the device memory.",
                bench=(Select("unified", "Seed"),)),
           Spec("beyond", "pattern,budget,times,machine", across="way", show="rate,peak",
                title="`beyond`: working sets past an emulated card, by each way out",
                text="Each way at each working set past its budget: the rate of the pattern's counted work "
                     "and the device memory it took; does-not-fit where the way has no room.",
                bench=(Select("unified", "Beyond"),)),
           Spec("seed000", "budget,machine", across="way", show="step,peak",
                title="`seed000`: three float64 arrays of 2**30 elements and c = a + b",
                text="Seconds per add and the device memory, by way, under each budget.",
                bench=(Select("unified", "Seed000"),)))),
    Family(
        "chainer_pool", "Chainer with a managed memory pool, and the same GCN in PyTorch",
        ("chainer_gcn", "chainer_mlp", "chainer_cnn", "torch_gcn"),
        "Chainer users who met `out of memory` on models that hold a whole graph or batch on the GPU were "
        "told to put Chainer's CuPy allocator on a managed pool. These cases measure what that costs with "
        "Chainer 7.8.1, its last release, on today's NumPy, CuPy and Python. `chainer_gcn` is a two-layer "
        "graph convolution network (Kipf & Welling) trained full-batch with Adam on a synthetic "
        "planted-partition graph (`chainer.utils.CooMatrix` and `F.sparse_matmul`); `torch_gcn` is the same "
        "model on the same graph from the same weights in PyTorch (`torch.sparse`); `chainer_mlp` and "
        "`chainer_cnn` are a dense and a convolutional net on the same pools. `pool` is `device_pool` "
        "(Chainer's default, CuPy's pool) or `managed_pool` (through the guard) with `device=cuda`, and "
        "`numpy` with `device=cpu`. A step is one forward, backward and update; each check asks the loss to "
        "have dropped, and the GCNs' also compare the trained output at sampled nodes with a float64 "
        "reference. Chainer 7.8.1 imports on NumPy 2 and Python 3.12 only with small shims, applied only "
        "where missing and named in each record's environment (`shims`). The peak figure is the pool's "
        "(CuPy's pool; PyTorch's allocator) and the device's.",
        (Spec("chainer_gcn", "features,nodes,machine", across="pool", where=("device=cuda",),
              title="`chainer_gcn`: device pool against managed pool",
              text="The GCN on each pool, by graph size.", bench=(Select("chainer_pool", "Gcn", "GcnCpu"),)),
         Spec("torch_gcn", "features,nodes", where=("device=cuda",), title="`torch_gcn`: the same GCN in PyTorch",
              text="The same model, graph and weights in PyTorch, one column per box.",
              bench=(Select("chainer_pool", "TorchGcn", "TorchGcnCpu"),)),
         Spec("chainer_mlp", "batch,budget,machine", across="pool", where=("device=cuda",),
              title="`chainer_mlp`: a dense net on each pool", text="By batch size, on the whole card and past an "
              "emulated 16 GB card (`budget`).", bench=(Select("chainer_pool", "Mlp", "MlpCpu", "MlpBeyond"),)),
         Spec("chainer_cnn", "batch,machine", across="pool", where=("device=cuda",),
              title="`chainer_cnn`: a convolutional net on each pool", text="By batch size.",
              bench=(Select("chainer_pool", "Cnn", "CnnCpu"),)))),
    Family(
        "parallel", "Data parallel against model parallel", ("parallel_lm", "parallel_resnet50"),
        "When the model and its batch do not fit one GPU, the way out is more GPUs, by copying the model "
        "(data parallel) or by cutting it (model parallel). `parallel_resnet50` trains torchvision's "
        "ResNet50 and `parallel_lm` the shared transformer LM under each `strategy`: `single` (one GPU, the "
        "baseline), `dp` (`nn.DataParallel`), `ddp` (DistributedDataParallel, one process per GPU, NCCL), "
        "`naive_mp` (the network cut into `gpus` consecutive stages), `pipeline` (the same stages fed "
        "`micro_batches` micro-batches in GPipe order) and `fsdp` (FSDP2, each block its own unit). `batch` "
        "is the global batch under every strategy, so seconds per step compare directly, and the scaling "
        "efficiency of a strategy on k GPUs is single's seconds per step over k times its own. The cuts are "
        "the harness's: each layer is sized from a shape-only run on PyTorch's meta device and the cuts "
        "minimise the largest stage (`cut=seed003` cuts ResNet50 after `layer2` instead, as seed 003 did). A GPU "
        "count the box lacks skips with the reason. `ddp` and `fsdp` start their ranks under torch's elastic "
        "launcher; `nodes=2` runs them as two rendezvoused node agents of one GPU each on one box, and "
        "`transport=sockets` without NCCL's peer-to-peer and shared-memory paths, as between hosts without a "
        "fast link. Over several boxes, run the same command on each with torchrun's arguments, "
        "`python3 -m harness run --bench 'parallel\\.Lm' --nnodes 2 --rdzv-endpoint node0:29500 --rdzv-id lm1` "
        "(`--rdzv-backend static --node-rank R` to number the nodes yourself), or under SLURM "
        "`MASTER_ADDR=node0 srun --nodes 2 --ntasks-per-node 1 python3 -m harness run --bench 'parallel\\.Lm'` "
        "(the node count, node number and job id come from `srun`): `gpus` is then the ranks in all, and the "
        "node holding rank 0 files the record, whose `check.launch` says the nodes, GPUs per node and transport.",
        (Spec("parallel_lm", "strategy,gpus,micro_batches,nodes,transport", show=PARALLEL_SHOW, where=("device=cuda",),
              versus=ONE_GPU, title="`parallel_lm`: the transformer LM", text=f"Each strategy on each GPU count. "
              f"{PARALLEL_TEXT}", bench=(PARALLEL_LM,)),
         Spec("parallel_resnet50", "image_size,strategy,gpus,micro_batches,cut,nodes,transport", show=PARALLEL_SHOW,
              where=("device=cuda", "batch=10"), versus=f"{ONE_GPU},cut=balanced",
              title="`parallel_resnet50`: ResNet50",
              text=f"Each strategy on each GPU count, by image size, at the tutorial's batch 10. {PARALLEL_TEXT}",
              bench=(PARALLEL_RESNET,)),
         Spec("parallel_resnet50", "strategy,gpus", show=PARALLEL_SHOW,
              where=("device=cuda", "batch=16", "image_size=1024"),
              versus="strategy=single,gpus=1", title="`parallel_resnet50` at batch 16: scaling over 1, 2, 4 and 8 GPUs",
              text=f"Data parallel at 1024 x 1024 and batch 16, which every GPU count splits evenly (batch 10 does not "
                   f"over 4 or 8). {PARALLEL_TEXT}",
              bench=(Select("parallel", "ResnetScaling", "ResnetScalingSingle"),)))),
    Family(
        "tricks", "Everyday memory tricks, and what fits", ("tricks", "fits"),
        "What most people do first when out of memory, each a value of `technique` over the same training "
        "step: `fp32` (the reference, TF32 off), `tf32`, `fp16_autocast` (with a GradScaler), "
        "`bf16_autocast`, `bf16_params` (parameters, gradients and Adam's state in bf16), `checkpoint` "
        "(every block recomputed in backward), `pad_longest` and `seq_cap` (a batch in which one sequence is "
        "four times longer than the rest, padded to the longest, or cut at `seq_len` first), "
        "`cpu_embedding` (the token embedding, its gradient and its optimizer state on the CPU) and "
        "`tied_embeddings` (input and output embedding one matrix). `workload` is `lm` (a decoder-only "
        "transformer), `encdec` (an encoder-decoder on a copy task) or `resnet50`; one optimizer step covers "
        "`batch` samples in `batch / micro_batch` accumulated micro-batches, with the full batch's gradient "
        f"whatever the split. Adam trains at {LR:g}, and a transformer wider than {LR_WIDTH} at {LR:g} x "
        f"{LR_WIDTH} / width (Adam moves each weight by about its rate, so a wider layer's output moves more). "
        "Each check trains from seed 0 and records the first and last loss: read the "
        "loss against the `fp32` record of the same parameters to see what a technique costs in training.\n\n"
        "`fits` answers \"how large a batch fits on a 16, 24, 40 or 80 GB card with this trick\": for a "
        "technique and a `budget` (GB = 10^9 bytes, or `card`), it searches the largest batch (`over=batch`) "
        "or the longest single sequence (`over=seq_len`) that trains two steps with PyTorch's allocator "
        "capped at the budget, each probe in a fresh process. Only this run's probes decide the answer; the "
        "search logs every probe beside the run's records (`<run>.fits-probes.ndjson`), and a later run "
        "probes first the sizes those logs found either side of the answer (its own machine's logs, or "
        "another's under the same budget).",
        (Spec("tricks", "technique", show="step,rate,peak,loss", where=LM + ("batch=16", "seq_len=1024"),
              title="The techniques on the LM", text="The LM at batch 16 of 1024 tokens, every technique.",
              bench=(Select("tricks", "Techniques"),)),
         Spec("tricks", "technique", show="step,peak,loss,compile", where=LM + ("batch=16", "seq_len=1024"),
              versus="technique=fp32", rank=True, card=RANKED_CARD, each_machine=True,
              title="Every way on the LM, ranked under a 24 GB card",
              text="The table above, ranked for an L4 (24 GB), one table per GPU: the ways whose device peak (the "
                   "second figure of the peak) is within the card's total by their step on that GPU, fastest first "
                   "(`--rank`), then those past it, then the ways that did not fit or failed and those not run. "
                   "Step and peak also as a multiple of fp32's on the same GPU; the loss is held to fp32's curve "
                   "within each knob's tolerance, or, for a knob that trains other weights or by another rule "
                   "(LoRA, Adafactor, SGD), to a loss that falls; a way that compiles on its first step (`compile`, "
                   "torchao's optimizers) has that compile time apart, never in its step.",
              bench=(Select("tricks", "Techniques", "NewerCombined"),)),
         Spec("tricks", "technique", show="step,peak,loss", where=LM + ("batch=4", "seq_len=4096"),
              versus="technique=fp32", rank=True, card=RANKED_CARD, each_machine=True,
              title="The attention kernels at 4096 tokens, ranked under a 24 GB card",
              text="The LM at batch 4 of 4096 tokens, as many as above, where the eager kernel's scores (batch x "
                   "heads x seq x seq a layer) outgrow everything else: each kernel in fp32 and under bf16 autocast "
                   "(flash takes half inputs only), ranked as the table above.",
              bench=(Select("tricks", "AttentionLong"),)),
         Spec("tricks", "technique", show="step,rate,peak,loss", where=("workload=encdec",),
              title="The techniques on the encoder-decoder", text="A copy task at batch 16 of 1024 tokens; "
              "`tied_embeddings` is one matrix for the encoder, the decoder and the output.",
              bench=(Select("tricks", "Techniques"),)),
         Spec("tricks", "technique", show="step,rate,peak,loss", where=("workload=resnet50",),
              title="The techniques on ResNet50", text="Batch 16 of 224 x 224 images; the techniques that "
              "only apply to sequences skip.", bench=(Select("tricks", "Techniques"),)),
         Spec("tricks", "micro_batch,machine", across="technique", show="step,rate,peak,loss",
              where=("device=cuda", "batch=64"), title="Gradient accumulation",
              text="The optimizer step fixed at 64 sequences of the LM, cut into micro-batches.",
              bench=(Select("tricks", "Accumulation"),)),
         Spec("tricks", "vocab,machine", across="technique", show="rate,peak,loss", where=("device=cuda", "batch=8"),
              versus="technique=fp32", title="The vocabulary",
              text="The LM at batch 8 from a small vocabulary to a large one: each figure also as a multiple "
                   "of fp32's at that vocabulary.", bench=(Select("tricks", "Vocabulary"),)),
         replace(LONG_SEQUENCE, title="One long sequence",
                 text="One sequence per step, ever longer, at two widths."),
         replace(FITS_BATCH, title="What fits: the largest batch", text="The largest batch of 1024-token "
                 "sequences of the LM that trains under each budget."),
         Spec("fits", "technique", show="check:max_batch", where=("over=batch", "allocator=default", "budget=24GB"),
              title="What fits a 24 GB card: the largest batch, by every way searched",
              text="The column of 24GB above, every way beside the three cheapest with a newer knob (by the ranked "
                   "table's step, of the ways a search can probe: one that compiles on its first step would "
                   "compile again in every probe). The rule every search uses: the largest batch of 1024-token "
                   "sequences that trains two steps with torch's allocator capped at 24 x 10^9 bytes, each probe a "
                   "fresh process, the two batches after it seen not to fit. The cap charges no CUDA context: an "
                   "L4's 24.2 GB total less its context leaves the allocator less than that, so on an L4 read each "
                   "answer as at most this.",
              bench=(Select("tricks", "WhatFits", "WhatFitsCombined", "WhatFitsNewer"),)),
         replace(FITS_SEQUENCE, title="What fits: the longest sequence", text="The longest single sequence of "
                 "the LM that trains under each budget."))),
    Family(
        "fragmentation", "Allocator settings, on training that fragments",
        ("fragmentation", "fragmentation_cupy", "fits"),
        "PyTorch's out-of-memory message ends: \"If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation\". Reserved stays close to "
        "allocated while every step has the same shapes; real training's shapes change. `fragmentation` "
        "trains the LM (12 blocks, width 1024, vocab 32000, Adam, bf16 autocast) on 16,384 tokens a step cut "
        "into sequences of one length drawn per step, any from 128 to 4096 (`shapes=uniform128-4096`) or "
        "one of the powers of two between, as bucketed batching cuts them (`pow2_128-4096`), or always 1024 "
        "(`fixed1024`), "
        "and ResNet50 on 10 x 1024 x 1024 pixels a step in images of one side drawn per step from 224 to "
        "1024 by 32 (`uniform224-1024`) or always 1024, the draws seeded so that every setting meets the same "
        "sizes (`draws` names the seed). `references=keep` trains in the everyday loop, where the last step's "
        "outputs and zeroed gradients live through the next forward; `drop` is the suite's own loop. "
        "`allocator` is `default`, `expandable` (`expandable_segments:True`), `async` "
        "(`backend:cudaMallocAsync`), `gc0.6` (`garbage_collection_threshold:0.6`, which acts past 60% of "
        "what the process may use: under an emulated card) or `split512` (`max_split_size_mb:512`), put in "
        "the environment of the case's own process before torch is imported (the backend is chosen when "
        "torch loads) and checked against the backend torch runs. `peak` is allocated / device, over the "
        "timed steps; `fragmentation` is reserved over allocated at their peaks. Under `async` an emulated "
        "card caps the bytes in use, not the driver pool's reserve. `fragmentation_cupy` runs CuPy's "
        "`device_pool`, `async_pool` and `limited_pool` (`set_limit` at 1.25 x the largest step's live "
        "bytes) on attention over the same lengths; its `fragmentation` is the pool's held bytes over its "
        "used ones at the steps' ends. `fits` is the largest LM batch of 1024 tokens that trains on a 24 GB "
        "card, each probe a fresh process under the setting.",
        (Spec("fragmentation", "workload,allocator,machine", across="shapes", show=FRAGMENTATION_SHOW,
              where=("device=cuda", "budget=card", "references=drop"),
              title="Reserved against allocated, by setting and shape",
              text="Each workload on the whole card, its fragmenting shapes beside one fixed shape.",
              bench=(Select("fragmentation", "LmShapes", "ResnetShapes"),)),
         Spec("fragmentation", "allocator,machine", across="shapes", show=FRAGMENTATION_SHOW,
              where=("device=cuda", "workload=lm", "budget=card", "references=keep", "draws=0"),
              title="The LM in the everyday loop",
              text="`references=keep`: `out = model(x)`, `loss = ...` and `zero_grad(set_to_none=False)` at the top "
                   "of each step, so the last step's logits, at the last step's length, and the zeroed gradients "
                   "live through the next forward.",
              bench=(Select("fragmentation", "LmEverydayLoop"),)),
         Spec("fragmentation", "allocator,machine", across="draws", show=FRAGMENTATION_SHOW,
              where=("device=cuda", "workload=lm", "budget=card", "references=keep", "shapes=uniform128-4096"),
              title="The everyday loop, its lengths drawn in three orders",
              text="The same distribution of lengths met in another order (`draws`, the seed of the draws; the "
                   "model and its data unchanged): how far the reserve depends on the order the shapes arrive in.",
              bench=(Select("fragmentation", "LmEverydayLoop", "LmDrawOrder"),)),
         Spec("fragmentation", "workload,allocator,machine", across="budget", show=FRAGMENTATION_SHOW,
              where=("device=cuda", "shapes=uniform128-4096", "references=drop"),
              title="The fragmenting LM on a 24 GB card",
              text="Where the default's reserve outgrows the card and a setting keeps it under.",
              bench=(Select("fragmentation", "LmBudget"),)),
         Spec("fragmentation", "workload,allocator,machine", across="budget", show=FRAGMENTATION_SHOW,
              where=("device=cuda", "shapes=uniform224-1024", "references=drop"),
              title="The fragmenting ResNet50 on a 16 GB card",
              bench=(Select("fragmentation", "ResnetBudget"),)),
         Spec("fragmentation_cupy", "pool,machine", across="shapes", show=FRAGMENTATION_SHOW,
              title="CuPy's pools", text="Attention over 16,384 tokens a step, the lengths drawn or fixed.",
              bench=(Select("fragmentation", "CupyPools"),)),
         Spec("fits", "allocator,machine", across="budget", show="check:max_batch",
              where=("over=batch", "technique=bf16_autocast"), title="What fits, by setting",
              text="The largest batch of 1024-token sequences of the LM in bf16 autocast.",
              bench=(Select("fragmentation", "WhatFitsAllocator"), Select("tricks", "WhatFits"))))),
    Family(
        "tooling", "The suite's own tools on a long history", ("tooling",),
        "How long the gate and the comparison pages take on a results folder of 50,000 records, made up "
        "the same way every time (`harness/workloads/synthetic.py`: a ceilings probe and a grid of tricks on "
        "four machines, run after run), whatever is committed. Each figure is one command's wall time as a "
        "user runs it, a fresh interpreter and its imports included: `gate_50k` compares the first half of "
        "the runs (BASE, and the history its floors are learned from) with the second, `--cross-machine`; "
        "`pages_50k` builds the pages of all of them (`--no-asv`). CPU only, on any box; the box's other "
        "load at the time is not in the record, so read a figure from a shared box as an upper bound.",
        (Spec("tooling", "probe", show="step", title="Each command on 50,000 records",
              text="Seconds per command, one column per box.", bench=(Select("tooling"),)),), compares=False),
    Family(
        "models", "Your model, your card: `harness try` and the models a project tracks", ("try",),
        "A model brought by its factory (`path/to/file.py:factory`, `package.module:factory`) or a built-in "
        "architecture of transformers' config classes, randomly initialised (`llama-1b`, `llama-3b`, "
        "`gpt2-medium`, `bert-large`, `vit-l16`), trained under each way out of the precision, checkpoint "
        "and offload knobs (`--ways newer`: also the optimizer, LoRA and QLoRA, attention, compile and "
        "chunked-loss knobs the model takes), its loss held to fp32's curve as `tricks`' are, or to a "
        "falling loss where the knob trains other weights or by another rule. `python3 -m harness try TARGET "
        "--batch B [--seq-len S] --card NAME...` trains every way on the whole card (the `card` column), then "
        "under each named card's emulation the fastest way whose peak fits it: that cell is its answer for "
        "the card. Models named in a project's pyproject.toml (`[tool.oombench.models]`) run the same case "
        "through asv (`benchmarks/models.py`).",
        (Spec("try", "target,batch,seq_len,technique", across="budget", show="step,peak,loss",
              title="Each model's ways on the whole card, and the answer under each card",
              text="One row per model, batch, sequence length (0: the factory's own) and way, one column per "
                   "card: `card` is the whole card every way trained on, a named card holds the way `harness "
                   "try` answered for it (the fastest whose peak fit), run under that card's emulation. A newer "
                   "`try` on a GPU replaces an older one's cells where it gave again every answer the older one "
                   "gave; one that weighed other ways (`--ways`) leaves them standing beside its own. The "
                   "command that made a row is `python3 -m harness try TARGET --batch B --seq-len S --card` "
                   "with that row's values and the columns' cards (and `--ways` its way).",
              bench=(Select("models"),), quiet=True, each_machine=True),
         Spec("try", "technique", show="step,peak,loss,compile", versus="technique=fp32", rank=True,
              card=RANKED_CARD, each_machine=True, quiet=True,
              where=("target=llama-1b", "batch=4", "seq_len=2048", "budget=card"),
              title="The 1B Llama-style decoder's ways, ranked under a 24 GB card",
              text="The whole-card rows of `llama-1b` at batch 4 of 2048 tokens, every way any `try` of it ran, "
                   "ranked for an L4 (24 GB) as the LM's ways are: those whose device peak is within the card's "
                   "total by their step on that GPU, fastest first, then those past it. Step and peak also as a "
                   "multiple of fp32's; a way that compiles has that time apart.",
              bench=(Select("models"),)),)),
)
# The headline: every technique on the LM, each figure against fp32 on the same card.
@dataclass(frozen=True)
class Page:
    """A page its own reader makes (not a ``harness table``): its title and the text above it."""
    title: str
    text: str


PREDICT = Page(
    "What fits, predicted: each estimator against the measured answer",
    "For every way, axis, budget and GPU the what-fits searches answered (the latest record of each), the "
    "largest size and the peak that each estimator predicts, against what the search measured. The suite's "
    "predictor (`harness/workloads/search/predict.py`, `prediction`) fits each peak's law by least squares on "
    "the three probed sizes nearest the largest one under the budget, among those that share its allocator "
    "packing (no fall of the reserve's overhead, reserved less allocated, to under half between neighbours: "
    "where that size alone shows its packing, the allocated law with its overhead in proportion to the size), "
    "its shape read off the allocated bytes (linear in the batch; along one sequence the square where a third "
    "size asks for it with no negative coefficient; a smallest size on the optimizer's plateau left out, and "
    "no prediction where the allocated peak is flat over the sizes and one past it shows how the step grows), "
    "and reads the largest size there against what the allocator can reach (the cap; on the whole card the "
    "device's total as torch sees it less the CUDA context), never past the size whose allocated peak alone "
    "passes it, under any size the host's memory could not hold; no prediction either where the allocator's "
    "rounding of the probes' reserves (to a whole segment of the large pool) alone leaves the answer more "
    "than a step either way. Each cell's prediction is fed what its "
    "search had seen before it answered: the three sizes of a cold start (1, 2 and 4 samples, or the sequence, "
    "its double and quadruple: one round of probes side by side, all the predictor needs under the smallest "
    "budget), and the probes of the same case's searches under smaller budgets, which a run makes first; never "
    "a probe under the cell's own budget or a larger one past the cold start. accelerate's `estimate-memory` "
    "(weights, gradients and Adam), DeepSpeed's ZeRO-2 model states "
    "(`estimate_zero2_model_states_mem_needs_all_live`'s logic, one GPU) and the Megatron "
    "activation formula s\\*b\\*h\\*(34 + 5\\*a\\*s/h) a layer on top of the model states are run on the CPU "
    "against the same model (`python -m harness.workloads.search.estimators results`, `pip install "
    "'oombench[estimators]'`). The bar: the largest size within one search step in 95% of the cells, "
    "the peak within 3%.")

# The seeds' ways, one by one: the newer ones and the combinations have tricks.md's tables of their own.
HEADLINE_WAYS = ("fp32", "tf32", "fp16_autocast", "bf16_autocast", "bf16_params", "checkpoint", "pad_longest",
                 "seq_cap", "cpu_embedding", "tied_embeddings", "save_on_cpu", "cpu_offload", "drop_references",
                 "keep_references")
HEADLINE = Spec("tricks", "technique", show="rate,peak,loss",
                where=LM + ("batch=16", "seq_len=1024", f"technique={'|'.join(HEADLINE_WAYS)}"),
                versus="technique=fp32", bench=(Select("tricks", "Techniques"),))
# An answer per seed: each out-of-memory scenario the suite grew from, priced way by way under the
# emulated cards (``budget``), every figure from the records the families' tables read too.
SEED_003_BASE = "technique=fp32,micro_batch=10,budget=card"
SEED_003_BENCH = (Select("tricks", "ResnetSeed", "Seed003Budget", "Seed003Accumulation", "Seed003Combined"),)


def _seed003_cheapest(w: str) -> Spec:
    """Seed 003's ways under a 16 GB card, cheapest first: the grid below, read for one card."""
    return Spec("tricks", "technique,micro_batch", across=tables.MACHINE, show="step,peak,loss",
                where=("budget=16GB", f"workload={w}", "batch=10"), versus=SEED_003_BASE, rank=True, card="p100-16gb",
                title=f"Seed 003: the cheapest ways for {w[-4:]} x {w[-4:]} images under a 16 GB card",
                text="Each way out and combination measured under the 16 GB budget, at each micro-batch, one "
                     "column per GPU. Rows are ranked by the step in the first column, fastest first (`--rank`); "
                     "the other columns keep that order, so a GPU after the first is read down its own column. "
                     "The ways that ran out of memory under the budget or failed their loss check (their step is "
                     "shown, never ranked) follow, then those not run there. A way that trained under the budget "
                     "fits a 16 GB card when its device peak, the second figure of its peak (the allocator's pool "
                     "with what the cap leaves out: the CUDA context and library workspaces), is within the "
                     "card's total too, the rule the chooser applies. Step and peak also as a multiple of fp32 "
                     "at micro-batch 10 on the whole card of the same GPU; the table below has every budget.",
                bench=SEED_003_BENCH)


def _seed003_grid(w: str) -> Spec:
    """Seed 003 under every budget, each way at each micro-batch on each GPU."""
    return Spec("tricks", "technique,micro_batch,machine", across="budget", show="step,peak,loss",
                where=(f"workload={w}", "batch=10"), versus=SEED_003_BASE, card="p100-16gb",
                title=f"Seed 003: ResNet50, batch 10 of {w[-4:]} x {w[-4:]} images, under each card",
                text="The model-parallel example that ran out of memory on a 16 GB card, on one GPU under each "
                     "budget, by every single-GPU way out (accumulation as `fp32` at a smaller `micro_batch`) and "
                     "by ways combined (`bf16_autocast+checkpoint`: each knob of the way, joined by `+`, checked "
                     "against fp32's curve within the largest of its knobs' tolerances); "
                     "step, peak and loss also as a multiple of fp32 on the whole card. A way out whose loss "
                     "curve leaves fp32's tolerance is marked failed, with both curves in its record, and the "
                     "step and peak its steps measured follow the verdict (the step where its record kept one): "
                     "accumulation over small micro-batches does, because BatchNorm normalises each "
                     "micro-batch by its own statistics, so the network trains differently from the whole batch. "
                     "The fp32 reference trains on the whole card after the case. Activations kept on the CPU "
                     "that would pass half the host's available memory in one forward do not fit; a case whose "
                     "process died (killed or crashed) is failed with that reason.",
                bench=SEED_003_BENCH)


SEEDS = (
    Spec("seed000", "way,machine", across="budget", show="step,peak",
         title="Seed 000: three float64 arrays of 8.6 GB on a 16 GB card",
         text="CuPy's `out of memory to allocate 8589934592 bytes (total 17179869184 bytes)`: `a`, `b` and `c` "
              "of 2**30 float64 each and `c = a + b`, under a 16 GB budget, by each way out: the device pool "
              "(does not fit, with the bytes it asked), the managed pool (kept under the card's free memory: "
              "nothing is evicted on these cards, so it runs at device speed, which a real 16 GB card would "
              "not), out-of-core chunks from pinned host memory, and zero-copy reads of mapped pinned host "
              "memory. Seconds per add and the peak.", bench=(Select("unified", "Seed000"),)),
    *(spec for w in ("resnet50_1024", "resnet50_2048") for spec in (_seed003_cheapest(w), _seed003_grid(w))),
    replace(HEADLINE, title="Seed 002: the NLP tricks on one LM",
            text="A decoder-only LM at batch 16 of 1024 tokens: each trick against fp32 on the same card, "
                 "`drop_references` (the previous step's logits and loss released before the next forward) "
                 "against `keep_references` (the everyday loop that keeps them alive) among them."),
    replace(FITS_BATCH, title="Seed 002: the largest batch that fits",
            text="The largest batch of the LM's 1024-token sequences that trains under each budget, by each way "
                 "out: the precisions, checkpointing, activations kept on the CPU (`save_on_cpu`), parameters, "
                 "gradients and optimizer state offloaded (`cpu_offload`), `drop_references` against "
                 "`keep_references`, and the leading combinations (`bf16_autocast+checkpoint`). Each probe is a "
                 "process of its own."),
    replace(LONG_SEQUENCE, title="Seed 001: one ever longer sequence",
            text="Memory grows with sequence length: one sequence per step at two widths, by technique."),
    replace(FITS_SEQUENCE, title="Seed 001: the longest sequence that fits",
            text="The longest single sequence of the LM that trains under each budget, each probe a process of "
                 "its own; `≥` where the search stopped before memory did: at its limit, or before a probe "
                 "whose two steps ran longer than the search waits (attention grows as the square of the "
                 "length)."),
    Spec("chainer_mlp", "batch,budget,machine", across="pool", show="step,peak", where=("device=cuda", "budget=16GB"),
         title="Chainer past a 16 GB card", text="A dense net whose batch outgrows a 16 GB budget, on Chainer's "
         "device pool (capped: does not fit) and on the managed pool.", bench=(Select("chainer_pool", "MlpBeyond"),)),
)
SEEDS_INTRO = ("Each scenario the suite was built from, as the person who hit `CUDA out of memory` met it, with "
               "every way out measured under an emulated card: `budget` caps the library's own allocator "
               "(torch's memory fraction, a CuPy pool's limit) at 16, 24, 40 or 80 GB (10^9 bytes) on a larger "
               "card, so the case behaves as on the smaller one without asking a shared GPU for more than it "
               "has. What the cap leaves out (the CUDA context, library workspaces outside the pool) is in the "
               "device column of each peak. A case over its budget is `does not fit`, with the bytes it asked "
               "for.")
