"""The CPU device's profile: what ``gpusafe.cpu.driver`` reports about each of its devices
(alike but for name, UUID and PCI bus).

The CPU device presents itself as **one compute capability 9.0 (sm_90) device**:

* CC 9.0 is the newest target the pinned CUDA 13.0 toolchain's corpus is built
  for (``compute_75``/``compute_80``/``compute_90``), so PTX a program compiles
  for "the device's" architecture (``--gpu-architecture=compute_{major}{minor}``,
  the cuda-python idiom) is PTX the CPU device accepts, and every older target
  loads too, as on a real sm_90 GPU. PTX whose ``.target`` is newer than sm_90
  is refused (``CUDA_ERROR_INVALID_PTX``), as a real sm_90 device's JIT would.
* The driver version is 13.0 (``13000``); PTX ISA versions above 9.0 (the
  newest that CUDA 13.0 knows) are refused with
  ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``.
* Launch limits are the real sm_90 ones: 1024 threads per block (1024, 1024,
  64), grids of (2^31-1, 65535, 65535), 48 KiB of shared memory per block by
  default and 227 KiB with the ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` opt-in, warp
  size 32, 64 Ki registers per block, 64 KiB of constant memory.
* ``MULTIPROCESSOR_COUNT`` is 8 (not a real part's 132): programs that size a
  grid-stride launch by the SM count keep a CPU-sized grid.
* Every ``CUdevice_attribute`` member has its value here.  Memory kinds the
  CPU device provides say so: unified addressing, mapped (zero-copy) and
  registered host memory, managed memory, memory pools, virtual memory
  management, cooperative launches.  Features it does not provide report 0:
  cluster launches, concurrent kernels and copy engines (execution is synchronous),
  textures/surfaces (every size limit 0), IPC, TMA, stream priorities.
"""

from __future__ import annotations

DEVICE_NAME = "gpusafe CPU device (sm_90)"
CC_MAJOR, CC_MINOR = 9, 0
DRIVER_VERSION = 13000  # 1000 * major + 10 * minor: CUDA 13.0
MAX_PTX_ISA = (9, 0)  # the newest PTX ISA CUDA 13.0 accepts
MAX_SM_TARGET = 90  # .target sm_NN above this is refused
PCI_BUS_ID = "0000:00:00.0"
MAX_DEVICES = 16  # `gpusafe run --cpu-devices N` gives a process N CPU devices
UUID_PREFIX = b"gpusafe-cpu-dv\0"  # + the ordinal: the 16 bytes of cuDeviceGetUuid


def device_name(ordinal: int) -> str:
    """Device 0 is :data:`DEVICE_NAME`; the others say their ordinal (names
    differ, as a program listing its devices expects)."""
    return DEVICE_NAME if ordinal == 0 else DEVICE_NAME.replace(" (", f" #{ordinal} (", 1)


def pci_bus_id(ordinal: int) -> str:
    """One bus per device: ``0000:BB:00.0`` with BB the ordinal."""
    return f"0000:{ordinal:02x}:00.0"


def device_uuid(ordinal: int) -> bytes:
    return UUID_PREFIX + bytes([ordinal & 0xFF])


P2P_ATTRIBUTES = {
    "PERFORMANCE_RANK": 0,
    "ACCESS_SUPPORTED": 1,  # between any two CPU devices: one memory underneath
    "NATIVE_ATOMIC_SUPPORTED": 1,  # atomics are the executor's, whoever's memory it is
    "ACCESS_ACCESS_SUPPORTED": 0,  # the old name of CUDA_ARRAY_ACCESS_SUPPORTED (same value)
    "CUDA_ARRAY_ACCESS_SUPPORTED": 0,  # no CUDA arrays reached through peer access
    "ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED": 0,
}
"""``cuDeviceGetP2PAttribute`` between two different CPU devices (the
``CU_DEVICE_P2P_ATTRIBUTE_`` names without their prefix)."""

DEFAULT_SHARED_PER_BLOCK = 48 * 1024
OPTIN_SHARED_PER_BLOCK = 227 * 1024
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
WARP_SIZE = 32

