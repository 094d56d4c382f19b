"""The launch pipeline: everything around one launch of an instrumented kernel.

Before the launch, :meth:`LaunchPipeline.prepare` places in device memory the
allocation table (uploaded again only when it changed), an empty violation
buffer (only its header is written: the records past ``count`` are never
read) and the launch context (each pointer root's bounds and every check
slot's limit, ``gpusafe_instrument/host.py``; a pointer argument in no
allocation is looked for among the device heap's blocks, read back for it),
and gives the parameter buffer of the
instrumented kernel: the program's own parameters and the hidden context
pointer.  The device heap table of the launch's context (the blocks of
in-kernel ``malloc``, kept across launches) is placed the first time a
kernel whose module calls ``malloc``/``free`` is launched there; before
that no block can exist, and launches get none.  After it,
:meth:`LaunchPipeline.collect` reads the violation records
back (the header, then only the records it counts) and keeps the launch's
buffers for the next launch: a program launching ten thousand kernels does
not allocate twenty thousand buffers.

The pipeline works on any device memory with ``alloc``/``write``/``read``/
``free``: the driver-backed memory of ``gpusafe run`` (:class:`DriverMemory`),
or a CPU device's memory directly (the differential tests and the overhead
benchmark).  Both go through this code, so what the tests prove is what users
run.  The violation buffers may live in a memory of their own: on a GPU they
are pinned host memory mapped into the device (:class:`MappedHostMemory`), so
that the records a kernel wrote before a fault killed its context can still
be read.
"""

from __future__ import annotations

import bisect
import ctypes
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cuda.bindings.driver import CUresult

from gpusafe_instrument import host, layout
from gpusafe_instrument.host import AllocationRecord, DeviceViolation, HeapBlock
from gpusafe_instrument.sites import KernelInfo, Site, SiteTable

VIOLATION_CAPACITY = 4096
"""Violation records one launch keeps; more are counted as dropped."""


class DeviceMemoryPort(Protocol):
    """Device memory the pipeline can place its records in."""

    def alloc(self, size: int) -> int: ...

    def write(self, address: int, data: bytes) -> None: ...

    def read(self, address: int, size: int) -> bytes: ...

    def free(self, address: int) -> None: ...


class DeviceMemoryError(MemoryError):
    """gpusafe could not place or read its own records in device memory."""


