"""The cuda-python driver API on the CPU device.

A program written for ``cuda.bindings.driver`` runs unchanged on the CPU device
when it imports this module instead::

    from gpusafe.cpu import driver          # instead of: from cuda.bindings import driver

Names, argument conventions and return tuples are cuda-python's (13.x, the
pinned ``cuda-bindings``): every call returns ``(CUresult, *outputs)``, the
outputs being ``None`` when the result is not ``CUDA_SUCCESS``. The handle,
enum and struct types *are* cuda-python's (``CUdevice``, ``CUcontext``,
``CUmodule``, ``CUfunction``, ``CUstream``, ``CUevent``, ``CUdeviceptr``,
``CUresult``, ``CUdevice_attribute``, ``CUjit_option``, ...): every non-function
name of ``cuda.bindings.driver`` is re-exported from here.

Decisions (see also :mod:`gpusafe.cpu.driver_profile` for the device profile):

* **Unimplemented functions are absent.** A ``cuda.bindings.driver`` function
  this module does not implement is not an attribute of it: using one raises
  ``AttributeError`` naming the function and saying the CPU device does not
  implement it. It never reaches the real driver, and ``hasattr`` answers
  honestly for feature probes. ``IMPLEMENTED`` lists what is implemented.
* **Errors are CUresults**, as from the real driver: an invalid handle is
  ``CUDA_ERROR_INVALID_HANDLE`` (``CUDA_ERROR_INVALID_CONTEXT`` for contexts),
  a call before ``cuInit`` is ``CUDA_ERROR_NOT_INITIALIZED``, a bad value or a
  device range outside its allocation is ``CUDA_ERROR_INVALID_VALUE``, PTX the
  parser rejects is ``CUDA_ERROR_INVALID_PTX``, a device fault is the
  ``.result`` of the executor's ``DeviceError``. Arguments cuda-python itself
  cannot convert raise the exception cuda-python raises (``TypeError``,
  ``OverflowError``, ``RuntimeError``). :func:`last_error_detail` gives the
  text behind the last failing call (the PTX parse error with its line, the
  faulting access, ...) for gpusafe's own reports.
* **Sticky errors.** After a launch fails with an error the real driver treats
  as fatal to the context (illegal address, trap/assert, misaligned address,
  illegal instruction, ...), every later call that uses that context returns
  the same error. ``cuCtxDestroy`` (or ``cuDevicePrimaryCtxReset`` for the
  primary context) discards it; a new context starts clean.
* **Execution is synchronous.** Streams and events exist and are validated;
  every operation has finished when its call returns; ``cuEventRecord`` stores
  a host timestamp, so ``cuEventElapsedTime`` gives real milliseconds.
  A launch that faults returns its error from ``cuLaunchKernel`` itself (a
  real driver may report it at the next synchronising call instead; a
  program checking either sees it).
* **Host buffers** are what cuda-python accepts: ``None``, an ``int`` address,
  a ``CUdeviceptr`` (taken as an address), or any contiguous buffer-protocol
  object (numpy arrays, ``bytes``, ``bytearray``, ``memoryview``, ctypes
  objects). A ``str`` is a ``TypeError``, as in cuda-python. When the buffer's
  length is known and is smaller than the byte count, the copy fails with
  ``CUDA_ERROR_INVALID_VALUE`` instead of reading or writing past it.
* **Module images** are PTX text only: bytes, a numpy char array, any buffer,
  or an ``int`` address of a NUL-terminated string (``str`` is a TypeError, as
  in cuda-python). An ELF cubin or a fatbin cannot run on the CPU device:
  ``CUDA_ERROR_NOT_SUPPORTED``, with the reason in :func:`last_error_detail`.
* **One device**, ordinal 0, with one device memory shared by all its
  contexts (unified addressing). Allocations, modules, streams and events
  belong to the context that made them and go away with it.
* Function attributes: ``NUM_REGS``, ``LOCAL_SIZE_BYTES``,
  ``SHARED_SIZE_BYTES`` and ``MAX_THREADS_PER_BLOCK`` come from the PTX
  (``KernelInfo``); ``CONST_SIZE_BYTES`` is 0 (not tracked); register counts
  do not limit launches (no ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``).

gpusafe-specific functions (not in cuda-python): :func:`last_error_detail`,
:func:`last_error_exception`, :func:`last_launch_result`,
:func:`set_launch_observers`, :func:`set_launch_stdout`, :func:`device_memory`,
:func:`reset`.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from cuda.bindings import driver as _real

from ..cudaapi import args as _args
from ..cudaapi import images as _images
from . import driver_profile as _profile
from .bindings import reexport

# --------------------------------------------------------------------------
# re-export the types, enums and constants of cuda.bindings.driver
# --------------------------------------------------------------------------

#: Names of the functions of cuda.bindings.driver (implemented here or not).
REAL_FUNCTIONS = reexport(_real, "cu", globals())

CUresult = _real.CUresult
CUdevice = _real.CUdevice
CUcontext = _real.CUcontext
CUmodule = _real.CUmodule
CUfunction = _real.CUfunction
CUstream = _real.CUstream
CUevent = _real.CUevent
CUdeviceptr = _real.CUdeviceptr
CUdevice_attribute = _real.CUdevice_attribute
CUfunction_attribute = _real.CUfunction_attribute
CUjit_option = _real.CUjit_option
CUlimit = _real.CUlimit
CUfunc_cache = _real.CUfunc_cache
CUctxCreateParams = _real.CUctxCreateParams
CUlaunchConfig = _real.CUlaunchConfig

_OK = CUresult.CUDA_SUCCESS
_E = CUresult  # shorthand in this module


# --------------------------------------------------------------------------
# the executor side, imported when first needed
# --------------------------------------------------------------------------


@functools.cache
def _errors():
    from gpusafe.cpu import errors

    return errors


@functools.cache
def _memory_module():
    from gpusafe.cpu import memory

    return memory


@functools.cache
def _program_class():
    from gpusafe.cpu.program import Program

    return Program


@functools.cache
def _parse_error_class():
    from instrument.ptx import ParseError

    return ParseError


# --------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------


class _Fail(Exception):
    """Internal: ends an API call with ``result``; ``detail`` goes to last_error_detail()."""

    def __init__(self, result: CUresult, detail: str | None = None,
                 exc: BaseException | None = None):
        super().__init__(detail or result.name)
        self.result = result
        self.detail = detail or _profile.ERROR_STRINGS.get(result.name, result.name)
        self.exc = exc


class _Context:
    def __init__(self, handle: int, flags: int, primary: bool):
        self.handle = handle
        self.flags = flags
        self.primary = primary
        self.alive = True
        self.sticky: CUresult | None = None
        self.sticky_detail = ""
        self.modules: dict[int, _Module] = {}
        self.streams: dict[int, _Stream] = {}
        self.events: dict[int, _Event] = {}
        self.allocations: set[int] = set()
        self.host_allocations: set[int] = set()
        self.limits = dict(_profile.DEFAULT_LIMITS)


class _Module:
    def __init__(self, handle: int, ctx: _Context, program, ptx_version: tuple[int, int],
                 target: int):
        self.handle = handle
        self.ctx = ctx
        self.program = program
        self.ptx_version = ptx_version
        self.target = target
        self.functions: dict[str, _Function] = {}


class _Function:
    def __init__(self, handle: int, module: _Module, name: str, info):
        self.handle = handle
        self.module = module
        self.name = name
        self.info = info
        static = int(info.static_shared or 0)
        self.max_dynamic_shared = max(0, _profile.DEFAULT_SHARED_PER_BLOCK - static)
        self.carveout = -1
        self.cache_config = CUfunc_cache.CU_FUNC_CACHE_PREFER_NONE


class _Stream:
    def __init__(self, handle: int, ctx: _Context, flags: int, priority: int):
        self.handle = handle
        self.ctx = ctx
        self.flags = flags
        self.priority = priority


class _Event:
    def __init__(self, handle: int, ctx: _Context, flags: int):
        self.handle = handle
        self.ctx = ctx
        self.flags = flags
        self.time: float | None = None


class _State:
    def __init__(self, memory=None):
        self.initialized = False
        self.memory = memory
        self.handles: dict[int, object] = {}
        self.next_handle = 0x5AFE_0000_0000
        self.primary: _Context | None = None
        self.primary_refcount = 0
        self.primary_flags = 0
        self.alloc_owner: dict[int, _Context] = {}
        self.host_allocs: dict[int, tuple[np.ndarray, _Context]] = {}
        self.observers: tuple = ()
        self.stdout = None
        self.last_launch = None

    def new_handle(self, obj) -> int:
        self.next_handle += 0x100
        self.handles[self.next_handle] = obj
        return self.next_handle


_LOCK = threading.RLock()
_S = _State()
_generation = 0
_tls = threading.local()


def _stack() -> list[_Context]:
    """The calling thread's context stack."""
    if getattr(_tls, "generation", None) != _generation:
        _tls.generation = _generation
        _tls.stack = []
        _tls.error = None
    return _tls.stack


