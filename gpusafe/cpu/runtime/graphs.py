"""The runtime's CUDA graphs built explicitly (``cudaGraph*``), on the
driver's (:mod:`gpusafe.cpu.driver.graphs`): each runtime node is a driver
node, so a graph launched through either API runs its nodes through the same
calls, checked alike.

``cudaKernelNodeParams.func`` is taken as a driver function handle (an
``int`` of a ``CUfunction`` from ``cuModuleGetFunction``): cuda-bindings 13
has no ``cudaLaunchKernel`` and no host stubs, so that is the only kernel a
cuda-python program can name there.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as _drv
from cuda.bindings.runtime import (
    cudaError_t,
    cudaGraph_t,
    cudaGraphExec_t,
    cudaGraphNode_t,
    cudaHostFn_t,
    cudaHostNodeParams,
    cudaKernelNodeParams,
    cudaMemcpy3DParms,
    cudaMemcpyKind,
    cudaMemsetParams,
)

from ...cudaapi import args as _args
from .base import Fail, RuntimeBase, api, check, handle

_HOST, _DEVICE = _drv.CUmemorytype.CU_MEMORYTYPE_HOST, _drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
_UNIFIED = _drv.CUmemorytype.CU_MEMORYTYPE_UNIFIED


def _deps(pDependencies: Any) -> list[_drv.CUgraphNode]:
    return [_drv.CUgraphNode(_args.handle_value(d, cudaGraphNode_t))
            for d in (pDependencies or [])]


def _graph(graph: Any) -> _drv.CUgraph:
    return _drv.CUgraph(_args.handle_value(graph, cudaGraph_t))


def kernel_params(pNodeParams: Any) -> _drv.CUDA_KERNEL_NODE_PARAMS:
    """A runtime kernel node's parameters as the driver's (``func`` a ``CUfunction``)."""
    _args.require_struct(pNodeParams, cudaKernelNodeParams, "pNodeParams")
    p = _drv.CUDA_KERNEL_NODE_PARAMS()
    p.func = _drv.CUfunction(int(pNodeParams.func))
    p.gridDimX, p.gridDimY, p.gridDimZ = (int(pNodeParams.gridDim.x),
                                          int(pNodeParams.gridDim.y),
                                          int(pNodeParams.gridDim.z))
    p.blockDimX, p.blockDimY, p.blockDimZ = (int(pNodeParams.blockDim.x),
                                             int(pNodeParams.blockDim.y),
                                             int(pNodeParams.blockDim.z))
    p.sharedMemBytes = int(pNodeParams.sharedMemBytes)
    p.kernelParams = int(pNodeParams.kernelParams)
    p.extra = int(pNodeParams.extra)
    return p


def memset_params(pMemsetParams: Any) -> _drv.CUDA_MEMSET_NODE_PARAMS:
    _args.require_struct(pMemsetParams, cudaMemsetParams, "pMemsetParams")
    m = _drv.CUDA_MEMSET_NODE_PARAMS()
    for name in ("dst", "value", "elementSize", "width", "height", "pitch"):
        setattr(m, name, int(getattr(pMemsetParams, name)))
    return m


def memcpy_1d(dst: Any, src: Any, count: Any, kind: Any) -> _drv.CUDA_MEMCPY3D:
    """``cudaGraphAddMemcpyNode1D``'s copy as the driver's ``CUDA_MEMCPY3D``."""
    n = _args.c_int(count, "size_t", "count")
    if not isinstance(kind, cudaMemcpyKind):
        raise TypeError(f"Argument 'kind' is not instance of type (expected "
                        f"<class 'cuda.bindings.runtime.cudaMemcpyKind'>, found "
                        f"{type(kind)})")
    c = _drv.CUDA_MEMCPY3D()
    for side, address, is_dst in (("dst", dst, True), ("src", src, False)):
        memory = _side(kind, is_dst)
        setattr(c, f"{side}MemoryType", memory)
        value = _args.host_pointer(address).address
        setattr(c, f"{side}Host" if memory == _HOST else f"{side}Device", value)
    c.WidthInBytes, c.Height, c.Depth = n, 1, 1
    return c


def _side(kind: Any, is_dst: bool) -> Any:
    K = cudaMemcpyKind
    if kind == K.cudaMemcpyDefault:
        return _UNIFIED
    device = (K.cudaMemcpyHostToDevice, K.cudaMemcpyDeviceToDevice) if is_dst else \
        (K.cudaMemcpyDeviceToHost, K.cudaMemcpyDeviceToDevice)
    host = (K.cudaMemcpyDeviceToHost, K.cudaMemcpyHostToHost) if is_dst else \
        (K.cudaMemcpyHostToDevice, K.cudaMemcpyHostToHost)
    if kind in device:
        return _DEVICE
    if kind in host:
        return _HOST
    raise Fail(cudaError_t.cudaErrorInvalidMemcpyDirection)


def memcpy_3d(p: Any) -> _drv.CUDA_MEMCPY3D:
    """``cudaMemcpy3DParms`` as the driver's ``CUDA_MEMCPY3D`` (linear memory:
    a side on a CUDA array is the driver's ``NOT_SUPPORTED``)."""
    _args.require_struct(p, cudaMemcpy3DParms, "pCopyParams")
    kind = _args.require_enum(p.kind, cudaMemcpyKind, "kind")
    c = _drv.CUDA_MEMCPY3D()
    for side, is_dst in (("dst", True), ("src", False)):
        ptr, pos = getattr(p, f"{side}Ptr"), getattr(p, f"{side}Pos")
        if int(getattr(p, f"{side}Array")):
            setattr(c, f"{side}MemoryType", _drv.CUmemorytype.CU_MEMORYTYPE_ARRAY)
            continue
        memory = _side(kind, is_dst)
        setattr(c, f"{side}MemoryType", memory)
        setattr(c, f"{side}Host" if memory == _HOST else f"{side}Device", int(ptr.ptr))
        setattr(c, f"{side}Pitch", int(ptr.pitch))
        setattr(c, f"{side}Height", int(ptr.ysize))
        setattr(c, f"{side}XInBytes", int(pos.x))
        setattr(c, f"{side}Y", int(pos.y))
        setattr(c, f"{side}Z", int(pos.z))
    c.WidthInBytes, c.Height, c.Depth = (int(p.extent.width), int(p.extent.height),
                                         int(p.extent.depth))
    return c


