"""Stream-ordered allocation and memory pools (``cuMemAllocAsync``,
``cuMemFreeAsync``, ``cuMemAllocFromPoolAsync``, ``cuMemPool*``,
``cuDevice{Get,Set}MemPool``, ``cuDeviceGetDefaultMemPool``).

Execution is synchronous, so a stream-ordered allocation or free has
happened when its call returns, and a block is device memory like any other:
used after its stream-ordered free it is freed memory.  A pool keeps no
freed block for reuse (the arena never hands an address out twice), so
``RESERVED_MEM_*`` equals ``USED_MEM_*``, trimming has nothing to give back,
and the reuse attributes are kept and reported but change nothing.  Each
device has its default pool; a pool's blocks are memory of its device,
whichever context allocates them.  A pool of host memory
(``HOST_MEMORY_POOLS_SUPPORTED`` is 0), one with IPC handle types
(``MEMPOOL_SUPPORTED_HANDLE_TYPES`` is 0) and pool access from other devices
are refused as not supported.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CUdeviceptr,
    CUmemAllocationHandleType,
    CUmemAllocationType,
    CUmemLocationType,
    CUmemoryPool,
    CUmemPool_attribute,
    CUmemPoolProps,
    CUstream,
    cuuint64_t,
)
from cuda.bindings.runtime import cudaMemPool_t

from ...cudaapi import args as _args
from .api import api
from .memory_calls import MemoryCalls
from .state import E, Fail, MemPool, device_ordinal

_A = CUmemPool_attribute


def _pool_handle(pool: Any) -> int:
    if isinstance(pool, (CUmemoryPool, cudaMemPool_t)):
        return int(pool)
    return _args.handle_value(pool, CUmemoryPool)


class PoolCalls(MemoryCalls):
    def _default(self, device: int) -> MemPool:
        pool = self._default_pools.get(device)
        if pool is None:
            pool = self._default_pools[device] = MemPool(0, default=True, max_size=0,
                                                         device=device)
            pool.handle = self._new_handle(pool)
        return pool

    def _current_pool(self, device: int) -> MemPool:
        return self._current_pools.get(device) or self._default(device)

    def _pool(self, pool: Any) -> MemPool:
        h = _pool_handle(pool)
        obj = self._handles.get(h)
        if not isinstance(obj, MemPool) or not obj.alive:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"memory pool {h:#x} is not a valid pool")
        return obj

    def _device(self, dev: Any) -> int:
        d = device_ordinal(dev)
        self._require_init()
        self._check_device(d)
        return d

    def _pool_alloc(self, pool: MemPool, size: int, hStream: Any) -> CUdeviceptr:
        hs = _args.handle_value(hStream, CUstream)
        ctx = self._current()
        self._stream(hs, ctx)
        if pool.max_size and pool.used + size > pool.max_size:
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY,
                       f"the pool holds at most {pool.max_size} bytes; {pool.used} are in use")
        addr = self._alloc(ctx, size, device=pool.device)
        self._pool_of[addr] = pool
        pool.took(size)
        return CUdeviceptr(addr)

    # -- stream-ordered allocation --------------------------------------------------

    @api(1)
    def cuMemAllocAsync(self, bytesize: Any, hStream: Any) -> CUdeviceptr:
        size = _args.c_int(bytesize, "size_t", "bytesize")
        device = self._current().device
        return self._pool_alloc(self._current_pool(device), size, hStream)

    @api(1)
    def cuMemAllocFromPoolAsync(self, bytesize: Any, pool: Any, hStream: Any) -> CUdeviceptr:
        size = _args.c_int(bytesize, "size_t", "bytesize")
        return self._pool_alloc(self._pool(pool), size, hStream)

    @api(0)
    def cuMemFreeAsync(self, dptr: Any, hStream: Any) -> None:
        addr = _args.handle_value(dptr, CUdeviceptr)
        hs = _args.handle_value(hStream, CUstream)
        ctx = self._current()
        self._stream(hs, ctx)
        self._free(addr)

    # -- the device's pools ------------------------------------------------------

    @api(1)
    def cuDeviceGetDefaultMemPool(self, dev: Any) -> CUmemoryPool:
        return CUmemoryPool(self._default(self._device(dev)).handle)

    @api(1)
    def cuDeviceGetMemPool(self, dev: Any) -> CUmemoryPool:
        return CUmemoryPool(self._current_pool(self._device(dev)).handle)

    @api(0)
    def cuDeviceSetMemPool(self, dev: Any, pool: Any) -> None:
        d = self._device(dev)
        p = self._pool(pool)
        if p.device != d:
            raise Fail(E.CUDA_ERROR_INVALID_DEVICE,
                       f"the pool is device {p.device}'s, not device {d}'s")
        self._current_pools[d] = p

    # -- pools ------------------------------------------------------------------

    @api(1)
    def cuMemPoolCreate(self, poolProps: Any) -> CUmemoryPool:
        if poolProps is not None and not isinstance(poolProps, CUmemPoolProps):
            raise TypeError(f"Argument 'poolProps' is not instance of type (expected "
                            f"<class 'cuda.bindings.driver.CUmemPoolProps'>, found "
                            f"{type(poolProps)})")
        self._require_init()
        if poolProps is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuMemPoolCreate needs pool properties")
        if poolProps.allocType != CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"pool allocation type {poolProps.allocType!r}: only PINNED pools exist")
        kind = poolProps.location.type
        if kind != CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       f"a pool located at {kind!r}: the CPU device has pools of device "
                       "memory only (HOST_MEMORY_POOLS_SUPPORTED is 0)")
        device = int(poolProps.location.id)
        self._check_device(device)
        if int(poolProps.handleTypes) != int(CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE):
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "pools with IPC handle types: the CPU device shares no memory between "
                       "processes (MEMPOOL_SUPPORTED_HANDLE_TYPES is 0)")
        pool = MemPool(0, default=False, max_size=int(poolProps.maxSize), device=device)
        pool.handle = self._new_handle(pool)
        return CUmemoryPool(pool.handle)

    @api(0)
    def cuMemPoolDestroy(self, pool: Any) -> None:
        """A pool's blocks still live stay usable until freed, as on a real device."""
        p = self._pool(pool)
        if p.default:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "the device's default pool cannot be destroyed")
        p.alive = False
        self._handles.pop(p.handle, None)
        if self._current_pools.get(p.device) is p:
            del self._current_pools[p.device]

    @api(0)
    def cuMemPoolTrimTo(self, pool: Any, minBytesToKeep: Any) -> None:
        self._pool(pool)
        _args.c_int(minBytesToKeep, "size_t", "minBytesToKeep")

    @api(0)
    def cuMemPoolSetAttribute(self, pool: Any, attr: Any, value: Any) -> None:
        _args.require_enum(attr, CUmemPool_attribute, "attr")
        p = self._pool(pool)
        name = attr.name.removeprefix("CU_MEMPOOL_ATTR_")
        if name.startswith("REUSE_"):
            p.reuse[name.removeprefix("REUSE_")] = int(bool(_args.c_int(value, "int", "value")))
        elif attr == _A.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
            p.release_threshold = _args.c_int(int(value), "unsigned long long", "value")
        elif attr in (_A.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, _A.CU_MEMPOOL_ATTR_USED_MEM_HIGH):
            if int(value) != 0:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{attr.name} can only be reset to 0")
            if attr == _A.CU_MEMPOOL_ATTR_USED_MEM_HIGH:
                p.used_high = p.used
            else:
                p.reserved_high = p.used
        else:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{attr.name} is read-only")

    @api(1)
    def cuMemPoolGetAttribute(self, pool: Any, attr: Any) -> Any:
        _args.require_enum(attr, CUmemPool_attribute, "attr")
        p = self._pool(pool)
        name = attr.name.removeprefix("CU_MEMPOOL_ATTR_")
        if name.startswith("REUSE_"):
            return p.reuse[name.removeprefix("REUSE_")]
        values = {
            _A.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p.release_threshold,
            _A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: p.used,
            _A.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: p.reserved_high,
            _A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT: p.used,
            _A.CU_MEMPOOL_ATTR_USED_MEM_HIGH: p.used_high,
        }
        return cuuint64_t(values[attr])
