"""Shared-memory out-of-bounds: shared_oob.cu line 16.

``pair_average`` stages each block's 128 inputs in ``__shared__ float
tile[128]`` and the next block's first input in ``halo`` (dynamic shared
memory, 4 bytes at launch). The last thread of every block reads
``tile[threadIdx.x + 1]`` = ``tile[128]``, one past the end of ``tile``,
instead of ``halo[0]`` (line 16). On a GPU dynamic shared memory follows the
static variables, so the stray read returns ``halo[0]`` and the result is
even right: the kind of bug that survives until the layout changes.
"""

from pathlib import Path

import numpy as np
from cuda.bindings import driver
from nvrtc import compile_to_ptx

BLOCK = 128  # must match BLOCK in shared_oob.cu


def check(result):
    """Raise on a non-success CUresult; return the call's other results."""
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return values[0] if len(values) == 1 else values


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

    cu_file = Path(__file__).with_name("shared_oob.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(driver.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(driver.cuModuleGetFunction(module, b"pair_average"))

    n = 1000
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    d_x = check(driver.cuMemAlloc(x.nbytes))
    d_out = check(driver.cuMemAlloc(out.nbytes))
    check(driver.cuMemcpyHtoD(d_x, x, x.nbytes))

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_x)], dtype=np.uint64),
            np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    blocks = (n + BLOCK - 1) // BLOCK
    halo_bytes = 4
    stream = check(driver.cuStreamCreate(0))
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, BLOCK, 1, 1, halo_bytes, stream,
                                params.ctypes.data, 0))
    check(driver.cuStreamSynchronize(stream))
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    print(f"out[126:130] = {out[126:130]}")

    check(driver.cuStreamDestroy(stream))
    for d in (d_x, d_out):
        check(driver.cuMemFree(d))
    check(driver.cuModuleUnload(module))
    check(driver.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
