"""CuPy: a matrix product, which CuPy hands to cuBLAS; the program catches
the failure, so only gpusafe's report can say it was not run."""

import cupy as cp

a = cp.ones((4, 4), dtype=cp.float32)
try:
    print((a @ a).get())
except Exception as e:  # noqa: BLE001 - a program that swallows the failure
    print("matmul failed:", type(e).__name__)
