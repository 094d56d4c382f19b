"""Vector addition in memory mapped with the virtual memory management API,
after cuda-python's vectorAddMMAP example: for each buffer, physical memory
(cuMemCreate) rounded to the allocation granularity, a reserved address
range (cuMemAddressReserve), a mapping (cuMemMap) made read-write for the
device (cuMemSetAccess); then copies, the kernel, the check, and the
teardown (cuMemUnmap, cuMemAddressFree)."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

vectorAdd = """\
extern "C" __global__ void VecAdd_kernel(const float *A, const float *B, float *C, int N)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < N) {
        C[i] = A[i] + B[i];
    }
}
"""


def round_up(x, y):
    return ((x + y - 1) // y) * y


def simpleMallocMmap(size, device):
    """A device buffer of at least ``size`` bytes: (pointer, reserved size)."""
    prop = driver.CUmemAllocationProp()
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    granularity = checkCudaErrors(driver.cuMemGetAllocationGranularity(
        prop, driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
    size = round_up(size, granularity)
    dptr = checkCudaErrors(driver.cuMemAddressReserve(size, 0, 0, 0))
    handle = checkCudaErrors(driver.cuMemCreate(size, prop, 0))
    checkCudaErrors(driver.cuMemMap(dptr, size, 0, handle, 0))
    checkCudaErrors(driver.cuMemRelease(handle))  # the mapping keeps the memory
    access = driver.CUmemAccessDesc()
    access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = device
    access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    checkCudaErrors(driver.cuMemSetAccess(dptr, size, [access], 1))
    return dptr, size


def simpleFreeMmap(dptr, size):
    checkCudaErrors(driver.cuMemUnmap(dptr, size))
    checkCudaErrors(driver.cuMemAddressFree(dptr, size))


def main():
    dev = findCudaDevice()
    cudev = checkCudaErrors(driver.cuDeviceGet(dev))
    if not checkCudaErrors(driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
            cudev)):
        print("Device doesn't support virtual memory management: waived")
        return 0
    kernel = KernelHelper(vectorAdd, dev, "vectorAddMMAP.cu").get("VecAdd_kernel")

    n = 50000
    nbytes = n * np.dtype(np.float32).itemsize
    rng = np.random.default_rng(11)
    h_A = rng.random(n, dtype=np.float32)
    h_B = rng.random(n, dtype=np.float32)
    d_A, size_A = simpleMallocMmap(nbytes, dev)
    d_B, size_B = simpleMallocMmap(nbytes, dev)
    d_C, size_C = simpleMallocMmap(nbytes, dev)
    checkCudaErrors(driver.cuMemcpyHtoD(d_A, h_A, nbytes))
    checkCudaErrors(driver.cuMemcpyHtoD(d_B, h_B, nbytes))

    block = 256
    grid = (n + block - 1) // block
    checkCudaErrors(driver.cuLaunchKernel(
        kernel, grid, 1, 1, block, 1, 1, 0, 0,
        ((d_A, d_B, d_C, n), (None, None, None, ctypes.c_int)), 0))
    checkCudaErrors(driver.cuCtxSynchronize())
    h_C = np.empty(n, dtype=np.float32)
    checkCudaErrors(driver.cuMemcpyDtoH(h_C, d_C, nbytes))

    for dptr, size in ((d_A, size_A), (d_B, size_B), (d_C, size_C)):
        simpleFreeMmap(dptr, size)
    ok = np.allclose(h_C, h_A + h_B)
    print("vectorAddMMAP:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