def _record_error(f: _Fail) -> None:
    _stack()
    _tls.error = f


# --------------------------------------------------------------------------
# gpusafe-specific entry points
# --------------------------------------------------------------------------


def last_error_detail() -> str | None:
    """Text explaining the calling thread's last failed call (None if none failed).

    For ``CUDA_ERROR_INVALID_PTX`` it is the parser's message with the PTX line;
    for a device fault, the executor's description of the access. Successful
    calls do not clear it.
    """
    _stack()
    f = _tls.error
    return None if f is None else f"{f.result.name}: {f.detail}"


def last_error_exception() -> BaseException | None:
    """The exception behind the last failed call (a ParseError, a DeviceError, ...), if any."""
    _stack()
    f = _tls.error
    return None if f is None else f.exc


def last_launch_result():
    """The ``LaunchResult`` of the last successful ``cuLaunchKernel`` (None before any)."""
    return _S.last_launch


def set_launch_observers(observers: Sequence) -> tuple:
    """Observers passed to every later launch (see docs/cpu-device.md); returns the old ones."""
    with _LOCK:
        old, _S.observers = _S.observers, tuple(observers)
        return old


def set_launch_stdout(stream) -> Any:
    """Where device ``printf`` output goes (None: the executor's default); returns the old one."""
    with _LOCK:
        old, _S.stdout = _S.stdout, stream
        return old


def device_memory():
    """The CPU device's DeviceMemory (None before cuInit)."""
    return _S.memory


def reset(memory=None) -> None:
    """Forget all driver state, as a new process would start (for tests and gpusafe runs).

    ``memory``: a DeviceMemory to use instead of a fresh one at the next cuInit.
    """
    global _S, _generation
    with _LOCK:
        old = _S
        for obj in list(old.handles.values()):
            if isinstance(obj, _Module):
                try:
                    obj.program.unload()
                except Exception:  # noqa: BLE001 - the state is discarded either way
                    pass
        _S = _State(memory)
        _generation += 1


# --------------------------------------------------------------------------
# API plumbing
# --------------------------------------------------------------------------

IMPLEMENTED: set[str] = set()


def _api(n_out: int) -> Callable:
    """Wrap an implementation that returns its outputs or raises _Fail into a cuda-python call."""

    def deco(fn):
        assert fn.__name__ in REAL_FUNCTIONS, fn.__name__
        IMPLEMENTED.add(fn.__name__)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _LOCK:
                try:
                    out = fn(*args, **kwargs)
                except _Fail as f:
                    _record_error(f)
                    return (f.result,) + (None,) * n_out
            if n_out == 0:
                return (_OK,)
            if n_out == 1:
                return (_OK, out)
            return (_OK, *out)

        wrapper.__doc__ = (getattr(_real, fn.__name__).__doc__ or "").split("\n")[0] + \
            "\n\n(gpusafe CPU device implementation; see gpusafe.cpu.driver.)"
        return wrapper

    return deco


def _require_init() -> None:
    if not _S.initialized:
        raise _Fail(_E.CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called")


def _check_ctx(ctx: _Context) -> _Context:
    if not ctx.alive:
        raise _Fail(_E.CUDA_ERROR_CONTEXT_IS_DESTROYED, "the context has been destroyed")
    if ctx.sticky is not None:
        raise _Fail(ctx.sticky, f"sticky error of this context, from an earlier launch: "
                                f"{ctx.sticky_detail}")
    return ctx


def _current(check: bool = True) -> _Context:
    _require_init()
    st = _stack()
    if not st:
        raise _Fail(_E.CUDA_ERROR_INVALID_CONTEXT, "no context is current to the calling thread")
    return _check_ctx(st[-1]) if check else st[-1]


def _lookup(value: int, cls, result: CUresult, what: str):
    obj = _S.handles.get(value)
    if not isinstance(obj, cls):
        raise _Fail(result, f"{what} {value:#x} is not a valid handle")
    return obj


def _device(dev) -> int:
    d = _args.handle_value(dev, CUdevice)
    return d


def _check_device(d: int) -> None:
    if d != 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_DEVICE, f"device {d} does not exist (the CPU device is 0)")


def _ctx_arg(ctx) -> _Context:
    h = _args.handle_value(ctx, CUcontext)
    obj = _S.handles.get(h)
    if not isinstance(obj, _Context) or not obj.alive:
        raise _Fail(_E.CUDA_ERROR_INVALID_CONTEXT, f"context {h:#x} is not a valid context")
    return obj


_DEFAULT_STREAMS = (0, _real.CU_STREAM_LEGACY, _real.CU_STREAM_PER_THREAD)


def _stream(value: int, ctx: _Context) -> _Stream | None:
    if value in _DEFAULT_STREAMS:
        return None
    s = _lookup(value, _Stream, _E.CUDA_ERROR_INVALID_HANDLE, "stream")
    if s.ctx is not ctx:
        raise _Fail(_E.CUDA_ERROR_INVALID_HANDLE, "the stream belongs to another context")
    return s


def _memory():
    return _S.memory


def _invalid_address(e: BaseException, what: str) -> _Fail:
    return _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"{what}: {e}", e)


# --------------------------------------------------------------------------
# initialisation, version, errors
# --------------------------------------------------------------------------


@_api(0)
def cuInit(Flags):
    flags = _args.c_int(Flags, "unsigned int", "Flags")
    if flags != 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "cuInit flags must be 0")
    if not _S.initialized:
        if _S.memory is None:
            _S.memory = _memory_module().DeviceMemory()
        _S.initialized = True


@_api(1)
def cuDriverGetVersion():
    return _profile.DRIVER_VERSION


@_api(1)
def cuGetErrorName(error):
    _args.require_enum(error, CUresult, "error")
    return error.name.encode()


@_api(1)
def cuGetErrorString(error):
    _args.require_enum(error, CUresult, "error")
    return _profile.ERROR_STRINGS.get(error.name, error.name).encode()


# --------------------------------------------------------------------------
# devices
# --------------------------------------------------------------------------


@_api(1)
def cuDeviceGetCount():
    _require_init()
    return 1


@_api(1)
def cuDeviceGet(ordinal):
    o = _args.c_int(ordinal, "int", "ordinal")
    _require_init()
    _check_device(o)
    return CUdevice(0)


