"""The driver functions the stand-in driver serves, as C calls: integer
arguments in (addresses for pointers), outputs written through the C
pointers, the ``CUresult`` out as an int.

Each one calls the function of the same name in ``cuda.bindings.driver``, which
``gpusafe run`` has replaced by the door's checking wrapper over the CPU
device: a native program's calls take exactly the path of a cuda-python
program's, and are checked by the same engine.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as D

from ..cudaapi.images import ELF_MAGIC, FATBIN_MAGICS

NOT_SUPPORTED = 801
_OK = D.CUresult.CUDA_SUCCESS  # an enum member looked up once: the lookup costs more than the call
INVALID_VALUE = 1

class NotServed(Exception):
    """A form of a served function that the stand-in does not serve (the
    adapter names it in the findings, the program gets NOT_SUPPORTED);
    ``label``: the name the findings list it under, when not the function's
    (a CUDA library a framework reached the driver from)."""

    def __init__(self, why: str, label: str | None = None) -> None:
        super().__init__(why)
        self.label = label


_ERROR_TEXTS: dict[tuple[str, int], ctypes.Array] = {}
"""The C strings cuGetErrorName/String hand out: they must outlive the call."""


def _put(address: int, value: int, ctype: type = ctypes.c_uint64) -> None:
    if address:
        ctype.from_address(address).value = int(value)


def _put_i32(address: int, value: int) -> None:
    _put(address, value, ctypes.c_int32)


def _put_u32(address: int, value: int) -> None:
    _put(address, value, ctypes.c_uint32)


def _cstr(address: int) -> bytes:
    return ctypes.string_at(address) if address else b""


def _image(address: int) -> bytes:
    """A module image from its address, with its length read as the driver
    reads it: a fatbin's or an ELF file's header, PTX's terminating NUL."""
    head = ctypes.string_at(address, 4)
    if head in FATBIN_MAGICS[:1]:
        header = ctypes.string_at(address, 16)
        size = int.from_bytes(header[6:8], "little") + int.from_bytes(header[8:16], "little")
        return ctypes.string_at(address, size)
    if head == FATBIN_MAGICS[1]:  # __fatBinC_Wrapper_t {magic, version, data, filename}
        return _image(ctypes.c_uint64.from_address(address + 8).value)
    if head == ELF_MAGIC:
        h = ctypes.string_at(address, 64)
        shoff = int.from_bytes(h[40:48], "little")
        size = shoff + int.from_bytes(h[58:60], "little") * int.from_bytes(h[60:62], "little")
        return ctypes.string_at(address, size)
    return ctypes.string_at(address) + b"\0"


def _out1(put: Callable[[int, int], None] = _put) -> Callable[..., Callable[..., int]]:
    """``cuX(T *out, args...)``: the door's ``cuX(args...) -> (err, value)``."""

    def make(name: str) -> Callable[..., int]:
        def call(out: int, *args: int) -> int:
            result = getattr(D, name)(*args)
            if result[0] == _OK:
                put(out, int(result[1]))
            return int(result[0])

        return call

    return make


def _plain(name: str) -> Callable[..., int]:
    """``cuX(args...)`` with no outputs."""

    def call(*args: int) -> int:
        return int(getattr(D, name)(*args)[0])

    return call


def _device_get_name(name: int, length: int, dev: int) -> int:
    err, text = D.cuDeviceGetName(length, dev)
    if err == _OK and length > 0:
        data = text.split(b"\0", 1)[0][: length - 1] + b"\0"
        ctypes.memmove(name, data, len(data))
    return int(err)


def _device_get_attribute(out: int, attrib: int, dev: int) -> int:
    try:
        attribute = D.CUdevice_attribute(attrib)
    except ValueError:
        return INVALID_VALUE
    err, value = D.cuDeviceGetAttribute(attribute, dev)
    if err == _OK:
        _put_i32(out, value)
    return int(err)


def _func_get_attribute(out: int, attrib: int, f: int) -> int:
    try:
        attribute = D.CUfunction_attribute(attrib)
    except ValueError:
        return INVALID_VALUE
    err, value = D.cuFuncGetAttribute(attribute, f)
    if err == _OK:
        _put_i32(out, value)
    return int(err)


