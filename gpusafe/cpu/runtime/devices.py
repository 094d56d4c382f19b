"""Errors, versions and the device (``cudaGetError*``, ``cudaGetLastError``,
``cuda*GetVersion``, ``cudaGetDevice*``, ``cudaSetDevice``,
``cudaDeviceSynchronize``, ``cudaDeviceReset``, ``cudaDevice{Get,Set}Limit``).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import CUdevice, CUdevice_attribute, CUlimit, CUresult
from cuda.bindings.runtime import cudaDeviceProp, cudaError_t, cudaLimit

from ...cudaapi import args as _args
from .. import driver_profile as _profile
from .base import Fail, RuntimeBase, api, check, device_ordinal

_OK = cudaError_t.cudaSuccess

# cudaDeviceProp field -> CUdevice_attribute name (without the prefix)
_PROP_ATTRIBUTES = {
    "sharedMemPerBlock": "MAX_SHARED_MEMORY_PER_BLOCK",
    "regsPerBlock": "MAX_REGISTERS_PER_BLOCK",
    "warpSize": "WARP_SIZE",
    "memPitch": "MAX_PITCH",
    "maxThreadsPerBlock": "MAX_THREADS_PER_BLOCK",
    "totalConstMem": "TOTAL_CONSTANT_MEMORY",
    "major": "COMPUTE_CAPABILITY_MAJOR",
    "minor": "COMPUTE_CAPABILITY_MINOR",
    "textureAlignment": "TEXTURE_ALIGNMENT",
    "texturePitchAlignment": "TEXTURE_PITCH_ALIGNMENT",
    "multiProcessorCount": "MULTIPROCESSOR_COUNT",
    "integrated": "INTEGRATED",
    "canMapHostMemory": "CAN_MAP_HOST_MEMORY",
    "surfaceAlignment": "SURFACE_ALIGNMENT",
    "concurrentKernels": "CONCURRENT_KERNELS",
    "ECCEnabled": "ECC_ENABLED",
    "pciBusID": "PCI_BUS_ID",
    "pciDeviceID": "PCI_DEVICE_ID",
    "pciDomainID": "PCI_DOMAIN_ID",
    "tccDriver": "TCC_DRIVER",
    "asyncEngineCount": "ASYNC_ENGINE_COUNT",
    "unifiedAddressing": "UNIFIED_ADDRESSING",
    "memoryBusWidth": "GLOBAL_MEMORY_BUS_WIDTH",
    "l2CacheSize": "L2_CACHE_SIZE",
    "maxThreadsPerMultiProcessor": "MAX_THREADS_PER_MULTIPROCESSOR",
    "streamPrioritiesSupported": "STREAM_PRIORITIES_SUPPORTED",
    "globalL1CacheSupported": "GLOBAL_L1_CACHE_SUPPORTED",
    "localL1CacheSupported": "LOCAL_L1_CACHE_SUPPORTED",
    "sharedMemPerMultiprocessor": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "regsPerMultiprocessor": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "managedMemory": "MANAGED_MEMORY",
    "isMultiGpuBoard": "MULTI_GPU_BOARD",
    "multiGpuBoardGroupID": "MULTI_GPU_BOARD_GROUP_ID",
    "cooperativeLaunch": "COOPERATIVE_LAUNCH",
    "sharedMemPerBlockOptin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "maxBlocksPerMultiProcessor": "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "reservedSharedMemPerBlock": "RESERVED_SHARED_MEMORY_PER_BLOCK",
    "memoryPoolsSupported": "MEMORY_POOLS_SUPPORTED",
    "clusterLaunch": "CLUSTER_LAUNCH",
}


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
        drv = self.driver
        dev = check(drv.cuDeviceGet(d))
        prop = cudaDeviceProp()
        prop.name = _profile.DEVICE_NAME.encode().ljust(256, b"\0")
        prop.totalGlobalMem = int(check(drv.cuDeviceTotalMem(dev)))

        def get(name: str) -> int:
            return int(check(drv.cuDeviceGetAttribute(
                getattr(CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), dev)))

        for field, name in _PROP_ATTRIBUTES.items():
            setattr(prop, field, get(name))
        prop.maxThreadsDim = [get(f"MAX_BLOCK_DIM_{c}") for c in "XYZ"]
        prop.maxGridSize = [get(f"MAX_GRID_DIM_{c}") for c in "XYZ"]
        return prop

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