@_api(1)
def cuDeviceGetName(length, dev):
    n = _args.c_int(length, "int", "length")
    d = _device(dev)
    _require_init()
    _check_device(d)
    if n <= 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "length must be positive")
    # cuda-python returns the whole b" " * length buffer the driver wrote into
    name = _profile.DEVICE_NAME.encode()[: n - 1] + b"\0"
    return name + b" " * (n - len(name))


@_api(1)
def cuDeviceGetAttribute(attrib, dev):
    _args.require_enum(attrib, CUdevice_attribute, "attrib")
    d = _device(dev)
    _require_init()
    _check_device(d)
    if attrib == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "CU_DEVICE_ATTRIBUTE_MAX is not an attribute")
    key = attrib.name[len("CU_DEVICE_ATTRIBUTE_"):]
    return int(_profile.DEVICE_ATTRIBUTES.get(key, 0))


@_api(1)
def cuDeviceTotalMem(dev):
    d = _device(dev)
    _require_init()
    _check_device(d)
    return int(_S.memory.capacity)


@_api(2)
def cuDeviceComputeCapability(dev):
    d = _device(dev)
    _require_init()
    _check_device(d)
    return _profile.CC_MAJOR, _profile.CC_MINOR


@_api(1)
def cuDeviceGetPCIBusId(length, dev):
    n = _args.c_int(length, "int", "length")
    d = _device(dev)
    _require_init()
    _check_device(d)
    if n <= 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "length must be positive")
    text = _profile.PCI_BUS_ID.encode()[: n - 1] + b"\0"
    return text + b" " * (n - len(text))


# --------------------------------------------------------------------------
# contexts
# --------------------------------------------------------------------------

_CTX_FLAGS_MASK = int(_real.CUctx_flags.CU_CTX_FLAGS_MASK)


def _new_context(flags: int, primary: bool) -> _Context:
    ctx = _Context(0, flags, primary)
    ctx.handle = _S.new_handle(ctx)
    return ctx


def _destroy_context(ctx: _Context, replacement: _Context | None = None) -> None:
    for mod in list(ctx.modules.values()):
        _unload_module(mod)
    mem = _S.memory
    for addr in list(ctx.allocations):
        try:
            mem.free(addr)
        except Exception:  # noqa: BLE001 - already freed through another path
            pass
        _S.alloc_owner.pop(addr, None)
    for addr in list(ctx.host_allocations):
        _S.host_allocs.pop(addr, None)
    for h in [*ctx.streams, *ctx.events]:
        _S.handles.pop(h, None)
    ctx.allocations.clear()
    ctx.host_allocations.clear()
    ctx.streams.clear()
    ctx.events.clear()
    ctx.alive = False
    _S.handles.pop(ctx.handle, None)
    st = _stack()
    if replacement is None:
        while ctx in st:
            st.remove(ctx)
    else:
        st[:] = [replacement if c is ctx else c for c in st]


def _check_ctx_flags(flags: int) -> None:
    if flags & ~_CTX_FLAGS_MASK:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"unknown context flags {flags:#x}")
    sched = flags & int(_real.CUctx_flags.CU_CTX_SCHED_MASK)
    if sched not in (0, 1, 2, 4):
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "more than one scheduling flag is set")


_MISSING = object()


@_api(1)
def cuCtxCreate(*args, **kwargs):
    """Both signatures: cuda-python 13 ``(ctxCreateParams, flags, dev)`` and 12.x ``(flags, dev)``."""
    names13 = ("ctxCreateParams", "flags", "dev")
    if len(args) + len(kwargs) == 3 or "ctxCreateParams" in kwargs:
        bound = dict(zip(names13, args, strict=False))
    elif len(args) + len(kwargs) == 2:
        bound = dict(zip(("flags", "dev"), args, strict=True))
        bound.setdefault("ctxCreateParams", None)
    else:
        raise TypeError(f"cuCtxCreate() takes 3 positional arguments (ctxCreateParams, flags, dev) "
                        f"or, as in cuda-python 12.x, 2 (flags, dev); {len(args) + len(kwargs)} given")
    for k, v in kwargs.items():
        if k not in names13 or k in bound:
            raise TypeError(f"cuCtxCreate() got an unexpected or repeated keyword argument '{k}'")
        bound[k] = v
    params = bound["ctxCreateParams"]
    if params is not None and not isinstance(params, CUctxCreateParams):
        raise TypeError("Argument 'ctxCreateParams' has incorrect type (expected "
                        f"cuda.bindings.driver.CUctxCreateParams, got {type(params).__name__})")
    flags = _args.c_int(bound["flags"], "unsigned int", "flags")
    d = _device(bound["dev"])
    _require_init()
    _check_device(d)
    _check_ctx_flags(flags)
    if params is not None and (int(params.numExecAffinityParams) != 0 or _has_cig(params)):
        raise _Fail(_E.CUDA_ERROR_NOT_SUPPORTED,
                    "execution affinity and CIG contexts are not supported by the CPU device")
    ctx = _new_context(flags, primary=False)
    _stack().append(ctx)
    return CUcontext(ctx.handle)


def _has_cig(params) -> bool:
    cig = params.cigParams  # a NULL pointer reads as an empty list
    return bool(cig) if isinstance(cig, list) else cig is not None


@_api(0)
def cuCtxDestroy(ctx):
    h = _args.handle_value(ctx, CUcontext)
    _require_init()
    obj = _S.handles.get(h)
    if not isinstance(obj, _Context) or not obj.alive:
        raise _Fail(_E.CUDA_ERROR_INVALID_CONTEXT, f"context {h:#x} is not a valid context")
    if obj.primary:
        raise _Fail(_E.CUDA_ERROR_INVALID_CONTEXT,
                    "a primary context is released with cuDevicePrimaryCtxRelease, not destroyed")
    _destroy_context(obj)


@_api(0)
def cuCtxSynchronize():
    _current()


@_api(1)
def cuCtxGetCurrent():
    _require_init()
    st = _stack()
    return CUcontext(st[-1].handle if st else 0)


@_api(0)
def cuCtxSetCurrent(ctx):
    h = _args.handle_value(ctx, CUcontext)
    _require_init()
    st = _stack()
    if h == 0:
        if st:
            st.pop()
        return
    obj = _ctx_arg(h)
    if st:
        st[-1] = obj
    else:
        st.append(obj)


@_api(0)
def cuCtxPushCurrent(ctx):
    h = _args.handle_value(ctx, CUcontext)
    _require_init()
    _stack().append(_ctx_arg(h))


@_api(1)
def cuCtxPopCurrent():
    _require_init()
    st = _stack()
    if not st:
        raise _Fail(_E.CUDA_ERROR_INVALID_CONTEXT, "the calling thread has no current context")
    return CUcontext(st.pop().handle)


@_api(1)
def cuCtxGetDevice():
    _current(check=False)
    return CUdevice(0)


@_api(1)
def cuCtxGetFlags():
    return _current(check=False).flags


@_api(1)
def cuCtxGetApiVersion(ctx):
    h = _args.handle_value(ctx, CUcontext)
    _require_init()
    if h == 0:
        _current(check=False)
    else:
        _ctx_arg(h)
    return 3020


@_api(1)
def cuCtxGetLimit(limit):
    _args.require_enum(limit, CUlimit, "limit")
    ctx = _current(check=False)
    if limit.name not in ctx.limits:
        raise _Fail(_E.CUDA_ERROR_UNSUPPORTED_LIMIT, f"{limit.name} is not supported")
    return ctx.limits[limit.name]


@_api(0)
def cuCtxSetLimit(limit, value):
    _args.require_enum(limit, CUlimit, "limit")
    v = _args.c_int(value, "size_t", "value")
    ctx = _current()
    if limit.name not in ctx.limits:
        raise _Fail(_E.CUDA_ERROR_UNSUPPORTED_LIMIT, f"{limit.name} is not supported")
    ctx.limits[limit.name] = v


