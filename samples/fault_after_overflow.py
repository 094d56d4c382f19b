"""A launch that ends in a device fault after an out-of-bounds access
(fault_after_overflow.cu line 9, the write, and line 10, the read).

Thread ``n`` of ``fill_checked`` writes ``out[n]``, one past the end of the
4000-byte ``d_out``, and reads it back. Without gpusafe the 4 bytes land in
the allocation's slack and the program finishes. Under gpusafe the bad write
is not performed and the bad read yields 0, so the kernel's own check fails:
``__trap()`` ends the launch with an error and the program stops (exit status
1). What matters is that the two accesses recorded before the fault are
still reported (on a GPU the fault makes the context unusable, so the records
must be readable without it).
"""

from pathlib import Path

import numpy as np
from cuda.bindings import driver
from nvrtc import compile_to_ptx


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

    cu_file = Path(__file__).with_name("fault_after_overflow.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(driver.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(driver.cuModuleGetFunction(module, b"fill_checked"))

    n = 1000
    out = np.zeros(n, dtype=np.int32)
    d_out = check(driver.cuMemAlloc(out.nbytes))
    args = [np.array([int(d_out)], dtype=np.uint64), np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    blocks = (n + 127) // 128
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())  # under gpusafe: the trap's error is raised here
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    print("OK" if np.array_equal(out, 2 * np.arange(n)) else "FAILED")

    check(driver.cuMemFree(d_out))
    check(driver.cuModuleUnload(module))
    check(driver.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
