"""Stream capture (``cuStreamBeginCapture``, ``cuStreamEndCapture``,
``cuStreamIsCapturing``, ``cuStreamGetCaptureInfo``,
``cuThreadExchangeStreamCaptureMode``, ...): the state of each capture
sequence and the rules the driver enforces while one is active.

A capture sequence is a graph being built and, for each stream taking part,
the nodes the next operation on that stream will depend on (its frontier).
The operations on a capturing stream become nodes (:mod:`.capture_work`);
an event recorded on a capturing stream remembers that stream's frontier, and
a stream that waits on it joins the sequence (a fork) or adds those nodes to
its frontier (a join), as NVIDIA's simpleCudaGraphs does with
``cudaEventRecord`` + ``cudaStreamWaitEvent``.

What the real driver refuses, this one refuses with the same results, and
the capture it spoils is invalidated (``cuStreamEndCapture`` then answers
``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`` with no graph):

* synchronising or querying a capturing stream, a stream callback on one
  (``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``); querying or synchronising an
  event recorded in a capture (``CUDA_ERROR_CAPTURED_EVENT``);
* the legacy default stream used while a blocking stream of its context
  captures (``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT``);
* a potentially unsafe call (allocating, freeing, synchronising the context)
  from a thread that the capture mode prohibits
  (``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``);
* waiting on an event recorded outside any capture, or one of another
  capture (``..._ISOLATION``, ``..._MERGE``); ending from another stream
  (``..._UNMATCHED``) or another thread (``..._WRONG_THREAD``); a fork not
  joined back into the origin stream at the end (``..._UNJOINED``).

An operation on a capturing stream that the CPU device cannot record as a
node (stream-ordered allocation, prefetches, ...) is ``CUDA_ERROR_NOT_SUPPORTED``
naming why, and invalidates the capture: never run at once as if it were not
captured.  Capturing the per-thread default stream is not supported either.
The nodes of a graph launch run on the calling thread with a flag set
(``in_graph``) so that their legacy-stream copies are not taken for the
program's own.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings.driver import (
    CU_STREAM_LEGACY,
    CUgraph,
    CUgraphEdgeData,
    CUgraphNode,
    CUstream,
    CUstreamCaptureMode,
    CUstreamCaptureStatus,
    CUstreamUpdateCaptureDependencies_flags,
    cuuint64_t,
)

from ...cudaapi import args as _args
from .api import api
from .graph_nodes import GraphNodeCalls
from .graphs import Graph, Node
from .state import Context, E, Fail, Stream

_MODE = CUstreamCaptureMode
_STATUS = CUstreamCaptureStatus
_LEGACY = (0, int(CU_STREAM_LEGACY))
_NON_BLOCKING = 0x1
_IDS = itertools.count(1)


@dataclass(eq=False)
class Capture:
    """One capture sequence: its graph, the stream that began it, its mode
    and thread, and each taking part stream's frontier."""

    graph: Graph
    origin: int
    mode: CUstreamCaptureMode
    thread: int
    owned: bool  # the capture made the graph (cuStreamBeginCaptureToGraph: the program did)
    deps: dict[int, list[int]] = field(default_factory=dict)
    invalid: bool = False
    ident: int = field(default_factory=lambda: next(_IDS))


