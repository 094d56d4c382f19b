"""Memory pools of the runtime (``cudaDeviceGetDefaultMemPool``,
``cudaDevice{Get,Set}MemPool``, ``cudaMemPoolCreate``/``Destroy``,
``cudaMallocFromPoolAsync``, ``cudaMemPool{Set,Get}Attribute``,
``cudaMemPoolTrimTo``), over the driver's (:mod:`gpusafe.cpu.driver.pools`):
a ``cudaMemPool_t`` is the driver's ``CUmemoryPool`` handle, and the
runtime's attribute and property values are the driver's.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CUdevice,
    CUmemAllocationHandleType,
    CUmemAllocationType,
    CUmemLocationType,
    CUmemPool_attribute,
    CUmemPoolProps,
)
from cuda.bindings.runtime import cudaMemPool_t, cudaMemPoolAttr, cudaMemPoolProps

from ...cudaapi import args as _args
from .base import RuntimeBase, api, check, device_ordinal, handle


def _props(props: Any) -> CUmemPoolProps | None:
    if props is None:
        return None
    if not isinstance(props, cudaMemPoolProps):
        raise TypeError(f"Argument 'poolProps' is not instance of type (expected "
                        f"<class 'cuda.bindings.runtime.cudaMemPoolProps'>, found {type(props)})")
    out = CUmemPoolProps()
    out.allocType = CUmemAllocationType(int(props.allocType))
    out.handleTypes = CUmemAllocationHandleType(int(props.handleTypes))
    out.location.type = CUmemLocationType(int(props.location.type))
    out.location.id = int(props.location.id)
    out.maxSize = int(props.maxSize)
    return out


class PoolCalls(RuntimeBase):
    @api(1)
    def cudaDeviceGetDefaultMemPool(self, device: Any) -> cudaMemPool_t:
        d = device_ordinal(device)
        self._init()
        return cudaMemPool_t(int(check(self.driver.cuDeviceGetDefaultMemPool(CUdevice(d)))))

    @api(1)
    def cudaDeviceGetMemPool(self, device: Any) -> cudaMemPool_t:
        d = device_ordinal(device)
        self._init()
        return cudaMemPool_t(int(check(self.driver.cuDeviceGetMemPool(CUdevice(d)))))

    @api(0)
    def cudaDeviceSetMemPool(self, device: Any, memPool: Any) -> None:
        d = device_ordinal(device)
        self._init()
        check(self.driver.cuDeviceSetMemPool(CUdevice(d), memPool))

    @api(1)
    def cudaMemPoolCreate(self, poolProps: Any) -> cudaMemPool_t:
        props = _props(poolProps)
        self._init()
        return cudaMemPool_t(int(check(self.driver.cuMemPoolCreate(props))))

    @api(0)
    def cudaMemPoolDestroy(self, memPool: Any) -> None:
        self._init()
        check(self.driver.cuMemPoolDestroy(memPool))

    @api(1)
    def cudaMallocFromPoolAsync(self, size: Any, memPool: Any, stream: Any) -> int:
        n = _args.c_int(size, "size_t", "size")
        self._ensure_context()
        return int(check(self.driver.cuMemAllocFromPoolAsync(n, memPool, handle(stream))))

    @api(0)
    def cudaMemPoolTrimTo(self, memPool: Any, minBytesToKeep: Any) -> None:
        self._init()
        check(self.driver.cuMemPoolTrimTo(memPool, minBytesToKeep))

    @api(0)
    def cudaMemPoolSetAttribute(self, memPool: Any, attr: Any, value: Any) -> None:
        _args.require_enum(attr, cudaMemPoolAttr, "attr")
        self._init()
        check(self.driver.cuMemPoolSetAttribute(memPool, CUmemPool_attribute(int(attr)), value))

    @api(1)
    def cudaMemPoolGetAttribute(self, memPool: Any, attr: Any) -> Any:
        _args.require_enum(attr, cudaMemPoolAttr, "attr")
        self._init()
        return check(self.driver.cuMemPoolGetAttribute(memPool, CUmemPool_attribute(int(attr))))