# Context limits (CUlimit) and their defaults on a real sm_90 driver.
DEFAULT_LIMITS = {
    "CU_LIMIT_STACK_SIZE": 1024,
    "CU_LIMIT_PRINTF_FIFO_SIZE": 1 << 20,
    "CU_LIMIT_MALLOC_HEAP_SIZE": 8 << 20,
    "CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH": 2,
    "CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT": 2048,
    "CU_LIMIT_MAX_L2_FETCH_GRANULARITY": 64,
    "CU_LIMIT_PERSISTING_L2_CACHE_SIZE": 0,
}

#: Every CUdevice_attribute member (without the CU_DEVICE_ATTRIBUTE_ prefix)
#: -> its value; ``tests/test_cpu_attributes.py`` keeps this table complete
#: against cuda-bindings' enum, so no attribute answers by omission.  A
#: feature says 1 only where the CPU device really provides it.
DEVICE_ATTRIBUTES: dict[str, int] = {
    # launch limits (the real sm_90 ones, see the module docstring)
    "MAX_THREADS_PER_BLOCK": MAX_THREADS_PER_BLOCK,
    "MAX_BLOCK_DIM_X": MAX_BLOCK_DIM[0],
    "MAX_BLOCK_DIM_Y": MAX_BLOCK_DIM[1],
    "MAX_BLOCK_DIM_Z": MAX_BLOCK_DIM[2],
    "MAX_GRID_DIM_X": MAX_GRID_DIM[0],
    "MAX_GRID_DIM_Y": MAX_GRID_DIM[1],
    "MAX_GRID_DIM_Z": MAX_GRID_DIM[2],
    "MAX_SHARED_MEMORY_PER_BLOCK": DEFAULT_SHARED_PER_BLOCK,
    "TOTAL_CONSTANT_MEMORY": 64 * 1024,
    "WARP_SIZE": WARP_SIZE,
    "MAX_PITCH": 2**31 - 1,
    "MAX_REGISTERS_PER_BLOCK": 65536,
    "CLOCK_RATE": 1_000_000,  # kHz, nominal
    "MULTIPROCESSOR_COUNT": 8,
    "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 228 * 1024,
    "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": OPTIN_SHARED_PER_BLOCK,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 32,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024,
    "COMPUTE_CAPABILITY_MAJOR": CC_MAJOR,
    "COMPUTE_CAPABILITY_MINOR": CC_MINOR,
    "SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO": 2,
    "GLOBAL_L1_CACHE_SUPPORTED": 1,
    "LOCAL_L1_CACHE_SUPPORTED": 1,
    "L2_CACHE_SIZE": 50 * 1024 * 1024,
    "MEMORY_CLOCK_RATE": 1_000_000,  # kHz, nominal
    "GLOBAL_MEMORY_BUS_WIDTH": 64,
    "MEM_SYNC_DOMAIN_COUNT": 1,
    # the system around the device
    "KERNEL_EXEC_TIMEOUT": 0,
    "INTEGRATED": 0,
    "COMPUTE_MODE": 0,  # CU_COMPUTEMODE_DEFAULT
    "ECC_ENABLED": 0,
    "PCI_BUS_ID": 0,
    "PCI_DEVICE_ID": 0,
    "PCI_DOMAIN_ID": 0,
    "GPU_PCI_DEVICE_ID": 0,
    "GPU_PCI_SUBSYSTEM_ID": 0,
    "TCC_DRIVER": 0,
    "MULTI_GPU_BOARD": 0,
    "MULTI_GPU_BOARD_GROUP_ID": 0,
    "NUMA_CONFIG": 0,  # CU_DEVICE_NUMA_CONFIG_NONE
    "NUMA_ID": -1,
    "HOST_NUMA_ID": -1,
    "MPS_ENABLED": 0,
    # execution: synchronous, so nothing overlaps and there is no preemption
    "GPU_OVERLAP": 0,
    "CONCURRENT_KERNELS": 0,
    "ASYNC_ENGINE_COUNT": 0,
    "STREAM_PRIORITIES_SUPPORTED": 0,
    "COMPUTE_PREEMPTION_SUPPORTED": 0,
    "COOPERATIVE_LAUNCH": 1,
    "COOPERATIVE_MULTI_DEVICE_LAUNCH": 0,
    "CLUSTER_LAUNCH": 0,
    "UNIFIED_FUNCTION_POINTERS": 0,
    "CAN_USE_STREAM_MEM_OPS_V1": 0,
    "CAN_USE_64_BIT_STREAM_MEM_OPS_V1": 0,
    "CAN_USE_STREAM_WAIT_VALUE_NOR_V1": 0,
    "CAN_USE_64_BIT_STREAM_MEM_OPS": 0,
    "CAN_USE_STREAM_WAIT_VALUE_NOR": 0,
    "CAN_FLUSH_REMOTE_WRITES": 0,
    # memory kinds (gpusafe/cpu/driver/memory_kinds.py, pools.py)
    "UNIFIED_ADDRESSING": 1,  # one address space: cuMemcpy infers the direction
    "CAN_MAP_HOST_MEMORY": 1,  # pinned host memory is device memory too
    "HOST_REGISTER_SUPPORTED": 1,  # cuMemHostRegister maps program memory
    "READ_ONLY_HOST_REGISTER_SUPPORTED": 0,  # CU_MEMHOSTREGISTER_READ_ONLY is refused
    "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0,  # registered memory has its own device address
    "MANAGED_MEMORY": 1,
    # execution is synchronous, so the host may touch managed memory at any
    # time and sees every write a finished kernel made
    "CONCURRENT_MANAGED_ACCESS": 1,
    "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST": 1,
    "PAGEABLE_MEMORY_ACCESS": 0,  # a kernel cannot reach malloc'ed host memory
    "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES": 0,
    "HOST_NATIVE_ATOMIC_SUPPORTED": 0,
    "ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED": 0,
    "MEMORY_POOLS_SUPPORTED": 1,  # cuMemAllocAsync, cuMemPool*, cudaMallocFromPoolAsync
    "MEMPOOL_SUPPORTED_HANDLE_TYPES": 0,  # no IPC handles
    "VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED": 1,  # cuMemCreate, cuMemMap, ...: vmm.py
    "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED": 0,
    "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": 0,
    "HANDLE_TYPE_WIN32_HANDLE_SUPPORTED": 0,
    "HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED": 0,
    "HANDLE_TYPE_FABRIC_SUPPORTED": 0,
    "GENERIC_COMPRESSION_SUPPORTED": 0,
    "MAX_PERSISTING_L2_CACHE_SIZE": 0,  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE stays 0
    "MAX_ACCESS_POLICY_WINDOW_SIZE": 0,
    "GPU_DIRECT_RDMA_SUPPORTED": 0,
    "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS": 0,
    "GPU_DIRECT_RDMA_WRITES_ORDERING": 0,
    "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED": 0,
    "DMA_BUF_SUPPORTED": 0,
    "IPC_EVENT_SUPPORTED": 0,
    "MULTICAST_SUPPORTED": 0,
    "D3D12_CIG_SUPPORTED": 0,
    "VULKAN_CIG_SUPPORTED": 0,
    "MEM_DECOMPRESS_ALGORITHM_MASK": 0,
    "MEM_DECOMPRESS_MAXIMUM_LENGTH": 0,
    "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": 0,
    "HOST_NUMA_MEMORY_POOLS_SUPPORTED": 0,
    "HOST_NUMA_MULTINODE_IPC_SUPPORTED": 0,
    "HOST_MEMORY_POOLS_SUPPORTED": 0,
    "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": 0,
    "HOST_ALLOC_DMA_BUF_SUPPORTED": 0,
    # textures, surfaces and CUDA arrays (gpusafe.cpu.driver.arrays, .textures):
    # the limits of a compute capability 9.0 device; mipmapped arrays are not
    # supported, so their limits are 0
    "TEXTURE_ALIGNMENT": 512,
    "TEXTURE_PITCH_ALIGNMENT": 32,
    "SURFACE_ALIGNMENT": 512,
    "CAN_TEX2D_GATHER": 1,
    "TENSOR_MAP_ACCESS_SUPPORTED": 0,
    "SPARSE_CUDA_ARRAY_SUPPORTED": 0,
    "DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED": 0,
}
for _shape, _limit in (
        ("TEXTURE1D_WIDTH", 131072), ("TEXTURE2D_WIDTH", 131072), ("TEXTURE2D_HEIGHT", 65536),
        ("TEXTURE3D_WIDTH", 16384), ("TEXTURE3D_HEIGHT", 16384), ("TEXTURE3D_DEPTH", 16384),
        ("TEXTURE2D_LAYERED_WIDTH", 32768), ("TEXTURE2D_LAYERED_HEIGHT", 32768),
        ("TEXTURE2D_LAYERED_LAYERS", 2048), ("TEXTURE1D_LAYERED_WIDTH", 32768),
        ("TEXTURE1D_LAYERED_LAYERS", 2048), ("TEXTURE2D_GATHER_WIDTH", 32768),
        ("TEXTURE2D_GATHER_HEIGHT", 32768), ("TEXTURE3D_WIDTH_ALTERNATE", 8192),
        ("TEXTURE3D_HEIGHT_ALTERNATE", 8192), ("TEXTURE3D_DEPTH_ALTERNATE", 32768),
        ("TEXTURECUBEMAP_WIDTH", 32768), ("TEXTURECUBEMAP_LAYERED_WIDTH", 32768),
        ("TEXTURECUBEMAP_LAYERED_LAYERS", 2046), ("SURFACE1D_WIDTH", 32768),
        ("SURFACE2D_WIDTH", 131072), ("SURFACE2D_HEIGHT", 65536), ("SURFACE3D_WIDTH", 16384),
        ("SURFACE3D_HEIGHT", 16384), ("SURFACE3D_DEPTH", 16384),
        ("SURFACE1D_LAYERED_WIDTH", 32768), ("SURFACE1D_LAYERED_LAYERS", 2048),
        ("SURFACE2D_LAYERED_WIDTH", 32768), ("SURFACE2D_LAYERED_HEIGHT", 32768),
        ("SURFACE2D_LAYERED_LAYERS", 2048), ("SURFACECUBEMAP_WIDTH", 32768),
        ("SURFACECUBEMAP_LAYERED_WIDTH", 32768), ("SURFACECUBEMAP_LAYERED_LAYERS", 2046),
        ("TEXTURE1D_LINEAR_WIDTH", 1 << 28), ("TEXTURE2D_LINEAR_WIDTH", 131072),
        ("TEXTURE2D_LINEAR_HEIGHT", 65000), ("TEXTURE2D_LINEAR_PITCH", 2097120),
        ("TEXTURE2D_MIPMAPPED_WIDTH", 0), ("TEXTURE2D_MIPMAPPED_HEIGHT", 0),
        ("TEXTURE1D_MIPMAPPED_WIDTH", 0)):
    DEVICE_ATTRIBUTES[f"MAXIMUM_{_shape}"] = _limit