def _compute_capability(major: int, minor: int, dev: int) -> int:
    M = D.CUdevice_attribute
    for out, attrib in ((major, M.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                        (minor, M.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)):
        err, value = D.cuDeviceGetAttribute(attrib, dev)
        if err != _OK:
            return int(err)
        _put_i32(out, value)
    return 0


def _ctx_create(out: int, params: int, flags: int, dev: int) -> int:
    """``cuCtxCreate_v4``: execution affinity and CIG parameters are refused
    by the CPU device, so only an empty parameter block is read."""
    if params:
        affinities = ctypes.c_int32.from_address(params + 8).value
        cig = ctypes.c_uint64.from_address(params + 16).value
        if affinities or cig:
            return NOT_SUPPORTED
    err, ctx = D.cuCtxCreate(None, flags, dev)
    if err == _OK:
        _put(out, int(ctx))
    return int(err)


def _two_outputs(name: str) -> Callable[..., int]:
    """``cuX(A *a, B *b, args...)`` from ``cuX(args...) -> (err, a, b)``."""

    def call(a: int, b: int, *args: int) -> int:
        err, x, y = getattr(D, name)(*args)
        if err == _OK:
            _put(a, int(x))
            _put(b, int(y))
        return int(err)

    return call


def _module_load_data(out: int, image: int, *_options: int) -> int:
    """JIT options (log buffers, optimisation levels) do not change how the
    CPU device runs PTX; they are not read."""
    if not image:
        return INVALID_VALUE
    err, mod = D.cuModuleLoadData(_image(image))
    if err == _OK:
        _put(out, int(mod))
    return int(err)


def _module_load(out: int, fname: int) -> int:
    err, mod = D.cuModuleLoad(_cstr(fname))
    if err == _OK:
        _put(out, int(mod))
    return int(err)


def _module_get_function(out: int, hmod: int, name: int) -> int:
    err, f = D.cuModuleGetFunction(hmod, _cstr(name))
    if err == _OK:
        _put(out, int(f))
    return int(err)


def _module_get_global(dptr: int, size: int, hmod: int, name: int) -> int:
    err, address, nbytes = D.cuModuleGetGlobal(hmod, _cstr(name))
    if err == _OK:
        _put(dptr, int(address))
        _put(size, int(nbytes))
    return int(err)


def _event_elapsed(out: int, start: int, end: int) -> int:
    err, ms = D.cuEventElapsedTime(start, end)
    if err == _OK and out:
        ctypes.c_float.from_address(out).value = float(ms)
    return int(err)


def _error_text(name: str) -> Callable[..., int]:
    def call(error: int, out: int) -> int:
        try:
            code = D.CUresult(error)
        except ValueError:
            _put(out, 0)
            return INVALID_VALUE
        err, text = getattr(D, name)(code)
        if err != _OK:
            _put(out, 0)
            return int(err)
        buffer = _ERROR_TEXTS.setdefault((name, error), ctypes.create_string_buffer(text))
        _put(out, ctypes.addressof(buffer))
        return 0

    return call


def _enum_call(name: str, enum: str, position: int, outputs: tuple[Callable[[int, int], None],
                                                          ...] = ()) -> Callable[..., int]:
    """A call with an enum argument at C ``position`` (after the output
    pointers) and outputs first: the enum built as cuda-python wants it."""

    def call(*args: int) -> int:
        outs, rest = args[:len(outputs)], list(args[len(outputs):])
        try:
            rest[position] = getattr(D, enum)(rest[position])
        except ValueError:
            return INVALID_VALUE
        result = getattr(D, name)(*rest)
        if result[0] == _OK:
            for put, out, value in zip(outputs, outs, result[1:], strict=False):
                put(out, int(value))
        return int(result[0])

    return call


def _outputs_last(name: str, n_in: int, *puts: Callable[[int, int], None]) -> Callable[..., int]:
    """``cuX(in..., T *out...)``: outputs after the inputs."""

    def call(*args: int) -> int:
        result = getattr(D, name)(*args[:n_in])
        if result[0] == _OK:
            for put, out, value in zip(puts, args[n_in:], result[1:], strict=True):
                put(out, int(value))
        return int(result[0])

    return call


def _device_uuid(out: int, dev: int) -> int:
    """The CPU device's UUID: fixed bytes naming gpusafe, per device ordinal
    (the identity frameworks key their device objects on)."""
    err, _ = D.cuDeviceGetName(16, dev)
    if err == _OK and out:
        ctypes.memmove(out, b"gpusafe-cpu-dv" + bytes([0, dev & 0xFF]), 16)
    return int(err)


def _c_text(name: str) -> Callable[..., int]:
    """``cuX(char *out, int length, args...)`` from ``cuX(length, args...) -> (err, bytes)``."""

    def call(out: int, length: int, *args: int) -> int:
        err, text = getattr(D, name)(length, *args)
        if err == _OK and length > 0:
            data = bytes(text).split(b"\0", 1)[0][: length - 1] + b"\0"
            ctypes.memmove(out, data, len(data))
        return int(err)

    return call


def _func_get_name(out: int, f: int) -> int:
    err, name = D.cuFuncGetName(f)
    if err == _OK:
        buffer = _ERROR_TEXTS.setdefault(("cuFuncGetName", f), ctypes.create_string_buffer(name))
        _put(out, ctypes.addressof(buffer))
    return int(err)


def _launch(f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
            stream: int, params: int, extra: int) -> int:
    return int(D.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)[0])


