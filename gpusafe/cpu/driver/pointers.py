"""What a pointer is (``cuPointerGetAttribute``, ``cuPointerGetAttributes``):
device memory, managed memory, pinned or registered host memory, a pool
block or a VMM mapping, with the range it belongs to.  Values have the types
cuda-python gives them (a ``CUcontext``, a ``CUdeviceptr``, an int, a bool);
an address the device does not know is ``CUDA_ERROR_INVALID_VALUE`` for one
attribute and default values for ``cuPointerGetAttributes``, as on a real
driver.  Attributes newer than cuda-bindings' own getter (mapping size and
base, memory block id, decompression) raise its ``TypeError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cuda.bindings.driver import (
    CUcontext,
    CUdeviceptr,
    CUmemoryPool,
    CUmemorytype,
    CUpointer_attribute,
)

from ...cudaapi import args as _args
from .api import api
from .state import Context, DriverBase, E, Fail, MemPool

_P = CUpointer_attribute
_READWRITE = 3  # CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE


@dataclass(frozen=True)
class PointerInfo:
    memory_type: CUmemorytype
    managed: bool
    context: Context | None
    base: int  # the device range it belongs to
    size: int
    device_pointer: int
    host_pointer: int | None
    buffer_id: int  # the arena allocation's tag: never reused
    pool: MemPool | None


_GETTER_TYPES = {
    _P.CU_POINTER_ATTRIBUTE_CONTEXT, _P.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    _P.CU_POINTER_ATTRIBUTE_DEVICE_POINTER, _P.CU_POINTER_ATTRIBUTE_HOST_POINTER,
    _P.CU_POINTER_ATTRIBUTE_P2P_TOKENS, _P.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
    _P.CU_POINTER_ATTRIBUTE_BUFFER_ID, _P.CU_POINTER_ATTRIBUTE_IS_MANAGED,
    _P.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, _P.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
    _P.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, _P.CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    _P.CU_POINTER_ATTRIBUTE_MAPPED, _P.CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
    _P.CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, _P.CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
    _P.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
}
"""The attributes cuda-bindings' getter converts (``_HelperCUpointer_attribute``)."""


class PointerCalls(DriverBase):
    def _pointer_info(self, address: int) -> PointerInfo | None:
        for table in (self._host_allocs, self._registered):
            for r in table.values():
                if r.host <= address < r.host + r.size:
                    off = address - r.host
                    return PointerInfo(CUmemorytype.CU_MEMORYTYPE_HOST, False, r.ctx, r.device,
                                       r.size, r.device + off, address, self._tag(r.device), None)
        mem = self._memory
        a = mem.find(address)
        if a is None or not a.live:
            return None
        for r in self._registered.values():  # the device side of registered memory
            if r.device == a.base:
                off = address - r.device
                return PointerInfo(CUmemorytype.CU_MEMORYTYPE_HOST, False, r.ctx, r.device,
                                   r.size, address, r.host + off, a.tag, None)
        owner = self._alloc_owner.get(a.base)
        if owner is None and a.base not in self._mappings:
            return None  # gpusafe's own records, module variables: not the program's pointers
        managed = owner is not None and mem.host_visible(a.base)
        return PointerInfo(CUmemorytype.CU_MEMORYTYPE_DEVICE, managed, owner, a.base, a.size,
                           address, address if managed else None, a.tag,
                           self._pool_of.get(a.base))

    def _ordinal(self, info: PointerInfo) -> int:
        """The device the memory belongs to: a pool block's pool's, a mapping's
        location's, else its context's (host memory: the context's too)."""
        if info.pool is not None:
            return info.pool.device
        mapping = self._mappings.get(info.base)
        if mapping is not None:
            return int(mapping.physical.device)
        ctx = info.context or self._current(check=False)
        return ctx.device

    def _tag(self, device: int) -> int:
        """The never-reused id of the arena allocation at ``device`` (BUFFER_ID)."""
        a = self._memory.find(device)
        return a.tag if a is not None else 0

    def _attribute(self, attribute: Any, info: PointerInfo) -> Any:
        A = _P
        if attribute == A.CU_POINTER_ATTRIBUTE_CONTEXT:
            ctx = info.context or self._current(check=False)
            return CUcontext(ctx.handle)
        if attribute == A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            return int(info.memory_type)
        if attribute == A.CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            return CUdeviceptr(info.device_pointer)
        if attribute == A.CU_POINTER_ATTRIBUTE_HOST_POINTER:
            if info.host_pointer is None:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE, "device memory has no host pointer")
            return info.host_pointer
        if attribute == A.CU_POINTER_ATTRIBUTE_P2P_TOKENS:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED, "P2P tokens (GPUDirect RDMA): none on the "
                       "CPU device")
        if attribute == A.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
            if info.pool is None:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE, "the pointer is not a pool block")
            return CUmemoryPool(info.pool.handle)
        values = {
            A.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: False,
            A.CU_POINTER_ATTRIBUTE_BUFFER_ID: info.buffer_id,
            A.CU_POINTER_ATTRIBUTE_IS_MANAGED: info.managed,
            A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: self._ordinal(info),
            A.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: False,
            A.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: CUdeviceptr(info.base),
            A.CU_POINTER_ATTRIBUTE_RANGE_SIZE: info.size,
            A.CU_POINTER_ATTRIBUTE_MAPPED: True,
            A.CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: 0,
            A.CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: 0,
            A.CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: _READWRITE,
        }
        return values[attribute]

    @staticmethod
    def _check_attribute(attribute: Any) -> None:
        _args.require_enum(attribute, CUpointer_attribute, "attribute")
        if attribute not in _GETTER_TYPES:
            raise TypeError(f"Unsupported attribute: {attribute.name}")

    @api(1)
    def cuPointerGetAttribute(self, attribute: Any, ptr: Any) -> Any:
        self._check_attribute(attribute)
        address = _args.handle_value(ptr, CUdeviceptr)
        self._current()
        info = self._pointer_info(address)
        if info is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{address:#x} is not memory of the CPU device")
        return self._attribute(attribute, info)

    @api(1)
    def cuPointerGetAttributes(self, numAttributes: Any, attributes: Any, ptr: Any) -> list:
        n = _args.c_int(numAttributes, "unsigned int", "numAttributes")
        wanted = list(attributes or [])
        for a in wanted:
            self._check_attribute(a)
        address = _args.handle_value(ptr, CUdeviceptr)
        self._current()
        if n != len(wanted):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"numAttributes is {n}, {len(wanted)} attributes given")
        info = self._pointer_info(address)
        out = []
        for a in wanted:
            if info is None:  # an unknown pointer: default values, no error
                out.append(_default(a))
                continue
            try:
                out.append(self._attribute(a, info))
            except Fail:
                out.append(_default(a))
        return out


def _default(attribute: Any) -> Any:
    """The "NULL value" cuPointerGetAttributes gives an attribute it cannot answer."""
    A = _P
    if attribute == A.CU_POINTER_ATTRIBUTE_CONTEXT:
        return CUcontext(0)
    if attribute in (A.CU_POINTER_ATTRIBUTE_DEVICE_POINTER, A.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR):
        return CUdeviceptr(0)
    if attribute == A.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        return CUmemoryPool(0)
    if attribute in (A.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, A.CU_POINTER_ATTRIBUTE_IS_MANAGED,
                     A.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                     A.CU_POINTER_ATTRIBUTE_MAPPED):
        return False
    return 0
