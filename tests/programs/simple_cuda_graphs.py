"""A reduction run as a CUDA graph twice, the way cuda-python's
simpleCudaGraphs example does it: once built explicitly (3D memcpy nodes,
memset nodes, two kernel nodes with tuple kernelParams, a host node), once
by stream capture across three streams forked from and joined back into the
capturing one with events (cudaEventRecord + cudaStreamWaitEvent).  Each
graph, and a clone of it, is instantiated and launched several times; every
launch's reduced sum is checked by a host node."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver, runtime
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

THREADS_PER_BLOCK = 128
GRAPH_LAUNCH_ITERATIONS = 3

simpleCudaGraphs = """\
#define THREADS_PER_BLOCK 128

extern "C"
__global__ void reduce(float *inputVec, double *outputVec, size_t inputSize,
                       size_t outputSize) {
    __shared__ double tmp[THREADS_PER_BLOCK];

    size_t globaltid = blockIdx.x * blockDim.x + threadIdx.x;

    double temp_sum = 0.0;
    for (size_t i = globaltid; i < inputSize; i += gridDim.x * blockDim.x) {
        temp_sum += (double)inputVec[i];
    }
    tmp[threadIdx.x] = temp_sum;
    __syncthreads();

    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            tmp[threadIdx.x] += tmp[threadIdx.x + s];
        }
        __syncthreads();
    }

    if (threadIdx.x == 0 && blockIdx.x < outputSize) {
        outputVec[blockIdx.x] = tmp[0];
    }
}

extern "C"
__global__ void reduceFinal(double *inputVec, double *result,
                            size_t inputSize) {
    __shared__ double tmp[THREADS_PER_BLOCK];

    double temp_sum = 0.0;
    for (size_t i = threadIdx.x; i < inputSize; i += blockDim.x) {
        temp_sum += inputVec[i];
    }
    tmp[threadIdx.x] = temp_sum;
    __syncthreads();

    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            tmp[threadIdx.x] += tmp[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) result[0] = tmp[0];
}
"""

SUMS = []


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def myHostNodeCallback(data):
    """Like the C++ sample's host node: read the reduced sum, then reset it."""
    result = ctypes.c_double.from_address(data)
    SUMS.append(result.value)
    result.value = 0.0


def init_input(a, size):
    values = np.random.default_rng(7).random(size, dtype=np.float32)
    ctypes.memmove(a, values.ctypes.data, values.nbytes)
    return float(values.astype(np.float64).sum())


