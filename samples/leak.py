"""Leak: ``d_partial``, allocated at line 68, is never freed (run with --leak-check).

The program allocates ``d_x``, ``d_sums`` and ``d_partial`` through its
helper ``alloc`` (the 3rd allocation, the ``d_partial = alloc(...)`` line;
the helper's own ``cuMemAlloc`` line is the next frame of the stack, never
the line reported), but its cleanup loop
frees only the first two. Nothing fails on a GPU: the memory is reclaimed
when the context is destroyed. ``gpusafe run --leak-check`` reports one
``leak`` at the allocation site of ``d_partial``.
"""

import cuda.bindings.driver as cuda
import numpy as np
from nvrtc import compile_to_ptx

SOURCE = r"""
extern "C" __global__ void row_sums(float* sums, float* partial, const float* x, int cols)
{
    int row = blockIdx.x;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += x[row * cols + c];
    partial[row * blockDim.x + threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int t = 0; t < blockDim.x; ++t)
            total += partial[row * blockDim.x + t];
        sums[row] = total;
    }
}
"""


def check(result):
    """Raise on a non-success CUresult; return the call's other results."""
    err, *values = result
    if err != cuda.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return values[0] if len(values) == 1 else values


def alloc(nbytes):
    """Device memory of ``nbytes``: the program allocates only through here."""
    return check(cuda.cuMemAlloc(nbytes))


def main():
    check(cuda.cuInit(0))
    dev = check(cuda.cuDeviceGet(0))
    attr = cuda.CUdevice_attribute
    major = check(cuda.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cuda.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    try:
        ctx = check(cuda.cuCtxCreate(None, 0, dev))  # cuda-bindings 13: (params, flags, dev)
    except TypeError:
        ctx = check(cuda.cuCtxCreate(0, dev))  # cuda-bindings 12: (flags, dev)

    ptx = compile_to_ptx(SOURCE, "leak_kernels.cu", arch=f"compute_{major}{minor}")
    module = check(cuda.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuda.cuModuleGetFunction(module, b"row_sums"))

    rows, cols, threads = 16, 100, 32
    x = np.ones((rows, cols), dtype=np.float32)
    sums = np.zeros(rows, dtype=np.float32)
    d_x = alloc(x.nbytes)
    d_sums = alloc(sums.nbytes)
    d_partial = alloc(rows * threads * 4)  # BUG: never freed
    check(cuda.cuMemcpyHtoD(d_x, x, x.nbytes))

    args = [np.array([int(d_sums)], dtype=np.uint64), np.array([int(d_partial)], dtype=np.uint64),
            np.array([int(d_x)], dtype=np.uint64), np.array([cols], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuda.cuLaunchKernel(kernel, rows, 1, 1, threads, 1, 1, 0, 0, params.ctypes.data, 0))
    check(cuda.cuCtxSynchronize())
    check(cuda.cuMemcpyDtoH(sums, d_sums, sums.nbytes))
    print(f"sums[:4] = {sums[:4]}")

    for d in (d_x, d_sums):
        check(cuda.cuMemFree(d))
    check(cuda.cuModuleUnload(module))
    check(cuda.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
