"""An emulated card: a memory budget smaller than the card a case runs on, enforced in the
allocator of the library the case uses.

Most people who meet "CUDA out of memory" have a 16 or 24 GB card; the suite runs on 80 and
141 GB ones. A budget makes the big card behave as the small one, without asking the GPU for
anything past its free memory. Two kinds:

- a named card (``CARDS``: ``p100-16gb``, ``rtx4090-24gb``, ``h100-80gb``...): the total that card
  reports (nvidia-smi's "Total"), less what this process holds on the device outside the
  allocator's pool: the CUDA context, the loaded module images, and the cuBLAS and cuDNN
  workspaces taken once a first matrix product and convolution ran (``overhead``). The allocator
  is capped at what is left, so that context and pool together fit the card as they would on it;
- an allocator cap (``CAPS``: ``16GB``... ``80GB``): the allocator may hand out N x 10^9 bytes, and
  nothing else is charged (the context and the workspaces come on top, as on no real card).

Either way the cap is set in the allocator:

- torch: ``torch.cuda.set_per_process_memory_fraction(limit / torch's total)``; the caching
  allocator raises its OutOfMemoryError past it;
- CuPy, and Chainer through CuPy: the pool's ``set_limit(size=limit)``, for the device pool and
  for a pool over managed memory alike; the pool raises OutOfMemoryError past it.

The record keeps the budget's name, its limit, the card it ran on and how it was enforced, and for
a named card that card's total and the overhead charged (``Record.budget``). A case resolves its
budget once (``resolve``, the one place a name becomes a ``Budget``) and hands it back with how it
ended (``handed_back``): the record files what the case ran under, never a second resolution.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Callable, Iterator

from harness.measure.outcomes import DoesNotFit, Skip
from harness.measure.guards.safety import OPT_IN_ENV
from harness.units import GB, MiB, gb


# What a CUDA compute capability brings that a way out may need, from NVIDIA's architecture
# whitepapers: fp16 tensor cores from Volta (7.0), TF32 and bf16 from Ampere (8.0), FP8 from Ada (8.9).
FEATURES = (("fp16 tensor cores", (7, 0)), ("TF32", (8, 0)), ("bf16", (8, 0)), ("FP8", (8, 9)))


def dotted(capability: tuple[int, int]) -> str:
    """A compute capability as NVIDIA writes it: (8, 0) -> "8.0"."""
    return f"{capability[0]}.{capability[1]}"


@dataclass(frozen=True)
class Card:
    name: str  # the budget's name
    model: str  # as nvidia-smi names it
    total_bytes: int  # the total it reports
    capability: tuple[int, int]  # its CUDA compute capability, as NVIDIA lists it (developer.nvidia.com/cuda-gpus)

    @property
    def features(self) -> tuple[str, ...]:
        """What its compute capability brings of ``FEATURES``."""
        return tuple(name for name, least in FEATURES if self.capability >= least)

    def lacks(self, needed: tuple[int, int] | None) -> bool:
        """Whether a way that needs compute capability ``needed`` (None: none) cannot run on it as intended."""
        return needed is not None and self.capability < needed


# Each total is nvidia-smi's "Total" for that card (MiB), as its owners posted it; each compute
# capability NVIDIA's CUDA GPU list's (Pascal P100 6.0, Volta V100 7.0, Ampere A100 8.0, Ada L4 and
# RTX 4090 8.9, Hopper H100 and H200 9.0).
CARDS = {c.name: c for c in (
    # Seed 003's card: its report's nvidia-smi shows 16280MiB.
    Card("p100-16gb", "Tesla P100-PCIE-16GB", 16280 * MiB, (6, 0)),
    # https://github.com/4paradigm/k8s-vgpu-scheduler/issues/7 (Tesla V100-SXM2, 16160MiB)
    Card("v100-16gb", "Tesla V100-SXM2-16GB", 16160 * MiB, (7, 0)),
    # https://github.com/RLinf/RLinf/issues/255 (NVIDIA GeForce RTX 4090, 24564MiB)
    Card("rtx4090-24gb", "NVIDIA GeForce RTX 4090", 24564 * MiB, (8, 9)),
    # https://github.com/modal-labs/modal-client/pull/2797 (L4 23034MiB, A100 40GB 40960MiB, A100 80GB 81920MiB)
    Card("l4-24gb", "NVIDIA L4", 23034 * MiB, (8, 9)),
    Card("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960 * MiB, (8, 0)),
    Card("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920 * MiB, (8, 0)),
    # Measured here: gpu_memory_mib of results/nvidia-h100-80gb-hbm3-x1/machine.json and
    # results/nvidia-h200-x1/machine.json (NVML's totals, 85.5e9 and 150.8e9 bytes).
    Card("h100-80gb", "NVIDIA H100 80GB HBM3", 81559 * MiB, (9, 0)),
    Card("h200", "NVIDIA H200", 143771 * MiB, (9, 0)),
)}
CAPS = ("16GB", "24GB", "40GB", "80GB")  # allocator caps of N x 10^9 bytes
CARD = "card"  # the whole card: nothing capped
BUDGETS = (*CAPS, CARD)  # what every budgeted case runs under
# What a case whose budget is resolved in its own process runs under: the caps and the cards.
CARD_BUDGETS = (*CAPS, *CARDS, CARD)
# How each library's allocator is capped: what a record says was enforced.
ENFORCED = {"torch": "torch.cuda.set_per_process_memory_fraction of torch's total",
            "cupy": "cupy.cuda.MemoryPool.set_limit",
            "cupy_managed": "cupy.cuda.MemoryPool(malloc_managed).set_limit",
            "chainer": "cupy.cuda.MemoryPool.set_limit (Chainer's pool)"}


@dataclass(frozen=True)
class Budget:
    name: str  # one of CARD_BUDGETS
    limit_bytes: int  # what the allocator may hand out
    card_bytes: int  # the total memory of the card it ran on
    enforced: str  # how (ENFORCED's value), "" where nothing caps it
    # A named card: its total, and what this process held outside the allocator (charged to it).
    emulated_bytes: int | None = None
    overhead_bytes: int | None = None
    overhead_read: str | None = None  # how the overhead was read (``Overhead.read``)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def managed_note(self, nbytes: int, memory_free: int) -> dict:
        """What a record on managed memory says of this budget: managed pages are not capped by
        it, and whether a set of ``nbytes`` had to leave a card with ``memory_free`` bytes free
        (only with the opt-in: the guard admits no more than the card has free)."""
        evicted = nbytes > memory_free
        return {"budget_enforced": False, "evicted": evicted,
                "note": (f"managed pages are not capped by the {self.name} budget: the {gb(nbytes)} set "
                         + ("oversubscribes the card (opted in), so pages are evicted to the host" if evicted else
                            f"stays under the card's {gb(memory_free)} free, so nothing is evicted on this card; "
                            f"true oversubscription runs only with {OPT_IN_ENV}=1 on a machine you own"))}

    def over(self, nbytes: int, what: str) -> DoesNotFit:
        """The does-not-fit of ``what`` asking ``nbytes`` under this budget, before it is allocated."""
        return DoesNotFit(f"does not fit: {what} needs {gb(nbytes)}, over the {self.name} budget "
                          f"({gb(self.limit_bytes)} of a {gb(self.card_bytes)} card)", nbytes)


def _known(name: str) -> None:
    if name not in CARD_BUDGETS:
        raise ValueError(f"budget {name!r} is not one of {', '.join(CARD_BUDGETS)}: pass one of them")


def is_whole_card(name) -> bool:
    """Whether budget ``name`` is the whole card, where nothing is capped (any other value is not)."""
    return name == CARD


def size_bytes(name: str, card_total: int) -> int:
    """The memory budget ``name`` stands for: a named card's total, a cap's bytes, or the whole card.
    The one place a budget's name becomes bytes: ``resolve`` sizes through it, and the report too."""
    _known(name)
    if is_whole_card(name):
        return card_total
    return CARDS[name].total_bytes if name in CARDS else int(name.removesuffix("GB")) * GB


