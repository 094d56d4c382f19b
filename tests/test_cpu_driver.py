"""gpusafe.cpu.driver: cuda-python's driver API surface on the CPU device.

Each test checks one behaviour against what cuda.bindings.driver does on a
real GPU: return tuples, CUresult codes for bad handles and values, copies and
sets, module globals, both cuCtxCreate signatures, every kernelParams form.
"""

from __future__ import annotations

import ctypes
import inspect
import threading
import time

import numpy as np
import pytest
from cuda.bindings import driver as real

from gpusafe.cpu import driver
from gpusafe.cpu import driver_profile as profile

R = driver.CUresult
OK = R.CUDA_SUCCESS


def ok(ret):
    """Assert a cuda-python return tuple succeeded; return its outputs."""
    assert isinstance(ret, tuple), ret
    err, *out = ret
    assert err == OK, (err, driver.last_error_detail())
    if not out:
        return None
    return out[0] if len(out) == 1 else tuple(out)


def fails(ret, result):
    """Assert a call failed with ``result`` and its outputs are all None."""
    assert isinstance(ret, tuple), ret
    err, *out = ret
    assert err == result, (err, driver.last_error_detail())
    assert all(o is None for o in out)


@pytest.fixture(autouse=True)
def fresh_driver():
    driver.reset()
    yield
    driver.reset()


@pytest.fixture
def ctx():
    ok(driver.cuInit(0))
    dev = ok(driver.cuDeviceGet(0))
    c = ok(driver.cuCtxCreate(None, 0, dev))
    yield c


KERNELS = r"""
struct Pair { int a; double b; };
__device__ int counter = 42;
__device__ int flag;
__constant__ float table[4] = {1.5f, 2.5f, 3.5f, 4.5f};

extern "C" __global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
extern "C" __global__ void params_mix(char c, short s, int i, long long ll, float f, double d,
                                      Pair pr, long long *out, double *outd) {
    out[0] = c; out[1] = s; out[2] = i; out[3] = ll; out[4] = pr.a;
    outd[0] = f; outd[1] = d; outd[2] = pr.b;
}
extern "C" __global__ void no_params() { flag = 7; counter += 1; }
extern "C" __global__ void read_table(float *out) { out[threadIdx.x] = table[threadIdx.x] + counter; }
extern "C" __global__ void write_at(int *p) { *p = 1; }
extern "C" __global__ void trap_kernel() { __trap(); }
extern "C" __global__ void reverse_dyn(int *out) {
    extern __shared__ int dyn[];
    dyn[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = dyn[blockDim.x - 1 - threadIdx.x];
}
extern "C" __global__ void __launch_bounds__(128) bounded(int *p) { p[threadIdx.x] = 1; }
extern "C" __global__ void static_shared(int *out) {
    __shared__ int buf[2048];
    buf[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}
"""


@pytest.fixture(scope="module")
def ptx() -> str:
    from gpusafe_testkit.corpus import nvrtc_compile

    return nvrtc_compile(KERNELS, "driver_kernels.cu")


@pytest.fixture
def module(ctx, ptx):
    return ok(driver.cuModuleLoadData(ptx.encode()))


def func(module, name: str):
    return ok(driver.cuModuleGetFunction(module, name.encode()))


def alloc_array(arr: np.ndarray):
    d = ok(driver.cuMemAlloc(arr.nbytes))
    ok(driver.cuMemcpyHtoD(d, arr, arr.nbytes))
    return d


