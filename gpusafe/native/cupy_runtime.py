"""CuPy on the CPU device: its CUDA runtime calls served by the Python
door, its kernels compiled to PTX with line information, its memory pool
bypassed, its CUDA libraries named.

CuPy's wheels link the CUDA runtime statically into
``cupy_backends.cuda.api.runtime`` (and into ``cupy.cuda.cub``, ``thrust``,
``jitify`` and ``cupy.random``); a static runtime reaches the driver through
NVIDIA's private export tables, which the stand-in driver does not provide.
So when that module loads, its functions, both the Python attributes and the
``__pyx_capi__`` capsules the rest of CuPy calls from Cython, are replaced by
the same calls on ``cuda.bindings.runtime`` (in a checked process the door
over the CPU device, which checks them), before any other CuPy module loads.
CuPy's driver calls (module loading, launches) already reach the stand-in
``libcuda.so.1``, which CuPy opens itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cuda.bindings import runtime as R

from ..engine.callsite import program_site
from .build import _cache_root
from .capsules import replace

if TYPE_CHECKING:
    from ..engine.findings import Findings

NOT_SUPPORTED = 801  # cudaErrorNotSupported

ENVIRONMENT = {
    "CUPY_COMPILE_WITH_PTX": "1",  # NVRTC gives PTX, not a cubin, to cuModuleLoadData
    "CUPY_ACCELERATORS": "",  # CuPy's own reduction kernels, not CUB's prebuilt ones
}
"""What the session sets for CuPy on the CPU device (CuPy reads it when it
loads, so the session sets it before)."""

_runtime: ModuleType | None = None
_findings: Findings | None = None


def configure(findings: Findings) -> None:
    """Where CuPy's unserved calls are named; the environment CuPy reads
    when it loads."""
    global _findings
    _findings = findings
    os.environ.update(ENVIRONMENT)


def _refuse(label: str, why: str) -> None:
    """A call the CPU device does not serve: one of the report's calls not
    implemented, at the program's line that made it, so the run exits 2."""
    if _findings is not None:
        site = program_site()
        _findings.unimplemented(label, None if site is None else str(site), why)


def _check(result: Any) -> Any:
    """The values of a ``cuda.bindings.runtime`` call, or CuPy's own error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        assert _runtime is not None
        raise _runtime.CUDARuntimeError(int(err))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _handle(value: Any) -> int:
    return int(value) if value is not None else 0


def _optional(address: int, index: int, ctype: type = ctypes.c_uint, default: int = 0) -> int:
    """Cython's optional arguments of a C call: ``{int n; fields...}``, by address."""
    if not address or ctypes.c_int.from_address(address).value <= index:
        return default
    return ctype.from_address(address + 4 + 4 * index).value


def _device_properties(device: int) -> dict[str, Any]:
    prop = _check(R.cudaGetDeviceProperties(device))
    out = {}
    for name in dir(prop):
        if name.startswith("_"):
            continue
        value = getattr(prop, name)
        if not callable(value):
            out[name] = value
    return out


def _pointer_attributes(ptr: int) -> Any:
    assert _runtime is not None
    a = _check(R.cudaPointerGetAttributes(ptr))
    return _runtime.PointerAttributes(int(a.device), _handle(a.devicePointer),
                                      _handle(a.hostPointer), int(a.type))


def _stream_is_capturing(stream: int) -> int:
    """CuPy asks before every copy; where the CPU device has no stream
    capture no stream is capturing (a ``cudaStreamBeginCapture`` was named
    as not implemented already)."""
    if getattr(R.cudaStreamIsCapturing, "unserved", False):
        return 0
    status = _check(R.cudaStreamIsCapturing(stream))
    return int(status == R.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive)


def _runtime_version() -> int:
    return int(_check(R.cudaRuntimeGetVersion()))


