"""Streams and events of the runtime (``cudaStream*``, ``cudaEvent*``), over
the driver's: as synchronous, and as validated.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.runtime import cudaEvent_t, cudaStream_t

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