def fetch(d, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    ok(driver.cuMemcpyDtoH(out, d, out.nbytes))
    return out


def addr_params(*values: np.ndarray) -> int:
    """The cuda-python examples' idiom: an array of the addresses of one-element arrays."""
    arr = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    addr_params.keep = (values, arr)  # alive until the next call
    return arr.ctypes.data


# --------------------------------------------------------------------------
# the module surface
# --------------------------------------------------------------------------


def test_types_and_enums_are_cuda_pythons_own():
    for name in ("CUresult", "CUdevice", "CUcontext", "CUmodule", "CUfunction", "CUstream",
                 "CUevent", "CUdeviceptr", "CUdevice_attribute", "CUfunction_attribute",
                 "CUjit_option", "CUctx_flags", "CUctxCreateParams", "CU_LAUNCH_PARAM_END",
                 "CU_LAUNCH_PARAM_BUFFER_POINTER", "CU_STREAM_LEGACY", "CUDA_VERSION"):
        assert getattr(driver, name) is getattr(real, name), name


def test_every_non_function_name_of_the_real_module_is_reexported():
    missing = [n for n in dir(real) if not n.startswith("_") and not n.startswith("cu")
               and not inspect.ismodule(getattr(real, n)) and not hasattr(driver, n)]
    assert missing == []


def test_unimplemented_functions_are_absent_with_a_named_error():
    assert "cuGraphicsMapResources" in driver.REAL_FUNCTIONS
    assert not hasattr(driver, "cuGraphicsMapResources")
    with pytest.raises(AttributeError, match="cuGraphicsMapResources.*does not implement"):
        driver.cuGraphicsMapResources  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'cuNotAFunction'$"):
        driver.cuNotAFunction  # noqa: B018


def test_implemented_functions_have_the_real_parameter_names():
    """Module functions and a Driver's methods alike, cuCtxCreate included (it
    also takes the 12.x positional form, tested below)."""
    assert len(driver.IMPLEMENTED) >= 70
    instance = driver.Driver()
    for name in sorted(driver.IMPLEMENTED):
        assert name in driver.REAL_FUNCTIONS
        want = list(inspect.signature(getattr(real, name)).parameters)
        assert list(inspect.signature(getattr(driver, name)).parameters) == want, name
        assert list(inspect.signature(getattr(instance, name)).parameters) == want, name


def test_required_api_is_implemented():
    required = """cuInit cuDriverGetVersion cuDeviceGetCount cuDeviceGet cuDeviceGetName
    cuDeviceGetAttribute cuDeviceTotalMem cuCtxCreate cuCtxDestroy cuCtxSynchronize
    cuCtxGetCurrent cuCtxSetCurrent cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease
    cuStreamCreate cuStreamSynchronize cuStreamDestroy cuEventCreate cuEventRecord
    cuEventSynchronize cuEventElapsedTime cuEventDestroy cuMemAlloc cuMemFree cuMemAllocHost
    cuMemHostAlloc cuMemFreeHost cuMemGetInfo cuMemcpyHtoD cuMemcpyDtoH cuMemcpyDtoD
    cuMemcpyHtoDAsync cuMemcpyDtoHAsync cuMemcpyDtoDAsync cuMemsetD8 cuMemsetD16 cuMemsetD32
    cuMemsetD8Async cuMemsetD16Async cuMemsetD32Async cuModuleLoadData cuModuleLoadDataEx
    cuModuleGetFunction cuModuleGetGlobal cuModuleUnload cuFuncGetAttribute cuLaunchKernel
    cuGetErrorName cuGetErrorString""".split()
    assert set(required) <= driver.IMPLEMENTED


# --------------------------------------------------------------------------
# initialisation, versions, error strings
# --------------------------------------------------------------------------


def test_calls_before_cuInit_are_not_initialized():
    fails(driver.cuDeviceGetCount(), R.CUDA_ERROR_NOT_INITIALIZED)
    fails(driver.cuDeviceGet(0), R.CUDA_ERROR_NOT_INITIALIZED)
    fails(driver.cuMemAlloc(16), R.CUDA_ERROR_NOT_INITIALIZED)
    fails(driver.cuCtxCreate(None, 0, 0), R.CUDA_ERROR_NOT_INITIALIZED)
    assert "cuInit" in driver.last_error_detail()
    # these work without cuInit, as on the real driver
    assert driver.cuDriverGetVersion() == (OK, 13000)
    assert driver.cuGetErrorName(R.CUDA_ERROR_INVALID_VALUE) == (OK, b"CUDA_ERROR_INVALID_VALUE")


def test_cuInit_flags_must_be_zero():
    fails(driver.cuInit(1), R.CUDA_ERROR_INVALID_VALUE)
    ok(driver.cuInit(0))
    ok(driver.cuInit(0))  # idempotent
    with pytest.raises(OverflowError):
        driver.cuInit(-1)


def test_error_names_and_strings():
    assert driver.cuGetErrorString(R.CUDA_ERROR_INVALID_VALUE) == (OK, b"invalid argument")
    assert driver.cuGetErrorString(R.CUDA_ERROR_ILLEGAL_ADDRESS) == \
        (OK, b"an illegal memory access was encountered")
    assert driver.cuGetErrorString(OK) == (OK, b"no error")
    for code in R:
        assert driver.cuGetErrorName(code) == (OK, code.name.encode())
        err, text = driver.cuGetErrorString(code)
        assert err == OK and isinstance(text, bytes) and text
    with pytest.raises(AttributeError):  # cuda-python reads an enum's .value
        driver.cuGetErrorName(1)


# --------------------------------------------------------------------------
# the device
# --------------------------------------------------------------------------


def test_device_enumeration_and_name():
    ok(driver.cuInit(0))
    assert driver.cuDeviceGetCount() == (OK, 1)
    dev = ok(driver.cuDeviceGet(0))
    assert isinstance(dev, real.CUdevice) and int(dev) == 0
    fails(driver.cuDeviceGet(1), R.CUDA_ERROR_INVALID_DEVICE)
    name = ok(driver.cuDeviceGetName(64, dev))
    # cuda-python hands back the whole buffer the driver wrote into
    assert len(name) == 64 and name.split(b"\0")[0] == profile.DEVICE_NAME.encode()
    assert ok(driver.cuDeviceGetName(5, 0)) == b"gpus\0"
    fails(driver.cuDeviceGetName(64, 3), R.CUDA_ERROR_INVALID_DEVICE)
    assert ok(driver.cuDeviceGetPCIBusId(16, dev)).split(b"\0")[0] == b"0000:00:00.0"


def test_device_attributes_profile():
    ok(driver.cuInit(0))
    A = driver.CUdevice_attribute

    def attr(a):
        return ok(driver.cuDeviceGetAttribute(a, 0))

    assert attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == 9
    assert attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == 0
    assert attr(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE) == 32
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z) == 64
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X) == 2**31 - 1
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) == 48 * 1024
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) == 227 * 1024
    assert attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) == 8
    assert attr(A.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1
    assert attr(A.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) == 1  # memory_kinds.py
    assert attr(A.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) == 1  # launches.py
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH) == 131072  # arrays.py
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH) == 0  # no mipmaps
    for a in A:
        if a != A.CU_DEVICE_ATTRIBUTE_MAX:
            assert isinstance(attr(a), int)
    fails(driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MAX, 0), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1),
          R.CUDA_ERROR_INVALID_DEVICE)
    with pytest.raises(AttributeError):  # cuda-python reads an enum's .value
        driver.cuDeviceGetAttribute(10, 0)
    assert driver.cuDeviceComputeCapability(0) == (OK, 9, 0)


def test_total_memory_and_mem_get_info(ctx):
    total = ok(driver.cuDeviceTotalMem(0))
    assert total == driver.device_memory().capacity == 16 << 30
    free0, total0 = ok(driver.cuMemGetInfo())
    assert total0 == total and free0 == total
    d = ok(driver.cuMemAlloc(1 << 20))
    assert ok(driver.cuMemGetInfo()) == (total - (1 << 20), total)
    ok(driver.cuMemFree(d))
    assert ok(driver.cuMemGetInfo()) == (total, total)


# --------------------------------------------------------------------------
# contexts
# --------------------------------------------------------------------------


def test_cuCtxCreate_13x_signature():
    ok(driver.cuInit(0))
    c = ok(driver.cuCtxCreate(None, 0, ok(driver.cuDeviceGet(0))))
    assert isinstance(c, real.CUcontext) and int(c) != 0
    assert int(ok(driver.cuCtxGetCurrent())) == int(c)
    c2 = ok(driver.cuCtxCreate(driver.CUctxCreateParams(), 0, 0))
    assert int(ok(driver.cuCtxGetCurrent())) == int(c2)
    c3 = ok(driver.cuCtxCreate(ctxCreateParams=None, flags=0, dev=0))
    assert int(c3) not in (int(c), int(c2))


def test_cuCtxCreate_12x_signature():
    ok(driver.cuInit(0))
    c = ok(driver.cuCtxCreate(0, ok(driver.cuDeviceGet(0))))
    assert isinstance(c, real.CUcontext)
    assert int(ok(driver.cuCtxGetCurrent())) == int(c)
    with pytest.raises(TypeError):
        driver.cuCtxCreate(0)
    with pytest.raises(TypeError):
        driver.cuCtxCreate(object(), 0, 0)


def test_cuCtxCreate_bad_values():
    ok(driver.cuInit(0))
    fails(driver.cuCtxCreate(None, 0, 1), R.CUDA_ERROR_INVALID_DEVICE)
    fails(driver.cuCtxCreate(None, 0x10000, 0), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuCtxCreate(None, 0x3, 0), R.CUDA_ERROR_INVALID_VALUE)  # two schedule flags
    params = driver.CUctxCreateParams()
    params.numExecAffinityParams = 1
    fails(driver.cuCtxCreate(params, 0, 0), R.CUDA_ERROR_NOT_SUPPORTED)


def test_context_stack_push_pop_set():
    ok(driver.cuInit(0))
    assert int(ok(driver.cuCtxGetCurrent())) == 0  # no context: a NULL handle, not an error
    a = ok(driver.cuCtxCreate(None, 0, 0))
    b = ok(driver.cuCtxCreate(None, 0, 0))
    assert int(ok(driver.cuCtxPopCurrent())) == int(b)
    assert int(ok(driver.cuCtxGetCurrent())) == int(a)
    ok(driver.cuCtxPushCurrent(b))
    assert int(ok(driver.cuCtxGetCurrent())) == int(b)
    ok(driver.cuCtxSetCurrent(a))  # replaces the top: the stack is [a, a]
    assert int(ok(driver.cuCtxGetCurrent())) == int(a)
    assert int(ok(driver.cuCtxPopCurrent())) == int(a)
    assert int(ok(driver.cuCtxPopCurrent())) == int(a)
    fails(driver.cuCtxPopCurrent(), R.CUDA_ERROR_INVALID_CONTEXT)
    ok(driver.cuCtxSetCurrent(b))
    ok(driver.cuCtxSetCurrent(None))  # NULL pops
    assert int(ok(driver.cuCtxGetCurrent())) == 0
    fails(driver.cuCtxSetCurrent(driver.CUcontext(0x1234)), R.CUDA_ERROR_INVALID_CONTEXT)
    fails(driver.cuCtxPushCurrent(0x1234), R.CUDA_ERROR_INVALID_CONTEXT)


