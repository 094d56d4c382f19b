"""Null-pointer access: null_pointer.cu line 7.

``add_bias(x, bias, n)`` treats ``bias`` as optional, and the host passes 0
("no bias") -- but the kernel reads ``bias[i]`` unconditionally (line 7).
On a GPU the launch fails with CUDA_ERROR_ILLEGAL_ADDRESS and the program
stops with that error (no crash, nothing corrupted). Under gpusafe the read
is reported and yields 0, so ``x`` comes back unchanged.
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

    cu_file = Path(__file__).with_name("null_pointer.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(cuda.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuda.cuModuleGetFunction(module, b"add_bias"))

    n = 256
    x = np.ones(n, dtype=np.float32)
    d_x = check(cuda.cuMemAlloc(x.nbytes))
    check(cuda.cuMemcpyHtoD(d_x, x, x.nbytes))
    bias = 0  # no bias

    args = [np.array([int(d_x)], dtype=np.uint64), np.array([bias], dtype=np.uint64),
            np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuda.cuLaunchKernel(kernel, n // 128, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
    check(cuda.cuCtxSynchronize())
    check(cuda.cuMemcpyDtoH(x, d_x, x.nbytes))
    print(f"x[:4] = {x[:4]}")

    check(cuda.cuMemFree(d_x))
    check(cuda.cuModuleUnload(module))
    check(cuda.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