del _shape, _limit

#: CUresults after which a real context is unusable: every later call in that
#: context returns the same error ("sticky" errors).
STICKY_RESULTS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
})

#: cuGetErrorString texts (those of the real driver). A code not listed here
#: gets its name, e.g. "CUDA_ERROR_STUB_LIBRARY".
ERROR_STRINGS: dict[str, str] = {
    "CUDA_SUCCESS": "no error",
    "CUDA_ERROR_INVALID_VALUE": "invalid argument",
    "CUDA_ERROR_OUT_OF_MEMORY": "out of memory",
    "CUDA_ERROR_NOT_INITIALIZED": "initialization error",
    "CUDA_ERROR_DEINITIALIZED": "driver shutting down",
    "CUDA_ERROR_PROFILER_DISABLED": "profiler disabled while using external profiling tool",
    "CUDA_ERROR_STUB_LIBRARY": "CUDA driver is a stub library",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "CUDA-capable device(s) is/are busy or unavailable",
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable device is detected",
    "CUDA_ERROR_INVALID_DEVICE": "invalid device ordinal",
    "CUDA_ERROR_DEVICE_NOT_LICENSED": "device doesn't have valid Grid license",
    "CUDA_ERROR_INVALID_IMAGE": "device kernel image is invalid",
    "CUDA_ERROR_INVALID_CONTEXT": "invalid device context",
    "CUDA_ERROR_CONTEXT_ALREADY_CURRENT": "context already current",
    "CUDA_ERROR_MAP_FAILED": "mapping of buffer object failed",
    "CUDA_ERROR_UNMAP_FAILED": "unmapping of buffer object failed",
    "CUDA_ERROR_ARRAY_IS_MAPPED": "array is mapped",
    "CUDA_ERROR_ALREADY_MAPPED": "resource already mapped",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "no kernel image is available for execution on the device",
    "CUDA_ERROR_ALREADY_ACQUIRED": "resource already acquired",
    "CUDA_ERROR_NOT_MAPPED": "resource not mapped",
    "CUDA_ERROR_NOT_MAPPED_AS_ARRAY": "resource not mapped as array",
    "CUDA_ERROR_NOT_MAPPED_AS_POINTER": "resource not mapped as pointer",
    "CUDA_ERROR_ECC_UNCORRECTABLE": "uncorrectable ECC error encountered",
    "CUDA_ERROR_UNSUPPORTED_LIMIT": "limit is not supported on this architecture",
    "CUDA_ERROR_CONTEXT_ALREADY_IN_USE": ("exclusive-thread device already in use by a different "
                                          "thread"),
    "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED": "peer access is not supported between these two devices",
    "CUDA_ERROR_INVALID_PTX": "a PTX JIT compilation failed",
    "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT": "invalid OpenGL or DirectX context",
    "CUDA_ERROR_NVLINK_UNCORRECTABLE": "uncorrectable NVLink error detected during the execution",
    "CUDA_ERROR_JIT_COMPILER_NOT_FOUND": "PTX JIT compiler library not found",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": ("the provided PTX was compiled with an unsupported "
                                           "toolchain."),
    "CUDA_ERROR_JIT_COMPILATION_DISABLED": "PTX JIT compilation was disabled",
    "CUDA_ERROR_INVALID_SOURCE": "device kernel image is invalid",
    "CUDA_ERROR_FILE_NOT_FOUND": "file not found",
    "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND": "shared object symbol not found",
    "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED": "shared object initialization failed",
    "CUDA_ERROR_OPERATING_SYSTEM": "OS call failed or operation not supported on this OS",
    "CUDA_ERROR_INVALID_HANDLE": "invalid resource handle",
    "CUDA_ERROR_ILLEGAL_STATE": "the operation cannot be performed in the present state",
    "CUDA_ERROR_NOT_FOUND": "named symbol not found",
    "CUDA_ERROR_NOT_READY": "device not ready",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "an illegal memory access was encountered",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "too many resources requested for launch",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "the launch timed out and was terminated",
    "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING": "launch uses incompatible texturing mode",
    "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED": "peer access is already enabled",
    "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED": "peer access has not been enabled",
    "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE": "cannot set while device is active in this process",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": "context is destroyed",
    "CUDA_ERROR_ASSERT": "device-side assert triggered",
    "CUDA_ERROR_TOO_MANY_PEERS": "peer mapping resources exhausted",
    "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED":
        "part or all of the requested memory range is already mapped",
    "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED": ("pointer does not correspond to a registered memory "
                                              "region"),
    "CUDA_ERROR_HARDWARE_STACK_ERROR": "hardware stack error",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "an illegal instruction was encountered",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "misaligned address",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE": "operation not supported on global/shared address space",
    "CUDA_ERROR_INVALID_PC": "invalid program counter",
    "CUDA_ERROR_LAUNCH_FAILED": "unspecified launch failure",
    "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE": "too many blocks in cooperative launch",
    "CUDA_ERROR_NOT_PERMITTED": "operation not permitted",
    "CUDA_ERROR_NOT_SUPPORTED": "operation not supported",
    "CUDA_ERROR_SYSTEM_NOT_READY": "system not yet initialized",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": ("system has unsupported display driver / cuda driver "
                                          "combination"),
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE":
        "forward compatibility was attempted on non supported HW",
    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED": "operation not permitted when stream is capturing",
    "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED": ("operation failed due to a previous error during "
                                              "capture"),
    "CUDA_ERROR_TIMEOUT": "wait operation timed out",
    "CUDA_ERROR_UNKNOWN": "unknown error",
}
