"""CUDA graphs beyond explicit construction: cloning, child-graph and event
nodes, queries (``cuGraphGetNodes``, ``cuGraphGetRootNodes``,
``cuGraphNodeGetType``), changing a kernel node, and updating an
executable graph (``cuGraphExec{Kernel,Memcpy,Memset,Host}NodeSetParams``,
``cuGraphExecUpdate``), on the nodes of :mod:`.graphs`.

An update replaces what an executable graph's own copy of a node does, built
by the same builders as a new node: an updated kernel node still runs
through the graph calls' ``cuLaunchKernel``, so it stays a checked launch.
``cuGraphExecUpdate`` pairs the nodes of the two graphs in the order they
were added (the order a re-run of the same construction or capture gives)
and refuses, with the driver's result codes, a graph whose node count,
node types, dependencies or kernel contexts differ.  ``cuGraphUpload`` has
nothing to upload on the CPU device: it validates its arguments.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CUevent,
    CUgraph,
    CUgraphExecUpdateResult,
    CUgraphExecUpdateResultInfo,
    CUgraphNode,
    CUgraphNodeType,
    CUstream,
)

from ...cudaapi import args as _args
from .api import api
from .graphs import Graph, GraphCalls, GraphExec, Node
from .state import E, Fail

_TYPES = {
    "kernel": CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL,
    "memcpy": CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMCPY,
    "memset": CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMSET,
    "host": CUgraphNodeType.CU_GRAPH_NODE_TYPE_HOST,
    "graph": CUgraphNodeType.CU_GRAPH_NODE_TYPE_GRAPH,
    "empty": CUgraphNodeType.CU_GRAPH_NODE_TYPE_EMPTY,
    "event_wait": CUgraphNodeType.CU_GRAPH_NODE_TYPE_WAIT_EVENT,
    "event_record": CUgraphNodeType.CU_GRAPH_NODE_TYPE_EVENT_RECORD,
}

_U = CUgraphExecUpdateResult


def _node_list(nodes: list[Node], room: int) -> tuple[list[CUgraphNode], int]:
    """cuda-python's answer for a node array of ``room`` entries: ``room``
    handles (NULL past the last node) and the number of nodes (all of them
    when ``room`` is 0, the size query)."""
    if room == 0:
        return [], len(nodes)
    handles = [CUgraphNode(n.handle) for n in nodes[:room]]
    return handles + [CUgraphNode(0)] * (room - len(handles)), min(room, len(nodes))


class GraphNodeCalls(GraphCalls):
    def _node(self, hNode: Any) -> Node:
        h = _args.handle_value(hNode, CUgraphNode)
        self._require_init()
        return self._lookup(h, Node, E.CUDA_ERROR_INVALID_VALUE, "graph node")

    def _exec_node(self, hGraphExec: Any, hNode: Any, kind: str) -> tuple[GraphExec, Node]:
        """The executable graph's own copy of the graph node ``hNode``."""
        ex = self._exec(hGraphExec)
        h = _args.handle_value(hNode, CUgraphNode)
        node = ex.nodes.get(h)
        if node is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"node {h:#x} is not a node of the graph this executable graph was "
                       "instantiated from")
        if node.kind != kind:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"node {h:#x} is a {node.kind} node, "
                                                   f"not a {kind} node")
        return ex, node

    @staticmethod
    def _take(node: Node, new: Node) -> None:
        """``node`` does from now on what ``new`` does (its place and
        dependencies stay)."""
        node.run, node.keep, node.ctx, node.child = new.run, new.keep, new.ctx, new.child

    # -- cloning, child graphs, events ---------------------------------------------

    @api(1)
    def cuGraphClone(self, originalGraph: Any) -> CUgraph:
        return CUgraph(self._clone(self._graph(originalGraph)).handle)

    @api(1)
    def cuGraphAddChildGraphNode(self, hGraph: Any, dependencies: Any, numDependencies: Any,
                                 childGraph: Any) -> CUgraphNode:
        child = self._graph(childGraph)
        return self._add(hGraph, dependencies, numDependencies, self._child_node(child))

    @api(1)
    def cuGraphChildGraphNodeGetGraph(self, hNode: Any) -> CUgraph:
        node = self._node(hNode)
        if node.child is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "not a child-graph node")
        return CUgraph(node.child.handle)

    @api(1)
    def cuGraphAddEventRecordNode(self, hGraph: Any, dependencies: Any, numDependencies: Any,
                                  event: Any) -> CUgraphNode:
        ev = self._event(_args.handle_value(event, CUevent))
        return self._add(hGraph, dependencies, numDependencies,
                         self._event_node("event_record", ev))

    @api(1)
    def cuGraphAddEventWaitNode(self, hGraph: Any, dependencies: Any, numDependencies: Any,
                                event: Any) -> CUgraphNode:
        ev = self._event(_args.handle_value(event, CUevent))
        return self._add(hGraph, dependencies, numDependencies,
                         self._event_node("event_wait", ev))

    # -- queries ----------------------------------------------------------------

    @api(2)
    def cuGraphGetNodes(self, hGraph: Any, numNodes: Any = 0) -> tuple[list[CUgraphNode], int]:
        room = _args.c_int(numNodes, "size_t", "numNodes")
        return _node_list(self._graph(hGraph).nodes, room)

    @api(2)
    def cuGraphGetRootNodes(self, hGraph: Any,
                            numRootNodes: Any = 0) -> tuple[list[CUgraphNode], int]:
        room = _args.c_int(numRootNodes, "size_t", "numRootNodes")
        return _node_list([n for n in self._graph(hGraph).nodes if not n.deps], room)

    @api(1)
    def cuGraphNodeGetType(self, hNode: Any) -> CUgraphNodeType:
        return _TYPES[self._node(hNode).kind]

    # -- changing nodes ---------------------------------------------------------

    @api(0)
    def cuGraphKernelNodeSetParams(self, hNode: Any, nodeParams: Any) -> None:
        node = self._node(hNode)
        new = self._kernel_params_node(nodeParams)
        if node.kind != "kernel":
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"a {node.kind} node is not a kernel node")
        self._take(node, new)

    @api(0)
    def cuGraphExecKernelNodeSetParams(self, hGraphExec: Any, hNode: Any,
                                       nodeParams: Any) -> None:
        new = self._kernel_params_node(nodeParams)
        _, node = self._exec_node(hGraphExec, hNode, "kernel")
        if new.ctx is not node.ctx:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       "the kernel belongs to another context than the node's")
        self._take(node, new)

    @api(0)
    def cuGraphExecMemcpyNodeSetParams(self, hGraphExec: Any, hNode: Any, copyParams: Any,
                                       ctx: Any) -> None:
        new = self._memcpy3d_node(copyParams)
        self._take(self._exec_node(hGraphExec, hNode, "memcpy")[1], new)

    @api(0)
    def cuGraphExecMemsetNodeSetParams(self, hGraphExec: Any, hNode: Any, memsetParams: Any,
                                       ctx: Any) -> None:
        new = self._memset_params_node(memsetParams)
        self._take(self._exec_node(hGraphExec, hNode, "memset")[1], new)

    @api(0)
    def cuGraphExecHostNodeSetParams(self, hGraphExec: Any, hNode: Any,
                                     nodeParams: Any) -> None:
        new = self._host_params_node(nodeParams)
        self._take(self._exec_node(hGraphExec, hNode, "host")[1], new)

    @api(1)
    def cuGraphExecUpdate(self, hGraphExec: Any, hGraph: Any) -> CUgraphExecUpdateResultInfo:
        """On a refused update cuda-python gives ``(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
        None)``: its result info is not returned, so it is not built here either."""
        ex = self._exec(hGraphExec)
        graph = self._graph(hGraph)
        result, error_node, error_from = _pairing(ex, graph)
        if result is not _U.CU_GRAPH_EXEC_UPDATE_SUCCESS:
            raise Fail(E.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
                       f"cuGraphExecUpdate: {result.name} (node {error_node:#x}, "
                       f"from node {error_from:#x})")
        for mine, theirs in zip(ex.nodes.values(), graph.nodes, strict=True):
            self._take(mine, theirs)
        info = CUgraphExecUpdateResultInfo()
        info.result = result
        info.errorNode = CUgraphNode(0)
        info.errorFromNode = CUgraphNode(0)
        return info

    @api(0)
    def cuGraphUpload(self, hGraphExec: Any, hStream: Any) -> None:
        ex = self._exec(hGraphExec)
        hs = _args.handle_value(hStream, CUstream)
        self._check_ctx(ex.ctx)
        self._stream(hs, ex.ctx)


def _pairing(ex: GraphExec, graph: Graph) -> tuple[CUgraphExecUpdateResult, int, int]:
    """Whether ``graph`` can update ``ex`` (the driver's result, the node of
    ``graph`` at fault and the mismatched dependency)."""
    mine = list(ex.nodes.values())
    theirs = graph.nodes
    if len(mine) != len(theirs):
        return _U.CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, 0, 0
    pair = {m.handle: t.handle for m, t in zip(mine, theirs, strict=True)}
    for m, t in zip(mine, theirs, strict=True):
        if m.kind != t.kind:
            return _U.CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, t.handle, 0
        if len(m.deps) != len(t.deps):
            return _U.CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, t.handle, 0
        for a, b in zip(m.deps, t.deps, strict=True):
            if pair.get(a) != b:
                return _U.CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, t.handle, b
        if m.kind == "kernel" and m.ctx is not t.ctx:
            return _U.CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE, t.handle, 0
        if m.kind == "graph" and m.child is not None and t.child is not None and \
                len(m.child.nodes) != len(t.child.nodes):
            return _U.CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, t.handle, 0
    return _U.CU_GRAPH_EXEC_UPDATE_SUCCESS, 0, 0