@_api(2)
def cuCtxGetStreamPriorityRange():
    _current(check=False)
    return 0, 0


@_api(1)
def cuDevicePrimaryCtxRetain(dev):
    d = _device(dev)
    _require_init()
    _check_device(d)
    if _S.primary is None or not _S.primary.alive:
        _S.primary = _new_context(_S.primary_flags, primary=True)
    _S.primary_refcount += 1
    return CUcontext(_S.primary.handle)


@_api(0)
def cuDevicePrimaryCtxRelease(dev):
    d = _device(dev)
    _require_init()
    _check_device(d)
    if _S.primary_refcount <= 0 or _S.primary is None:
        raise _Fail(_E.CUDA_ERROR_INVALID_CONTEXT, "the primary context is not retained")
    _S.primary_refcount -= 1
    if _S.primary_refcount == 0:
        _destroy_context(_S.primary)
        _S.primary = None


@_api(0)
def cuDevicePrimaryCtxReset(dev):
    d = _device(dev)
    _require_init()
    _check_device(d)
    if _S.primary is not None and _S.primary.alive:
        # the handle the program holds stays usable (and current where it was current):
        # a fresh context under the same handle
        fresh = _Context(_S.primary.handle, _S.primary_flags, primary=True)
        _destroy_context(_S.primary, replacement=fresh)
        _S.handles[fresh.handle] = fresh
        _S.primary = fresh


@_api(2)
def cuDevicePrimaryCtxGetState(dev):
    d = _device(dev)
    _require_init()
    _check_device(d)
    active = int(_S.primary is not None and _S.primary.alive and _S.primary_refcount > 0)
    return _S.primary_flags, active


@_api(0)
def cuDevicePrimaryCtxSetFlags(dev, flags):
    d = _device(dev)
    f = _args.c_int(flags, "unsigned int", "flags")
    _require_init()
    _check_device(d)
    _check_ctx_flags(f)
    _S.primary_flags = f
    if _S.primary is not None:
        _S.primary.flags = f


# --------------------------------------------------------------------------
# device memory
# --------------------------------------------------------------------------


def _alloc(ctx: _Context, size: int) -> int:
    if size == 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
    mem = _S.memory
    if size > mem.capacity - mem.used:
        raise _Fail(_E.CUDA_ERROR_OUT_OF_MEMORY,
                    f"{size} bytes requested, {mem.capacity - mem.used} of {mem.capacity} free")
    try:
        addr = mem.alloc(size)
    except (MemoryError, _errors().OutOfMemory) as e:
        raise _Fail(_E.CUDA_ERROR_OUT_OF_MEMORY, str(e), e) from None
    ctx.allocations.add(addr)
    _S.alloc_owner[addr] = ctx
    return addr


def _free(address: int) -> None:
    try:
        _S.memory.free(address)
    except _errors().InvalidAddress as e:
        raise _invalid_address(e, f"cuMemFree({address:#x})") from None
    owner = _S.alloc_owner.pop(address, None)
    if owner is not None:
        owner.allocations.discard(address)


@_api(1)
def cuMemAlloc(bytesize):
    size = _args.c_int(bytesize, "size_t", "bytesize")
    ctx = _current()
    return CUdeviceptr(_alloc(ctx, size))


@_api(0)
def cuMemFree(dptr):
    addr = _args.handle_value(dptr, CUdeviceptr)
    _current()
    _free(addr)


@_api(1)
def cuMemAllocAsync(bytesize, hStream):
    size = _args.c_int(bytesize, "size_t", "bytesize")
    hs = _args.handle_value(hStream, CUstream)
    ctx = _current()
    _stream(hs, ctx)
    return CUdeviceptr(_alloc(ctx, size))


@_api(0)
def cuMemFreeAsync(dptr, hStream):
    addr = _args.handle_value(dptr, CUdeviceptr)
    hs = _args.handle_value(hStream, CUstream)
    ctx = _current()
    _stream(hs, ctx)
    _free(addr)


@_api(2)
def cuMemGetInfo():
    _current()
    mem = _S.memory
    return int(mem.capacity - mem.used), int(mem.capacity)


@_api(2)
def cuMemGetAddressRange(dptr):
    addr = _args.handle_value(dptr, CUdeviceptr)
    _current()
    a = _S.memory.find(addr)
    if a is None or not a.live:
        raise _Fail(_E.CUDA_ERROR_NOT_FOUND, f"{addr:#x} is not inside a live allocation")
    return CUdeviceptr(a.base), int(a.size)


_HOSTALLOC_DEVICEMAP = 0x02
_HOSTALLOC_MASK = 0x07


def _host_alloc(ctx: _Context, size: int, flags: int) -> int:
    if flags & ~_HOSTALLOC_MASK:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"unknown cuMemHostAlloc flags {flags:#x}")
    if flags & _HOSTALLOC_DEVICEMAP:
        raise _Fail(_E.CUDA_ERROR_NOT_SUPPORTED,
                    "CU_MEMHOSTALLOC_DEVICEMAP: the CPU device cannot map host memory into "
                    "its address space (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY is 0)")
    if size == 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
    try:
        raw = np.zeros(size + 4096, dtype=np.uint8)
    except MemoryError as e:
        raise _Fail(_E.CUDA_ERROR_OUT_OF_MEMORY, str(e), e) from None
    offset = (-raw.ctypes.data) % 4096  # page-aligned, as pinned memory is
    buf = raw[offset: offset + size]
    addr = int(buf.ctypes.data)
    _S.host_allocs[addr] = (raw, ctx)
    ctx.host_allocations.add(addr)
    return addr


@_api(1)
def cuMemAllocHost(bytesize):
    size = _args.c_int(bytesize, "size_t", "bytesize")
    return _host_alloc(_current(), size, 0)


@_api(1)
def cuMemHostAlloc(bytesize, Flags):
    size = _args.c_int(bytesize, "size_t", "bytesize")
    flags = _args.c_int(Flags, "unsigned int", "Flags")
    return _host_alloc(_current(), size, flags)


@_api(0)
def cuMemFreeHost(p):
    hp = _args.host_pointer(p)
    _current()
    entry = _S.host_allocs.pop(hp.address, None)
    if entry is None:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{hp.address:#x} was not returned by cuMemAllocHost/cuMemHostAlloc")
    entry[1].host_allocations.discard(hp.address)


# copies and sets ------------------------------------------------------------


def _host_src(src, n: int, what: str):
    hp = _args.host_pointer(src)
    if n == 0:
        return b""
    if hp.address == 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"{what}: NULL host pointer")
    _check_host_address(hp, what)
    if hp.nbytes is not None and hp.nbytes < n:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{what}: the host buffer holds {hp.nbytes} bytes, ByteCount is {n}")
    return _args.host_view(hp.address, n)


def _host_dst(dst, n: int, what: str) -> _args.HostPtr:
    hp = _args.host_pointer(dst)
    if n and hp.address == 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"{what}: NULL host pointer")
    if n:
        _check_host_address(hp, what)
    if n and hp.nbytes is not None and hp.nbytes < n:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{what}: the host buffer holds {hp.nbytes} bytes, ByteCount is {n}")
    return hp


def _dev_read(addr: int, n: int, what: str) -> bytes:
    if n == 0:
        return b""
    try:
        return bytes(_S.memory.read(addr, n))
    except _errors().InvalidAddress as e:
        raise _invalid_address(e, what) from None


def _dev_write(addr: int, data, what: str) -> None:
    if len(data) == 0:
        return
    try:
        _S.memory.write(addr, data)
    except _errors().InvalidAddress as e:
        raise _invalid_address(e, what) from None


