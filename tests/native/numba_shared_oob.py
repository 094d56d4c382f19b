"""numba-cuda: the shared-memory histogram zeroes one bin past its end
(``t <= BINS``)."""

import numpy as np
from numba import cuda, int32

BINS = 16


@cuda.jit(lineinfo=True)
def histogram(values, counts):
    local = cuda.shared.array(BINS, dtype=int32)
    t = cuda.threadIdx.x
    if t <= BINS:
        local[t] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < values.size:
        cuda.atomic.add(local, values[i] % BINS, 1)
    cuda.syncthreads()
    if t < BINS:
        cuda.atomic.add(counts, t, local[t])


values = np.arange(1000, dtype=np.int32)
counts = cuda.to_device(np.zeros(BINS, dtype=np.int32))
histogram[4, 256](cuda.to_device(values), counts)
print("histogram done")
