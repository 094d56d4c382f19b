"""``cudaDeviceProp`` as the runtime fills it, from the driver's answers.

The runtime's properties are the driver's device attributes under other
names, plus the name, memory size and UUID the driver reports by their own
calls.  Two runtimes build the struct: the CPU device's (over its driver) and
the stand-in ``libcudart`` on a GPU (over NVIDIA's driver, where NVIDIA's
runtime is not used), so both read one table.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from cuda.bindings.driver import CUdevice_attribute, CUresult
from cuda.bindings.runtime import cudaDeviceProp, cudaUUID_t

# cudaDeviceProp field -> CUdevice_attribute name (without the prefix)
PROP_ATTRIBUTES = {
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
    "accessPolicyMaxWindowSize": "MAX_ACCESS_POLICY_WINDOW_SIZE",
    "canUseHostPointerForRegisteredMem": "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM",
    "computePreemptionSupported": "COMPUTE_PREEMPTION_SUPPORTED",
    "concurrentManagedAccess": "CONCURRENT_MANAGED_ACCESS",
    "deferredMappingCudaArraySupported": "DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED",
    "deviceNumaConfig": "NUMA_CONFIG",
    "deviceNumaId": "NUMA_ID",
    "directManagedMemAccessFromHost": "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST",
    "gpuDirectRDMAFlushWritesOptions": "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS",
    "gpuDirectRDMASupported": "GPU_DIRECT_RDMA_SUPPORTED",
    "gpuDirectRDMAWritesOrdering": "GPU_DIRECT_RDMA_WRITES_ORDERING",
    "gpuPciDeviceID": "GPU_PCI_DEVICE_ID",
    "gpuPciSubsystemID": "GPU_PCI_SUBSYSTEM_ID",
    "hostNativeAtomicSupported": "HOST_NATIVE_ATOMIC_SUPPORTED",
    "hostNumaId": "HOST_NUMA_ID",
    "hostNumaMultinodeIpcSupported": "HOST_NUMA_MULTINODE_IPC_SUPPORTED",
    "hostRegisterReadOnlySupported": "READ_ONLY_HOST_REGISTER_SUPPORTED",
    "hostRegisterSupported": "HOST_REGISTER_SUPPORTED",
    "ipcEventSupported": "IPC_EVENT_SUPPORTED",
    "memoryPoolSupportedHandleTypes": "MEMPOOL_SUPPORTED_HANDLE_TYPES",
    "mpsEnabled": "MPS_ENABLED",
    "pageableMemoryAccess": "PAGEABLE_MEMORY_ACCESS",
    "pageableMemoryAccessUsesHostPageTables": "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES",
    "persistingL2CacheMaxSize": "MAX_PERSISTING_L2_CACHE_SIZE",
    "sparseCudaArraySupported": "SPARSE_CUDA_ARRAY_SUPPORTED",
    "timelineSemaphoreInteropSupported": "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED",
    "unifiedFunctionPointers": "UNIFIED_FUNCTION_POINTERS",
    "maxTexture1D": "MAXIMUM_TEXTURE1D_WIDTH",
    "maxTexture1DMipmap": "MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH",
    "maxTextureCubemap": "MAXIMUM_TEXTURECUBEMAP_WIDTH",
    "maxSurface1D": "MAXIMUM_SURFACE1D_WIDTH",
    "maxSurfaceCubemap": "MAXIMUM_SURFACECUBEMAP_WIDTH",
}

# cudaDeviceProp array field -> the CUdevice_attribute names of its elements
PROP_ARRAYS = {
    "maxThreadsDim": ("MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z"),
    "maxGridSize": ("MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z"),
    "maxTexture2D": ("MAXIMUM_TEXTURE2D_WIDTH", "MAXIMUM_TEXTURE2D_HEIGHT"),
    "maxTexture2DMipmap": ("MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH",
                           "MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT"),
    "maxTexture2DLinear": ("MAXIMUM_TEXTURE2D_LINEAR_WIDTH", "MAXIMUM_TEXTURE2D_LINEAR_HEIGHT",
                           "MAXIMUM_TEXTURE2D_LINEAR_PITCH"),
    "maxTexture2DGather": ("MAXIMUM_TEXTURE2D_GATHER_WIDTH", "MAXIMUM_TEXTURE2D_GATHER_HEIGHT"),
    "maxTexture3D": ("MAXIMUM_TEXTURE3D_WIDTH", "MAXIMUM_TEXTURE3D_HEIGHT",
                     "MAXIMUM_TEXTURE3D_DEPTH"),
    "maxTexture3DAlt": ("MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE", "MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE",
                        "MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE"),
    "maxTexture1DLayered": ("MAXIMUM_TEXTURE1D_LAYERED_WIDTH", "MAXIMUM_TEXTURE1D_LAYERED_LAYERS"),
    "maxTexture2DLayered": ("MAXIMUM_TEXTURE2D_LAYERED_WIDTH", "MAXIMUM_TEXTURE2D_LAYERED_HEIGHT",
                            "MAXIMUM_TEXTURE2D_LAYERED_LAYERS"),
    "maxTextureCubemapLayered": ("MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH",
                                 "MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS"),
    "maxSurface2D": ("MAXIMUM_SURFACE2D_WIDTH", "MAXIMUM_SURFACE2D_HEIGHT"),
    "maxSurface3D": ("MAXIMUM_SURFACE3D_WIDTH", "MAXIMUM_SURFACE3D_HEIGHT",
                     "MAXIMUM_SURFACE3D_DEPTH"),
    "maxSurface1DLayered": ("MAXIMUM_SURFACE1D_LAYERED_WIDTH", "MAXIMUM_SURFACE1D_LAYERED_LAYERS"),
    "maxSurface2DLayered": ("MAXIMUM_SURFACE2D_LAYERED_WIDTH", "MAXIMUM_SURFACE2D_LAYERED_HEIGHT",
                            "MAXIMUM_SURFACE2D_LAYERED_LAYERS"),
    "maxSurfaceCubemapLayered": ("MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH",
                                 "MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS"),
}

PROP_FIELDS_NOT_ATTRIBUTES = frozenset({
    "name", "totalGlobalMem", "uuid", "luid", "luidDeviceNodeMask", "reserved",
})
"""cudaDeviceProp fields no device attribute answers: set from the driver's own
calls (name, memory, UUID) or left as the runtime leaves them on Linux (LUID: Windows)."""


def device_properties(driver: Any, ordinal: int,
                      check: Callable[[tuple[Any, ...]], Any]) -> cudaDeviceProp:
    """The properties of device ``ordinal`` asked of ``driver`` (a module or
    object with cuda-bindings' driver calls); ``check`` turns a failed call
    into the caller's error.  An attribute the driver does not know (a driver
    older than these bindings answers CUDA_ERROR_INVALID_VALUE) is left 0, as
    a runtime of the driver's own age would leave a field it lacks."""
    dev = check(driver.cuDeviceGet(ordinal))
    prop = cudaDeviceProp()
    prop.name = bytes(check(driver.cuDeviceGetName(256, dev))).split(b"\0")[0].ljust(256, b"\0")
    prop.totalGlobalMem = int(check(driver.cuDeviceTotalMem(dev)))
    uuid = cudaUUID_t()
    ctypes.memmove(uuid.getPtr(), check(driver.cuDeviceGetUuid(dev)).bytes, 16)
    prop.uuid = uuid

    def get(name: str) -> int:
        result = driver.cuDeviceGetAttribute(
            getattr(CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), dev)
        if result[0] == CUresult.CUDA_ERROR_INVALID_VALUE:
            return 0
        return int(check(result))

    for field, name in PROP_ATTRIBUTES.items():
        setattr(prop, field, get(name))
    for field, names in PROP_ARRAYS.items():
        setattr(prop, field, [get(n) for n in names])
    return prop
