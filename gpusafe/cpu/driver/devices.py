"""Initialisation, versions, error names and the device's attributes
(``cuInit``, ``cuDriverGetVersion``, ``cuGetError*``, ``cuDevice*``): what the
device says about itself comes from :mod:`gpusafe.cpu.driver_profile`.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import CUdevice, CUdevice_attribute, CUresult

from ...cudaapi import args as _args
from .. import driver_profile as _profile
from .api import api
from .state import DriverBase, E, Fail, check_device, device_ordinal


class DeviceCalls(DriverBase):
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
        return 1

    @api(1)
    def cuDeviceGet(self, ordinal: Any) -> CUdevice:
        o = _args.c_int(ordinal, "int", "ordinal")
        self._require_init()
        check_device(o)
        return CUdevice(0)

    @api(1)
    def cuDeviceGetName(self, length: Any, dev: Any) -> bytes:
        n = _args.c_int(length, "int", "length")
        d = device_ordinal(dev)
        self._require_init()
        check_device(d)
        if n <= 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "length must be positive")
        # cuda-python returns the whole b" " * length buffer the driver wrote into
        name = _profile.DEVICE_NAME.encode()[: n - 1] + b"\0"
        return name + b" " * (n - len(name))

    @api(1)
    def cuDeviceGetAttribute(self, attrib: Any, dev: Any) -> int:
        attrib = _args.require_enum(attrib, CUdevice_attribute, "attrib")
        d = device_ordinal(dev)
        self._require_init()
        check_device(d)
        if attrib == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "CU_DEVICE_ATTRIBUTE_MAX is not an attribute")
        key = attrib.name[len("CU_DEVICE_ATTRIBUTE_"):]
        if key not in _profile.DEVICE_ATTRIBUTES:  # a cuda-bindings newer than the profile
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{attrib.name} is not known to the CPU device's profile")
        return int(_profile.DEVICE_ATTRIBUTES[key])

    @api(1)
    def cuDeviceTotalMem(self, dev: Any) -> int:
        d = device_ordinal(dev)
        self._require_init()
        check_device(d)
        return int(self._memory.capacity)

    @api(2)
    def cuDeviceComputeCapability(self, dev: Any) -> tuple[int, int]:
        d = device_ordinal(dev)
        self._require_init()
        check_device(d)
        return _profile.CC_MAJOR, _profile.CC_MINOR

    @api(1)
    def cuDeviceGetPCIBusId(self, length: Any, dev: Any) -> bytes:
        n = _args.c_int(length, "int", "length")
        d = device_ordinal(dev)
        self._require_init()
        check_device(d)
        if n <= 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "length must be positive")
        text = _profile.PCI_BUS_ID.encode()[: n - 1] + b"\0"
        return text + b" " * (n - len(text))
