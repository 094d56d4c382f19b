"""Managed and registered host memory of the runtime (``cudaMallocManaged``,
``cudaStreamAttachMemAsync``, ``cudaMemPrefetchAsync``, ``cudaMemAdvise``,
``cudaMemRangeGetAttribute``,
``cudaHostRegister``, ``cudaHostUnregister``, ``cudaHostGetDevicePointer``,
``cudaHostGetFlags``, ``cudaPointerGetAttributes``), over the driver's (:mod:`gpusafe.cpu.driver.memory_kinds`):
the runtime's flags, advice and location values are the driver's.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CUmem_advise,
    CUmem_range_attribute,
    CUmemLocation,
    CUmemLocationType,
    CUmemorytype,
    CUpointer_attribute,
    CUresult,
)
from cuda.bindings.runtime import (
    cudaError_t,
    cudaMemLocation,
    cudaMemoryAdvise,
    cudaMemoryType,
    cudaMemRangeAttribute,
    cudaPointerAttributes,
)

from ...cudaapi import args as _args
from .base import Fail, RuntimeBase, api, check, handle


def _location(location: Any) -> CUmemLocation:
    if not isinstance(location, cudaMemLocation):
        raise TypeError(f"Argument 'location' is not instance of type (expected "
                        f"<class 'cuda.bindings.runtime.cudaMemLocation'>, found "
                        f"{type(location)})")
    out = CUmemLocation()
    out.type = CUmemLocationType(int(location.type))
    out.id = int(location.id)
    return out


class MemoryKindCalls(RuntimeBase):
    # -- managed memory -------------------------------------------------------------

    @api(1)
    def cudaMallocManaged(self, size: Any, flags: Any) -> int:
        n = _args.c_int(size, "size_t", "size")
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        if n == 0:  # documented: a managed allocation of 0 bytes is an invalid value
            raise Fail(cudaError_t.cudaErrorInvalidValue)
        return int(check(self.driver.cuMemAllocManaged(n, f)))

    @api(0)
    def cudaStreamAttachMemAsync(self, stream: Any, devPtr: Any, length: Any,
                                 flags: Any) -> None:
        address = _args.host_pointer(devPtr).address
        n = _args.c_int(length, "size_t", "length")
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        check(self.driver.cuStreamAttachMemAsync(handle(stream), address, n, f))

    @api(0)
    def cudaMemPrefetchAsync(self, devPtr: Any, count: Any, location: Any, flags: Any,
                             stream: Any) -> None:
        address = _args.host_pointer(devPtr).address
        n = _args.c_int(count, "size_t", "count")
        f = _args.c_int(flags, "unsigned int", "flags")
        where = _location(location)
        self._ensure_context()
        check(self.driver.cuMemPrefetchAsync(address, n, where, f, handle(stream)))

    @api(0)
    def cudaMemAdvise(self, devPtr: Any, count: Any, advice: Any, location: Any) -> None:
        address = _args.host_pointer(devPtr).address
        n = _args.c_int(count, "size_t", "count")
        _args.require_enum(advice, cudaMemoryAdvise, "advice")
        where = _location(location)
        self._ensure_context()
        check(self.driver.cuMemAdvise(address, n, CUmem_advise(int(advice)), where))

    @api(1)
    def cudaMemRangeGetAttribute(self, dataSize: Any, attribute: Any, devPtr: Any,
                                 count: Any) -> Any:
        _args.require_enum(attribute, cudaMemRangeAttribute, "attribute")
        address = _args.host_pointer(devPtr).address
        self._ensure_context()
        return check(self.driver.cuMemRangeGetAttribute(
            dataSize, CUmem_range_attribute(int(attribute)), address, count))

    # -- registered host memory -------------------------------------------------------

    @api(0)
    def cudaHostRegister(self, ptr: Any, size: Any, flags: Any) -> None:
        n = _args.c_int(size, "size_t", "size")
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        check(self.driver.cuMemHostRegister(ptr, n, f))

    @api(0)
    def cudaHostUnregister(self, ptr: Any) -> None:
        self._ensure_context()
        check(self.driver.cuMemHostUnregister(ptr))

    @api(1)
    def cudaHostGetDevicePointer(self, pHost: Any, flags: Any) -> int:
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        return int(check(self.driver.cuMemHostGetDevicePointer(pHost, f)))

    @api(1)
    def cudaHostGetFlags(self, pHost: Any) -> int:
        self._ensure_context()
        return int(check(self.driver.cuMemHostGetFlags(pHost)))

    # -- pointers ----------------------------------------------------------------------

    @api(1)
    def cudaPointerGetAttributes(self, ptr: Any) -> cudaPointerAttributes:
        """Memory the device does not know is ``cudaMemoryTypeUnregistered``
        (device -2, its host pointer itself), as the runtime reports since CUDA 11."""
        address = _args.host_pointer(ptr).address
        self._ensure_context()
        P = CUpointer_attribute
        out = cudaPointerAttributes()
        err, kind = self.driver.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address)
        if err == CUresult.CUDA_ERROR_INVALID_VALUE:
            out.type = cudaMemoryType.cudaMemoryTypeUnregistered
            out.device = -2
            out.devicePointer = 0
            out.hostPointer = address
            return out
        check((err, kind))
        managed = check(self.driver.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                                          address))
        if managed:
            out.type = cudaMemoryType.cudaMemoryTypeManaged
        elif kind == int(CUmemorytype.CU_MEMORYTYPE_HOST):
            out.type = cudaMemoryType.cudaMemoryTypeHost
        else:
            out.type = cudaMemoryType.cudaMemoryTypeDevice
        out.device = int(check(self.driver.cuPointerGetAttribute(
            P.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address)))
        out.devicePointer = int(check(self.driver.cuPointerGetAttribute(
            P.CU_POINTER_ATTRIBUTE_DEVICE_POINTER, address)))
        err, host = self.driver.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_HOST_POINTER, address)
        out.hostPointer = int(host) if err == CUresult.CUDA_SUCCESS else 0
        return out
