"""The work a capturing stream records instead of running it (see
:mod:`.capture`), and the calls stream capture forbids.

On a capturing stream, ``cuLaunchKernel``/``cuLaunchKernelEx`` add a kernel
node (arguments copied now, as ``cuGraphAddKernelNode`` copies them; the
launch configuration checked now), the async copies and memsets add memcpy
and memset nodes, ``cuLaunchHostFunc`` a host node, ``cuGraphLaunch`` a
child-graph node, ``cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL)`` and
``cuStreamWaitEvent(CU_EVENT_WAIT_EXTERNAL)`` event nodes; a plain
``cuEventRecord`` and ``cuStreamWaitEvent`` fork and join streams.  Each
node is built by the same builder as its explicit twin, so at each graph
launch a captured kernel goes through the graph calls' ``cuLaunchKernel``:
under gpusafe a checked launch.  On any other stream each call is the base
driver's, unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from cuda.bindings.driver import (
    CU_STREAM_PER_THREAD,
    CUdeviceptr,
    CUevent,
    CUfunction,
    CUhostFn,
    CUlaunchConfig,
    CUstream,
)

from ...cudaapi import args as _args
from ..bindings import implements
from .api import _real
from .capture import _LEGACY, Capture, CaptureCalls
from .graphs import GraphExec, Node, run_nodes
from .launches import _check_config
from .state import E, Fail
from .streams import _function_pointer

_EVENT_RECORD_EXTERNAL = 0x1
_EVENT_WAIT_EXTERNAL = 0x1

Diverter = Callable[..., bool]
"""``divert(self, *args)``: records the call into its stream's capture and
says True, or says False when the stream does not capture."""


def _named(method: Callable[..., Any], name: str) -> None:
    """``method`` as the CPU device's ``name``: cuda-python's parameter names
    (for keyword calls and ``inspect``) and first doc line."""
    real = inspect.signature(getattr(_real, name))
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__name__ = name
    method.__signature__ = real.replace(  # type: ignore[attr-defined]
        parameters=[this, *real.parameters.values()])
    implements(method, _real, name, "gpusafe.cpu.driver")


def _diverted(divert: Diverter) -> Callable[..., tuple[Any, ...]]:
    """The call as the program makes it: recorded when its stream captures,
    else the base driver's (outside this lock: a launch may call back)."""
    name = divert.__name__

    def method(self: CaptureWorkCalls, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        with self._lock:
            try:
                done = divert(self, *args, **kwargs)
            except Fail as f:
                self._record_error(f)
                return (f.result,)
        if done:
            return (E.CUDA_SUCCESS,)
        return getattr(super(CaptureWorkCalls, self), name)(*args, **kwargs)

    _named(method, name)
    return method


def _guarded(name: str, n_out: int, check: Callable[[CaptureWorkCalls], None]) -> Any:
    """``name`` refused (with ``n_out`` empty outputs) where ``check`` fails."""

    def method(self: CaptureWorkCalls, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        with self._lock:
            try:
                check(self)
            except Fail as f:
                self._record_error(f)
                return (f.result,) + (None,) * n_out
        return getattr(super(CaptureWorkCalls, self), name)(*args, **kwargs)

    _named(method, name)
    return method


def _stream_of(self: CaptureWorkCalls, hStream: Any) -> tuple[Capture | None, int]:
    hs = _args.handle_value(hStream, CUstream)
    return self._capture_for(hs), hs


def _kernel(self: CaptureWorkCalls, hf: int, grid: tuple[int, ...], block: tuple[int, ...],
            shared: int, kp: Any, extra: int, cap: Capture, hs: int) -> bool:
    self._require_init()
    fn = self._function(hf)
    self._plain_stream(hs, fn.module.ctx)
    _check_config(fn, grid, block, shared)
    self._captured(cap, hs, self._kernel_node(hf, grid, block, shared, kp, extra))
    return True


def cuLaunchKernel(self: CaptureWorkCalls, f: Any, gridDimX: Any, gridDimY: Any, gridDimZ: Any,
                   blockDimX: Any, blockDimY: Any, blockDimZ: Any, sharedMemBytes: Any,
                   hStream: Any, kernelParams: Any, extra: Any) -> bool:
    cap, hs = _stream_of(self, hStream)
    if cap is None:
        return False
    dims = [_args.c_int(v, "unsigned int", n) for v, n in (
        (gridDimX, "gridDimX"), (gridDimY, "gridDimY"), (gridDimZ, "gridDimZ"),
        (blockDimX, "blockDimX"), (blockDimY, "blockDimY"), (blockDimZ, "blockDimZ"))]
    shared = _args.c_int(sharedMemBytes, "unsigned int", "sharedMemBytes")
    hf = _args.handle_value(f, CUfunction)
    kp = _args.convert_kernel_params(kernelParams)
    ex = _args.c_int(extra, "void_ptr", "extra")
    return _kernel(self, hf, tuple(dims[:3]), tuple(dims[3:]), shared, kp, ex, cap, hs)


def cuLaunchKernelEx(self: CaptureWorkCalls, config: Any, f: Any, kernelParams: Any,
                     extra: Any) -> bool:
    if config is None:
        return False
    _args.require_struct(config, CUlaunchConfig, "config")
    cap, hs = _stream_of(self, config.hStream)
    if cap is None:
        return False
    hf = _args.handle_value(f, CUfunction)
    kp = _args.convert_kernel_params(kernelParams)
    ex = _args.c_int(extra, "void_ptr", "extra")
    if int(config.numAttrs) != 0:
        raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                   "launch attributes in a stream capture are not supported by the CPU device")
    grid = (int(config.gridDimX), int(config.gridDimY), int(config.gridDimZ))
    block = (int(config.blockDimX), int(config.blockDimY), int(config.blockDimZ))
    return _kernel(self, hf, grid, block, int(config.sharedMemBytes), kp, ex, cap, hs)


def _copy(self: CaptureWorkCalls, dst: int, src: int, n: int, hStream: Any,
          keep: Any = None) -> bool:
    cap, hs = _stream_of(self, hStream)
    if cap is None:
        return False
    self._plain_stream(hs, self._current())
    if n and (dst == 0 or src == 0):
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, "NULL pointer in a captured copy")
    self._captured(cap, hs, self._copy_node(dst, src, n, keep=keep))
    return True