@dataclass(frozen=True)
class Overhead:
    """What this process held on the device outside its allocator's pool, once warmed up."""
    bytes: int
    read: str  # how: NVML's figure for this process, or the device's used memory less what it was before


def resolve(name: str, card_total: int, allocator: str | None, overhead: Overhead | None = None) -> Budget:
    """Budget ``name`` (the whole card, a cap, or a named card) on a card of ``card_total`` bytes,
    enforced in ``allocator`` (a key of ENFORCED; None: not capped); Skip, naming the fix, when the
    card is smaller than the budget (an emulated card must be a smaller one). A named card charges
    ``overhead``; None measures it here (``measure_overhead``): call it where the case's own library
    runs, before the case allocates."""
    if allocator is not None and allocator not in ENFORCED:
        raise ValueError(f"allocator {allocator!r} is not one of {', '.join(ENFORCED)}")
    size, enforced = size_bytes(name, card_total), ENFORCED.get(allocator, "")
    if name in CARDS:
        return _named(name, size, card_total, enforced, overhead, allocator)
    if size > card_total:
        raise Skip(f"budget {name} is larger than this card ({gb(card_total)}): run it on a card with {name} or more")
    return Budget(name, size, card_total, enforced)


def _named(name: str, total: int, card_total: int, enforced: str, overhead: Overhead | None,
           allocator: str | None) -> Budget:
    """Named card ``name`` of ``total`` bytes: the allocator gets what the overhead leaves of it."""
    if total > card_total:
        raise Skip(f"card {name} ({gb(total)}) is larger than this one ({gb(card_total)}): "
                   f"run it on a card with {gb(total)} or more")
    overhead = overhead if overhead is not None else measure_overhead(allocator)
    return Budget(name, max(0, total - overhead.bytes), card_total, enforced,
                  emulated_bytes=total, overhead_bytes=overhead.bytes, overhead_read=overhead.read)


