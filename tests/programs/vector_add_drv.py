"""Vector addition through the driver API, after cuda-python's vectorAddDrv
example: device memory from ``cuMemAlloc``, copies with ``cuMemcpyHtoD`` /
``cuMemcpyDtoH``, and a grid size computed with true division, so
``cuLaunchKernel`` is given a float (196.3125 blocks here), which
cuda-bindings accepts and truncates to an integer."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

vectorAddDrv = """\
extern "C" __global__ void VecAdd_kernel(const float *A, const float *B, float *C, int N)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < N)
        C[i] = A[i] + B[i];
}
"""


def main():
    checkCudaErrors(driver.cuInit(0))
    dev = findCudaDevice()
    kernel = KernelHelper(vectorAddDrv, dev, "vectorAddDrv.cu").get("VecAdd_kernel")

    N = 50000
    size = N * np.dtype(np.float32).itemsize
    rng = np.random.default_rng(3)
    h_A = rng.random(N, dtype=np.float32)
    h_B = rng.random(N, dtype=np.float32)
    h_C = np.empty(N, dtype=np.float32)
    d_A = checkCudaErrors(driver.cuMemAlloc(size))
    d_B = checkCudaErrors(driver.cuMemAlloc(size))
    d_C = checkCudaErrors(driver.cuMemAlloc(size))
    checkCudaErrors(driver.cuMemcpyHtoD(d_A, h_A, size))
    checkCudaErrors(driver.cuMemcpyHtoD(d_B, h_B, size))

    threadsPerBlock = 256
    blocksPerGrid = (N + threadsPerBlock - 1) / threadsPerBlock  # a float, as in the example
    kernelArgs = ((d_A, d_B, d_C, N), (None, None, None, ctypes.c_int))
    checkCudaErrors(driver.cuLaunchKernel(kernel, blocksPerGrid, 1, 1, threadsPerBlock, 1, 1,
                                          0, 0, kernelArgs, 0))
    checkCudaErrors(driver.cuCtxSynchronize())
    checkCudaErrors(driver.cuMemcpyDtoH(h_C, d_C, size))

    for d in (d_A, d_B, d_C):
        checkCudaErrors(driver.cuMemFree(d))
    ok = np.allclose(h_C, h_A + h_B)
    print("vectorAddDrv:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
