"""A 2D texture with bilinear filtering, after the CUDA sample simpleTexture:
a float image copied into a CUDA array (cudaMallocArray,
cudaMemcpy2DToArray), a texture object with unnormalized coordinates,
clamp addressing and linear filtering, and a kernel that samples it a
quarter texel right of and three quarters below every texel centre; the
host compares with its own bilinear interpolation (the texture unit's
weights have 8 fractional bits, hence the tolerance)."""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver, runtime
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

simpleTexture = """\
extern "C"
__global__ void sampleKernel(float *outputData, int width, int height,
                             cudaTextureObject_t tex)
{
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        float u = x + 0.75f;
        float v = y + 1.25f;
        outputData[y * width + x] = tex2D<float>(tex, u, v);
    }
}
"""


def bilinear(image, u, v):
    """The host's reference: bilinear interpolation, edges clamped."""
    h, w = image.shape
    ub, vb = u - 0.5, v - 0.5
    i, j = np.floor(ub).astype(int), np.floor(vb).astype(int)
    a, b = ub - i, vb - j

    def at(jj, ii):
        return image[np.clip(jj, 0, h - 1), np.clip(ii, 0, w - 1)]

    return ((1 - a) * (1 - b) * at(j, i) + a * (1 - b) * at(j, i + 1)
            + (1 - a) * b * at(j + 1, i) + a * b * at(j + 1, i + 1))


def main():
    dev = findCudaDevice()
    width, height = 40, 24
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    h_data = (np.sin(xx / 5) + np.cos(yy / 7)).astype(np.float32)
    size = h_data.nbytes

    channelDesc = checkCudaErrors(runtime.cudaCreateChannelDesc(
        32, 0, 0, 0, runtime.cudaChannelFormatKind.cudaChannelFormatKindFloat))
    cuArray = checkCudaErrors(runtime.cudaMallocArray(channelDesc, width, height, 0))
    checkCudaErrors(runtime.cudaMemcpy2DToArray(
        cuArray, 0, 0, h_data, width * 4, width * 4, height,
        runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))

    texRes = runtime.cudaResourceDesc()
    texRes.resType = runtime.cudaResourceType.cudaResourceTypeArray
    texRes.res.array.array = cuArray
    texDescr = runtime.cudaTextureDesc()
    texDescr.normalizedCoords = False
    texDescr.filterMode = runtime.cudaTextureFilterMode.cudaFilterModeLinear
    # the whole list: cuda-python's addressMode[i] = ... changes a copy
    texDescr.addressMode = [runtime.cudaTextureAddressMode.cudaAddressModeClamp] * 3
    texDescr.readMode = runtime.cudaTextureReadMode.cudaReadModeElementType
    tex = checkCudaErrors(runtime.cudaCreateTextureObject(texRes, texDescr, None))

    d_output = checkCudaErrors(runtime.cudaMalloc(size))
    kernel = KernelHelper(simpleTexture, dev, "simpleTexture.cu").get("sampleKernel")
    block = 8
    grid_x, grid_y = (width + block - 1) // block, (height + block - 1) // block
    checkCudaErrors(driver.cuLaunchKernel(
        kernel, grid_x, grid_y, 1, block, block, 1, 0, 0,
        ((d_output, width, height, tex), (ctypes.c_void_p, ctypes.c_int, ctypes.c_int, None)),
        0))
    checkCudaErrors(runtime.cudaDeviceSynchronize())

    h_output = np.empty_like(h_data)
    checkCudaErrors(runtime.cudaMemcpy(h_output, d_output, size,
                                       runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
    checkCudaErrors(runtime.cudaDestroyTextureObject(tex))
    checkCudaErrors(runtime.cudaFreeArray(cuArray))
    checkCudaErrors(runtime.cudaFree(d_output))

    reference = bilinear(h_data.astype(np.float64), xx + 0.75, yy + 1.25)
    if np.max(np.abs(h_output - reference)) > 1.0e-2:
        print("simpleTexture FAILED", file=sys.stderr)
        return 1
    print("simpleTexture PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