def cudaGraphsManual(inputVec_h, inputVec_d, outputVec_d, result_d, inputSize, numOfBlocks):
    result_h = ctypes.c_double(0.0)
    nodeDependencies = []

    streamForGraph = checkCudaErrors(runtime.cudaStreamCreate())

    kernelNodeParams = driver.CUDA_KERNEL_NODE_PARAMS()
    memcpyParams = runtime.cudaMemcpy3DParms()
    memsetParams = runtime.cudaMemsetParams()

    memcpyParams.srcArray = None
    memcpyParams.srcPos = runtime.make_cudaPos(0, 0, 0)
    memcpyParams.srcPtr = runtime.make_cudaPitchedPtr(
        inputVec_h, np.dtype(np.float32).itemsize * inputSize, inputSize, 1)
    memcpyParams.dstArray = None
    memcpyParams.dstPos = runtime.make_cudaPos(0, 0, 0)
    memcpyParams.dstPtr = runtime.make_cudaPitchedPtr(
        inputVec_d, np.dtype(np.float32).itemsize * inputSize, inputSize, 1)
    memcpyParams.extent = runtime.make_cudaExtent(np.dtype(np.float32).itemsize * inputSize, 1, 1)
    memcpyParams.kind = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice

    memsetParams.dst = outputVec_d
    memsetParams.value = 0
    memsetParams.pitch = 0
    memsetParams.elementSize = np.dtype(np.float32).itemsize  # elementSize can be max 4 bytes
    memsetParams.width = numOfBlocks * 2
    memsetParams.height = 1

    graph = checkCudaErrors(runtime.cudaGraphCreate(0))

    memcpyNode = checkCudaErrors(runtime.cudaGraphAddMemcpyNode(graph, None, 0, memcpyParams))
    memsetNode = checkCudaErrors(runtime.cudaGraphAddMemsetNode(graph, None, 0, memsetParams))

    nodeDependencies.append(memsetNode)
    nodeDependencies.append(memcpyNode)

    kernelArgs = ((inputVec_d, outputVec_d, inputSize, numOfBlocks),
                  (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t))

    kernelNodeParams.func = _reduce
    kernelNodeParams.gridDimX = numOfBlocks
    kernelNodeParams.gridDimY = kernelNodeParams.gridDimZ = 1
    kernelNodeParams.blockDimX = THREADS_PER_BLOCK
    kernelNodeParams.blockDimY = kernelNodeParams.blockDimZ = 1
    kernelNodeParams.sharedMemBytes = 0
    kernelNodeParams.kernelParams = kernelArgs

    kernelNode = checkCudaErrors(
        driver.cuGraphAddKernelNode(graph, nodeDependencies, len(nodeDependencies),
                                    kernelNodeParams))

    nodeDependencies.clear()
    nodeDependencies.append(kernelNode)

    memsetParams = runtime.cudaMemsetParams()
    memsetParams.dst = result_d
    memsetParams.value = 0
    memsetParams.elementSize = np.dtype(np.float32).itemsize
    memsetParams.width = 2
    memsetParams.height = 1
    memsetNode = checkCudaErrors(runtime.cudaGraphAddMemsetNode(graph, None, 0, memsetParams))

    nodeDependencies.append(memsetNode)

    kernelNodeParams = driver.CUDA_KERNEL_NODE_PARAMS()
    kernelNodeParams.func = _reduceFinal
    kernelNodeParams.gridDimX = kernelNodeParams.gridDimY = kernelNodeParams.gridDimZ = 1
    kernelNodeParams.blockDimX = THREADS_PER_BLOCK
    kernelNodeParams.blockDimY = kernelNodeParams.blockDimZ = 1
    kernelNodeParams.sharedMemBytes = 0
    kernelArgs2 = ((outputVec_d, result_d, numOfBlocks),
                   (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t))
    kernelNodeParams.kernelParams = kernelArgs2

    kernelNode = checkCudaErrors(
        driver.cuGraphAddKernelNode(graph, nodeDependencies, len(nodeDependencies),
                                    kernelNodeParams))

    nodeDependencies.clear()
    nodeDependencies.append(kernelNode)

    memcpyParams = runtime.cudaMemcpy3DParms()
    memcpyParams.srcArray = None
    memcpyParams.srcPos = runtime.make_cudaPos(0, 0, 0)
    memcpyParams.srcPtr = runtime.make_cudaPitchedPtr(result_d, np.dtype(np.float64).itemsize,
                                                      1, 1)
    memcpyParams.dstArray = None
    memcpyParams.dstPos = runtime.make_cudaPos(0, 0, 0)
    memcpyParams.dstPtr = runtime.make_cudaPitchedPtr(result_h, np.dtype(np.float64).itemsize,
                                                      1, 1)
    memcpyParams.extent = runtime.make_cudaExtent(np.dtype(np.float64).itemsize, 1, 1)
    memcpyParams.kind = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
    memcpyNode = checkCudaErrors(
        runtime.cudaGraphAddMemcpyNode(graph, nodeDependencies, len(nodeDependencies),
                                       memcpyParams))

    nodeDependencies.clear()
    nodeDependencies.append(memcpyNode)

    hostParams = runtime.cudaHostNodeParams()
    hostParams.fn = runtime.cudaHostFn_t(ctypes.cast(myHostNodeCallback, ctypes.c_void_p).value)
    hostParams.userData = ctypes.addressof(result_h)
    checkCudaErrors(runtime.cudaGraphAddHostNode(graph, nodeDependencies,
                                                 len(nodeDependencies), hostParams))

    nodes, numNodes = checkCudaErrors(runtime.cudaGraphGetNodes(graph))
    print(f"\nNum of nodes in the graph created manually = {numNodes}")

    graphExec = checkCudaErrors(runtime.cudaGraphInstantiate(graph, 0))

    clonedGraph = checkCudaErrors(runtime.cudaGraphClone(graph))
    clonedGraphExec = checkCudaErrors(runtime.cudaGraphInstantiate(clonedGraph, 0))

    for _i in range(GRAPH_LAUNCH_ITERATIONS):
        checkCudaErrors(runtime.cudaGraphLaunch(graphExec, streamForGraph))

    checkCudaErrors(runtime.cudaStreamSynchronize(streamForGraph))

    print("Cloned Graph Output..")
    for _i in range(GRAPH_LAUNCH_ITERATIONS):
        checkCudaErrors(runtime.cudaGraphLaunch(clonedGraphExec, streamForGraph))

    checkCudaErrors(runtime.cudaStreamSynchronize(streamForGraph))

    checkCudaErrors(runtime.cudaGraphExecDestroy(graphExec))
    checkCudaErrors(runtime.cudaGraphExecDestroy(clonedGraphExec))
    checkCudaErrors(runtime.cudaGraphDestroy(graph))
    checkCudaErrors(runtime.cudaGraphDestroy(clonedGraph))
    checkCudaErrors(runtime.cudaStreamDestroy(streamForGraph))
    return numNodes


