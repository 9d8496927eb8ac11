"""Ceilings: the physical limits of this box, which every other figure is read against.

Each probe moves or computes a fixed amount per step, so its seconds per step compare across
boxes and versions, and its rate (bytes/s or FLOP/s) is the ceiling. Buffers are far larger
than any cache (hundreds of MiB and up), inputs are random, outputs are poisoned first, and each
probe checks its result after the timed steps.

``context_torch`` and ``context_cupy`` are no rate: they read what a fresh process holds on the
device outside its allocator's pool once CUDA started (``context.cuda``), once a first matrix
product ran (``context.cublas``: cuBLAS's kernels and workspace) and, for torch, once a first
convolution ran (``context.cudnn``), in its record's memory; that is what an emulated card charges
(``harness.measure.guards.budget``). Its step is one synchronisation.

Bandwidths count what one step must move: a device copy reads and writes each byte (2 x size);
a transfer between host and device, or between GPUs, moves each byte once. ``duplex_pinned``
moves host-to-device and device-to-host at once, two bytes in for each byte out as a streamed
``out = x + y`` does: a PCIe link is full duplex, but some hosts cannot feed both directions at
full rate, and a pattern that writes back is bounded by what the link does both ways.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from harness.measure.outcomes import CheckFailed
from harness.measure.guards.requirements import need_cupy, need_gpus, need_torch_cuda
from harness.measure.instruments.timing import torch_sync
from harness.cases.base import Case
from harness.measure.workload import Workload
from harness.units import GiB, MiB
from harness.workloads.copies import LINK_BYTES, checked_equal, host_link, random_bytes

HOST_COPY_BYTES = 512 * MiB
CPU_MATMUL_N = 2048
DEVICE_COPY_BYTES = 2 * GiB
GPU_MATMUL_N = 8192

# Relative error against a float64 reference on the same (rounded) inputs. fp32 accumulates far
# under 1e-4, so an fp32 figure that is really TF32 (about 3e-4) fails its check.
MATMUL_TOLERANCE = {"fp32": 1e-4, "tf32": 3e-3, "fp16": 5e-3, "bf16": 3e-2}

HOST_PROBES = ("host_copy", "cpu_matmul_fp32")
# Pageable copies depend on the buffer's size: harness.cases.pageable sweeps them.
GPU_PROBES = ("device_copy", "h2d_pinned", "d2h_pinned", "duplex_pinned",
              "matmul_fp32", "matmul_tf32", "matmul_fp16", "matmul_bf16")
MULTI_GPU_PROBES = ("p2p_copy",)
# Probes whose pace is the host's: its memory and CPU, or its link to the GPU.
HOST_PACED = HOST_PROBES + ("h2d_pinned", "d2h_pinned", "duplex_pinned")
CONTEXT_PROBES = ("context_torch", "context_cupy")
PROBES = HOST_PROBES + GPU_PROBES + MULTI_GPU_PROBES + CONTEXT_PROBES


def rel_err(out, ref) -> float:
    return float(np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref))


def checked(name: str, err: float, tolerance: float) -> dict:
    if not err <= tolerance:  # also catches NaN: an unwritten, poisoned output
        raise CheckFailed(f"{name}: relative error {err:.3g} over tolerance {tolerance:.1g}")
    return {"rel_err": err, "tolerance": tolerance}


# ---- host side: what CPU offload depends on; runs on any box -------------------------------

def host_copy(nbytes: int = HOST_COPY_BYTES) -> Workload:
    n = nbytes // 4
    src = np.random.default_rng(0).random(n, dtype=np.float32)
    dst = np.full(n, np.nan, dtype=np.float32)
    return Workload(step=partial(np.copyto, dst, src),
                    check=lambda: checked_equal("host_copy", np.array_equal(dst, src)),
                    work={"bytes": 2 * nbytes}, warmup=2, repeat=10)


def cpu_matmul(n: int = CPU_MATMUL_N) -> Workload:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = np.full((n, n), np.nan, dtype=np.float32)
    rows = slice(0, 128)
    return Workload(step=partial(np.matmul, a, b, out=c),
                    check=lambda: checked("cpu_matmul_fp32",
                                          rel_err(c[rows], a[rows].astype(np.float64) @ b.astype(np.float64)),
                                          MATMUL_TOLERANCE["fp32"]),
                    work={"flops": 2 * n**3}, warmup=1, repeat=10)


# ---- one GPU --------------------------------------------------------------------------------

def device_copy(nbytes: int = DEVICE_COPY_BYTES) -> Workload:
    torch = need_torch_cuda(1)
    src = random_bytes(torch, nbytes, "cuda:0")
    dst = torch.full_like(src, float("nan"))
    return Workload(step=partial(dst.copy_, src), sync=torch_sync((0,)), gpus=(0,),
                    check=lambda: checked_equal("device_copy", bool(torch.equal(dst, src))),
                    work={"bytes": 2 * nbytes}, warmup=3, repeat=50)


def duplex(nbytes: int = LINK_BYTES) -> Workload:
    """``nbytes`` host-to-device and ``nbytes / 2`` device-to-host, each on its own stream, at once."""
    torch = need_torch_cuda(1)
    up_src = random_bytes(torch, nbytes, "cuda:0").cpu().pin_memory()
    up_dst = torch.full(up_src.shape, float("nan"), device="cuda:0")
    down_src = random_bytes(torch, nbytes // 2, "cuda:0")
    down_dst = torch.full(down_src.shape, float("nan"), pin_memory=True)
    lanes = torch.cuda.Stream(), torch.cuda.Stream()

    def step():
        here = torch.cuda.current_stream()
        for lane, (dst, src) in zip(lanes, ((up_dst, up_src), (down_dst, down_src))):
            lane.wait_stream(here)
            with torch.cuda.stream(lane):
                dst.copy_(src, non_blocking=True)
        for lane in lanes:
            here.wait_stream(lane)

    def check():
        both = bool(torch.equal(up_dst.cpu(), up_src)) and bool(torch.equal(down_dst, down_src.cpu()))
        return checked_equal("duplex_pinned", both)

    return Workload(step=step, sync=torch_sync((0,)), gpus=(0,), check=check,
                    work={"bytes": nbytes + nbytes // 2, "h2d_bytes": nbytes, "d2h_bytes": nbytes // 2},
                    warmup=2, repeat=20)


def gpu_matmul(precision: str, n: int = GPU_MATMUL_N) -> Workload:
    torch = need_torch_cuda(1)
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    # "highest" keeps fp32 matrix products in IEEE fp32; "high" lets them use TF32 tensor cores.
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    gen = torch.Generator(device="cuda:0").manual_seed(0)
    a = torch.randn(n, n, device="cuda:0", generator=gen).to(dtype)
    b = torch.randn(n, n, device="cuda:0", generator=gen).to(dtype)
    c = torch.full((n, n), float("nan"), device="cuda:0", dtype=dtype)

    def check():
        rows = slice(0, 256)
        ref = (a[rows].double() @ b.double()).cpu().numpy()
        return checked(f"matmul_{precision}", rel_err(c[rows].double().cpu().numpy(), ref), MATMUL_TOLERANCE[precision])

    return Workload(step=partial(torch.matmul, a, b, out=c), sync=torch_sync((0,)), gpus=(0,),
                    check=check, work={"flops": 2 * n**3}, warmup=3, repeat=20)


# ---- what a process holds before its first allocation: the context and the libraries' own -----

def _torch_stages(torch):
    x = torch.ones(64, 64, device="cuda:0")
    yield "cuda", lambda: torch.cuda.memory_reserved(0)
    (x @ x).sum().item()
    yield "cublas", lambda: torch.cuda.memory_reserved(0)
    torch.nn.functional.conv2d(torch.ones(1, 3, 32, 32, device="cuda:0"),
                               torch.ones(8, 3, 3, 3, device="cuda:0")).sum().item()
    yield "cudnn", lambda: torch.cuda.memory_reserved(0)


def _cupy_stages(cupy):
    x = cupy.ones((64, 64), dtype=cupy.float32)
    pool = cupy.get_default_memory_pool()
    yield "cuda", pool.total_bytes
    float((x @ x).sum())
    yield "cublas", pool.total_bytes


def context(library: str) -> Workload:
    """The levels of ``context_torch`` / ``context_cupy``: read in a fresh process (asv gives each
    its own) before anything else touched CUDA in it."""
    from harness.measure.guards.budget import held_here
    from harness.measure.instruments.devices import nvml
    from harness.measure.guards.workingset import card
    session = nvml()  # asked first: without nvidia-ml-py, that is the error, not a card not found
    gpu = card(need_gpus(1))
    with session as pynvml:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
        before = pynvml.nvmlDeviceGetMemoryInfo(handle).used  # before the library so much as asks CUDA
        if library == "torch":
            module, stages, sync = need_torch_cuda(1), _torch_stages, torch_sync((0,))
        else:
            module = need_cupy()
            stages, sync = _cupy_stages, module.cuda.runtime.deviceSynchronize
        levels, read = {}, ""
        for stage, pooled in stages(module):
            sync()
            held, read = held_here(pynvml, handle, before)
            levels[f"context.{stage}"] = max(0, held - pooled())
    return Workload(step=lambda: None, sync=sync, gpus=(0,), check=lambda: {"read": read, **levels}, work={},
                    memory=levels, warmup=0, repeat=3)


# ---- several GPUs ---------------------------------------------------------------------------

def p2p_copy(nbytes: int = LINK_BYTES) -> Workload:
    devices = need_gpus(2)
    torch = need_torch_cuda(2)
    src = random_bytes(torch, nbytes, "cuda:0")
    dst = torch.full_like(src, float("nan"), device="cuda:1")
    peer = devices.peer[0][1]
    return Workload(step=partial(dst.copy_, src, non_blocking=True), sync=torch_sync((0, 1)), gpus=(0, 1),
                    check=lambda: dict(checked_equal("p2p_copy", bool(torch.equal(dst.to("cuda:0"), src))),
                                       peer_access=peer),
                    work={"bytes": nbytes}, warmup=2, repeat=20)


BUILDERS = {
    "host_copy": host_copy,
    "cpu_matmul_fp32": cpu_matmul,
    "device_copy": device_copy,
    "h2d_pinned": partial(host_link, "h2d", True),
    "d2h_pinned": partial(host_link, "d2h", True),
    "duplex_pinned": duplex,
    "matmul_fp32": partial(gpu_matmul, "fp32"),
    "matmul_tf32": partial(gpu_matmul, "tf32"),
    "matmul_fp16": partial(gpu_matmul, "fp16"),
    "matmul_bf16": partial(gpu_matmul, "bf16"),
    "p2p_copy": p2p_copy,
    "context_torch": partial(context, "torch"),
    "context_cupy": partial(context, "cupy"),
}
assert set(BUILDERS) == set(PROBES)

# Device memory each probe asks for (per GPU), quoted if it does not fit.
DECLARED_BYTES = {"device_copy": 2 * DEVICE_COPY_BYTES, "p2p_copy": LINK_BYTES, "duplex_pinned": 2 * LINK_BYTES,
                  **{p: 2 * LINK_BYTES for p in ("h2d_pinned", "d2h_pinned")},
                  **{p: 3 * GPU_MATMUL_N**2 * 4 for p in GPU_PROBES if p.startswith("matmul")}}

CASE = Case(name="ceilings", params={"probe": PROBES},
            build=lambda probe: BUILDERS[probe](),
            declared_bytes=lambda probe: DECLARED_BYTES.get(probe),
            host_paced=lambda probe: probe in HOST_PACED, doc=__doc__)
