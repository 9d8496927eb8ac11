"""Zero-copy: pinned host memory mapped into the GPU's address space, read and written in place by
the GPU's kernels over the host link.

``cudaHostAlloc(..., cudaHostAllocMapped)`` page-locks host memory and maps it for the device;
``cudaHostGetDevicePointer`` gives the address kernels use (CuPy wraps no such call: the
pointer's attributes, ``cudaPointerGetAttributes``, carry the same address). It is not managed memory: no page
migrates, nothing is faulted, and the card's memory is not asked for, so a mapped working set may
be larger than the card (host memory permitting; the caller checks it with ``need_host``).

``use_mapped`` makes a CuPy pool over such memory the allocator, so the same kernels
(``harness.workloads.cupy.kernels``) that run on device memory run on mapped host memory unchanged.
"""
from __future__ import annotations

import weakref

from harness.measure.instruments import memory

HOST_ALLOC_MAPPED = 0x02  # cudaHostAllocMapped
POOL_NAME = "mapped_host"


class _HostBlock:
    """Owns one mapped allocation; frees it when collected (CuPy's memory objects take no weak
    references, so this rides along as their owner)."""

    def __init__(self, runtime, nbytes: int):
        self.host_ptr = runtime.hostAlloc(nbytes, HOST_ALLOC_MAPPED)
        self._free = weakref.finalize(self, runtime.freeHost, self.host_ptr)
        self.device_ptr = device_pointer(runtime, self.host_ptr)


def device_pointer(runtime, host_ptr: int) -> int:
    """The address the GPU uses for mapped host memory at ``host_ptr``."""
    get = getattr(runtime, "hostGetDevicePointer", None)
    if get is not None:
        return get(host_ptr, 0)
    return runtime.pointerGetAttributes(host_ptr).devicePointer


def mapped_malloc(cupy):
    """An allocator for CuPy: ``nbytes`` of mapped pinned host memory, as a MemoryPointer."""
    runtime = cupy.cuda.runtime

    def malloc(nbytes: int):
        block = _HostBlock(runtime, max(1, nbytes))
        mem = cupy.cuda.UnownedMemory(block.device_ptr, nbytes, block, cupy.cuda.Device().id)
        return cupy.cuda.MemoryPointer(mem, 0)
    return malloc


def use_mapped(cupy):
    """Sets a pool over mapped host memory as CuPy's allocator; returns it, watched for its peak
    under ``allocator.cupy.mapped_host``."""
    pool = cupy.cuda.MemoryPool(mapped_malloc(cupy))
    cupy.cuda.set_allocator(pool.malloc)
    memory.watch_pool(POOL_NAME, pool)
    return pool
