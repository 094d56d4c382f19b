"""An executable CUDA graph updated in place and launched again, the way an
iterative solver reuses one graph for many steps: a graph captured from a
stream (a memset and a saxpy kernel) is instantiated once; each step changes
the kernel node's arguments (cuGraphExecKernelNodeSetParams) and relaunches
it; then the stream is captured again with new arguments and the whole
executable graph is updated from that capture (cudaGraphExecUpdate)."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver, runtime
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

kernels = """\
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"""

BLOCK = 128


def saxpy_args(a, x, y, n):
    return ((a, x, y, n), (ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))


def capture(stream, saxpy, a, x, y, n):
    """y = 0; y = a * x + y, captured from ``stream`` into a new graph."""
    checkCudaErrors(runtime.cudaStreamBeginCapture(
        stream, runtime.cudaStreamCaptureMode.cudaStreamCaptureModeGlobal))
    checkCudaErrors(runtime.cudaMemsetAsync(y, 0, n * 4, stream))
    checkCudaErrors(driver.cuLaunchKernel(saxpy, (n + BLOCK - 1) // BLOCK, 1, 1, BLOCK, 1, 1, 0,
                                          stream, saxpy_args(a, x, y, n), 0))
    return checkCudaErrors(runtime.cudaStreamEndCapture(stream))


def main():
    dev = findCudaDevice()
    saxpy = KernelHelper(kernels, dev, "graphUpdate.cu").get("saxpy")
    n = 1000
    h_x = np.linspace(1, 2, n, dtype=np.float32)
    h_y = np.zeros(n, dtype=np.float32)
    d_x = checkCudaErrors(runtime.cudaMalloc(n * 4))
    d_y = checkCudaErrors(runtime.cudaMalloc(n * 4))
    checkCudaErrors(runtime.cudaMemcpy(d_x, h_x, n * 4, runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))
    stream = checkCudaErrors(runtime.cudaStreamCreate())

    graph = capture(stream, saxpy, 1.0, d_x, d_y, n)
    nodes, count = checkCudaErrors(runtime.cudaGraphGetNodes(graph, 2))
    types = [checkCudaErrors(runtime.cudaGraphNodeGetType(node)) for node in nodes]
    kernel_node = nodes[types.index(runtime.cudaGraphNodeType.cudaGraphNodeTypeKernel)]
    graph_exec = checkCudaErrors(runtime.cudaGraphInstantiate(graph, 0))

    ok = count == 2
    for step, a in enumerate((2.0, 3.0, 4.0)):
        params = driver.CUDA_KERNEL_NODE_PARAMS()
        params.func = saxpy
        params.gridDimX, params.gridDimY, params.gridDimZ = (n + BLOCK - 1) // BLOCK, 1, 1
        params.blockDimX, params.blockDimY, params.blockDimZ = BLOCK, 1, 1
        params.sharedMemBytes = 0
        params.kernelParams = saxpy_args(a, d_x, d_y, n)
        checkCudaErrors(driver.cuGraphExecKernelNodeSetParams(graph_exec, kernel_node, params))
        checkCudaErrors(runtime.cudaGraphLaunch(graph_exec, stream))
        checkCudaErrors(runtime.cudaMemcpyAsync(h_y, d_y, n * 4,
                                                runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                                stream))
        checkCudaErrors(runtime.cudaStreamSynchronize(stream))
        ok = ok and np.allclose(h_y, a * h_x)
        print(f"step {step}: a = {a}", "ok" if np.allclose(h_y, a * h_x) else "WRONG")

    new_graph = capture(stream, saxpy, 5.0, d_x, d_y, n)
    info = checkCudaErrors(runtime.cudaGraphExecUpdate(graph_exec, new_graph))
    ok = ok and info.result == runtime.cudaGraphExecUpdateResult.cudaGraphExecUpdateSuccess
    checkCudaErrors(runtime.cudaGraphLaunch(graph_exec, stream))
    checkCudaErrors(runtime.cudaMemcpyAsync(h_y, d_y, n * 4,
                                            runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                            stream))
    checkCudaErrors(runtime.cudaStreamSynchronize(stream))
    ok = ok and np.allclose(h_y, 5.0 * h_x)

    checkCudaErrors(runtime.cudaGraphExecDestroy(graph_exec))
    checkCudaErrors(runtime.cudaGraphDestroy(graph))
    checkCudaErrors(runtime.cudaGraphDestroy(new_graph))
    checkCudaErrors(runtime.cudaStreamDestroy(stream))
    checkCudaErrors(runtime.cudaFree(d_x))
    checkCudaErrors(runtime.cudaFree(d_y))
    print("graphUpdate:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
