"""CuPy: an ElementwiseKernel reading its raw input one element ahead
(``x[i + 1]``): the last element reads one float past the end."""

import cupy as cp

shift = cp.ElementwiseKernel("raw T x", "T y", "y = x[i + 1]", "shift_left")
x = cp.arange(100, dtype=cp.float32)
y = cp.empty_like(x)
shift(x, y)
print("first:", y[:3].get().tolist())
