"""CuPy on unified (managed) memory: what a working set costs by allocator, placement and size.

Parameters:
- ``allocator``: device_pool, managed_pool, async_pool (``harness.workloads.cupy.managed``);
- ``placement`` of managed pages. ``resident``: on the GPU before the steps (prefetched once),
  the steady state, and the only placement the device pools have. The others start every step
  with all pages on the host (put there, untimed, by a prefetch), as after a host-side first
  touch: ``fault`` lets the GPU's page faults migrate them; ``prefetch`` migrates them with an
  explicit prefetch inside the step; ``host_mapped`` advises them to stay on the host, mapped
  for the GPU, which reads and writes them over the host link; ``read_mostly`` advises the
  inputs read-mostly, so the GPU's faults duplicate them rather than move them;
- ``pattern``: stream, reduce, matmul, gather (``harness.workloads.cupy.kernels``);
- ``fraction``: the working set as a fraction of the card's total memory (``harness.measure.guards.workingset``).

Work recorded per step: ``bytes`` the kernel must move, ``working_set_bytes`` allocated, and for
placements that migrate pages from the host ``migrated_bytes`` (the whole working set starts there).
"""
from __future__ import annotations

from harness.workloads.cupy.kernels import PATTERNS
from harness.workloads.cupy.kernels import build as build_pattern
from harness.workloads.cupy.managed import HOST, POOLS, UnifiedApi, install_cupy_allocator
from harness.measure.guards.requirements import need_cupy, need_gpus
from harness.measure.guards.workingset import FRACTIONS, card_total, guard_managed, working_set_bytes
from harness.measure.outcomes import Skip
from harness.cases.base import Case
from harness.measure.workload import Workload

PLACEMENTS = ("resident", "fault", "prefetch", "host_mapped", "read_mostly")
FROM_HOST = PLACEMENTS[1:]
WARM_BYTES = 64 * 2**20  # a small run of the same kernels first, so no step pays for compiling


class Placement:
    """Puts the pattern's pages where the placement says, before and within each step."""

    def __init__(self, name: str, api: UnifiedApi, arrays, inputs, gpu: int = 0):
        self.name, self.api, self.arrays, self.inputs, self.gpu = name, api, arrays, inputs, gpu
        if name == "host_mapped":
            self._advise(arrays, "preferred_location", HOST)
            self._advise(arrays, "accessed_by", gpu)
        if name == "read_mostly":
            self._advise(inputs, "read_mostly", gpu)

    def _advise(self, arrays, advice, where):
        for a in arrays:
            self.api.advise(a.data.ptr, a.nbytes, advice, where)

    def _prefetch(self, arrays, where):
        for a in arrays:
            self.api.prefetch(a.data.ptr, a.nbytes, where)

    def settle(self) -> None:
        """Once, before any step."""
        if self.name == "resident":
            self._prefetch(self.arrays, self.gpu)

    def prepare(self) -> None:
        """Before every step, untimed: all pages back on the host."""
        if self.name == "read_mostly":
            # Collapse the GPU's read-only copies, or the next step would find them there.
            self._advise(self.inputs, "unset_read_mostly", self.gpu)
        self._prefetch(self.arrays, HOST)
        if self.name == "read_mostly":
            self._advise(self.inputs, "read_mostly", self.gpu)

    def before_kernel(self) -> None:
        if self.name == "prefetch":
            self._prefetch(self.arrays, self.gpu)


def _guard_for(allocator, placement, fraction, nbytes, devices):
    if allocator != "managed_pool":
        if placement != "resident":
            raise Skip(f"placement {placement!r} is for managed memory: {allocator} memory is always on the device")
        return None
    host_use = f"a {fraction:g} x card working set that starts on the host" if placement in FROM_HOST else None
    return guard_managed(fraction, nbytes, devices, host_use)


def build(allocator: str, placement: str, pattern: str, fraction: float) -> Workload:
    devices = need_gpus(1)
    cupy = need_cupy()
    nbytes = working_set_bytes(fraction, card_total(devices))
    guard = _guard_for(allocator, placement, fraction, nbytes, devices)
    install_cupy_allocator(cupy, allocator, guard)
    sync = cupy.cuda.runtime.deviceSynchronize
    warm = build_pattern(pattern, cupy, WARM_BYTES)
    warm.step()
    sync()
    del warm
    pat = build_pattern(pattern, cupy, nbytes)
    api = UnifiedApi(cupy)
    place = Placement(placement if allocator == "managed_pool" else "resident", api, pat.arrays, pat.inputs)
    if allocator == "managed_pool":
        place.settle()
    sync()

    def step():
        place.before_kernel()
        pat.step()

    work = dict(pat.work, working_set_bytes=pat.nbytes)
    timed = dict(warmup=2, repeat=10)
    if placement in FROM_HOST:
        if placement != "host_mapped":  # mapped pages stay on the host: nothing migrates
            work["migrated_bytes"] = pat.nbytes
        # Each step moves the whole set: few steps, and the kernels were warmed above.
        timed = dict(prepare=place.prepare, warmup=0, repeat=3)
    return Workload(step=step, sync=sync, gpus=(0,), work=work,
                    check=lambda: dict(pat.check(), placement_api=dict(api.used)), **timed)


def declared_bytes(allocator, placement, pattern, fraction):
    from harness.measure.instruments.devices import discover
    devices = discover()
    return working_set_bytes(fraction, card_total(devices)) if devices.count else None


def bound_by(allocator, placement, pattern, fraction):
    """Pages that start on the host cross the pinned host-to-device link (migrated, prefetched or
    read in place); resident ones are bounded by the device: a product by fp32 matmul, the rest
    by device copy."""
    if allocator == "managed_pool" and placement in FROM_HOST:
        return "h2d_pinned"
    return "matmul_fp32" if pattern == "matmul" else "device_copy"


CASE = Case(name="unified",
            params={"allocator": POOLS, "placement": PLACEMENTS, "pattern": PATTERNS, "fraction": FRACTIONS},
            build=build, declared_bytes=declared_bytes, bound_by=bound_by, doc=__doc__)