# -- handing the budget back: the case resolved it, its record files it -------------------------

@contextmanager
def handed_back(budget: Budget | None) -> Iterator[Callable]:
    """Where a case's build goes on under the ``budget`` it resolved (None: it resolved none). The
    runner files the budget the case ran under, and resolves none again (a named card's overhead
    is measured once): the budget goes back on the Workload passed through the function this
    yields, and on whatever is raised here (a Skip, a does-not-fit), read back by ``handed``."""
    try:
        yield lambda workload: replace(workload, budget=budget) if budget is not None else workload
    except Exception as e:
        if budget is not None:
            e.budget = budget
        raise


def handed(ended) -> Budget | None:
    """The budget a case handed back with how its build ended (its Workload, or what it raised);
    None where it handed none back."""
    made = getattr(ended, "budget", None)
    return made if isinstance(made, Budget) else None


# -- the overhead: what a warmed-up library holds outside its pool ------------------------------

def _warm_torch() -> int:
    """Starts CUDA in torch and runs a first matrix product and convolution (cuBLAS and cuDNN load
    their kernels and take their workspaces); returns what torch's pool holds then."""
    import torch
    x = torch.ones(64, 64, device="cuda:0")
    (x @ x).sum().item()
    image = torch.ones(1, 3, 32, 32, device="cuda:0")
    torch.nn.functional.conv2d(image, torch.ones(8, 3, 3, 3, device="cuda:0")).sum().item()
    torch.cuda.synchronize()
    return torch.cuda.memory_reserved(0)


def _warm_cupy() -> int:
    """Starts CUDA in CuPy and runs a first matrix product (cuBLAS); returns what its pools hold."""
    import cupy
    x = cupy.ones((64, 64), dtype=cupy.float32)
    float((x @ x).sum())
    cupy.cuda.runtime.deviceSynchronize()
    return cupy.get_default_memory_pool().total_bytes()


WARM = {"torch": _warm_torch, "cupy": _warm_cupy, "cupy_managed": _warm_cupy, "chainer": _warm_cupy}


