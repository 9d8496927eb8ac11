"""torch's CUDA caching allocator, replayed on paper: a training step's requests (each block asked
for and given back, in order, by stream) run through the allocator's own rules under a cap, giving
the peaks it would reserve and allocate, or the request that would run out of memory. Pure Python:
no torch, no GPU.

The rules are those of the default allocator (``c10/cuda/CUDACachingAllocator.cpp``: no expandable
segments, no ``max_split_size_mb``, no garbage collection threshold), one device:
- a request is rounded up to 512 bytes; up to 1 MiB it is served from the small pool, else from the
  large one; pools are kept per stream and never shared;
- a request takes the smallest free block of its pool and stream that holds it (lowest address on
  a tie), split where what is left is a block of its own (any remainder in the small pool, more
  than 1 MiB in the large one), else whole;
- with none, a segment is reserved: 2 MiB for the small pool, 20 MiB for a request under 10 MiB,
  else the request rounded up to 2 MiB. Where that would take the reserve past the cap, every
  segment with nothing allocated in it is released first, then it is tried again; past the cap
  still, the request runs out of memory;
- a block given back joins its free neighbours in its segment; a segment is never released but
  on that retry.

What it cannot see: memory taken outside the allocator (the CUDA context, a library's own
``cudaMalloc``), which the cap it is handed must leave out; the order of frees that wait on
another stream, which it takes from the requests as recorded; and the addresses ``cudaMalloc``
returns, which break ties between free blocks of one size. The driver hands each new segment out
below the ones before it, so here the newest segment's block goes first, and within a segment the
lower one: taking the oldest first instead packs a step's small blocks into a segment the GPU
keeps whole, and then releases, or fails where the GPU runs.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Iterable

MIN_BLOCK = 512
SMALL = 2**20  # the small pool's largest request
SMALL_SEGMENT = 2 * 2**20
LARGE_SEGMENT = 20 * 2**20  # what a request between SMALL and MIN_LARGE reserves
MIN_LARGE = 10 * 2**20
ROUND_LARGE = 2 * 2**20

ALLOC, FREE, RELEASED = "alloc", "free", "released"


@dataclass(frozen=True)
class Request:
    """One step of the programme, on ``stream``: ``alloc`` a block of ``size`` bytes known as
    ``block``; ``released``: the programme lets it go (it no longer counts as allocated); ``free``: the
    allocator takes it back (at once, or once another stream that used it is done with it)."""
    action: str
    block: int
    size: int = 0
    stream: int = 0


@dataclass
class Outcome:
    peak_reserved: int
    peak_allocated: int
    fits: bool
    oom_request: int | None = None  # the index of the request that ran out of memory


def round_size(size: int) -> int:
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def segment_size(rounded: int) -> int:
    if rounded <= SMALL:
        return SMALL_SEGMENT
    if rounded < MIN_LARGE:
        return LARGE_SEGMENT
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False)
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    stream: int
    free: bool = True
    prev: "_Block | None" = None
    next: "_Block | None" = None

    def key(self) -> tuple:
        """Where a free block stands in its pool: by size, then by address (the newest segment
        lowest, ``cudaMalloc`` handing each out below the last)."""
        return (self.size, -self.segment, self.offset)


@dataclass
class _State:
    cap: int
    pools: dict = field(default_factory=dict)  # (small, stream) -> sorted list of free blocks' keys
    blocks: dict = field(default_factory=dict)  # key -> free _Block
    live: dict = field(default_factory=dict)  # request's block id -> allocated _Block
    segments: dict = field(default_factory=dict)  # segment id -> its first _Block
    reserved: int = 0
    allocated: int = 0
    peak_reserved: int = 0
    peak_allocated: int = 0
    next_segment: int = 0

    def pool(self, small: bool, stream: int) -> list:
        return self.pools.setdefault((small, stream), [])

    def insert(self, block: _Block) -> None:
        block.free = True
        bisect.insort(self.pool(block.small, block.stream), block.key())
        self.blocks[block.key()] = block

    def remove(self, block: _Block) -> None:
        keys = self.pool(block.small, block.stream)
        del keys[bisect.bisect_left(keys, block.key())]
        del self.blocks[block.key()]

    def best_fit(self, size: int, small: bool, stream: int) -> _Block | None:
        keys = self.pool(small, stream)
        i = bisect.bisect_left(keys, (size, -math.inf))
        return self.blocks[keys[i]] if i < len(keys) else None

    def reserve(self, size: int, small: bool, stream: int) -> _Block | None:
        if self.reserved + size > self.cap:
            return None
        sid = self.next_segment
        self.next_segment += 1
        block = _Block(sid, 0, size, small, stream)
        self.segments[sid] = block
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def release_free_segments(self) -> None:
        for sid, first in list(self.segments.items()):
            if first.free and first.next is None:  # one free block: the whole segment
                self.remove(first)
                self.reserved -= first.size
                del self.segments[sid]


def _take(state: _State, block: _Block, size: int) -> _Block:
    """``block`` (free, out of its pool) handed out for a request of ``size`` rounded bytes: split
    where the remainder stands as a block of its own."""
    remaining = block.size - size
    if remaining >= MIN_BLOCK if block.small else remaining > SMALL:
        rest = _Block(block.segment, block.offset + size, remaining, block.small, block.stream,
                      prev=block, next=block.next)
        if block.next is not None:
            block.next.prev = rest
        block.next, block.size = rest, size
        state.insert(rest)
    block.free = False
    return block


def _alloc(state: _State, request: Request) -> bool:
    size = round_size(request.size)
    small = size <= SMALL
    block = state.best_fit(size, small, request.stream)
    if block is not None:
        state.remove(block)
    else:
        block = state.reserve(segment_size(size), small, request.stream)
        if block is None:
            state.release_free_segments()
            block = state.reserve(segment_size(size), small, request.stream)
        if block is None:
            return False
    block = _take(state, block, size)
    state.live[request.block] = block
    state.allocated += block.size
    state.peak_allocated = max(state.peak_allocated, state.allocated)
    return True


def _released(state: _State, request: Request) -> None:
    state.allocated -= state.live[request.block].size


def _free(state: _State, request: Request) -> None:
    block = state.live.pop(request.block)
    for neighbour in (block.prev, block.next):
        if neighbour is not None and neighbour.free:
            state.remove(neighbour)
            _merge(state, block, neighbour)
    state.insert(block)


def _merge(state: _State, block: _Block, other: _Block) -> None:
    if other is block.prev:
        block.offset, block.prev = other.offset, other.prev
        if other.prev is not None:
            other.prev.next = block
        else:
            state.segments[block.segment] = block
    else:
        block.next = other.next
        if other.next is not None:
            other.next.prev = block
    block.size += other.size


def replay(requests: Iterable[Request], cap: int) -> Outcome:
    """The allocator's peaks over ``requests`` with at most ``cap`` bytes reserved at once, or the
    request at which it runs out of memory (``fits`` False; the peaks up to it)."""
    state = _State(cap)
    for i, request in enumerate(requests):
        if request.action == ALLOC:
            if not _alloc(state, request):
                return Outcome(state.peak_reserved, state.peak_allocated, False, i)
        elif request.action == RELEASED:
            _released(state, request)
        else:
            _free(state, request)
    return Outcome(state.peak_reserved, state.peak_allocated, True)


def live_peak(requests: Iterable[Request]) -> int:
    """The most bytes the programme's blocks hold at once, each rounded as the allocator rounds it:
    what any cap must leave room for, whatever blocks and segments the allocator hands out (it
    never holds less than its blocks ask)."""
    live, peak, held = {}, 0, 0
    for request in requests:
        if request.action == ALLOC:
            live[request.block] = round_size(request.size)
            held += live[request.block]
            peak = max(peak, held)
        elif request.action == RELEASED:
            held -= live.pop(request.block)
    return peak


# torch's memory history (``torch.cuda.memory._snapshot()["device_traces"]``): the actions a
# programme is read from. A block's request is recorded as asked (unrounded); its segments are the
# allocator's own doing, which the replay does again. ``oom`` is the request the allocator could not
# serve, rounded: the replay is asked it too, and must run out where the recorded run did.
TRACE = {"alloc": ALLOC, "oom": ALLOC, "free_requested": RELEASED, "free_completed": FREE}


def programme(trace: Iterable[dict]) -> list[Request]:
    """The requests of a recorded trace (each entry's ``action``, ``addr``, ``size``, ``stream``),
    each block known by the order it was asked for in, each stream by the order it was first used
    in (torch names a stream by its handle, which differs from run to run), and each run of blocks
    given back between two requests in the order of their blocks (torch gives back some in the order
    of their addresses, as when autocast empties its cache): the same programme at another size
    names the same blocks and streams in the same order."""
    out, by_addr, streams, asked = [], {}, {}, 0
    for entry in trace:
        action = TRACE.get(entry["action"])
        if action is None:
            continue
        stream = streams.setdefault(int(entry.get("stream") or 0), len(streams))
        if action == ALLOC:
            if entry["action"] == "alloc":  # an oom's block was never handed out: no address
                by_addr[entry["addr"]] = asked
            out.append(Request(ALLOC, asked, int(entry["size"]), stream))
            asked += 1
        else:
            block = by_addr[entry["addr"]] if action == RELEASED else by_addr.pop(entry["addr"])
            out.append(Request(action, block, 0, stream))
    return _give_backs_in_order(out)


def _give_backs_in_order(requests: list[Request]) -> list[Request]:
    """``requests`` with each run of give-backs between two allocations sorted by block (a block's
    ``released`` before its ``free``): the order within a run moves no peak (nothing is reserved or
    allocated in it) and leaves the same free blocks after it (neighbours merge in any order)."""
    out, run = [], []
    for request in requests:
        if request.action != ALLOC:
            run.append(request)
            continue
        out += sorted(run, key=lambda r: (r.block, r.action == FREE))
        run = []
        out.append(request)
    return out + sorted(run, key=lambda r: (r.block, r.action == FREE))


class Unlike(ValueError):
    """Programmes recorded at two sizes that are not one programme grown: another count or order of
    requests, or a request whose size follows no law of the size."""


def grown(programmes: dict, n: int, degree: int = 1) -> list[Request]:
    """The programme at size ``n`` from the same programme recorded at ``degree + 1`` sizes or more
    (size -> requests), each request's bytes on its law (``Growth``). ``Unlike`` where the
    programmes differ in anything but their requests' sizes, or a size lies off its law."""
    return Growth(programmes, degree).at(n)


class Growth:
    """One programme recorded at several sizes, checked once (``grown``), with each request's law
    of the size read once: the programme at any size without reading them again.

    A request's law is the polynomial of ``degree`` through the largest sizes recorded, which every
    smaller one recorded must lie on exactly; but a request that stopped growing (the same bytes at
    the two largest sizes, fewer at a smaller one: recorded steps ask for some blocks that grow with
    the size up to a bound and no further) stays there from the larger-but-one, and under it grows
    on the law through the smallest sizes up to where it stopped."""

    def __init__(self, programmes: dict, degree: int = 1):
        sizes = sorted(programmes)
        if len(sizes) < degree + 1:
            raise Unlike(f"a law of degree {degree} needs {degree + 1} recorded sizes, got {len(sizes)}")
        self.sizes, self.base = sizes, programmes[sizes[0]]
        shape = [(r.action, r.block, r.stream) for r in self.base]
        for m in sizes[1:]:
            if [(r.action, r.block, r.stream) for r in programmes[m]] != shape:
                raise Unlike(f"the programme at {m:,} is not the one at {sizes[0]:,} grown: its requests differ")
        self.laws = {}  # request index -> its bytes as a function of the size
        for i, request in enumerate(self.base):
            if request.action != ALLOC:
                continue
            ys = [programmes[m][i].size for m in sizes]
            law = self.laws[i] = law_of(sizes, ys, degree)
            for m, y in zip(sizes, ys):
                if law(m) != y:
                    raise Unlike(f"request {i} asks {y:,} bytes at {m:,}, off its law through "
                                 f"{sizes[-(degree + 1):]} ({law(m):,})")

    def at(self, n: int) -> list[Request]:
        return [Request(ALLOC, r.block, max(0, self.laws[i](n)), r.stream) if i in self.laws else r
                for i, r in enumerate(self.base)]


def law_of(sizes: list, ys: list, degree: int):
    """A request's bytes as a function of the size (``Growth``): any byte count recorded at
    ``sizes`` that grows with them as a request does."""
    if len(ys) > 1 and ys[-1] == ys[-2] != ys[0] and ys == sorted(ys):  # it grew, then stopped
        top, stop, below = ys[-1], sizes[-2], _through(sizes[:degree + 1], ys[:degree + 1])
        return lambda n: top if n >= stop else min(below(n), top)
    return _through(sizes[-(degree + 1):], ys[-(degree + 1):])


def _through(xs: list, ys: list):
    """The polynomial through the points (xs, ys), exact in integers where its values are: by
    Lagrange's form, evaluated with fractions."""
    from fractions import Fraction

    def at(x):
        total = Fraction(0)
        for i, (xi, yi) in enumerate(zip(xs, ys)):
            term = Fraction(yi)
            for j, xj in enumerate(xs):
                if j != i:
                    term *= Fraction(x - xj, xi - xj)
            total += term
        return int(round(total))
    return at


_CODES = {ALLOC: "a", RELEASED: "r", FREE: "f"}
_ACTIONS = {v: k for k, v in _CODES.items()}


def dump(requests: list[Request]) -> list[list]:
    """A programme as JSON: one [action's letter, block, size, stream] a request."""
    return [[_CODES[r.action], r.block, r.size, r.stream] for r in requests]


def load(rows: list[list]) -> list[Request]:
    """A programme ``dump`` wrote."""
    return [Request(_ACTIONS[a], int(block), int(size), int(stream)) for a, block, size, stream in rows]


def largest(programmes: dict, degree: int, cap: int, unit: int = 1, top: int = 2**20) -> int:
    """The largest multiple of ``unit`` (up to ``top``) whose programme, grown from ``programmes``
    (``grown``), the allocator runs under ``cap``; 0 where even ``unit`` does not. Found by
    bisection (``predict.last_multiple``): a larger step asks for no fewer bytes, request by request."""
    from harness.workloads.search.predict import last_multiple
    growth = Growth(programmes, degree)
    return last_multiple(lambda n: replay(growth.at(n), cap).fits, unit, top)
