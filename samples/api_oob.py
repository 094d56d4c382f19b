"""API out-of-bounds: a cuMemcpyHtoD larger than its allocation (line 71).

``d_values`` holds ``n`` floats (4000 bytes), but the host array carries a
trailing sentinel (``n + 1`` floats) and the upload copies ``values.nbytes``
= 4004 bytes (the ``cuMemcpyHtoD(d_values, ...)`` line): 4 bytes past the
end of the allocation. On a GPU the driver performs the copy into the
allocation's alignment slack and the program finishes; gpusafe refuses the
copy with CUDA_ERROR_INVALID_VALUE, so under gpusafe the program stops there.
"""

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

SOURCE = r"""
extern "C" __global__ void negate(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = -in[i];
}
"""


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

    ptx = compile_to_ptx(SOURCE, "api_oob_kernels.cu", arch=f"compute_{major}{minor}")
    module = check(cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuModuleGetFunction(module, b"negate"))

    n = 1000
    values = np.append(np.linspace(0, 1, n, dtype=np.float32), np.float32(-1))  # -1: end marker
    out = np.zeros(n, dtype=np.float32)
    d_values = check(cuMemAlloc(4 * n))
    d_out = check(cuMemAlloc(out.nbytes))
    check(cuMemcpyHtoD(d_values, values, values.nbytes))  # BUG: n + 1 floats into n

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_values)], dtype=np.uint64),
            np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuLaunchKernel(kernel, (n + 255) // 256, 1, 1, 256, 1, 1, 0, 0, params.ctypes.data, 0))
    check(cuCtxSynchronize())
    check(cuMemcpyDtoH(out, d_out, out.nbytes))
    print(f"out[-2:] = {out[-2:]}")

    for d in (d_values, d_out):
        check(cuMemFree(d))
    check(cuModuleUnload(module))
    check(cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
