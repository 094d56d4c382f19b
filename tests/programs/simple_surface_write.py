"""Surface writes and reads, after the CUDA sample simpleSurfaceWrite: a
float array made for surface load/store (cudaMallocArray with
cudaArraySurfaceLoadStore), a kernel that writes a scaled image into it
through surf2Dwrite, a second kernel that reads it back through surf2Dread
into device memory, and a copy of the array itself out through
cudaMemcpy2DFromArray; the host checks both against its reference."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver, runtime
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

simpleSurfaceWrite = """\
extern "C"
__global__ void surfaceWriteKernel(const float *gIData, int width, int height,
                                   cudaSurfaceObject_t outputSurface)
{
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        float value = gIData[y * width + x] * 2.0f;
        surf2Dwrite(value, outputSurface, x * 4, y, cudaBoundaryModeTrap);
    }
}

extern "C"
__global__ void surfaceReadKernel(float *gOData, int width, int height,
                                  cudaSurfaceObject_t inputSurface)
{
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        float value;
        surf2Dread(&value, inputSurface, x * 4, y, cudaBoundaryModeTrap);
        gOData[y * width + x] = value + 1.0f;
    }
}
"""


def main():
    dev = findCudaDevice()
    width, height = 48, 40
    h_data = np.random.default_rng(3).random((height, width), dtype=np.float32)
    size = h_data.nbytes

    d_input = checkCudaErrors(runtime.cudaMalloc(size))
    d_output = checkCudaErrors(runtime.cudaMalloc(size))
    checkCudaErrors(runtime.cudaMemcpy(d_input, h_data, size,
                                       runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))
    channelDesc = checkCudaErrors(runtime.cudaCreateChannelDesc(
        32, 0, 0, 0, runtime.cudaChannelFormatKind.cudaChannelFormatKindFloat))
    cuArray = checkCudaErrors(runtime.cudaMallocArray(channelDesc, width, height,
                                                      runtime.cudaArraySurfaceLoadStore))
    surfRes = runtime.cudaResourceDesc()
    surfRes.resType = runtime.cudaResourceType.cudaResourceTypeArray
    surfRes.res.array.array = cuArray
    surface = checkCudaErrors(runtime.cudaCreateSurfaceObject(surfRes))

    kernels = KernelHelper(simpleSurfaceWrite, dev, "simpleSurfaceWrite.cu")
    block = 8
    grid_x, grid_y = (width + block - 1) // block, (height + block - 1) // block
    types = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int, None)
    checkCudaErrors(driver.cuLaunchKernel(
        kernels.get("surfaceWriteKernel"), grid_x, grid_y, 1, block, block, 1, 0, 0,
        ((d_input, width, height, surface), types), 0))
    checkCudaErrors(driver.cuLaunchKernel(
        kernels.get("surfaceReadKernel"), grid_x, grid_y, 1, block, block, 1, 0, 0,
        ((d_output, width, height, surface), types), 0))
    checkCudaErrors(runtime.cudaDeviceSynchronize())

    h_read = np.empty_like(h_data)
    checkCudaErrors(runtime.cudaMemcpy(h_read, d_output, size,
                                       runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
    h_array = np.empty_like(h_data)
    checkCudaErrors(runtime.cudaMemcpy2DFromArray(
        h_array, width * 4, cuArray, 0, 0, width * 4, height,
        runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))

    checkCudaErrors(runtime.cudaDestroySurfaceObject(surface))
    checkCudaErrors(runtime.cudaFreeArray(cuArray))
    for p in (d_input, d_output):
        checkCudaErrors(runtime.cudaFree(p))

    if not (np.array_equal(h_array, h_data * 2) and np.array_equal(h_read, h_data * 2 + 1)):
        print("simpleSurfaceWrite FAILED", file=sys.stderr)
        return 1
    print("simpleSurfaceWrite PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
