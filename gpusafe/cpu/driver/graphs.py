"""CUDA graphs built explicitly (``cuGraphCreate``, ``cuGraphAdd*Node``,
``cuGraphInstantiate``, ``cuGraphLaunch``).

A graph is a list of nodes with their dependencies; instantiation fixes a
dependency order (a topological sort, nodes added earlier first among ready
ones) and launching runs the nodes one after the other in that order, in the
launch stream's order, like every other operation of the synchronous CPU
device.  Kernel parameters are copied when the node is added, as the real
driver does.

Each node runs through an ordinary call of this driver: a kernel node through
``cuLaunchKernel``, a memcpy node through ``cuMemcpy`` (one call per row), a
memset node through ``cuMemsetD8/16/32`` (one per row).  :meth:`GraphCalls.
set_graph_calls` lets a checker replace those calls with its own wrapped ones,
so that each kernel node of each ``cuGraphLaunch`` is a checked launch with
its own launch context and records, and each copy is judged as a copy.

Instantiation copies the nodes, so an executable graph keeps its own
parameters: :mod:`.graph_nodes` updates them (``cuGraphExec*SetParams``,
``cuGraphExecUpdate``) and adds cloning, child-graph and event nodes;
:mod:`.capture` builds graphs by stream capture with the same node builders.
Not implemented (absent, so reported as unimplemented): memory-allocation,
conditional and external-semaphore nodes; memcpy nodes on CUDA arrays or with
depth are ``NOT_SUPPORTED``.
"""

from __future__ import annotations

import copy
import ctypes
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings.driver import (
    CUDA_HOST_NODE_PARAMS,
    CUDA_KERNEL_NODE_PARAMS,
    CUDA_MEMCPY3D,
    CUDA_MEMSET_NODE_PARAMS,
    CUfunction,
    CUgraph,
    CUgraphExec,
    CUgraphNode,
    CUhostFn,
    CUstream,
)

from ...cudaapi import args as _args
from ..bindings import implements
from .api import _real, api
from .launches import LaunchCalls, _pack_params
from .state import E, Event, Fail
from .streams import _HOST_FN, _function_pointer

GRAPH_CALLS = ("cuLaunchKernel", "cuMemcpy", "cuMemsetD8", "cuMemsetD16", "cuMemsetD32")
"""The driver calls graph nodes run through (see :meth:`GraphCalls.set_graph_calls`)."""

_HOST, _DEVICE, _ARRAY, _UNIFIED = 1, 2, 3, 4


Run = Callable[[Mapping[str, Callable[..., Any]], int], tuple[Any, ...]]
"""What a node does at a launch: ``run(calls, stream)`` with the graph calls."""


@dataclass
class Node:
    kind: str  # kernel, memcpy, memset, host, empty, graph, event_record, event_wait
    run: Run
    deps: list[int] = field(default_factory=list)
    keep: Any = None  # buffers the node's arguments point into
    handle: int = 0
    ctx: Any = None  # a kernel node's function's context (what an update may not change)
    child: Graph | None = None  # a child-graph node's own copy of its graph


@dataclass
class Graph:
    ctx: Any
    nodes: list[Node] = field(default_factory=list)
    handle: int = 0


@dataclass
class GraphExec:
    """An instantiated graph: its own copies of the nodes (``nodes``, by the
    handle of the graph node each copies), in a dependency order."""

    ctx: Any
    order: list[Node]
    nodes: dict[int, Node] = field(default_factory=dict)
    handle: int = 0


def instantiate(graph: Graph) -> GraphExec:
    """The graph's nodes copied (later changes to the graph leave them be) in
    a dependency order."""
    nodes = {n.handle: _copy(n) for n in graph.nodes}
    return GraphExec(graph.ctx, [nodes[n.handle] for n in _order(graph)], nodes)


def _copy(node: Node) -> Node:
    twin = copy.copy(node)
    twin.deps = list(node.deps)
    return twin


def run_nodes(order: list[Node], calls: Mapping[str, Callable[..., Any]],
              hs: int) -> tuple[Any, ...]:
    for node in order:
        result = node.run(calls, hs)
        if result[0] != E.CUDA_SUCCESS:
            return (result[0],)
    return (E.CUDA_SUCCESS,)


def _order(graph: Graph) -> list[Node]:
    """A dependency order of the graph's nodes (Kahn's algorithm)."""
    done: set[int] = set()
    order: list[Node] = []
    pending = list(graph.nodes)
    while pending:
        ready = [n for n in pending if all(d in done for d in n.deps)]
        if not ready:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "the graph's dependencies form a cycle")
        for n in ready:
            done.add(n.handle)
            order.append(n)
        pending = [n for n in pending if n.handle not in done]
    return order