_ATTRIBUTE_SIZE = 72
"""sizeof(CUlaunchAttribute): the id padded to 8 bytes, then a 64-byte value."""


def _launch_attributes(address: int, count: int) -> list:
    """A ``CUlaunchConfig``'s attributes as cuda-python's: the cooperative one
    (``grid.sync()``) is served; any other is named, never dropped."""
    attributes = []
    for k in range(count):
        at = address + k * _ATTRIBUTE_SIZE
        ident = ctypes.c_uint32.from_address(at).value
        if ident != int(D.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE):
            raise NotServed(f"cuLaunchKernelEx with launch attribute {ident} is not served by "
                            "the CPU device's stand-in driver (only the cooperative one is)")
        a = D.CUlaunchAttribute()
        a.id = D.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        a.value.cooperative = ctypes.c_int32.from_address(at + 8).value
        attributes.append(a)
    return attributes


def _launch_ex(config: int, f: int, params: int, extra: int) -> int:
    """``cuLaunchKernelEx``: the C ``CUlaunchConfig`` read into cuda-python's."""
    if not config:
        return INVALID_VALUE
    dims = (ctypes.c_uint32 * 7).from_address(config)
    stream = ctypes.c_uint64.from_address(config + 32).value
    count = ctypes.c_uint32.from_address(config + 48).value
    attributes = _launch_attributes(ctypes.c_uint64.from_address(config + 40).value, count) \
        if count else []
    c = D.CUlaunchConfig()
    (c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ,
     c.sharedMemBytes) = tuple(dims)
    c.hStream = D.CUstream(stream)
    if attributes:
        c.attrs = attributes
        c.numAttrs = len(attributes)
    return int(D.cuLaunchKernelEx(c, f, params, extra)[0])


FRAMEWORK_LIBRARIES = {
    "cupy/random/_generator_api": "cuRAND",
    "cupy/cuda/cub": "CUB",
    "cupy/cuda/thrust": "Thrust",
    "cupy/cuda/jitify": "Jitify",
}
"""A framework's extension modules that carry a CUDA library (machine code
and NVIDIA's runtime linked in statically, reaching the driver through its
private interface), by path less the extension suffix: the library they are."""


def _extension_module(path: str) -> str | None:
    """``pkg/mod`` of a Python extension module's file (``.../site-packages/
    pkg/mod.cpython-311-x86_64-linux-gnu.so``), None for any other library."""
    name = path.rsplit("/", 1)[-1]
    if ".cpython-" not in name and not name.endswith(".abi3.so"):
        return None
    folders = path.rsplit("/", 1)[0].split("/")
    stem = name.split(".", 1)[0]
    for at in range(len(folders) - 1, -1, -1):
        if folders[at] in ("site-packages", "dist-packages"):
            return "/".join(folders[at + 1:] + [stem])
    return stem


def _export_table(_table: int, caller: int) -> int:
    who = _cstr(caller).decode(errors="replace")
    module = _extension_module(who)
    if module is not None:
        dotted = module.replace("/", ".")
        library = FRAMEWORK_LIBRARIES.get(module)
        if library is not None:
            raise NotServed(f"{library} is a CUDA library, which gpusafe's CPU device does not "
                            f"run ({dotted} carries it, with NVIDIA's CUDA runtime linked in); "
                            "run with a GPU (--device cuda) to use it",
                            label=f"{library}: {dotted}")
        raise NotServed(f"{dotted}, a Python extension module, has NVIDIA's CUDA runtime (or a "
                        "CUDA library) linked in, which reaches the driver through its private "
                        "interface: gpusafe's CPU device serves the public driver API only; run "
                        "with a GPU (--device cuda) to use it", label=dotted)
    raise NotServed(
        f"cuGetExportTable, the driver's private interface, was asked for by {who}: a CUDA "
        "runtime linked statically into the program uses it, and the CPU device serves the "
        "public driver API only; build the program with `nvcc -cudart shared --no-compress`")


