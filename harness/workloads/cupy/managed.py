"""CuPy's allocators, and where managed (unified) memory's pages live.

Allocators, as users set them:
- ``device_pool``: CuPy's default pool over cudaMalloc;
- ``managed_pool``: ``MemoryPool(malloc_managed)`` set as the allocator, the two lines users
  try first, with every managed request through the guard (``harness.measure.guards.safety``);
- ``async_pool``: the stream-ordered pool over cudaMallocAsync.

Placement needs ``cudaMemPrefetchAsync`` and ``cudaMemAdvise``. CUDA 13 takes a
``cudaMemLocation`` where CUDA 12 took a device number, and CuPy's own wrappers still pass the
number, which fails for the host on CUDA 13. ``UnifiedApi`` tries the forms in turn (CUDA 13's
through ``cuda.bindings``, CUDA 12.2's ``_v2``, the device-number form, CuPy's), keeps the first
that succeeds, and says which in the record; where none does, the case is skipped as
"unsupported".
"""
from __future__ import annotations

from harness.measure.instruments import memory
from harness.measure.outcomes import Skip
from harness.measure.guards.safety import ManagedGuard

POOLS = ("device_pool", "managed_pool", "async_pool")
HOST = None  # a location: the host; an int is a GPU
CPU_DEVICE_ID = -1  # cudaCpuDeviceId, the host in the device-number forms


class Unsupported(Skip):
    pass


def guarded_managed_malloc(cupy, guard: ManagedGuard):
    """cupy.cuda.malloc_managed through the guard. CuPy's memory objects take no weak
    references, so the reservation rides along as the owner of the memory handed out."""
    def hand_out(mem, reservation):
        owned = cupy.cuda.UnownedMemory(mem.ptr, mem.mem.size, (mem, reservation), mem.device_id)
        return cupy.cuda.MemoryPointer(owned, 0)
    return guard.wrap(cupy.cuda.malloc_managed, hand_out=hand_out)


def install_cupy_allocator(cupy, name: str, guard: ManagedGuard | None = None):
    """Sets CuPy's allocator; returns the pool, watched by ``harness.measure.instruments.memory`` for its peak."""
    if name == "device_pool":
        pool = cupy.get_default_memory_pool()
    elif name == "managed_pool":
        if guard is None:
            raise ValueError("the managed pool needs a ManagedGuard")
        pool = cupy.cuda.MemoryPool(guarded_managed_malloc(cupy, guard))
    elif name == "async_pool":
        try:
            pool = cupy.cuda.MemoryAsyncPool()
        except Exception as e:  # CUDA or driver without cudaMallocAsync
            raise Unsupported(f"async_pool unsupported here: {e}") from None
    else:
        raise ValueError(f"unknown allocator {name!r}; known: {', '.join(POOLS)}")
    cupy.cuda.set_allocator(pool.malloc)
    memory.watch_pool(name, pool)
    return pool


def _runtime():
    try:
        from cuda.bindings import runtime
        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart
        return cudart
    except ImportError:
        return None


class UnifiedApi:
    """cudaMemPrefetchAsync and cudaMemAdvise, in whichever form the running CUDA takes."""

    ADVICE = {"preferred_location": "cudaMemAdviseSetPreferredLocation",
              "accessed_by": "cudaMemAdviseSetAccessedBy",
              "read_mostly": "cudaMemAdviseSetReadMostly",
              "unset_read_mostly": "cudaMemAdviseUnsetReadMostly"}
    CUPY_ADVICE = {"preferred_location": 3, "accessed_by": 5, "read_mostly": 1, "unset_read_mostly": 2}

    def __init__(self, cupy):
        self.cupy = cupy
        self.rt = _runtime()
        self.used: dict[str, str] = {}  # operation -> the form that worked

    def _location(self, where):
        loc = self.rt.cudaMemLocation()
        kinds = self.rt.cudaMemLocationType
        loc.type = kinds.cudaMemLocationTypeHost if where is HOST else kinds.cudaMemLocationTypeDevice
        loc.id = 0 if where is HOST else where
        return loc

    def _bindings_call(self, name, *args):
        fn = getattr(self.rt, name, None)
        if fn is None:
            raise AttributeError(name)
        err = fn(*args)[0]
        if err != self.rt.cudaError_t.cudaSuccess:
            self.rt.cudaGetLastError()  # the failure is not sticky; leave no error behind for CuPy
            raise RuntimeError(f"{name}: {err}")

    def _first_that_works(self, op: str, attempts) -> None:
        if op in self.used:
            dict(attempts)[self.used[op]]()
            return
        errors = []
        for form, call in attempts:
            try:
                call()
            except (TypeError, AttributeError, RuntimeError, self.cupy.cuda.runtime.CUDARuntimeError) as e:
                errors.append(f"{form}: {e}")
                continue
            self.used[op] = form
            return
        raise Unsupported(f"{op} unsupported by this CUDA in every form tried ({'; '.join(errors)})")

    def prefetch(self, ptr: int, nbytes: int, where, stream_ptr: int = 0) -> None:
        dev = CPU_DEVICE_ID if where is HOST else where
        attempts = []
        if self.rt is not None:
            loc = self._location(where)
            attempts += [("cuda.bindings cudaMemPrefetchAsync(location)",
                          lambda: self._bindings_call("cudaMemPrefetchAsync", ptr, nbytes, loc, 0, stream_ptr)),
                         ("cuda.bindings cudaMemPrefetchAsync_v2(location)",
                          lambda: self._bindings_call("cudaMemPrefetchAsync_v2", ptr, nbytes, loc, 0, stream_ptr)),
                         ("cuda.bindings cudaMemPrefetchAsync(device)",
                          lambda: self._bindings_call("cudaMemPrefetchAsync", ptr, nbytes, dev, stream_ptr))]
        attempts.append(("cupy memPrefetchAsync(device)",
                         lambda: self.cupy.cuda.runtime.memPrefetchAsync(ptr, nbytes, dev, stream_ptr)))
        self._first_that_works(f"prefetch to {'host' if where is HOST else 'gpu'}", attempts)

    def advise(self, ptr: int, nbytes: int, advice: str, where) -> None:
        dev = CPU_DEVICE_ID if where is HOST else where
        attempts = []
        if self.rt is not None:
            loc = self._location(where)
            value = getattr(self.rt.cudaMemoryAdvise, self.ADVICE[advice])
            attempts += [("cuda.bindings cudaMemAdvise(location)",
                          lambda: self._bindings_call("cudaMemAdvise", ptr, nbytes, value, loc)),
                         ("cuda.bindings cudaMemAdvise_v2(location)",
                          lambda: self._bindings_call("cudaMemAdvise_v2", ptr, nbytes, value, loc)),
                         ("cuda.bindings cudaMemAdvise(device)",
                          lambda: self._bindings_call("cudaMemAdvise", ptr, nbytes, value, dev))]
        attempts.append(("cupy memAdvise(device)",
                         lambda: self.cupy.cuda.runtime.memAdvise(ptr, nbytes, self.CUPY_ADVICE[advice], dev)))
        self._first_that_works(f"advise {advice} {'host' if where is HOST else 'gpu'}", attempts)
