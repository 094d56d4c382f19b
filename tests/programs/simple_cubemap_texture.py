"""Cubemap texture fetches, after cuda-python's simpleCubemapTexture example:
a float cubemap array (cudaMalloc3DArray with cudaArrayCubemap) filled by
cudaMemcpy3D from host memory, a texture object with normalized coordinates,
wrap addressing and linear filtering, and a kernel that reads every texel of
every face through texCubemap at the face's direction; the host checks the
negated data came back."""

import ctypes
import sys

import numpy as np
from cuda.bindings import runtime
from cuda_helpers import KernelHelper, checkCudaErrors, findCudaDevice

simpleCubemapTexture = """\
extern "C"
__global__ void transformKernel(float *g_odata, int width, cudaTextureObject_t tex)
{
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    // texel centres: no interpolation between texels
    float u = ((x + 0.5f) / (float) width) * 2.f - 1.f;
    float v = ((y + 0.5f) / (float) width) * 2.f - 1.f;
    float cx, cy, cz;
    for (unsigned int face = 0; face < 6; face++) {
        if (face == 0)      { cx = 1;  cy = -v; cz = -u; }
        else if (face == 1) { cx = -1; cy = -v; cz = u;  }
        else if (face == 2) { cx = u;  cy = 1;  cz = v;  }
        else if (face == 3) { cx = u;  cy = -1; cz = -v; }
        else if (face == 4) { cx = u;  cy = -v; cz = 1;  }
        else                { cx = -u; cy = -v; cz = -1; }
        g_odata[face * width * width + y * width + x] = -texCubemap<float>(tex, cx, cy, cz);
    }
}
"""


def main():
    dev = findCudaDevice()
    width = 32
    num_faces = 6
    cubemap_size = width * width * num_faces
    h_data = np.arange(cubemap_size, dtype=np.float32)
    size = h_data.nbytes
    h_data_ref = -h_data

    d_data = checkCudaErrors(runtime.cudaMalloc(size))
    channelDesc = checkCudaErrors(runtime.cudaCreateChannelDesc(
        32, 0, 0, 0, runtime.cudaChannelFormatKind.cudaChannelFormatKindFloat))
    cu_3darray = checkCudaErrors(runtime.cudaMalloc3DArray(
        channelDesc, runtime.make_cudaExtent(width, width, num_faces), runtime.cudaArrayCubemap))
    myparms = runtime.cudaMemcpy3DParms()
    myparms.srcPos = runtime.make_cudaPos(0, 0, 0)
    myparms.dstPos = runtime.make_cudaPos(0, 0, 0)
    myparms.srcPtr = runtime.make_cudaPitchedPtr(h_data, h_data[:width].nbytes, width, width)
    myparms.dstArray = cu_3darray
    myparms.extent = runtime.make_cudaExtent(width, width, num_faces)
    myparms.kind = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
    checkCudaErrors(runtime.cudaMemcpy3D(myparms))

    texRes = runtime.cudaResourceDesc()
    texRes.resType = runtime.cudaResourceType.cudaResourceTypeArray
    texRes.res.array.array = cu_3darray
    texDescr = runtime.cudaTextureDesc()
    texDescr.normalizedCoords = True
    texDescr.filterMode = runtime.cudaTextureFilterMode.cudaFilterModeLinear
    for i in range(3):
        texDescr.addressMode[i] = runtime.cudaTextureAddressMode.cudaAddressModeWrap
    texDescr.readMode = runtime.cudaTextureReadMode.cudaReadModeElementType
    tex = checkCudaErrors(runtime.cudaCreateTextureObject(texRes, texDescr, None))

    kernel = KernelHelper(simpleCubemapTexture, dev, "simpleCubemapTexture.cu").get(
        "transformKernel")
    block = 8
    grid = width / block  # a float, as NVIDIA's example passes it
    from cuda.bindings import driver
    checkCudaErrors(driver.cuLaunchKernel(
        kernel, grid, grid, 1, block, block, 1, 0, 0,
        ((d_data, width, tex), (ctypes.c_void_p, ctypes.c_int, None)), 0))
    checkCudaErrors(runtime.cudaDeviceSynchronize())

    h_odata = np.empty_like(h_data)
    checkCudaErrors(runtime.cudaMemcpy(h_odata, d_data, size,
                                       runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
    checkCudaErrors(runtime.cudaDestroyTextureObject(tex))
    checkCudaErrors(runtime.cudaFree(d_data))
    checkCudaErrors(runtime.cudaFreeArray(cu_3darray))

    if np.max(np.abs(h_odata - h_data_ref)) > 5.0e-3:
        print("simpleCubemapTexture FAILED", file=sys.stderr)
        return 1
    print("simpleCubemapTexture PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
