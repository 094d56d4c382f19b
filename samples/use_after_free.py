"""Use-after-free: the kernel reads a freed buffer (use_after_free.cu line 8).

The program frees ``d_in`` right after uploading it ("the data is on the
device now") and only then launches ``scale``, which reads ``in[i]`` from the
freed allocation. gpusafe reports it once, at the read in the kernel, noting
that the pointer came in as argument 1 of the launch, already freed: the
launch at line 62, through the program's ``launch`` helper, is the top frame
of the launch's stack.
On a GPU the freed memory usually still holds the old data, so the output
looks right.
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


def launch(kernel, blocks, threads, stream, params):
    """Launch a 1-D grid: the program launches only through here."""
    check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, stream, params.ctypes.data, 0))


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

    cu_file = Path(__file__).with_name("use_after_free.cu")
    ptx = compile_to_ptx(cu_file.read_text(), str(cu_file), arch=f"compute_{major}{minor}")
    module = check(driver.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(driver.cuModuleGetFunction(module, b"scale"))

    n = 512
    x = np.linspace(0, 1, n, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    d_in = check(driver.cuMemAlloc(x.nbytes))
    d_out = check(driver.cuMemAlloc(out.nbytes))
    check(driver.cuMemcpyHtoD(d_in, x, x.nbytes))
    check(driver.cuMemFree(d_in))  # BUG: the kernel below still reads d_in

    args = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_in)], dtype=np.uint64),
            np.array([3.0], dtype=np.float32), np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    stream = check(driver.cuStreamCreate(0))
    blocks = n // 128
    launch(kernel, blocks, 128, stream, params)
    check(driver.cuStreamSynchronize(stream))
    check(driver.cuMemcpyDtoH(out, d_out, out.nbytes))
    print(f"out[-1] = {out[-1]}")

    check(driver.cuStreamDestroy(stream))
    check(driver.cuMemFree(d_out))
    check(driver.cuModuleUnload(module))
    check(driver.cuCtxDestroy(ctx))


if __name__ == "__main__":
    main()