def _rows(p: Any, side: str) -> tuple[int, int]:
    """The address of a memcpy side's first byte and its pitch."""
    kind = int(getattr(p, f"{side}MemoryType"))
    if kind == _ARRAY or kind not in (_HOST, _DEVICE, _UNIFIED):
        raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                   f"memcpy node: {side} memory type {kind} (CUDA arrays are not supported "
                   "by the CPU device's graphs)")
    base = int(getattr(p, f"{side}Host")) if kind == _HOST else int(getattr(p, f"{side}Device"))
    pitch = int(getattr(p, f"{side}Pitch"))
    return base + int(getattr(p, f"{side}XInBytes")) + int(getattr(p, f"{side}Y")) * pitch, pitch


class GraphCalls(LaunchCalls):
    def _graph_calls(self) -> Mapping[str, Callable[..., Any]]:
        calls = getattr(self, "_graph_call_table", None)
        return calls if calls is not None else {n: getattr(self, n) for n in GRAPH_CALLS}

    def set_graph_calls(self, calls: Mapping[str, Callable[..., Any]] | None) -> None:
        """The functions graph nodes run through (None: this driver's own).
        A checker passes its wrapped ``cuLaunchKernel`` (and copies), so that
        graph-launched kernels are checked launches."""
        with self._lock:
            self._graph_call_table = None if calls is None else \
                {n: calls.get(n, getattr(self, n)) for n in GRAPH_CALLS}

    def _graph(self, hGraph: Any) -> Graph:
        h = _args.handle_value(hGraph, CUgraph)
        self._require_init()
        return self._lookup(h, Graph, E.CUDA_ERROR_INVALID_VALUE, "graph")

    def _add(self, hGraph: Any, dependencies: Any, numDependencies: Any, node: Node) -> CUgraphNode:
        graph = self._graph(hGraph)
        n = _args.c_int(numDependencies, "size_t", "numDependencies")
        deps = [_args.handle_value(d, CUgraphNode) for d in (dependencies or [])][:n]
        if len(deps) != n or len(set(deps)) != n:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "dependencies: wrong count or duplicates")
        return CUgraphNode(self._add_node(graph, deps, node))

    def _add_node(self, graph: Graph, deps: list[int], node: Node) -> int:
        known = {x.handle for x in graph.nodes}
        if any(d not in known for d in deps):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "a dependency is not a node of this graph")
        node.deps = list(deps)
        node.handle = self._new_handle(node)
        graph.nodes.append(node)
        return node.handle

    # -- node builders (explicit nodes, captured ones and updates share them) -------

    def _kernel_node(self, hf: int, grid: tuple[int, ...], block: tuple[int, ...], shared: int,
                     kp: _args.KernelParams, extra: int) -> Node:
        """A kernel node: the parameters copied now, passed at each launch as
        a ``void*`` array into that copy, through the graph calls'
        ``cuLaunchKernel``."""
        fn = self._function(hf)
        params = _pack_params(fn, kp, extra)
        buf = ctypes.create_string_buffer(params, max(len(params), 1))
        base = ctypes.addressof(buf)
        array = (ctypes.c_void_p * max(len(fn.info.params), 1))(
            *[base + p.offset for p in fn.info.params])
        address = ctypes.addressof(array)

        def run(calls: Mapping[str, Callable[..., Any]], hs: int) -> tuple[Any, ...]:
            return calls["cuLaunchKernel"](CUfunction(hf), *grid, *block, shared,
                                           CUstream(hs), address, 0)

        return Node("kernel", run, keep=(buf, array), ctx=fn.module.ctx)

    def _kernel_params_node(self, nodeParams: Any) -> Node:
        _args.require_struct(nodeParams, CUDA_KERNEL_NODE_PARAMS, "nodeParams")
        hf = _args.handle_value(nodeParams.func, CUfunction)
        kp = _args.convert_kernel_params(nodeParams.kernelParams)
        self._require_init()
        grid = (int(nodeParams.gridDimX), int(nodeParams.gridDimY), int(nodeParams.gridDimZ))
        block = (int(nodeParams.blockDimX), int(nodeParams.blockDimY), int(nodeParams.blockDimZ))
        return self._kernel_node(hf, grid, block, int(nodeParams.sharedMemBytes), kp,
                                 int(nodeParams.extra))

    @staticmethod
    def _copy_node(dst: int, src: int, width: int, height: int = 1, dpitch: int = 0,
                   spitch: int = 0, keep: Any = None) -> Node:
        """``height`` rows of ``width`` bytes, one ``cuMemcpy`` each."""
        return Node("memcpy", _rowwise(
            lambda calls, r: calls["cuMemcpy"](dst + r * dpitch, src + r * spitch, width),
            height), keep=keep)

    @staticmethod
    def _set_node(dst: int, value: int, size: int, width: int, height: int = 1,
                  pitch: int = 0) -> Node:
        """``height`` rows of ``width`` elements of ``size`` bytes, one
        ``cuMemsetD8/16/32`` each."""
        name = {1: "cuMemsetD8", 2: "cuMemsetD16", 4: "cuMemsetD32"}[size]
        return Node("memset", _rowwise(
            lambda calls, r: calls[name](dst + r * pitch, value, width), height))

    @staticmethod
    def _host_node(pfn: int, data: int, keep: Any = None) -> Node:
        def run(calls: Mapping[str, Callable[..., Any]], hs: int) -> tuple[Any, ...]:
            _HOST_FN(pfn)(data)
            return (E.CUDA_SUCCESS,)

        return Node("host", run, keep=keep)

    @staticmethod
    def _event_node(kind: str, event: Event) -> Node:
        """An event record node stamps the event; a wait has nothing to wait
        for on the synchronous CPU device."""
        def run(calls: Mapping[str, Callable[..., Any]], hs: int) -> tuple[Any, ...]:
            if kind == "event_record":
                event.time = time.perf_counter()
            return (E.CUDA_SUCCESS,)

        return Node(kind, run, keep=event)

    def _child_node(self, child: Graph) -> Node:
        """A child-graph node runs its own copy of the graph, taken now."""
        copy_ = self._clone(child)
        order = instantiate(copy_).order

        def run(calls: Mapping[str, Callable[..., Any]], hs: int) -> tuple[Any, ...]:
            return run_nodes(order, calls, hs)

        return Node("graph", run, child=copy_)

    def _clone(self, graph: Graph) -> Graph:
        """A new graph with copies of ``graph``'s nodes (new handles, the same
        dependencies between them)."""
        new = Graph(graph.ctx)
        new.handle = self._new_handle(new)
        handles: dict[int, int] = {}
        for node in graph.nodes:  # dependencies are always added before their dependents
            twin = _copy(node)
            if twin.child is not None:
                twin.child = self._clone(twin.child)
            handles[node.handle] = self._add_node(new, [handles[d] for d in node.deps], twin)
        return new

    # -- explicit construction --------------------------------------------------

    @api(1)
    def cuGraphCreate(self, flags: Any) -> CUgraph:
        f = _args.c_int(flags, "unsigned int", "flags")
        if f != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuGraphCreate: flags must be 0")
        g = Graph(self._current())
        g.handle = self._new_handle(g)
        return CUgraph(g.handle)

    @api(0)
    def cuGraphDestroy(self, hGraph: Any) -> None:
        g = self._graph(hGraph)
        for n in g.nodes:
            self._handles.pop(n.handle, None)
        self._handles.pop(g.handle, None)

    @api(1)
    def cuGraphAddEmptyNode(self, hGraph: Any, dependencies: Any,
                            numDependencies: Any) -> CUgraphNode:
        return self._add(hGraph, dependencies, numDependencies,
                         Node("empty", lambda calls, hs: (E.CUDA_SUCCESS,)))

    @api(1)
    def cuGraphAddKernelNode(self, hGraph: Any, dependencies: Any, numDependencies: Any,
                             nodeParams: Any) -> CUgraphNode:
        return self._add(hGraph, dependencies, numDependencies,
                         self._kernel_params_node(nodeParams))

    def _memcpy3d_node(self, copyParams: Any) -> Node:
        _args.require_struct(copyParams, CUDA_MEMCPY3D, "copyParams")
        p = copyParams
        if int(p.Depth) > 1 or int(p.srcZ) or int(p.dstZ):
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "memcpy node: 3D copies are not supported by the CPU device's graphs")
        src, spitch = _rows(p, "src")
        dst, dpitch = _rows(p, "dst")
        width, height = int(p.WidthInBytes), max(int(p.Height), 1)
        if height > 1 and (spitch < width or dpitch < width):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "memcpy node: pitch smaller than the width")
        return self._copy_node(dst, src, width, height, dpitch, spitch)

    def _memset_params_node(self, memsetParams: Any) -> Node:
        _args.require_struct(memsetParams, CUDA_MEMSET_NODE_PARAMS, "memsetParams")
        p = memsetParams
        size = int(p.elementSize)
        if size not in (1, 2, 4):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"memset node: element size {size}")
        width, height, pitch = int(p.width), max(int(p.height), 1), int(p.pitch)
        if height > 1 and pitch < width * size:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "memset node: pitch smaller than the width")
        return self._set_node(int(p.dst), int(p.value), size, width, height, pitch)

    @api(1)
    def cuGraphAddMemcpyNode(self, hGraph: Any, dependencies: Any, numDependencies: Any,
                             copyParams: Any, ctx: Any) -> CUgraphNode:
        return self._add(hGraph, dependencies, numDependencies, self._memcpy3d_node(copyParams))

    @api(1)
    def cuGraphAddMemsetNode(self, hGraph: Any, dependencies: Any, numDependencies: Any,
                             memsetParams: Any, ctx: Any) -> CUgraphNode:
        return self._add(hGraph, dependencies, numDependencies,
                         self._memset_params_node(memsetParams))

    def _host_params_node(self, nodeParams: Any) -> Node:
        _args.require_struct(nodeParams, CUDA_HOST_NODE_PARAMS, "nodeParams")
        pfn = _function_pointer(nodeParams.fn, CUhostFn)
        data = int(nodeParams.userData)
        if pfn == 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "host node: NULL function")
        return self._host_node(pfn, data)

    @api(1)
    def cuGraphAddHostNode(self, hGraph: Any, dependencies: Any, numDependencies: Any,
                           nodeParams: Any) -> CUgraphNode:
        return self._add(hGraph, dependencies, numDependencies,
                         self._host_params_node(nodeParams))

    @api(0)
    def cuGraphAddDependencies(self, hGraph: Any, from_: Any, to: Any, edgeData: Any,
                               numDependencies: Any) -> None:
        graph = self._graph(hGraph)
        if edgeData:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "cuGraphAddDependencies: edge data (programmatic dependent launches) is "
                       "not supported by the CPU device")
        n = _args.c_int(numDependencies, "size_t", "numDependencies")
        nodes = {x.handle: x for x in graph.nodes}
        pairs = list(zip((_args.handle_value(x, CUgraphNode) for x in (from_ or [])),
                         (_args.handle_value(x, CUgraphNode) for x in (to or [])),
                         strict=False))[:n]
        if len(pairs) != n or any(a not in nodes or b not in nodes for a, b in pairs):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuGraphAddDependencies: unknown node")
        for a, b in pairs:
            if a not in nodes[b].deps:
                nodes[b].deps.append(a)

    # -- instantiation and launch -------------------------------------------------

    @api(1)
    def cuGraphInstantiate(self, hGraph: Any, flags: Any) -> CUgraphExec:
        f = _args.c_int(flags, "unsigned long long", "flags")
        graph = self._graph(hGraph)
        if f & ~_INSTANTIATE_FLAGS:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       f"cuGraphInstantiate flags {f:#x} are not supported by the CPU device "
                       "(it takes AUTO_FREE_ON_LAUNCH and USE_NODE_PRIORITY, which change "
                       "nothing there)")
        ex = instantiate(graph)
        ex.handle = self._new_handle(ex)
        return CUgraphExec(ex.handle)

    def _exec(self, hGraphExec: Any) -> GraphExec:
        h = _args.handle_value(hGraphExec, CUgraphExec)
        self._require_init()
        return self._lookup(h, GraphExec, E.CUDA_ERROR_INVALID_VALUE, "executable graph")

    @api(0)
    def cuGraphExecDestroy(self, hGraphExec: Any) -> None:
        self._handles.pop(self._exec(hGraphExec).handle, None)

    def _graph_launch_plan(self, hGraphExec: Any, hStream: Any) -> tuple[list[Node], int]:
        ex = self._exec(hGraphExec)
        hs = _args.handle_value(hStream, CUstream)
        self._check_ctx(ex.ctx)
        self._stream(hs, ex.ctx)
        return list(ex.order), hs

    def cuGraphLaunch(self, hGraphExec: Any, hStream: Any) -> tuple[Any, ...]:
        """Runs outside the driver's lock: a kernel node goes through the
        checker's ``cuLaunchKernel``, which takes its own lock and calls back.
        While the nodes run, the calls they make are the graph's, not the
        legacy stream's (see :mod:`.capture`)."""
        with self._lock:
            try:
                order, hs = self._graph_launch_plan(hGraphExec, hStream)
            except Fail as f:
                self._record_error(f)
                return (f.result,)
            calls = self._graph_calls()
        outer = getattr(self._tls, "in_graph", False)
        self._tls.in_graph = True
        try:
            return run_nodes(order, calls, hs)
        finally:
            self._tls.in_graph = outer


_INSTANTIATE_FLAGS = 0x1 | 0x8
"""``CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`` (there are no
allocation nodes to free) and ``..._USE_NODE_PRIORITY`` (a synchronous device
has no priorities)."""


def _rowwise(one: Callable[[Mapping[str, Callable[..., Any]], int], tuple[Any, ...]],
             rows: int) -> Run:
    def run(calls: Mapping[str, Callable[..., Any]], hs: int) -> tuple[Any, ...]:
        for r in range(rows):
            result = one(calls, r)
            if result[0] != E.CUDA_SUCCESS:
                return result
        return (E.CUDA_SUCCESS,)

    return run


implements(GraphCalls.cuGraphLaunch, _real, "cuGraphLaunch", "gpusafe.cpu.driver")
