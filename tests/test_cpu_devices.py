"""Several CPU devices in one process (``gpusafe.cpu.driver.Driver``, a
``gpusafe.cpu.runtime.Runtime`` over each), cuda-python's parameter names on
both surfaces, and the memory policy a Driver is made with.

Each Driver is a device of its own: its allocations, contexts, handles and
errors are invisible to another, and the module-level API is one of them.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from cuda.bindings import driver as real_driver
from cuda.bindings import runtime as real_runtime

from gpusafe.cpu import driver, runtime
from gpusafe.cpu.driver import Driver
from gpusafe.cpu.memory import RED_ZONE
from gpusafe.cpu.runtime import Runtime

R = driver.CUresult
OK = R.CUDA_SUCCESS
E = runtime.cudaError_t
K = runtime.cudaMemcpyKind

ADD_ONE = r"""
extern "C" __global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
"""


def ok(ret):
    err, *out = ret
    assert err in (OK, E.cudaSuccess), ret
    if not out:
        return None
    return out[0] if len(out) == 1 else tuple(out)


def device_with_context(**kwargs) -> tuple[Driver, object]:
    drv = Driver(**kwargs)
    ok(drv.cuInit(0))
    ctx = ok(drv.cuCtxCreate(None, 0, ok(drv.cuDeviceGet(0))))
    return drv, ctx


@pytest.fixture(scope="module")
def ptx() -> str:
    from gpusafe_testkit.corpus import nvrtc_compile

    return nvrtc_compile(ADD_ONE, "add_one.cu")


def launch_add_one(drv: Driver, ptx: str, d, n: int) -> None:
    mod = ok(drv.cuModuleLoadData(ptx.encode()))
    fn = ok(drv.cuModuleGetFunction(mod, b"add_one"))
    values = [np.array([int(d)], dtype=np.uint64), np.array([n], dtype=np.int32)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    ok(drv.cuLaunchKernel(fn, 1, 1, 1, n, 1, 1, 0, 0, params.ctypes.data, 0))


# -- parameter names ----------------------------------------------------------


def test_runtime_functions_have_the_real_parameter_names() -> None:
    instance = Runtime(Driver())
    assert len(runtime.IMPLEMENTED) >= 30
    for name in sorted(runtime.IMPLEMENTED):
        want = list(inspect.signature(getattr(real_runtime, name)).parameters)
        assert list(inspect.signature(getattr(runtime, name)).parameters) == want, name
        assert list(inspect.signature(getattr(instance, name)).parameters) == want, name


def test_driver_calls_take_keyword_arguments(ptx: str) -> None:
    drv = Driver()
    ok(drv.cuInit(Flags=0))
    dev = ok(drv.cuDeviceGet(ordinal=0))
    ok(drv.cuCtxCreate(ctxCreateParams=None, flags=0, dev=dev))
    host = np.arange(8, dtype=np.int32)
    d = ok(drv.cuMemAlloc(bytesize=host.nbytes))
    ok(drv.cuMemcpyHtoD(dstDevice=d, srcHost=host, ByteCount=host.nbytes))
    mod = ok(drv.cuModuleLoadData(image=ptx.encode()))
    fn = ok(drv.cuModuleGetFunction(hmod=mod, name=b"add_one"))
    values = [np.array([int(d)], dtype=np.uint64), np.array([8], dtype=np.int32)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    ok(drv.cuLaunchKernel(f=fn, gridDimX=1, gridDimY=1, gridDimZ=1, blockDimX=8, blockDimY=1,
                          blockDimZ=1, sharedMemBytes=0, hStream=0,
                          kernelParams=params.ctypes.data, extra=0))
    back = np.zeros_like(host)
    ok(drv.cuMemcpyDtoH(dstHost=back, srcDevice=d, ByteCount=back.nbytes))
    assert (back == host + 1).all()
    ok(drv.cuMemFree(dptr=d))


def test_runtime_calls_take_keyword_arguments() -> None:
    rt = Runtime(Driver())
    host = np.arange(16, dtype=np.uint8)
    p = ok(rt.cudaMalloc(size=16))
    ok(rt.cudaMemcpy(dst=p, src=host, count=16, kind=K.cudaMemcpyHostToDevice))
    ok(rt.cudaMemset(devPtr=p, value=7, count=4))
    back = np.zeros_like(host)
    ok(rt.cudaMemcpy(dst=back, src=p, count=16, kind=K.cudaMemcpyDeviceToHost))
    assert list(back[:4]) == [7] * 4 and (back[4:] == host[4:]).all()
    ok(rt.cudaFree(devPtr=p))


def test_a_wrong_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        Driver().cuMemAlloc(size=16)  # cuda-python names it bytesize
    with pytest.raises(TypeError):
        driver.cuCtxCreate(flags=0, device=0)


def test_cuCtxCreate_12x_form_by_keyword() -> None:
    drv = Driver()
    ok(drv.cuInit(0))
    ctx = ok(drv.cuCtxCreate(flags=0, dev=0))
    assert int(ok(drv.cuCtxGetCurrent())) == int(ctx)
    with pytest.raises(TypeError):
        drv.cuCtxCreate(ctxCreateParams=None, flags=0)  # dev missing


# -- independent devices ----------------------------------------------------------


def test_allocations_of_one_driver_are_not_anothers() -> None:
    a, _ = device_with_context()
    b, _ = device_with_context()
    p = ok(a.cuMemAlloc(64))
    assert a.memory is not b.memory
    assert a.memory.find(int(p)) is not None and b.memory.find(int(p)) is None
    assert b.cuMemFree(p) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert "is not a device allocation" in b.last_error_detail()
    ok(a.cuMemFree(p))


def test_same_address_in_two_drivers_holds_two_values() -> None:
    a, _ = device_with_context()
    b, _ = device_with_context()
    pa, pb = ok(a.cuMemAlloc(4)), ok(b.cuMemAlloc(4))
    ok(a.cuMemsetD32(pa, 1, 1))
    ok(b.cuMemsetD32(pb, 2, 1))
    out = np.zeros(1, np.uint32)
    ok(a.cuMemcpyDtoH(out, pa, 4))
    assert out[0] == 1
    ok(b.cuMemcpyDtoH(out, pb, 4))
    assert out[0] == 2


def test_contexts_and_handles_of_one_driver_are_invalid_in_another() -> None:
    a, ctx_a = device_with_context()
    b = Driver()
    ok(b.cuInit(0))
    assert int(ok(b.cuCtxGetCurrent())) == 0  # a's current context is not b's
    assert b.cuCtxSetCurrent(ctx_a) == (R.CUDA_ERROR_INVALID_CONTEXT,)
    assert b.cuMemAlloc(16) == (R.CUDA_ERROR_INVALID_CONTEXT, None)
    stream = ok(a.cuStreamCreate(0))
    ok(b.cuCtxCreate(None, 0, 0))
    assert b.cuStreamSynchronize(stream) == (R.CUDA_ERROR_INVALID_HANDLE,)
    ok(a.cuStreamSynchronize(stream))


def test_errors_are_per_driver() -> None:
    a, _ = device_with_context()
    b, _ = device_with_context()
    assert b.cuMemAlloc(0) == (R.CUDA_ERROR_INVALID_VALUE, None)
    assert "0 bytes" in b.last_error_detail()
    assert a.last_error_detail() is None


def test_a_sticky_error_stays_in_its_driver(ptx: str) -> None:
    a, _ = device_with_context()
    b, _ = device_with_context()
    mod = ok(a.cuModuleLoadData(ptx.encode()))
    fn = ok(a.cuModuleGetFunction(mod, b"add_one"))
    values = [np.array([0x10], dtype=np.uint64), np.array([1], dtype=np.int32)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    assert a.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, params.ctypes.data, 0)[0] == \
        R.CUDA_ERROR_ILLEGAL_ADDRESS
    assert a.cuMemAlloc(16)[0] == R.CUDA_ERROR_ILLEGAL_ADDRESS  # sticky in a's context
    ok(b.cuMemAlloc(16))


def test_kernels_of_two_drivers_see_their_own_memory(ptx: str) -> None:
    a, _ = device_with_context()
    b, _ = device_with_context()
    host = np.arange(32, dtype=np.int32)
    pa, pb = ok(a.cuMemAlloc(host.nbytes)), ok(b.cuMemAlloc(host.nbytes))
    ok(a.cuMemcpyHtoD(pa, host, host.nbytes))
    ok(b.cuMemcpyHtoD(pb, host * 10, host.nbytes))
    launch_add_one(a, ptx, pa, 32)
    launch_add_one(a, ptx, pa, 32)
    launch_add_one(b, ptx, pb, 32)
    out = np.zeros_like(host)
    ok(a.cuMemcpyDtoH(out, pa, out.nbytes))
    assert (out == host + 2).all()
    ok(b.cuMemcpyDtoH(out, pb, out.nbytes))
    assert (out == host * 10 + 1).all()


def test_reset_of_one_driver_leaves_another_alone() -> None:
    a, _ = device_with_context()
    b, _ = device_with_context()
    p = ok(b.cuMemAlloc(16))
    a.reset()
    assert a.cuMemAlloc(16) == (R.CUDA_ERROR_NOT_INITIALIZED, None)
    ok(b.cuMemFree(p))


def test_module_functions_are_the_default_drivers() -> None:
    assert driver.cuMemAlloc.__self__ is driver.default_driver()
    assert driver.device_memory() is driver.default_driver().memory
    assert runtime.cudaMalloc.__self__ is runtime.default_runtime()
    assert runtime.default_runtime().driver is driver.default_driver()


def test_unimplemented_functions_are_absent_from_a_driver_and_a_runtime() -> None:
    assert "cuGraphicsMapResources" in driver.REAL_FUNCTIONS
    assert not hasattr(Driver(), "cuGraphicsMapResources")
    with pytest.raises(AttributeError, match="cuGraphicsMapResources.*does not implement"):
        Driver().cuGraphicsMapResources  # noqa: B018
    with pytest.raises(AttributeError, match="cudaGraphicsMapResources.*does not implement"):
        Runtime(Driver()).cudaGraphicsMapResources  # noqa: B018
    assert Driver.IMPLEMENTED == driver.IMPLEMENTED
    assert Runtime.IMPLEMENTED == runtime.IMPLEMENTED


def test_types_are_cuda_pythons_on_both_surfaces() -> None:
    assert driver.CUdeviceptr is real_driver.CUdeviceptr
    assert runtime.cudaError_t is real_runtime.cudaError_t


# -- a runtime over a driver ----------------------------------------------------------


def test_a_runtime_pointer_is_its_drivers(ptx: str) -> None:
    drv = Driver()
    rt = Runtime(drv)
    host = np.arange(8, dtype=np.int32)
    p = ok(rt.cudaMalloc(host.nbytes))
    ok(rt.cudaMemcpy(p, host, host.nbytes, K.cudaMemcpyHostToDevice))
    launch_add_one(drv, ptx, p, 8)  # the runtime made the primary context current
    out = np.zeros_like(host)
    ok(drv.cuMemcpyDtoH(out, p, out.nbytes))
    assert (out == host + 1).all()
    assert drv.memory.find(p) is not None


def test_last_errors_are_per_runtime() -> None:
    a, b = Runtime(Driver()), Runtime(Driver())
    assert a.cudaMemcpy(0, 0, 4, K.cudaMemcpyHostToHost) == (E.cudaErrorInvalidValue,)
    assert b.cudaGetLastError() == (E.cudaSuccess,)
    assert a.cudaGetLastError() == (E.cudaErrorInvalidValue,)


# -- the memory policy a driver is made with ----------------------------------------------


def test_default_driver_pads_allocations_with_a_red_zone() -> None:
    drv, _ = device_with_context()
    p, q = int(ok(drv.cuMemAlloc(256))), int(ok(drv.cuMemAlloc(256)))
    assert q - p >= 256 + RED_ZONE
    assert drv.memory.red_zone == RED_ZONE and drv.memory.quarantine > 0


def test_driver_without_red_zone_or_quarantine() -> None:
    """An engine that pads and quarantines allocations itself asks for neither."""
    drv, _ = device_with_context(red_zone=0, quarantine=0)
    p, q = int(ok(drv.cuMemAlloc(256))), int(ok(drv.cuMemAlloc(256)))
    assert q - p == 256  # adjacent: the engine's own red zone is the only padding
    ok(drv.cuMemsetD8(p, 0xAB, 256))
    ok(drv.cuMemFree(p))
    assert drv.memory.peek(p, 4) == bytes(4)  # no quarantine: freed contents are gone
    drv.reset()
    assert drv.memory.red_zone == 0 and drv.memory.quarantine == 0  # the policy survives reset
