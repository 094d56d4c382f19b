"""The cuda-python runtime API (``cuda.bindings.runtime``) on the CPU device.

A program written for ``cuda.bindings.runtime`` runs unchanged on the CPU
device when it imports this module instead::

    from gpusafe.cpu import runtime          # instead of: from cuda.bindings import runtime

It is a thin layer over :mod:`gpusafe.cpu.driver`, as the real runtime is a
layer over the real driver: one device memory, so a pointer from
``cudaMalloc`` is a ``CUdeviceptr`` that ``cuLaunchKernel`` accepts, and the
runtime works in whatever context is current to the calling thread.

Conventions are cuda-python's (13.x): every call returns ``(cudaError_t,
*outputs)``, the outputs ``None`` on failure; the types and enums
(``cudaError_t``, ``cudaMemcpyKind``, ``cudaStream_t``, ``cudaEvent_t``,
``cudaDeviceProp``, ...) *are* cuda-python's: every non-function name of
``cuda.bindings.runtime`` is re-exported from here.

Decisions:

* **Implicit primary context.** A call that needs a context, made on a thread
  with no current context, initialises the driver (``cuInit``), retains the
  device's primary context and makes it current (``cuDevicePrimaryCtxRetain``
  + ``cuCtxSetCurrent``), as the real runtime does. A context the program made
  current through the driver API is used as it is. ``cudaSetDevice(0)`` makes
  the primary context current; ``cudaDeviceReset`` resets it
  (``cuDevicePrimaryCtxReset``: its allocations, modules and streams go).
* **Errors.** A driver ``CUresult`` becomes the ``cudaError_t`` of the same
  value (the runtime's codes were aligned with the driver's: invalid value,
  out of memory -> ``cudaErrorMemoryAllocation``, invalid handle ->
  ``cudaErrorInvalidResourceHandle``, invalid PTX, illegal address, ...);
  a code without a runtime twin is ``cudaErrorUnknown``. Every failing call
  sets the thread's last error (``cudaGetLastError`` reads and clears it,
  ``cudaPeekAtLastError`` only reads it).
  :func:`gpusafe.cpu.driver.last_error_detail` explains the failure.
* ``cudaMalloc(0)`` succeeds with a null pointer and ``cudaFree(0)`` does
  nothing (the runtime's documented behaviour; ``cudaFree(0)`` is the usual way
  to force context creation).
* ``cudaMallocPitch`` rounds the row width up to 512 bytes (the real devices'
  texture pitch alignment).
* ``cudaMemcpy*`` follows ``kind``; ``cudaMemcpyDefault`` infers each side from
  the address (unified addressing), as ``cuMemcpy`` does. Host buffers are
  what cuda-python accepts (``int`` addresses, buffer-protocol objects); a
  buffer shorter than ``count`` is ``cudaErrorInvalidValue``.
* **Unimplemented functions are absent**, as in :mod:`gpusafe.cpu.driver`:
  ``cudaMallocManaged`` (the CPU device has no managed memory), the library
  and graph APIs, 2D/3D copies, arrays, textures, ... raise
  ``AttributeError`` naming the function; under ``gpusafe run`` the
  interposer turns them into ``NotImplementedError``. ``IMPLEMENTED`` lists
  what is implemented. cuda-bindings 13 has no ``cudaLaunchKernel``; kernels
  are launched through the driver API (``cuModuleLoadData`` +
  ``cuLaunchKernel``) with runtime pointers as arguments.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

from cuda.bindings import runtime as _real

from ..cudaapi import args as _args
from . import driver as _drv
from . import driver_profile as _profile
from .bindings import reexport

#: Names of the functions of cuda.bindings.runtime (implemented here or not).
REAL_FUNCTIONS = reexport(_real, "cuda", globals())

cudaError_t = _real.cudaError_t
cudaMemcpyKind = _real.cudaMemcpyKind
cudaStream_t = _real.cudaStream_t
cudaEvent_t = _real.cudaEvent_t
cudaDeviceProp = _real.cudaDeviceProp

_OK = cudaError_t.cudaSuccess
_CU = _drv.CUresult
PITCH_ALIGNMENT = 512

IMPLEMENTED: set[str] = set()


class _Fail(Exception):
    def __init__(self, error: cudaError_t) -> None:
        super().__init__(error.name)
        self.error = error


_tls = threading.local()


def to_cuda_error(result) -> cudaError_t:
    """The runtime's error code for a driver ``CUresult``."""
    try:
        return cudaError_t(int(result))
    except ValueError:
        return cudaError_t.cudaErrorUnknown


