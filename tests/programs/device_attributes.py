"""Device queries, the way cuda-python's deviceQuery-style programs make
them: every cudaDeviceAttr through cudaDeviceGetAttribute, the same facts
through cudaGetDeviceProperties, and a grid-stride kernel sized from them."""

import ctypes
import sys

import numpy as np
from cuda.bindings import runtime
from cuda_helpers import KernelHelper, checkCudaErrors, deviceAttribute, findCudaDevice, launch

scale = """\
extern "C" __global__ void scale(float *data, float factor, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        data[i] = data[i] * factor;
    }
}
"""

# cudaDeviceProp fields and the attribute each mirrors
PROPERTIES = {
    "maxThreadsPerBlock": "cudaDevAttrMaxThreadsPerBlock",
    "warpSize": "cudaDevAttrWarpSize",
    "multiProcessorCount": "cudaDevAttrMultiProcessorCount",
    "major": "cudaDevAttrComputeCapabilityMajor",
    "minor": "cudaDevAttrComputeCapabilityMinor",
    "sharedMemPerBlock": "cudaDevAttrMaxSharedMemoryPerBlock",
    "canMapHostMemory": "cudaDevAttrCanMapHostMemory",
    "managedMemory": "cudaDevAttrManagedMemory",
    "concurrentManagedAccess": "cudaDevAttrConcurrentManagedAccess",
    "unifiedAddressing": "cudaDevAttrUnifiedAddressing",
    "memoryPoolsSupported": "cudaDevAttrMemoryPoolsSupported",
    "cooperativeLaunch": "cudaDevAttrCooperativeLaunch",
    "hostRegisterSupported": "cudaDevAttrHostRegisterSupported",
}


def main():
    dev = findCudaDevice()
    count = checkCudaErrors(runtime.cudaGetDeviceCount())
    values = {}
    for attr in runtime.cudaDeviceAttr:
        if attr.name == "cudaDevAttrMax" or attr.name.startswith("cudaDevAttrReserved"):
            continue
        values[attr.name] = deviceAttribute(attr, dev)
    prop = checkCudaErrors(runtime.cudaGetDeviceProperties(dev))
    mismatches = [f for f, a in PROPERTIES.items() if getattr(prop, f) != values[a]]
    if list(prop.maxThreadsDim) != [values[f"cudaDevAttrMaxBlockDim{c}"] for c in "XYZ"]:
        mismatches.append("maxThreadsDim")
    name = bytes(prop.name).split(b"\0")[0].decode()
    print(f"{count} device(s); device {dev}: {name}, "
          f"compute capability {prop.major}.{prop.minor}, {len(values)} attributes")

    kernel = KernelHelper(scale, dev, "scale.cu").get("scale")
    n = 10_000
    data = np.arange(n, dtype=np.float32)
    d_data = checkCudaErrors(runtime.cudaMalloc(data.nbytes))
    checkCudaErrors(runtime.cudaMemcpy(d_data, data, data.nbytes,
                                       runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))
    block = min(256, values["cudaDevAttrMaxThreadsPerBlock"])
    grid = values["cudaDevAttrMultiProcessorCount"]
    launch(kernel, grid, block, (d_data, 0.5, n),
           (ctypes.c_void_p, ctypes.c_float, ctypes.c_int))
    out = np.empty_like(data)
    checkCudaErrors(runtime.cudaMemcpy(out, d_data, out.nbytes,
                                       runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
    checkCudaErrors(runtime.cudaFree(d_data))
    ok = not mismatches and np.array_equal(out, data * np.float32(0.5))
    print("deviceQuery:", "PASSED" if ok else f"FAILED {mismatches}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