_SERVED: dict[str, tuple[Callable[..., Any], int]] = {
    # name: (the function, given the C arguments after Cython's own; the C error value)
    "getDeviceCount": (lambda: int(_check(R.cudaGetDeviceCount())), -1),
    "getDevice": (lambda: int(_check(R.cudaGetDevice())), -1),
    "setDevice": (lambda d: _check(R.cudaSetDevice(d)), 0),
    "deviceSynchronize": (lambda: _check(R.cudaDeviceSynchronize()), 0),
    "deviceGetAttribute": (
        lambda a, d: int(_check(R.cudaDeviceGetAttribute(R.cudaDeviceAttr(a), d))), -1),
    "getDeviceProperties": (_device_properties, 0),
    "deviceCanAccessPeer": (lambda d, p: int(_check(R.cudaDeviceCanAccessPeer(d, p))), -1),
    "deviceGetLimit": (lambda limit: int(_check(R.cudaDeviceGetLimit(R.cudaLimit(limit)))), -1),
    "deviceSetLimit": (lambda limit, v: _check(R.cudaDeviceSetLimit(R.cudaLimit(limit), v)), 0),
    "driverGetVersion": (lambda: int(_check(R.cudaDriverGetVersion())), -1),
    "runtimeGetVersion": (_runtime_version, -1),
    "_getCUDAMajorVersion": (lambda: _runtime_version() // 1000, -1),
    "_ensure_context": (lambda: _check(R.cudaFree(0)), 0),
    "malloc": (lambda size: _handle(_check(R.cudaMalloc(size))), 0),
    "mallocManaged": (lambda size, opt: _handle(_check(R.cudaMallocManaged(
        size, _optional(opt, 0, default=1)))), 0),
    "mallocAsync": (lambda size, s: _handle(_check(R.cudaMallocAsync(size, s))), 0),
    "hostAlloc": (lambda size, flags: _handle(_check(R.cudaHostAlloc(size, flags))), 0),
    "hostRegister": (lambda p, size, flags: _check(R.cudaHostRegister(p, size, flags)), 0),
    "hostUnregister": (lambda p: _check(R.cudaHostUnregister(p)), 0),
    "free": (lambda p: _check(R.cudaFree(p)), 0),
    "freeHost": (lambda p: _check(R.cudaFreeHost(p)), 0),
    "freeAsync": (lambda p, s: _check(R.cudaFreeAsync(p, s)), 0),
    "memGetInfo": (lambda: tuple(int(v) for v in _check(R.cudaMemGetInfo())), 0),
    "memcpy": (lambda d, s, n, k: _check(R.cudaMemcpy(d, s, n, R.cudaMemcpyKind(k))), 0),
    "memcpyAsync": (lambda d, s, n, k, st: _check(
        R.cudaMemcpyAsync(d, s, n, R.cudaMemcpyKind(k), st)), 0),
    "memcpyPeer": (lambda d, dd, s, sd, n: _check(R.cudaMemcpyPeer(d, dd, s, sd, n)), 0),
    "memcpyPeerAsync": (lambda d, dd, s, sd, n, st: _check(
        R.cudaMemcpyPeerAsync(d, dd, s, sd, n, st)), 0),
    "memcpy2D": (lambda d, dp, s, sp, w, h, k: _check(
        R.cudaMemcpy2D(d, dp, s, sp, w, h, R.cudaMemcpyKind(k))), 0),
    "memcpy2DAsync": (lambda d, dp, s, sp, w, h, k, st: _check(
        R.cudaMemcpy2DAsync(d, dp, s, sp, w, h, R.cudaMemcpyKind(k), st)), 0),
    "memset": (lambda p, v, n: _check(R.cudaMemset(p, v, n)), 0),
    "memsetAsync": (lambda p, v, n, s: _check(R.cudaMemsetAsync(p, v, n, s)), 0),
    "pointerGetAttributes": (_pointer_attributes, 0),
    "pointerGetMemoryType": (lambda p: int(_check(R.cudaPointerGetAttributes(p)).type), -1),
    "streamCreate": (lambda: _handle(_check(R.cudaStreamCreate())), 0),
    "streamCreateWithFlags": (lambda f: _handle(_check(R.cudaStreamCreateWithFlags(f))), 0),
    "streamCreateWithPriority": (lambda f, p: _handle(_check(
        R.cudaStreamCreateWithPriority(f, p))), 0),
    "streamGetFlags": (lambda s: int(_check(R.cudaStreamGetFlags(s))), 0),
    "streamGetPriority": (lambda s: int(_check(R.cudaStreamGetPriority(s))), 0),
    "streamDestroy": (lambda s: _check(R.cudaStreamDestroy(s)), 0),
    "streamSynchronize": (lambda s: _check(R.cudaStreamSynchronize(s)), 0),
    "streamQuery": (lambda s: int(R.cudaStreamQuery(s)[0]), 0),  # a status, not an error
    "streamWaitEvent": (lambda s, e, opt: _check(R.cudaStreamWaitEvent(s, e, _optional(opt, 0))),
                        0),
    "streamIsCapturing": (_stream_is_capturing, 0),
    "eventCreate": (lambda: _handle(_check(R.cudaEventCreate())), 0),
    "eventCreateWithFlags": (lambda f: _handle(_check(R.cudaEventCreateWithFlags(f))), 0),
    "eventDestroy": (lambda e: _check(R.cudaEventDestroy(e)), 0),
    "eventElapsedTime": (lambda a, b: float(_check(R.cudaEventElapsedTime(a, b))), 0),
    "eventQuery": (lambda e: int(R.cudaEventQuery(e)[0]), 0),  # a status, not an error
    "eventRecord": (lambda e, s: _check(R.cudaEventRecord(e, s)), 0),
    "eventSynchronize": (lambda e: _check(R.cudaEventSynchronize(e)), 0),
}


_ERROR_VALUE = {"int": -1, "size_t": -1}  # Cython's `except? -1`; the others `except? 0`
_KEPT = {"check_status"}  # pure Python in CuPy: it needs no runtime call


def _unserved(name: str) -> Callable[..., Any]:
    """A runtime call CuPy made that the CPU device does not serve: named in
    the report (the run exits 2), and CuPy gets ``cudaErrorNotSupported``."""
    def call(*_args: Any) -> Any:
        _refuse(f"cupy.cuda.runtime.{name}", "not implemented by gpusafe's CPU device")
        assert _runtime is not None
        raise _runtime.CUDARuntimeError(NOT_SUPPORTED)
    return call


_PYTHON_FORMS: dict[str, Callable[..., Any]] = {
    # the calls with Cython optional arguments: from C their address, from Python values
    "mallocManaged": lambda size, flags=1: _handle(_check(R.cudaMallocManaged(size, flags))),
    "streamWaitEvent": lambda s, e, flags=0: _check(R.cudaStreamWaitEvent(s, e, flags)),
}


def _while_running(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, but a no-op once Python shuts down: CuPy then frees the
    arrays, streams and events still alive, the session has written its
    report, and this module's globals may already be cleared."""
    finalizing = sys.is_finalizing  # held here, for the same reason

    def call(*args: Any) -> Any:
        return None if finalizing() else function(*args)
    return call


def serve_runtime(module: ModuleType) -> None:
    """Replace CuPy's runtime module's calls (capsules and Python functions)
    by the door's, and every other one of them by a named refusal."""
    global _runtime
    _runtime = module
    capi: dict[str, Any] = module.__pyx_capi__
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    served: dict[str, tuple[Callable[..., Any], int]] = {}
    for name, capsule in capi.items():
        signature = get_name(capsule).decode()
        if name in _KEPT or "(" not in signature:
            continue  # pure Python, or a constant
        result = signature.split("(")[0].strip()
        function, error = _SERVED.get(name, (_unserved(name), _ERROR_VALUE.get(result, 0)))
        served[name] = (_while_running(function), error)
    replace(capi, served)  # what no trampoline takes (a struct by value) keeps CuPy's own
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("__") or name in _KEPT or isinstance(value, type) \
                or not callable(value):
            continue
        function = _PYTHON_FORMS.get(name) or _SERVED.get(name, (_unserved(name), 0))[0]
        setattr(module, name, function)


def quiet_unload_at_exit(module: ModuleType) -> None:
    """CuPy's driver module: a kernel module CuPy frees while the
    interpreter shuts down is left to the process's end.  The stand-in
    driver answers calls made then with ``CUDA_ERROR_DEINITIALIZED``, and
    CuPy's error message for it reads an error name the driver did not
    write, printing a traceback at every exit."""
    unload = module.moduleUnload
    finalizing = sys.is_finalizing  # held here: module globals are cleared at shutdown

    def module_unload(handle: int) -> None:
        if not finalizing():
            unload(handle)

    replace(module.__pyx_capi__, {"moduleUnload": (module_unload, 0)})


def plain_allocator(module: ModuleType) -> None:
    """CuPy's default memory pool rounds every allocation up to 512 bytes and
    reuses freed blocks, so an overrun inside the rounding and a use of a
    freed block stay in memory the checker sees as allocated: on the CPU
    device each CuPy array is its own ``cudaMalloc``."""
    module.cuda.set_allocator(None)


def add_line_info(module: ModuleType) -> None:
    """Every kernel CuPy compiles carries ``.loc`` lines (``-lineinfo``), and
    its ``.file`` names a copy of the kernel's source in gpusafe's cache
    instead of the temporary file CuPy deletes after compiling, so a finding
    in a RawKernel is shown at its source line, with the line's text."""
    compile_cached = module._compile_module_with_cache
    compile_nvrtc = module._compile_using_nvrtc_no_warning

    def with_line_info(source: Any, options: Any = (), *args: Any, **kwargs: Any) -> Any:
        options = tuple(options)
        if "-lineinfo" not in options and "--generate-line-info" not in options:
            options += ("-lineinfo",)
        return compile_cached(source, options, *args, **kwargs)

    def with_kept_source(source: str, options: Any = (), arch: Any = None,
                         filename: str = "kern.cu", *args: Any, **kwargs: Any) -> Any:
        ptx, mapping = compile_nvrtc(source, options, arch, filename, *args, **kwargs)
        if isinstance(ptx, bytes) and filename and b".file" in ptx:
            ptx = keep_source(ptx, source, filename)
        return ptx, mapping

    module._compile_module_with_cache = with_line_info
    module._compile_using_nvrtc_no_warning = with_kept_source


def keep_source(ptx: bytes, source: str, filename: str) -> bytes:
    """``ptx`` with its ``.file`` of ``filename`` (in a temporary folder)
    naming a lasting copy of ``source``; CuPy caches the PTX, so the copy is
    kept in gpusafe's cache, named by the source's digest."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = _cache_root() / "cupy-sources"
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / f"{digest}-{Path(filename).name}"
    if not kept.is_file():
        tmp = kept.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, kept)
    pattern = re.compile(rb'(\.file\s+\d+\s+")([^"]*' + re.escape(filename.encode()) + rb')"')
    return pattern.sub(lambda m: m.group(1) + str(kept).encode() + b'"', ptx)


class LibraryStandIn(ModuleType):
    """A CUDA library's CuPy module on the CPU device: the first use of any
    of its names (a function, a constant read before the call) is named in
    the report (the run exits 2) and raises."""

    def __init__(self, name: str, library: str) -> None:
        super().__init__(name)
        self.library = library

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") and attribute != "__pyx_capi__":
            raise AttributeError(attribute)
        what = f"{self.__name__}.{attribute}"
        _refuse(f"{self.library}: {what}",
                f"{self.library} is a CUDA library, which gpusafe's CPU device does not run")
        message = (f"{self.library} ({what}) is not implemented by gpusafe's CPU device; "
                   "run with a GPU (--device cuda) to use it")
        if attribute == "__pyx_capi__":  # a CuPy module calling it from C is loading
            raise ImportError(message)
        raise NotImplementedError(message)