def test_calls_without_a_current_context():
    ok(driver.cuInit(0))
    fails(driver.cuMemAlloc(16), R.CUDA_ERROR_INVALID_CONTEXT)
    fails(driver.cuCtxSynchronize(), R.CUDA_ERROR_INVALID_CONTEXT)
    fails(driver.cuStreamCreate(0), R.CUDA_ERROR_INVALID_CONTEXT)
    fails(driver.cuModuleLoadData(b"// nothing"), R.CUDA_ERROR_INVALID_CONTEXT)
    fails(driver.cuCtxGetDevice(), R.CUDA_ERROR_INVALID_CONTEXT)


def test_cuCtxDestroy_invalidates_the_context_and_frees_its_memory(ctx):
    d = ok(driver.cuMemAlloc(4096))
    s = ok(driver.cuStreamCreate(0))
    e = ok(driver.cuEventCreate(0))
    assert ok(driver.cuMemGetInfo())[0] < ok(driver.cuDeviceTotalMem(0))
    ok(driver.cuCtxDestroy(ctx))
    assert int(ok(driver.cuCtxGetCurrent())) == 0  # popped
    fails(driver.cuCtxDestroy(ctx), R.CUDA_ERROR_INVALID_CONTEXT)
    fails(driver.cuCtxSetCurrent(ctx), R.CUDA_ERROR_INVALID_CONTEXT)
    c2 = ok(driver.cuCtxCreate(None, 0, 0))
    fails(driver.cuStreamSynchronize(s), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuEventRecord(e, 0), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuMemFree(d), R.CUDA_ERROR_INVALID_VALUE)  # already released with the context
    assert ok(driver.cuMemGetInfo())[0] == ok(driver.cuDeviceTotalMem(0))
    ok(driver.cuCtxDestroy(c2))


def test_context_queries(ctx):
    assert int(ok(driver.cuCtxGetDevice())) == 0
    assert ok(driver.cuCtxGetFlags()) == 0
    assert ok(driver.cuCtxGetApiVersion(ctx)) == 3020
    L = driver.CUlimit
    assert ok(driver.cuCtxGetLimit(L.CU_LIMIT_STACK_SIZE)) == 1024
    ok(driver.cuCtxSetLimit(L.CU_LIMIT_STACK_SIZE, 4096))
    assert ok(driver.cuCtxGetLimit(L.CU_LIMIT_STACK_SIZE)) == 4096
    fails(driver.cuCtxGetLimit(L.CU_LIMIT_SHMEM_SIZE), R.CUDA_ERROR_UNSUPPORTED_LIMIT)
    assert ok(driver.cuCtxGetStreamPriorityRange()) == (0, 0)
    ok(driver.cuCtxSynchronize())


def test_current_context_is_per_thread(ctx):
    seen = {}

    def other():
        seen["current"] = int(ok(driver.cuCtxGetCurrent()))
        seen["alloc"] = driver.cuMemAlloc(16)[0]
        ok(driver.cuCtxSetCurrent(ctx))
        seen["alloc2"] = driver.cuMemAlloc(16)[0]

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"current": 0, "alloc": R.CUDA_ERROR_INVALID_CONTEXT, "alloc2": OK}


def test_primary_context_retain_release():
    ok(driver.cuInit(0))
    assert driver.cuDevicePrimaryCtxGetState(0) == (OK, 0, 0)
    p1 = ok(driver.cuDevicePrimaryCtxRetain(0))
    p2 = ok(driver.cuDevicePrimaryCtxRetain(ok(driver.cuDeviceGet(0))))
    assert int(p1) == int(p2) != 0
    assert driver.cuDevicePrimaryCtxGetState(0) == (OK, 0, 1)
    assert int(ok(driver.cuCtxGetCurrent())) == 0  # retaining does not make it current
    ok(driver.cuCtxSetCurrent(p1))
    d = ok(driver.cuMemAlloc(64))
    fails(driver.cuCtxDestroy(p1), R.CUDA_ERROR_INVALID_CONTEXT)
    ok(driver.cuDevicePrimaryCtxRelease(0))
    ok(driver.cuMemFree(d))  # still alive: one reference left
    ok(driver.cuDevicePrimaryCtxRelease(0))
    fails(driver.cuDevicePrimaryCtxRelease(0), R.CUDA_ERROR_INVALID_CONTEXT)
    fails(driver.cuMemAlloc(64), R.CUDA_ERROR_INVALID_CONTEXT)  # released: no longer current
    fails(driver.cuDevicePrimaryCtxRetain(2), R.CUDA_ERROR_INVALID_DEVICE)


# --------------------------------------------------------------------------
# device memory
# --------------------------------------------------------------------------


def test_mem_alloc_returns_a_CUdeviceptr_and_free_checks_it(ctx):
    d = ok(driver.cuMemAlloc(1000))
    assert isinstance(d, real.CUdeviceptr) and int(d) % 256 == 0
    base, size = ok(driver.cuMemGetAddressRange(int(d) + 999))
    assert (int(base), size) == (int(d), 1000)
    fails(driver.cuMemFree(int(d) + 8), R.CUDA_ERROR_INVALID_VALUE)  # not a base
    assert "not the base" in driver.last_error_detail()
    ok(driver.cuMemFree(d))
    fails(driver.cuMemFree(d), R.CUDA_ERROR_INVALID_VALUE)  # double free
    assert "already freed" in driver.last_error_detail()
    fails(driver.cuMemFree(0x1234), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuMemGetAddressRange(d), R.CUDA_ERROR_NOT_FOUND)


def test_mem_alloc_bad_sizes(ctx):
    fails(driver.cuMemAlloc(0), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuMemAlloc(17 << 30), R.CUDA_ERROR_OUT_OF_MEMORY)
    with pytest.raises(OverflowError):
        driver.cuMemAlloc(-1)
    with pytest.raises(TypeError):
        driver.cuMemAlloc("16")


