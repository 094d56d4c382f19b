"""Virtual memory management (``cuMemCreate``, ``cuMemRelease``,
``cuMemAddressReserve``, ``cuMemAddressFree``, ``cuMemMap``, ``cuMemUnmap``,
``cuMemSetAccess``, ``cuMemGetAccess``, ``cuMemGetAllocationGranularity``,
``cuMemGetAllocationPropertiesFromHandle``, ``cuMemRetainAllocationHandle``).

A physical allocation is bytes of the process; a reservation is a range of
arena addresses that belongs to no allocation (:meth:`DeviceMemory.reserve`).
A mapping becomes reachable when ``cuMemSetAccess`` gives the device
read-write access: then it is an allocation of the arena whose bytes are the
physical allocation's (:meth:`DeviceMemory.map_range`), so each mapping has
its own record, bounds and lifetime; before that, and after ``cuMemUnmap``,
an access to its addresses faults as on a GPU (``CUDA_ERROR_ILLEGAL_ADDRESS``).
What the CPU device cannot do is refused by name: read-only access, memory
of the host, shareable handles, compression.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda.bindings.driver import (
    CUdeviceptr,
    CUmemAccess_flags,
    CUmemAccessDesc,
    CUmemAllocationCompType,
    CUmemAllocationGranularity_flags,
    CUmemAllocationHandleType,
    CUmemAllocationProp,
    CUmemAllocationType,
    CUmemGenericAllocationHandle,
    CUmemLocation,
    CUmemLocationType,
)

from ...cudaapi import args as _args
from ..errors import InvalidAddress
from .api import api
from .state import DriverBase, E, Fail, invalid_address

GRANULARITY = 2 << 20
"""Minimum and recommended granularity of physical allocations and mappings
(a real device's 2 MiB)."""


class Physical:
    """A physical allocation (``cuMemCreate``): its bytes, alive while a
    handle or a mapping holds them."""

    def __init__(self, handle: int, size: int, device: int = 0) -> None:
        self.handle = handle
        self.size = size
        self.device = device  # prop.location.id: the device whose memory it is
        self.bytes = np.zeros(size, dtype=np.uint8)


class Mapping:
    def __init__(self, base: int, size: int, physical: Physical, offset: int) -> None:
        self.base = base
        self.size = size
        self.physical = physical
        self.offset = offset
        self.accessible = False


def _require(value: Any, cls: type, name: str) -> Any:
    if not isinstance(value, cls):
        raise TypeError(f"Argument '{name}' is not instance of type (expected {cls}, "
                        f"found {type(value)})")
    return value


class VmmCalls(DriverBase):
    def _check_prop(self, prop: Any, what: str) -> None:
        _require(prop, CUmemAllocationProp, "prop")
        if prop.type != CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: allocation type {prop.type!r}")
        if prop.location.type != CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       f"{what}: physical memory at {prop.location.type!r}: the CPU device "
                       "maps device memory only (HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)")
        self._check_device(int(prop.location.id))
        if int(prop.requestedHandleTypes) != int(CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE):
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       f"{what}: shareable handles: the CPU device shares no memory between "
                       "processes")
        if prop.allocFlags.compressionType != CUmemAllocationCompType.CU_MEM_ALLOCATION_COMP_NONE:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED, f"{what}: compressible memory "
                       "(GENERIC_COMPRESSION_SUPPORTED is 0)")

    @staticmethod
    def _granular(value: int, what: str) -> None:
        if value <= 0 or value % GRANULARITY:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what} {value} is not a positive multiple of the granularity "
                       f"{GRANULARITY}")

    def _physical(self, handle: Any) -> Physical:
        h = _args.handle_value(handle, CUmemGenericAllocationHandle)
        return self._lookup(h, Physical, E.CUDA_ERROR_INVALID_VALUE, "allocation handle")

    @api(1)
    def cuMemGetAllocationGranularity(self, prop: Any, option: Any) -> int:
        _args.require_enum(option, CUmemAllocationGranularity_flags, "option")
        self._require_init()
        self._check_prop(prop, "cuMemGetAllocationGranularity")
        return GRANULARITY

    @api(1)
    def cuMemCreate(self, size: Any, prop: Any, flags: Any) -> CUmemGenericAllocationHandle:
        n = _args.c_int(size, "size_t", "size")
        f = _args.c_int(flags, "unsigned long long", "flags")
        self._current()
        self._check_prop(prop, "cuMemCreate")
        if f != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuMemCreate flags must be 0")
        self._granular(n, "cuMemCreate size")
        try:
            physical = Physical(0, n, int(prop.location.id))
        except MemoryError as e:
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY, f"cuMemCreate: {e}", e) from None
        physical.handle = self._new_handle(physical)
        return CUmemGenericAllocationHandle(physical.handle)

    @api(0)
    def cuMemRelease(self, handle: Any) -> None:
        """The bytes stay while a mapping uses them, as on a real device."""
        physical = self._physical(handle)
        self._handles.pop(physical.handle, None)

    @api(1)
    def cuMemGetAllocationPropertiesFromHandle(self, handle: Any) -> CUmemAllocationProp:
        self._physical(handle)
        prop = CUmemAllocationProp()
        prop.type = CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = 0
        return prop

    @api(1)
    def cuMemRetainAllocationHandle(self, addr: Any) -> CUmemGenericAllocationHandle:
        mapping = self._mapping_at(_args.host_pointer(addr).address, "cuMemRetainAllocationHandle")
        self._handles[mapping.physical.handle] = mapping.physical
        return CUmemGenericAllocationHandle(mapping.physical.handle)

    # -- address ranges ----------------------------------------------------------

    @api(1)
    def cuMemAddressReserve(self, size: Any, alignment: Any, addr: Any,
                            flags: Any) -> CUdeviceptr:
        """The address hint ``addr`` is not followed (a real driver may ignore it too)."""
        n = _args.c_int(size, "size_t", "size")
        align = _args.c_int(alignment, "size_t", "alignment") or GRANULARITY
        _args.handle_value(addr, CUdeviceptr)
        f = _args.c_int(flags, "unsigned long long", "flags")
        self._current()
        self._granular(n, "cuMemAddressReserve size")
        if f != 0 or align & (align - 1):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       "cuMemAddressReserve: flags must be 0, the alignment a power of two")
        base = self._memory.reserve(n, max(align, GRANULARITY))
        self._reservations[base] = n
        return CUdeviceptr(base)

    @api(0)
    def cuMemAddressFree(self, ptr: Any, size: Any) -> None:
        base = _args.handle_value(ptr, CUdeviceptr)
        n = _args.c_int(size, "size_t", "size")
        self._current()
        if self._reservations.get(base) != n:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"cuMemAddressFree: {base:#x}+{n} is not a reserved range")
        if any(base <= m.base < base + n for m in self._mappings.values()):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"cuMemAddressFree: {base:#x}+{n} still has mappings (cuMemUnmap them)")
        del self._reservations[base]  # its addresses are never handed out again

    # -- mappings ------------------------------------------------------------------

    def _mapping_at(self, address: int, what: str) -> Mapping:
        for m in self._mappings.values():
            if m.base <= address < m.base + m.size:
                return m
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: {address:#x} is not mapped")

    def _mappings_in(self, base: int, size: int, what: str) -> list[Mapping]:
        """The mappings making up ``[base, +size)`` exactly, in address order."""
        inside = sorted((m for m in self._mappings.values()
                         if m.base < base + size and base < m.base + m.size),
                        key=lambda m: m.base)
        at = base
        for m in inside:
            if m.base != at or m.base + m.size > base + size:
                break
            at += m.size
        if not inside or at != base + size:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: {base:#x}+{size} is not made of whole mappings")
        return inside

    @api(0)
    def cuMemMap(self, ptr: Any, size: Any, offset: Any, handle: Any, flags: Any) -> None:
        base = _args.handle_value(ptr, CUdeviceptr)
        n = _args.c_int(size, "size_t", "size")
        off = _args.c_int(offset, "size_t", "offset")
        f = _args.c_int(flags, "unsigned long long", "flags")
        self._current()
        physical = self._physical(handle)
        if f != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuMemMap flags must be 0")
        self._granular(n, "cuMemMap size")
        if base % GRANULARITY or off % GRANULARITY or off + n > physical.size:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"cuMemMap: {n} bytes at offset {off} of a {physical.size}-byte "
                       f"allocation, to {base:#x}")
        if not any(r <= base and base + n <= r + rn for r, rn in self._reservations.items()):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"cuMemMap: {base:#x}+{n} is not inside one reserved range")
        if any(m.base < base + n and base < m.base + m.size for m in self._mappings.values()):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"cuMemMap: {base:#x}+{n} is already mapped")
        self._mappings[base] = Mapping(base, n, physical, off)

    @api(0)
    def cuMemUnmap(self, ptr: Any, size: Any) -> None:
        base = _args.handle_value(ptr, CUdeviceptr)
        n = _args.c_int(size, "size_t", "size")
        self._current()
        for m in self._mappings_in(base, n, "cuMemUnmap"):
            if m.accessible:
                self._memory.unmap_range(m.base, m.size)
            del self._mappings[m.base]

    @api(0)
    def cuMemSetAccess(self, ptr: Any, size: Any, desc: Any, count: Any) -> None:
        base = _args.handle_value(ptr, CUdeviceptr)
        n = _args.c_int(size, "size_t", "size")
        k = _args.c_int(count, "size_t", "count")
        descs = list(desc or [])
        for d in descs:
            _require(d, CUmemAccessDesc, "desc")
        self._current()
        if k != len(descs) or k == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"cuMemSetAccess: count {k}, {len(descs)} "
                       "descriptors")
        access = None
        for d in descs:
            if d.location.type != CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"cuMemSetAccess: {d.location.type!r}")
            self._check_device(int(d.location.id))
            access = d.flags
        if access == CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READ:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "cuMemSetAccess: read-only mappings (CU_MEM_ACCESS_FLAGS_PROT_READ) are "
                       "not enforced by the CPU device")
        if access not in (CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                          CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"cuMemSetAccess: flags {access!r}")
        readwrite = access == CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        for m in self._mappings_in(base, n, "cuMemSetAccess"):
            if readwrite and not m.accessible:
                view = m.physical.bytes[m.offset:m.offset + m.size]
                try:
                    self._memory.map_range(m.base, view)
                except InvalidAddress as e:
                    raise invalid_address(e, "cuMemSetAccess") from None
            elif not readwrite and m.accessible:
                self._memory.unmap_range(m.base, m.size)
            m.accessible = readwrite

    @api(1)
    def cuMemGetAccess(self, location: Any, ptr: Any) -> int:
        _require(location, CUmemLocation, "location")
        address = _args.handle_value(ptr, CUdeviceptr)
        self._current()
        self._check_device(int(location.id))
        m = self._mapping_at(address, "cuMemGetAccess")
        flags = (CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE if m.accessible
                 else CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE)
        return int(flags)