def _check(result: tuple):
    """The outputs of a driver call, or _Fail with its runtime error."""
    if result[0] != _CU.CUDA_SUCCESS:
        raise _Fail(to_cuda_error(result[0]))
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def _api(n_out: int, records: bool = True) -> Callable:
    def deco(fn):
        assert fn.__name__ in REAL_FUNCTIONS, fn.__name__
        IMPLEMENTED.add(fn.__name__)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                out = fn(*args, **kwargs)
            except _Fail as f:
                if records:
                    _tls.last_error = f.error
                return (f.error,) + (None,) * n_out
            if n_out == 0:
                return (_OK,)
            if n_out == 1:
                return (_OK, out)
            return (_OK, *out)

        wrapper.__doc__ = (getattr(_real, fn.__name__).__doc__ or "").split("\n")[0] + \
            "\n\n(gpusafe CPU device implementation; see gpusafe.cpu.runtime.)"
        return wrapper

    return deco


def _init() -> None:
    _check(_drv.cuInit(0))


def _ensure_context() -> None:
    """The runtime's implicit context: the current one, else the primary context."""
    _init()
    current = _check(_drv.cuCtxGetCurrent())
    if int(current) == 0:
        _make_primary_current(0)


def _make_primary_current(device: int) -> None:
    ctx = _check(_drv.cuDevicePrimaryCtxRetain(_drv.CUdevice(device)))
    _check(_drv.cuCtxSetCurrent(ctx))


def _handle(value) -> int:
    """A stream/event argument as cuda-python passes it: None, an int, a handle object."""
    if value is None:
        return 0
    return int(value)


def _device_ordinal(device) -> int:
    return _args.c_int(device, "int", "device")


# --------------------------------------------------------------------------
# errors and versions
# --------------------------------------------------------------------------


@_api(1, records=False)
def cudaGetErrorName(error):
    _args.require_enum(error, cudaError_t, "error")
    return error.name.encode()


@_api(1, records=False)
def cudaGetErrorString(error):
    _args.require_enum(error, cudaError_t, "error")
    try:
        name = _CU(int(error)).name
    except ValueError:
        return error.name.encode()
    return _profile.ERROR_STRINGS.get(name, error.name).encode()


@_api(0, records=False)
def cudaGetLastError():
    error = getattr(_tls, "last_error", _OK)
    _tls.last_error = _OK
    if error != _OK:
        raise _Fail(error)


@_api(0, records=False)
def cudaPeekAtLastError():
    error = getattr(_tls, "last_error", _OK)
    if error != _OK:
        raise _Fail(error)


@_api(1)
def cudaDriverGetVersion():
    return _profile.DRIVER_VERSION


@_api(1)
def cudaRuntimeGetVersion():
    return _profile.DRIVER_VERSION


# --------------------------------------------------------------------------
# devices
# --------------------------------------------------------------------------


@_api(1)
def cudaGetDeviceCount():
    _init()
    return int(_check(_drv.cuDeviceGetCount()))


@_api(1)
def cudaGetDevice():
    _init()
    current = _check(_drv.cuCtxGetCurrent())
    return int(_check(_drv.cuCtxGetDevice())) if int(current) else 0


@_api(0)
def cudaSetDevice(device):
    d = _device_ordinal(device)
    _init()
    _check(_drv.cuDeviceGet(d))
    _make_primary_current(d)


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


