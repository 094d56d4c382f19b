"""The CUDA runtime functions the stand-in ``libcudart.so`` serves, for a
program built with ``nvcc -cudart shared``: each calls the function of the
same name in ``cuda.bindings.runtime`` (the Python door's checking wrapper
over the CPU device), and a ``<<<...>>>`` launch becomes a driver launch of
the kernel's PTX, taken from the fatbinary nvcc registered.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as D
from cuda.bindings import runtime as R

from . import adapter, fatbin, runtime_on_driver
from .calls import NotServed

_WRAPPER_MAGIC = 0x466243B1
_FATBIN_MAGIC = 0xBA55ED50
_PTX = 1

INVALID_DEVICE_FUNCTION = 98
SAME_ON_A_GPU = ("cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaMemcpyToSymbol",
                 "cudaMemcpyFromSymbol", "cudaGetSymbolAddress", "cudaDeviceReset",
                 "__cudaRegisterManagedVar", "__unserved", "__unserved_cuda12")
"""Served on a GPU by the same code as on the CPU device (their modules,
copies and contexts follow the device); every other call of :data:`CALLS` has
its GPU form in ``runtime_on_driver.CALLS``."""
_on_gpu = threading.Event()
"""Set once this process's runtime serves a GPU: the context is the driver's
primary context, made current by ``runtime_on_driver``."""
INITIALIZATION_ERROR = 3

_modules: dict[int, int] = {}  # fatbin wrapper address -> module handle
_functions: dict[tuple[int, bytes], int] = {}
_texts: dict[Any, ctypes.Array] = {}  # C strings handed out
_last = threading.local()


def _u32(address: int) -> int:
    return ctypes.c_uint32.from_address(address).value


def _u64(address: int) -> int:
    return ctypes.c_uint64.from_address(address).value


def fatbin_ptx(wrapper: int, what: str) -> bytes:
    """The PTX of the highest virtual architecture in a registered fatbinary
    (``what`` needs it: a kernel, a device variable)."""
    data = _u64(wrapper + 8) if _u32(wrapper) == _WRAPPER_MAGIC else wrapper
    if _u32(data) != _FATBIN_MAGIC:
        raise NotServed(f"{what} cannot be used: its fatbinary has an unknown format")
    header = ctypes.c_uint16.from_address(data + 6).value
    end = data + header + _u64(data + 8)
    entry, best = data + header, None
    while entry < end:
        kind = ctypes.c_uint16.from_address(entry).value
        size_of_header, size = _u32(entry + 4), _u64(entry + 8)
        if kind == _PTX and (best is None or _u32(entry + 28) > _u32(best)):
            best = entry
        entry += size_of_header + size
    if best is None:
        raise NotServed(f"{what} cannot be used on the CPU device: its PTX in the program's "
                        "fatbinary is missing; build with `-arch=sm_XX` or a `-gencode` with "
                        "`code=compute_XX`")
    flags, payload = _u64(best + 40), best + _u32(best + 4)
    if not flags & fatbin.COMPRESSED:
        return ctypes.string_at(payload, _u64(best + 8)).split(b"\0", 1)[0] + b"\0"
    try:  # compressed (nvcc's default): the sizes are in the entry's header
        text = fatbin.decompress(flags, ctypes.string_at(payload, _u32(best + 16)),
                                 _u64(best + 56))
    except fatbin.DecompressError as e:
        raise NotServed(f"{what} cannot be used on the CPU device: its PTX in the program's "
                        f"fatbinary cannot be decompressed: {e}") from None
    return text.split(b"\0", 1)[0] + b"\0"


def _module(wrapper: int, what: str) -> int:
    """The module of a registered fatbinary (loaded on first use; a negative
    CUresult when it cannot be)."""
    if wrapper not in _modules:
        ptx = fatbin_ptx(wrapper, what)
        err = runtime_on_driver.current() if _on_gpu.is_set() else int(R.cudaFree(0)[0])
        if err:  # the runtime's context, current on this thread
            return -err
        err, module = D.cuModuleLoadData(ptx)
        if err != D.CUresult.CUDA_SUCCESS:
            return -int(err)
        _modules[wrapper] = int(module)
    return _modules[wrapper]


def _function(wrapper: int, name: bytes) -> int:
    key = (wrapper, name)
    if key not in _functions:
        module = _module(wrapper, "kernel " + name.decode(errors="replace"))
        if module < 0:
            return module
        err, f = D.cuModuleGetFunction(module, name)
        if err != D.CUresult.CUDA_SUCCESS:
            return -int(err)
        _functions[key] = int(f)
    return _functions[key]


def _symbol(name: int, wrapper: int) -> tuple[int, int]:
    """A device variable's (address, size), or (-CUresult, 0)."""
    text = ctypes.string_at(name)
    module = _module(wrapper, "device variable " + text.decode(errors="replace"))
    if module < 0:
        return module, 0
    err, address, size = D.cuModuleGetGlobal(module, text)
    if err != D.CUresult.CUDA_SUCCESS:
        return -int(err), 0
    return int(address), int(size)


