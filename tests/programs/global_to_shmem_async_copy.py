"""Tiled matrix multiply that stages its tiles from global to shared memory
with ``cp.async``, after cuda-python's globalToShmemAsyncCopy example (its
MatrixMulAsyncCopyMultiStage kernel): two shared buffers per matrix, the
copies of the next tiles issued before the current ones are multiplied,
committed as a group and waited for with ``cp.async.wait_group``.  The copy
primitives are written out as macros the way ``<cuda_pipeline.h>`` spells
``__pipeline_memcpy_async``, ``__pipeline_commit`` and
``__pipeline_wait_prior``, so NVRTC needs no toolkit headers; small sizes."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver, runtime
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

globalToShmemAsyncCopy = """\
#define BLOCK_SIZE 16
#define MEMCPY_ASYNC(dst, src) \\
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\\n" \\
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory")
#define PIPELINE_COMMIT() asm volatile("cp.async.commit_group;\\n" ::: "memory")
#define PIPELINE_WAIT_PRIOR(n) asm volatile("cp.async.wait_group %0;\\n" :: "n"(n) : "memory")

extern "C" __global__ void MatrixMulAsyncCopyMultiStage(float *C, const float *A, const float *B,
                                                        int wA, int wB)
{
    __shared__ float As[2][BLOCK_SIZE][BLOCK_SIZE];
    __shared__ float Bs[2][BLOCK_SIZE][BLOCK_SIZE];
    int bx = blockIdx.x, by = blockIdx.y;
    int tx = threadIdx.x, ty = threadIdx.y;
    int aBegin = wA * BLOCK_SIZE * by;
    int aEnd = aBegin + wA - 1;
    int aStep = BLOCK_SIZE;
    int bBegin = BLOCK_SIZE * bx;
    int bStep = BLOCK_SIZE * wB;
    float Csub = 0.0f;

    MEMCPY_ASYNC(&As[0][ty][tx], &A[aBegin + wA * ty + tx]);
    MEMCPY_ASYNC(&Bs[0][ty][tx], &B[bBegin + wB * ty + tx]);
    PIPELINE_COMMIT();
    for (int a = aBegin, b = bBegin, stage = 0; a <= aEnd; a += aStep, b += bStep, stage ^= 1) {
        if (a + aStep <= aEnd) {  // the next tiles load while these are multiplied
            MEMCPY_ASYNC(&As[stage ^ 1][ty][tx], &A[a + aStep + wA * ty + tx]);
            MEMCPY_ASYNC(&Bs[stage ^ 1][ty][tx], &B[b + bStep + wB * ty + tx]);
        }
        PIPELINE_COMMIT();
        PIPELINE_WAIT_PRIOR(1);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BLOCK_SIZE; ++k) {
            Csub += As[stage][ty][k] * Bs[stage][k][tx];
        }
        __syncthreads();
    }
    int c = wB * BLOCK_SIZE * by + BLOCK_SIZE * bx;
    C[c + wB * ty + tx] = Csub;
}
"""

BLOCK_SIZE = 16


def main():
    dev = findCudaDevice()
    A = runtime.cudaDeviceAttr
    major = checkCudaErrors(runtime.cudaDeviceGetAttribute(
        A.cudaDevAttrComputeCapabilityMajor, dev))
    if major < 8:
        print("globalToShmemAsyncCopy requires SM 8.0 or higher: waived")
        return 0
    kernel = KernelHelper(globalToShmemAsyncCopy, dev, "globalToShmemAsyncCopy.cu").get(
        "MatrixMulAsyncCopyMultiStage")

    hA, wA, wB = 3 * BLOCK_SIZE, 4 * BLOCK_SIZE, 2 * BLOCK_SIZE
    rng = np.random.default_rng(7)
    h_A = rng.random((hA, wA), dtype=np.float32)
    h_B = rng.random((wA, wB), dtype=np.float32)
    mem_size_A, mem_size_B, mem_size_C = h_A.nbytes, h_B.nbytes, hA * wB * 4
    d_A = checkCudaErrors(runtime.cudaMalloc(mem_size_A))
    d_B = checkCudaErrors(runtime.cudaMalloc(mem_size_B))
    d_C = checkCudaErrors(runtime.cudaMalloc(mem_size_C))
    stream = checkCudaErrors(runtime.cudaStreamCreateWithFlags(runtime.cudaStreamNonBlocking))
    H2D = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
    checkCudaErrors(runtime.cudaMemcpyAsync(d_A, h_A, mem_size_A, H2D, stream))
    checkCudaErrors(runtime.cudaMemcpyAsync(d_B, h_B, mem_size_B, H2D, stream))
    checkCudaErrors(runtime.cudaMemsetAsync(d_C, 0, mem_size_C, stream))

    grid = (wB // BLOCK_SIZE, hA // BLOCK_SIZE)
    checkCudaErrors(driver.cuLaunchKernel(
        kernel, grid[0], grid[1], 1, BLOCK_SIZE, BLOCK_SIZE, 1, 0, stream,
        ((d_C, d_A, d_B, wA, wB),
         (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)), 0))
    h_C = np.empty((hA, wB), dtype=np.float32)
    checkCudaErrors(runtime.cudaMemcpyAsync(h_C, d_C, mem_size_C,
                                            runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                            stream))
    checkCudaErrors(runtime.cudaStreamSynchronize(stream))

    for p in (d_A, d_B, d_C):
        checkCudaErrors(runtime.cudaFree(p))
    checkCudaErrors(runtime.cudaStreamDestroy(stream))
    ok = np.allclose(h_C, h_A @ h_B, rtol=1e-5, atol=1e-4)
    print("globalToShmemAsyncCopy:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
