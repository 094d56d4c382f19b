"""The stand-in runtime's calls on a GPU: served over the driver door alone.

On the CPU device the stand-in ``libcudart.so`` calls the runtime door
(``cuda.bindings.runtime``).  On a GPU that module is NVIDIA's static
runtime, which needs the real driver's private export tables; these calls go
through the driver door instead (``cuda.bindings.driver``, checked by the
engine on the cuda backend), so what runs on the real driver is public API
only.  The runtime's state is kept here: the device of each thread and its
primary context (retained once, made current before each call, as the
runtime does).  Error codes pass through: the runtime's numbers equal the
driver's for every code these calls return (success, invalid value, out of
memory, not initialized, no device, invalid device, invalid handle, illegal
address, launch failed, not supported).  Functions not listed here are named
as not served on a GPU.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from pathlib import Path

from cuda.bindings import driver as D

from ..cudaapi import device_props

_OK = D.CUresult.CUDA_SUCCESS
INVALID_VALUE = 1
_HOST_TO_HOST, _HOST_TO_DEVICE, _DEVICE_TO_HOST, _DEVICE_TO_DEVICE, _DEFAULT = range(5)

_state = threading.local()
_primary: dict[int, int] = {}
_lock = threading.Lock()


def _device() -> int:
    return getattr(_state, "device", 0)


def current() -> int:
    """The runtime's context on this thread (the device's primary context,
    retained once and made current), as a CUresult: 0 when it is."""
    dev = _device()
    with _lock:
        if dev not in _primary:
            err = D.cuInit(0)[0]
            if err != _OK:
                return int(err)
            err, ctx = D.cuDevicePrimaryCtxRetain(dev)
            if err != _OK:
                return int(err)
            _primary[dev] = int(ctx)
    err, ctx = D.cuCtxGetCurrent()
    if err == _OK and int(ctx) == _primary[dev]:
        return 0
    return int(D.cuCtxSetCurrent(_primary[dev])[0])


def _in_context(call: Callable[..., int]) -> Callable[..., int]:
    def run(*args: int) -> int:
        err = current()
        return err if err else call(*args)

    return run


def _malloc(out: int, size: int) -> int:
    err, ptr = D.cuMemAlloc(size)
    if err == _OK and out:
        ctypes.c_uint64.from_address(out).value = int(ptr)
    return int(err)


def _free(ptr: int) -> int:
    return 0 if ptr == 0 else int(D.cuMemFree(ptr)[0])  # cudaFree(0) only initialises


def _memcpy(dst: int, src: int, n: int, kind: int, *_stream: int) -> int:
    """Synchronous, whatever the stream: stronger ordering than asked."""
    if kind == _HOST_TO_HOST:
        ctypes.memmove(dst, src, n)
        return 0
    if kind == _HOST_TO_DEVICE:
        return int(D.cuMemcpyHtoD(dst, src, n)[0])
    if kind == _DEVICE_TO_HOST:
        return int(D.cuMemcpyDtoH(dst, src, n)[0])
    if kind == _DEVICE_TO_DEVICE:
        return int(D.cuMemcpyDtoD(dst, src, n)[0])
    if kind == _DEFAULT:
        return int(D.cuMemcpy(dst, src, n)[0])
    return INVALID_VALUE


def _set_device(dev: int) -> int:
    err, count = D.cuDeviceGetCount()
    if err != _OK:
        return int(err)
    if not 0 <= dev < count:
        return 101  # cudaErrorInvalidDevice
    _state.device = dev
    return 0


def _get_device(out: int) -> int:
    ctypes.c_int32.from_address(out).value = _device()
    return 0


def _device_count(out: int) -> int:
    err = D.cuInit(0)[0]
    if err != _OK:
        return int(err)
    err, count = D.cuDeviceGetCount()
    if err == _OK:
        ctypes.c_int32.from_address(out).value = int(count)
    return int(err)


def _out(name: str, ctype: type = ctypes.c_uint64) -> Callable[..., int]:
    """``cudaX(T *out, args...)`` as the driver's ``cuX(args...) -> (err, value)``."""
    def call(out: int, *args: int) -> int:
        err, value = getattr(D, name)(*args)
        if err == _OK and out:
            ctype.from_address(out).value = int(value)
        return int(err)

    return call


def _plain(name: str) -> Callable[..., int]:
    return lambda *args: int(getattr(D, name)(*args)[0])


def _elapsed(out: int, start: int, end: int) -> int:
    err, ms = D.cuEventElapsedTime(start, end)
    if err == _OK and out:
        ctypes.c_float.from_address(out).value = float(ms)
    return int(err)