def _copy(dst: int, src: int, n: int, kind: int) -> int:
    """A copy of the runtime's (``cudaMemcpyKind`` ``kind``): on a GPU over
    the driver door, on the CPU device through the runtime door."""
    if _on_gpu.is_set():
        return runtime_on_driver.copy(dst, src, n, kind)
    return int(R.cudaMemcpy(dst, src, n, R.cudaMemcpyKind(kind))[0])


_HOST_TO_DEVICE, _DEVICE_TO_HOST, _DEVICE_TO_DEVICE = 1, 2, 3


def _to_symbol(name: int, wrapper: int, src: int, n: int, offset: int, kind: int) -> int:
    address, _ = _symbol(name, wrapper)
    if address < 0:
        return -address
    direction = _DEVICE_TO_DEVICE if kind == _DEVICE_TO_DEVICE else _HOST_TO_DEVICE
    return _copy(address + offset, src, n, direction)


def _from_symbol(name: int, wrapper: int, dst: int, n: int, offset: int, kind: int) -> int:
    address, _ = _symbol(name, wrapper)
    if address < 0:
        return -address
    direction = _DEVICE_TO_DEVICE if kind == _DEVICE_TO_DEVICE else _DEVICE_TO_HOST
    return _copy(dst, address + offset, n, direction)


def _symbol_address(name: int, wrapper: int, address_out: int, size_out: int) -> int:
    address, size = _symbol(name, wrapper)
    if address < 0:
        return -address
    if address_out:
        ctypes.c_uint64.from_address(address_out).value = address
    if size_out:
        ctypes.c_uint64.from_address(size_out).value = size
    return 0


def _launcher(cooperative: bool) -> Callable[..., int]:
    """``cudaLaunchKernel`` (``cudaLaunchCooperativeKernel``): the registered
    kernel's function launched with ``cuLaunchKernel``
    (``cuLaunchCooperativeKernel``, whose grid has a ``grid.sync()`` workspace)."""

    def call(_stub: int, name: int, wrapper: int, gx: int, gy: int, gz: int, bx: int, by: int,
             bz: int, args: int, shared: int) -> int:
        if not name or not wrapper:
            return INVALID_DEVICE_FUNCTION
        f = _function(wrapper, ctypes.string_at(name))
        if f < 0:
            return -f
        if cooperative:
            return int(D.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, 0,
                                                   args)[0])
        return int(D.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, 0, args, 0)[0])

    return call


def _out(name: str, ctype: type = ctypes.c_uint64) -> Callable[..., int]:
    def call(out: int, *args: int) -> int:
        result = getattr(R, name)(*args)
        if int(result[0]) == 0 and out:
            ctype.from_address(out).value = int(result[1])
        return int(result[0])

    return call


def _plain(name: str) -> Callable[..., int]:
    return lambda *args: int(getattr(R, name)(*args)[0])


def _device_properties(out: int, device: int) -> int:
    """The runtime door's ``cudaDeviceProp`` is cuda-bindings' C struct, laid
    out by the same CUDA 13 headers as the program's: copied whole."""
    err, prop = R.cudaGetDeviceProperties(device)
    if int(err) == 0:
        runtime_on_driver.put_properties(out, prop)
    return int(err)


def _device_attribute(out: int, attr: int, device: int) -> int:
    """The runtime's device attributes are the driver's, number for number."""
    try:
        attribute = D.CUdevice_attribute(attr)
    except ValueError:
        return 1  # cudaErrorInvalidValue
    R.cudaFree(0)  # the driver initialised, as the runtime does
    err, value = D.cuDeviceGetAttribute(attribute, device)
    if int(err) == 0:
        ctypes.c_int32.from_address(out).value = int(value)
    return int(err)


def _elapsed(out: int, start: int, end: int) -> int:
    err, ms = R.cudaEventElapsedTime(start, end)
    if int(err) == 0 and out:
        ctypes.c_float.from_address(out).value = float(ms)
    return int(err)


def _memcpy(name: str) -> Callable[..., int]:
    def call(dst: int, src: int, n: int, kind: int, *stream: int) -> int:
        try:
            direction = R.cudaMemcpyKind(kind)
        except ValueError:
            return 1  # cudaErrorInvalidValue
        return int(getattr(R, name)(dst, src, n, direction, *stream)[0])

    return call


def _device_reset() -> int:
    """The device's modules are gone with its context: the next launch loads
    them again."""
    _modules.clear()
    _functions.clear()
    if _on_gpu.is_set():
        return runtime_on_driver.reset()
    return int(R.cudaDeviceReset()[0])


