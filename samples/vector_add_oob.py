"""Global out-of-bounds, off by one: vector_add_oob.cu line 7.

The kernel's bounds test is ``i <= n`` instead of ``i < n`` (line 6), so the
thread with ``i == n`` reads ``a[n]`` and ``b[n]`` and writes ``out[n]``: one
float past the end of each 4000-byte buffer (line 7). On a GPU the stray
bytes fall in the allocations' alignment slack, so the program runs to the
end and its results look right; the bug waits for a size that is a multiple
of 256 bytes.
"""

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

    cu_file = Path(__file__).with_name("vector_add_oob.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(driver.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(driver.cuModuleGetFunction(module, b"vector_add"))

    n = 1000
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 2.0, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    d_a = check(driver.cuMemAlloc(a.nbytes))
    d_b = check(driver.cuMemAlloc(b.nbytes))
    d_out = check(driver.cuMemAlloc(out.nbytes))
    check(driver.cuMemcpyHtoD(d_a, a, a.nbytes))
    check(driver.cuMemcpyHtoD(d_b, b, b.nbytes))

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_a)], dtype=np.uint64),
            np.array([int(d_b)], dtype=np.uint64), np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    threads = 256
    blocks = (n + threads - 1) // threads
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    print(f"out[:4] = {out[:4]}, out[-1] = {out[-1]}")

    for d in (d_a, d_b, d_out):
        check(driver.cuMemFree(d))
    check(driver.cuModuleUnload(module))
    check(driver.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
