"""What the memory-kind programs share, the way cuda-python's examples share
``common/helper_cuda.py``: error checking, device selection and NVRTC.

Plain cuda-python, nothing of gpusafe: the programs beside it run unchanged
on a GPU and under ``gpusafe run --device cpu``.
"""

from __future__ import annotations

import ctypes

import numpy as np
from cuda.bindings import driver, nvrtc, runtime


def checkCudaErrors(result):
    """The outputs of a CUDA call; any error raises, naming it."""
    err, *values = result
    if isinstance(err, driver.CUresult) and err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    if isinstance(err, runtime.cudaError_t) and err != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"CUDA error {err.name}")
    if isinstance(err, nvrtc.nvrtcResult) and err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC error {err.name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def findCudaDevice() -> int:
    """Device 0, made current through the runtime (its primary context)."""
    checkCudaErrors(runtime.cudaSetDevice(0))
    return 0


def deviceAttribute(attr: runtime.cudaDeviceAttr, dev: int) -> int:
    return checkCudaErrors(runtime.cudaDeviceGetAttribute(attr, dev))


class KernelHelper:
    """One CUDA C++ source compiled by NVRTC for the device's architecture,
    loaded as a module; ``get(name)`` gives a kernel."""

    def __init__(self, source: str, dev: int, name: str = "kernels.cu") -> None:
        A = runtime.cudaDeviceAttr
        major = deviceAttribute(A.cudaDevAttrComputeCapabilityMajor, dev)
        minor = deviceAttribute(A.cudaDevAttrComputeCapabilityMinor, dev)
        prog = checkCudaErrors(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(),
                                                        0, [], []))
        opts = [f"--gpu-architecture=compute_{major}{minor}".encode(), b"-lineinfo"]
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = checkCudaErrors(nvrtc.nvrtcGetProgramLogSize(prog))
            log = b" " * size
            checkCudaErrors(nvrtc.nvrtcGetProgramLog(prog, log))
            raise RuntimeError(log.decode())
        size = checkCudaErrors(nvrtc.nvrtcGetPTXSize(prog))
        ptx = b" " * size
        checkCudaErrors(nvrtc.nvrtcGetPTX(prog, ptx))
        self.module = checkCudaErrors(driver.cuModuleLoadData(ptx))

    def get(self, name: str):
        return checkCudaErrors(driver.cuModuleGetFunction(self.module, name.encode()))


def launch(kernel, grid: int, block: int, args: tuple, types: tuple, stream=0) -> None:
    """``kernel<<<grid, block, 0, stream>>>(args...)`` in the tuple form of kernelParams."""
    checkCudaErrors(driver.cuLaunchKernel(kernel, grid, 1, 1, block, 1, 1, 0, stream,
                                          (args, types), 0))


def host_array(address: int, count: int, dtype=np.float32) -> np.ndarray:
    """The host's numpy view of ``count`` elements at ``address`` (pinned or managed)."""
    nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(int(address)), dtype=dtype)
