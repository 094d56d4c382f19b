"""Allocations, copies and sets of the runtime (``cudaMalloc*``,
``cudaFree*``, ``cudaMallocHost``/``cudaHostAlloc``/``cudaFreeHost``,
``cudaMemGetInfo``, ``cudaMemcpy*``, ``cudaMemset*``), over the driver.

``cudaMalloc(0)`` succeeds with a null pointer and ``cudaFree(0)`` does
nothing; ``cudaMallocPitch`` rounds rows up to :data:`PITCH_ALIGNMENT`;
``cudaMemcpy*`` follows ``kind``, ``cudaMemcpyDefault`` judging each side by
its address as ``cuMemcpy`` does.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.runtime import cudaError_t, cudaMemcpyKind

from ...cudaapi import args as _args
from .base import Fail, RuntimeBase, api, check, handle

PITCH_ALIGNMENT = 512
"""Row alignment of ``cudaMallocPitch`` (the real devices' texture pitch alignment)."""


def _host_address(buffer: Any, n: int) -> tuple[int, Any]:
    """The address of a host buffer holding at least ``n`` bytes (and what keeps it alive)."""
    hp = _args.host_pointer(buffer)
    if n and hp.address == 0:
        raise Fail(cudaError_t.cudaErrorInvalidValue)
    if hp.nbytes is not None and hp.nbytes < n:
        raise Fail(cudaError_t.cudaErrorInvalidValue)
    return hp.address, hp


class MemoryCalls(RuntimeBase):
    # -- allocations ---------------------------------------------------------------

    @api(1)
    def cudaMalloc(self, size: Any) -> int:
        n = _args.c_int(size, "size_t", "size")
        self._ensure_context()
        if n == 0:
            return 0
        return int(check(self.driver.cuMemAlloc(n)))

    @api(2)
    def cudaMallocPitch(self, width: Any, height: Any) -> tuple[int, int]:
        w = _args.c_int(width, "size_t", "width")
        h = _args.c_int(height, "size_t", "height")
        self._ensure_context()
        pitch = -(-w // PITCH_ALIGNMENT) * PITCH_ALIGNMENT
        if pitch * h == 0:
            return 0, pitch
        if pitch * h >= 2**64:  # more than any size_t: no device has it
            raise Fail(cudaError_t.cudaErrorMemoryAllocation)
        return int(check(self.driver.cuMemAlloc(pitch * h))), pitch

    @api(1)
    def cudaMallocAsync(self, size: Any, hStream: Any) -> int:
        n = _args.c_int(size, "size_t", "size")
        self._ensure_context()
        if n == 0:
            return 0
        return int(check(self.driver.cuMemAllocAsync(n, handle(hStream))))

    @api(0)
    def cudaFree(self, devPtr: Any) -> None:
        address = _args.host_pointer(devPtr).address
        self._ensure_context()
        if address:
            check(self.driver.cuMemFree(address))

    @api(0)
    def cudaFreeAsync(self, devPtr: Any, hStream: Any) -> None:
        address = _args.host_pointer(devPtr).address
        self._ensure_context()
        if address:
            check(self.driver.cuMemFreeAsync(address, handle(hStream)))

    @api(1)
    def cudaMallocHost(self, size: Any) -> int:
        n = _args.c_int(size, "size_t", "size")
        self._ensure_context()
        return int(check(self.driver.cuMemAllocHost(n)))

    @api(1)
    def cudaHostAlloc(self, size: Any, flags: Any) -> int:
        n = _args.c_int(size, "size_t", "size")
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        return int(check(self.driver.cuMemHostAlloc(n, f)))

    @api(0)
    def cudaFreeHost(self, ptr: Any) -> None:
        address = _args.host_pointer(ptr).address
        self._ensure_context()
        check(self.driver.cuMemFreeHost(address))

    @api(2)
    def cudaMemGetInfo(self) -> tuple[int, int]:
        self._ensure_context()
        return check(self.driver.cuMemGetInfo())

    # -- copies and sets -------------------------------------------------------------

    def _memcpy(self, dst: Any, src: Any, count: Any, kind: Any, stream: Any) -> None:
        n = _args.c_int(count, "size_t", "count")
        kind = _args.require_enum(kind, cudaMemcpyKind, "kind")
        self._ensure_context()
        hs = handle(stream)
        drv = self.driver
        K = cudaMemcpyKind
        if kind == K.cudaMemcpyHostToDevice:
            check(drv.cuMemcpyHtoDAsync(_args.host_pointer(dst).address, src, n, hs))
        elif kind == K.cudaMemcpyDeviceToHost:
            check(drv.cuMemcpyDtoHAsync(dst, _args.host_pointer(src).address, n, hs))
        elif kind == K.cudaMemcpyDeviceToDevice:
            check(drv.cuMemcpyDtoDAsync(_args.host_pointer(dst).address,
                                        _args.host_pointer(src).address, n, hs))
        elif kind == K.cudaMemcpyHostToHost:
            if n == 0:
                return
            d, keep_d = _host_address(dst, n)
            s, keep_s = _host_address(src, n)
            # through the driver's stream, so that a capturing stream records it
            check(drv.cuMemcpyAsync(d, s, n, hs))
            del keep_d, keep_s
        else:  # cudaMemcpyDefault: each side by its address
            d, keep_d = _host_address(dst, n)
            s, keep_s = _host_address(src, n)
            check(drv.cuMemcpyAsync(d, s, n, hs))
            del keep_d, keep_s

    @api(0)
    def cudaMemcpy(self, dst: Any, src: Any, count: Any, kind: Any) -> None:
        self._memcpy(dst, src, count, kind, 0)

    @api(0)
    def cudaMemcpyAsync(self, dst: Any, src: Any, count: Any, kind: Any, stream: Any) -> None:
        self._memcpy(dst, src, count, kind, stream)

    def _memset(self, devPtr: Any, value: Any, count: Any, stream: Any) -> None:
        address = _args.host_pointer(devPtr).address
        v = _args.c_int(value, "int", "value")
        n = _args.c_int(count, "size_t", "count")
        self._ensure_context()
        check(self.driver.cuMemsetD8Async(address, v & 0xFF, n, handle(stream)))

    @api(0)
    def cudaMemset(self, devPtr: Any, value: Any, count: Any) -> None:
        self._memset(devPtr, value, count, 0)

    @api(0)
    def cudaMemsetAsync(self, devPtr: Any, value: Any, count: Any, stream: Any) -> None:
        self._memset(devPtr, value, count, stream)
