"""Global out-of-bounds into a NEIGHBOURING allocation: neighbour_overflow.cu line 9.

``shift_right`` writes ``out[i + 1] = in[i]`` for every ``i < n``, so the last
thread writes ``out[n]``: 4 bytes past the end of the 4096-byte ``out``
buffer. ``gains`` is allocated right after ``out``, and 4096 is a multiple of
the driver's allocation granularity, so on a GPU that write lands on
``gains[0]``, a live buffer: no fault, nothing for a checker without red
zones to see, and ``gains[0]`` is silently overwritten (the program prints it).
"""

from pathlib import Path

import numpy as np
from cuda.bindings.driver import (
    CUdevice_attribute,
    CUresult,
    cuCtxCreate,
    cuCtxDestroy,
    cuCtxSynchronize,
    cuDeviceGet,
    cuDeviceGetAttribute,
    cuInit,
    cuLaunchKernel,
    cuMemAlloc,
    cuMemcpyDtoH,
    cuMemcpyHtoD,
    cuMemFree,
    cuModuleGetFunction,
    cuModuleLoadData,
    cuModuleUnload,
)
from nvrtc import compile_to_ptx


def check(result):
    """Raise on a non-success CUresult; return the call's other results."""
    err, *values = result
    if err != CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return values[0] if len(values) == 1 else values


def main():
    check(cuInit(0))
    dev = check(cuDeviceGet(0))
    major = check(cuDeviceGetAttribute(
        CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cuDeviceGetAttribute(
        CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    try:
        ctx = check(cuCtxCreate(None, 0, dev))  # cuda-bindings 13: (params, flags, dev)
    except TypeError:
        ctx = check(cuCtxCreate(0, dev))  # cuda-bindings 12: (flags, dev)

    cu_file = Path(__file__).with_name("neighbour_overflow.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuModuleGetFunction(module, b"shift_right"))

    n = 1024  # 4096 bytes per buffer
    signal = np.sin(np.arange(n, dtype=np.float32))
    gains = np.ones(n, dtype=np.float32)
    d_in = check(cuMemAlloc(signal.nbytes))
    d_out = check(cuMemAlloc(signal.nbytes))
    d_gains = check(cuMemAlloc(gains.nbytes))  # the neighbour of d_out
    check(cuMemcpyHtoD(d_in, signal, signal.nbytes))
    check(cuMemcpyHtoD(d_gains, gains, gains.nbytes))

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_in)], dtype=np.uint64),
            np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuLaunchKernel(kernel, n // 256, 1, 1, 256, 1, 1, 0, 0, params.ctypes.data, 0))
    check(cuCtxSynchronize())
    check(cuMemcpyDtoH(gains, d_gains, gains.nbytes))
    print(f"gains[0] = {gains[0]} (it was 1.0)")

    for d in (d_in, d_out, d_gains):
        check(cuMemFree(d))
    check(cuModuleUnload(module))
    check(cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