def _table() -> dict[str, Callable[..., int]]:
    out1 = _out1()
    out1_i32 = _out1(_put_i32)
    calls: dict[str, Callable[..., int]] = {
        "cuDeviceGetName": _device_get_name,
        "cuDeviceGetAttribute": _device_get_attribute,
        "cuDeviceComputeCapability": _compute_capability,
        "cuFuncGetAttribute": _func_get_attribute,
        "cuCtxCreate": _ctx_create,
        "cuModuleLoadData": _module_load_data,
        "cuModuleLoadDataEx": _module_load_data,
        "cuModuleLoad": _module_load,
        "cuModuleGetFunction": _module_get_function,
        "cuModuleGetGlobal": _module_get_global,
        "cuMemGetInfo": _two_outputs("cuMemGetInfo"),
        "cuMemGetAddressRange": _two_outputs("cuMemGetAddressRange"),
        "cuEventElapsedTime": _event_elapsed,
        "cuGetErrorName": _error_text("cuGetErrorName"),
        "cuGetErrorString": _error_text("cuGetErrorString"),
        "cuLaunchKernel": _launch,
        "cuLaunchKernelEx": _launch_ex,
        "cuGetExportTable": _export_table,
        "cuDeviceGetUuid": _device_uuid,
        "cuDeviceGetPCIBusId": _c_text("cuDeviceGetPCIBusId"),
        "cuFuncGetName": _func_get_name,
        "cuCtxGetLimit": _enum_call("cuCtxGetLimit", "CUlimit", 0, (_put,)),
        "cuCtxSetLimit": _enum_call("cuCtxSetLimit", "CUlimit", 0),
        "cuFuncSetAttribute": _enum_call("cuFuncSetAttribute", "CUfunction_attribute", 1),
        "cuFuncSetCacheConfig": _enum_call("cuFuncSetCacheConfig", "CUfunc_cache", 1),
        "cuCtxGetStreamPriorityRange": _two_outputs("cuCtxGetStreamPriorityRange"),
        "cuDevicePrimaryCtxGetState": _outputs_last("cuDevicePrimaryCtxGetState", 1,
                                                    _put_u32, _put_i32),
        "cuFuncGetParamInfo": _outputs_last("cuFuncGetParamInfo", 2, _put, _put),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor": out1_i32(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
    }
    for name in ("cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount", "cuCtxGetDevice",
                 "cuModuleGetFunctionCount"):
        calls[name] = out1_i32(name)
    calls["cuCtxGetFlags"] = _out1(_put_u32)("cuCtxGetFlags")
    for name, put in (("cuStreamGetFlags", _put_u32), ("cuStreamGetPriority", _put_i32),
                      ("cuStreamIsCapturing", _put_i32),
                      ("cuStreamGetCtx", _put), ("cuCtxGetApiVersion", _put_u32)):
        calls[name] = _outputs_last(name, 1, put)
    for name in ("cuDeviceTotalMem", "cuCtxGetCurrent", "cuStreamCreateWithPriority",
                 "cuMemHostGetDevicePointer",
                 "cuFuncGetModule", "cuCtxPopCurrent",
                 "cuDevicePrimaryCtxRetain", "cuMemAlloc", "cuMemAllocHost", "cuMemHostAlloc",
                 "cuMemAllocManaged", "cuMemAllocAsync", "cuStreamCreate", "cuEventCreate"):
        calls[name] = out1(name)
    for name in ("cuInit", "cuCtxDestroy", "cuCtxSynchronize", "cuCtxSetCurrent",
                 "cuCtxPushCurrent", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxSetFlags", "cuDevicePrimaryCtxReset",
                 "cuModuleUnload", "cuMemFree", "cuMemFreeAsync", "cuMemFreeHost",
                 "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD", "cuMemcpy",
                 "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync", "cuMemcpyAsync",
                 "cuMemsetD8", "cuMemsetD16", "cuMemsetD32", "cuMemsetD8Async",
                 "cuMemsetD16Async", "cuMemsetD32Async", "cuStreamDestroy",
                 "cuStreamSynchronize", "cuStreamQuery", "cuStreamWaitEvent", "cuEventRecord",
                 "cuEventSynchronize", "cuEventQuery", "cuEventDestroy",
                 "cuLaunchCooperativeKernel"):
        calls[name] = _plain(name)
    return calls


def _ctx_synchronize_v2(ctx: int) -> int:
    """CUDA 13's ``cuCtxSynchronize_v2(ctx)``: the CPU device runs every call
    to completion, so only the context is judged."""
    if ctx:
        err, current = D.cuCtxGetCurrent()
        if err != _OK or int(current) != ctx:
            return NOT_SUPPORTED  # synchronising another thread's context
    return int(D.cuCtxSynchronize()[0])


CALLS: dict[str, Callable[..., Any]] = _table()
"""Base name (what ``cuGetProcAddress`` is asked for) -> the C-call adapter."""

BY_SYMBOL: dict[str, Callable[..., Any]] = {"cuCtxSynchronize_v2": _ctx_synchronize_v2}
"""The versions whose ABI differs from the base name's, by exported symbol;
one not listed (``cuCtxGetDevice_v2``, ``cuStreamGetCtx_v2``) is not served."""

NEWER_ABI = frozenset({"cuCtxSynchronize_v2", "cuCtxGetDevice_v2", "cuStreamGetCtx_v2"})
