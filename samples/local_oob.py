"""Local-memory out-of-bounds: local_oob.cu line 17.

The ``fir`` kernel copies its 8 taps into a per-thread ``float coeff[8]``,
then accumulates with ``for (j = 0; j <= taps; ++j)`` (line 16), so every
thread reads ``coeff[8]`` (line 17): 4 bytes past its local array, an index
known only at run time. On a GPU the read stays inside the thread's stack
and returns garbage that is added into the result.
"""

from pathlib import Path

import cuda.bindings.driver as cuda
import numpy as np
from nvrtc import compile_to_ptx


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

    cu_file = Path(__file__).with_name("local_oob.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(cuda.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuda.cuModuleGetFunction(module, b"fir"))

    n = 256
    signal = np.cos(np.arange(n, dtype=np.float32) / 8).astype(np.float32)
    weights = np.full(8, 1 / 8, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    d_in = check(cuda.cuMemAlloc(signal.nbytes))
    d_weights = check(cuda.cuMemAlloc(weights.nbytes))
    d_out = check(cuda.cuMemAlloc(out.nbytes))
    check(cuda.cuMemcpyHtoD(d_in, signal, signal.nbytes))
    check(cuda.cuMemcpyHtoD(d_weights, weights, weights.nbytes))

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_in)], dtype=np.uint64),
            np.array([int(d_weights)], dtype=np.uint64),
            np.array([n], dtype=np.int32), np.array([len(weights)], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuda.cuLaunchKernel(kernel, n // 128, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
    check(cuda.cuCtxSynchronize())
    check(cuda.cuMemcpyDtoH(out, d_out, out.nbytes))
    print(f"out[:4] = {out[:4]}")

    for d in (d_in, d_weights, d_out):
        check(cuda.cuMemFree(d))
    check(cuda.cuModuleUnload(module))
    check(cuda.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
