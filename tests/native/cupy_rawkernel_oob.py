"""CuPy: a RawKernel whose bound is off by one (``i <= n``): the last thread
writes one float past the end of a 100-float array."""

import cupy as cp

SOURCE = r"""
extern "C" __global__ void fill(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        out[i] = 2.0f * i;
    }
}
"""
fill = cp.RawKernel(SOURCE, "fill")
out = cp.zeros(100, dtype=cp.float32)
fill((1,), (128,), (out, cp.int32(100)))
print("first:", out[:3].get().tolist())