@pytest.mark.parametrize("form", ["numpy", "bytes", "bytearray", "ctypes", "int", "memoryview"])
def test_memcpy_round_trip_host_buffer_forms(ctx, form):
    src = np.arange(64, dtype=np.uint32)
    raw = src.tobytes()
    d = ok(driver.cuMemAlloc(src.nbytes))
    host = {"numpy": src, "bytes": raw, "bytearray": bytearray(raw),
            "ctypes": (ctypes.c_uint32 * 64)(*range(64)), "int": src.ctypes.data,
            "memoryview": memoryview(bytearray(raw))}[form]
    ok(driver.cuMemcpyHtoD(d, host, len(raw)))
    if form == "bytes":
        out = bytearray(len(raw))
    elif form == "int":
        out_arr = np.zeros(64, np.uint32)
        out = out_arr.ctypes.data
    elif form == "ctypes":
        out = (ctypes.c_uint32 * 64)()
    elif form == "memoryview":
        out = memoryview(bytearray(len(raw)))
    else:
        out = np.zeros(64, np.uint32) if form == "numpy" else bytearray(len(raw))
    ok(driver.cuMemcpyDtoH(out, d, len(raw)))
    got = out_arr.tobytes() if form == "int" else bytes(out)
    assert got == raw


def test_memcpy_into_a_ctypes_scalar_like_cuda_python_tests(ctx):
    d = ok(driver.cuMemAlloc(8))
    ok(driver.cuMemcpyHtoD(d, ctypes.c_double(2.5), 8))
    value = ctypes.c_double()
    ok(driver.cuMemcpyDtoH(value, d, ctypes.sizeof(value)))
    assert value.value == 2.5


def test_memcpy_host_argument_type_errors(ctx):
    d = ok(driver.cuMemAlloc(16))
    with pytest.raises(TypeError):
        driver.cuMemcpyHtoD(d, "sixteen bytes...", 16)
    with pytest.raises(TypeError):
        driver.cuMemcpyHtoD(d, [1, 2, 3, 4], 16)
    with pytest.raises(ValueError, match="ndarray is not contiguous"):  # as cuda-python
        driver.cuMemcpyHtoD(d, np.zeros((4, 4), np.uint8)[:, ::2], 8)
    with pytest.raises(OverflowError):
        driver.cuMemcpyHtoD(d, b"x", -1)


def test_memcpy_out_of_range_is_invalid_value(ctx):
    d = ok(driver.cuMemAlloc(64))
    big = np.zeros(128, np.uint8)
    fails(driver.cuMemcpyHtoD(d, big, 128), R.CUDA_ERROR_INVALID_VALUE)
    assert "leaves its allocation" in driver.last_error_detail()
    fails(driver.cuMemcpyDtoH(big, int(d) + 32, 64), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuMemcpyHtoD(0x1234, big, 4), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuMemcpyHtoD(d, None, 4), R.CUDA_ERROR_INVALID_VALUE)
    # a host buffer shorter than ByteCount is refused rather than overrun
    fails(driver.cuMemcpyHtoD(d, np.zeros(8, np.uint8), 16), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuMemcpyDtoH(np.zeros(8, np.uint8), d, 16), R.CUDA_ERROR_INVALID_VALUE)
    # a device pointer passed as the host side is refused, not dereferenced on the host
    other = ok(driver.cuMemAlloc(64))
    fails(driver.cuMemcpyHtoD(d, int(other), 8), R.CUDA_ERROR_INVALID_VALUE)
    assert "device address" in driver.last_error_detail()
    fails(driver.cuMemcpyDtoH(int(other), d, 8), R.CUDA_ERROR_INVALID_VALUE)
    # cuMemcpy into the red zone after an allocation is a bad device range, not host memory
    fails(driver.cuMemcpy(int(d) + 64 + 8, big.ctypes.data, 8), R.CUDA_ERROR_INVALID_VALUE)
    ok(driver.cuMemcpyHtoD(d, big, 0))  # zero bytes: nothing to check
    ok(driver.cuMemFree(d))
    fails(driver.cuMemcpyHtoD(d, big, 4), R.CUDA_ERROR_INVALID_VALUE)  # freed
    assert "freed" in driver.last_error_detail()


def test_memcpy_device_to_device_and_unified(ctx):
    a = alloc_array(np.arange(100, dtype=np.int32))
    b = ok(driver.cuMemAlloc(400))
    ok(driver.cuMemcpyDtoD(b, a, 400))
    assert (fetch(b, np.zeros(100, np.int32)) == np.arange(100)).all()
    ok(driver.cuMemcpyDtoD(int(b) + 4, a, 396))  # offsets
    assert list(fetch(b, np.zeros(100, np.int32))[:4]) == [0, 0, 1, 2]
    fails(driver.cuMemcpyDtoD(b, a, 404), R.CUDA_ERROR_INVALID_VALUE)
    # cuMemcpy infers each side's kind from its address (unified addressing)
    host = np.full(100, 7, np.int32)
    ok(driver.cuMemcpy(int(b), host.ctypes.data, 400))
    back = np.zeros(100, np.int32)
    ok(driver.cuMemcpy(back.ctypes.data, b, 400))
    assert (back == 7).all()
    ok(driver.cuMemcpy(a, b, 400))
    assert (fetch(a, back) == 7).all()
    h2 = np.zeros(100, np.int32)
    ok(driver.cuMemcpyAsync(h2.ctypes.data, host.ctypes.data, 400, 0))
    assert (h2 == 7).all()


def test_async_copies_on_a_stream(ctx):
    s = ok(driver.cuStreamCreate(0))
    src = np.arange(32, dtype=np.float32)
    d = ok(driver.cuMemAlloc(src.nbytes))
    d2 = ok(driver.cuMemAlloc(src.nbytes))
    ok(driver.cuMemcpyHtoDAsync(d, src.ctypes.data, src.nbytes, s))
    ok(driver.cuMemcpyDtoDAsync(d2, d, src.nbytes, s))
    out = np.zeros_like(src)
    ok(driver.cuMemcpyDtoHAsync(out.ctypes.data, d2, src.nbytes, s))
    ok(driver.cuStreamSynchronize(s))
    assert (out == src).all()
    fails(driver.cuMemcpyHtoDAsync(d, src, src.nbytes, driver.CUstream(0xBAD)),
          R.CUDA_ERROR_INVALID_HANDLE)
    ok(driver.cuMemcpyHtoDAsync(d, src, src.nbytes, driver.CU_STREAM_LEGACY))
    ok(driver.cuMemcpyHtoDAsync(d, src, src.nbytes, None))


def test_memset_widths_and_alignment(ctx):
    d = ok(driver.cuMemAlloc(64))
    ok(driver.cuMemsetD8(d, 0xAB, 64))
    assert fetch(d, np.zeros(64, np.uint8)).tolist() == [0xAB] * 64
    ok(driver.cuMemsetD16(int(d) + 2, 0x1234, 3))
    assert fetch(d, np.zeros(32, np.uint16)).tolist()[:5] == [0xABAB, 0x1234, 0x1234, 0x1234,
                                                              0xABAB]
    ok(driver.cuMemsetD32(d, 0xDEADBEEF, 16))
    assert (fetch(d, np.zeros(16, np.uint32)) == 0xDEADBEEF).all()
    s = ok(driver.cuStreamCreate(0))
    ok(driver.cuMemsetD32Async(d, 5, 16, s))
    ok(driver.cuMemsetD16Async(d, 6, 2, s))
    ok(driver.cuMemsetD8Async(d, 7, 1, s))
    assert fetch(d, np.zeros(4, np.uint32)).tolist() == [0x00060007, 5, 5, 5]
    fails(driver.cuMemsetD16(int(d) + 1, 0, 2), R.CUDA_ERROR_INVALID_VALUE)  # misaligned
    fails(driver.cuMemsetD32(int(d) + 2, 0, 2), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuMemsetD32(d, 0, 17), R.CUDA_ERROR_INVALID_VALUE)  # past the end
    with pytest.raises(OverflowError):
        driver.cuMemsetD8(d, 256, 1)
    with pytest.raises(OverflowError):
        driver.cuMemsetD16(d, 1 << 16, 1)


