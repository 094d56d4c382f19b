"""Device and pinned host allocations (``cuMemAlloc*``, ``cuMemFree*``,
``cuMemAllocHost``, ``cuMemHostAlloc``, ``cuMemFreeHost``, ``cuMemGetInfo``,
``cuMemGetAddressRange``).  A device allocation is one of the device
memory's; it belongs to the context that made it and goes away with it.
Pinned host memory is page-aligned host memory mapped at an arena address
(:mod:`gpusafe.cpu.host_memory`), so kernels reach it through the pointer
the host uses: every pinned allocation is mapped, as under unified
addressing on a real device.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import CUdeviceptr

from ...cudaapi import args as _args
from ..errors import InvalidAddress, OutOfMemory
from ..host_memory import Backing, FreshPages
from .api import api
from .state import Context, DriverBase, E, Fail, HostAllocation, invalid_address

_HOSTALLOC_MASK = 0x07  # PORTABLE | DEVICEMAP | WRITECOMBINED


class MemoryCalls(DriverBase):
    def _alloc(self, ctx: Context, size: int, host_visible: bool = False,
               device: int | None = None) -> int:
        """A device allocation of ``ctx``, memory of ``device`` (None: the
        context's); ``host_visible``: its bytes are host pages at the same
        address (managed memory, which every device reaches)."""
        if size == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
        mem = self._memory
        if size > mem.capacity - mem.used:
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY,
                       f"{size} bytes requested, {mem.capacity - mem.used} of {mem.capacity} free")
        if host_visible:
            addr = self._alloc_visible(size, "managed memory")
        else:
            try:
                addr = mem.alloc(size)
            except (MemoryError, OutOfMemory) as e:
                raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY, str(e), e) from None
            if self.devices > 1:
                mem.set_device(addr, ctx.device if device is None else device)
        ctx.allocations.add(addr)
        self._alloc_owner[addr] = ctx
        return addr

    def _free(self, address: int) -> None:
        try:
            freed = self._memory.free(address)
        except InvalidAddress as e:
            raise invalid_address(e, f"cuMemFree({address:#x})") from None
        self._advice.pop(address, None)
        pool = self._pool_of.pop(address, None)
        if pool is not None:
            pool.used -= freed.size
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
        """Pinned memory is mapped whatever the flags (unified addressing, as
        on a real device): one address for the host and for kernels."""
        if flags & ~_HOSTALLOC_MASK:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown cuMemHostAlloc flags {flags:#x}")
        if size == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
        addr = self._alloc_visible(size, "pinned host memory")
        self._host_allocs[addr] = HostAllocation(addr, addr, size, flags, ctx)
        ctx.host_allocations.add(addr)
        return addr

    def _alloc_visible(self, size: int, what: str, backing: Backing | None = None) -> int:
        """An arena allocation whose bytes the host reaches (fresh pages unless
        ``backing`` says otherwise)."""
        try:
            return self._memory.alloc(size, backing=backing or FreshPages())
        except (MemoryError, OutOfMemory, OSError, ValueError) as e:  # ValueError: too large
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY, f"{what}: {e}", e) from None

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
        entry.ctx.host_allocations.discard(hp.address)
        self._memory.free(entry.device)