def cudaGraphsUsingStreamCapture(inputVec_h, inputVec_d, outputVec_d, result_d, inputSize,
                                 numOfBlocks):
    result_h = ctypes.c_double(0.0)

    stream1 = checkCudaErrors(runtime.cudaStreamCreate())
    stream2 = checkCudaErrors(runtime.cudaStreamCreate())
    stream3 = checkCudaErrors(runtime.cudaStreamCreate())
    streamForGraph = checkCudaErrors(runtime.cudaStreamCreate())

    forkStreamEvent = checkCudaErrors(runtime.cudaEventCreate())
    memsetEvent1 = checkCudaErrors(runtime.cudaEventCreate())
    memsetEvent2 = checkCudaErrors(runtime.cudaEventCreate())

    checkCudaErrors(runtime.cudaStreamBeginCapture(
        stream1, runtime.cudaStreamCaptureMode.cudaStreamCaptureModeGlobal))

    checkCudaErrors(runtime.cudaEventRecord(forkStreamEvent, stream1))
    checkCudaErrors(runtime.cudaStreamWaitEvent(stream2, forkStreamEvent, 0))
    checkCudaErrors(runtime.cudaStreamWaitEvent(stream3, forkStreamEvent, 0))

    checkCudaErrors(runtime.cudaMemcpyAsync(
        inputVec_d, inputVec_h, np.dtype(np.float32).itemsize * inputSize,
        runtime.cudaMemcpyKind.cudaMemcpyDefault, stream1))

    checkCudaErrors(runtime.cudaMemsetAsync(
        outputVec_d, 0, np.dtype(np.float64).itemsize * numOfBlocks, stream2))

    checkCudaErrors(runtime.cudaEventRecord(memsetEvent1, stream2))

    checkCudaErrors(runtime.cudaMemsetAsync(result_d, 0, np.dtype(np.float64).itemsize, stream3))
    checkCudaErrors(runtime.cudaEventRecord(memsetEvent2, stream3))

    checkCudaErrors(runtime.cudaStreamWaitEvent(stream1, memsetEvent1, 0))

    kernelArgs = ((inputVec_d, outputVec_d, inputSize, numOfBlocks),
                  (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t))
    checkCudaErrors(driver.cuLaunchKernel(
        _reduce, numOfBlocks, 1, 1, THREADS_PER_BLOCK, 1, 1, 0, stream1, kernelArgs, 0))

    checkCudaErrors(runtime.cudaStreamWaitEvent(stream1, memsetEvent2, 0))

    kernelArgs2 = ((outputVec_d, result_d, numOfBlocks),
                   (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t))
    checkCudaErrors(driver.cuLaunchKernel(
        _reduceFinal, 1, 1, 1, THREADS_PER_BLOCK, 1, 1, 0, stream1, kernelArgs2, 0))

    checkCudaErrors(runtime.cudaMemcpyAsync(
        result_h, result_d, np.dtype(np.float64).itemsize,
        runtime.cudaMemcpyKind.cudaMemcpyDefault, stream1))

    checkCudaErrors(runtime.cudaLaunchHostFunc(
        stream1, runtime.cudaHostFn_t(ctypes.cast(myHostNodeCallback, ctypes.c_void_p).value),
        ctypes.addressof(result_h)))

    graph = checkCudaErrors(runtime.cudaStreamEndCapture(stream1))

    nodes, numNodes = checkCudaErrors(runtime.cudaGraphGetNodes(graph))
    print(f"\nNum of nodes in the graph created using stream capture API = {numNodes}")

    graphExec = checkCudaErrors(runtime.cudaGraphInstantiate(graph, 0))

    clonedGraph = checkCudaErrors(runtime.cudaGraphClone(graph))
    clonedGraphExec = checkCudaErrors(runtime.cudaGraphInstantiate(clonedGraph, 0))

    for _i in range(GRAPH_LAUNCH_ITERATIONS):
        checkCudaErrors(runtime.cudaGraphLaunch(graphExec, streamForGraph))

    checkCudaErrors(runtime.cudaStreamSynchronize(streamForGraph))

    print("Cloned Graph Output..")
    for _i in range(GRAPH_LAUNCH_ITERATIONS):
        checkCudaErrors(runtime.cudaGraphLaunch(clonedGraphExec, streamForGraph))

    checkCudaErrors(runtime.cudaStreamSynchronize(streamForGraph))

    checkCudaErrors(runtime.cudaGraphExecDestroy(graphExec))
    checkCudaErrors(runtime.cudaGraphExecDestroy(clonedGraphExec))
    checkCudaErrors(runtime.cudaGraphDestroy(graph))
    checkCudaErrors(runtime.cudaGraphDestroy(clonedGraph))
    for e in (forkStreamEvent, memsetEvent1, memsetEvent2):
        checkCudaErrors(runtime.cudaEventDestroy(e))
    for s in (stream1, stream2, stream3, streamForGraph):
        checkCudaErrors(runtime.cudaStreamDestroy(s))
    return numNodes


