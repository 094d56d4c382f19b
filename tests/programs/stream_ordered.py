"""Stream-ordered allocation, after cuda-python's streamOrderedAllocation
example: the device's default pool with a release threshold, cudaMallocAsync
and cudaFreeAsync in one stream around a kernel, then an explicit pool
(cudaMemPoolCreate, cudaMallocFromPoolAsync) and its usage attributes."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver, runtime
from cuda_helpers import KernelHelper, checkCudaErrors, deviceAttribute, findCudaDevice, launch

vectorAdd = """\
extern "C" __global__ void vectorAddGPU(const float *a, const float *b, float *c, int n)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        c[idx] = a[idx] + b[idx];
    }
}
"""

H2D = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
D2H = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost


def vector_add(kernel, stream, alloc, a, b):
    """c = a + b with every device buffer stream-ordered: ``alloc(nbytes)``."""
    n = a.size
    d_a, d_b, d_c = alloc(a.nbytes), alloc(a.nbytes), alloc(a.nbytes)
    checkCudaErrors(runtime.cudaMemcpyAsync(d_a, a, a.nbytes, H2D, stream))
    checkCudaErrors(runtime.cudaMemcpyAsync(d_b, b, b.nbytes, H2D, stream))
    block = 256
    launch(kernel, (n + block - 1) // block, block, (d_a, d_b, d_c, n),
           (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int), stream)
    c = np.empty_like(a)
    checkCudaErrors(runtime.cudaMemcpyAsync(c, d_c, c.nbytes, D2H, stream))
    for p in (d_a, d_b, d_c):
        checkCudaErrors(runtime.cudaFreeAsync(p, stream))
    checkCudaErrors(runtime.cudaStreamSynchronize(stream))
    return c


def main():
    dev = findCudaDevice()
    if not deviceAttribute(runtime.cudaDeviceAttr.cudaDevAttrMemoryPoolsSupported, dev):
        print("Memory pools are not supported: waived")
        return 0
    kernel = KernelHelper(vectorAdd, dev, "vectorAdd.cu").get("vectorAddGPU")
    stream = checkCudaErrors(runtime.cudaStreamCreateWithFlags(runtime.cudaStreamNonBlocking))
    rng = np.random.default_rng(3)
    a = rng.random(5000, dtype=np.float32)
    b = rng.random(5000, dtype=np.float32)

    # the default pool, keeping what it holds between synchronisations
    pool = checkCudaErrors(runtime.cudaDeviceGetDefaultMemPool(dev))
    threshold = driver.cuuint64_t(0xFFFFFFFFFFFFFFFF)
    checkCudaErrors(runtime.cudaMemPoolSetAttribute(
        pool, runtime.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold, threshold))
    c = vector_add(kernel, stream,
                   lambda nbytes: checkCudaErrors(runtime.cudaMallocAsync(nbytes, stream)), a, b)
    ok = np.allclose(c, a + b)

    # a pool of our own
    props = runtime.cudaMemPoolProps()
    props.allocType = runtime.cudaMemAllocationType.cudaMemAllocationTypePinned
    props.location.type = runtime.cudaMemLocationType.cudaMemLocationTypeDevice
    props.location.id = dev
    own = checkCudaErrors(runtime.cudaMemPoolCreate(props))
    c = vector_add(kernel, stream,
                   lambda nbytes: checkCudaErrors(
                       runtime.cudaMallocFromPoolAsync(nbytes, own, stream)), a, b)
    ok = ok and np.allclose(c, a + b)
    high = checkCudaErrors(runtime.cudaMemPoolGetAttribute(
        own, runtime.cudaMemPoolAttr.cudaMemPoolAttrUsedMemHigh))
    ok = ok and int(high) >= 3 * a.nbytes
    checkCudaErrors(runtime.cudaMemPoolTrimTo(own, 0))
    checkCudaErrors(runtime.cudaMemPoolDestroy(own))
    checkCudaErrors(runtime.cudaStreamDestroy(stream))
    print("streamOrderedAllocation:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
