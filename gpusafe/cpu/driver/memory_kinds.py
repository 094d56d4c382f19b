"""Memory that host and device share: managed memory (``cuMemAllocManaged``,
``cuStreamAttachMemAsync``, ``cuMemPrefetchAsync``, ``cuMemAdvise``) and
registered host memory (``cuMemHostRegister``, ``cuMemHostUnregister``,
``cuMemHostGetDevicePointer``, ``cuMemHostGetFlags``).

Managed memory is device memory whose pages are host pages at the same
address (:mod:`gpusafe.cpu.host_memory`): a kernel and the host use one
pointer, and execution being synchronous, the host sees every write of a
finished kernel (``CONCURRENT_MANAGED_ACCESS`` is 1).  There is one memory,
so attaching, prefetching and advice have nothing to move: they check their
arguments as the real driver does (the range must be managed memory, the
stream and location valid), and advice and prefetches are kept page by page
(:mod:`.advice`) for ``cuMemRangeGetAttribute``.

Registered memory keeps its host address; its device pointer is an arena
allocation that is a window onto the same bytes (so
``CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM`` is 0: kernels take the pointer
``cuMemHostGetDevicePointer`` gives).  After ``cuMemHostUnregister`` the
device pointer is freed memory; the program's bytes are no longer reached
through it.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CUdeviceptr,
    CUmem_advise,
    CUmem_range_attribute,
    CUmemLocation,
    CUmemLocationType,
    CUstream,
)

from ...cudaapi import args as _args
from ..host_memory import HostBytes
from .advice import CPU, INVALID, RangeAdvice
from .api import api
from .memory_calls import MemoryCalls
from .state import E, Fail, HostAllocation

_ATTACH_GLOBAL, _ATTACH_HOST, _ATTACH_SINGLE = 0x1, 0x2, 0x4
_REGISTER_PORTABLE, _REGISTER_DEVICEMAP, _REGISTER_IOMEMORY, _REGISTER_READ_ONLY = 1, 2, 4, 8


class MemoryKindCalls(MemoryCalls):
    # -- managed memory -------------------------------------------------------------

    @api(1)
    def cuMemAllocManaged(self, bytesize: Any, flags: Any) -> CUdeviceptr:
        size = _args.c_int(bytesize, "size_t", "bytesize")
        f = _args.c_int(flags, "unsigned int", "flags")
        ctx = self._current()
        if f not in (_ATTACH_GLOBAL, _ATTACH_HOST):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"cuMemAllocManaged flags {f:#x}: CU_MEM_ATTACH_GLOBAL or _HOST")
        return CUdeviceptr(self._alloc(ctx, size, host_visible=True))

    def _managed_range(self, address: int, count: int, what: str) -> RangeAdvice:
        """``[address, +count)`` must lie in one live managed allocation: what
        was said about it."""
        mem = self._memory
        a = mem.find(address)
        if a is None or not a.live or a.base not in self._alloc_owner \
                or not mem.host_visible(a.base):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: {address:#x} is not in managed memory")
        if count <= 0 or address + count > a.end:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: {count} bytes at {address:#x} leave the managed allocation "
                       f"{a.base:#x}+{a.size}")
        if a.base not in self._advice:
            self._advice[a.base] = RangeAdvice(a.base, a.size)
        return self._advice[a.base]

    @staticmethod
    def _location(location: Any, what: str) -> int:
        """The device id of ``location``: 0, or ``CU_DEVICE_CPU`` for the host."""
        if not isinstance(location, CUmemLocation):
            raise TypeError(f"Argument 'location' is not instance of type (expected "
                            f"<class 'cuda.bindings.driver.CUmemLocation'>, found "
                            f"{type(location)})")
        T = CUmemLocationType
        kind = location.type
        if kind == T.CU_MEM_LOCATION_TYPE_DEVICE:
            if int(location.id) != 0:
                raise Fail(E.CUDA_ERROR_INVALID_DEVICE,
                           f"{what}: device {int(location.id)} does not exist")
            return 0
        if kind not in (T.CU_MEM_LOCATION_TYPE_HOST, T.CU_MEM_LOCATION_TYPE_HOST_NUMA,
                        T.CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: location type {kind!r}")
        return CPU

    @api(0)
    def cuStreamAttachMemAsync(self, hStream: Any, dptr: Any, length: Any, flags: Any) -> None:
        hs = _args.handle_value(hStream, CUstream)
        addr = _args.handle_value(dptr, CUdeviceptr)
        n = _args.c_int(length, "size_t", "length")
        f = _args.c_int(flags, "unsigned int", "flags")
        ctx = self._current()
        self._stream(hs, ctx)
        if f not in (_ATTACH_GLOBAL, _ATTACH_HOST, _ATTACH_SINGLE):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"cuStreamAttachMemAsync flags {f:#x}")
        a = self._memory.find(addr)
        self._managed_range(addr, max(n, 1), "cuStreamAttachMemAsync")
        if a is not None and (addr != a.base or n not in (0, a.size)):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       "cuStreamAttachMemAsync: attach the whole allocation (length 0 or "
                       "its size, from its base)")

    @api(0)
    def cuMemPrefetchAsync(self, devPtr: Any, count: Any, location: Any, flags: Any,
                           hStream: Any) -> None:
        addr = _args.handle_value(devPtr, CUdeviceptr)
        n = _args.c_int(count, "size_t", "count")
        f = _args.c_int(flags, "unsigned int", "flags")
        hs = _args.handle_value(hStream, CUstream)
        where = self._location(location, "cuMemPrefetchAsync")
        ctx = self._current()
        self._stream(hs, ctx)
        if f != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuMemPrefetchAsync flags must be 0")
        self._managed_range(addr, n, "cuMemPrefetchAsync").prefetched(addr, n, where)

    @api(0)
    def cuMemAdvise(self, devPtr: Any, count: Any, advice: Any, location: Any) -> None:
        addr = _args.handle_value(devPtr, CUdeviceptr)
        n = _args.c_int(count, "size_t", "count")
        _args.require_enum(advice, CUmem_advise, "advice")
        where = self._location(location, "cuMemAdvise")
        self._current()
        name = advice.name.removeprefix("CU_MEM_ADVISE_")
        self._managed_range(addr, n, "cuMemAdvise").advise(addr, n, name, where)

    @api(1)
    def cuMemRangeGetAttribute(self, dataSize: Any, attribute: Any, devPtr: Any,
                               count: Any) -> Any:
        """The four attributes cuda-bindings' getter converts; the newer
        location type/id pairs raise its ``TypeError``."""
        size = _args.c_int(dataSize, "size_t", "dataSize")
        _args.require_enum(attribute, CUmem_range_attribute, "attribute")
        addr = _args.handle_value(devPtr, CUdeviceptr)
        n = _args.c_int(count, "size_t", "count")
        M = CUmem_range_attribute
        if attribute not in (M.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
                             M.CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                             M.CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
                             M.CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION):
            raise TypeError(f"Unsupported attribute: {attribute.name}")
        self._current()
        said = self._managed_range(addr, n, "cuMemRangeGetAttribute")
        if attribute == M.CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY:
            if size == 0 or size % 4:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE, "dataSize must be a multiple of 4")
            ids = said.accessors(addr, n)[: size // 4]
            return ids + [INVALID] * (size // 4 - len(ids))
        if size != 4:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"dataSize must be 4 for {attribute.name}")
        if attribute == M.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
            return said.is_read_mostly(addr, n)
        if attribute == M.CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
            return said.preferred_location(addr, n)
        return said.last_prefetch_location(addr, n)

    # -- registered host memory -------------------------------------------------------

    @api(0)
    def cuMemHostRegister(self, p: Any, bytesize: Any, Flags: Any) -> None:
        hp = _args.host_pointer(p)
        size = _args.c_int(bytesize, "size_t", "bytesize")
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        ctx = self._current()
        known = _REGISTER_PORTABLE | _REGISTER_DEVICEMAP | _REGISTER_IOMEMORY | _REGISTER_READ_ONLY
        if flags & ~known:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown cuMemHostRegister flags {flags:#x}")
        if flags & _REGISTER_IOMEMORY:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "CU_MEMHOSTREGISTER_IOMEMORY: the CPU device has no I/O memory to map")
        if flags & _REGISTER_READ_ONLY:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "CU_MEMHOSTREGISTER_READ_ONLY: the CPU device cannot make a mapping "
                       "read-only (READ_ONLY_HOST_REGISTER_SUPPORTED is 0)")
        if hp.address == 0 or size == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuMemHostRegister: NULL pointer or 0 bytes")
        if hp.nbytes is not None and hp.nbytes < size:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"cuMemHostRegister: the buffer holds {hp.nbytes} bytes, not {size}")
        lo, hi = hp.address, hp.address + size
        if self._memory.host_visible(lo) or any(
                r.host < hi and lo < r.host + r.size for r in self._registered.values()):
            raise Fail(E.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                       f"{lo:#x}+{size} overlaps memory that is already registered or pinned")
        device = self._alloc_visible(size, "registered host memory",
                                     HostBytes(hp.address, hp.keep))
        self._registered[lo] = HostAllocation(lo, device, size, flags, ctx)
        ctx.host_allocations.add(lo)

    @api(0)
    def cuMemHostUnregister(self, p: Any) -> None:
        hp = _args.host_pointer(p)
        self._current()
        record = self._registered.pop(hp.address, None)
        if record is None:
            raise Fail(E.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                       f"{hp.address:#x} is not the base of a registered range")
        record.ctx.host_allocations.discard(hp.address)
        self._memory.free(record.device)

    def _host_record(self, address: int, what: str) -> HostAllocation:
        """The pinned or registered range holding host address ``address``."""
        for table in (self._host_allocs, self._registered):
            for r in table.values():
                if r.host <= address < r.host + r.size:
                    return r
        raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                   f"{what}: {address:#x} is not pinned or registered host memory")

    @api(1)
    def cuMemHostGetDevicePointer(self, p: Any, Flags: Any) -> CUdeviceptr:
        hp = _args.host_pointer(p)
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        self._current()
        if flags != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuMemHostGetDevicePointer flags must be 0")
        record = self._host_record(hp.address, "cuMemHostGetDevicePointer")
        return CUdeviceptr(record.device + (hp.address - record.host))

    @api(1)
    def cuMemHostGetFlags(self, p: Any) -> int:
        hp = _args.host_pointer(p)
        self._current()
        record = self._host_record(hp.address, "cuMemHostGetFlags")
        # pinned memory is mapped whatever it was asked for (unified addressing)
        return record.flags | _REGISTER_DEVICEMAP