def test_async_alloc_and_free(ctx):
    s = ok(driver.cuStreamCreate(0))
    d = ok(driver.cuMemAllocAsync(128, s))
    ok(driver.cuMemsetD8Async(d, 1, 128, s))
    ok(driver.cuMemFreeAsync(d, s))
    fails(driver.cuMemFreeAsync(d, s), R.CUDA_ERROR_INVALID_VALUE)


def test_pinned_host_memory(ctx):
    p = ok(driver.cuMemAllocHost(4096))
    assert isinstance(p, int) and p % 4096 == 0
    view = (ctypes.c_uint8 * 4096).from_address(p)
    view[:4] = [1, 2, 3, 4]
    d = ok(driver.cuMemAlloc(4096))
    ok(driver.cuMemcpyHtoD(d, p, 4096))
    assert fetch(d, np.zeros(4, np.uint8)).tolist() == [1, 2, 3, 4]
    ok(driver.cuMemFreeHost(p))
    fails(driver.cuMemFreeHost(p), R.CUDA_ERROR_INVALID_VALUE)
    q = ok(driver.cuMemHostAlloc(100, driver.CU_MEMHOSTALLOC_PORTABLE))
    ok(driver.cuMemcpy(d, q, 100))
    ok(driver.cuMemFreeHost(q))
    # every pinned allocation is mapped (unified addressing): one pointer for both sides
    m = ok(driver.cuMemHostAlloc(100, driver.CU_MEMHOSTALLOC_DEVICEMAP))
    assert int(ok(driver.cuMemHostGetDevicePointer(m, 0))) == m
    ok(driver.cuMemFreeHost(m))
    fails(driver.cuMemHostAlloc(100, 0x80), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuMemFreeHost(np.zeros(4)), R.CUDA_ERROR_INVALID_VALUE)


# --------------------------------------------------------------------------
# streams and events
# --------------------------------------------------------------------------


def test_streams(ctx):
    s = ok(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    assert isinstance(s, real.CUstream) and int(s) != 0
    assert ok(driver.cuStreamGetFlags(s)) == 1
    assert int(ok(driver.cuStreamGetCtx(s))) == int(ctx)
    ok(driver.cuStreamQuery(s))
    ok(driver.cuStreamSynchronize(s))
    ok(driver.cuStreamSynchronize(0))
    ok(driver.cuStreamSynchronize(None))
    ok(driver.cuStreamSynchronize(driver.CU_STREAM_PER_THREAD))
    p = ok(driver.cuStreamCreateWithPriority(0, -1))
    assert ok(driver.cuStreamGetPriority(p)) == 0
    ok(driver.cuStreamDestroy(s))
    fails(driver.cuStreamSynchronize(s), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuStreamDestroy(s), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuStreamCreate(8), R.CUDA_ERROR_INVALID_VALUE)


def test_events_measure_host_time(ctx):
    start = ok(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT))
    end = ok(driver.cuEventCreate(0))
    assert isinstance(start, real.CUevent)
    fails(driver.cuEventElapsedTime(start, end), R.CUDA_ERROR_INVALID_HANDLE)  # not recorded
    s = ok(driver.cuStreamCreate(0))
    ok(driver.cuEventRecord(start, s))
    time.sleep(0.02)
    ok(driver.cuEventRecord(end, s))
    ok(driver.cuEventSynchronize(end))
    ok(driver.cuEventQuery(end))
    ms = ok(driver.cuEventElapsedTime(start, end))
    assert isinstance(ms, float) and 15.0 <= ms < 2000.0
    ok(driver.cuStreamWaitEvent(s, end, 0))
    nt = ok(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    ok(driver.cuEventRecord(nt, 0))
    fails(driver.cuEventElapsedTime(start, nt), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_INTERPROCESS),
          R.CUDA_ERROR_INVALID_VALUE)
    ok(driver.cuEventDestroy(start))
    fails(driver.cuEventRecord(start, s), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuEventDestroy(start), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuEventRecord(end, driver.CUstream(0xBAD)), R.CUDA_ERROR_INVALID_HANDLE)


def test_handles_of_one_kind_are_not_accepted_as_another(ctx):
    s = ok(driver.cuStreamCreate(0))
    e = ok(driver.cuEventCreate(0))
    fails(driver.cuEventRecord(driver.CUevent(int(s)), 0), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuStreamSynchronize(driver.CUstream(int(e))), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuModuleUnload(driver.CUmodule(int(s))), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuCtxSetCurrent(driver.CUcontext(int(s))), R.CUDA_ERROR_INVALID_CONTEXT)


# --------------------------------------------------------------------------
# modules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["bytes", "numpy-char", "int-address", "bytearray", "uint8"])
def test_module_image_forms(ctx, ptx, form):
    data = ptx.encode() + b"\0"
    keep = None
    if form == "bytes":
        image = ptx.encode()
    elif form == "numpy-char":
        image = np.char.array(data)  # the cuda-python examples' idiom
    elif form == "int-address":
        keep = np.char.array(data)
        image = keep.ctypes.data
    elif form == "bytearray":
        image = bytearray(data)
    else:
        image = np.frombuffer(ptx.encode(), dtype=np.uint8).copy()  # no NUL at all
    mod = ok(driver.cuModuleLoadData(image))
    assert isinstance(mod, real.CUmodule)
    assert isinstance(func(mod, "add_one"), real.CUfunction)
    del keep


def test_module_image_str_is_a_type_error_as_in_cuda_python(ctx, ptx):
    with pytest.raises(TypeError):
        driver.cuModuleLoadData(ptx)


def test_module_parse_error_is_invalid_ptx_with_detail(ctx, ptx):
    broken = ptx.replace("ret;", "ld.global.u32 %r1, [%rd1;", 1)
    fails(driver.cuModuleLoadData(broken.encode()), R.CUDA_ERROR_INVALID_PTX)
    detail = driver.last_error_detail()
    assert detail.startswith("CUDA_ERROR_INVALID_PTX") and "line" in detail
    from gpusafe_instrument.ptx import ParseError

    assert isinstance(driver.last_error_exception(), ParseError)
    fails(driver.cuModuleLoadData(b"this is not PTX"), R.CUDA_ERROR_INVALID_PTX)