def _host_side(buffer: Any, n: int) -> tuple[int, Any]:
    hp = _args.host_pointer(buffer)
    if hp.nbytes is not None and hp.nbytes < n:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                   f"the host buffer holds {hp.nbytes} bytes, fewer than {n}")
    return hp.address, hp


def cuMemcpyAsync(self: CaptureWorkCalls, dst: Any, src: Any, ByteCount: Any,
                  hStream: Any) -> bool:
    d = _args.handle_value(dst, CUdeviceptr)
    s = _args.handle_value(src, CUdeviceptr)
    return _copy(self, d, s, _args.c_int(ByteCount, "size_t", "ByteCount"), hStream)


def _host_copy(self: CaptureWorkCalls, device: Any, host: Any, ByteCount: Any, hStream: Any,
               to_device: bool) -> bool:
    """A captured copy with one host side: the host buffer is kept alive by
    the node, read or written when the graph runs, as the driver does."""
    dev = _args.handle_value(device, CUdeviceptr)
    n = _args.c_int(ByteCount, "size_t", "ByteCount")
    if self._captures.get(_args.handle_value(hStream, CUstream)) is None:
        return False
    address, keep = _host_side(host, n)
    dst, src = (dev, address) if to_device else (address, dev)
    return _copy(self, dst, src, n, hStream, keep)


def cuMemcpyHtoDAsync(self: CaptureWorkCalls, dstDevice: Any, srcHost: Any, ByteCount: Any,
                      hStream: Any) -> bool:
    return _host_copy(self, dstDevice, srcHost, ByteCount, hStream, to_device=True)


def cuMemcpyDtoHAsync(self: CaptureWorkCalls, dstHost: Any, srcDevice: Any, ByteCount: Any,
                      hStream: Any) -> bool:
    return _host_copy(self, srcDevice, dstHost, ByteCount, hStream, to_device=False)


def cuMemcpyDtoDAsync(self: CaptureWorkCalls, dstDevice: Any, srcDevice: Any, ByteCount: Any,
                      hStream: Any) -> bool:
    d = _args.handle_value(dstDevice, CUdeviceptr)
    s = _args.handle_value(srcDevice, CUdeviceptr)
    return _copy(self, d, s, _args.c_int(ByteCount, "size_t", "ByteCount"), hStream)


