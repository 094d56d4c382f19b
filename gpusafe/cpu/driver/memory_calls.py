"""Device and pinned host allocations (``cuMemAlloc*``, ``cuMemFree*``,
``cuMemAllocHost``, ``cuMemHostAlloc``, ``cuMemFreeHost``, ``cuMemGetInfo``,
``cuMemGetAddressRange``).  A device allocation is one of the device
memory's; it belongs to the context that made it and goes away with it.
Pinned host memory is page-aligned host memory the driver keeps alive until
it is freed (the CPU device cannot map it into its own address space).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda.bindings.driver import CUdeviceptr, CUstream

from ...cudaapi import args as _args
from ..errors import InvalidAddress, OutOfMemory
from .api import api
from .state import Context, DriverBase, E, Fail, invalid_address

_HOSTALLOC_DEVICEMAP = 0x02
_HOSTALLOC_MASK = 0x07


class MemoryCalls(DriverBase):
    def _alloc(self, ctx: Context, size: int) -> int:
        if size == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
        mem = self._memory
        if size > mem.capacity - mem.used:
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY,
                       f"{size} bytes requested, {mem.capacity - mem.used} of {mem.capacity} free")
        try:
            addr = mem.alloc(size)
        except (MemoryError, OutOfMemory) as e:
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY, str(e), e) from None
        ctx.allocations.add(addr)
        self._alloc_owner[addr] = ctx
        return addr

    def _free(self, address: int) -> None:
        try:
            self._memory.free(address)
        except InvalidAddress as e:
            raise invalid_address(e, f"cuMemFree({address:#x})") from None
        owner = self._alloc_owner.pop(address, None)
        if owner is not None:
            owner.allocations.discard(address)

    @api(1)
    def cuMemAlloc(self, bytesize: Any) -> CUdeviceptr:
        size = _args.c_int(bytesize, "size_t", "bytesize")
        ctx = self._current()
        return CUdeviceptr(self._alloc(ctx, size))

    @api(0)
    def cuMemFree(self, dptr: Any) -> None:
        addr = _args.handle_value(dptr, CUdeviceptr)
        self._current()
        self._free(addr)

    @api(1)
    def cuMemAllocAsync(self, bytesize: Any, hStream: Any) -> CUdeviceptr:
        size = _args.c_int(bytesize, "size_t", "bytesize")
        hs = _args.handle_value(hStream, CUstream)
        ctx = self._current()
        self._stream(hs, ctx)
        return CUdeviceptr(self._alloc(ctx, size))

    @api(0)
    def cuMemFreeAsync(self, dptr: Any, hStream: Any) -> None:
        addr = _args.handle_value(dptr, CUdeviceptr)
        hs = _args.handle_value(hStream, CUstream)
        ctx = self._current()
        self._stream(hs, ctx)
        self._free(addr)

    @api(2)
    def cuMemGetInfo(self) -> tuple[int, int]:
        self._current()
        mem = self._memory
        return int(mem.capacity - mem.used), int(mem.capacity)

    @api(2)
    def cuMemGetAddressRange(self, dptr: Any) -> tuple[CUdeviceptr, int]:
        addr = _args.handle_value(dptr, CUdeviceptr)
        self._current()
        a = self._memory.find(addr)
        if a is None or not a.live:
            raise Fail(E.CUDA_ERROR_NOT_FOUND, f"{addr:#x} is not inside a live allocation")
        return CUdeviceptr(a.base), int(a.size)

    # -- pinned host memory ------------------------------------------------------

    def _host_alloc(self, ctx: Context, size: int, flags: int) -> int:
        if flags & ~_HOSTALLOC_MASK:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown cuMemHostAlloc flags {flags:#x}")
        if flags & _HOSTALLOC_DEVICEMAP:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "CU_MEMHOSTALLOC_DEVICEMAP: the CPU device cannot map host memory into "
                       "its address space (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY is 0)")
        if size == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
        try:
            raw = np.zeros(size + 4096, dtype=np.uint8)
        except (MemoryError, ValueError) as e:  # ValueError: more than numpy can address
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY, str(e), e) from None
        offset = (-raw.ctypes.data) % 4096  # page-aligned, as pinned memory is
        buf = raw[offset: offset + size]
        addr = int(buf.ctypes.data)
        self._host_allocs[addr] = (raw, ctx)
        ctx.host_allocations.add(addr)
        return addr

    @api(1)
    def cuMemAllocHost(self, bytesize: Any) -> int:
        size = _args.c_int(bytesize, "size_t", "bytesize")
        return self._host_alloc(self._current(), size, 0)

    @api(1)
    def cuMemHostAlloc(self, bytesize: Any, Flags: Any) -> int:
        size = _args.c_int(bytesize, "size_t", "bytesize")
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        return self._host_alloc(self._current(), size, flags)

    @api(0)
    def cuMemFreeHost(self, p: Any) -> None:
        hp = _args.host_pointer(p)
        self._current()
        entry = self._host_allocs.pop(hp.address, None)
        if entry is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{hp.address:#x} was not returned by cuMemAllocHost/cuMemHostAlloc")
        entry[1].host_allocations.discard(hp.address)
