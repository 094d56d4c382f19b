"""numba-cuda: an off-by-one bound lets the last thread read and write one
element past the end of both arrays."""

import numpy as np
from numba import cuda


@cuda.jit(lineinfo=True)
def add_one(out, x):
    i = cuda.grid(1)
    if i <= x.size:
        out[i] = x[i] + 1


x = np.arange(100, dtype=np.float32)
d_x = cuda.to_device(x)
d_out = cuda.device_array_like(d_x)
add_one[1, 128](d_out, d_x)
print("first:", d_out.copy_to_host()[:3].tolist())
