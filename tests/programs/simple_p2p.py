"""Peer-to-peer copies and peer access, after cuda-python's simpleP2P example:
two devices that can reach each other's memory enable peer access both
ways, each allocates a buffer, the buffers are copied back and forth
(cudaMemcpyPeer, and cudaMemcpy with cudaMemcpyDefault, which unified
addressing resolves from the pointers), then a kernel on the second device
reads the first device's buffer through peer access and writes its own,
and a kernel on the first device does the reverse; the host checks the
result.  With fewer than two devices, or none that can reach each other,
the program waives itself, as NVIDIA's does."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver, runtime
from cuda_helpers import KernelHelper, checkCudaErrors

simplep2p = """\
extern "C"
__global__ void SimpleKernel(float *src, float *dst)
{
    // Just a dummy kernel, doing enough for us to verify that everything
    // worked
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    dst[idx] = src[idx] * 2.0f;
}
"""


def name(prop):
    return prop.name.split(b"\0")[0].decode()


def main():
    print("Checking for multiple GPUs...")
    gpu_n = checkCudaErrors(runtime.cudaGetDeviceCount())
    print(f"CUDA-capable device count: {gpu_n}")
    if gpu_n < 2:
        print("Two or more GPUs with Peer-to-Peer access capability are required, waiving test.")
        return 0

    prop = [checkCudaErrors(runtime.cudaGetDeviceProperties(i)) for i in range(gpu_n)]
    print("Checking GPU(s) for support of peer to peer memory access...")
    p2pCapableGPUs = [-1, -1]
    for i in range(gpu_n):
        p2pCapableGPUs[0] = i
        for j in range(gpu_n):
            if i == j:
                continue
            i_access_j = checkCudaErrors(runtime.cudaDeviceCanAccessPeer(i, j))
            j_access_i = checkCudaErrors(runtime.cudaDeviceCanAccessPeer(j, i))
            print(f"> Peer access from {name(prop[i])} (GPU{i}) -> {name(prop[j])} (GPU{j}) : "
                  f"{'Yes' if i_access_j else 'No'}")
            if i_access_j and j_access_i:
                p2pCapableGPUs[1] = j
                break
        if p2pCapableGPUs[1] != -1:
            break
    if p2pCapableGPUs[0] == -1 or p2pCapableGPUs[1] == -1:
        print("Peer to Peer access is not available amongst GPUs in the system, waiving test.")
        return 0
    gpuid = p2pCapableGPUs
    if not (prop[gpuid[0]].unifiedAddressing and prop[gpuid[1]].unifiedAddressing):
        print("Unified addressing is required, waiving test.")
        return 0

    # Enable peer access, both ways
    print(f"Enabling peer access between GPU{gpuid[0]} and GPU{gpuid[1]}...")
    checkCudaErrors(runtime.cudaSetDevice(gpuid[0]))
    checkCudaErrors(runtime.cudaDeviceEnablePeerAccess(gpuid[1], 0))
    checkCudaErrors(runtime.cudaSetDevice(gpuid[1]))
    checkCudaErrors(runtime.cudaDeviceEnablePeerAccess(gpuid[0], 0))

    # Allocate buffers
    n = 1 << 12
    buf_size = n * np.dtype(np.float32).itemsize
    print(f"Allocating buffers ({buf_size} bytes on GPU{gpuid[0]}, GPU{gpuid[1]} and CPU Host)...")
    checkCudaErrors(runtime.cudaSetDevice(gpuid[0]))
    g0 = checkCudaErrors(runtime.cudaMalloc(buf_size))
    checkCudaErrors(runtime.cudaSetDevice(gpuid[1]))
    g1 = checkCudaErrors(runtime.cudaMalloc(buf_size))
    h0 = checkCudaErrors(runtime.cudaMallocHost(buf_size))  # Automatically portable with UVA

    for ptr, dev in ((g0, gpuid[0]), (g1, gpuid[1])):
        attributes = checkCudaErrors(runtime.cudaPointerGetAttributes(ptr))
        if attributes.device != dev:
            print(f"Pointer {int(ptr):#x} reports device {attributes.device}, not {dev}")
            return 1

    # Ping-pong copies between the GPUs: explicit peer copies, then with UVA
    # the runtime figures the devices out by itself from the pointers
    for i in range(4):
        if i % 2 == 0:
            checkCudaErrors(runtime.cudaMemcpyPeer(g1, gpuid[1], g0, gpuid[0], buf_size))
        else:
            checkCudaErrors(runtime.cudaMemcpy(g0, g1, buf_size,
                                               runtime.cudaMemcpyKind.cudaMemcpyDefault))

    # Prepare host buffer and copy to GPU 0
    print(f"Preparing host buffer and memcpy to GPU{gpuid[0]}...")
    h0_local = (ctypes.c_float * n).from_address(h0)
    for i in range(n):
        h0_local[i] = i % 4096
    checkCudaErrors(runtime.cudaSetDevice(gpuid[0]))
    checkCudaErrors(runtime.cudaMemcpy(g0, h0, buf_size, runtime.cudaMemcpyKind.cudaMemcpyDefault))

    # Kernel launch configuration
    threads = 512
    blocks = n // threads

    # Run kernel on GPU 1, reading input from the GPU 0 buffer, writing
    # output to the GPU 1 buffer
    print(f"Run kernel on GPU{gpuid[1]}, taking source data from GPU{gpuid[0]} and writing to "
          f"GPU{gpuid[1]}...")
    checkCudaErrors(runtime.cudaSetDevice(gpuid[1]))
    kernel1 = KernelHelper(simplep2p, gpuid[1], "simpleP2P.cu").get("SimpleKernel")
    kernelArgs1 = ((g0, g1), (ctypes.c_void_p, ctypes.c_void_p))
    checkCudaErrors(driver.cuLaunchKernel(kernel1, blocks, 1, 1, threads, 1, 1, 0, 0,
                                          kernelArgs1, 0))
    checkCudaErrors(runtime.cudaDeviceSynchronize())

    # Run kernel on GPU 0, reading input from the GPU 1 buffer, writing
    # output to the GPU 0 buffer
    print(f"Run kernel on GPU{gpuid[0]}, taking source data from GPU{gpuid[1]} and writing to "
          f"GPU{gpuid[0]}...")
    checkCudaErrors(runtime.cudaSetDevice(gpuid[0]))
    kernel0 = KernelHelper(simplep2p, gpuid[0], "simpleP2P.cu").get("SimpleKernel")
    kernelArgs0 = ((g1, g0), (ctypes.c_void_p, ctypes.c_void_p))
    checkCudaErrors(driver.cuLaunchKernel(kernel0, blocks, 1, 1, threads, 1, 1, 0, 0,
                                          kernelArgs0, 0))
    checkCudaErrors(runtime.cudaDeviceSynchronize())

    # Copy data back to host and verify
    print(f"Copy data back to host from GPU{gpuid[0]} and verify results...")
    checkCudaErrors(runtime.cudaMemcpy(h0, g0, buf_size, runtime.cudaMemcpyKind.cudaMemcpyDefault))
    result = np.ctypeslib.as_array(h0_local)
    expected = (np.arange(n) % 4096).astype(np.float32) * 2.0 * 2.0
    error_count = int(np.count_nonzero(result != expected))

    # Disable peer access (also unregisters memory for non-UVA cases)
    print("Disabling peer access...")
    checkCudaErrors(runtime.cudaSetDevice(gpuid[0]))
    checkCudaErrors(runtime.cudaDeviceDisablePeerAccess(gpuid[1]))
    checkCudaErrors(runtime.cudaSetDevice(gpuid[1]))
    checkCudaErrors(runtime.cudaDeviceDisablePeerAccess(gpuid[0]))

    # Cleanup and shutdown
    print("Shutting down...")
    checkCudaErrors(runtime.cudaFreeHost(h0))
    checkCudaErrors(runtime.cudaSetDevice(gpuid[0]))
    checkCudaErrors(runtime.cudaFree(g0))
    checkCudaErrors(runtime.cudaSetDevice(gpuid[1]))
    checkCudaErrors(runtime.cudaFree(g1))

    if error_count != 0:
        print(f"simpleP2P: {error_count} verification errors")
        return 1
    print("simpleP2P: PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
