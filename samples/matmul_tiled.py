"""Correct: tiled matrix multiply in shared memory, checked against numpy.

C (40 x 30) = A (40 x 50) @ B (50 x 30) with 16 x 16 tiles, so every tile
row and column overhangs the matrices somewhere. Exit status 1 if any
element differs from numpy's product by more than float32 rounding.
"""

import sys
from pathlib import Path

import cuda.bindings.driver as cuda
import numpy as np
from nvrtc import compile_to_ptx

TILE = 16  # must match TILE in matmul_tiled.cu


def check(result):
    """Raise on a non-success CUresult; return the call's other results."""
    err, *values = result
    if err != cuda.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return values[0] if len(values) == 1 else values


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

    cu_file = Path(__file__).with_name("matmul_tiled.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(cuda.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuda.cuModuleGetFunction(module, b"matmul_tiled"))

    m, k, n = 40, 50, 30
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), dtype=np.float32)
    d_a = check(cuda.cuMemAlloc(a.nbytes))
    d_b = check(cuda.cuMemAlloc(b.nbytes))
    d_c = check(cuda.cuMemAlloc(c.nbytes))
    check(cuda.cuMemcpyHtoD(d_a, a, a.nbytes))
    check(cuda.cuMemcpyHtoD(d_b, b, b.nbytes))

    args = [np.array([int(d_c)], dtype=np.uint64), np.array([int(d_a)], dtype=np.uint64),
            np.array([int(d_b)], dtype=np.uint64),
            np.array([m], dtype=np.int32), np.array([n], dtype=np.int32),
            np.array([k], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    grid_x, grid_y = (n + TILE - 1) // TILE, (m + TILE - 1) // TILE
    check(cuda.cuLaunchKernel(kernel, grid_x, grid_y, 1, TILE, TILE, 1, 0, 0,
                              params.ctypes.data, 0))
    check(cuda.cuCtxSynchronize())
    check(cuda.cuMemcpyDtoH(c, d_c, c.nbytes))

    for d in (d_a, d_b, d_c):
        check(cuda.cuMemFree(d))
    check(cuda.cuModuleUnload(module))
    check(cuda.cuCtxDestroy(ctx))

    expected = a.astype(np.float64) @ b.astype(np.float64)
    error = np.abs(c - expected).max()
    if not np.allclose(c, expected, rtol=1e-4, atol=1e-4):
        print(f"FAILED: max abs error {error}")
        return 1
    print(f"matmul_tiled: {m}x{k} @ {k}x{n} OK (max abs error {error:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
