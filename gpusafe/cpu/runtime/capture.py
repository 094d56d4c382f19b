"""The runtime's stream capture (``cudaStreamBeginCapture``,
``cudaStreamEndCapture``, ``cudaStreamIsCapturing``,
``cudaStreamGetCaptureInfo``, ``cudaThreadExchangeStreamCaptureMode``, ...)
on the driver's (:mod:`gpusafe.cpu.driver.capture`): the runtime's async
copies, memsets, host functions and event calls reach the driver on the same
stream, so a stream captures whichever API the program enqueues work with,
and the driver's ``CUDA_ERROR_STREAM_CAPTURE_*`` become the runtime's
``cudaErrorStreamCapture*`` of the same value.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as _drv
from cuda.bindings.runtime import (
    cudaGraph_t,
    cudaGraphEdgeData,
    cudaGraphNode_t,
    cudaStreamCaptureMode,
    cudaStreamCaptureStatus,
)

from ...cudaapi import args as _args
from .base import RuntimeBase, api, check, handle
from .graphs import _deps, _graph


def _mode(mode: Any) -> _drv.CUstreamCaptureMode:
    return _drv.CUstreamCaptureMode(int(_args.require_enum(mode, cudaStreamCaptureMode,
                                                           "mode").value))


class CaptureCalls(RuntimeBase):
    @api(0)
    def cudaStreamBeginCapture(self, stream: Any, mode: Any) -> None:
        m = _mode(mode)
        self._ensure_context()
        check(self.driver.cuStreamBeginCapture(handle(stream), m))

    @api(0)
    def cudaStreamBeginCaptureToGraph(self, stream: Any, graph: Any, dependencies: Any,
                                      dependencyData: Any, numDependencies: Any,
                                      mode: Any) -> None:
        m = _mode(mode)
        self._ensure_context()
        check(self.driver.cuStreamBeginCaptureToGraph(
            handle(stream), _graph(graph), _deps(dependencies), dependencyData,
            numDependencies, m))

    @api(1)
    def cudaStreamEndCapture(self, stream: Any) -> cudaGraph_t:
        self._ensure_context()
        return cudaGraph_t(int(check(self.driver.cuStreamEndCapture(handle(stream)))))

    @api(1)
    def cudaStreamIsCapturing(self, stream: Any) -> cudaStreamCaptureStatus:
        self._ensure_context()
        status = check(self.driver.cuStreamIsCapturing(handle(stream)))
        return cudaStreamCaptureStatus(int(status))

    @api(6)
    def cudaStreamGetCaptureInfo(self, stream: Any) -> tuple[Any, ...]:
        self._ensure_context()
        status, ident, graph, deps, _, n = check(
            self.driver.cuStreamGetCaptureInfo(handle(stream)))
        return (cudaStreamCaptureStatus(int(status)), int(ident), cudaGraph_t(int(graph)),
                [cudaGraphNode_t(int(d)) for d in deps], [cudaGraphEdgeData() for _ in deps],
                n)

    @api(0)
    def cudaStreamUpdateCaptureDependencies(self, stream: Any, dependencies: Any,
                                            dependencyData: Any, numDependencies: Any,
                                            flags: Any) -> None:
        self._ensure_context()
        check(self.driver.cuStreamUpdateCaptureDependencies(
            handle(stream), _deps(dependencies), dependencyData, numDependencies, flags))

    @api(1)
    def cudaThreadExchangeStreamCaptureMode(self, mode: Any) -> cudaStreamCaptureMode:
        m = _mode(mode)
        self._init()
        return cudaStreamCaptureMode(int(check(
            self.driver.cuThreadExchangeStreamCaptureMode(m))))
