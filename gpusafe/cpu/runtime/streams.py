"""Streams, events and host functions of the runtime (``cudaStream*``,
``cudaEvent*``, ``cudaLaunchHostFunc``, ``cudaStreamAddCallback``), over the
driver's: as synchronous, and as validated.  A runtime host function or
callback has the driver's C signature, so it is handed to the driver as it is.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import CUhostFn, CUstreamCallback
from cuda.bindings.runtime import cudaEvent_t, cudaHostFn_t, cudaStream_t, cudaStreamCallback_t

from ...cudaapi import args as _args
from .base import RuntimeBase, api, check, handle


class StreamCalls(RuntimeBase):
    @api(1)
    def cudaStreamCreate(self) -> cudaStream_t:
        self._ensure_context()
        return cudaStream_t(int(check(self.driver.cuStreamCreate(0))))

    @api(1)
    def cudaStreamCreateWithFlags(self, flags: Any) -> cudaStream_t:
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        return cudaStream_t(int(check(self.driver.cuStreamCreate(f))))

    @api(1)
    def cudaStreamCreateWithPriority(self, flags: Any, priority: Any) -> cudaStream_t:
        f = _args.c_int(flags, "unsigned int", "flags")
        p = _args.c_int(priority, "int", "priority")
        self._ensure_context()
        return cudaStream_t(int(check(self.driver.cuStreamCreateWithPriority(f, p))))

    @api(1)
    def cudaStreamGetFlags(self, hStream: Any) -> int:
        self._ensure_context()
        return int(check(self.driver.cuStreamGetFlags(handle(hStream))))

    @api(1)
    def cudaStreamGetPriority(self, hStream: Any) -> int:
        self._ensure_context()
        return int(check(self.driver.cuStreamGetPriority(handle(hStream))))

    @api(2)
    def cudaDeviceGetStreamPriorityRange(self) -> tuple[int, int]:
        self._ensure_context()
        least, greatest = check(self.driver.cuCtxGetStreamPriorityRange())
        return int(least), int(greatest)

    @api(0)
    def cudaStreamWaitEvent(self, stream: Any, event: Any, flags: Any) -> None:
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        check(self.driver.cuStreamWaitEvent(handle(stream), handle(event), f))

    @api(0)
    def cudaLaunchHostFunc(self, stream: Any, fn: Any, userData: Any) -> None:
        pfn = 0 if fn is None else int(fn) if isinstance(fn, cudaHostFn_t) \
            else int(cudaHostFn_t(fn))
        self._ensure_context()
        check(self.driver.cuLaunchHostFunc(handle(stream), CUhostFn(pfn), userData))

    @api(0)
    def cudaStreamAddCallback(self, stream: Any, callback: Any, userData: Any,
                              flags: Any) -> None:
        pfn = 0 if callback is None else int(callback) \
            if isinstance(callback, cudaStreamCallback_t) else int(cudaStreamCallback_t(callback))
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        check(self.driver.cuStreamAddCallback(handle(stream), CUstreamCallback(pfn), userData,
                                              f))

    @api(0)
    def cudaStreamSynchronize(self, stream: Any) -> None:
        self._ensure_context()
        check(self.driver.cuStreamSynchronize(handle(stream)))

    @api(0)
    def cudaStreamQuery(self, stream: Any) -> None:
        self._ensure_context()
        check(self.driver.cuStreamQuery(handle(stream)))

    @api(0)
    def cudaStreamDestroy(self, stream: Any) -> None:
        self._ensure_context()
        check(self.driver.cuStreamDestroy(handle(stream)))

    @api(1)
    def cudaEventCreate(self) -> cudaEvent_t:
        self._ensure_context()
        return cudaEvent_t(int(check(self.driver.cuEventCreate(0))))

    @api(1)
    def cudaEventCreateWithFlags(self, flags: Any) -> cudaEvent_t:
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        return cudaEvent_t(int(check(self.driver.cuEventCreate(f))))

    @api(0)
    def cudaEventRecord(self, event: Any, stream: Any) -> None:
        self._ensure_context()
        check(self.driver.cuEventRecord(handle(event, cudaEvent_t), handle(stream)))

    @api(0)
    def cudaEventRecordWithFlags(self, event: Any, stream: Any, flags: Any) -> None:
        f = _args.c_int(flags, "unsigned int", "flags")
        self._ensure_context()
        check(self.driver.cuEventRecordWithFlags(handle(event), handle(stream), f))

    @api(0)
    def cudaEventSynchronize(self, event: Any) -> None:
        self._ensure_context()
        check(self.driver.cuEventSynchronize(handle(event, cudaEvent_t)))

    @api(0)
    def cudaEventQuery(self, event: Any) -> None:
        self._ensure_context()
        check(self.driver.cuEventQuery(handle(event, cudaEvent_t)))

    @api(1)
    def cudaEventElapsedTime(self, start: Any, end: Any) -> float:
        self._ensure_context()
        return float(check(self.driver.cuEventElapsedTime(handle(start, cudaEvent_t), handle(end, cudaEvent_t))))

    @api(0)
    def cudaEventDestroy(self, event: Any) -> None:
        self._ensure_context()
        check(self.driver.cuEventDestroy(handle(event, cudaEvent_t)))
