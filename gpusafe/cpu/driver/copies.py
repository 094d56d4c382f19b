"""Copies and sets (``cuMemcpy*``, ``cuMemset*``), peer copies between the
memory of two devices (``cuMemcpyPeer``, ``cuMemcpyPeerAsync``).  Execution
is synchronous: the ``Async`` forms validate their stream and finish before
returning.  A peer copy needs no peer access (a GPU stages it through the
host when it has none); each side must be memory of its context's device.

Host buffers are what cuda-python accepts (``None``, an ``int`` address, a
``CUdeviceptr`` taken as an address, any contiguous buffer-protocol object);
when a buffer's length is known and is smaller than the byte count the copy
fails with ``CUDA_ERROR_INVALID_VALUE`` instead of reading or writing past it.
A device range must lie inside one live allocation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda.bindings.driver import CUcontext, CUdeviceptr, CUstream

from ...cudaapi import args as _args
from ..errors import InvalidAddress
from ..memory import GLOBAL_BASE
from .api import api
from .state import Context, DriverBase, E, Fail, invalid_address


class CopyCalls(DriverBase):
    # -- the two sides of a copy -------------------------------------------------

    def _in_arena(self, addr: int) -> bool:
        """Whether ``addr`` is in the global arena (an allocation, a red zone, freed memory)."""
        mem = self._memory
        return GLOBAL_BASE <= addr < mem.top or mem.find(addr) is not None

    def _check_host_address(self, hp: _args.HostPtr, n: int, what: str) -> None:
        """A raw int "host" address inside the device arena is a device pointer:
        refuse it (reading it as host memory would fault the process), unless
        it is pinned or managed memory, which the host reaches there (and then
        the range must stay inside that allocation's pages)."""
        if hp.nbytes is None and hp.address and self._in_arena(hp.address):
            if not self._memory.host_visible(hp.address):
                raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                           f"{what}: host pointer {hp.address:#x} is a device address")
            try:
                self._memory.view(hp.address, n)
            except InvalidAddress as e:
                raise invalid_address(e, f"{what}: host range") from None

    def _host_src(self, src: Any, n: int, what: str) -> Any:
        hp = _args.host_pointer(src)
        if n == 0:
            return b""
        if hp.address == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: NULL host pointer")
        self._check_host_address(hp, n, what)
        if hp.nbytes is not None and hp.nbytes < n:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: the host buffer holds {hp.nbytes} bytes, ByteCount is {n}")
        return _args.host_view(hp.address, n)

    def _host_dst(self, dst: Any, n: int, what: str) -> _args.HostPtr:
        hp = _args.host_pointer(dst)
        if n and hp.address == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: NULL host pointer")
        if n:
            self._check_host_address(hp, n, what)
        if n and hp.nbytes is not None and hp.nbytes < n:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: the host buffer holds {hp.nbytes} bytes, ByteCount is {n}")
        return hp

    def _dev_read(self, addr: int, n: int, what: str) -> bytes:
        if n == 0:
            return b""
        try:
            return bytes(self._memory.read(addr, n))
        except InvalidAddress as e:
            raise invalid_address(e, what) from None

    def _dev_write(self, addr: int, data: Any, what: str) -> None:
        if len(data) == 0:
            return
        try:
            self._memory.write(addr, data)
        except InvalidAddress as e:
            raise invalid_address(e, what) from None

    def _copy_stream(self, hStream: Any) -> None:
        """The stream argument of a copy or set: valid, and in the current
        context (a capturing stream refuses here)."""
        self._stream(_args.handle_value(hStream, CUstream), self._current())

    def _device_copy(self, dst: int, src: int, n: int, what: str) -> None:
        """Device to device, the source checked first so that an error
        names the bad side as the driver does."""
        if n == 0:
            return
        try:
            self._memory.read(src, n)
        except InvalidAddress as e:
            raise invalid_address(e, f"{what}(src={src:#x}, {n} bytes)") from None
        try:
            self._memory.copy(dst, src, n)
        except InvalidAddress as e:
            raise invalid_address(e, f"{what}(dst={dst:#x}, {n} bytes)") from None

    # -- copies by direction -------------------------------------------------------

    def _htod(self, dstDevice: Any, srcHost: Any, ByteCount: Any, hStream: Any, what: str) -> None:
        dst = _args.handle_value(dstDevice, CUdeviceptr)
        n = _args.c_int(ByteCount, "size_t", "ByteCount")
        self._copy_stream(hStream)
        data = self._host_src(srcHost, n, what)
        self._dev_write(dst, data, f"{what}(dst={dst:#x}, {n} bytes)")

    def _dtoh(self, dstHost: Any, srcDevice: Any, ByteCount: Any, hStream: Any, what: str) -> None:
        src = _args.handle_value(srcDevice, CUdeviceptr)
        n = _args.c_int(ByteCount, "size_t", "ByteCount")
        self._copy_stream(hStream)
        hp = self._host_dst(dstHost, n, what)
        if n == 0:
            return
        try:
            view = self._memory.view(src, n)
        except InvalidAddress as e:
            raise invalid_address(e, f"{what}(src={src:#x}, {n} bytes)") from None
        _args.host_view(hp.address, n)[:] = view

    def _dtod(self, dstDevice: Any, srcDevice: Any, ByteCount: Any, hStream: Any,
              what: str) -> None:
        dst = _args.handle_value(dstDevice, CUdeviceptr)
        src = _args.handle_value(srcDevice, CUdeviceptr)
        n = _args.c_int(ByteCount, "size_t", "ByteCount")
        self._copy_stream(hStream)
        self._device_copy(dst, src, n, what)

    def _unified(self, dst: Any, src: Any, ByteCount: Any, hStream: Any, what: str) -> None:
        d = _args.handle_value(dst, CUdeviceptr)
        s = _args.handle_value(src, CUdeviceptr)
        n = _args.c_int(ByteCount, "size_t", "ByteCount")
        self._copy_stream(hStream)
        if n == 0:
            return
        if d == 0 or s == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: NULL pointer")
        if self._in_arena(s):
            data = self._dev_read(s, n, f"{what}(src={s:#x}, {n} bytes)")
        else:
            data = _args.host_view(s, n).copy()
        if self._in_arena(d):
            self._dev_write(d, data, f"{what}(dst={d:#x}, {n} bytes)")
        else:
            _args.host_view(d, n)[:] = np.frombuffer(data, dtype=np.uint8)

    @api(0)
    def cuMemcpyHtoD(self, dstDevice: Any, srcHost: Any, ByteCount: Any) -> None:
        self._htod(dstDevice, srcHost, ByteCount, None, "cuMemcpyHtoD")

    @api(0)
    def cuMemcpyHtoDAsync(self, dstDevice: Any, srcHost: Any, ByteCount: Any,
                          hStream: Any) -> None:
        self._htod(dstDevice, srcHost, ByteCount, hStream, "cuMemcpyHtoDAsync")

    @api(0)
    def cuMemcpyDtoH(self, dstHost: Any, srcDevice: Any, ByteCount: Any) -> None:
        self._dtoh(dstHost, srcDevice, ByteCount, None, "cuMemcpyDtoH")

    @api(0)
    def cuMemcpyDtoHAsync(self, dstHost: Any, srcDevice: Any, ByteCount: Any,
                          hStream: Any) -> None:
        self._dtoh(dstHost, srcDevice, ByteCount, hStream, "cuMemcpyDtoHAsync")

    @api(0)
    def cuMemcpyDtoD(self, dstDevice: Any, srcDevice: Any, ByteCount: Any) -> None:
        self._dtod(dstDevice, srcDevice, ByteCount, None, "cuMemcpyDtoD")

    @api(0)
    def cuMemcpyDtoDAsync(self, dstDevice: Any, srcDevice: Any, ByteCount: Any,
                          hStream: Any) -> None:
        self._dtod(dstDevice, srcDevice, ByteCount, hStream, "cuMemcpyDtoDAsync")

    @api(0)
    def cuMemcpy(self, dst: Any, src: Any, ByteCount: Any) -> None:
        """Unified-address copy: an address in the device's arena is device
        memory, any other is host."""
        self._unified(dst, src, ByteCount, None, "cuMemcpy")

    @api(0)
    def cuMemcpyAsync(self, dst: Any, src: Any, ByteCount: Any, hStream: Any) -> None:
        self._unified(dst, src, ByteCount, hStream, "cuMemcpyAsync")

    # -- peer copies -------------------------------------------------------------------

    def _peer_side(self, address: int, hctx: int, what: str) -> Context:
        """The context of one side of a peer copy; its memory must be that
        context's device's (a pointer of another device is the program's
        mistake, named here rather than copied)."""
        obj = self._handles.get(hctx)
        if not isinstance(obj, Context) or not obj.alive:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT, f"{what}: context {hctx:#x} is not a "
                       "valid context")
        self._check_ctx(obj)
        a = self._memory.find(address)
        owner = self._alloc_owner.get(a.base) if a is not None else None
        pool = self._pool_of.get(a.base) if a is not None else None
        device = pool.device if pool is not None else owner.device if owner else None
        if device is not None and device != obj.device:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: {address:#x} is memory of device {device}, its context is "
                       f"device {obj.device}'s")
        return obj

    def _peer(self, dstDevice: Any, dstContext: Any, srcDevice: Any, srcContext: Any,
              ByteCount: Any, hStream: Any, what: str) -> None:
        dst = _args.handle_value(dstDevice, CUdeviceptr)
        dctx = _args.handle_value(dstContext, CUcontext)
        src = _args.handle_value(srcDevice, CUdeviceptr)
        sctx = _args.handle_value(srcContext, CUcontext)
        n = _args.c_int(ByteCount, "size_t", "ByteCount")
        self._copy_stream(hStream)
        self._peer_side(dst, dctx, f"{what} destination")
        self._peer_side(src, sctx, f"{what} source")
        self._device_copy(dst, src, n, what)

    @api(0)
    def cuMemcpyPeer(self, dstDevice: Any, dstContext: Any, srcDevice: Any, srcContext: Any,
                     ByteCount: Any) -> None:
        self._peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, None,
                   "cuMemcpyPeer")

    @api(0)
    def cuMemcpyPeerAsync(self, dstDevice: Any, dstContext: Any, srcDevice: Any,
                          srcContext: Any, ByteCount: Any, hStream: Any) -> None:
        self._peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream,
                   "cuMemcpyPeerAsync")

    # -- sets ------------------------------------------------------------------------

    def _memset(self, dstDevice: Any, value: Any, N: Any, hStream: Any, width: int, ctype: str,
                what: str) -> None:
        dst = _args.handle_value(dstDevice, CUdeviceptr)
        v = _args.c_int(value, ctype, "value")
        n = _args.c_int(N, "size_t", "N")
        self._copy_stream(hStream)
        if dst % width:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: destination {dst:#x} is not {width}-byte aligned")
        if n == 0:
            return
        try:
            self._memory.fill(dst, v, width, n)
        except InvalidAddress as e:
            raise invalid_address(e, f"{what}(dst={dst:#x}, {n} x {width} bytes)") from None

    @api(0)
    def cuMemsetD8(self, dstDevice: Any, uc: Any, N: Any) -> None:
        self._memset(dstDevice, uc, N, None, 1, "unsigned char", "cuMemsetD8")

    @api(0)
    def cuMemsetD16(self, dstDevice: Any, us: Any, N: Any) -> None:
        self._memset(dstDevice, us, N, None, 2, "unsigned short", "cuMemsetD16")

    @api(0)
    def cuMemsetD32(self, dstDevice: Any, ui: Any, N: Any) -> None:
        self._memset(dstDevice, ui, N, None, 4, "unsigned int", "cuMemsetD32")

    @api(0)
    def cuMemsetD8Async(self, dstDevice: Any, uc: Any, N: Any, hStream: Any) -> None:
        self._memset(dstDevice, uc, N, hStream, 1, "unsigned char", "cuMemsetD8Async")

    @api(0)
    def cuMemsetD16Async(self, dstDevice: Any, us: Any, N: Any, hStream: Any) -> None:
        self._memset(dstDevice, us, N, hStream, 2, "unsigned short", "cuMemsetD16Async")

    @api(0)
    def cuMemsetD32Async(self, dstDevice: Any, ui: Any, N: Any, hStream: Any) -> None:
        self._memset(dstDevice, ui, N, hStream, 4, "unsigned int", "cuMemsetD32Async")
