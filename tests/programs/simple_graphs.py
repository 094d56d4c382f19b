"""A CUDA graph built explicitly with the driver API, after cuda-python's
simpleCudaGraphs example: a host-to-device memcpy node, a memset node, two
kernel nodes (scale, then add) depending on them, a device-to-host memcpy
node and a host node; the graph is instantiated once and launched several
times on a stream, and the result checked after each launch."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

kernels = """\
extern "C" __global__ void scale(const float *in, float *out, float factor, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i] * factor;
    }
}

extern "C" __global__ void addInPlace(float *acc, const float *x, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) {
        acc[i] = acc[i] + x[i];
    }
}
"""

HOST_CALLS = []


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def on_host(data):
    HOST_CALLS.append(data)


def memcpy_params(dst, dst_type, src, src_type, nbytes):
    p = driver.CUDA_MEMCPY3D()
    p.srcMemoryType = src_type
    p.dstMemoryType = dst_type
    if src_type == driver.CUmemorytype.CU_MEMORYTYPE_HOST:
        p.srcHost = src
    else:
        p.srcDevice = src
    if dst_type == driver.CUmemorytype.CU_MEMORYTYPE_HOST:
        p.dstHost = dst
    else:
        p.dstDevice = dst
    p.WidthInBytes = nbytes
    p.Height = 1
    p.Depth = 1
    return p


def kernel_params(func, n, args, types):
    p = driver.CUDA_KERNEL_NODE_PARAMS()
    p.func = func
    block = 128
    p.gridDimX, p.gridDimY, p.gridDimZ = (n + block - 1) // block, 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = block, 1, 1
    p.sharedMemBytes = 0
    values = [np.array([int(a)], dtype=np.uint64) if t is None else np.array([a], dtype=t)
              for a, t in zip(args, types, strict=True)]
    pointers = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    p.kernelParams = pointers.ctypes.data
    p.extra = 0
    return p, (values, pointers)  # kept alive until the node is added


def main():
    dev = findCudaDevice()
    helper = KernelHelper(kernels, dev, "simpleCudaGraphs.cu")
    scale, add = helper.get("scale"), helper.get("addInPlace")
    n = 1000
    nbytes = n * 4
    h_in = np.arange(n, dtype=np.float32)
    h_out = np.zeros(n, dtype=np.float32)
    d_in = checkCudaErrors(driver.cuMemAlloc(nbytes))
    d_tmp = checkCudaErrors(driver.cuMemAlloc(nbytes))
    d_acc = checkCudaErrors(driver.cuMemAlloc(nbytes))
    stream = checkCudaErrors(driver.cuStreamCreate(0))
    HOST, DEVICE = driver.CUmemorytype.CU_MEMORYTYPE_HOST, driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    ctx = checkCudaErrors(driver.cuCtxGetCurrent())

    graph = checkCudaErrors(driver.cuGraphCreate(0))
    copy_in = checkCudaErrors(driver.cuGraphAddMemcpyNode(
        graph, None, 0, memcpy_params(int(d_in), DEVICE, h_in.ctypes.data, HOST, nbytes), ctx))
    memset = driver.CUDA_MEMSET_NODE_PARAMS()
    memset.dst, memset.value, memset.elementSize = d_acc, 0, 4
    memset.width, memset.height, memset.pitch = n, 1, 0
    clear = checkCudaErrors(driver.cuGraphAddMemsetNode(graph, None, 0, memset, ctx))
    p, keep1 = kernel_params(scale, n, (d_in, d_tmp, 2.0, n),
                             (None, None, np.float32, np.int32))
    scaled = checkCudaErrors(driver.cuGraphAddKernelNode(graph, [copy_in], 1, p))
    p, keep2 = kernel_params(add, n, (d_acc, d_tmp, n), (None, None, np.int32))
    added = checkCudaErrors(driver.cuGraphAddKernelNode(graph, [scaled, clear], 2, p))
    copy_out = checkCudaErrors(driver.cuGraphAddMemcpyNode(
        graph, [added], 1, memcpy_params(h_out.ctypes.data, HOST, int(d_acc), DEVICE, nbytes),
        ctx))
    host = driver.CUDA_HOST_NODE_PARAMS()
    host.fn = driver.CUhostFn(ctypes.cast(on_host, ctypes.c_void_p).value)
    host.userData = 7
    checkCudaErrors(driver.cuGraphAddHostNode(graph, [copy_out], 1, host))
    exec_graph = checkCudaErrors(driver.cuGraphInstantiate(graph, 0))

    ok = True
    for _ in range(3):
        h_out[:] = -1
        checkCudaErrors(driver.cuGraphLaunch(exec_graph, stream))
        checkCudaErrors(driver.cuStreamSynchronize(stream))
        ok = ok and np.allclose(h_out, h_in * 2.0)
    ok = ok and HOST_CALLS == [7, 7, 7]

    checkCudaErrors(driver.cuGraphExecDestroy(exec_graph))
    checkCudaErrors(driver.cuGraphDestroy(graph))
    checkCudaErrors(driver.cuStreamDestroy(stream))
    for d in (d_in, d_tmp, d_acc):
        checkCudaErrors(driver.cuMemFree(d))
    print("simpleCudaGraphs:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
