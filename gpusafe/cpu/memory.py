"""Device memory of the CPU device: the global arena and its allocation map.

Global memory is an arena of stable 64-bit addresses starting at
:data:`GLOBAL_BASE`.  Allocations are placed by a bump allocator and an address
range is never handed out twice, so a stale pointer always lands in the record
of the allocation it came from (live or freed), never in a newer one.  Each
allocation is followed by a red zone of at least ``red_zone`` bytes (default
:data:`RED_ZONE`) that belongs to no allocation: a linear overflow lands
outside every allocation, where the oracle sees it.  An allocator above that
pads allocations itself (gpusafe's registry) asks for no red zone and no
quarantine, so the policy applies once.

The arena is backed by one buffer per allocation ("segment") covering the
allocation and the gap up to the next one, so every address between
:data:`GLOBAL_BASE` and the end of the last segment has backing bytes: an
access into a red zone behaves like on a GPU (it reads whatever is there).
Addresses outside the arena are not device memory; an access there is an
:class:`~gpusafe.cpu.errors.IllegalAddress`.

Freed allocations keep their record forever and their bytes for a while (a
quarantine of ``quarantine`` bytes); after that their buffer is dropped and
reads there see zeros.

Two kinds of allocation have other bytes: a host-visible one (pinned,
managed, registered memory) is backed by process memory
(:mod:`.host_memory`), and a mapping of reserved addresses (virtual memory
management: :meth:`DeviceMemory.reserve`, :meth:`~DeviceMemory.map_range`)
is a view of a physical allocation; reserved addresses with nothing mapped
fault when accessed, and only such a range is ever mapped twice.

Shared and local memory are not here: they live in the executor, per block
and per thread.  Their *generic* addresses are windows of the 64-bit address
space, fixed here so that every module agrees on them (docs/cpu-device.md).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

import numpy as np

from .errors import IllegalAddress, InvalidAddress, OutOfMemory
from .host_memory import PAGE, AddressTaken, Backing, page_round

GLOBAL_BASE = 0x7F00_0000_0000
"""First address of the global arena."""
SHARED_WINDOW = 0x0000_1000_0000_0000
"""Generic address of shared-memory offset 0 (``cvta.shared`` adds it)."""
LOCAL_WINDOW = 0x0000_2000_0000_0000
"""Generic address of local-memory offset 0 of the executing thread."""
PARAM_WINDOW = 0x0000_3000_0000_0000
"""Generic address of kernel-parameter offset 0 (``cvta.param``)."""
FUNCTION_BASE = 0x0000_4000_0000_0000
"""Addresses of device functions (function pointers) start here."""
WINDOW_SIZE = 1 << 32
"""Size of each generic window."""
LOCAL_STACK_BASE = 0x1_0000
"""Local address of the bottom of every thread's stack (the kernel's frame).
Local addresses below it are in the thread's window but outside its stack,
so an underflow of a local array is a local-out-of-bounds access."""
NULL_PAGE = 0x1000
"""Addresses below this are the null page."""
RED_ZONE = 256
"""Default minimum unallocated gap after every allocation."""
QUARANTINE = 256 << 20
"""Default bytes of freed allocations whose contents are kept."""
SEGMENT_ALIGN = 256


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


@dataclass(eq=False, slots=True)
class ArenaAllocation:
    """One device allocation; its record outlives ``free``."""

    tag: int
    base: int
    size: int
    live: bool = True
    label: str = ""  # what it is when not a user allocation, e.g. "module variable gtab"

    @property
    def end(self) -> int:
        return self.base + self.size

    def __repr__(self) -> str:
        state = "live" if self.live else "freed"
        return f"ArenaAllocation(tag={self.tag}, base={self.base:#x}, size={self.size}, {state})"


@dataclass(eq=False, slots=True)
class _Segment:
    start: int
    end: int
    buffer: np.ndarray | None  # uint8, end - start bytes; None once dropped from quarantine
    allocation: ArenaAllocation | None = None  # None for an alignment filler
    position: int = -1  # the allocation's position in the index
    backing: Backing | None = None  # host-visible bytes (pinned, managed, registered)
    hole: bool = False  # reserved addresses (cuMemAddressReserve), mapped or not
    device: int = -1  # the device whose memory it is (-1: every device reaches it)

    def data(self) -> np.ndarray:
        if self.buffer is None:
            self.buffer = np.zeros(self.end - self.start, dtype=np.uint8)
        return self.buffer

    def unmapped(self) -> bool:
        """Reserved addresses with nothing mapped there now: an access faults."""
        return self.allocation is None or not self.allocation.live

    def drop(self) -> None:
        """Forget the bytes (the quarantine let them go)."""
        self.buffer = None
        if self.backing is not None:
            self.backing.release()
            self.backing = None


class _Column:
    """A numpy array that grows at its end in place (capacity doubles), so that
    appending is amortised O(1) and readers get a view, never a copy."""

    __slots__ = ("_data", "n")

    def __init__(self, dtype: type) -> None:
        self._data = np.zeros(64, dtype)
        self.n = 0

    def append(self, value: int | bool) -> int:
        """Appends ``value``; returns how many entries that wrote (growth included)."""
        written = 1
        if self.n == len(self._data):
            grown = np.zeros(2 * len(self._data), self._data.dtype)
            grown[:self.n] = self._data
            self._data = grown
            written += self.n
        self._data[self.n] = value
        self.n += 1
        return written

    def set(self, i: int, value: int | bool) -> None:
        self._data[i] = value

    def view(self) -> np.ndarray:
        return self._data[:self.n]


class _Index:
    """Address-ordered numpy columns of the segment and allocation tables.

    Bump allocation hands out addresses in increasing order, so a new segment
    or allocation is an append and a free flips one ``live`` entry: the index
    is kept up to date as the tables change, never rebuilt (gpusafe allocates
    and frees its own records at every launch, and every record ever made is
    kept).  ``written`` counts the entries written, growth included: it stays
    within a small multiple of the number of records.  The arrays are views;
    one taken before a later allocation may not show it (take them again)."""

    def __init__(self) -> None:
        self._seg_starts = _Column(np.uint64)
        self._seg_ends = _Column(np.uint64)
        self._bases = _Column(np.uint64)
        self._ends = _Column(np.uint64)
        self._live = _Column(bool)
        self.written = 0

    def add_segment(self, start: int, end: int) -> None:
        self.written += self._seg_starts.append(start) + self._seg_ends.append(end)

    def add_allocation(self, base: int, end: int) -> int:
        """Appends a live allocation; returns its position."""
        self.written += (self._bases.append(base) + self._ends.append(end)
                         + self._live.append(True))
        return self._bases.n - 1

    def mark_freed(self, position: int) -> None:
        self._live.set(position, False)
        self.written += 1

    @property
    def seg_starts(self) -> np.ndarray:
        return self._seg_starts.view()

    @property
    def seg_ends(self) -> np.ndarray:
        return self._seg_ends.view()

    @property
    def bases(self) -> np.ndarray:
        return self._bases.view()

    @property
    def ends(self) -> np.ndarray:
        return self._ends.view()

    @property
    def live(self) -> np.ndarray:
        return self._live.view()


class DeviceMemory:
    """The global arena: allocation, host copies, and vectorised device access."""

    def __init__(self, capacity: int = 16 << 30, *, red_zone: int = RED_ZONE,
                 quarantine: int = QUARANTINE) -> None:
        if red_zone < 0 or quarantine < 0:
            raise ValueError("the red zone and the quarantine cannot be negative")
        self.capacity = capacity
        self.red_zone = red_zone
        self.quarantine = quarantine
        self.used = 0
        self._segments: list[_Segment] = []
        self._allocations: list[ArenaAllocation] = []  # in address order (bump allocation)
        self._seg_of: dict[int, _Segment] = {}  # tag -> segment
        self._top = GLOBAL_BASE
        self._next_tag = 1
        self._freed: deque[_Segment] = deque()
        self._freed_bytes = 0
        self._index = _Index()
        self.barred: frozenset[int] | None = None
        """Devices whose memory the running kernel may not reach (several
        devices, no peer access): an access there faults, as on a GPU."""

    # -- host API ------------------------------------------------------------

    @property
    def allocations(self) -> list[ArenaAllocation]:
        """Every allocation ever made (live and freed), in address order."""
        return list(self._allocations)

    @property
    def top(self) -> int:
        """One past the last byte of the arena."""
        return self._top

    def alloc(self, size: int, align: int = SEGMENT_ALIGN, *, label: str = "",
              backing: Backing | None = None) -> int:
        """A new allocation of ``size`` bytes; returns its base address.

        With ``backing`` its bytes are host memory (:mod:`.host_memory`):
        the allocation starts on a page and its red zone follows it as
        arena bytes of no allocation."""
        if backing is not None:
            return self._alloc_backed(size, label, backing)
        if size < 0:
            raise ValueError(f"allocation size must not be negative, got {size}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"alignment must be a power of two, got {align}")
        if self.used + size > self.capacity:
            raise OutOfMemory(
                f"out of device memory: {size} bytes requested, "
                f"{self.capacity - self.used} of {self.capacity} left"
            )
        align = max(align, SEGMENT_ALIGN)
        base = _align_up(self._top, align)
        if base > self._top:  # alignment filler: arena bytes of no allocation
            self._segments.append(
                _Segment(self._top, base, np.zeros(base - self._top, np.uint8))
            )
            self._index.add_segment(self._top, base)
        # at least one segment: every allocation has its own base address
        end = base + max(_align_up(size + self.red_zone, SEGMENT_ALIGN), SEGMENT_ALIGN)
        allocation = ArenaAllocation(self._next_tag, base, size, True, label)
        self._next_tag += 1
        position = self._index.add_allocation(base, base + size)
        segment = _Segment(base, end, np.zeros(end - base, np.uint8), allocation, position)
        self._index.add_segment(base, end)
        self._segments.append(segment)
        self._allocations.append(allocation)
        self._seg_of[allocation.tag] = segment
        self._top = end
        self.used += size
        return base

    _PLACEMENT_TRIES = 64

    def _alloc_backed(self, size: int, label: str, backing: Backing) -> int:
        if size <= 0:
            raise ValueError(f"a host-visible allocation needs bytes, got {size}")
        if self.used + size > self.capacity:
            raise OutOfMemory(f"out of device memory: {size} bytes requested, "
                              f"{self.capacity - self.used} of {self.capacity} left")
        start = self._top
        base = _align_up(start, PAGE)
        for _ in range(self._PLACEMENT_TRIES):
            try:
                buffer = backing.place(base, size)
                break
            except AddressTaken as taken:  # the process maps something there: go past it
                base = _align_up(taken.next_free, PAGE)
        else:
            raise OutOfMemory(f"no free address range for {size} bytes of host-visible memory "
                              f"after {self._PLACEMENT_TRIES} tries")
        if base > start:  # untouched unless a stray access reads it: no bytes until then
            self._segments.append(_Segment(start, base, None))
            self._index.add_segment(start, base)
        allocation = ArenaAllocation(self._next_tag, base, size, True, label)
        self._next_tag += 1
        position = self._index.add_allocation(base, base + size)
        segment = _Segment(base, base + size, buffer, allocation, position, backing)
        self._segments.append(segment)
        self._index.add_segment(base, base + size)
        self._allocations.append(allocation)
        self._seg_of[allocation.tag] = segment
        end = base + page_round(size + self.red_zone)
        if end > base + size:  # the red zone
            self._segments.append(_Segment(base + size, end, None))
            self._index.add_segment(base + size, end)
        self._top = end
        self.used += size
        return base

    # -- virtual memory management (cuMemAddressReserve, cuMemMap, cuMemUnmap) --

    def reserve(self, size: int, align: int) -> int:
        """A range of ``size`` addresses of no allocation, for mappings made
        later (:meth:`map_range`); never handed out again."""
        if size <= 0 or align <= 0 or align & (align - 1):
            raise ValueError(f"a reservation needs a size and a power-of-two alignment, "
                             f"got {size}, {align}")
        base = _align_up(self._top, max(align, SEGMENT_ALIGN))
        if base > self._top:
            self._segments.append(_Segment(self._top, base, None))
            self._index.add_segment(self._top, base)
        self._segments.append(_Segment(base, base + size, None, hole=True))
        self._index.add_segment(base, base + size)
        self._top = base + size
        return base

    def map_range(self, address: int, buffer: np.ndarray, label: str = "") -> ArenaAllocation:
        """Make ``[address, +len(buffer))`` of a reservation an allocation
        whose bytes are ``buffer`` (a view of a physical allocation).  The
        range is a part of the reservation never mapped, or exactly a range
        mapped and unmapped before (whose freed record it replaces)."""
        size = len(buffer)
        i = int(np.searchsorted(self._index.seg_starts, address, side="right")) - 1
        seg = self._segments[i] if i >= 0 else None
        if seg is None or not seg.hole or address + size > seg.end \
                or (seg.allocation is not None and seg.allocation.live):
            raise InvalidAddress(f"{address:#x}+{size} is not inside one unmapped reserved range")
        old = seg.allocation
        if old is not None and (seg.start, seg.end) != (address, address + size):
            raise InvalidAddress(f"{address:#x}+{size} overlaps part of a range mapped before "
                                 f"({old!r}): remap exactly that range")
        allocation = ArenaAllocation(self._next_tag, address, size, True, label)
        self._next_tag += 1
        mapped = _Segment(address, address + size, buffer, allocation, hole=True)
        if old is not None:
            self._allocations[self._allocations.index(old)] = allocation
            del self._seg_of[old.tag]
            pieces = [mapped]
        else:
            pieces = [p for p in (_Segment(seg.start, address, None, hole=True), mapped,
                                  _Segment(address + size, seg.end, None, hole=True))
                      if p.end > p.start]
            at = bisect.bisect_left(self._allocations, address, key=lambda a: a.base)
            self._allocations.insert(at, allocation)
        self._segments[i:i + 1] = pieces
        self._seg_of[allocation.tag] = mapped
        self.used += size
        self._reindex()
        return allocation

    def unmap_range(self, address: int, size: int) -> ArenaAllocation:
        """Undo :meth:`map_range`: the record stays, freed, and the range is a
        hole of its reservation again (reads there see zeros)."""
        allocation = self.find(address)
        if allocation is None or not allocation.live or allocation.base != address \
                or allocation.size != size:
            raise InvalidAddress(f"{address:#x}+{size} is not a mapped range")
        segment = self._seg_of[allocation.tag]
        if not segment.hole:
            raise InvalidAddress(f"{address:#x} is not a mapping of reserved addresses")
        allocation.live = False
        self.used -= size
        self._index.mark_freed(segment.position)
        segment.buffer = None
        return allocation

    def _reindex(self) -> None:
        """Rebuild the index after a mapping split a reservation (rare: VMM)."""
        ix = _Index()
        for seg in self._segments:
            ix.add_segment(seg.start, seg.end)
        for position, allocation in enumerate(self._allocations):
            ix.add_allocation(allocation.base, allocation.end)
            if not allocation.live:
                ix.mark_freed(position)
            self._seg_of[allocation.tag].position = position
        self._index = ix

    def set_device(self, address: int, device: int) -> None:
        """Make the allocation at ``address`` (and its red zone) memory of
        ``device``: a kernel of a device barred from it faults there."""
        allocation = self.find(address)
        if allocation is None:
            raise InvalidAddress(f"{address:#x} is not an allocation")
        self._seg_of[allocation.tag].device = device

    def _fenced(self, seg: _Segment, address: int) -> None:
        if self.barred is not None and seg.device in self.barred:
            raise IllegalAddress(address, f"memory of device {seg.device}, which the "
                                          "launching device has no peer access to")

    def host_visible(self, address: int) -> bool:
        """Whether ``address`` is in a live allocation whose bytes the host
        reaches at that address (pinned or managed memory)."""
        allocation = self.find(address)
        if allocation is None or not allocation.live:
            return False
        backing = self._seg_of[allocation.tag].backing
        return backing is not None and backing.owns_bytes

    def close(self) -> None:
        """Give back every host-visible allocation's pages (the device is gone)."""
        for segment in self._segments:
            if segment.backing is not None:
                segment.drop()

    def free(self, address: int) -> ArenaAllocation:
        """Free the live allocation based at ``address``; its record stays (state freed)."""
        allocation = self.find(address)
        if allocation is None or allocation.base != address or not allocation.live:
            raise InvalidAddress(self._describe_bad_free(address, allocation))
        if self._seg_of[allocation.tag].hole:
            raise InvalidAddress(f"{address:#x} is a mapping of reserved addresses: unmap it")
        allocation.live = False
        self.used -= allocation.size
        segment = self._seg_of[allocation.tag]
        self._index.mark_freed(segment.position)
        if segment.backing is not None and not segment.backing.owns_bytes:
            # the program's own bytes stay the program's: the quarantine keeps a copy
            segment.buffer = segment.data().copy()
            segment.backing.release()
            segment.backing = None
        self._freed.append(segment)
        self._freed_bytes += segment.end - segment.start
        while self._freed_bytes > self.quarantine and self._freed:
            old = self._freed.popleft()
            self._freed_bytes -= old.end - old.start
            old.drop()
        return allocation

    def _describe_bad_free(self, address: int, allocation: ArenaAllocation | None) -> str:
        if allocation is None:
            return f"{address:#x} is not a device allocation"
        if not allocation.live and allocation.base == address:
            return f"{address:#x} was already freed"
        return f"{address:#x} is not the base of an allocation (inside {allocation!r})"

    def find(self, address: int) -> ArenaAllocation | None:
        """The allocation (live or freed) whose bytes contain ``address``."""
        allocations = self._allocations
        lo, hi = 0, len(allocations)
        while lo < hi:
            mid = (lo + hi) // 2
            if allocations[mid].base <= address:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return None
        candidate = allocations[lo - 1]
        if address < candidate.base + max(candidate.size, 1):
            return candidate
        return None

    def _host_range(self, address: int, size: int) -> np.ndarray:
        """The bytes ``[address, address+size)``, which must lie in one live allocation."""
        if size < 0:
            raise InvalidAddress(f"negative size {size}")
        allocation = self.find(address)
        if allocation is None:
            raise InvalidAddress(f"{address:#x} is not in any device allocation")
        if not allocation.live:
            raise InvalidAddress(f"{address:#x} is in freed memory ({allocation!r})")
        if address + size > allocation.end:
            raise InvalidAddress(
                f"range {address:#x}+{size} leaves its allocation ({allocation!r})"
            )
        segment = self._seg_of[allocation.tag]
        offset = address - segment.start
        return segment.data()[offset:offset + size]

    def view(self, address: int, size: int) -> np.ndarray:
        """A writable uint8 view of ``size`` bytes inside one live allocation."""
        return self._host_range(address, size)

    def write(self, address: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Copy host bytes to device memory (inside one live allocation)."""
        if isinstance(data, np.ndarray):
            src = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        else:
            src = np.frombuffer(data, dtype=np.uint8)
        self._host_range(address, src.size)[:] = src

    def read(self, address: int, size: int) -> bytes:
        """Copy device bytes to the host (inside one live allocation)."""
        return self._host_range(address, size).tobytes()

    def copy(self, dst: int, src: int, size: int) -> None:
        """Device-to-device copy; both ranges inside live allocations (may overlap)."""
        data = self._host_range(src, size).copy()
        self._host_range(dst, size)[:] = data

    def fill(self, address: int, value: int, width: int, count: int) -> None:
        """Set ``count`` elements of ``width`` bytes (1, 2 or 4) to ``value``."""
        if width not in (1, 2, 4):
            raise ValueError(f"fill width must be 1, 2 or 4, got {width}")
        target = self._host_range(address, width * count)
        pattern = (int(value) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        target[:] = np.tile(np.frombuffer(pattern, np.uint8), count)

    # -- vectorised device access ---------------------------------------------

    def index(self) -> _Index:
        """Sorted arrays of segment bounds and allocation bounds/states, kept
        up to date by :meth:`alloc` and :meth:`free`."""
        return self._index

    def lookup(self, addresses: np.ndarray) -> np.ndarray:
        """Per address, the index (into :attr:`allocations`) of the last allocation
        whose base is at or below it, or -1.  The caller compares with its end."""
        ix = self.index()
        return np.searchsorted(ix.bases, addresses, side="right").astype(np.int64) - 1

    def allocation_at(self, i: int) -> ArenaAllocation:
        return self._allocations[i]

    def in_arena(self, addresses: np.ndarray, width: int) -> np.ndarray:
        """Which accesses of ``width`` bytes lie entirely inside the arena."""
        return (addresses >= np.uint64(GLOBAL_BASE)) & (
            addresses <= np.uint64(max(self._top - width, 0))
        )

    def segments(
        self, addresses: np.ndarray, width: int
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """Split accesses of ``width`` bytes at ``addresses`` (uint64) by backing buffer.

        Returns ``(buffer, byte_offsets, lanes)`` triples: ``buffer`` is a uint8
        array, ``byte_offsets`` (int64) index into it and ``lanes`` are the
        positions in ``addresses`` they belong to (None: all of them, in order).
        Raises :class:`IllegalAddress` for an access that is not entirely inside
        the arena.
        """
        if addresses.size == 0:
            return []
        ix = self.index()
        lo = int(addresses.min())
        hi = int(addresses.max())
        if lo < GLOBAL_BASE or hi + width > self._top:
            bad = ~self.in_arena(addresses, width)
            raise IllegalAddress(int(addresses[np.flatnonzero(bad)[0]]))
        first = int(np.searchsorted(ix.seg_starts, lo, side="right")) - 1
        if hi + width <= int(ix.seg_ends[first]):
            seg = self._segments[first]
            if seg.hole and seg.unmapped():
                raise IllegalAddress(lo)
            if self.barred is not None:
                self._fenced(seg, lo)
            return [(seg.data(), (addresses - np.uint64(seg.start)).view(np.int64), None)]
        which = np.searchsorted(ix.seg_starts, addresses, side="right") - 1
        crossing = addresses + np.uint64(width) > ix.seg_ends[which]
        if crossing.any():
            raise IllegalAddress(int(addresses[np.flatnonzero(crossing)[0]]))
        order = np.argsort(which, kind="stable")
        sorted_which = which[order]
        cuts = np.flatnonzero(sorted_which[1:] != sorted_which[:-1]) + 1
        out = []
        for lanes in np.split(order, cuts):
            seg = self._segments[int(which[lanes[0]])]
            if seg.hole and seg.unmapped():
                raise IllegalAddress(int(addresses[lanes[0]]))
            if self.barred is not None:
                self._fenced(seg, int(addresses[lanes[0]]))
            offsets = (addresses[lanes] - np.uint64(seg.start)).view(np.int64)
            out.append((seg.data(), offsets, lanes))
        return out

    def peek(self, address: int, size: int) -> bytes:
        """Raw arena bytes (any allocation state, red zones included); for the
        executor's own reads (printf strings).  Raises IllegalAddress outside
        the arena."""
        if address < GLOBAL_BASE or address + size > self._top:
            raise IllegalAddress(address)
        out = bytearray()
        ix = self.index()
        while size > 0:
            i = int(np.searchsorted(ix.seg_starts, address, side="right")) - 1
            seg = self._segments[i]
            n = min(size, seg.end - address)
            out += seg.data()[address - seg.start: address - seg.start + n].tobytes()
            address += n
            size -= n
        return bytes(out)


def plain_segments(memory: DeviceMemory) -> list[tuple[int, int, np.ndarray | None]]:
    """``(start, end, bytes)`` of every segment of ``memory`` in address order,
    for compiled code (:mod:`gpusafe.cpu.jit`): bytes are None where an access
    needs more than a lookup (reserved addresses, bytes not materialised), so
    that it goes through :meth:`DeviceMemory.segments`."""
    return [(seg.start, seg.end, None if seg.hole else seg.buffer)
            for seg in memory._segments]
