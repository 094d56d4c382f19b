"""numba-cuda: a histogram whose bin index can reach one past the last bin
(``% (BINS + 1)``): the global atomic add overruns ``counts``."""

import numpy as np
from numba import cuda

BINS = 16


@cuda.jit(lineinfo=True)
def histogram(values, counts):
    i = cuda.grid(1)
    if i < values.size:
        cuda.atomic.add(counts, values[i] % (BINS + 1), 1)


values = np.arange(34, dtype=np.int32)
counts = cuda.to_device(np.zeros(BINS, dtype=np.int32))
histogram[1, 64](cuda.to_device(values), counts)
print("bins:", counts.copy_to_host().tolist())