def _htod(dstDevice, srcHost, ByteCount, hStream=None, what="cuMemcpyHtoD"):
    dst = _args.handle_value(dstDevice, CUdeviceptr)
    n = _args.c_int(ByteCount, "size_t", "ByteCount")
    hs = _args.handle_value(hStream, CUstream)
    ctx = _current()
    _stream(hs, ctx)
    data = _host_src(srcHost, n, what)
    _dev_write(dst, data, f"{what}(dst={dst:#x}, {n} bytes)")


def _dtoh(dstHost, srcDevice, ByteCount, hStream=None, what="cuMemcpyDtoH"):
    src = _args.handle_value(srcDevice, CUdeviceptr)
    n = _args.c_int(ByteCount, "size_t", "ByteCount")
    hs = _args.handle_value(hStream, CUstream)
    ctx = _current()
    _stream(hs, ctx)
    hp = _host_dst(dstHost, n, what)
    if n == 0:
        return
    try:
        view = _S.memory.view(src, n)
    except _errors().InvalidAddress as e:
        raise _invalid_address(e, f"{what}(src={src:#x}, {n} bytes)") from None
    _args.host_view(hp.address, n)[:] = view


def _dtod(dstDevice, srcDevice, ByteCount, hStream=None, what="cuMemcpyDtoD"):
    dst = _args.handle_value(dstDevice, CUdeviceptr)
    src = _args.handle_value(srcDevice, CUdeviceptr)
    n = _args.c_int(ByteCount, "size_t", "ByteCount")
    hs = _args.handle_value(hStream, CUstream)
    ctx = _current()
    _stream(hs, ctx)
    if n == 0:
        return
    try:
        _S.memory.read(src, n)  # names the bad side first: the source
    except _errors().InvalidAddress as e:
        raise _invalid_address(e, f"{what}(src={src:#x}, {n} bytes)") from None
    try:
        _S.memory.copy(dst, src, n)
    except _errors().InvalidAddress as e:
        raise _invalid_address(e, f"{what}(dst={dst:#x}, {n} bytes)") from None


@_api(0)
def cuMemcpyHtoD(dstDevice, srcHost, ByteCount):
    _htod(dstDevice, srcHost, ByteCount)


@_api(0)
def cuMemcpyHtoDAsync(dstDevice, srcHost, ByteCount, hStream):
    _htod(dstDevice, srcHost, ByteCount, hStream, "cuMemcpyHtoDAsync")


@_api(0)
def cuMemcpyDtoH(dstHost, srcDevice, ByteCount):
    _dtoh(dstHost, srcDevice, ByteCount)


@_api(0)
def cuMemcpyDtoHAsync(dstHost, srcDevice, ByteCount, hStream):
    _dtoh(dstHost, srcDevice, ByteCount, hStream, "cuMemcpyDtoHAsync")


@_api(0)
def cuMemcpyDtoD(dstDevice, srcDevice, ByteCount):
    _dtod(dstDevice, srcDevice, ByteCount)


@_api(0)
def cuMemcpyDtoDAsync(dstDevice, srcDevice, ByteCount, hStream):
    _dtod(dstDevice, srcDevice, ByteCount, hStream, "cuMemcpyDtoDAsync")


def _in_arena(addr: int) -> bool:
    """Whether ``addr`` is in the device's global arena (an allocation, a red zone, freed memory)."""
    mem = _S.memory
    top = getattr(mem, "top", None)
    if top is not None and _memory_module().GLOBAL_BASE <= addr < top:
        return True
    return mem.find(addr) is not None


def _is_device(addr: int) -> bool:
    return _in_arena(addr)


def _check_host_address(hp: _args.HostPtr, what: str) -> None:
    """A raw int "host" address inside the device arena is a device pointer: refuse it
    (reading it as host memory would fault the process)."""
    if hp.nbytes is None and hp.address and _in_arena(hp.address):
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{what}: host pointer {hp.address:#x} is a device address")


def _unified(dst, src, ByteCount, hStream, what):
    d = _args.handle_value(dst, CUdeviceptr)
    s = _args.handle_value(src, CUdeviceptr)
    n = _args.c_int(ByteCount, "size_t", "ByteCount")
    hs = _args.handle_value(hStream, CUstream)
    ctx = _current()
    _stream(hs, ctx)
    if n == 0:
        return
    if d == 0 or s == 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"{what}: NULL pointer")
    if _is_device(s):
        data = _dev_read(s, n, f"{what}(src={s:#x}, {n} bytes)")
    else:
        data = _args.host_view(s, n).copy()
    if _is_device(d):
        _dev_write(d, data, f"{what}(dst={d:#x}, {n} bytes)")
    else:
        _args.host_view(d, n)[:] = np.frombuffer(data, dtype=np.uint8)


@_api(0)
def cuMemcpy(dst, src, ByteCount):
    """Unified-address copy: an address inside a device allocation is device memory, any other is host."""
    _unified(dst, src, ByteCount, None, "cuMemcpy")


@_api(0)
def cuMemcpyAsync(dst, src, ByteCount, hStream):
    _unified(dst, src, ByteCount, hStream, "cuMemcpyAsync")


def _memset(dstDevice, value, N, hStream, width: int, ctype: str, what: str):
    dst = _args.handle_value(dstDevice, CUdeviceptr)
    v = _args.c_int(value, ctype, "value")
    n = _args.c_int(N, "size_t", "N")
    hs = _args.handle_value(hStream, CUstream)
    ctx = _current()
    _stream(hs, ctx)
    if dst % width:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{what}: destination {dst:#x} is not {width}-byte aligned")
    if n == 0:
        return
    try:
        _S.memory.fill(dst, v, width, n)
    except _errors().InvalidAddress as e:
        raise _invalid_address(e, f"{what}(dst={dst:#x}, {n} x {width} bytes)") from None


@_api(0)
def cuMemsetD8(dstDevice, uc, N):
    _memset(dstDevice, uc, N, None, 1, "unsigned char", "cuMemsetD8")


@_api(0)
def cuMemsetD16(dstDevice, us, N):
    _memset(dstDevice, us, N, None, 2, "unsigned short", "cuMemsetD16")


@_api(0)
def cuMemsetD32(dstDevice, ui, N):
    _memset(dstDevice, ui, N, None, 4, "unsigned int", "cuMemsetD32")


@_api(0)
def cuMemsetD8Async(dstDevice, uc, N, hStream):
    _memset(dstDevice, uc, N, hStream, 1, "unsigned char", "cuMemsetD8Async")


@_api(0)
def cuMemsetD16Async(dstDevice, us, N, hStream):
    _memset(dstDevice, us, N, hStream, 2, "unsigned short", "cuMemsetD16Async")


@_api(0)
def cuMemsetD32Async(dstDevice, ui, N, hStream):
    _memset(dstDevice, ui, N, hStream, 4, "unsigned int", "cuMemsetD32Async")


# --------------------------------------------------------------------------
# modules
# --------------------------------------------------------------------------

_VERSION_RE = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)", re.M)
_TARGET_RE = re.compile(r"^\s*\.target\s+sm_(\d+)", re.M)


def _image_text(image) -> str:
    """The PTX text of a module image, read as the C driver would (up to the first NUL)."""
    hp = _args.host_pointer(image)
    if hp.address == 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "the module image is a NULL pointer")
    if hp.nbytes is None:
        raw = _args.read_c_string(hp.address)
    else:
        raw = _args.read_host(hp.address, hp.nbytes)
        nul = raw.find(b"\0")
        if nul >= 0:
            raw = raw[:nul]
    kind = _images.image_kind(raw)
    if kind is _images.ImageKind.CUBIN:
        raise _Fail(_E.CUDA_ERROR_NOT_SUPPORTED,
                    "the module image is an ELF cubin; the CPU device runs PTX only "
                    "(compile with --gpu-architecture=compute_XX and load the PTX)")
    if kind is _images.ImageKind.FATBIN:
        raise _Fail(_E.CUDA_ERROR_NOT_SUPPORTED,
                    "the module image is a fatbin; the CPU device runs PTX only")
    return raw.decode("utf-8", errors="replace")


