"""CuPy, correct: elementwise kernels (arange, +, a ufunc), a reduction and a
RawKernel, each result checked by the program itself."""

import cupy as cp
import numpy as np

a = cp.arange(100, dtype=cp.float32)
b = cp.sqrt(a * a) + 1
assert (b.get() == np.arange(100, dtype=np.float32) + 1).all()
assert float(cp.sum(b)) == 5050.0

SOURCE = r"""
extern "C" __global__ void scale(float *out, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = 2.0f * x[i];
    }
}
"""
scale = cp.RawKernel(SOURCE, "scale")
out = cp.empty_like(b)
scale((1,), (128,), (out, b, cp.int32(100)))
assert (out.get() == 2 * b.get()).all()
print("cupy ok")
