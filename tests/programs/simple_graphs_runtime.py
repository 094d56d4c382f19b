"""A CUDA graph built explicitly with the runtime API, after cuda-python's
simpleCudaGraphs example: 1D memcpy nodes, a memset node, a kernel node
(the kernel from NVRTC and cuModuleGetFunction, named in
cudaKernelNodeParams.func) and a host node; instantiated once, launched
several times on a stream, the result checked after each launch."""

import ctypes
import sys

import numpy as np
from cuda.bindings import runtime
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

kernels = """\
extern "C" __global__ void squareAdd(const float *x, float *y, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) {
        y[i] = y[i] + x[i] * x[i];
    }
}
"""

HOST_CALLS = []


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def on_host(data):
    HOST_CALLS.append(data)


def main():
    dev = findCudaDevice()
    square_add = KernelHelper(kernels, dev, "simpleCudaGraphsRuntime.cu").get("squareAdd")
    n = 777
    nbytes = n * 4
    h_x = np.linspace(0, 1, n, dtype=np.float32)
    h_y = np.zeros(n, dtype=np.float32)
    d_x = checkCudaErrors(runtime.cudaMalloc(nbytes))
    d_y = checkCudaErrors(runtime.cudaMalloc(nbytes))
    stream = checkCudaErrors(runtime.cudaStreamCreate())
    K = runtime.cudaMemcpyKind

    graph = checkCudaErrors(runtime.cudaGraphCreate(0))
    copy_in = checkCudaErrors(runtime.cudaGraphAddMemcpyNode1D(
        graph, None, 0, d_x, h_x, nbytes, K.cudaMemcpyHostToDevice))
    memset = runtime.cudaMemsetParams()
    memset.dst, memset.value, memset.elementSize = d_y, 0, 4
    memset.width, memset.height, memset.pitch = n, 1, 0
    clear = checkCudaErrors(runtime.cudaGraphAddMemsetNode(graph, None, 0, memset))

    args = [np.array([int(d_x)], dtype=np.uint64), np.array([int(d_y)], dtype=np.uint64),
            np.array([n], dtype=np.int32)]
    arg_pointers = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    params = runtime.cudaKernelNodeParams()
    params.func = int(square_add)
    params.gridDim.x, params.gridDim.y, params.gridDim.z = (n + 127) // 128, 1, 1
    params.blockDim.x, params.blockDim.y, params.blockDim.z = 128, 1, 1
    params.sharedMemBytes = 0
    params.kernelParams = arg_pointers.ctypes.data
    params.extra = 0
    kernel = checkCudaErrors(runtime.cudaGraphAddKernelNode(
        graph, [copy_in, clear], 2, params))
    copy_out = checkCudaErrors(runtime.cudaGraphAddMemcpyNode1D(
        graph, [kernel], 1, h_y, d_y, nbytes, K.cudaMemcpyDeviceToHost))
    host = runtime.cudaHostNodeParams()
    host.fn = runtime.cudaHostFn_t(ctypes.cast(on_host, ctypes.c_void_p).value)
    host.userData = 3
    checkCudaErrors(runtime.cudaGraphAddHostNode(graph, [copy_out], 1, host))
    exec_graph = checkCudaErrors(runtime.cudaGraphInstantiate(graph, 0))

    ok = True
    for _ in range(3):
        h_y[:] = -1
        checkCudaErrors(runtime.cudaGraphLaunch(exec_graph, stream))
        checkCudaErrors(runtime.cudaStreamSynchronize(stream))
        ok = ok and np.allclose(h_y, h_x * h_x)
    ok = ok and HOST_CALLS == [3, 3, 3]

    checkCudaErrors(runtime.cudaGraphExecDestroy(exec_graph))
    checkCudaErrors(runtime.cudaGraphDestroy(graph))
    checkCudaErrors(runtime.cudaStreamDestroy(stream))
    checkCudaErrors(runtime.cudaFree(d_x))
    checkCudaErrors(runtime.cudaFree(d_y))
    print("simpleCudaGraphs (runtime):", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
