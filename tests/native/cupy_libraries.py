"""CuPy: a matrix product (cuBLAS), a sort (Thrust) and random numbers
(cuRAND); the program catches each failure, so only gpusafe's report can
say they were not run."""

import cupy as cp

a = cp.ones((4, 4), dtype=cp.float32)
for name, work in [("matmul", lambda: a @ a), ("sort", lambda: cp.sort(a[0])),
                   ("rand", lambda: cp.random.rand(3))]:
    try:
        work()
        print(name, "ran")
    except Exception as e:  # noqa: BLE001 - a program that swallows the failure
        print(name, "failed:", type(e).__name__)
