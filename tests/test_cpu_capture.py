"""Stream capture on the CPU device (``cuStreamBeginCapture`` ...): work on a
capturing stream becomes graph nodes instead of running, events fork and join
streams into the capture, the illegal operations give the driver's
``CUDA_ERROR_STREAM_CAPTURE_*`` results and invalidate the capture; and the
graph calls around it (cloning, child and event nodes, queries, updates of an
executable graph) behave as the driver documents."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda.bindings import driver as real
from test_cpu_graphs import HOST_FN, kernel_node, ok, ptx  # noqa: F401 - ptx is a fixture

from gpusafe.cpu.driver import Driver

R = real.CUresult
MODE = real.CUstreamCaptureMode
STATUS = real.CUstreamCaptureStatus
T = real.CUgraphNodeType
N = 32


@pytest.fixture
def dev(ptx):  # noqa: F811 - the fixture above
    drv = Driver()
    ok(drv.cuInit(0))
    ctx = ok(drv.cuCtxCreate(None, 0, ok(drv.cuDeviceGet(0))))
    fn = ok(drv.cuModuleGetFunction(ok(drv.cuModuleLoadData(ptx.encode())), b"axpb"))
    yield drv, ctx, fn
    drv.reset()


def launch(drv, fn, x, a: float, b: float, stream) -> tuple:
    """``axpb<<<1, 64, 0, stream>>>(x, a, b, N)`` in the tuple form of kernelParams."""
    args = ((int(x), a, b, N), (ctypes.c_void_p, ctypes.c_float, ctypes.c_float, ctypes.c_int))
    return drv.cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, stream, args, 0)


def read(drv, x, stream=0) -> np.ndarray:
    out = np.zeros(N, np.float32)
    ok(drv.cuMemcpyDtoHAsync(out, x, N * 4, stream))
    return out


def test_fork_and_join_capture_builds_a_graph_that_runs_at_each_launch(dev) -> None:
    drv, ctx, fn = dev
    x, y = ok(drv.cuMemAlloc(N * 4)), ok(drv.cuMemAlloc(N * 4))
    host = np.arange(N, dtype=np.float32)
    out = np.zeros(N, np.float32)
    s1, s2 = ok(drv.cuStreamCreate(0)), ok(drv.cuStreamCreate(0))
    fork, joined = ok(drv.cuEventCreate(0)), ok(drv.cuEventCreate(0))
    side = ok(drv.cuStreamCreate(1))  # non-blocking: usable while s1 captures
    ok(drv.cuMemsetD32(x, 0, N))
    seen = []

    @HOST_FN
    def on_host(data):
        seen.append(data)

    ok(drv.cuStreamBeginCapture(s1, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert ok(drv.cuStreamIsCapturing(s1)) == STATUS.CU_STREAM_CAPTURE_STATUS_ACTIVE
    assert ok(drv.cuStreamIsCapturing(s2)) == STATUS.CU_STREAM_CAPTURE_STATUS_NONE
    ok(drv.cuEventRecord(fork, s1))
    ok(drv.cuStreamWaitEvent(s2, fork, 0))  # s2 joins the capture
    assert ok(drv.cuStreamIsCapturing(s2)) == STATUS.CU_STREAM_CAPTURE_STATUS_ACTIVE
    ok(drv.cuMemcpyHtoDAsync(x, host, N * 4, s1))
    ok(drv.cuMemsetD32Async(y, 0, N, s2))
    ok(drv.cuEventRecord(joined, s2))
    assert launch(drv, fn, x, 2.0, 1.0, s1) == (R.CUDA_SUCCESS,)
    ok(drv.cuStreamWaitEvent(s1, joined, 0))
    ok(drv.cuMemcpyDtoDAsync(y, x, N * 4, s1))
    ok(drv.cuMemcpyDtoHAsync(out, y, N * 4, s1))
    ok(drv.cuLaunchHostFunc(s1, real.CUhostFn(ctypes.cast(on_host, ctypes.c_void_p).value), 9))
    status, ident, graph_now, deps, edges, ndeps = ok(drv.cuStreamGetCaptureInfo(s1))
    assert status == STATUS.CU_STREAM_CAPTURE_STATUS_ACTIVE and int(ident) > 0 and ndeps == 1
    assert len(deps) == len(edges) == 1
    assert (read(drv, x, side) == 0).all() and seen == []  # nothing ran during the capture
    graph = ok(drv.cuStreamEndCapture(s1))
    assert int(graph) == int(graph_now)
    assert ok(drv.cuStreamIsCapturing(s2)) == STATUS.CU_STREAM_CAPTURE_STATUS_NONE

    nodes, count = ok(drv.cuGraphGetNodes(graph))
    assert nodes == [] and count == 6
    nodes, count = ok(drv.cuGraphGetNodes(graph, 8))
    assert count == 6 and len(nodes) == 8 and int(nodes[7]) == 0
    assert [ok(drv.cuGraphNodeGetType(n)) for n in nodes[:6]] == [
        T.CU_GRAPH_NODE_TYPE_MEMCPY, T.CU_GRAPH_NODE_TYPE_MEMSET, T.CU_GRAPH_NODE_TYPE_KERNEL,
        T.CU_GRAPH_NODE_TYPE_MEMCPY, T.CU_GRAPH_NODE_TYPE_MEMCPY, T.CU_GRAPH_NODE_TYPE_HOST]
    roots, count = ok(drv.cuGraphGetRootNodes(graph, 2))
    assert count == 2 and {int(r) for r in roots} == {int(nodes[0]), int(nodes[1])}
    ex = ok(drv.cuGraphInstantiate(graph, 0))
    for i in range(3):
        out[:] = -1
        ok(drv.cuGraphLaunch(ex, s1))
        assert (out == host * 2 + 1).all(), i
    assert seen == [9, 9, 9]


def test_synchronising_a_capturing_stream_invalidates_the_capture(dev) -> None:
    drv, ctx, fn = dev
    x = ok(drv.cuMemAlloc(N * 4))
    s = ok(drv.cuStreamCreate(0))
    ok(drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL) == \
        (R.CUDA_ERROR_ILLEGAL_STATE,)
    assert drv.cuStreamSynchronize(s) == (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
    assert ok(drv.cuStreamIsCapturing(s)) == STATUS.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    assert launch(drv, fn, x, 1.0, 1.0, s) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,)
    assert drv.cuStreamEndCapture(s) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    assert launch(drv, fn, x, 1.0, 1.0, s) == (R.CUDA_SUCCESS,)  # the stream is free again
    assert (read(drv, x) == 1.0).all()
    assert drv.cuStreamEndCapture(s) == (R.CUDA_ERROR_ILLEGAL_STATE, None)


def test_the_legacy_stream_is_an_implicit_dependency_on_a_blocking_capture(dev) -> None:
    drv, ctx, fn = dev
    x = ok(drv.cuMemAlloc(N * 4))
    blocking, free = ok(drv.cuStreamCreate(0)), ok(drv.cuStreamCreate(1))
    ok(drv.cuStreamBeginCapture(free, MODE.CU_STREAM_CAPTURE_MODE_RELAXED))
    assert launch(drv, fn, x, 1.0, 1.0, 0) == (R.CUDA_SUCCESS,)  # a non-blocking capture
    ok(drv.cuStreamEndCapture(free))
    ok(drv.cuStreamBeginCapture(blocking, MODE.CU_STREAM_CAPTURE_MODE_RELAXED))
    assert drv.cuStreamIsCapturing(0) == (R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, None)
    assert ok(drv.cuStreamIsCapturing(blocking)) == STATUS.CU_STREAM_CAPTURE_STATUS_ACTIVE
    assert drv.cuMemsetD32(x, 0, N) == (R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,)
    assert ok(drv.cuStreamIsCapturing(blocking)) == STATUS.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    assert drv.cuStreamEndCapture(blocking)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert drv.cuStreamBeginCapture(0, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL) == \
        (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)


def test_unsafe_calls_follow_the_capture_mode(dev) -> None:
    drv, ctx, fn = dev
    s = ok(drv.cuStreamCreate(1))
    ok(drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert drv.cuMemAlloc(64) == (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, None)
    assert drv.cuStreamEndCapture(s)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    ok(drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_RELAXED))
    old = ok(drv.cuThreadExchangeStreamCaptureMode(MODE.CU_STREAM_CAPTURE_MODE_RELAXED))
    assert old == MODE.CU_STREAM_CAPTURE_MODE_GLOBAL
    ok(drv.cuMemFree(ok(drv.cuMemAlloc(64))))  # a relaxed thread may
    assert ok(drv.cuThreadExchangeStreamCaptureMode(old)) == MODE.CU_STREAM_CAPTURE_MODE_RELAXED
    ok(drv.cuStreamEndCapture(s))


def test_forks_must_join_and_captures_stay_apart(dev) -> None:
    drv, ctx, fn = dev
    x = ok(drv.cuMemAlloc(N * 4))
    s1, s2, s3 = (ok(drv.cuStreamCreate(1)) for _ in range(3))
    fork, outside = ok(drv.cuEventCreate(0)), ok(drv.cuEventCreate(0))
    ok(drv.cuEventRecord(outside, s3))
    ok(drv.cuStreamBeginCapture(s1, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    ok(drv.cuEventRecord(fork, s1))
    ok(drv.cuStreamWaitEvent(s2, fork, 0))
    ok(drv.cuMemsetD32Async(x, 0, N, s2))  # never joined back into s1
    assert drv.cuEventQuery(fork) == (R.CUDA_ERROR_CAPTURED_EVENT,)
    assert drv.cuStreamEndCapture(s2) == (R.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, None)
    assert drv.cuStreamEndCapture(s1)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED

    ok(drv.cuStreamBeginCapture(s1, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    ok(drv.cuEventRecord(fork, s1))
    ok(drv.cuStreamWaitEvent(s2, fork, 0))
    ok(drv.cuMemsetD32Async(x, 0, N, s2))
    assert drv.cuStreamEndCapture(s1) == (R.CUDA_ERROR_STREAM_CAPTURE_UNJOINED, None)
    assert ok(drv.cuStreamIsCapturing(s2)) == STATUS.CU_STREAM_CAPTURE_STATUS_NONE

    ok(drv.cuStreamBeginCapture(s1, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert drv.cuStreamWaitEvent(s1, outside, 0) == (R.CUDA_ERROR_STREAM_CAPTURE_ISOLATION,)
    assert drv.cuStreamEndCapture(s1)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED

    ok(drv.cuStreamBeginCapture(s1, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    ok(drv.cuStreamBeginCapture(s2, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    ok(drv.cuEventRecord(fork, s1))
    assert drv.cuStreamWaitEvent(s2, fork, 0) == (R.CUDA_ERROR_STREAM_CAPTURE_MERGE,)
    assert drv.cuStreamEndCapture(s2)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert drv.cuStreamEndCapture(s1)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED


def test_work_capture_cannot_record_is_refused_not_run(dev) -> None:
    drv, ctx, fn = dev
    s = ok(drv.cuStreamCreate(1))
    ok(drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert drv.cuMemAllocAsync(64, s) == (R.CUDA_ERROR_NOT_SUPPORTED, None)
    assert "stream capture" in drv.last_error_detail()
    assert drv.cuStreamEndCapture(s)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert drv.cuStreamBeginCapture(real.CU_STREAM_PER_THREAD,
                                    MODE.CU_STREAM_CAPTURE_MODE_GLOBAL)[0] == \
        R.CUDA_ERROR_NOT_SUPPORTED


def test_captured_launches_run_through_the_graph_calls(dev) -> None:
    drv, ctx, fn = dev
    x = ok(drv.cuMemAlloc(N * 4))
    calls = []

    def spy(*args):
        calls.append(args[8])
        return drv.cuLaunchKernel(*args)

    drv.set_graph_calls({"cuLaunchKernel": spy})
    s, other = ok(drv.cuStreamCreate(0)), ok(drv.cuStreamCreate(0))
    ok(drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    ok(launch(drv, fn, x, 0.0, 3.0, s))
    ex = ok(drv.cuGraphInstantiate(ok(drv.cuStreamEndCapture(s)), 0))
    assert calls == []
    ok(drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    ok(drv.cuGraphLaunch(ex, s))  # a graph launched into a capture: a child-graph node
    outer = ok(drv.cuStreamEndCapture(s))
    nodes, _ = ok(drv.cuGraphGetNodes(outer, 1))
    assert ok(drv.cuGraphNodeGetType(nodes[0])) == T.CU_GRAPH_NODE_TYPE_GRAPH
    assert calls == []
    ok(drv.cuGraphLaunch(ok(drv.cuGraphInstantiate(outer, 0)), other))
    assert [int(c) for c in calls] == [int(other)]
    assert (read(drv, x) == 3.0).all()


def test_clones_children_events_and_updates(dev) -> None:
    drv, ctx, fn = dev
    x = ok(drv.cuMemAlloc(N * 4))
    ok(drv.cuMemsetD32(x, 0, N))
    g = ok(drv.cuGraphCreate(0))
    p, keep = kernel_node(fn, x, 1.0, 1.0, N)
    k = ok(drv.cuGraphAddKernelNode(g, None, 0, p))
    ev = ok(drv.cuEventCreate(0))
    rec = ok(drv.cuGraphAddEventRecordNode(g, [k], 1, ev))
    assert ok(drv.cuGraphNodeGetType(rec)) == T.CU_GRAPH_NODE_TYPE_EVENT_RECORD
    wait = ok(drv.cuGraphAddEventWaitNode(g, [rec], 1, ev))
    assert ok(drv.cuGraphNodeGetType(wait)) == T.CU_GRAPH_NODE_TYPE_WAIT_EVENT
    clone = ok(drv.cuGraphClone(g))
    parent = ok(drv.cuGraphCreate(0))
    child = ok(drv.cuGraphAddChildGraphNode(parent, None, 0, clone))
    assert int(ok(drv.cuGraphChildGraphNodeGetGraph(child))) not in (0, int(clone))
    ex = ok(drv.cuGraphInstantiate(g, 0))
    ok(drv.cuGraphLaunch(ex, 0))  # x = 1*x + 1
    assert (read(drv, x) == 1.0).all()
    ok(drv.cuGraphLaunch(ok(drv.cuGraphInstantiate(parent, 0)), 0))
    assert (read(drv, x) == 2.0).all()
    assert ok(drv.cuEventElapsedTime(ev, ev)) == 0.0  # the record node stamped it

    p2, keep2 = kernel_node(fn, x, 2.0, 0.0, N)
    ok(drv.cuGraphExecKernelNodeSetParams(ex, k, p2))
    ok(drv.cuGraphLaunch(ex, 0))
    assert (read(drv, x) == 4.0).all()

    p3, keep3 = kernel_node(fn, x, 1.0, 10.0, N)
    same = ok(drv.cuGraphCreate(0))
    k3 = ok(drv.cuGraphAddKernelNode(same, None, 0, p3))
    r3 = ok(drv.cuGraphAddEventRecordNode(same, [k3], 1, ev))
    ok(drv.cuGraphAddEventWaitNode(same, [r3], 1, ev))
    info = ok(drv.cuGraphExecUpdate(ex, same))
    assert info.result == real.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_SUCCESS
    ok(drv.cuGraphLaunch(ex, 0))
    assert (read(drv, x) == 14.0).all()
    assert drv.cuGraphExecUpdate(ex, parent) == (R.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, None)
    assert "TOPOLOGY_CHANGED" in drv.last_error_detail()
    ok(drv.cuGraphUpload(ex, 0))
    assert drv.cuGraphExecMemsetNodeSetParams(ex, rec, real.CUDA_MEMSET_NODE_PARAMS(), ctx)[0] \
        == R.CUDA_ERROR_INVALID_VALUE


def test_the_runtime_captures_on_the_drivers_streams(dev) -> None:
    from cuda.bindings import runtime as rreal

    from gpusafe.cpu.runtime import Runtime

    drv, ctx, fn = dev
    rt = Runtime(drv)
    RE, K = rreal.cudaError_t, rreal.cudaMemcpyKind
    RMODE, RSTATUS = rreal.cudaStreamCaptureMode, rreal.cudaStreamCaptureStatus
    src = np.arange(N, dtype=np.float32)
    out = np.zeros(N, np.float32)
    d = ok(rt.cudaMalloc(N * 4))
    s1, s2 = ok(rt.cudaStreamCreate()), ok(rt.cudaStreamCreate())
    fork, join = ok(rt.cudaEventCreate()), ok(rt.cudaEventCreate())
    ok(rt.cudaStreamBeginCapture(s1, RMODE.cudaStreamCaptureModeGlobal))
    ok(rt.cudaEventRecord(fork, s1))
    ok(rt.cudaStreamWaitEvent(s2, fork, 0))
    ok(rt.cudaMemsetAsync(d, 0, N * 4, s2))
    ok(rt.cudaEventRecord(join, s2))
    ok(rt.cudaStreamWaitEvent(s1, join, 0))
    ok(rt.cudaMemcpyAsync(d, src, N * 4, K.cudaMemcpyHostToDevice, s1))
    ok(launch(drv, fn, d, 2.0, 0.0, s1))
    ok(rt.cudaMemcpyAsync(out, d, N * 4, K.cudaMemcpyDefault, s1))
    assert ok(rt.cudaStreamIsCapturing(s2)) == RSTATUS.cudaStreamCaptureStatusActive
    status, ident, graph_now, deps, edges, n = ok(rt.cudaStreamGetCaptureInfo(s1))
    assert status == RSTATUS.cudaStreamCaptureStatusActive and isinstance(ident, int)
    assert isinstance(graph_now, rreal.cudaGraph_t) and n == 1
    assert isinstance(deps[0], rreal.cudaGraphNode_t)
    assert rt.cudaStreamSynchronize(s2) == (RE.cudaErrorStreamCaptureUnsupported,)
    assert rt.cudaStreamEndCapture(s1) == (RE.cudaErrorStreamCaptureInvalidated, None)

    ok(rt.cudaStreamBeginCapture(s1, RMODE.cudaStreamCaptureModeGlobal))
    ok(rt.cudaMemcpyAsync(d, src, N * 4, K.cudaMemcpyHostToDevice, s1))
    ok(launch(drv, fn, d, 2.0, 0.0, s1))
    ok(rt.cudaMemcpyAsync(out, d, N * 4, K.cudaMemcpyDeviceToHost, s1))
    assert rt.cudaMemcpy(out, d, N * 4, K.cudaMemcpyDeviceToHost) == \
        (RE.cudaErrorStreamCaptureImplicit,)
    assert rt.cudaStreamEndCapture(s1)[0] == RE.cudaErrorStreamCaptureInvalidated
    ok(rt.cudaStreamBeginCapture(s1, RMODE.cudaStreamCaptureModeGlobal))
    ok(rt.cudaMemcpyAsync(d, src, N * 4, K.cudaMemcpyHostToDevice, s1))
    ok(launch(drv, fn, d, 2.0, 0.0, s1))
    ok(rt.cudaMemcpyAsync(out, d, N * 4, K.cudaMemcpyDeviceToHost, s1))
    graph = ok(rt.cudaStreamEndCapture(s1))
    nodes, count = ok(rt.cudaGraphGetNodes(graph, 3))
    assert count == 3 and [ok(rt.cudaGraphNodeGetType(x)) for x in nodes] == [
        rreal.cudaGraphNodeType.cudaGraphNodeTypeMemcpy,
        rreal.cudaGraphNodeType.cudaGraphNodeTypeKernel,
        rreal.cudaGraphNodeType.cudaGraphNodeTypeMemcpy]
    ex = ok(rt.cudaGraphInstantiateWithFlags(ok(rt.cudaGraphClone(graph)), 0))
    ok(rt.cudaGraphUpload(ex, s1))
    ok(rt.cudaGraphLaunch(ex, s1))
    assert (out == src * 2).all()
    info = ok(rt.cudaGraphExecUpdate(ex, graph))
    assert info.result == rreal.cudaGraphExecUpdateResult.cudaGraphExecUpdateSuccess
    old = ok(rt.cudaThreadExchangeStreamCaptureMode(RMODE.cudaStreamCaptureModeRelaxed))
    assert old == RMODE.cudaStreamCaptureModeGlobal


def test_a_runtime_3d_memcpy_node_copies_linear_memory(dev) -> None:
    from cuda.bindings import runtime as rreal

    from gpusafe.cpu.runtime import Runtime

    drv, ctx, fn = dev
    rt = Runtime(drv)
    src = np.arange(N, dtype=np.float32)
    d = ok(rt.cudaMalloc(N * 4))
    p = rreal.cudaMemcpy3DParms()
    p.srcPtr = rreal.make_cudaPitchedPtr(src.ctypes.data, N * 4, N, 1)
    p.dstPtr = rreal.make_cudaPitchedPtr(d, N * 4, N, 1)
    p.extent = rreal.make_cudaExtent(N * 4, 1, 1)
    p.kind = rreal.cudaMemcpyKind.cudaMemcpyHostToDevice
    g = ok(rt.cudaGraphCreate(0))
    ok(rt.cudaGraphAddMemcpyNode(g, None, 0, p))
    ok(rt.cudaGraphLaunch(ok(rt.cudaGraphInstantiate(g, 0)), 0))
    assert (read(drv, d) == src).all()


def test_a_runtime_host_to_host_copy_is_captured_too(dev) -> None:
    from cuda.bindings import runtime as rreal

    from gpusafe.cpu.runtime import Runtime

    drv, ctx, fn = dev
    rt = Runtime(drv)
    a, b = np.arange(N, dtype=np.float32), np.zeros(N, np.float32)
    s = ok(rt.cudaStreamCreate())
    ok(rt.cudaStreamBeginCapture(s, rreal.cudaStreamCaptureMode.cudaStreamCaptureModeGlobal))
    ok(rt.cudaMemcpyAsync(b, a, N * 4, rreal.cudaMemcpyKind.cudaMemcpyHostToHost, s))
    assert (b == 0).all()
    ok(rt.cudaGraphLaunch(ok(rt.cudaGraphInstantiate(ok(rt.cudaStreamEndCapture(s)), 0)), s))
    assert (b == a).all()


def test_a_destroyed_capturing_stream_leaves_its_capture(dev) -> None:
    drv, ctx, fn = dev
    s = ok(drv.cuStreamCreate(0))
    ok(drv.cuStreamBeginCapture(s, MODE.CU_STREAM_CAPTURE_MODE_GLOBAL))
    ok(drv.cuStreamDestroy(s))
    ok(drv.cuMemFree(ok(drv.cuMemAlloc(64))))  # no capture left to prohibit it


def test_an_executable_graphs_copy_and_set_nodes_take_new_parameters(dev) -> None:
    from test_cpu_graphs import dtoh, memset_node

    drv, ctx, fn = dev
    x = ok(drv.cuMemAlloc(N * 4))
    out, other = np.zeros(N, np.float32), np.zeros(N, np.float32)
    g = ok(drv.cuGraphCreate(0))
    fill = ok(drv.cuGraphAddMemsetNode(g, None, 0, memset_node(x, 1, N), ctx))
    copy = ok(drv.cuGraphAddMemcpyNode(g, [fill], 1, dtoh(out, x, N * 4), ctx))
    ex = ok(drv.cuGraphInstantiate(g, 0))
    ok(drv.cuGraphExecMemsetNodeSetParams(ex, fill, memset_node(x, 7, N), ctx))
    ok(drv.cuGraphExecMemcpyNodeSetParams(ex, copy, dtoh(other, x, N * 4), ctx))
    ok(drv.cuGraphLaunch(ex, 0))
    assert (out == 0).all() and (other.view(np.uint32) == 7).all()
    assert drv.cuGraphExecMemsetNodeSetParams(ex, copy, memset_node(x, 7, N), ctx)[0] == \
        R.CUDA_ERROR_INVALID_VALUE  # a memcpy node is not a memset node
