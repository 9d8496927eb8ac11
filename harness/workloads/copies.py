"""Copies the ceilings time: a buffer of random bytes, the check that a copy's destination holds
its source, and a copy between host and device, pinned or pageable.

``host_link`` is shared by two cases: ``ceilings`` times it pinned at one size, ``pageable``
pageable over a sweep of sizes (no single size stands for a pageable copy).
"""
from __future__ import annotations

from functools import partial

from harness.measure.guards.requirements import need_torch_cuda
from harness.measure.instruments.timing import torch_sync
from harness.measure.outcomes import CheckFailed
from harness.measure.workload import Workload
from harness.units import GiB

LINK_BYTES = 1 * GiB


def checked_equal(name: str, equal: bool) -> dict:
    if not equal:
        raise CheckFailed(f"{name}: destination differs from source after the copy")
    return {"exact": True}


def random_bytes(torch, nbytes, device):
    return torch.rand(nbytes // 4, device=device)


def host_link(direction: str, pinned: bool, nbytes: int = LINK_BYTES) -> Workload:
    torch = need_torch_cuda(1)
    on_gpu = random_bytes(torch, nbytes, "cuda:0")
    on_host = torch.empty(on_gpu.shape, dtype=on_gpu.dtype, pin_memory=pinned)
    if direction == "h2d":
        on_host.copy_(on_gpu.cpu())
        src, dst, ref = on_host, torch.full_like(on_gpu, float("nan")), on_gpu
    else:
        on_host.fill_(float("nan"))
        src, dst, ref = on_gpu, on_host, on_gpu.cpu()
    name = f"{direction}_{'pinned' if pinned else 'pageable'}"
    return Workload(step=partial(dst.copy_, src, non_blocking=pinned), sync=torch_sync((0,)), gpus=(0,),
                    check=lambda: checked_equal(name, bool(torch.equal(dst, ref))),
                    work={"bytes": nbytes}, warmup=2, repeat=20)