def test_module_load_ex_writes_the_error_log(ctx, ptx):
    J = driver.CUjit_option
    log = bytearray(1024)
    opts = [J.CU_JIT_ERROR_LOG_BUFFER, J.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    fails(driver.cuModuleLoadDataEx(b"garbage", 2, opts, [log, len(log)]),
          R.CUDA_ERROR_INVALID_PTX)
    text = bytes(log).split(b"\0")[0].decode()
    assert "PTX parse error" in text
    mod = ok(driver.cuModuleLoadDataEx(ptx.encode(), 0, [], []))
    assert isinstance(mod, real.CUmodule)
    mod = ok(driver.cuModuleLoadDataEx(ptx.encode(), 1, [J.CU_JIT_OPTIMIZATION_LEVEL], [4]))
    with pytest.raises(TypeError):
        driver.cuModuleLoadDataEx(ptx.encode(), 1, [4], [4])
    with pytest.raises(RuntimeError):
        driver.cuModuleLoadDataEx(ptx.encode(), 2, [J.CU_JIT_OPTIMIZATION_LEVEL], [4])


def test_module_versions_targets_and_binaries(ctx, ptx):
    newer_isa = ptx.replace(".version 9.0", ".version 9.9", 1)
    assert newer_isa != ptx
    fails(driver.cuModuleLoadData(newer_isa.encode()), R.CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    newer_sm = ptx.replace(".target sm_75", ".target sm_100", 1)
    assert newer_sm != ptx
    fails(driver.cuModuleLoadData(newer_sm.encode()), R.CUDA_ERROR_INVALID_PTX)
    assert "sm_100" in driver.last_error_detail()
    fails(driver.cuModuleLoadData(b"\x7fELF\x02\x01\x01\x00" + bytes(64)),
          R.CUDA_ERROR_NOT_SUPPORTED)
    assert "cubin" in driver.last_error_detail()
    fails(driver.cuModuleLoadData(b"\x50\xed\x55\xba\x01\x00" + bytes(64)),
          R.CUDA_ERROR_NOT_SUPPORTED)
    fails(driver.cuModuleLoadData(0), R.CUDA_ERROR_INVALID_VALUE)


def test_module_load_from_file(ctx, ptx, tmp_path):
    f = tmp_path / "k.ptx"
    f.write_text(ptx)
    mod = ok(driver.cuModuleLoad(str(f).encode()))
    func(mod, "add_one")
    fails(driver.cuModuleLoad(str(tmp_path / "missing.ptx").encode()),
          R.CUDA_ERROR_FILE_NOT_FOUND)
    with pytest.raises(TypeError):
        driver.cuModuleLoad(str(f))


def test_module_functions(module):
    f1 = func(module, "add_one")
    assert int(func(module, "add_one")) == int(f1)  # the same handle every time
    fails(driver.cuModuleGetFunction(module, b"nope"), R.CUDA_ERROR_NOT_FOUND)
    with pytest.raises(TypeError):
        driver.cuModuleGetFunction(module, "add_one")
    fails(driver.cuModuleGetFunction(driver.CUmodule(0xBAD), b"add_one"),
          R.CUDA_ERROR_INVALID_HANDLE)
    n = ok(driver.cuModuleGetFunctionCount(module))
    assert n == 9
    fns = ok(driver.cuModuleEnumerateFunctions(n, module))
    names = sorted(ok(driver.cuFuncGetName(f)).decode() for f in fns)
    assert names == sorted(["add_one", "params_mix", "no_params", "read_table", "write_at",
                            "trap_kernel", "reverse_dyn", "bounded", "static_shared"])
    assert int(ok(driver.cuFuncGetModule(f1))) == int(module)
    assert ok(driver.cuFuncGetParamInfo(f1, 0)) == (0, 8)
    assert ok(driver.cuFuncGetParamInfo(f1, 1)) == (8, 4)
    fails(driver.cuFuncGetParamInfo(f1, 2), R.CUDA_ERROR_INVALID_VALUE)


def test_module_globals(module):
    d, size = ok(driver.cuModuleGetGlobal(module, b"counter"))
    assert isinstance(d, real.CUdeviceptr) and size == 4
    v = ctypes.c_int()
    ok(driver.cuMemcpyDtoH(v, d, 4))
    assert v.value == 42  # the initializer
    t, tsize = ok(driver.cuModuleGetGlobal(module, b"table"))
    assert tsize == 16
    assert fetch(t, np.zeros(4, np.float32)).tolist() == [1.5, 2.5, 3.5, 4.5]
    ok(driver.cuMemcpyHtoD(d, ctypes.c_int(100), 4))
    out = ok(driver.cuMemAlloc(16))
    ok(driver.cuLaunchKernel(func(module, "read_table"), 1, 1, 1, 4, 1, 1, 0, 0,
                             ((out,), (None,)), 0))
    assert fetch(out, np.zeros(4, np.float32)).tolist() == [101.5, 102.5, 103.5, 104.5]
    fails(driver.cuModuleGetGlobal(module, b"nope"), R.CUDA_ERROR_NOT_FOUND)
    ok(driver.cuMemsetD32(d, 0, 1))
    fails(driver.cuMemcpyHtoD(d, np.zeros(2, np.int32), 8), R.CUDA_ERROR_INVALID_VALUE)


def test_module_unload_invalidates_its_handles(module):
    f = func(module, "add_one")
    g, _ = ok(driver.cuModuleGetGlobal(module, b"counter"))
    ok(driver.cuModuleUnload(module))
    fails(driver.cuModuleUnload(module), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuModuleGetFunction(module, b"add_one"), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, f),
          R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, None, 0), R.CUDA_ERROR_INVALID_HANDLE)
    fails(driver.cuMemcpyHtoD(g, ctypes.c_int(1), 4), R.CUDA_ERROR_INVALID_VALUE)


def test_function_attributes(module):
    F = driver.CUfunction_attribute

    def attr(a, f):
        return ok(driver.cuFuncGetAttribute(a, f))

    add_one = func(module, "add_one")
    assert attr(F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add_one) == 1024
    assert attr(F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func(module, "bounded")) == 128
    assert attr(F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func(module, "static_shared")) == 8192
    assert attr(F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, add_one) == 0
    assert attr(F.CU_FUNC_ATTRIBUTE_PTX_VERSION, add_one) == 90
    assert attr(F.CU_FUNC_ATTRIBUTE_BINARY_VERSION, add_one) == 90
    assert attr(F.CU_FUNC_ATTRIBUTE_NUM_REGS, add_one) > 0
    assert attr(F.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, add_one) == 0
    assert attr(F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, add_one) == 48 * 1024
    assert attr(F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                func(module, "static_shared")) == 48 * 1024 - 8192
    fails(driver.cuFuncGetAttribute(F.CU_FUNC_ATTRIBUTE_MAX, add_one), R.CUDA_ERROR_INVALID_VALUE)
    with pytest.raises(AttributeError):  # cuda-python reads an enum's .value
        driver.cuFuncGetAttribute(0, add_one)
    ok(driver.cuFuncSetAttribute(add_one, F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 100 * 1024))
    assert attr(F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, add_one) == 100 * 1024
    fails(driver.cuFuncSetAttribute(add_one, F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    228 * 1024), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuFuncSetAttribute(add_one, F.CU_FUNC_ATTRIBUTE_NUM_REGS, 1),
          R.CUDA_ERROR_INVALID_VALUE)
    ok(driver.cuFuncSetCacheConfig(add_one, driver.CUfunc_cache.CU_FUNC_CACHE_PREFER_SHARED))
    assert ok(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(add_one, 256, 0)) == 8
    assert ok(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(add_one, 32, 0)) == 32
    assert ok(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func(module, "bounded"),
                                                                 256, 0)) == 0