def _device_attribute(out: int, attr: int, dev: int) -> int:
    """The runtime's device attributes are the driver's, number for number."""
    try:
        attribute = D.CUdevice_attribute(attr)
    except ValueError:
        return INVALID_VALUE
    err, value = D.cuDeviceGetAttribute(attribute, dev)
    if err == _OK and out:
        ctypes.c_int32.from_address(out).value = int(value)
    return int(err)


def _prop_size() -> int:
    """sizeof(struct cudaDeviceProp) in the CUDA 13 headers the stand-in
    runtime's table came from (the program's layout: a CUDA 12 program's is
    refused before it gets here)."""
    table = Path(__file__).resolve().parent / "runtime_api.txt"
    for line in table.read_text().splitlines():
        if line.startswith("#sizeof cudaDeviceProp "):
            return int(line.split()[-1])
    raise NotImplementedError("cudaGetDeviceProperties (the table has no size for cudaDeviceProp)")


def put_properties(out: int, prop: device_props.cudaDeviceProp) -> None:
    """cuda-bindings' C struct, laid out by the same headers as the
    program's, copied whole into the program's."""
    ctypes.memmove(out, prop.getPtr(), _prop_size())


class _Failed(Exception):
    def __init__(self, error: int) -> None:
        self.error = error


def _checked(result: tuple) -> object:
    if result[0] != _OK:
        raise _Failed(int(result[0]))
    return result[1] if len(result) == 2 else None


def _device_properties(out: int, dev: int) -> int:
    """Built from the driver's answers, as the CPU device's runtime builds
    them (NVIDIA's runtime is not used on a GPU)."""
    if not out:
        return INVALID_VALUE
    try:
        put_properties(out, device_props.device_properties(D, dev, _checked))
    except _Failed as e:
        return e.error  # the runtime's numbers equal the driver's (invalid device: 101)
    return 0


def reset() -> int:
    """cudaDeviceReset: the primary context reset through the door (which
    judges what it held, as for a destroyed context), retained again at the
    next call."""
    dev = _device()
    err = int(D.cuDevicePrimaryCtxReset(dev)[0])
    with _lock:
        _primary.pop(dev, None)
    return err


def copy(dst: int, src: int, n: int, kind: int) -> int:
    """A copy the runtime asked for, with the runtime's context current."""
    return _in_context(_memcpy)(dst, src, n, kind)


CALLS: dict[str, Callable[..., int]] = {
    "cudaMalloc": _in_context(_malloc),
    "cudaFree": _in_context(_free),
    "cudaMemcpy": _in_context(_memcpy),
    "cudaMemcpyAsync": _in_context(_memcpy),
    "cudaMemset": _in_context(lambda p, v, n: int(D.cuMemsetD8(p, v & 0xFF, n)[0])),
    "cudaDeviceSynchronize": _in_context(lambda: int(D.cuCtxSynchronize()[0])),
    "cudaSetDevice": _set_device,
    "cudaGetDevice": _get_device,
    "cudaGetDeviceCount": _device_count,
    "cudaDeviceGetAttribute": _in_context(_device_attribute),
    "cudaGetDeviceProperties": _in_context(_device_properties),
    "cudaMallocHost": _in_context(_out("cuMemAllocHost")),
    "cudaFreeHost": _in_context(_plain("cuMemFreeHost")),
    "cudaMallocManaged": _in_context(_out("cuMemAllocManaged")),
    # stream and event flags and status codes are the driver's, number for number
    "cudaStreamCreate": _in_context(lambda out: _out("cuStreamCreate")(out, 0)),
    "cudaStreamCreateWithFlags": _in_context(_out("cuStreamCreate")),
    "cudaEventCreate": _in_context(lambda out: _out("cuEventCreate")(out, 0)),
    "cudaEventCreateWithFlags": _in_context(_out("cuEventCreate")),
    "cudaEventElapsedTime": _in_context(_elapsed),
    **{runtime: _in_context(_plain(driver)) for runtime, driver in (
        ("cudaStreamDestroy", "cuStreamDestroy"),
        ("cudaStreamSynchronize", "cuStreamSynchronize"),
        ("cudaStreamQuery", "cuStreamQuery"),
        ("cudaEventRecord", "cuEventRecord"),
        ("cudaEventSynchronize", "cuEventSynchronize"),
        ("cudaEventQuery", "cuEventQuery"),
        ("cudaEventDestroy", "cuEventDestroy"))},
}
"""The runtime functions served on a GPU (launches and device variables:
``runtime_calls``, with :func:`copy` and :func:`current`)."""
