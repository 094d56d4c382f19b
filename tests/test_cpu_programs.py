"""Whole cuda-python programs, written exactly as for a real GPU, run on the CPU device.

Every program takes the driver module as its parameter and is run twice: with
``gpusafe.cpu.driver`` (always) and with ``cuda.bindings.driver`` (marked
``gpu``; skipped where there is no GPU and driver). Same code, same checks:
the CPU device is a drop-in replacement. Each program compiles its CUDA C++
with NVRTC for the architecture the device reports, the way cuda-python's
examples do.
"""

from __future__ import annotations

import ctypes
import re
import struct

import numpy as np
import pytest
from cuda.bindings import driver as real_driver
from cuda.bindings import nvrtc

from gpusafe.cpu import driver as cpu_driver


def _real_gpu_available() -> bool:
    try:
        (err,) = real_driver.cuInit(0)
    except RuntimeError:  # no libcuda.so
        return False
    if err != real_driver.CUresult.CUDA_SUCCESS:
        return False
    err, count = real_driver.cuDeviceGetCount()
    return err == real_driver.CUresult.CUDA_SUCCESS and count > 0


@pytest.fixture(params=[
    pytest.param("cpu", id="gpusafe.cpu.driver"),
    pytest.param("gpu", id="cuda.bindings.driver", marks=pytest.mark.gpu),
])
def cuda(request):
    if request.param == "cpu":
        cpu_driver.reset()
        yield cpu_driver
        cpu_driver.reset()
    else:
        if not _real_gpu_available():
            pytest.skip("no CUDA GPU and driver here")
        yield real_driver


# --------------------------------------------------------------------------
# the usual helpers of a cuda-python program
# --------------------------------------------------------------------------


class CudaError(RuntimeError):
    pass


