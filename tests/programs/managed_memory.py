"""Managed memory, the way cuda-python programs use it: one cudaMallocManaged
pointer written by the host through numpy, advised, attached to a stream,
prefetched to the device, updated by a kernel, prefetched back and read by
the host through the same pointer."""

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

saxpy = """\
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
"""


def location(kind, ident=0):
    loc = runtime.cudaMemLocation()
    loc.type = kind
    loc.id = ident
    return loc


def main():
    dev = findCudaDevice()
    A = runtime.cudaDeviceAttr
    if not deviceAttribute(A.cudaDevAttrManagedMemory, dev):
        print("Managed memory is not supported: waived")
        return 0
    concurrent = deviceAttribute(A.cudaDevAttrConcurrentManagedAccess, dev)
    kernel = KernelHelper(saxpy, dev, "saxpy.cu").get("saxpy")

    n = 3000
    nbytes = n * 4
    x_ptr = checkCudaErrors(runtime.cudaMallocManaged(nbytes, runtime.cudaMemAttachGlobal))
    y_ptr = checkCudaErrors(runtime.cudaMallocManaged(nbytes, runtime.cudaMemAttachGlobal))
    x = host_array(x_ptr, n)
    y = host_array(y_ptr, n)
    x[:] = np.arange(n, dtype=np.float32)
    y[:] = 1.0

    stream = checkCudaErrors(runtime.cudaStreamCreate())
    on_device = location(runtime.cudaMemLocationType.cudaMemLocationTypeDevice, dev)
    on_host = location(runtime.cudaMemLocationType.cudaMemLocationTypeHost)
    checkCudaErrors(runtime.cudaMemAdvise(x_ptr, nbytes,
                                          runtime.cudaMemoryAdvise.cudaMemAdviseSetReadMostly,
                                          on_device))
    checkCudaErrors(runtime.cudaStreamAttachMemAsync(stream, y_ptr, 0,
                                                     runtime.cudaMemAttachSingle))
    if concurrent:
        checkCudaErrors(runtime.cudaMemPrefetchAsync(x_ptr, nbytes, on_device, 0, stream))
        checkCudaErrors(runtime.cudaMemPrefetchAsync(y_ptr, nbytes, on_device, 0, stream))

    sms = deviceAttribute(A.cudaDevAttrMultiProcessorCount, dev)
    launch(kernel, 2 * sms, 128, (2.0, x_ptr, y_ptr, n),
           (ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int), stream)
    if concurrent:
        checkCudaErrors(runtime.cudaMemPrefetchAsync(y_ptr, nbytes, on_host, 0, stream))
    checkCudaErrors(runtime.cudaStreamSynchronize(stream))

    ok = np.array_equal(y, 2.0 * np.arange(n, dtype=np.float32) + 1.0)
    checkCudaErrors(runtime.cudaStreamDestroy(stream))
    checkCudaErrors(runtime.cudaFree(x_ptr))
    checkCudaErrors(runtime.cudaFree(y_ptr))
    print("managedMemory:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