# --------------------------------------------------------------------------
# launches and kernelParams forms
# --------------------------------------------------------------------------


def test_launch_params_as_address_of_pointer_array(module):
    data = np.arange(100, dtype=np.int32)
    d = alloc_array(data)
    dptr = np.array([int(d)], dtype=np.uint64)
    n = np.array(100, dtype=np.int32)
    ok(driver.cuLaunchKernel(func(module, "add_one"), 4, 1, 1, 32, 1, 1, 0, 0,
                             addr_params(dptr, n), 0))
    assert (fetch(d, data) == data + 1).all()
    assert driver.last_launch_result() is not None
    assert driver.last_launch_result().instructions > 0


def test_launch_params_as_buffer_protocol_objects(module):
    data = np.arange(64, dtype=np.int32)
    d = alloc_array(data)
    dptr = ctypes.c_uint64(int(d))
    n = ctypes.c_int(64)
    arr = (ctypes.c_void_p * 2)(ctypes.addressof(dptr), ctypes.addressof(n))
    ok(driver.cuLaunchKernel(func(module, "add_one"), 2, 1, 1, 32, 1, 1, 0, 0, arr, 0))
    vals = (np.array([int(d)], np.uint64), np.array(64, np.int32))
    packed = np.array([v.ctypes.data for v in vals], dtype=np.uint64)
    ok(driver.cuLaunchKernel(func(module, "add_one"), 2, 1, 1, 32, 1, 1, 0, 0, packed, 0))
    assert (fetch(d, data) == data + 2).all()


class Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]


@pytest.mark.parametrize("as_ctypes", [False, True], ids=["python-values", "ctypes-values"])
def test_launch_params_as_values_and_types(module, as_ctypes):
    out = ok(driver.cuMemAlloc(5 * 8))
    outd = ok(driver.cuMemAlloc(3 * 8))
    values = (b"Z", -7, 123456, -(2**40), 1.5, 2.25)
    types = (ctypes.c_char, ctypes.c_short, ctypes.c_int, ctypes.c_longlong, ctypes.c_float,
             ctypes.c_double)
    if as_ctypes:
        values = tuple(t(v) for t, v in zip(types, values, strict=True))
    ok(driver.cuLaunchKernel(func(module, "params_mix"), 1, 1, 1, 1, 1, 1, 0, 0,
                             (values + (Pair(9, 0.5), out, outd), types + (None, None, None)),
                             0))
    assert fetch(out, np.zeros(5, np.int64)).tolist() == [ord("Z"), -7, 123456, -(2**40), 9]
    assert fetch(outd, np.zeros(3, np.float64)).tolist() == [1.5, 2.25, 0.5]


def test_launch_params_values_and_types_void_p_and_enum(module):
    data = np.zeros(4, np.int32)
    d = alloc_array(data)
    # c_void_p takes the pointer's integer value; None takes a CUdeviceptr by reference
    ok(driver.cuLaunchKernel(func(module, "add_one"), 1, 1, 1, 4, 1, 1, 0, 0,
                             ((int(d), 4), (ctypes.c_void_p, ctypes.c_int)), 0))
    ok(driver.cuLaunchKernel(func(module, "add_one"), 1, 1, 1, 4, 1, 1, 0, 0,
                             ((ctypes.c_void_p(int(d)), driver.CUresult.CUDA_ERROR_INVALID_VALUE),
                              (ctypes.c_void_p, None)), 0))  # an Enum is passed as a C int (1)
    assert fetch(d, data).tolist() == [2, 1, 1, 1]


def test_launch_params_conversion_errors_are_python_exceptions(module):
    f = func(module, "add_one")
    with pytest.raises(TypeError, match="different length"):
        driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ((1, 2), (ctypes.c_int,)), 0)
    with pytest.raises(TypeError):
        driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ((1,), (np.int32,)), 0)
    with pytest.raises(TypeError):
        driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ((1.5,), (None,)), 0)
    with pytest.raises(TypeError):
        driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, [1, 2], 0)
    with pytest.raises(TypeError):
        driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, None, None)
    with pytest.raises(OverflowError):
        driver.cuLaunchKernel(f, -1, 1, 1, 1, 1, 1, 0, 0, None, 0)


def test_launch_params_through_extra(module):
    f = func(module, "add_one")
    data = np.arange(8, dtype=np.int32)
    d = alloc_array(data)
    off0, size0 = ok(driver.cuFuncGetParamInfo(f, 0))
    off1, size1 = ok(driver.cuFuncGetParamInfo(f, 1))
    buf = np.zeros(off1 + size1, np.uint8)
    buf[off0:off0 + size0] = np.frombuffer(np.uint64(int(d)).tobytes(), np.uint8)
    buf[off1:off1 + size1] = np.frombuffer(np.int32(8).tobytes(), np.uint8)
    size = ctypes.c_size_t(buf.nbytes)
    extra = (ctypes.c_void_p * 5)(driver.CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, buf.ctypes.data,
                                  driver.CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT,
                                  ctypes.addressof(size), driver.CU_LAUNCH_PARAM_END_AS_INT)
    ok(driver.cuLaunchKernel(f, 1, 1, 1, 8, 1, 1, 0, 0, None, ctypes.addressof(extra)))
    assert (fetch(d, data) == data + 1).all()
    # both forms at once, too small a buffer, no params at all: invalid values
    fails(driver.cuLaunchKernel(f, 1, 1, 1, 8, 1, 1, 0, 0, ((d, 8), (None, ctypes.c_int)),
                                ctypes.addressof(extra)), R.CUDA_ERROR_INVALID_VALUE)
    size.value = 4
    fails(driver.cuLaunchKernel(f, 1, 1, 1, 8, 1, 1, 0, 0, None, ctypes.addressof(extra)),
          R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuLaunchKernel(f, 1, 1, 1, 8, 1, 1, 0, 0, None, 0), R.CUDA_ERROR_INVALID_VALUE)
    fails(driver.cuLaunchKernel(f, 1, 1, 1, 8, 1, 1, 0, 0, ((d,), (None,)), 0),
          R.CUDA_ERROR_INVALID_VALUE)
    assert "takes 2 parameters" in driver.last_error_detail()


@pytest.mark.parametrize("params", [None, 0, ((), ())], ids=["None", "0", "empty-tuples"])
def test_launch_without_params(module, params):
    ok(driver.cuLaunchKernel(func(module, "no_params"), 1, 1, 1, 1, 1, 1, 0, 0, params, 0))
    g, _ = ok(driver.cuModuleGetGlobal(module, b"flag"))
    v = ctypes.c_int()
    ok(driver.cuMemcpyDtoHAsync(v, g, 4, 0))
    assert v.value == 7


