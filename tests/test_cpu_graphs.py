"""CUDA graphs built explicitly on the CPU device (``cuGraph*``): nodes run
in a dependency order at each ``cuGraphLaunch``, kernel arguments are copied
when the node is added, memcpy/memset/host nodes do their work, bad graphs
and handles give the driver's errors, and :meth:`Driver.set_graph_calls`
routes every node through the calls a checker gives."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda.bindings import driver as real

from gpusafe.cpu.driver import Driver

R = real.CUresult
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

KERNELS = r"""
extern "C" __global__ void axpb(float *x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}
"""


@pytest.fixture(scope="module")
def ptx() -> str:
    from gpusafe_testkit.corpus import nvrtc_compile

    return nvrtc_compile(KERNELS, "graph_kernels.cu")


def ok(result):
    assert result[0] == R.CUDA_SUCCESS, result
    return result[1] if len(result) == 2 else result[1:]


@pytest.fixture
def dev(ptx):
    drv = Driver()
    ok(drv.cuInit(0))
    ctx = ok(drv.cuCtxCreate(None, 0, ok(drv.cuDeviceGet(0))))
    fn = ok(drv.cuModuleGetFunction(ok(drv.cuModuleLoadData(ptx.encode())), b"axpb"))
    yield drv, ctx, fn
    drv.reset()


def kernel_node(fn, x, a: float, b: float, n: int):
    """Parameters whose argument storage is overwritten after the add."""
    values = [np.array([int(x)], np.uint64), np.array([a], np.float32),
              np.array([b], np.float32), np.array([n], np.int32)]
    pointers = np.array([v.ctypes.data for v in values], np.uint64)
    p = real.CUDA_KERNEL_NODE_PARAMS()
    p.func = fn
    p.gridDimX, p.gridDimY, p.gridDimZ = 1, 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = 64, 1, 1
    p.kernelParams = pointers.ctypes.data
    return p, (values, pointers)


def memset_node(dst, value: int, width: int) -> real.CUDA_MEMSET_NODE_PARAMS:
    m = real.CUDA_MEMSET_NODE_PARAMS()
    m.dst, m.value, m.elementSize, m.width, m.height = dst, value, 4, width, 1
    return m


def dtoh(dst: np.ndarray, src, nbytes: int) -> real.CUDA_MEMCPY3D:
    c = real.CUDA_MEMCPY3D()
    c.srcMemoryType = real.CUmemorytype.CU_MEMORYTYPE_DEVICE
    c.srcDevice = src
    c.dstMemoryType = real.CUmemorytype.CU_MEMORYTYPE_HOST
    c.dstHost = dst.ctypes.data
    c.WidthInBytes, c.Height, c.Depth = nbytes, 1, 1
    return c


def test_nodes_run_in_dependency_order_at_each_launch(dev) -> None:
    drv, ctx, fn = dev
    n = 50
    x = ok(drv.cuMemAlloc(n * 4))
    out = np.zeros(n, np.float32)
    seen = []

    @HOST_FN
    def host(data):
        seen.append((data, out.copy()))

    g = ok(drv.cuGraphCreate(0))
    # added last-first: the order must come from the dependencies, not the additions
    hp = real.CUDA_HOST_NODE_PARAMS()
    hp.fn = real.CUhostFn(ctypes.cast(host, ctypes.c_void_p).value)
    hp.userData = 5
    copy = ok(drv.cuGraphAddMemcpyNode(g, None, 0, dtoh(out, x, n * 4), ctx))
    h = ok(drv.cuGraphAddHostNode(g, None, 0, hp))
    ok(drv.cuGraphAddDependencies(g, [copy], [h], None, 1))
    p, keep = kernel_node(fn, x, 3.0, 1.0, n)
    k = ok(drv.cuGraphAddKernelNode(g, None, 0, p))
    keep[0][1][0] = 100.0  # the node copied its arguments when added
    fill = ok(drv.cuGraphAddMemsetNode(
        g, None, 0, memset_node(x, int(np.float32(2.0).view(np.uint32)), n), ctx))
    ok(drv.cuGraphAddDependencies(g, [fill, k], [k, copy], None, 2))
    ex = ok(drv.cuGraphInstantiate(g, 0))
    stream = ok(drv.cuStreamCreate(0))
    for _ in range(2):
        assert drv.cuGraphLaunch(ex, stream) == (R.CUDA_SUCCESS,)
    assert [d for d, _ in seen] == [5, 5]
    assert all((o == 7.0).all() for _, o in seen)  # 3 * 2 + 1, after the copy
    assert drv.cuGraphExecDestroy(ex) == (R.CUDA_SUCCESS,)
    assert drv.cuGraphLaunch(ex, stream) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert drv.cuGraphDestroy(g) == (R.CUDA_SUCCESS,)


def test_bad_graphs_give_the_drivers_errors(dev) -> None:
    drv, ctx, fn = dev
    g = ok(drv.cuGraphCreate(0))
    a = ok(drv.cuGraphAddEmptyNode(g, None, 0))
    b = ok(drv.cuGraphAddEmptyNode(g, [a], 1))
    assert drv.cuGraphAddEmptyNode(g, [a, a], 2)[0] == R.CUDA_ERROR_INVALID_VALUE
    other = ok(drv.cuGraphCreate(0))
    assert drv.cuGraphAddEmptyNode(other, [a], 1)[0] == R.CUDA_ERROR_INVALID_VALUE
    ok(drv.cuGraphAddDependencies(g, [b], [a], None, 1))  # a cycle
    assert drv.cuGraphInstantiate(g, 0)[0] == R.CUDA_ERROR_INVALID_VALUE
    assert "cycle" in drv.last_error_detail()
    assert drv.cuGraphCreate(1)[0] == R.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(TypeError):
        drv.cuGraphAddKernelNode(g, None, 0, real.CUDA_MEMCPY3D())
    c = real.CUDA_MEMCPY3D()
    c.srcMemoryType = real.CUmemorytype.CU_MEMORYTYPE_ARRAY
    c.dstMemoryType = real.CUmemorytype.CU_MEMORYTYPE_DEVICE
    assert drv.cuGraphAddMemcpyNode(g, None, 0, c, ctx)[0] == R.CUDA_ERROR_NOT_SUPPORTED
    assert "CUDA arrays" in drv.last_error_detail()


def test_a_failing_node_stops_the_launch_with_its_error(dev) -> None:
    drv, ctx, fn = dev
    g = ok(drv.cuGraphCreate(0))
    p, keep = kernel_node(fn, 0x10, 1.0, 0.0, 64)  # a wild pointer
    ok(drv.cuGraphAddKernelNode(g, None, 0, p))
    ex = ok(drv.cuGraphInstantiate(g, 0))
    assert drv.cuGraphLaunch(ex, 0)[0] == R.CUDA_ERROR_ILLEGAL_ADDRESS


def test_nodes_run_through_the_calls_a_checker_gives(dev) -> None:
    drv, ctx, fn = dev
    n = 8
    x = ok(drv.cuMemAlloc(n * 4))
    calls = []

    def spy(name):
        def call(*args):
            calls.append(name)
            return getattr(drv, name)(*args)
        return call

    drv.set_graph_calls({"cuLaunchKernel": spy("cuLaunchKernel"),
                         "cuMemsetD32": spy("cuMemsetD32")})
    g = ok(drv.cuGraphCreate(0))
    m = ok(drv.cuGraphAddMemsetNode(g, None, 0, memset_node(x, 0, n), ctx))
    p, keep = kernel_node(fn, x, 1.0, 2.0, n)
    ok(drv.cuGraphAddKernelNode(g, [m], 1, p))
    ex = ok(drv.cuGraphInstantiate(g, 0))
    ok(drv.cuGraphLaunch(ex, 0))
    ok(drv.cuGraphLaunch(ex, 0))
    assert calls == ["cuMemsetD32", "cuLaunchKernel"] * 2
    out = np.zeros(n, np.float32)
    ok(drv.cuMemcpyDtoH(out, x, n * 4))
    assert (out == 2.0).all()


def test_the_runtime_graph_calls_run_on_the_drivers(dev, ptx) -> None:
    from cuda.bindings import runtime as rreal

    from gpusafe.cpu.runtime import Runtime

    drv, ctx, fn = dev
    rt = Runtime(drv)
    RE = rreal.cudaError_t
    n = 16
    d = ok(drv.cuMemAlloc(n * 4))
    src = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    g = rt.cudaGraphCreate(0)[1]
    up = rt.cudaGraphAddMemcpyNode1D(g, None, 0, int(d), src, n * 4,
                                     rreal.cudaMemcpyKind.cudaMemcpyHostToDevice)[1]
    kp = rreal.cudaKernelNodeParams()
    kp.func = int(fn)
    kp.gridDim.x, kp.blockDim.x = 1, 64
    p, keep = kernel_node(fn, d, 2.0, 0.5, n)
    kp.kernelParams = p.kernelParams
    k = rt.cudaGraphAddKernelNode(g, [up], 1, kp)[1]
    down = rt.cudaGraphAddMemcpyNode1D(g, [k], 1, out, int(d), n * 4,
                                       rreal.cudaMemcpyKind.cudaMemcpyDeviceToHost)
    assert down[0] == RE.cudaSuccess
    assert rt.cudaGraphAddDependencies(g, [up], [k], [rreal.cudaGraphEdgeData()], 1)[0] == \
        RE.cudaErrorNotSupported
    ex = rt.cudaGraphInstantiate(g, 0)[1]
    assert rt.cudaGraphLaunch(ex, 0) == (RE.cudaSuccess,)
    assert (out == src * 2.0 + 0.5).all()
    assert rt.cudaGraphExecDestroy(ex) == (RE.cudaSuccess,)
    assert rt.cudaGraphLaunch(ex, 0)[0] == RE.cudaErrorInvalidValue
