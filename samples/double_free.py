"""Double free: the cleanup loop frees ``d_tmp`` a second time (line 73).

``d_tmp`` (the 2nd allocation) is scratch space for the first pass and is
freed as soon as that pass is done; the cleanup loop at the end frees it
again (the ``free(d)`` of the program's helper in the ``for d in (d_x, d_tmp)``
loop). The driver
refuses the second free with CUDA_ERROR_INVALID_VALUE, so the program stops
there with that error, on a GPU as under gpusafe; gpusafe also says where the
buffer was allocated and where it was first freed.
"""

import numpy as np
from cuda.bindings import driver
from nvrtc import compile_to_ptx

SOURCE = r"""
extern "C" __global__ void square(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = in[i] * in[i];
}
"""


def check(result):
    """Raise on a non-success CUresult; return the call's other results."""
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return values[0] if len(values) == 1 else values


def free(d):
    """Give device memory back: the cleanup frees through here."""
    check(driver.cuMemFree(d))


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

    ptx = compile_to_ptx(SOURCE, "double_free_kernels.cu", arch=f"compute_{major}{minor}")
    module = check(driver.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(driver.cuModuleGetFunction(module, b"square"))

    n = 256
    x = np.arange(n, dtype=np.float32)
    d_x = check(driver.cuMemAlloc(x.nbytes))
    d_tmp = check(driver.cuMemAlloc(x.nbytes))
    check(driver.cuMemcpyHtoD(d_x, x, x.nbytes))

    # first pass: tmp = x * x; second pass: x = tmp * tmp
    for out, inp in ((d_tmp, d_x), (d_x, d_tmp)):
        args = [np.array([int(out)], dtype=np.uint64), np.array([int(inp)], dtype=np.uint64),
                np.array([n], dtype=np.int32)]
        params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
        check(driver.cuLaunchKernel(kernel, n // 128, 1, 1, 128, 1, 1, 0, 0,
                                    params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    check(driver.cuMemcpyDtoH(x, d_x, x.nbytes))
    check(driver.cuMemFree(d_tmp))  # scratch no longer needed
    print(f"x[:4] = {x[:4]}")

    for d in (d_x, d_tmp):
        free(d)  # BUG: d_tmp was already freed above
    check(driver.cuModuleUnload(module))
    check(driver.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
