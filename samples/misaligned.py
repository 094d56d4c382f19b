"""Misaligned access: misaligned.cu line 9.

The host packs records as a 1-byte flag followed by a float (numpy
structured dtype, 5 bytes per record, no padding). ``record_values`` reads
each float through a ``float*`` at ``records + 5 * i + 1``: a 4-byte load
from an address that is not a multiple of 4 (line 9), first at byte 1 of the
records buffer. A GPU cannot perform it: the launch fails with
CUDA_ERROR_MISALIGNED_ADDRESS and the program stops with that error (no
crash, nothing corrupted). Under gpusafe the load is reported and yields 0.
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

    cu_file = Path(__file__).with_name("misaligned.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuModuleGetFunction(module, b"record_values"))

    n = 256
    records = np.zeros(n, dtype=np.dtype([("flag", "u1"), ("value", "<f4")]))  # 5-byte records
    records["flag"] = 1
    records["value"] = np.arange(n)
    out = np.zeros(n, dtype=np.float32)
    d_records = check(cuMemAlloc(records.nbytes))
    d_out = check(cuMemAlloc(out.nbytes))
    check(cuMemcpyHtoD(d_records, records, records.nbytes))

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_records)], dtype=np.uint64),
            np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuLaunchKernel(kernel, n // 128, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
    check(cuCtxSynchronize())
    check(cuMemcpyDtoH(out, d_out, out.nbytes))
    print(f"out[:4] = {out[:4]}")

    for d in (d_records, d_out):
        check(cuMemFree(d))
    check(cuModuleUnload(module))
    check(cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