class DriverMemory:
    """Device memory through a driver API (``cuMemAlloc`` & co.), for the
    records of ``gpusafe run``: never in the program's allocation table."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver
        self._ok = CUresult.CUDA_SUCCESS

    def alloc(self, size: int) -> int:
        err, ptr = self._driver.cuMemAlloc(max(size, 8))
        if err != self._ok:
            raise DeviceMemoryError(f"gpusafe could not allocate {size} bytes of device memory "
                                    f"for its records: {err}")
        return int(ptr)

    def write(self, address: int, data: bytes) -> None:
        (err,) = self._driver.cuMemcpyHtoD(address, data, len(data))
        if err != self._ok:
            raise DeviceMemoryError(f"gpusafe could not write its launch records: {err}")

    def read(self, address: int, size: int) -> bytes:
        data = bytearray(size)
        (err,) = self._driver.cuMemcpyDtoH(data, address, size)
        if err != self._ok:
            raise DeviceMemoryError(f"could not read the violation records: {err}")
        return bytes(data)

    def free(self, address: int) -> None:
        self._driver.cuMemFree(address)


class MappedHostMemory:
    """Pinned host memory mapped into the device's address space
    (``cuMemHostAlloc`` with ``DEVICEMAP``): the kernel writes its violation
    records there and the host reads them as plain memory, which still works
    after a device fault has made the context's error sticky and every copy
    out of the device fail."""

    _FLAGS = 0x1 | 0x2  # CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP

    def __init__(self, driver: Any) -> None:
        self._driver = driver
        self._ok = CUresult.CUDA_SUCCESS
        self._bases: list[int] = []  # device addresses, sorted
        self._blocks: dict[int, tuple[int, int]] = {}  # device address -> (host address, size)

    def alloc(self, size: int) -> int:
        size = max(size, 8)
        err, host_ptr = self._driver.cuMemHostAlloc(size, self._FLAGS)
        if err != self._ok:
            raise DeviceMemoryError(f"gpusafe could not allocate {size} bytes of mapped host "
                                    f"memory for its records: {err}")
        err, device_ptr = self._driver.cuMemHostGetDevicePointer(host_ptr, 0)
        if err != self._ok:
            self._driver.cuMemFreeHost(host_ptr)
            raise DeviceMemoryError(f"gpusafe could not map its record memory: {err}")
        address = int(device_ptr)
        bisect.insort(self._bases, address)
        self._blocks[address] = (int(host_ptr), size)
        return address

    def _host(self, address: int, size: int) -> int:
        i = bisect.bisect_right(self._bases, address) - 1
        if i >= 0:
            base = self._bases[i]
            host_ptr, block = self._blocks[base]
            if address + size <= base + block:
                return host_ptr + address - base
        raise DeviceMemoryError(f"{address:#x} (+{size}) is not in gpusafe's record memory")

    def write(self, address: int, data: bytes) -> None:
        ctypes.memmove(self._host(address, len(data)), bytes(data), len(data))

    def read(self, address: int, size: int) -> bytes:
        return ctypes.string_at(self._host(address, size), size)

    def free(self, address: int) -> None:
        host_ptr, _ = self._blocks.pop(address)
        self._bases.remove(address)
        self._driver.cuMemFreeHost(host_ptr)


@dataclass
class Launch:
    """One prepared launch of an instrumented kernel."""

    kernel: str
    sites: SiteTable
    params: bytes  # the instrumented kernel's parameter buffer, hidden parameter included
    violations: int  # address of its violation buffer
    # (memory, address, size) it holds; size -1: this launch's alone, never kept
    buffers: list[tuple[DeviceMemoryPort, int, int]] = field(default_factory=list)
    site: Any = None  # the program's call site of the launch (a CallSite)
    freed_arguments: list = field(default_factory=list)  # FreedArgument verdicts to confirm
    heap: int = 0  # address of the heap table it was given (0: none)
    entry: str = ""  # the kernel to launch: ``kernel``, or its proven entry (``prepare``)
    context: bytes = b""  # its launch context: the roots' bounds the device judged against
    tallies: int = 0  # bytes of the site tallies below its violation buffer's header


@dataclass
class _Table:
    key: Hashable
    address: int
    records: list[AllocationRecord]


class LaunchPipeline:
    """Prepares launches and reads their violation records back."""

    def __init__(self, memory: DeviceMemoryPort, capacity: int = VIOLATION_CAPACITY, *,
                 records: DeviceMemoryPort | None = None,
                 heap_capacity: int = layout.HEAP_CAPACITY,
                 heap_ring: int = layout.HEAP_RING) -> None:
        self.memory = memory
        self.records = records or memory  # where the violation buffers live
        self.capacity = capacity
        self.heap_capacity = heap_capacity  # blocks a heap table records
        self.heap_ring = heap_ring  # device-freed blocks it keeps from reuse
        self._table: _Table | None = None
        self._retired: list[int] = []  # replaced table copies a launch in flight may read
        # (memory, size) -> buffers a finished launch gave back
        self._spare: dict[tuple[int, int], list[int]] = {}
        self.table_uploads = 0
        self.heaps: dict[Hashable, int] = {}  # heap key (context) -> its heap table
        self._origins: list[tuple[str, SiteTable]] = [("", SiteTable())]  # 0: none
        self._origin_of: dict[tuple[int, str], int] = {}
        self._uses_heap: dict[int, bool] = {}  # id(site table) -> some malloc/free site

    def _heap_for(self, sites: SiteTable, key: Hashable) -> int:
        """The heap table of ``key`` (placed now if ``sites`` calls the
        device heap), or 0 when none was placed."""
        address = self.heaps.get(key, 0)
        if address:
            return address
        uses = self._uses_heap.get(id(sites))
        if uses is None:
            uses = self._uses_heap[id(sites)] = any(s.check == "heap" for s in sites.sites)
        if not uses:
            return 0
        address = self._upload(host.heap_table(self.heap_capacity, self.heap_ring))
        self.heaps[key] = address
        return address

    def _origin(self, kernel: str, sites: SiteTable) -> int:
        """The number the launch context carries for ``kernel`` of ``sites``,
        so that a heap block made by one launch is described in a later one."""
        key = (id(sites), kernel)
        n = self._origin_of.get(key)
        if n is None:
            n = self._origin_of[key] = len(self._origins)
            self._origins.append((kernel, sites))  # keeps the site table (and its id) alive
        return n

    def heap_block(self, heap: int, tag: int) -> HeapBlock | None:
        """The block of heap tag ``tag`` in the heap table at ``heap``, read
        from the device now (its state is the latest)."""
        if not heap or not host.is_heap_tag(tag):
            return None
        if tag - layout.HEAP_TAG_BASE >= self.heap_capacity:
            return None
        data = self.memory.read(heap + host.heap_entry_offset(tag), layout.HEAP_ENTRY.size)
        return host.decode_heap_entry(data)

    def heap_site(self, origin: int, site: int) -> tuple[str, Site] | None:
        """The kernel launched and the malloc/free call site of a heap entry."""
        if not 0 < origin < len(self._origins):
            return None
        kernel, sites = self._origins[origin]
        return (kernel, sites[site]) if 0 <= site < len(sites) else None

    def heap_unrecorded(self) -> int:
        """In-kernel mallocs no heap table had room for, over every context."""
        total = 0
        for address in self.heaps.values():
            head = layout.HEAP_HEADER.unpack(self.memory.read(address, layout.HEAP_HEADER.size))
            total += int(head["unrecorded"])  # type: ignore[arg-type]
        return total

    def _upload(self, data: bytes) -> int:
        address = self.memory.alloc(max(len(data), 8))
        if data:
            self.memory.write(address, data)
        return address

    def _buffer(self, memory: DeviceMemoryPort, launch: Launch, size: int, data: bytes) -> int:
        """A buffer of ``size`` bytes of ``memory`` for ``launch`` (a spare
        one when there is one) starting with ``data``."""
        spare = self._spare.get((id(memory), size))
        address = spare.pop() if spare else memory.alloc(size)
        launch.buffers.append((memory, address, size))
        memory.write(address, data)
        return address

    def _table_for(self, records: Sequence[AllocationRecord], key: Hashable | None,
                   launch: Launch) -> tuple[int, list[AllocationRecord]]:
        """The device copy of the allocation table.  With a ``key``, a copy
        uploaded under the same key is reused; without one the copy belongs to
        this launch alone."""
        if key is not None and self._table is not None and self._table.key == key:
            return self._table.address, self._table.records
        ordered = sorted(records, key=lambda a: a.base)
        address = self._upload(host.allocation_table(ordered))
        self.table_uploads += 1
        if key is None:
            launch.buffers.append((self.memory, address, -1))  # this launch's alone
        else:
            if self._table is not None:
                self._retired.append(self._table.address)
            self._table = _Table(key, address, ordered)
        return address, ordered

    def prepare(self, sites: SiteTable, kernel: str, params: bytes,
                records: Sequence[AllocationRecord], *, table_key: Hashable | None = None,
                dynamic_shared: int = 0, heap_key: Hashable = None,
                grid: Sequence[int] | None = None,
                block: Sequence[int] | None = None) -> Launch:
        """Place one launch's records; ``params`` is the program's packed
        parameter buffer; ``heap_key``: whose device heap the launch uses (its
        context); ``grid``, ``block``: the launch's dimensions, for a kernel
        with a launch proof: ``Launch.entry`` is then its proven entry when
        they (and the rest of the launch) prove every access in bounds, the
        checked kernel otherwise.  On failure nothing stays allocated."""
        info = sites.kernels[kernel]
        launch = Launch(kernel, sites, b"", 0, entry=kernel)
        try:
            table, ordered = self._table_for(records, table_key, launch)
            origin = self._origin(kernel, sites)  # first: it keeps ``sites`` (and its id) alive
            launch.heap = self._heap_for(sites, heap_key)
            # the site tallies lie below the header, zeroed for every launch
            launch.tallies = host.tally_area_size(sites)
            launch.violations = launch.tallies + self._buffer(
                self.records, launch,
                launch.tallies + layout.violation_buffer_size(self.capacity),
                bytes(launch.tallies)
                + layout.VIOLATION_BUFFER.pack(count=0, capacity=self.capacity, dropped=0))
            context = host.context_bytes(info, params, ordered, violations=launch.violations,
                                         table=table, table_len=len(ordered),
                                         dynamic_shared=dynamic_shared, heap=launch.heap,
                                         origin=origin,
                                         heap_blocks=self._root_heap_blocks(info, params,
                                                                            ordered, launch.heap))
            context_address = self._buffer(self.memory, launch, len(context), context)
        except BaseException:
            self.release(launch)
            raise
        # a root in a device-heap block is never proven (a block can be freed
        # during the launch): the heap's blocks are not read for the proof
        proven = grid is not None and block is not None and host.proven(
            info, params, ordered, grid, block)
        launch.entry = info.proven_entry if proven else kernel
        launch.context = context
        launch.params = host.kernel_params(info, params, context_address, context)
        return launch

    def _root_heap_blocks(self, info: KernelInfo, params: bytes,
                          ordered: Sequence[AllocationRecord], heap: int) -> list[HeapBlock]:
        """The device heap's blocks when a root of the launch is in no
        allocation (a pointer an earlier launch got from in-kernel
        ``malloc``): read from the device only then, so that the kernel judges
        every root inline and never looks an address up."""
        if not heap:
            return []
        bases = [a.base for a in ordered]
        for value in host.root_values(info, params):
            if value < layout.NULL_PAGE:  # a null argument: no block is there
                continue
            i = bisect.bisect_right(bases, value) - 1
            if not (i >= 0 and value <= ordered[i].base + ordered[i].size):
                break
        else:
            return []
        head = layout.HEAP_HEADER.unpack(self.memory.read(heap, layout.HEAP_HEADER.size))
        count = min(int(head["count"]), int(head["capacity"]))  # type: ignore[arg-type]
        data = self.memory.read(heap, layout.HEAP_HEADER.size + count * layout.HEAP_ENTRY.size)
        return host.decode_heap_table(data)

    def collect(self, launch: Launch) -> tuple[list[DeviceViolation], int]:
        """The launch's violations and how many records were dropped: its
        site tallies (classified on the host, against the roots' bounds of
        its context) and its violation records; frees the launch's buffers
        (also when reading them fails)."""
        head_size = layout.VIOLATION_BUFFER.size
        try:
            data = self.records.read(launch.violations - launch.tallies,
                                     launch.tallies + head_size)
            area, head = data[:launch.tallies], data[launch.tallies:]
            count = min(int(layout.VIOLATION_BUFFER.unpack(head)["count"]),  # type: ignore[arg-type]
                        self.capacity)
            records = self.records.read(launch.violations + head_size,
                                       count * layout.VIOLATION_RECORD.size) if count else b""
        finally:
            self.release(launch)
        found, dropped = host.decode_violations(head + records, launch.sites)
        info = launch.sites.kernels[launch.kernel]
        tallied = host.decode_tallies(area, launch.sites, host.context_roots(info, launch.context))
        return tallied + found, dropped

    def release(self, launch: Launch) -> None:
        """Give a launch's buffers back without reading them (a launch that
        failed): kept for the next launch, or freed if they were its alone."""
        for memory, address, size in launch.buffers:
            if size < 0:
                memory.free(address)
            else:
                self._spare.setdefault((id(memory), size), []).append(address)
        launch.buffers.clear()

    def release_retired(self) -> None:
        """Free replaced table copies: call when no launch is in flight."""
        for address in self._retired:
            self.memory.free(address)
        self._retired.clear()

    def forget_table(self) -> None:
        """The context holding the table copy and the spare buffers is going
        away with its memory."""
        self._table = None
        self._retired.clear()
        self._spare.clear()
        self.heaps.clear()