def _load_module(ctx: _Context, text: str) -> _Module:
    m = _VERSION_RE.search(text)
    version = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if m and version > _profile.MAX_PTX_ISA:
        raise _Fail(_E.CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                    f"PTX ISA {version[0]}.{version[1]} is newer than this driver's "
                    f"{_profile.MAX_PTX_ISA[0]}.{_profile.MAX_PTX_ISA[1]}")
    t = _TARGET_RE.search(text)
    target = int(t.group(1)) if t else 0
    if target > _profile.MAX_SM_TARGET:
        raise _Fail(_E.CUDA_ERROR_INVALID_PTX,
                    f"PTX .target sm_{target} is newer than the device (compute capability "
                    f"{_profile.CC_MAJOR}.{_profile.CC_MINOR})")
    try:
        program = _program_class()(text, _S.memory)
    except _parse_error_class() as e:
        raise _Fail(_E.CUDA_ERROR_INVALID_PTX, f"PTX parse error: {e}", e) from None
    except _errors().DeviceError as e:
        raise _Fail(CUresult[e.result], str(e), e) from None
    mod = _Module(0, ctx, program, version, target)
    mod.handle = _S.new_handle(mod)
    ctx.modules[mod.handle] = mod
    return mod


def _unload_module(mod: _Module) -> None:
    for fn in mod.functions.values():
        _S.handles.pop(fn.handle, None)
    mod.functions.clear()
    _S.handles.pop(mod.handle, None)
    mod.ctx.modules.pop(mod.handle, None)
    mod.program.unload()


@_api(1)
def cuModuleLoadData(image):
    _args.host_pointer(image)  # cuda-python's conversion (a str is a TypeError) comes first
    ctx = _current()
    return CUmodule(_load_module(ctx, _image_text(image)).handle)


_JIT_SUPPORTED = frozenset(
    "CU_JIT_" + n for n in (
        "MAX_REGISTERS THREADS_PER_BLOCK INFO_LOG_BUFFER_SIZE_BYTES ERROR_LOG_BUFFER_SIZE_BYTES "
        "OPTIMIZATION_LEVEL GLOBAL_SYMBOL_COUNT TARGET_FROM_CUCONTEXT REFERENCED_KERNEL_COUNT "
        "REFERENCED_VARIABLE_COUNT MIN_CTA_PER_SM SPLIT_COMPILE WALL_TIME INFO_LOG_BUFFER "
        "ERROR_LOG_BUFFER TARGET FALLBACK_STRATEGY GENERATE_DEBUG_INFO LOG_VERBOSE "
        "GENERATE_LINE_INFO LTO FTZ PREC_DIV PREC_SQRT FMA OPTIMIZE_UNUSED_DEVICE_VARIABLES "
        "CACHE_MODE GLOBAL_SYMBOL_NAMES REFERENCED_KERNEL_NAMES REFERENCED_VARIABLE_NAMES "
        "GLOBAL_SYMBOL_ADDRESSES").split())


def _write_log(buffer, size: int, text: str) -> None:
    """Write a JIT log into the caller's buffer (NUL-terminated, at most ``size`` bytes)."""
    if size <= 0 or buffer is None:
        return
    hp = _args.host_pointer(buffer)
    if hp.address == 0:
        return
    cap = size if hp.nbytes is None else min(size, hp.nbytes)
    data = text.encode(errors="replace")[: max(cap - 1, 0)] + b"\0"
    _args.write_host(hp.address, data[:cap])


@_api(1)
def cuModuleLoadDataEx(image, numOptions, options, optionValues):
    _args.host_pointer(image)
    n = _args.c_int(numOptions, "unsigned int", "numOptions")
    options = [] if options is None else options
    optionValues = [] if optionValues is None else optionValues
    if not all(isinstance(o, CUjit_option) for o in options):
        raise TypeError("Argument 'options' is not instance of type (expected "
                        "tuple[cydriver.CUjit_option] or list[cydriver.CUjit_option]")
    if n > len(options):
        raise RuntimeError(f"List is too small: {len(options)} < {n}")
    if n > len(optionValues):
        raise RuntimeError(f"List is too small: {len(optionValues)} < {n}")
    for o in options:
        if o.name not in _JIT_SUPPORTED:
            raise TypeError(f"Unsupported attribute: {o.name}")
    opts = {o.name: v for o, v in list(zip(options, optionValues, strict=False))[:n]}
    ctx = _current()
    try:
        mod = _load_module(ctx, _image_text(image))
    except _Fail as f:
        _write_log(opts.get("CU_JIT_ERROR_LOG_BUFFER"),
                   int(opts.get("CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES", 0) or 0), f.detail)
        raise
    _write_log(opts.get("CU_JIT_INFO_LOG_BUFFER"),
               int(opts.get("CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES", 0) or 0), "")
    return CUmodule(mod.handle)


@_api(1)
def cuModuleLoad(fname):
    path = _args.require_bytes(fname, "fname")
    ctx = _current()
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise _Fail(_E.CUDA_ERROR_FILE_NOT_FOUND, f"{path.decode(errors='replace')}: {e}", e) from None
    return CUmodule(_load_module(ctx, _image_text(raw)).handle)


def _module(hmod) -> _Module:
    h = _args.handle_value(hmod, CUmodule)
    _require_init()
    mod = _lookup(h, _Module, _E.CUDA_ERROR_INVALID_HANDLE, "module")
    _check_ctx(mod.ctx)
    return mod


@_api(0)
def cuModuleUnload(hmod):
    mod = _module(hmod)
    _unload_module(mod)


def _get_function(mod: _Module, name: str) -> _Function:
    fn = mod.functions.get(name)
    if fn is None:
        info = mod.program.kernels.get(name)
        if info is None:
            raise _Fail(_E.CUDA_ERROR_NOT_FOUND, f"the module has no kernel named {name!r}")
        fn = _Function(0, mod, name, info)
        fn.handle = _S.new_handle(fn)
        mod.functions[name] = fn
    return fn


@_api(1)
def cuModuleGetFunction(hmod, name):
    n = _args.require_bytes(name, "name")
    mod = _module(hmod)
    return CUfunction(_get_function(mod, n.decode(errors="replace")).handle)


@_api(2)
def cuModuleGetGlobal(hmod, name):
    n = _args.require_bytes(name, "name")
    mod = _module(hmod)
    try:
        addr, size = mod.program.global_symbol(n.decode(errors="replace"))
    except KeyError:
        raise _Fail(_E.CUDA_ERROR_NOT_FOUND,
                    f"the module has no global variable named {n.decode(errors='replace')!r}") from None
    return CUdeviceptr(int(addr)), int(size)


@_api(1)
def cuModuleGetFunctionCount(mod):
    return len(_module(mod).program.kernels)


@_api(1)
def cuModuleEnumerateFunctions(numFunctions, mod):
    n = _args.c_int(numFunctions, "unsigned int", "numFunctions")
    m = _module(mod)
    names = list(m.program.kernels)
    if n > len(names):
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"numFunctions {n} exceeds the module's {len(names)} functions")
    return [CUfunction(_get_function(m, name).handle) for name in names[:n]]


# --------------------------------------------------------------------------
# functions
# --------------------------------------------------------------------------