class CaptureCalls(GraphNodeCalls):
    def _start(self, memory: Any) -> None:
        super()._start(memory)
        self._captures: dict[int, Capture] = {}  # stream handle -> its capture
        self._captured_events: dict[int, tuple[Capture, list[int]]] = {}

    # -- the rules ---------------------------------------------------------------

    def _plain_stream(self, value: int, ctx: Context) -> Stream | None:
        """The stream lookup without the capture rules (for capture itself)."""
        return super()._stream(value, ctx)

    def _stream(self, value: int, ctx: Context) -> Stream | None:
        """Every stream operation that is not recorded by capture comes here:
        on a capturing stream it cannot run now, on the legacy stream it may
        be an implicit dependency on a capture."""
        s = super()._stream(value, ctx)
        if self._captures and not getattr(self._tls, "in_graph", False):
            cap = self._captures.get(value)
            if cap is not None:
                cap.invalid = True
                raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                           "this operation cannot be recorded by the CPU device's stream "
                           "capture (it records kernel launches, copies, memsets, host "
                           "functions, event records and waits, and graph launches); the "
                           "capture is invalidated")
            if value in _LEGACY:
                self._implicit(ctx)
        return s

    def _blocking_captures(self, ctx: Context) -> list[Capture]:
        out: list[Capture] = []
        for hs, cap in self._captures.items():
            s = self._handles.get(hs)
            if cap.graph.ctx is ctx and isinstance(s, Stream) and not s.flags & _NON_BLOCKING \
                    and cap not in out:
                out.append(cap)
        return out

    def _implicit(self, ctx: Context) -> None:
        """The legacy stream waits for every blocking stream of its context:
        while one captures, using it would depend on the capture."""
        hit = self._blocking_captures(ctx)
        if hit:
            for cap in hit:
                cap.invalid = True
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                       "the legacy stream was used while a blocking stream of its context is "
                       "capturing; the capture is invalidated")

    def _thread_mode(self) -> CUstreamCaptureMode:
        return getattr(self._tls, "capture_mode", _MODE.CU_STREAM_CAPTURE_MODE_GLOBAL)

    def _unsafe(self, what: str) -> None:
        """A potentially unsafe call (cuThreadExchangeStreamCaptureMode's
        rules): refused where the calling thread's mode and the active
        captures' modes prohibit it."""
        if not self._captures:
            return
        mode = self._thread_mode()
        if mode == _MODE.CU_STREAM_CAPTURE_MODE_RELAXED:
            return
        me = threading.get_ident()
        hit = {id(c): c for c in self._captures.values() if c.graph.ctx.alive and (
               (c.thread == me and c.mode != _MODE.CU_STREAM_CAPTURE_MODE_RELAXED)
               or (mode == _MODE.CU_STREAM_CAPTURE_MODE_GLOBAL and c.thread != me
                   and c.mode == _MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))}
        if hit:
            for cap in hit.values():
                cap.invalid = True
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                       f"{what} is not permitted while a stream captures in "
                       f"{mode.name}; the capture is invalidated")

    def _capture_for(self, hs: int) -> Capture | None:
        """The active capture ``hs`` takes part in (None: it does not capture)."""
        cap = self._captures.get(hs)
        if cap is not None and cap.invalid:
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                       "the stream's capture sequence was invalidated by an earlier error")
        return cap

    def _captured(self, cap: Capture, hs: int, node: Node) -> None:
        """``node`` joins the capture's graph after the stream's frontier and
        becomes it."""
        cap.deps[hs] = [self._add_node(cap.graph, cap.deps[hs], node)]

    def _end(self, cap: Capture) -> None:
        for hs in cap.deps:
            self._captures.pop(hs, None)
        for ev in [e for e, (c, _) in self._captured_events.items() if c is cap]:
            del self._captured_events[ev]

    def _drop_graph(self, cap: Capture) -> None:
        if cap.owned:
            for n in cap.graph.nodes:
                self._handles.pop(n.handle, None)
            self._handles.pop(cap.graph.handle, None)

    # -- beginning and ending ---------------------------------------------------------

    def _begin(self, hStream: Any, mode: Any, graph: Graph | None, deps: list[int]) -> None:
        m = _args.require_enum(mode, _MODE, "mode")
        hs = _args.handle_value(hStream, CUstream)
        ctx, s = self._stream_arg(hs)
        if s is None:
            if hs in _LEGACY:
                raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                           "the legacy default stream cannot be captured")
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "capturing the per-thread default stream is not supported by the CPU "
                       "device; capture a stream created with cuStreamCreate")
        if hs in self._captures:
            raise Fail(E.CUDA_ERROR_ILLEGAL_STATE, "the stream is already capturing")
        owned = graph is None
        if graph is None:
            graph = Graph(ctx)
            graph.handle = self._new_handle(graph)
        cap = Capture(graph, hs, m, threading.get_ident(), owned)
        cap.deps[hs] = deps
        self._captures[hs] = cap

    @api(0)
    def cuStreamBeginCapture(self, hStream: Any, mode: Any) -> None:
        self._begin(hStream, mode, None, [])

    @api(0)
    def cuStreamBeginCaptureToGraph(self, hStream: Any, hGraph: Any, dependencies: Any,
                                    dependencyData: Any, numDependencies: Any,
                                    mode: Any) -> None:
        n = _args.c_int(numDependencies, "size_t", "numDependencies")
        deps = [_args.handle_value(d, CUgraphNode) for d in (dependencies or [])][:n]
        graph = self._graph(hGraph)
        if dependencyData:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "edge data (programmatic dependent launches) is not supported by the "
                       "CPU device")
        if len(deps) != n or any(d not in {x.handle for x in graph.nodes} for d in deps):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "a dependency is not a node of the graph")
        self._begin(hStream, mode, graph, deps)

    @api(1)
    def cuStreamEndCapture(self, hStream: Any) -> CUgraph:
        hs = _args.handle_value(hStream, CUstream)
        self._stream_arg(hs)
        cap = self._captures.get(hs)
        if cap is None:
            raise Fail(E.CUDA_ERROR_ILLEGAL_STATE, "the stream is not capturing")
        if hs != cap.origin:
            cap.invalid = True
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
                       "the capture was not begun on this stream; it is invalidated")
        if cap.mode != _MODE.CU_STREAM_CAPTURE_MODE_RELAXED and \
                cap.thread != threading.get_ident():
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                       f"a capture begun in {cap.mode.name} must end on the thread that "
                       "began it")
        self._end(cap)
        if cap.invalid:
            self._drop_graph(cap)
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                       "the capture was invalidated by an earlier error")
        joined = self._ancestors(cap.graph, cap.deps[hs])
        loose = [s for s, d in cap.deps.items() if s != hs and not set(d) <= joined]
        if loose:
            self._drop_graph(cap)
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
                       f"the work of stream {loose[0]:#x} was forked from the capture and "
                       "never joined back into the stream that began it")
        return CUgraph(cap.graph.handle)

    @staticmethod
    def _ancestors(graph: Graph, frontier: list[int]) -> set[int]:
        deps = {n.handle: n.deps for n in graph.nodes}
        seen: set[int] = set()
        todo = list(frontier)
        while todo:
            h = todo.pop()
            if h not in seen:
                seen.add(h)
                todo.extend(deps.get(h, ()))
        return seen

    # -- queries -----------------------------------------------------------------

    def _status(self, hStream: Any) -> tuple[CUstreamCaptureStatus, Capture | None, int]:
        hs = _args.handle_value(hStream, CUstream)
        ctx, _ = self._stream_arg(hs)
        if hs in _LEGACY and self._blocking_captures(ctx):
            raise Fail(E.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                       "the legacy stream is unusable while a blocking stream of its context "
                       "captures")
        cap = self._captures.get(hs)
        if cap is None:
            return _STATUS.CU_STREAM_CAPTURE_STATUS_NONE, None, hs
        if cap.invalid:
            return _STATUS.CU_STREAM_CAPTURE_STATUS_INVALIDATED, cap, hs
        return _STATUS.CU_STREAM_CAPTURE_STATUS_ACTIVE, cap, hs

    @api(1)
    def cuStreamIsCapturing(self, hStream: Any) -> CUstreamCaptureStatus:
        return self._status(hStream)[0]

    @api(6)
    def cuStreamGetCaptureInfo(self, hStream: Any) -> tuple[Any, ...]:
        status, cap, hs = self._status(hStream)
        if cap is None or status != _STATUS.CU_STREAM_CAPTURE_STATUS_ACTIVE:
            return status, cuuint64_t(0), CUgraph(0), [], [], 0
        deps = cap.deps[hs]
        return (status, cuuint64_t(cap.ident), CUgraph(cap.graph.handle),
                [CUgraphNode(d) for d in deps], [CUgraphEdgeData() for _ in deps], len(deps))

    @api(0)
    def cuStreamUpdateCaptureDependencies(self, hStream: Any, dependencies: Any,
                                          dependencyData: Any, numDependencies: Any,
                                          flags: Any) -> None:
        n = _args.c_int(numDependencies, "size_t", "numDependencies")
        f = _args.c_int(flags, "unsigned int", "flags")
        deps = [_args.handle_value(d, CUgraphNode) for d in (dependencies or [])][:n]
        hs = _args.handle_value(hStream, CUstream)
        self._stream_arg(hs)
        cap = self._captures.get(hs)
        if cap is None:
            raise Fail(E.CUDA_ERROR_ILLEGAL_STATE, "the stream is not capturing")
        if dependencyData:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "edge data (programmatic dependent launches) is not supported by the "
                       "CPU device")
        if len(deps) != n or any(d not in {x.handle for x in cap.graph.nodes} for d in deps):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "a dependency is not a node of the graph")
        F = CUstreamUpdateCaptureDependencies_flags
        if f == F.CU_STREAM_SET_CAPTURE_DEPENDENCIES:
            cap.deps[hs] = deps
        elif f == F.CU_STREAM_ADD_CAPTURE_DEPENDENCIES:
            cap.deps[hs] = cap.deps[hs] + [d for d in deps if d not in cap.deps[hs]]
        else:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown flags {f:#x}")

    @api(1)
    def cuThreadExchangeStreamCaptureMode(self, mode: Any) -> CUstreamCaptureMode:
        m = _args.require_enum(mode, _MODE, "mode")
        old = self._thread_mode()
        self._tls.capture_mode = m
        return old