@_api(1)
def cudaGetDeviceProperties(device):
    d = _device_ordinal(device)
    _init()
    dev = _check(_drv.cuDeviceGet(d))
    prop = cudaDeviceProp()
    prop.name = _profile.DEVICE_NAME.encode().ljust(256, b"\0")
    prop.totalGlobalMem = int(_check(_drv.cuDeviceTotalMem(dev)))
    attr = _drv.CUdevice_attribute

    def get(name: str) -> int:
        return int(_check(_drv.cuDeviceGetAttribute(
            getattr(attr, f"CU_DEVICE_ATTRIBUTE_{name}"), dev)))

    for field, name in _PROP_ATTRIBUTES.items():
        setattr(prop, field, get(name))
    prop.maxThreadsDim = [get(f"MAX_BLOCK_DIM_{c}") for c in "XYZ"]
    prop.maxGridSize = [get(f"MAX_GRID_DIM_{c}") for c in "XYZ"]
    return prop


@_api(0)
def cudaDeviceSynchronize():
    _ensure_context()
    _check(_drv.cuCtxSynchronize())


@_api(0)
def cudaDeviceReset():
    _init()
    dev = int(_check(_drv.cuCtxGetDevice())) if int(_check(_drv.cuCtxGetCurrent())) else 0
    _check(_drv.cuDevicePrimaryCtxReset(_drv.CUdevice(dev)))


# --------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------


@_api(1)
def cudaMalloc(size):
    n = _args.c_int(size, "size_t", "size")
    _ensure_context()
    if n == 0:
        return 0
    return int(_check(_drv.cuMemAlloc(n)))