class GraphCalls(RuntimeBase):
    def _node(self, result: tuple[Any, ...]) -> cudaGraphNode_t:
        return cudaGraphNode_t(int(check(result)))

    @api(1)
    def cudaGraphCreate(self, flags: Any) -> cudaGraph_t:
        self._ensure_context()
        return cudaGraph_t(int(check(self.driver.cuGraphCreate(flags))))

    @api(0)
    def cudaGraphDestroy(self, graph: Any) -> None:
        check(self.driver.cuGraphDestroy(_graph(graph)))

    @api(1)
    def cudaGraphAddEmptyNode(self, graph: Any, pDependencies: Any,
                              numDependencies: Any) -> cudaGraphNode_t:
        return self._node(self.driver.cuGraphAddEmptyNode(
            _graph(graph), _deps(pDependencies), numDependencies))

    @api(1)
    def cudaGraphAddKernelNode(self, graph: Any, pDependencies: Any, numDependencies: Any,
                               pNodeParams: Any) -> cudaGraphNode_t:
        return self._node(self.driver.cuGraphAddKernelNode(
            _graph(graph), _deps(pDependencies), numDependencies, kernel_params(pNodeParams)))

    @api(1)
    def cudaGraphAddMemcpyNode1D(self, graph: Any, pDependencies: Any, numDependencies: Any,
                                 dst: Any, src: Any, count: Any, kind: Any) -> cudaGraphNode_t:
        c = memcpy_1d(dst, src, count, kind)
        return self._node(self.driver.cuGraphAddMemcpyNode(
            _graph(graph), _deps(pDependencies), numDependencies, c,
            check(self.driver.cuCtxGetCurrent())))

    @api(1)
    def cudaGraphAddMemcpyNode(self, graph: Any, pDependencies: Any, numDependencies: Any,
                               pCopyParams: Any) -> cudaGraphNode_t:
        c = memcpy_3d(pCopyParams)
        return self._node(self.driver.cuGraphAddMemcpyNode(
            _graph(graph), _deps(pDependencies), numDependencies, c,
            check(self.driver.cuCtxGetCurrent())))

    @api(1)
    def cudaGraphAddMemsetNode(self, graph: Any, pDependencies: Any, numDependencies: Any,
                               pMemsetParams: Any) -> cudaGraphNode_t:
        m = memset_params(pMemsetParams)
        return self._node(self.driver.cuGraphAddMemsetNode(
            _graph(graph), _deps(pDependencies), numDependencies, m,
            check(self.driver.cuCtxGetCurrent())))

    @api(1)
    def cudaGraphAddHostNode(self, graph: Any, pDependencies: Any, numDependencies: Any,
                             pNodeParams: Any) -> cudaGraphNode_t:
        _args.require_struct(pNodeParams, cudaHostNodeParams, "pNodeParams")
        h = _drv.CUDA_HOST_NODE_PARAMS()
        fn = pNodeParams.fn
        h.fn = _drv.CUhostFn(int(fn) if isinstance(fn, cudaHostFn_t) else 0)
        h.userData = int(pNodeParams.userData)
        return self._node(self.driver.cuGraphAddHostNode(
            _graph(graph), _deps(pDependencies), numDependencies, h))

    @api(0)
    def cudaGraphAddDependencies(self, graph: Any, from_: Any, to: Any, edgeData: Any,
                                 numDependencies: Any) -> None:
        check(self.driver.cuGraphAddDependencies(_graph(graph), _deps(from_), _deps(to),
                                                 edgeData, numDependencies))

    @api(1)
    def cudaGraphInstantiate(self, graph: Any, flags: Any) -> cudaGraphExec_t:
        return cudaGraphExec_t(int(check(self.driver.cuGraphInstantiate(_graph(graph), flags))))

    @api(1)
    def cudaGraphInstantiateWithFlags(self, graph: Any, flags: Any) -> cudaGraphExec_t:
        return cudaGraphExec_t(int(check(self.driver.cuGraphInstantiate(_graph(graph), flags))))

    @api(0)
    def cudaGraphLaunch(self, graphExec: Any, stream: Any) -> None:
        ex = _drv.CUgraphExec(_args.handle_value(graphExec, cudaGraphExec_t))
        check(self.driver.cuGraphLaunch(ex, _drv.CUstream(handle(stream))))

    @api(0)
    def cudaGraphExecDestroy(self, graphExec: Any) -> None:
        ex = _drv.CUgraphExec(_args.handle_value(graphExec, cudaGraphExec_t))
        check(self.driver.cuGraphExecDestroy(ex))