def _function(hfunc) -> _Function:
    h = _args.handle_value(hfunc, CUfunction)
    _require_init()
    fn = _lookup(h, _Function, _E.CUDA_ERROR_INVALID_HANDLE, "function")
    _check_ctx(fn.module.ctx)
    return fn


def _max_threads(fn: _Function) -> int:
    mt = int(fn.info.max_threads or 0)
    return min(mt, _profile.MAX_THREADS_PER_BLOCK) if mt > 0 else _profile.MAX_THREADS_PER_BLOCK


@_api(1)
def cuFuncGetAttribute(attrib, hfunc):
    _args.require_enum(attrib, CUfunction_attribute, "attrib")
    fn = _function(hfunc)
    info = fn.info
    a = attrib.name[len("CU_FUNC_ATTRIBUTE_"):]
    values = {
        "MAX_THREADS_PER_BLOCK": _max_threads(fn),
        "SHARED_SIZE_BYTES": int(info.static_shared or 0),
        "CONST_SIZE_BYTES": 0,
        "LOCAL_SIZE_BYTES": int(info.local_size or 0),
        "NUM_REGS": int(info.num_regs or 0),
        "PTX_VERSION": fn.module.ptx_version[0] * 10 + fn.module.ptx_version[1],
        "BINARY_VERSION": _profile.CC_MAJOR * 10 + _profile.CC_MINOR,
        "CACHE_MODE_CA": 0,
        "MAX_DYNAMIC_SHARED_SIZE_BYTES": fn.max_dynamic_shared,
        "PREFERRED_SHARED_MEMORY_CARVEOUT": fn.carveout,
        "CLUSTER_SIZE_MUST_BE_SET": 0,
        "REQUIRED_CLUSTER_WIDTH": 0,
        "REQUIRED_CLUSTER_HEIGHT": 0,
        "REQUIRED_CLUSTER_DEPTH": 0,
        "NON_PORTABLE_CLUSTER_SIZE_ALLOWED": 0,
        "CLUSTER_SCHEDULING_POLICY_PREFERENCE": 0,
    }
    if a not in values:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"{attrib.name} is not a function attribute")
    return values[a]


@_api(0)
def cuFuncSetAttribute(hfunc, attrib, value):
    _args.require_enum(attrib, CUfunction_attribute, "attrib")
    v = _args.c_int(value, "int", "value")
    fn = _function(hfunc)
    if attrib == CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        static = int(fn.info.static_shared or 0)
        if v < 0 or v + static > _profile.OPTIN_SHARED_PER_BLOCK:
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                        f"{v} bytes of dynamic shared memory + {static} static exceed the "
                        f"device's {_profile.OPTIN_SHARED_PER_BLOCK}")
        fn.max_dynamic_shared = v
    elif attrib == CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if not (v == -1 or 0 <= v <= 100):
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "the carveout is a percentage or -1")
        fn.carveout = v
    else:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"{attrib.name} cannot be set")


@_api(0)
def cuFuncSetCacheConfig(hfunc, config):
    _args.require_enum(config, CUfunc_cache, "config")
    _function(hfunc).cache_config = config


@_api(1)
def cuFuncGetName(hfunc):
    return _function(hfunc).name.encode()


@_api(1)
def cuFuncGetModule(hfunc):
    return CUmodule(_function(hfunc).module.handle)


@_api(2)
def cuFuncGetParamInfo(func, paramIndex):
    i = _args.c_int(paramIndex, "size_t", "paramIndex")
    fn = _function(func)
    params = fn.info.params
    if i >= len(params):
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{fn.name} has {len(params)} parameters, index {i} asked for")
    return int(params[i].offset), int(params[i].size)


# --------------------------------------------------------------------------
# launches
# --------------------------------------------------------------------------


def _pack_params(fn: _Function, kp: _args.KernelParams, extra: int) -> bytes:
    info = fn.info
    params = list(info.params)
    size = int(info.param_size or 0)
    if kp.kind != "null" and extra:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "both kernelParams and extra are given")
    if extra:
        try:
            buf, bufsize = _args.read_extra(extra)
        except ValueError as e:
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"extra: {e}", e) from None
        if buf is None or bufsize is None:
            if params:
                raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                            "extra lacks CU_LAUNCH_PARAM_BUFFER_POINTER or _SIZE")
            return b""
        if bufsize < size:
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                        f"extra's parameter buffer holds {bufsize} bytes, {fn.name} takes {size}")
        return _args.read_host(buf, size) if size else b""
    if kp.kind == "null":
        if params:
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                        f"{fn.name} takes {len(params)} parameters and none were given")
        return b""
    if kp.kind == "tuple" and len(kp.sources) != len(params):
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{fn.name} takes {len(params)} parameters, kernelParams holds {len(kp.sources)}")
    out = bytearray(size)
    for i, p in enumerate(params):
        data = kp.param_bytes(i, int(p.size))
        if data is None:
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                        f"kernelParams[{i}] ({p.name}) is a NULL pointer")
        out[p.offset: p.offset + p.size] = data
    return bytes(out)


def _check_config(fn: _Function, grid: tuple, block: tuple, shared: int) -> None:
    if min(grid) == 0 or min(block) == 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"empty launch: grid {grid}, block {block}")
    for axis, (g, lim) in enumerate(zip(grid, _profile.MAX_GRID_DIM, strict=True)):
        if g > lim:
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"grid dimension {'xyz'[axis]}={g} exceeds {lim}")
    for axis, (b, lim) in enumerate(zip(block, _profile.MAX_BLOCK_DIM, strict=True)):
        if b > lim:
            raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"block dimension {'xyz'[axis]}={b} exceeds {lim}")
    threads = block[0] * block[1] * block[2]
    if threads > _max_threads(fn):
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{threads} threads per block exceed {fn.name}'s maximum of {_max_threads(fn)}")
    static = int(fn.info.static_shared or 0)
    if shared > fn.max_dynamic_shared or static + shared > _profile.OPTIN_SHARED_PER_BLOCK:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    f"{shared} bytes of dynamic shared memory exceed {fn.name}'s "
                    f"{fn.max_dynamic_shared} (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)")


def _launch(fn: _Function, grid: tuple, block: tuple, shared: int, hs: int,
            kp: _args.KernelParams, extra: int) -> None:
    ctx = fn.module.ctx
    _stream(hs, ctx)
    _check_config(fn, grid, block, shared)
    params = _pack_params(fn, kp, extra)
    errors = _errors()
    try:
        result = fn.module.program.launch(fn.name, grid, block, shared, params,
                                          observers=_S.observers, stdout=_S.stdout)
    except errors.DeviceError as e:
        res = CUresult[e.result]
        if res.name in _profile.STICKY_RESULTS:
            ctx.sticky = res
            ctx.sticky_detail = f"{fn.name}: {e}"
        raise _Fail(res, f"{fn.name}: {e}", e) from None
    _S.last_launch = result


@_api(0)
def cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                   sharedMemBytes, hStream, kernelParams, extra):
    dims = [_args.c_int(v, "unsigned int", n) for v, n in (
        (gridDimX, "gridDimX"), (gridDimY, "gridDimY"), (gridDimZ, "gridDimZ"),
        (blockDimX, "blockDimX"), (blockDimY, "blockDimY"), (blockDimZ, "blockDimZ"))]
    shared = _args.c_int(sharedMemBytes, "unsigned int", "sharedMemBytes")
    hs = _args.handle_value(hStream, CUstream)
    hf = _args.handle_value(f, CUfunction)
    kp = _args.convert_kernel_params(kernelParams)
    ex = _args.c_int(extra, "void_ptr", "extra")
    fn = _function(hf)
    _launch(fn, tuple(dims[:3]), tuple(dims[3:]), shared, hs, kp, ex)


