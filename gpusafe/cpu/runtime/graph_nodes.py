"""The runtime's graph calls beyond explicit construction (``cudaGraphClone``,
child-graph and event nodes, ``cudaGraphGetNodes``/``GetRootNodes``,
``cudaGraphNodeGetType``, ``cudaGraphExec*SetParams``, ``cudaGraphExecUpdate``,
``cudaGraphUpload``), on the driver's (:mod:`gpusafe.cpu.driver.graph_nodes`).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as _drv
from cuda.bindings.runtime import (
    cudaEvent_t,
    cudaGraph_t,
    cudaGraphExec_t,
    cudaGraphExecUpdateResult,
    cudaGraphExecUpdateResultInfo,
    cudaGraphNode_t,
    cudaGraphNodeType,
    cudaHostFn_t,
    cudaHostNodeParams,
)

from ...cudaapi import args as _args
from .base import RuntimeBase, api, check, handle
from .graphs import _deps, _graph, kernel_params, memcpy_1d, memset_params


def _node(node: Any) -> _drv.CUgraphNode:
    return _drv.CUgraphNode(_args.handle_value(node, cudaGraphNode_t))


def _exec(graphExec: Any) -> _drv.CUgraphExec:
    return _drv.CUgraphExec(_args.handle_value(graphExec, cudaGraphExec_t))


def _nodes(result: tuple[Any, ...]) -> tuple[list[cudaGraphNode_t], int]:
    nodes, n = check(result)
    return [cudaGraphNode_t(int(x)) for x in nodes], n


class GraphNodeCalls(RuntimeBase):
    @api(1)
    def cudaGraphClone(self, originalGraph: Any) -> cudaGraph_t:
        return cudaGraph_t(int(check(self.driver.cuGraphClone(_graph(originalGraph)))))

    @api(1)
    def cudaGraphAddChildGraphNode(self, graph: Any, pDependencies: Any, numDependencies: Any,
                                   childGraph: Any) -> cudaGraphNode_t:
        return cudaGraphNode_t(int(check(self.driver.cuGraphAddChildGraphNode(
            _graph(graph), _deps(pDependencies), numDependencies, _graph(childGraph)))))

    @api(1)
    def cudaGraphChildGraphNodeGetGraph(self, node: Any) -> cudaGraph_t:
        return cudaGraph_t(int(check(self.driver.cuGraphChildGraphNodeGetGraph(_node(node)))))

    @api(1)
    def cudaGraphAddEventRecordNode(self, graph: Any, pDependencies: Any, numDependencies: Any,
                                    event: Any) -> cudaGraphNode_t:
        return cudaGraphNode_t(int(check(self.driver.cuGraphAddEventRecordNode(
            _graph(graph), _deps(pDependencies), numDependencies,
            _drv.CUevent(handle(event, cudaEvent_t))))))

    @api(1)
    def cudaGraphAddEventWaitNode(self, graph: Any, pDependencies: Any, numDependencies: Any,
                                  event: Any) -> cudaGraphNode_t:
        return cudaGraphNode_t(int(check(self.driver.cuGraphAddEventWaitNode(
            _graph(graph), _deps(pDependencies), numDependencies,
            _drv.CUevent(handle(event, cudaEvent_t))))))

    @api(2)
    def cudaGraphGetNodes(self, graph: Any,
                          numNodes: Any = 0) -> tuple[list[cudaGraphNode_t], int]:
        return _nodes(self.driver.cuGraphGetNodes(_graph(graph), numNodes))

    @api(2)
    def cudaGraphGetRootNodes(self, graph: Any,
                              pNumRootNodes: Any = 0) -> tuple[list[cudaGraphNode_t], int]:
        return _nodes(self.driver.cuGraphGetRootNodes(_graph(graph), pNumRootNodes))

    @api(1)
    def cudaGraphNodeGetType(self, node: Any) -> cudaGraphNodeType:
        return cudaGraphNodeType(int(check(self.driver.cuGraphNodeGetType(_node(node)))))

    @api(0)
    def cudaGraphKernelNodeSetParams(self, node: Any, pNodeParams: Any) -> None:
        check(self.driver.cuGraphKernelNodeSetParams(_node(node), kernel_params(pNodeParams)))

    @api(0)
    def cudaGraphExecKernelNodeSetParams(self, hGraphExec: Any, node: Any,
                                         pNodeParams: Any) -> None:
        check(self.driver.cuGraphExecKernelNodeSetParams(
            _exec(hGraphExec), _node(node), kernel_params(pNodeParams)))

    @api(0)
    def cudaGraphExecMemcpyNodeSetParams1D(self, hGraphExec: Any, node: Any, dst: Any,
                                           src: Any, count: Any, kind: Any) -> None:
        c = memcpy_1d(dst, src, count, kind)
        check(self.driver.cuGraphExecMemcpyNodeSetParams(
            _exec(hGraphExec), _node(node), c, check(self.driver.cuCtxGetCurrent())))

    @api(0)
    def cudaGraphExecMemsetNodeSetParams(self, hGraphExec: Any, node: Any,
                                         pNodeParams: Any) -> None:
        m = memset_params(pNodeParams)
        check(self.driver.cuGraphExecMemsetNodeSetParams(
            _exec(hGraphExec), _node(node), m, check(self.driver.cuCtxGetCurrent())))

    @api(0)
    def cudaGraphExecHostNodeSetParams(self, hGraphExec: Any, node: Any,
                                       pNodeParams: Any) -> None:
        _args.require_struct(pNodeParams, cudaHostNodeParams, "pNodeParams")
        h = _drv.CUDA_HOST_NODE_PARAMS()
        fn = pNodeParams.fn
        h.fn = _drv.CUhostFn(int(fn) if isinstance(fn, cudaHostFn_t) else 0)
        h.userData = int(pNodeParams.userData)
        check(self.driver.cuGraphExecHostNodeSetParams(_exec(hGraphExec), _node(node), h))

    @api(1)
    def cudaGraphExecUpdate(self, hGraphExec: Any, hGraph: Any) -> cudaGraphExecUpdateResultInfo:
        info = check(self.driver.cuGraphExecUpdate(_exec(hGraphExec), _graph(hGraph)))
        out = cudaGraphExecUpdateResultInfo()
        out.result = cudaGraphExecUpdateResult(int(info.result))
        out.errorNode = cudaGraphNode_t(int(info.errorNode))
        out.errorFromNode = cudaGraphNode_t(int(info.errorFromNode))
        return out

    @api(0)
    def cudaGraphUpload(self, graphExec: Any, stream: Any) -> None:
        check(self.driver.cuGraphUpload(_exec(graphExec), _drv.CUstream(handle(stream))))