def _set(self: CaptureWorkCalls, dstDevice: Any, value: Any, N: Any, hStream: Any, size: int,
         ctype: str) -> bool:
    dst = _args.handle_value(dstDevice, CUdeviceptr)
    v = _args.c_int(value, ctype, "value")
    n = _args.c_int(N, "size_t", "N")
    cap, hs = _stream_of(self, hStream)
    if cap is None:
        return False
    self._plain_stream(hs, self._current())
    if dst % size:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"destination {dst:#x} is not {size}-byte aligned")
    self._captured(cap, hs, self._set_node(dst, v, size, n))
    return True


def cuMemsetD8Async(self: CaptureWorkCalls, dstDevice: Any, uc: Any, N: Any,
                    hStream: Any) -> bool:
    return _set(self, dstDevice, uc, N, hStream, 1, "unsigned char")


def cuMemsetD16Async(self: CaptureWorkCalls, dstDevice: Any, us: Any, N: Any,
                     hStream: Any) -> bool:
    return _set(self, dstDevice, us, N, hStream, 2, "unsigned short")


def cuMemsetD32Async(self: CaptureWorkCalls, dstDevice: Any, ui: Any, N: Any,
                     hStream: Any) -> bool:
    return _set(self, dstDevice, ui, N, hStream, 4, "unsigned int")


def cuLaunchHostFunc(self: CaptureWorkCalls, hStream: Any, fn: Any, userData: Any) -> bool:
    pfn = _function_pointer(fn, CUhostFn)
    data = _args.host_pointer(userData)
    cap, hs = _stream_of(self, hStream)
    if cap is None:
        return False
    self._stream_arg(hs)
    if pfn == 0:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuLaunchHostFunc: NULL function")
    self._captured(cap, hs, self._host_node(pfn, data.address, keep=data))
    return True


def cuGraphLaunch(self: CaptureWorkCalls, hGraphExec: Any, hStream: Any) -> bool:
    """A graph launched into a capturing stream becomes a child-graph node."""
    cap, hs = _stream_of(self, hStream)
    if cap is None:
        return False
    ex: GraphExec = self._exec(hGraphExec)
    self._plain_stream(hs, ex.ctx)
    order = list(ex.order)
    self._captured(cap, hs, Node("graph", lambda calls, stream: run_nodes(order, calls, stream)))
    return True


def _record(self: CaptureWorkCalls, hEvent: Any, hStream: Any, flags: int) -> bool:
    he = _args.handle_value(hEvent, CUevent)
    hs = _args.handle_value(hStream, CUstream)
    cap = self._capture_for(hs)
    if cap is None:
        self._captured_events.pop(he, None)  # recorded outside any capture from now on
        return False
    ev = self._event(he)
    self._plain_stream(hs, ev.ctx)
    if flags & _EVENT_RECORD_EXTERNAL:
        self._captured(cap, hs, self._event_node("event_record", ev))
    else:
        self._captured_events[he] = (cap, list(cap.deps[hs]))
    return True


def cuEventRecord(self: CaptureWorkCalls, hEvent: Any, hStream: Any) -> bool:
    return _record(self, hEvent, hStream, 0)


def cuEventRecordWithFlags(self: CaptureWorkCalls, hEvent: Any, hStream: Any,
                           flags: Any) -> bool:
    f = _args.c_int(flags, "unsigned int", "flags")
    if f & ~_EVENT_RECORD_EXTERNAL:
        return False  # the base driver's own error
    return _record(self, hEvent, hStream, f)


def cuStreamWaitEvent(self: CaptureWorkCalls, hStream: Any, hEvent: Any, Flags: Any) -> bool:
    """A fork (a stream joins the capture of the event's record) or a join
    (the record's frontier joins the stream's)."""
    hs = _args.handle_value(hStream, CUstream)
    he = _args.handle_value(hEvent, CUevent)
    flags = _args.c_int(Flags, "unsigned int", "Flags")
    recorded = self._captured_events.get(he)
    cap = self._captures.get(hs)
    if (cap is None and recorded is None) or flags & ~_EVENT_WAIT_EXTERNAL:
        return False
    ctx, _ = self._stream_arg(hs)
    ev = self._event(he)
    if hs in _LEGACY:
        self._implicit(ctx)
    if cap is not None and cap.invalid:
        raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                   "the stream's capture sequence was invalidated by an earlier error")
    if cap is not None and flags & _EVENT_WAIT_EXTERNAL:
        self._captured(cap, hs, self._event_node("event_wait", ev))
        return True
    if recorded is None:
        assert cap is not None
        cap.invalid = True
        raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                   "a capturing stream waited on an event recorded outside its capture "
                   "(use CU_EVENT_WAIT_EXTERNAL); the capture is invalidated")
    source, frontier = recorded
    if source.invalid:
        raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                   "the event was recorded in a capture that was invalidated")
    if cap is None:  # a fork: the stream joins the capture
        if hs in _LEGACY or hs == int(CU_STREAM_PER_THREAD):
            source.invalid = True
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                       "a default stream cannot join a capture; the capture is invalidated")
        if ctx is not source.graph.ctx:
            raise Fail(E.CUDA_ERROR_INVALID_HANDLE, "the stream belongs to another context")
        source.deps[hs] = list(frontier)
        self._captures[hs] = source
    elif cap is source:  # a join
        cap.deps[hs] = cap.deps[hs] + [d for d in frontier if d not in cap.deps[hs]]
    else:
        cap.invalid = source.invalid = True
        raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_MERGE,
                   "waiting on this event would merge two capture sequences; both are "
                   "invalidated")
    return True