@cache
def measure_overhead(allocator: str | None) -> Overhead:
    """Warms ``allocator``'s library up on CUDA device 0 and reads what this process holds there
    outside its pool: NVML's figure for this process where NVML lists it, else the card's used
    memory less what it was before (right only where no other process allocates meanwhile).
    Once per process: the context and workspaces are taken once."""
    from harness.measure.instruments.devices import cuda_gpu, nvml
    session = nvml()  # asked first: without nvidia-ml-py, that is the error, not a card not found
    gpu = cuda_gpu(0)
    if gpu is None:
        raise Skip("a named card is emulated on CUDA device 0, and this process sees none: run it on a GPU box")
    with session as pynvml:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
        before = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        pooled = WARM.get(allocator, _warm_cupy)()
        held, read = held_here(pynvml, handle, before)
        return Overhead(max(0, held - pooled), read)


def held_here(nvml, handle, before: int) -> tuple[int, str]:
    """What this process holds on the device (NVML's figure for it), else the device's used memory
    less ``before`` (read before this process started CUDA); and which of the two it is."""
    mine = _held_by(nvml, handle, os.getpid())
    if mine is not None:
        return mine, "nvml process"
    return nvml.nvmlDeviceGetMemoryInfo(handle).used - before, "device used less before"


def _held_by(nvml, handle, pid: int) -> int | None:
    """What NVML says process ``pid`` holds on the device; None where it does not list it (a
    container's own process ids, or a driver that does not count per process)."""
    try:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except nvml.NVMLError:
        return None
    used = [p.usedGpuMemory for p in procs if p.pid == pid and p.usedGpuMemory is not None]
    return used[0] if used else None


def enforce_torch(budget: Budget, device: int = 0) -> None:
    """Caps torch's caching allocator on ``device`` at the budget."""
    cap_torch(budget.limit_bytes, device)


@dataclass(frozen=True)
class TorchCap:
    """torch's CUDA allocator under a case's budget (``torch_capped``): the budget as resolved,
    None where nothing is capped (on the CPU, or on the whole card)."""
    budget: Budget | None

    def lift(self) -> None:
        """Gives the whole card back (nothing to lift where nothing was capped)."""
        if self.budget is not None:
            enforce_torch(replace(self.budget, limit_bytes=self.budget.card_bytes))


def uncapped_on_cpu(device: str, name: str) -> None:
    """Skip, naming the fix, for an emulated card on the CPU, where nothing caps: a question of the
    parameters alone, which a case asks before it imports torch (seconds of a process that runs nothing)."""
    if device != "cuda" and not is_whole_card(name):
        raise Skip(f"budget {name} emulates a smaller card in torch's CUDA allocator, and nothing caps "
                   f"memory on the CPU: run it with device=cuda on a GPU box, or with budget=card here")


def torch_capped(stack, device: str, name: str) -> TorchCap:
    """Caps torch's CUDA allocator at budget ``name`` for a case's life: the whole card again when
    ``stack`` closes, and the budget handed back on whatever the build raises meanwhile
    (``handed_back``). Skip, naming the fix, for an emulated card on the CPU (``uncapped_on_cpu``)."""
    if device != "cuda":
        uncapped_on_cpu(device, name)
        return TorchCap(None)
    if is_whole_card(name):
        return TorchCap(None)  # the whole card: nothing to cap, as before budgets existed
    from harness.measure.instruments.devices import discover
    from harness.measure.guards.workingset import card_total
    cap = TorchCap(resolve(name, card_total(discover()), "torch"))
    enforce_torch(cap.budget)
    stack.callback(cap.lift)
    stack.enter_context(handed_back(cap.budget))
    return cap


def cap_torch(limit_bytes: int, device: int = 0) -> int:
    """Caps torch's caching allocator on ``device`` at ``limit_bytes`` (at most the whole card);
    returns the bytes it allows. torch applies the fraction to its own total (the device's
    ``total_memory``), which is less than NVML's by what the driver keeps: a fraction of NVML's
    total would cap short of the limit, by a different amount on each card."""
    import torch
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total), device)
    return min(limit_bytes, total)


def enforce_pool(budget: Budget, pool) -> None:
    """Caps a CuPy ``MemoryPool`` (device or managed) at the budget."""
    pool.set_limit(size=budget.limit_bytes)