@_api(2)
def cudaMallocPitch(width, height):
    w = _args.c_int(width, "size_t", "width")
    h = _args.c_int(height, "size_t", "height")
    _ensure_context()
    pitch = -(-w // PITCH_ALIGNMENT) * PITCH_ALIGNMENT
    if pitch * h == 0:
        return 0, pitch
    return int(_check(_drv.cuMemAlloc(pitch * h))), pitch


@_api(1)
def cudaMallocAsync(size, hStream):
    n = _args.c_int(size, "size_t", "size")
    _ensure_context()
    if n == 0:
        return 0
    return int(_check(_drv.cuMemAllocAsync(n, _handle(hStream))))


@_api(0)
def cudaFree(devPtr):
    address = _args.host_pointer(devPtr).address
    _ensure_context()
    if address:
        _check(_drv.cuMemFree(address))


@_api(0)
def cudaFreeAsync(devPtr, hStream):
    address = _args.host_pointer(devPtr).address
    _ensure_context()
    if address:
        _check(_drv.cuMemFreeAsync(address, _handle(hStream)))


@_api(1)
def cudaMallocHost(size):
    n = _args.c_int(size, "size_t", "size")
    _ensure_context()
    return int(_check(_drv.cuMemAllocHost(n)))


@_api(1)
def cudaHostAlloc(size, flags):
    n = _args.c_int(size, "size_t", "size")
    f = _args.c_int(flags, "unsigned int", "flags")
    _ensure_context()
    return int(_check(_drv.cuMemHostAlloc(n, f)))


@_api(0)
def cudaFreeHost(ptr):
    address = _args.host_pointer(ptr).address
    _ensure_context()
    _check(_drv.cuMemFreeHost(address))


@_api(2)
def cudaMemGetInfo():
    _ensure_context()
    return _check(_drv.cuMemGetInfo())


def _host_address(buffer, n: int) -> tuple[int, Any]:
    """The address of a host buffer holding at least ``n`` bytes (and what keeps it alive)."""
    hp = _args.host_pointer(buffer)
    if n and hp.address == 0:
        raise _Fail(cudaError_t.cudaErrorInvalidValue)
    if hp.nbytes is not None and hp.nbytes < n:
        raise _Fail(cudaError_t.cudaErrorInvalidValue)
    return hp.address, hp


def _memcpy(dst, src, count, kind, stream) -> None:
    n = _args.c_int(count, "size_t", "count")
    _args.require_enum(kind, cudaMemcpyKind, "kind")
    _ensure_context()
    hs = _handle(stream)
    K = cudaMemcpyKind
    if kind == K.cudaMemcpyHostToDevice:
        _check(_drv.cuMemcpyHtoDAsync(_args.host_pointer(dst).address, src, n, hs))
    elif kind == K.cudaMemcpyDeviceToHost:
        _check(_drv.cuMemcpyDtoHAsync(dst, _args.host_pointer(src).address, n, hs))
    elif kind == K.cudaMemcpyDeviceToDevice:
        _check(_drv.cuMemcpyDtoDAsync(_args.host_pointer(dst).address,
                                      _args.host_pointer(src).address, n, hs))
    elif kind == K.cudaMemcpyHostToHost:
        if n == 0:
            return
        d, keep_d = _host_address(dst, n)
        s, keep_s = _host_address(src, n)
        ctypes.memmove(d, s, n)
        del keep_d, keep_s
    else:  # cudaMemcpyDefault: each side by its address
        d, keep_d = _host_address(dst, n)
        s, keep_s = _host_address(src, n)
        _check(_drv.cuMemcpyAsync(d, s, n, hs))
        del keep_d, keep_s


@_api(0)
def cudaMemcpy(dst, src, count, kind):
    _memcpy(dst, src, count, kind, 0)


@_api(0)
def cudaMemcpyAsync(dst, src, count, kind, stream):
    _memcpy(dst, src, count, kind, stream)


def _memset(devPtr, value, count, stream) -> None:
    address = _args.host_pointer(devPtr).address
    v = _args.c_int(value, "int", "value")
    n = _args.c_int(count, "size_t", "count")
    _ensure_context()
    _check(_drv.cuMemsetD8Async(address, v & 0xFF, n, _handle(stream)))


@_api(0)
def cudaMemset(devPtr, value, count):
    _memset(devPtr, value, count, 0)


@_api(0)
def cudaMemsetAsync(devPtr, value, count, stream):
    _memset(devPtr, value, count, stream)


# --------------------------------------------------------------------------
# streams and events
# --------------------------------------------------------------------------


@_api(1)
def cudaStreamCreate():
    _ensure_context()
    return cudaStream_t(int(_check(_drv.cuStreamCreate(0))))


@_api(1)
def cudaStreamCreateWithFlags(flags):
    f = _args.c_int(flags, "unsigned int", "flags")
    _ensure_context()
    return cudaStream_t(int(_check(_drv.cuStreamCreate(f))))


@_api(0)
def cudaStreamSynchronize(stream):
    _ensure_context()
    _check(_drv.cuStreamSynchronize(_handle(stream)))


@_api(0)
def cudaStreamQuery(stream):
    _ensure_context()
    _check(_drv.cuStreamQuery(_handle(stream)))


@_api(0)
def cudaStreamDestroy(stream):
    _ensure_context()
    _check(_drv.cuStreamDestroy(_handle(stream)))


@_api(1)
def cudaEventCreate():
    _ensure_context()
    return cudaEvent_t(int(_check(_drv.cuEventCreate(0))))


@_api(1)
def cudaEventCreateWithFlags(flags):
    f = _args.c_int(flags, "unsigned int", "flags")
    _ensure_context()
    return cudaEvent_t(int(_check(_drv.cuEventCreate(f))))


@_api(0)
def cudaEventRecord(event, stream):
    _ensure_context()
    _check(_drv.cuEventRecord(_handle(event), _handle(stream)))


@_api(0)
def cudaEventSynchronize(event):
    _ensure_context()
    _check(_drv.cuEventSynchronize(_handle(event)))


@_api(0)
def cudaEventQuery(event):
    _ensure_context()
    _check(_drv.cuEventQuery(_handle(event)))


@_api(1)
def cudaEventElapsedTime(start, end):
    _ensure_context()
    return float(_check(_drv.cuEventElapsedTime(_handle(start), _handle(end))))


@_api(0)
def cudaEventDestroy(event):
    _ensure_context()
    _check(_drv.cuEventDestroy(_handle(event)))


# --------------------------------------------------------------------------
# unimplemented functions: absent, with a message that says so
# --------------------------------------------------------------------------


def __getattr__(name: str):
    if name in REAL_FUNCTIONS:
        raise AttributeError(
            f"module {__name__!r} has no attribute {name!r}: {name} is a cuda.bindings.runtime "
            "function the gpusafe CPU device does not implement "
            f"(implemented: see {__name__}.IMPLEMENTED)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(n for n in globals() if not n.startswith("_"))
