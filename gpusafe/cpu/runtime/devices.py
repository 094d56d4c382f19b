"""Errors, versions and the device (``cudaGetError*``, ``cudaGetLastError``,
``cuda*GetVersion``, ``cudaGetDevice*``, ``cudaSetDevice``,
``cudaDeviceGetAttribute``, ``cudaGetDeviceProperties``,
``cuda{Set,Get}DeviceFlags``, ``cudaDeviceSynchronize``, ``cudaDeviceReset``,
``cudaDevice{Get,Set}Limit``), and peer access between devices
(``cudaDeviceCanAccessPeer``, ``cudaDevice{Enable,Disable}PeerAccess``,
``cudaDeviceGetP2PAttribute``, ``cudaMemcpyPeer(Async)``).  Every attribute
and property is the driver's (:mod:`gpusafe.cpu.driver_profile`), so the two
APIs never disagree; peer access is the driver's between the devices'
primary contexts.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CUdevice,
    CUdevice_attribute,
    CUdevice_P2PAttribute,
    CUlimit,
    CUresult,
)
from cuda.bindings.runtime import (
    cudaDeviceP2PAttr,
    cudaDeviceProp,
    cudaError_t,
    cudaLimit,
)

from ...cudaapi import args as _args
from ...cudaapi.device_props import device_properties
from .. import driver_profile as _profile
from .base import Fail, RuntimeBase, api, check, device_ordinal, handle

_OK = cudaError_t.cudaSuccess

_DEVICE_FLAGS_MASK = 0x07 | 0x08 | 0x10 | 0x20
"""cudaDeviceScheduleMask, cudaDeviceMapHost, cudaDeviceLmemResizeToMax and
cudaDeviceSyncMemops: the flags cudaSetDeviceFlags takes."""
_MAP_HOST = 0x08


class DeviceCalls(RuntimeBase):
    # -- errors and versions -------------------------------------------------------

    @api(1, records=False)
    def cudaGetErrorName(self, error: Any) -> bytes:
        error = _args.require_enum(error, cudaError_t, "error")
        return error.name.encode()

    @api(1, records=False)
    def cudaGetErrorString(self, error: Any) -> bytes:
        error = _args.require_enum(error, cudaError_t, "error")
        try:
            name = CUresult(int(error)).name
        except ValueError:
            return error.name.encode()
        return _profile.ERROR_STRINGS.get(name, error.name).encode()

    @api(0, records=False)
    def cudaGetLastError(self) -> None:
        error = self._last_error()
        self._tls.last_error = _OK
        if error != _OK:
            raise Fail(error)

    @api(0, records=False)
    def cudaPeekAtLastError(self) -> None:
        error = self._last_error()
        if error != _OK:
            raise Fail(error)

    @api(1)
    def cudaDriverGetVersion(self) -> int:
        return _profile.DRIVER_VERSION

    @api(1)
    def cudaRuntimeGetVersion(self) -> int:
        return _profile.DRIVER_VERSION

    # -- the device ----------------------------------------------------------------

    @api(1)
    def cudaGetDeviceCount(self) -> int:
        self._init()
        return int(check(self.driver.cuDeviceGetCount()))

    @api(1)
    def cudaGetDevice(self) -> int:
        self._init()
        current = check(self.driver.cuCtxGetCurrent())
        return int(check(self.driver.cuCtxGetDevice())) if int(current) else 0

    @api(0)
    def cudaSetDevice(self, device: Any) -> None:
        d = device_ordinal(device)
        self._init()
        check(self.driver.cuDeviceGet(d))
        self._make_primary_current(d)

    @api(1)
    def cudaGetDeviceProperties(self, device: Any) -> cudaDeviceProp:
        d = device_ordinal(device)
        self._init()
        return device_properties(self.driver, d, check)

    @api(1)
    def cudaDeviceGetAttribute(self, attr: Any, device: Any) -> int:
        """The driver's attribute of the same value (the runtime's enum mirrors it).
        As in cuda-bindings, ``attr`` is anything with the enum's ``.value``:
        NVIDIA's examples pass a driver ``CUdevice_attribute`` here."""
        if attr is None:
            raise TypeError("Argument 'attr' must not be None")
        value = int(attr.value)
        d = device_ordinal(device)
        self._init()
        try:
            attribute = CUdevice_attribute(value)
        except ValueError:
            raise Fail(cudaError_t.cudaErrorInvalidValue) from None
        return int(check(self.driver.cuDeviceGetAttribute(attribute, CUdevice(d))))

    # -- device flags (the primary context's flags) ---------------------------------

    @api(0)
    def cudaSetDeviceFlags(self, flags: Any) -> None:
        """Flags of the current device's primary context.  ``cudaDeviceMapHost``
        is accepted and changes nothing: host memory is always mapped on the
        CPU device (``canMapHostMemory`` is 1)."""
        f = _args.c_int(flags, "unsigned int", "flags")
        if f & ~_DEVICE_FLAGS_MASK:
            raise Fail(cudaError_t.cudaErrorInvalidValue)
        self._init()
        drv = self.driver
        dev = int(check(drv.cuCtxGetDevice())) if int(check(drv.cuCtxGetCurrent())) else 0
        check(drv.cuDevicePrimaryCtxSetFlags(CUdevice(dev), f & ~_MAP_HOST))

    @api(1)
    def cudaGetDeviceFlags(self) -> int:
        self._init()
        drv = self.driver
        dev = int(check(drv.cuCtxGetDevice())) if int(check(drv.cuCtxGetCurrent())) else 0
        flags, _active = check(drv.cuDevicePrimaryCtxGetState(CUdevice(dev)))
        # the real runtime reports cudaDeviceMapHost on every device that can map
        return int(flags) | _MAP_HOST

    @api(0)
    def cudaDeviceSynchronize(self) -> None:
        self._ensure_context()
        check(self.driver.cuCtxSynchronize())

    @api(0)
    def cudaDeviceReset(self) -> None:
        self._init()
        drv = self.driver
        dev = int(check(drv.cuCtxGetDevice())) if int(check(drv.cuCtxGetCurrent())) else 0
        check(drv.cuDevicePrimaryCtxReset(CUdevice(dev)))

    # -- limits (the current context's, as the driver keeps them) -------------------

    @api(0)
    def cudaDeviceSetLimit(self, limit: Any, value: Any) -> None:
        limit = _args.require_enum(limit, cudaLimit, "limit")
        self._ensure_context()
        check(self.driver.cuCtxSetLimit(CUlimit(int(limit)), value))

    @api(1)
    def cudaDeviceGetLimit(self, limit: Any) -> int:
        limit = _args.require_enum(limit, cudaLimit, "limit")
        self._ensure_context()
        return int(check(self.driver.cuCtxGetLimit(CUlimit(int(limit)))))

    # -- peer access (the driver's, between primary contexts) -----------------------

    def _current_device(self) -> int:
        self._ensure_context()
        return int(check(self.driver.cuCtxGetDevice()))

    @api(1)
    def cudaDeviceCanAccessPeer(self, device: Any, peerDevice: Any) -> int:
        d = device_ordinal(device)
        p = device_ordinal(peerDevice)
        self._init()
        return int(check(self.driver.cuDeviceCanAccessPeer(CUdevice(d), CUdevice(p))))

    @api(1)
    def cudaDeviceGetP2PAttribute(self, attr: Any, srcDevice: Any, dstDevice: Any) -> int:
        attr = _args.require_enum(attr, cudaDeviceP2PAttr, "attr")
        s = device_ordinal(srcDevice)
        t = device_ordinal(dstDevice)
        self._init()
        return int(check(self.driver.cuDeviceGetP2PAttribute(
            CUdevice_P2PAttribute(int(attr)), CUdevice(s), CUdevice(t))))

    @api(0)
    def cudaDeviceEnablePeerAccess(self, peerDevice: Any, flags: Any) -> None:
        """Kernels of the current device may reach ``peerDevice``'s memory."""
        p = device_ordinal(peerDevice)
        f = _args.c_int(flags, "unsigned int", "flags")
        me = self._current_device()
        check(self.driver.cuDeviceGet(p))
        if f != 0:
            raise Fail(cudaError_t.cudaErrorInvalidValue)
        if p == me:
            raise Fail(cudaError_t.cudaErrorInvalidDevice)
        check(self.driver.cuCtxEnablePeerAccess(self._primary(p), 0))

    @api(0)
    def cudaDeviceDisablePeerAccess(self, peerDevice: Any) -> None:
        p = device_ordinal(peerDevice)
        me = self._current_device()
        check(self.driver.cuDeviceGet(p))
        if p == me:
            raise Fail(cudaError_t.cudaErrorInvalidDevice)
        check(self.driver.cuCtxDisablePeerAccess(self._primary(p)))

    def _memcpy_peer(self, dst: Any, dstDevice: Any, src: Any, srcDevice: Any, count: Any,
                     stream: Any) -> None:
        d_ptr = _args.host_pointer(dst).address
        dd = device_ordinal(dstDevice)
        s_ptr = _args.host_pointer(src).address
        sd = device_ordinal(srcDevice)
        n = _args.c_int(count, "size_t", "count")
        hs = handle(stream)
        self._ensure_context()
        drv = self.driver
        check(drv.cuDeviceGet(dd))
        check(drv.cuDeviceGet(sd))
        check(drv.cuMemcpyPeerAsync(d_ptr, self._primary(dd), s_ptr, self._primary(sd), n, hs))

    @api(0)
    def cudaMemcpyPeer(self, dst: Any, dstDevice: Any, src: Any, srcDevice: Any,
                       count: Any) -> None:
        self._memcpy_peer(dst, dstDevice, src, srcDevice, count, 0)

    @api(0)
    def cudaMemcpyPeerAsync(self, dst: Any, dstDevice: Any, src: Any, srcDevice: Any,
                            count: Any, stream: Any) -> None:
        self._memcpy_peer(dst, dstDevice, src, srcDevice, count, stream)
