"""Invalid free: freeing a pointer 16 bytes into an allocation (line 64).

The program keeps a 16-byte header (the element count) and the payload in
one allocation, and passes ``d_payload = d_block + 16`` around. Its cleanup
frees ``d_payload`` instead of ``d_block`` (the ``cuMemFree(d_payload)``
line): not the base of any allocation. The driver refuses it with
CUDA_ERROR_INVALID_VALUE, so the program stops there with that error, on a
GPU as under gpusafe; gpusafe also names the allocation the pointer is in.
"""

import cuda.bindings.driver as cuda
import numpy as np
from nvrtc import compile_to_ptx

HEADER = 16  # bytes before the payload

SOURCE = r"""
extern "C" __global__ void fill(int* payload, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        payload[i] = 10 * i;
}
"""


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

    ptx = compile_to_ptx(SOURCE, "invalid_free_kernels.cu", arch=f"compute_{major}{minor}")
    module = check(cuda.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(cuda.cuModuleGetFunction(module, b"fill"))

    n = 200
    header = np.array([n, 0, 0, 0], dtype=np.int32)
    d_block = check(cuda.cuMemAlloc(HEADER + 4 * n))
    d_payload = cuda.CUdeviceptr(int(d_block) + HEADER)
    check(cuda.cuMemcpyHtoD(d_block, header, HEADER))

    args = [np.array([int(d_payload)], dtype=np.uint64), np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuda.cuLaunchKernel(kernel, 2, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
    check(cuda.cuCtxSynchronize())
    payload = np.zeros(n, dtype=np.int32)
    check(cuda.cuMemcpyDtoH(payload, d_payload, payload.nbytes))
    print(f"payload[:4] = {payload[:4]}")

    check(cuda.cuMemFree(d_payload))  # BUG: d_block is the allocation
    check(cuda.cuModuleUnload(module))
    check(cuda.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