def test_launch_on_a_stream_and_launch_kernel_ex(module):
    s = ok(driver.cuStreamCreate(0))
    data = np.zeros(32, np.int32)
    d = alloc_array(data)
    ok(driver.cuLaunchKernel(func(module, "add_one"), 1, 1, 1, 32, 1, 1, 0, s,
                             ((d, 32), (None, ctypes.c_int)), 0))
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 1, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 32, 1, 1
    cfg.sharedMemBytes = 0
    cfg.hStream = s
    cfg.numAttrs = 0
    ok(driver.cuLaunchKernelEx(cfg, func(module, "add_one"), ((d, 32), (None, ctypes.c_int)), 0))
    ok(driver.cuStreamSynchronize(s))
    assert (fetch(d, data) == 2).all()
    fails(driver.cuLaunchKernel(func(module, "add_one"), 1, 1, 1, 32, 1, 1, 0,
                                driver.CUstream(0xBAD), ((d, 32), (None, ctypes.c_int)), 0),
          R.CUDA_ERROR_INVALID_HANDLE)


def test_launch_configuration_limits(module):
    d = ok(driver.cuMemAlloc(4096 * 4))
    f = func(module, "add_one")
    args = ((d, 4096), (None, ctypes.c_int))

    def launch(g, b, shared=0, fn=f):
        return driver.cuLaunchKernel(fn, *g, *b, shared, 0, args if fn is f else ((d,), (None,)),
                                     0)

    ok(launch((1, 1, 1), (1024, 1, 1)))
    fails(launch((1, 1, 1), (1025, 1, 1)), R.CUDA_ERROR_INVALID_VALUE)
    fails(launch((1, 1, 1), (32, 32, 2)), R.CUDA_ERROR_INVALID_VALUE)
    fails(launch((1, 1, 1), (1, 1, 65)), R.CUDA_ERROR_INVALID_VALUE)
    fails(launch((0, 1, 1), (32, 1, 1)), R.CUDA_ERROR_INVALID_VALUE)
    fails(launch((1, 65536, 1), (32, 1, 1)), R.CUDA_ERROR_INVALID_VALUE)
    fails(launch((1, 1, 1), (32, 1, 1), 48 * 1024 + 4), R.CUDA_ERROR_INVALID_VALUE)
    assert "MAX_DYNAMIC_SHARED_SIZE_BYTES" in driver.last_error_detail()
    bounded = func(module, "bounded")
    ok(launch((1, 1, 1), (128, 1, 1), fn=bounded))
    fails(launch((1, 1, 1), (129, 1, 1), fn=bounded), R.CUDA_ERROR_INVALID_VALUE)


def test_dynamic_shared_memory_and_opt_in(module):
    f = func(module, "reverse_dyn")
    d = ok(driver.cuMemAlloc(256 * 4))
    ok(driver.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 256 * 4, 0, ((d,), (None,)), 0))
    assert fetch(d, np.zeros(256, np.int32)).tolist() == list(range(255, -1, -1))
    big = 64 * 1024
    fails(driver.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, big, 0, ((d,), (None,)), 0),
          R.CUDA_ERROR_INVALID_VALUE)
    ok(driver.cuFuncSetAttribute(
        f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, big))
    ok(driver.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, big, 0, ((d,), (None,)), 0))


def test_illegal_address_is_sticky_until_the_context_is_destroyed(ctx, ptx):
    mod = ok(driver.cuModuleLoadData(ptx.encode()))
    d = ok(driver.cuMemAlloc(64))
    fails(driver.cuLaunchKernel(func(mod, "write_at"), 1, 1, 1, 1, 1, 1, 0, 0,
                                ((0,), (ctypes.c_void_p,)), 0), R.CUDA_ERROR_ILLEGAL_ADDRESS)
    assert "write_at" in driver.last_error_detail()
    # every later call in this context returns the same error
    fails(driver.cuCtxSynchronize(), R.CUDA_ERROR_ILLEGAL_ADDRESS)
    fails(driver.cuMemAlloc(16), R.CUDA_ERROR_ILLEGAL_ADDRESS)
    fails(driver.cuMemcpyHtoD(d, b"abcd", 4), R.CUDA_ERROR_ILLEGAL_ADDRESS)
    fails(driver.cuModuleGetFunction(mod, b"add_one"), R.CUDA_ERROR_ILLEGAL_ADDRESS)
    fails(driver.cuLaunchKernel(func_handle := driver.CUfunction(0), 1, 1, 1, 1, 1, 1, 0, 0,
                                None, 0), R.CUDA_ERROR_INVALID_HANDLE)  # handles still checked
    assert int(func_handle) == 0
    # queries that do not touch the context still work
    ok(driver.cuDeviceGetCount())
    assert int(ok(driver.cuCtxGetCurrent())) == int(ctx)
    ok(driver.cuCtxDestroy(ctx))
    ok(driver.cuCtxCreate(None, 0, 0))
    ok(driver.cuMemAlloc(16))


def test_trap_is_a_sticky_launch_failure(ctx, ptx):
    mod = ok(driver.cuModuleLoadData(ptx.encode()))
    err, = driver.cuLaunchKernel(func(mod, "trap_kernel"), 1, 1, 1, 1, 1, 1, 0, 0, None, 0)
    assert err == R.CUDA_ERROR_LAUNCH_FAILED
    fails(driver.cuCtxSynchronize(), R.CUDA_ERROR_LAUNCH_FAILED)


def test_primary_context_reset_clears_a_sticky_error(ptx):
    ok(driver.cuInit(0))
    p = ok(driver.cuDevicePrimaryCtxRetain(0))
    ok(driver.cuCtxSetCurrent(p))
    mod = ok(driver.cuModuleLoadData(ptx.encode()))
    fails(driver.cuLaunchKernel(func(mod, "write_at"), 1, 1, 1, 1, 1, 1, 0, 0,
                                ((0,), (ctypes.c_void_p,)), 0), R.CUDA_ERROR_ILLEGAL_ADDRESS)
    fails(driver.cuCtxSynchronize(), R.CUDA_ERROR_ILLEGAL_ADDRESS)
    ok(driver.cuDevicePrimaryCtxReset(0))
    ok(driver.cuCtxSynchronize())
    fails(driver.cuModuleGetFunction(mod, b"add_one"), R.CUDA_ERROR_INVALID_HANDLE)  # unloaded
    ok(driver.cuMemAlloc(16))


def test_launch_observers_see_the_launch(module):
    seen = []

    class Counter:
        def kernel_begin(self, launch):
            seen.append("begin")

        def memory_access(self, event):
            seen.append("access")
            return None

        def instructions(self, count):
            seen.append(count)

        def kernel_end(self, launch):
            seen.append("end")

    old = driver.set_launch_observers([Counter()])
    try:
        d = alloc_array(np.zeros(4, np.int32))
        ok(driver.cuLaunchKernel(func(module, "add_one"), 1, 1, 1, 4, 1, 1, 0, 0,
                                 ((d, 4), (None, ctypes.c_int)), 0))
    finally:
        driver.set_launch_observers(old)
    assert seen[0] == "begin" and seen[-1] == "end" and "access" in seen
    assert sum(x for x in seen if isinstance(x, int)) > 0
