"""Streams, events and host functions (``cuStream*``, ``cuEvent*``,
``cuLaunchHostFunc``, ``cuStreamAddCallback``).

Execution is synchronous: streams and events exist and are validated, and
every operation has finished when its call returns; ``cuEventRecord`` stores a
host timestamp, so ``cuEventElapsedTime`` gives real milliseconds.  A host
function or stream callback runs in its call, on the calling thread: all the
work enqueued before it has finished, and the work after it has not started,
which is the stream order a real device guarantees.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from cuda.bindings.driver import CUcontext, CUevent, CUhostFn, CUstream, CUstreamCallback

from ...cudaapi import args as _args
from .api import api
from .state import DEFAULT_STREAMS, Context, DriverBase, E, Event, Fail, Stream

_EVENT_FLAGS_MASK = 0x7
_EVENT_DISABLE_TIMING = 0x2
_EVENT_INTERPROCESS = 0x4
_EVENT_RECORD_EXTERNAL = 0x1

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_STREAM_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


def _function_pointer(fn: Any, cls: type) -> int:
    """The C function address cuda-python passes for ``fn`` (0 for None)."""
    if fn is None:
        return 0
    return int(fn) if isinstance(fn, cls) else int(cls(fn))


class StreamCalls(DriverBase):
    def _new_stream(self, ctx: Context, flags: int) -> CUstream:
        if flags & ~1:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown stream flags {flags:#x}")
        s = Stream(0, ctx, flags, 0)  # priorities clamp into [0, 0]: cuCtxGetStreamPriorityRange
        s.handle = self._new_handle(s)
        ctx.streams[s.handle] = s
        return CUstream(s.handle)

    def _stream_arg(self, hStream: Any) -> tuple[Context, Stream | None]:
        hs = _args.handle_value(hStream, CUstream)
        self._require_init()
        if hs in DEFAULT_STREAMS:
            return self._current(), None
        s = self._lookup(hs, Stream, E.CUDA_ERROR_INVALID_HANDLE, "stream")
        self._check_ctx(s.ctx)
        return s.ctx, s

    def _event(self, hEvent: Any) -> Event:
        h = _args.handle_value(hEvent, CUevent)
        self._require_init()
        ev = self._lookup(h, Event, E.CUDA_ERROR_INVALID_HANDLE, "event")
        self._check_ctx(ev.ctx)
        return ev

    # -- streams ---------------------------------------------------------------

    @api(1)
    def cuStreamCreate(self, Flags: Any) -> CUstream:
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        return self._new_stream(self._current(), flags)

    @api(1)
    def cuStreamCreateWithPriority(self, flags: Any, priority: Any) -> CUstream:
        f = _args.c_int(flags, "unsigned int", "flags")
        _args.c_int(priority, "int", "priority")
        return self._new_stream(self._current(), f)

    @api(0)
    def cuStreamSynchronize(self, hStream: Any) -> None:
        self._stream_arg(hStream)

    @api(0)
    def cuStreamQuery(self, hStream: Any) -> None:
        self._stream_arg(hStream)

    @api(0)
    def cuStreamDestroy(self, hStream: Any) -> None:
        hs = _args.handle_value(hStream, CUstream)
        self._require_init()
        s = self._lookup(hs, Stream, E.CUDA_ERROR_INVALID_HANDLE, "stream")
        self._handles.pop(hs, None)
        s.ctx.streams.pop(hs, None)

    @api(1)
    def cuStreamGetFlags(self, hStream: Any) -> int:
        _, s = self._stream_arg(hStream)
        return 0 if s is None else s.flags

    @api(1)
    def cuStreamGetPriority(self, hStream: Any) -> int:
        self._stream_arg(hStream)
        return 0

    @api(1)
    def cuStreamGetCtx(self, hStream: Any) -> CUcontext:
        ctx, _ = self._stream_arg(hStream)
        return CUcontext(ctx.handle)

    @api(0)
    def cuStreamWaitEvent(self, hStream: Any, hEvent: Any, Flags: Any) -> None:
        hs = _args.handle_value(hStream, CUstream)
        he = _args.handle_value(hEvent, CUevent)
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        self._stream_arg(hs)
        self._event(he)
        if flags & ~1:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown wait flags {flags:#x}")

    # -- host functions ------------------------------------------------------------

    @api(0)
    def cuLaunchHostFunc(self, hStream: Any, fn: Any, userData: Any) -> None:
        pfn = _function_pointer(fn, CUhostFn)
        data = _args.host_pointer(userData)
        self._stream_arg(hStream)
        if pfn == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuLaunchHostFunc: NULL function")
        _HOST_FN(pfn)(data.address)

    @api(0)
    def cuStreamAddCallback(self, hStream: Any, callback: Any, userData: Any,
                            flags: Any) -> None:
        pfn = _function_pointer(callback, CUstreamCallback)
        data = _args.host_pointer(userData)
        f = _args.c_int(flags, "unsigned int", "flags")
        hs = _args.handle_value(hStream, CUstream)
        self._stream_arg(hs)
        if pfn == 0 or f != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       "cuStreamAddCallback: NULL callback or flags other than 0")
        _STREAM_CALLBACK(pfn)(hs, int(E.CUDA_SUCCESS), data.address)

    # -- events ----------------------------------------------------------------

    @api(1)
    def cuEventCreate(self, Flags: Any) -> CUevent:
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        ctx = self._current()
        if flags & ~_EVENT_FLAGS_MASK:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown event flags {flags:#x}")
        if flags & _EVENT_INTERPROCESS and not flags & _EVENT_DISABLE_TIMING:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       "CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING")
        ev = Event(0, ctx, flags)
        ev.handle = self._new_handle(ev)
        ctx.events[ev.handle] = ev
        return CUevent(ev.handle)

    @api(0)
    def cuEventRecord(self, hEvent: Any, hStream: Any) -> None:
        hs = _args.handle_value(hStream, CUstream)
        ev = self._event(hEvent)
        self._stream(hs, ev.ctx)
        ev.time = time.perf_counter()

    @api(0)
    def cuEventRecordWithFlags(self, hEvent: Any, hStream: Any, flags: Any) -> None:
        """``CU_EVENT_RECORD_EXTERNAL`` matters only in stream capture (where
        :mod:`.capture_work` records an event-record node): outside a capture
        the record is an ordinary one."""
        f = _args.c_int(flags, "unsigned int", "flags")
        if f & ~_EVENT_RECORD_EXTERNAL:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown event record flags {f:#x}")
        hs = _args.handle_value(hStream, CUstream)
        ev = self._event(hEvent)
        self._stream(hs, ev.ctx)
        ev.time = time.perf_counter()

    @api(0)
    def cuEventQuery(self, hEvent: Any) -> None:
        self._event(hEvent)

    @api(0)
    def cuEventSynchronize(self, hEvent: Any) -> None:
        self._event(hEvent)

    @api(1)
    def cuEventElapsedTime(self, hStart: Any, hEnd: Any) -> float:
        start = self._event(hStart)
        end = self._event(hEnd)
        for ev in (start, end):
            if ev.flags & _EVENT_DISABLE_TIMING:
                raise Fail(E.CUDA_ERROR_INVALID_HANDLE,
                           "the event was created with CU_EVENT_DISABLE_TIMING")
            if ev.time is None:
                raise Fail(E.CUDA_ERROR_INVALID_HANDLE, "the event has not been recorded")
        return float((end.time - start.time) * 1000.0)

    @api(0)
    def cuEventDestroy(self, hEvent: Any) -> None:
        h = _args.handle_value(hEvent, CUevent)
        self._require_init()
        ev = self._lookup(h, Event, E.CUDA_ERROR_INVALID_HANDLE, "event")
        self._handles.pop(h, None)
        ev.ctx.events.pop(h, None)