def main():
    size = 1 << 13  # number of elements to reduce
    maxBlocks = 16

    devID = findCudaDevice()

    global _reduce
    global _reduceFinal
    kernelHelper = KernelHelper(simpleCudaGraphs, devID, "simpleCudaGraphs.cu")
    _reduce = kernelHelper.get("reduce")
    _reduceFinal = kernelHelper.get("reduceFinal")

    print(f"{size} elements")
    print(f"threads per block  = {THREADS_PER_BLOCK}")
    print(f"Graph Launch iterations = {GRAPH_LAUNCH_ITERATIONS}")

    inputVec_h = checkCudaErrors(runtime.cudaMallocHost(size * np.dtype(np.float32).itemsize))
    inputVec_d = checkCudaErrors(runtime.cudaMalloc(size * np.dtype(np.float32).itemsize))
    outputVec_d = checkCudaErrors(runtime.cudaMalloc(maxBlocks * np.dtype(np.float64).itemsize))
    result_d = checkCudaErrors(runtime.cudaMalloc(np.dtype(np.float64).itemsize))

    expected = init_input(inputVec_h, size)

    manualNodes = cudaGraphsManual(inputVec_h, inputVec_d, outputVec_d, result_d, size,
                                   maxBlocks)
    capturedNodes = cudaGraphsUsingStreamCapture(inputVec_h, inputVec_d, outputVec_d, result_d,
                                                 size, maxBlocks)

    checkCudaErrors(runtime.cudaFree(inputVec_d))
    checkCudaErrors(runtime.cudaFree(outputVec_d))
    checkCudaErrors(runtime.cudaFree(result_d))
    checkCudaErrors(runtime.cudaFreeHost(inputVec_h))

    launches = 4 * GRAPH_LAUNCH_ITERATIONS
    ok = (manualNodes == 7 and capturedNodes == 7 and len(SUMS) == launches
          and all(abs(s - expected) < 1e-6 * expected for s in SUMS))
    print(f"reduced sums {SUMS[:1]} ... expected {expected}")
    print("simpleCudaGraphs:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