def cuStreamDestroy(self: CaptureWorkCalls, hStream: Any) -> bool:
    """A stream destroyed while it captures leaves its capture: the capture
    it began ends (its graph is dropped), one it joined is invalidated."""
    hs = _args.handle_value(hStream, CUstream)
    cap = self._captures.get(hs)
    if cap is not None:
        if hs == cap.origin:
            self._end(cap)
            self._drop_graph(cap)
        else:
            cap.invalid = True
            del cap.deps[hs]
            del self._captures[hs]
    return False


def _stream_rule(self: CaptureWorkCalls, hStream: Any, what: str) -> None:
    """Synchronising or querying a capturing stream spoils its capture; the
    legacy stream is an implicit dependency on a blocking capture."""
    hs = _args.handle_value(hStream, CUstream)
    if not self._captures:
        return
    ctx, _ = self._stream_arg(hs)
    cap = self._captures.get(hs)
    if cap is not None:
        cap.invalid = True
        raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                   f"{what} on a capturing stream; the capture is invalidated")
    if hs in _LEGACY:
        self._implicit(ctx)


def _event_rule(self: CaptureWorkCalls, hEvent: Any, what: str) -> None:
    he = _args.handle_value(hEvent, CUevent)
    recorded = self._captured_events.get(he)
    if recorded is not None:
        recorded[0].invalid = True
        raise Fail(E.CUDA_ERROR_CAPTURED_EVENT,
                   f"{what} of an event recorded in a capture; the capture is invalidated")


def _stream_check(what: str) -> Diverter:
    def check(self: CaptureWorkCalls, hStream: Any, *rest: Any) -> bool:
        _stream_rule(self, hStream, what)
        return False

    check.__name__ = what
    return check


def _event_check(what: str) -> Diverter:
    def check(self: CaptureWorkCalls, hEvent: Any) -> bool:
        _event_rule(self, hEvent, what)
        return False

    check.__name__ = what
    return check


class CaptureWorkCalls(CaptureCalls):
    """The driver's stream work, diverted into a capture where its stream captures."""


for _divert in (cuLaunchKernel, cuLaunchKernelEx, cuMemcpyAsync, cuMemcpyHtoDAsync,
                cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemsetD8Async, cuMemsetD16Async,
                cuMemsetD32Async, cuLaunchHostFunc, cuGraphLaunch, cuEventRecord,
                cuEventRecordWithFlags, cuStreamWaitEvent, cuStreamDestroy,
                _stream_check("cuStreamSynchronize"), _stream_check("cuStreamQuery"),
                _stream_check("cuStreamAddCallback"), _event_check("cuEventSynchronize"),
                _event_check("cuEventQuery")):
    setattr(CaptureWorkCalls, _divert.__name__, _diverted(_divert))

_UNSAFE = {"cuMemAlloc": 1, "cuMemAllocManaged": 1, "cuMemAllocHost": 1,
           "cuMemHostAlloc": 1, "cuMemFree": 0, "cuMemFreeHost": 0, "cuCtxSynchronize": 0}
"""Potentially unsafe calls (cuThreadExchangeStreamCaptureMode) and their outputs."""

for _name, _n_out in _UNSAFE.items():
    setattr(CaptureWorkCalls, _name,
            _guarded(_name, _n_out, lambda self, _what=_name: self._unsafe(_what)))

del _divert, _name, _n_out
