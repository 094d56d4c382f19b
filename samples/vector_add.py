"""Correct: vector add on a stream, checked against numpy (exit status 1 if wrong).

The fixed version of vector_add_oob.py: bounds test ``i < n``.
"""

import sys
from pathlib import Path

import numpy as np
from cuda.bindings import driver
from nvrtc import compile_to_ptx


def check(result):
    """Raise on a non-success CUresult; return the call's other results."""
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return values[0] if len(values) == 1 else values


def main():
    check(driver.cuInit(0))
    dev = check(driver.cuDeviceGet(0))
    attr = driver.CUdevice_attribute
    major = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    try:
        ctx = check(driver.cuCtxCreate(None, 0, dev))  # cuda-bindings 13: (params, flags, dev)
    except TypeError:
        ctx = check(driver.cuCtxCreate(0, dev))  # cuda-bindings 12: (flags, dev)

    cu_file = Path(__file__).with_name("vector_add.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(driver.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(driver.cuModuleGetFunction(module, b"vector_add"))

    n = 1000
    rng = np.random.default_rng(7)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    d_a = check(driver.cuMemAlloc(a.nbytes))
    d_b = check(driver.cuMemAlloc(b.nbytes))
    d_out = check(driver.cuMemAlloc(out.nbytes))
    stream = check(driver.cuStreamCreate(0))
    check(driver.cuMemcpyHtoDAsync(d_a, a.ctypes.data, a.nbytes, stream))
    check(driver.cuMemcpyHtoDAsync(d_b, b.ctypes.data, b.nbytes, stream))

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_a)], dtype=np.uint64),
            np.array([int(d_b)], dtype=np.uint64), np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    threads = 256
    blocks = (n + threads - 1) // threads
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, stream,
                                params.ctypes.data, 0))
    check(driver.cuMemcpyDtoHAsync(out.ctypes.data, d_out, out.nbytes, stream))
    check(driver.cuStreamSynchronize(stream))

    check(driver.cuStreamDestroy(stream))
    for d in (d_a, d_b, d_out):
        check(driver.cuMemFree(d))
    check(driver.cuModuleUnload(module))
    check(driver.cuCtxDestroy(ctx))

    if not np.array_equal(out, a + b):
        bad = np.flatnonzero(out != a + b)
        print(f"FAILED: {bad.size} wrong elements, first at {bad[0]}: "
              f"{out[bad[0]]} != {a[bad[0]] + b[bad[0]]}")
        return 1
    print(f"vector_add: {n} elements OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