def check(result):
    """checkCudaErrors() of the cuda-python samples."""
    err, *values = result
    if isinstance(err, real_driver.CUresult) and err != real_driver.CUresult.CUDA_SUCCESS:
        raise CudaError(f"CUDA error {err.name}")
    if isinstance(err, nvrtc.nvrtcResult) and err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaError(f"NVRTC error {err.name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def include_dirs() -> list[str]:
    from gpusafe_testkit.corpus import cuda_include_dirs

    return cuda_include_dirs()


def compile_ptx(source: str, name: str, arch: str) -> bytes:
    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    opts += [f"-I{d}".encode() for d in include_dirs()]
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        size = check(nvrtc.nvrtcGetProgramLogSize(prog))
        log = bytearray(size)
        check(nvrtc.nvrtcGetProgramLog(prog, log))
        raise CudaError(log.decode())
    size = check(nvrtc.nvrtcGetPTXSize(prog))
    ptx = bytearray(size)
    check(nvrtc.nvrtcGetPTX(prog, ptx))
    check(nvrtc.nvrtcDestroyProgram(prog))
    return bytes(ptx)


def init_device(cuda):
    """cuInit, the first device, a context; returns (device, context, NVRTC arch)."""
    check(cuda.cuInit(0))
    dev = check(cuda.cuDeviceGet(0))
    A = cuda.CUdevice_attribute
    major = check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    ctx = check(cuda.cuCtxCreate(None, 0, dev))
    return dev, ctx, f"compute_{major}{minor}"


def load(cuda, ptx: bytes):
    return check(cuda.cuModuleLoadData(np.char.array(ptx)))


# --------------------------------------------------------------------------
# programs
# --------------------------------------------------------------------------

VECTOR_ADD = r"""
extern "C" __global__ void vector_add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


def vector_add_program(cuda) -> float:
    """The cuda-python 'overview' program: kernelParams as an address of addresses."""
    _, ctx, arch = init_device(cuda)
    module = load(cuda, compile_ptx(VECTOR_ADD, "vector_add.cu", arch))
    kernel = check(cuda.cuModuleGetFunction(module, b"vector_add"))
    n = 10_000
    rng = np.random.default_rng(1)
    ha = rng.random(n, dtype=np.float32)
    hb = rng.random(n, dtype=np.float32)
    hc = np.zeros(n, dtype=np.float32)
    nbytes = ha.nbytes
    da = check(cuda.cuMemAlloc(nbytes))
    db = check(cuda.cuMemAlloc(nbytes))
    dc = check(cuda.cuMemAlloc(nbytes))
    stream = check(cuda.cuStreamCreate(0))
    start = check(cuda.cuEventCreate(0))
    stop = check(cuda.cuEventCreate(0))
    check(cuda.cuMemcpyHtoDAsync(da, ha.ctypes.data, nbytes, stream))
    check(cuda.cuMemcpyHtoDAsync(db, hb.ctypes.data, nbytes, stream))
    pa = np.array([int(da)], dtype=np.uint64)
    pb = np.array([int(db)], dtype=np.uint64)
    pc = np.array([int(dc)], dtype=np.uint64)
    pn = np.array(n, dtype=np.int32)
    args = np.array([arg.ctypes.data for arg in (pa, pb, pc, pn)], dtype=np.uint64)
    threads = 128
    blocks = (n + threads - 1) // threads
    check(cuda.cuEventRecord(start, stream))
    check(cuda.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, stream, args.ctypes.data, 0))
    check(cuda.cuEventRecord(stop, stream))
    check(cuda.cuMemcpyDtoHAsync(hc.ctypes.data, dc, nbytes, stream))
    check(cuda.cuStreamSynchronize(stream))
    ms = check(cuda.cuEventElapsedTime(start, stop))
    assert np.array_equal(hc, ha + hb)
    for d in (da, db, dc):
        check(cuda.cuMemFree(d))
    check(cuda.cuEventDestroy(start))
    check(cuda.cuEventDestroy(stop))
    check(cuda.cuStreamDestroy(stream))
    check(cuda.cuModuleUnload(module))
    check(cuda.cuCtxDestroy(ctx))
    return ms


SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float *x, const float *y, float *out, size_t n) {
    size_t tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = tid; i < n; i += (size_t)blockDim.x * gridDim.x)
        out[i] = a * x[i] + y[i];
}
"""


def saxpy_program(cuda) -> None:
    """Grid-stride saxpy sized by the SM count; kernelParams as (values, types)."""
    dev, ctx, arch = init_device(cuda)
    module = load(cuda, compile_ptx(SAXPY, "saxpy.cu", arch))
    kernel = check(cuda.cuModuleGetFunction(module, b"saxpy"))
    sms = check(cuda.cuDeviceGetAttribute(
        cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    n = 20_000
    x = np.linspace(-1, 1, n, dtype=np.float32)
    y = np.cos(x).astype(np.float32)
    dx = check(cuda.cuMemAlloc(x.nbytes))
    dy = check(cuda.cuMemAlloc(y.nbytes))
    dout = check(cuda.cuMemAlloc(x.nbytes))
    check(cuda.cuMemcpyHtoD(dx, x, x.nbytes))
    check(cuda.cuMemcpyHtoD(dy, y, y.nbytes))
    params = ((2.5, dx, dy, dout, n),
              (ctypes.c_float, None, None, None, ctypes.c_size_t))
    check(cuda.cuLaunchKernel(kernel, 2 * sms, 1, 1, 256, 1, 1, 0, 0, params, 0))
    check(cuda.cuCtxSynchronize())
    out = np.empty_like(x)
    check(cuda.cuMemcpyDtoH(out, dout, out.nbytes))
    # the compiler fuses a * x + y into one fma: compare with the exactly rounded result
    np.testing.assert_allclose(out, (2.5 * x.astype(np.float64) + y).astype(np.float32),
                               rtol=1e-6, atol=1e-7)
    for d in (dx, dy, dout):
        check(cuda.cuMemFree(d))
    check(cuda.cuCtxDestroy(ctx))


MATMUL = r"""
#define TILE 16
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""


def matmul_program(cuda) -> None:
    """16x16 shared-memory tiled matmul with ragged edges, on a 2-D grid."""
    _, ctx, arch = init_device(cuda)
    module = load(cuda, compile_ptx(MATMUL, "matmul.cu", arch))
    kernel = check(cuda.cuModuleGetFunction(module, b"matmul"))
    M, N, K = 40, 24, 36
    rng = np.random.default_rng(2)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    dA = check(cuda.cuMemAlloc(A.nbytes))
    dB = check(cuda.cuMemAlloc(B.nbytes))
    dC = check(cuda.cuMemAlloc(M * N * 4))
    check(cuda.cuMemcpyHtoD(dA, A, A.nbytes))
    check(cuda.cuMemcpyHtoD(dB, B, B.nbytes))
    check(cuda.cuMemsetD32(dC, 0, M * N))
    args = ((dA, dB, dC, M, N, K), (None, None, None, ctypes.c_int, ctypes.c_int, ctypes.c_int))
    check(cuda.cuLaunchKernel(kernel, (N + 15) // 16, (M + 15) // 16, 1, 16, 16, 1, 0, 0, args, 0))
    C = np.empty((M, N), dtype=np.float32)
    check(cuda.cuMemcpyDtoH(C, dC, C.nbytes))
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    check(cuda.cuCtxDestroy(ctx))


REDUCTION = r"""
extern "C" __global__ void block_sum(const int *in, unsigned long long *total, int n) {
    __shared__ int warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? warp_sums[lane] : 0;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
        if (lane == 0) atomicAdd(total, (unsigned long long)v);
    }
}
"""


def reduction_program(cuda) -> None:
    """Warp-shuffle block reduction, shared memory, a 64-bit global atomic."""
    _, ctx, arch = init_device(cuda)
    module = load(cuda, compile_ptx(REDUCTION, "reduction.cu", arch))
    kernel = check(cuda.cuModuleGetFunction(module, b"block_sum"))
    n = 5000
    data = np.random.default_rng(3).integers(-1000, 1000, n, dtype=np.int32)
    din = check(cuda.cuMemAlloc(data.nbytes))
    dtotal = check(cuda.cuMemAlloc(8))
    check(cuda.cuMemcpyHtoD(din, data, data.nbytes))
    check(cuda.cuMemsetD8(dtotal, 0, 8))
    check(cuda.cuLaunchKernel(kernel, (n + 255) // 256, 1, 1, 256, 1, 1, 0, 0,
                              ((din, dtotal, n), (None, None, ctypes.c_int)), 0))
    total = ctypes.c_int64()
    check(cuda.cuMemcpyDtoH(total, dtotal, 8))
    assert total.value == int(data.sum())
    check(cuda.cuCtxDestroy(ctx))


GLOBALS = r"""
__constant__ int coeff[3];
__device__ unsigned int hits;
extern "C" __global__ void poly_even(const int *x, int *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && i % 2 == 0) {
        int v = x[i];
        y[i] = (coeff[2] * v + coeff[1]) * v + coeff[0];
        atomicAdd(&hits, 1u);
    }
}
"""


def globals_and_memset_program(cuda) -> None:
    """Module globals set and read with cuModuleGetGlobal; cuMemsetD32 sentinels survive."""
    _, ctx, arch = init_device(cuda)
    module = load(cuda, compile_ptx(GLOBALS, "globals.cu", arch))
    kernel = check(cuda.cuModuleGetFunction(module, b"poly_even"))
    dcoeff, size = check(cuda.cuModuleGetGlobal(module, b"coeff"))
    assert size == 12
    coeff = np.array([3, -2, 1], dtype=np.int32)
    check(cuda.cuMemcpyHtoD(dcoeff, coeff, coeff.nbytes))
    dhits, hsize = check(cuda.cuModuleGetGlobal(module, b"hits"))
    assert hsize == 4
    check(cuda.cuMemsetD32(dhits, 0, 1))
    n = 1001
    x = np.arange(n, dtype=np.int32) - 500
    dx = check(cuda.cuMemAlloc(x.nbytes))
    dy = check(cuda.cuMemAlloc(x.nbytes))
    check(cuda.cuMemcpyHtoD(dx, x, x.nbytes))
    check(cuda.cuMemsetD32(dy, 0xDEADBEEF, n))
    check(cuda.cuLaunchKernel(kernel, (n + 127) // 128, 1, 1, 128, 1, 1, 0, 0,
                              ((dx, dy, n), (None, None, ctypes.c_int)), 0))
    y = np.empty(n, dtype=np.uint32)
    check(cuda.cuMemcpyDtoH(y, dy, y.nbytes))
    even = np.arange(n) % 2 == 0
    want = ((x * x - 2 * x + 3).astype(np.int32)).view(np.uint32)
    assert np.array_equal(y[even], want[even])
    assert (y[~even] == 0xDEADBEEF).all()
    hits = np.zeros(1, dtype=np.uint32)
    check(cuda.cuMemcpyDtoH(hits, dhits, 4))
    assert hits[0] == even.sum()
    check(cuda.cuModuleUnload(module))
    check(cuda.cuCtxDestroy(ctx))


TRANSPOSE = r"""
#define T 8
extern "C" __global__ void transpose(const double *in, double *out, int rows, int cols) {
    __shared__ double tile[T][T + 1];
    int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    x = blockIdx.y * T + threadIdx.x; y = blockIdx.x * T + threadIdx.y;
    if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}
"""


def primary_context_extra_program(cuda) -> None:
    """The runtime's way: primary context, then params packed through ``extra``."""
    check(cuda.cuInit(0))
    dev = check(cuda.cuDeviceGet(0))
    ctx = check(cuda.cuDevicePrimaryCtxRetain(dev))
    check(cuda.cuCtxSetCurrent(ctx))
    A = cuda.CUdevice_attribute
    major = check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    module = load(cuda, compile_ptx(TRANSPOSE, "transpose.cu", f"compute_{major}{minor}"))
    kernel = check(cuda.cuModuleGetFunction(module, b"transpose"))
    rows, cols = 13, 21
    m = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
    din = check(cuda.cuMemAlloc(m.nbytes))
    dout = check(cuda.cuMemAlloc(m.nbytes))
    check(cuda.cuMemcpyHtoD(din, m, m.nbytes))
    layout = [check(cuda.cuFuncGetParamInfo(kernel, i)) for i in range(4)]
    buf = bytearray(layout[-1][0] + layout[-1][1])
    for (off, size), value, fmt in zip(layout, (int(din), int(dout), rows, cols),
                                       ("<Q", "<Q", "<i", "<i"), strict=True):
        assert struct.calcsize(fmt) == size
        struct.pack_into(fmt, buf, off, value)
    hbuf = np.frombuffer(buf, dtype=np.uint8)
    bufsize = ctypes.c_size_t(len(buf))
    extra = (ctypes.c_void_p * 5)(cuda.CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, hbuf.ctypes.data,
                                  cuda.CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT,
                                  ctypes.addressof(bufsize), cuda.CU_LAUNCH_PARAM_END_AS_INT)
    check(cuda.cuLaunchKernel(kernel, (cols + 7) // 8, (rows + 7) // 8, 1, 8, 8, 1, 0, 0, None,
                              ctypes.addressof(extra)))
    out = np.empty((cols, rows), dtype=np.float64)
    check(cuda.cuMemcpyDtoH(out, dout, out.nbytes))
    assert np.array_equal(out, m.T)
    check(cuda.cuMemFree(din))
    check(cuda.cuMemFree(dout))
    check(cuda.cuModuleUnload(module))
    check(cuda.cuDevicePrimaryCtxRelease(dev))


NUMBA_SOURCE = '''
from numba import cuda as nb

def scale_add(out, a, alpha):
    i = nb.grid(1)
    if i < out.size:
        out[i] = a[i] * alpha + 1.0
'''


def numba_ptx_program(cuda) -> None:
    """PTX from numba.cuda.compile_ptx for the device's compute capability, launched by hand."""
    from numba import cuda as nb

    dev, ctx, _ = init_device(cuda)
    A = cuda.CUdevice_attribute
    cc = (check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)),
          check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)))
    ns: dict = {}
    exec(compile(NUMBA_SOURCE, "<numba-program>", "exec"), ns)
    try:
        ptx, _ = nb.compile_ptx(ns["scale_add"], "void(float32[::1], float32[::1], float32)",
                                cc=cc)
    except AttributeError as e:  # seen on a GPU image: numba-cuda 0.2x beside numpy 2.5
        if "module 'numpy' has no attribute" not in str(e):
            raise
        pytest.skip(f"this Python's numba-cuda cannot compile with numpy {np.__version__}: {e}")
    entry = re.search(r"\.entry\s+([\w$]+)", ptx).group(1)
    module = check(cuda.cuModuleLoadData(ptx.encode()))
    kernel = check(cuda.cuModuleGetFunction(module, entry.encode()))
    n = 3000
    a = np.arange(n, dtype=np.float32)
    da = check(cuda.cuMemAlloc(a.nbytes))
    dout = check(cuda.cuMemAlloc(a.nbytes))
    check(cuda.cuMemcpyHtoD(da, a, a.nbytes))

    def array_args(dptr, length, itemsize):
        # numba's array ABI: meminfo, parent, nitems, itemsize, data, shape[0], strides[0]
        return ((0, 0, length, itemsize, dptr, length, itemsize),
                (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong, None,
                 ctypes.c_longlong, ctypes.c_longlong))

    out_v, out_t = array_args(dout, n, 4)
    a_v, a_t = array_args(da, n, 4)
    params = (out_v + a_v + (0.5,), out_t + a_t + (ctypes.c_float,))
    check(cuda.cuLaunchKernel(kernel, (n + 255) // 256, 1, 1, 256, 1, 1, 0, 0, params, 0))
    out = np.empty_like(a)
    check(cuda.cuMemcpyDtoH(out, dout, out.nbytes))
    np.testing.assert_allclose(out, a * np.float32(0.5) + 1)
    check(cuda.cuCtxDestroy(ctx))


# --------------------------------------------------------------------------
# the tests: each program on each driver
# --------------------------------------------------------------------------


def test_vector_add(cuda):
    ms = vector_add_program(cuda)
    assert ms >= 0.0


def test_saxpy(cuda):
    saxpy_program(cuda)


def test_tiled_matmul(cuda):
    matmul_program(cuda)


def test_shuffle_reduction(cuda):
    reduction_program(cuda)


def test_module_globals_and_memset(cuda):
    globals_and_memset_program(cuda)


def test_primary_context_and_extra_params(cuda):
    primary_context_extra_program(cuda)


def test_numba_compiled_ptx(cuda):
    numba_ptx_program(cuda)


def test_a_faulting_program_sees_the_real_error_code(cuda):
    """An out-of-range write through a wild pointer: the program's own check reports it."""
    _, ctx, arch = init_device(cuda)
    module = load(cuda, compile_ptx(VECTOR_ADD, "vector_add.cu", arch))
    kernel = check(cuda.cuModuleGetFunction(module, b"vector_add"))
    wild = 0x10  # the null page: faults on every GPU
    with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        check(cuda.cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, 0,
                                  ((wild, wild, wild, 32), (ctypes.c_void_p,) * 3 + (ctypes.c_int,)),
                                  0))
        check(cuda.cuCtxSynchronize())
    err, = cuda.cuCtxSynchronize()  # sticky
    assert err == cuda.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    if cuda is cpu_driver:
        assert "vector_add" in cpu_driver.last_error_detail()
