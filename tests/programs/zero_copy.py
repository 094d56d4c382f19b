"""Zero-copy vector addition, after cuda-python's simpleZeroCopy example:
the inputs are mapped pinned memory (cudaHostAlloc with cudaHostAllocMapped)
and registered program memory (cudaHostRegister), the output mapped pinned
memory; the kernel reads and writes host memory through the device pointers
cudaHostGetDevicePointer gives, and the host checks the result in place."""

import ctypes
import sys

import numpy as np
from cuda.bindings import runtime
from cuda_helpers import (
    KernelHelper,
    checkCudaErrors,
    deviceAttribute,
    findCudaDevice,
    host_array,
    launch,
)

vectorAdd = """\
extern "C" __global__ void vectorAddGPU(const float *a, const float *b, float *c, int n)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        c[idx] = a[idx] + b[idx];
    }
}
"""


def main():
    dev = findCudaDevice()
    if not deviceAttribute(runtime.cudaDeviceAttr.cudaDevAttrCanMapHostMemory, dev):
        print("Device cannot map host memory: waived")
        return 0
    checkCudaErrors(runtime.cudaSetDeviceFlags(runtime.cudaDeviceMapHost))
    kernel = KernelHelper(vectorAdd, dev, "vectorAdd.cu").get("vectorAddGPU")

    nelem = 1 << 12
    nbytes = nelem * np.dtype(np.float32).itemsize
    flags = runtime.cudaHostAllocMapped
    a_ptr = checkCudaErrors(runtime.cudaHostAlloc(nbytes, flags))
    c_ptr = checkCudaErrors(runtime.cudaHostAlloc(nbytes, flags))
    b = np.empty(nelem, dtype=np.float32)  # program memory, registered below
    checkCudaErrors(runtime.cudaHostRegister(b.ctypes.data, nbytes, runtime.cudaHostRegisterMapped))

    a = host_array(a_ptr, nelem)
    c = host_array(c_ptr, nelem)
    rng = np.random.default_rng(7)
    a[:] = rng.random(nelem, dtype=np.float32)
    b[:] = rng.random(nelem, dtype=np.float32)

    d_a = checkCudaErrors(runtime.cudaHostGetDevicePointer(a_ptr, 0))
    d_b = checkCudaErrors(runtime.cudaHostGetDevicePointer(b.ctypes.data, 0))
    d_c = checkCudaErrors(runtime.cudaHostGetDevicePointer(c_ptr, 0))

    block = 256
    grid = (nelem + block - 1) // block
    launch(kernel, grid, block, (d_a, d_b, d_c, nelem),
           (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))
    checkCudaErrors(runtime.cudaDeviceSynchronize())

    errors = np.count_nonzero(np.abs(c - (a + b)) > 1e-6)
    checkCudaErrors(runtime.cudaHostUnregister(b.ctypes.data))
    checkCudaErrors(runtime.cudaFreeHost(a_ptr))
    checkCudaErrors(runtime.cudaFreeHost(c_ptr))
    if errors:
        print(f"simpleZeroCopy: {errors} wrong results")
        return 1
    print("simpleZeroCopy: PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