def _error_text(name: str) -> Callable[..., int]:
    def call(error: int) -> int:
        try:
            text = getattr(R, name)(R.cudaError_t(error))[1]
        except ValueError:
            text = b"unrecognized error code"
        buffer = _texts.setdefault((name, error), ctypes.create_string_buffer(bytes(text)))
        return ctypes.addressof(buffer)

    return call


def _last_error(reset: bool) -> Callable[[], int]:
    def call() -> int:
        error = getattr(_last, "error", 0)
        if reset:
            _last.error = 0
        return error

    return call


def _register_managed_var(name: int) -> int:
    raise NotServed(f"managed variable {ctypes.string_at(name).decode(errors='replace')}: "
                    "__managed__ variables are not served by the CPU device's stand-in "
                    "runtime yet")


def _unserved(name: int) -> int:
    return adapter.not_served(ctypes.string_at(name).decode(), adapter.current_session())


def _unserved_cuda12(name: int) -> int:
    text = ctypes.string_at(name).decode()
    return adapter.not_served(
        text, adapter.current_session(),
        f"{text} of CUDA 12's runtime (libcudart.so.12) is not served by the stand-in runtime: "
        "its form differs from CUDA 13's (a structure laid out by CUDA 12's headers, or a "
        "call CUDA 13 removed); rebuild the program with CUDA 13's nvcc to check it")


CALLS: dict[str, Callable[..., int]] = {
    "cudaLaunchKernel": _launcher(cooperative=False),
    "cudaLaunchCooperativeKernel": _launcher(cooperative=True),
    "cudaMalloc": _out("cudaMalloc"),
    "cudaMallocHost": _out("cudaMallocHost"),
    "cudaMallocManaged": _out("cudaMallocManaged"),
    "cudaFree": _plain("cudaFree"),
    "cudaFreeHost": _plain("cudaFreeHost"),
    "cudaMemcpy": _memcpy("cudaMemcpy"),
    "cudaMemcpyAsync": _memcpy("cudaMemcpyAsync"),
    "cudaMemset": _plain("cudaMemset"),
    "cudaDeviceSynchronize": _plain("cudaDeviceSynchronize"),
    "cudaDeviceReset": _device_reset,
    "cudaSetDevice": _plain("cudaSetDevice"),
    "cudaGetDevice": _out("cudaGetDevice", ctypes.c_int32),
    "cudaGetDeviceCount": _out("cudaGetDeviceCount", ctypes.c_int32),
    "cudaGetDeviceProperties": _device_properties,
    "cudaDeviceGetAttribute": _device_attribute,
    "cudaStreamCreate": _out("cudaStreamCreate"),
    "cudaStreamCreateWithFlags": _out("cudaStreamCreateWithFlags"),
    "cudaEventCreate": _out("cudaEventCreate"),
    "cudaEventCreateWithFlags": _out("cudaEventCreateWithFlags"),
    "cudaEventElapsedTime": _elapsed,
    **{name: _plain(name) for name in (
        "cudaStreamSynchronize", "cudaStreamQuery", "cudaStreamDestroy", "cudaEventRecord",
        "cudaEventSynchronize", "cudaEventQuery", "cudaEventDestroy")},
    "__cudaRegisterManagedVar": _register_managed_var,
    "cudaMemcpyToSymbol": _to_symbol,
    "cudaMemcpyFromSymbol": _from_symbol,
    "cudaGetSymbolAddress": _symbol_address,
    "__unserved": _unserved,
    "__unserved_cuda12": _unserved_cuda12,
}
_RESULTS = {"cudaGetErrorName": _error_text("cudaGetErrorName"),
            "cudaGetErrorString": _error_text("cudaGetErrorString"),
            "cudaGetLastError": _last_error(reset=True),
            "cudaPeekAtLastError": _last_error(reset=False)}
"""Functions whose result is not an error to remember as the last one."""


def dispatch(name: str, args: tuple[int, ...]) -> int:
    """One runtime call from the stand-in ``libcudart.so``."""
    session = adapter.current_session()
    if session is None:
        return INITIALIZATION_ERROR
    if name in _RESULTS:
        return _RESULTS[name](*args)
    call = CALLS[name]
    if session.options.device != "cpu":
        _on_gpu.set()
        if name not in SAME_ON_A_GPU:
            call = runtime_on_driver.CALLS[name]
    try:
        error = call(*args)
    except (NotServed, NotImplementedError) as e:
        error = adapter.not_served(name, session, str(e))
    except Exception as e:  # noqa: BLE001 - gpusafe's own failure, reported as such
        session.findings.problem(
            f"the stand-in CUDA runtime failed in {name}: {type(e).__name__}: {e}")
        session.flush()
        error = 999  # cudaErrorUnknown
    if error:
        _last.error = error
    return error
