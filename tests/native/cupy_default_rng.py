"""CuPy's Generator API (cupy.random.default_rng) runs cuRAND's kernels from
an extension module with NVIDIA's runtime linked in: named as cuRAND."""

import cupy as cp

g = cp.random.default_rng(1)
print("rng", g.random(3))