@_api(0)
def cuLaunchKernelEx(config, f, kernelParams, extra):
    if config is not None and not isinstance(config, CUlaunchConfig):
        raise TypeError("Argument 'config' has incorrect type (expected "
                        f"cuda.bindings.driver.CUlaunchConfig, got {type(config).__name__})")
    hf = _args.handle_value(f, CUfunction)
    kp = _args.convert_kernel_params(kernelParams)
    ex = _args.c_int(extra, "void_ptr", "extra")
    _require_init()
    if config is None:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "config is NULL")
    if int(config.numAttrs) != 0:
        raise _Fail(_E.CUDA_ERROR_NOT_SUPPORTED,
                    "launch attributes (clusters, cooperative launches, priorities, ...) are not "
                    "supported by the CPU device")
    fn = _function(hf)
    grid = (int(config.gridDimX), int(config.gridDimY), int(config.gridDimZ))
    block = (int(config.blockDimX), int(config.blockDimY), int(config.blockDimZ))
    hs = _args.handle_value(config.hStream, CUstream)
    _launch(fn, grid, block, int(config.sharedMemBytes), hs, kp, ex)


@_api(1)
def cuOccupancyMaxActiveBlocksPerMultiprocessor(func, blockSize, dynamicSMemSize):
    bs = _args.c_int(blockSize, "int", "blockSize")
    dyn = _args.c_int(dynamicSMemSize, "size_t", "dynamicSMemSize")
    fn = _function(func)
    if bs <= 0:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, "blockSize must be positive")
    if bs > _max_threads(fn):
        return 0
    attrs = _profile.DEVICE_ATTRIBUTES
    warps = -(-bs // _profile.WARP_SIZE)
    by_threads = attrs["MAX_THREADS_PER_MULTIPROCESSOR"] // (warps * _profile.WARP_SIZE)
    smem = int(fn.info.static_shared or 0) + dyn
    if smem:
        smem += attrs["RESERVED_SHARED_MEMORY_PER_BLOCK"]
        by_smem = attrs["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"] // smem
    else:
        by_smem = attrs["MAX_BLOCKS_PER_MULTIPROCESSOR"]
    return int(min(by_threads, by_smem, attrs["MAX_BLOCKS_PER_MULTIPROCESSOR"]))


# --------------------------------------------------------------------------
# streams and events
# --------------------------------------------------------------------------


@_api(1)
def cuStreamCreate(Flags):
    flags = _args.c_int(Flags, "unsigned int", "Flags")
    ctx = _current()
    if flags & ~1:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"unknown stream flags {flags:#x}")
    s = _Stream(0, ctx, flags, 0)
    s.handle = _S.new_handle(s)
    ctx.streams[s.handle] = s
    return CUstream(s.handle)


@_api(1)
def cuStreamCreateWithPriority(flags, priority):
    f = _args.c_int(flags, "unsigned int", "flags")
    _args.c_int(priority, "int", "priority")
    ctx = _current()
    if f & ~1:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"unknown stream flags {f:#x}")
    s = _Stream(0, ctx, f, 0)  # clamped into the range [0, 0] of cuCtxGetStreamPriorityRange
    s.handle = _S.new_handle(s)
    ctx.streams[s.handle] = s
    return CUstream(s.handle)


def _stream_arg(hStream) -> tuple[_Context, _Stream | None]:
    hs = _args.handle_value(hStream, CUstream)
    _require_init()
    if hs in _DEFAULT_STREAMS:
        return _current(), None
    s = _lookup(hs, _Stream, _E.CUDA_ERROR_INVALID_HANDLE, "stream")
    _check_ctx(s.ctx)
    return s.ctx, s


@_api(0)
def cuStreamSynchronize(hStream):
    _stream_arg(hStream)


@_api(0)
def cuStreamQuery(hStream):
    _stream_arg(hStream)


@_api(0)
def cuStreamDestroy(hStream):
    hs = _args.handle_value(hStream, CUstream)
    _require_init()
    s = _lookup(hs, _Stream, _E.CUDA_ERROR_INVALID_HANDLE, "stream")
    _S.handles.pop(hs, None)
    s.ctx.streams.pop(hs, None)


@_api(1)
def cuStreamGetFlags(hStream):
    _, s = _stream_arg(hStream)
    return 0 if s is None else s.flags


@_api(1)
def cuStreamGetPriority(hStream):
    _stream_arg(hStream)
    return 0


@_api(1)
def cuStreamGetCtx(hStream):
    ctx, _ = _stream_arg(hStream)
    return CUcontext(ctx.handle)


_EVENT_FLAGS_MASK = 0x7
_EVENT_DISABLE_TIMING = 0x2
_EVENT_INTERPROCESS = 0x4


def _event(hEvent) -> _Event:
    h = _args.handle_value(hEvent, CUevent)
    _require_init()
    ev = _lookup(h, _Event, _E.CUDA_ERROR_INVALID_HANDLE, "event")
    _check_ctx(ev.ctx)
    return ev


@_api(1)
def cuEventCreate(Flags):
    flags = _args.c_int(Flags, "unsigned int", "Flags")
    ctx = _current()
    if flags & ~_EVENT_FLAGS_MASK:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"unknown event flags {flags:#x}")
    if flags & _EVENT_INTERPROCESS and not flags & _EVENT_DISABLE_TIMING:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE,
                    "CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING")
    ev = _Event(0, ctx, flags)
    ev.handle = _S.new_handle(ev)
    ctx.events[ev.handle] = ev
    return CUevent(ev.handle)


@_api(0)
def cuEventRecord(hEvent, hStream):
    hs = _args.handle_value(hStream, CUstream)
    ev = _event(hEvent)
    _stream(hs, ev.ctx)
    ev.time = time.perf_counter()


@_api(0)
def cuEventQuery(hEvent):
    _event(hEvent)


@_api(0)
def cuEventSynchronize(hEvent):
    _event(hEvent)


@_api(0)
def cuStreamWaitEvent(hStream, hEvent, Flags):
    hs = _args.handle_value(hStream, CUstream)
    he = _args.handle_value(hEvent, CUevent)
    flags = _args.c_int(Flags, "unsigned int", "Flags")
    _stream_arg(hs)
    _event(he)
    if flags & ~1:
        raise _Fail(_E.CUDA_ERROR_INVALID_VALUE, f"unknown wait flags {flags:#x}")


@_api(1)
def cuEventElapsedTime(hStart, hEnd):
    start = _event(hStart)
    end = _event(hEnd)
    for ev in (start, end):
        if ev.flags & _EVENT_DISABLE_TIMING:
            raise _Fail(_E.CUDA_ERROR_INVALID_HANDLE, "the event was created with "
                                                      "CU_EVENT_DISABLE_TIMING")
        if ev.time is None:
            raise _Fail(_E.CUDA_ERROR_INVALID_HANDLE, "the event has not been recorded")
    return float((end.time - start.time) * 1000.0)


@_api(0)
def cuEventDestroy(hEvent):
    h = _args.handle_value(hEvent, CUevent)
    _require_init()
    ev = _lookup(h, _Event, _E.CUDA_ERROR_INVALID_HANDLE, "event")
    _S.handles.pop(h, None)
    ev.ctx.events.pop(h, None)


# --------------------------------------------------------------------------
# unimplemented functions: absent, with a message that says so
# --------------------------------------------------------------------------


def __getattr__(name: str):
    if name in REAL_FUNCTIONS:
        raise AttributeError(
            f"module {__name__!r} has no attribute {name!r}: {name} is a cuda.bindings.driver "
            "function the gpusafe CPU device does not implement "
            f"(implemented: see {__name__}.IMPLEMENTED)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(n for n in globals() if not n.startswith("_"))
