"""A conjugate gradient solver in one cooperative kernel, after cuda-python's
conjugateGradientMultiBlockCG example: a symmetric positive definite
tridiagonal matrix in CSR form in managed memory, a grid sized from the
device's cooperative-launch support, multiprocessor count and the kernel's
occupancy, launched with ``cuLaunchCooperativeKernel`` and then again with
``cuLaunchKernelEx`` and the cooperative launch attribute; the phases of each
iteration (matrix-vector product, dot products, vector updates) are separated
by ``grid.sync()``.  Both solutions are checked against numpy's."""

import ctypes
import os
import sys

import numpy as np
from cuda.bindings import driver, nvrtc, runtime
from cuda_helpers import checkCudaErrors, findCudaDevice

conjugateGradientCG = """\
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__device__ void spmv(const int *rowPtr, const int *cols, const float *vals, int n,
                     const float *in, float *out, const cg::grid_group &grid)
{
    for (int i = grid.thread_rank(); i < n; i += grid.size()) {
        float sum = 0.0f;
        for (int k = rowPtr[i]; k < rowPtr[i + 1]; k++) {
            sum += vals[k] * in[cols[k]];
        }
        out[i] = sum;
    }
}

__device__ void dot(const float *a, const float *b, double *result, int n,
                    const cg::thread_block &cta, const cg::grid_group &grid)
{
    extern __shared__ double warpSums[];
    double sum = 0.0;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) {
        sum += (double)a[i] * (double)b[i];
    }
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cta);
    sum = cg::reduce(warp, sum, cg::plus<double>());
    if (warp.thread_rank() == 0) {
        warpSums[warp.meta_group_rank()] = sum;
    }
    cg::sync(cta);
    if (warp.meta_group_rank() == 0) {
        sum = warp.thread_rank() < warp.meta_group_size() ? warpSums[warp.thread_rank()] : 0.0;
        sum = cg::reduce(warp, sum, cg::plus<double>());
        if (warp.thread_rank() == 0) {
            atomicAdd(result, sum);
        }
    }
}

extern "C" __global__ void conjugateGradient(const int *rowPtr, const int *cols,
                                             const float *vals, float *x, float *Ax, float *p,
                                             float *r, double *dots, int n, float tol,
                                             int maxIter, int *iterations)
{
    cg::thread_block cta = cg::this_thread_block();
    cg::grid_group grid = cg::this_grid();

    spmv(rowPtr, cols, vals, n, x, Ax, grid);
    if (grid.thread_rank() == 0) {
        dots[0] = 0.0;
    }
    cg::sync(grid);
    for (int i = grid.thread_rank(); i < n; i += grid.size()) {
        r[i] = r[i] - Ax[i];
        p[i] = r[i];
    }
    cg::sync(grid);
    dot(r, r, &dots[0], n, cta, grid);
    cg::sync(grid);
    double rr = dots[0];

    int k = 0;
    while (k < maxIter && rr > (double)tol * tol) {
        spmv(rowPtr, cols, vals, n, p, Ax, grid);
        if (grid.thread_rank() == 0) {
            dots[1] = 0.0;
        }
        cg::sync(grid);
        dot(p, Ax, &dots[1], n, cta, grid);
        cg::sync(grid);
        float alpha = (float)(rr / dots[1]);
        for (int i = grid.thread_rank(); i < n; i += grid.size()) {
            x[i] = x[i] + alpha * p[i];
            r[i] = r[i] - alpha * Ax[i];
        }
        if (grid.thread_rank() == 0) {
            dots[0] = 0.0;
        }
        cg::sync(grid);
        dot(r, r, &dots[0], n, cta, grid);
        cg::sync(grid);
        double rrNext = dots[0];
        float beta = (float)(rrNext / rr);
        rr = rrNext;
        for (int i = grid.thread_rank(); i < n; i += grid.size()) {
            p[i] = r[i] + beta * p[i];
        }
        cg::sync(grid);
        k++;
    }
    if (grid.thread_rank() == 0) {
        *iterations = k;
    }
}
"""

THREADS_PER_BLOCK = 256
sSDKname = "conjugateGradientCG"


