"""Correct: sum of 5000 integers (shared-memory tree, warp shuffles, one atomicAdd
per block), checked exactly against numpy (exit status 1 if wrong).
"""

import sys

import numpy as np
from cuda.bindings.driver import (
    CUdevice_attribute,
    CUresult,
    cuCtxCreate,
    cuCtxDestroy,
    cuDeviceGet,
    cuDeviceGetAttribute,
    cuInit,
    cuLaunchKernel,
    cuMemAlloc,
    cuMemcpyDtoH,
    cuMemcpyHtoD,
    cuMemFree,
    cuMemsetD32,
    cuModuleGetFunction,
    cuModuleLoadData,
    cuModuleUnload,
    cuStreamCreate,
    cuStreamDestroy,
    cuStreamSynchronize,
)
from nvrtc import compile_to_ptx

BLOCK = 256
SOURCE = r"""
#define BLOCK 256

extern "C" __global__ void block_sum(int* total, const int* x, int n)
{
    __shared__ int partial[BLOCK];
    int t = threadIdx.x;
    int sum = 0;
    for (int i = blockIdx.x * BLOCK + t; i < n; i += gridDim.x * BLOCK)
        sum += x[i];
    partial[t] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s >= 32; s /= 2) {
        if (t < s)
            partial[t] += partial[t + s];
        __syncthreads();
    }
    if (t < 32) {
        int v = partial[t];
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_down_sync(0xffffffff, v, offset);
        if (t == 0)
            atomicAdd(total, v);
    }
}
"""


def check(result):
    """Raise on a non-success CUresult; return the call's other results."""
    err, *values = result
    if err != CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return values[0] if len(values) == 1 else values


def main():
    check(cuInit(0))
    dev = check(cuDeviceGet(0))
    major = check(cuDeviceGetAttribute(
        CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cuDeviceGetAttribute(
        CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    try:
        ctx = check(cuCtxCreate(None, 0, dev))  # cuda-bindings 13: (params, flags, dev)
    except TypeError:
        ctx = check(cuCtxCreate(0, dev))  # cuda-bindings 12: (flags, dev)

    ptx = compile_to_ptx(SOURCE, "reduction.cu", arch=f"compute_{major}{minor}")
    module = check(cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuModuleGetFunction(module, b"block_sum"))

    n = 5000
    x = np.random.default_rng(11).integers(-1000, 1000, n, dtype=np.int32)
    total = np.zeros(1, dtype=np.int32)
    d_x = check(cuMemAlloc(x.nbytes))
    d_total = check(cuMemAlloc(total.nbytes))
    stream = check(cuStreamCreate(0))
    check(cuMemcpyHtoD(d_x, x, x.nbytes))
    check(cuMemsetD32(d_total, 0, 1))

    args = [np.array([int(d_total)], dtype=np.uint64), np.array([int(d_x)], dtype=np.uint64),
            np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuLaunchKernel(kernel, 4, 1, 1, BLOCK, 1, 1, 0, stream, params.ctypes.data, 0))
    check(cuStreamSynchronize(stream))
    check(cuMemcpyDtoH(total, d_total, total.nbytes))

    check(cuStreamDestroy(stream))
    for d in (d_x, d_total):
        check(cuMemFree(d))
    check(cuModuleUnload(module))
    check(cuCtxDestroy(ctx))

    expected = int(x.astype(np.int64).sum())
    if int(total[0]) != expected:
        print(f"FAILED: sum {int(total[0])} != {expected}")
        return 1
    print(f"reduction: sum of {n} integers = {expected} OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
