"""Initialisation, versions, error names, the devices and their attributes
(``cuInit``, ``cuDriverGetVersion``, ``cuGetError*``, ``cuDevice*``), and what
two devices are to each other (``cuDeviceCanAccessPeer``,
``cuDeviceGetP2PAttribute``): what a device says about itself comes from
:mod:`gpusafe.cpu.driver_profile`.  A driver has ``devices`` CPU devices
(``gpusafe run --cpu-devices N``); they differ in name, UUID and PCI bus
and are alike in every other attribute.  Any two of them can reach each
other's memory once peer access is enabled: one memory is underneath.
"""

from __future__ import annotations

import ctypes
from typing import Any

from cuda.bindings.driver import (
    CUdevice,
    CUdevice_attribute,
    CUdevice_P2PAttribute,
    CUresult,
    CUuuid,
)

from ...cudaapi import args as _args
from .. import driver_profile as _profile
from .api import api
from .state import DriverBase, E, Fail, device_ordinal


def _c_string(text: str, length: int) -> bytes:
    """``text`` as the driver writes it into a ``length``-byte buffer,
    truncated and NUL-terminated; cuda-python returns the whole buffer,
    padded with spaces."""
    if length <= 0:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, "length must be positive")
    data = text.encode()[: length - 1] + b"\0"
    return data + b" " * (length - len(data))


class DeviceCalls(DriverBase):
    def _device_arg(self, dev: Any) -> int:
        """The ordinal of a ``CUdevice`` argument, after the driver's own
        checks in its order: initialised, then a device that exists."""
        d = device_ordinal(dev)
        self._require_init()
        self._check_device(d)
        return d

    @api(0)
    def cuInit(self, Flags: Any) -> None:
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        if flags != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuInit flags must be 0")
        self._initialized = True

    @api(1)
    def cuDriverGetVersion(self) -> int:
        return _profile.DRIVER_VERSION

    @api(1)
    def cuGetErrorName(self, error: Any) -> bytes:
        error = _args.require_enum(error, CUresult, "error")
        return error.name.encode()

    @api(1)
    def cuGetErrorString(self, error: Any) -> bytes:
        error = _args.require_enum(error, CUresult, "error")
        return _profile.ERROR_STRINGS.get(error.name, error.name).encode()

    @api(1)
    def cuDeviceGetCount(self) -> int:
        self._require_init()
        return self.devices

    @api(1)
    def cuDeviceGet(self, ordinal: Any) -> CUdevice:
        o = _args.c_int(ordinal, "int", "ordinal")
        self._require_init()
        self._check_device(o)
        return CUdevice(o)

    @api(1)
    def cuDeviceGetName(self, length: Any, dev: Any) -> bytes:
        n = _args.c_int(length, "int", "length")
        d = self._device_arg(dev)
        return _c_string(_profile.device_name(d), n)

    @api(1)
    def cuDeviceGetAttribute(self, attrib: Any, dev: Any) -> int:
        attrib = _args.require_enum(attrib, CUdevice_attribute, "attrib")
        d = self._device_arg(dev)
        if attrib == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "CU_DEVICE_ATTRIBUTE_MAX is not an attribute")
        key = attrib.name[len("CU_DEVICE_ATTRIBUTE_"):]
        if key not in _profile.DEVICE_ATTRIBUTES:  # a cuda-bindings newer than the profile
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{attrib.name} is not known to the CPU device's profile")
        if key == "PCI_BUS_ID":
            return d  # one bus per device (cuDeviceGetPCIBusId)
        return int(_profile.DEVICE_ATTRIBUTES[key])

    @api(1)
    def cuDeviceTotalMem(self, dev: Any) -> int:
        self._device_arg(dev)
        return int(self._memory.capacity)

    @api(2)
    def cuDeviceComputeCapability(self, dev: Any) -> tuple[int, int]:
        self._device_arg(dev)
        return _profile.CC_MAJOR, _profile.CC_MINOR

    @api(1)
    def cuDeviceGetPCIBusId(self, length: Any, dev: Any) -> bytes:
        n = _args.c_int(length, "int", "length")
        d = self._device_arg(dev)
        return _c_string(_profile.pci_bus_id(d), n)

    @api(1)
    def cuDeviceGetUuid(self, dev: Any) -> CUuuid:
        d = self._device_arg(dev)
        uuid = CUuuid()
        ctypes.memmove(uuid.getPtr(), _profile.device_uuid(d), 16)  # its bytes are read-only
        return uuid

    @api(1)
    def cuDeviceGetByPCIBusId(self, pciBusId: Any) -> CUdevice:
        if not isinstance(pciBusId, bytes):  # a char* parameter: Cython takes bytes only
            raise TypeError(f"expected bytes, {type(pciBusId).__name__} found")
        text = pciBusId.split(b"\0", 1)[0].decode(errors="replace")
        self._require_init()
        for d in range(self.devices):
            if _profile.pci_bus_id(d) == text.strip().lower():
                return CUdevice(d)
        raise Fail(E.CUDA_ERROR_INVALID_DEVICE, f"no CPU device on PCI bus {text!r}")

    # -- two devices --------------------------------------------------------------

    @api(1)
    def cuDeviceCanAccessPeer(self, dev: Any, peerDev: Any) -> int:
        """1 between two different devices (0 for a device and itself, as on a
        GPU: that is not peer access)."""
        d = device_ordinal(dev)
        p = device_ordinal(peerDev)
        self._require_init()
        self._check_device(d)
        self._check_device(p)
        return int(d != p)

    @api(1)
    def cuDeviceGetP2PAttribute(self, attrib: Any, srcDevice: Any, dstDevice: Any) -> int:
        attrib = _args.require_enum(attrib, CUdevice_P2PAttribute, "attrib")
        s = device_ordinal(srcDevice)
        t = device_ordinal(dstDevice)
        self._require_init()
        self._check_device(s)
        self._check_device(t)
        if s == t:
            raise Fail(E.CUDA_ERROR_INVALID_DEVICE,
                       f"P2P attributes link two different devices; both are {s}")
        key = attrib.name.removeprefix("CU_DEVICE_P2P_ATTRIBUTE_")
        if key not in _profile.P2P_ATTRIBUTES:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{attrib.name} is not known to the CPU device's profile")
        return _profile.P2P_ATTRIBUTES[key]