def cudaIncludePath():
    """The CUDA headers (cooperative_groups.h): $CUDA_HOME/include, or the
    pip wheels' (nvidia/cu13/include, with libcu++ beside it)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.path.isfile(os.path.join(home, "include", "cooperative_groups.h")):
        return [os.path.join(home, "include")]
    import nvidia

    for base in nvidia.__path__:
        inc = os.path.join(base, "cu13", "include")
        if os.path.isfile(os.path.join(inc, "cooperative_groups.h")):
            return [inc, os.path.join(inc, "cccl")]
    raise RuntimeError("CUDA headers not found: set CUDA_HOME")


def compileKernel(source, dev, name):
    major = checkCudaErrors(runtime.cudaDeviceGetAttribute(
        runtime.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, dev))
    minor = checkCudaErrors(runtime.cudaDeviceGetAttribute(
        runtime.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, dev))
    prog = checkCudaErrors(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    opts = [f"--gpu-architecture=compute_{major}{minor}".encode(), b"-lineinfo"]
    opts += [f"--include-path={d}".encode() for d in cudaIncludePath()]
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        size = checkCudaErrors(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        checkCudaErrors(nvrtc.nvrtcGetProgramLog(prog, log))
        raise RuntimeError(log.decode())
    size = checkCudaErrors(nvrtc.nvrtcGetPTXSize(prog))
    ptx = b" " * size
    checkCudaErrors(nvrtc.nvrtcGetPTX(prog, ptx))
    module = checkCudaErrors(driver.cuModuleLoadData(ptx))
    return checkCudaErrors(driver.cuModuleGetFunction(module, b"conjugateGradient"))


def managed(count, ctype):
    ptr = checkCudaErrors(runtime.cudaMallocManaged(ctypes.sizeof(ctype) * count,
                                                    runtime.cudaMemAttachGlobal))
    return ptr, np.ctypeslib.as_array((ctype * count).from_address(ptr))


def genTridiag(rowPtr, cols, vals, n, rng):
    """A symmetric, diagonally dominant tridiagonal matrix in CSR form."""
    off = rng.uniform(0.0, 1.0, n - 1).astype(np.float32)
    diag = (rng.uniform(0.0, 1.0, n) + 4.0).astype(np.float32)
    k = 0
    for i in range(n):
        rowPtr[i] = k
        for j, v in ((i - 1, off[i - 1] if i > 0 else 0), (i, diag[i]),
                     (i + 1, off[i] if i < n - 1 else 0)):
            if 0 <= j < n:
                cols[k] = j
                vals[k] = v
                k += 1
    rowPtr[n] = k
    dense = np.diag(diag.astype(np.float64)) + np.diag(off, 1) + np.diag(off, -1)
    return dense


def main():
    tol = 1e-5
    max_iter = 200
    print(f"Starting [{sSDKname}]...")
    devID = findCudaDevice()
    deviceProp = checkCudaErrors(runtime.cudaGetDeviceProperties(devID))
    if not deviceProp.managedMemory:
        print("Unified Memory not supported on this device, waived")
        return 0
    if not deviceProp.cooperativeLaunch:
        print(f"Selected GPU {devID} does not support Cooperative Kernel Launch, waived")
        return 0
    print(f"> GPU device has {deviceProp.multiProcessorCount} Multi-Processors, "
          f"SM {deviceProp.major}.{deviceProp.minor} compute capabilities")

    kernel = compileKernel(conjugateGradientCG, devID, "conjugateGradientCG.cu")

    N = 2048
    nz = (N - 2) * 3 + 4
    rowPtr_ptr, rowPtr = managed(N + 1, ctypes.c_int)
    cols_ptr, cols = managed(nz, ctypes.c_int)
    vals_ptr, vals = managed(nz, ctypes.c_float)
    dense = genTridiag(rowPtr, cols, vals, N, np.random.default_rng(7))
    x_ptr, x = managed(N, ctypes.c_float)
    Ax_ptr, _ = managed(N, ctypes.c_float)
    p_ptr, _ = managed(N, ctypes.c_float)
    r_ptr, r = managed(N, ctypes.c_float)
    dots_ptr, dots = managed(2, ctypes.c_double)
    iters_ptr, iters = managed(1, ctypes.c_int)
    rhs = np.ones(N, dtype=np.float32)
    expected = np.linalg.solve(dense, rhs.astype(np.float64))

    sMemSize = np.dtype(np.float64).itemsize * (THREADS_PER_BLOCK // 32 + 1)
    numBlocksPerSm = checkCudaErrors(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        kernel, THREADS_PER_BLOCK, sMemSize))
    numBlocks = deviceProp.multiProcessorCount * numBlocksPerSm
    print(f"> {numBlocks} blocks of {THREADS_PER_BLOCK} threads, all resident")

    kernelArgs = ((rowPtr_ptr, cols_ptr, vals_ptr, x_ptr, Ax_ptr, p_ptr, r_ptr, dots_ptr,
                   N, tol, max_iter, iters_ptr),
                  (ctypes.c_void_p,) * 8 + (ctypes.c_int, ctypes.c_float, ctypes.c_int,
                                            ctypes.c_void_p))

    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = numBlocks, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = THREADS_PER_BLOCK, 1, 1
    config.sharedMemBytes = sMemSize
    config.hStream = 0
    cooperative = driver.CUlaunchAttribute()
    cooperative.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    cooperative.value.cooperative = 1
    config.attrs = [cooperative]
    config.numAttrs = 1

    launches = [
        ("cuLaunchCooperativeKernel", lambda: driver.cuLaunchCooperativeKernel(
            kernel, numBlocks, 1, 1, THREADS_PER_BLOCK, 1, 1, sMemSize, 0, kernelArgs)),
        ("cuLaunchKernelEx", lambda: driver.cuLaunchKernelEx(config, kernel, kernelArgs, 0)),
    ]
    ok = True
    for name, launch in launches:
        x[:] = 0.0
        r[:] = rhs
        dots[:] = 0.0
        checkCudaErrors(runtime.cudaDeviceSynchronize())
        checkCudaErrors(launch())
        checkCudaErrors(runtime.cudaDeviceSynchronize())
        residual = float(np.sqrt(dots[0]))
        err = float(np.max(np.abs(x.astype(np.float64) - expected)))
        print(f"{name}: {iters[0]} iterations, residual = {residual:e}, "
              f"max error against numpy = {err:e}")
        ok = ok and residual < tol and err < 1e-4 and 0 < iters[0] < max_iter

    for ptr in (rowPtr_ptr, cols_ptr, vals_ptr, x_ptr, Ax_ptr, p_ptr, r_ptr, dots_ptr,
                iters_ptr):
        checkCudaErrors(runtime.cudaFree(ptr))
    print(f"&&&& {sSDKname}", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
