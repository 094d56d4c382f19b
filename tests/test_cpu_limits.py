"""The CPU device's limits as a GPU has them: a thread's stack
(``CU_LIMIT_STACK_SIZE``) bounds how deep a recursion goes, and a kernel
timeout (``Driver(kernel_timeout=...)``) is a watchdog for a kernel that never
ends.  Neither is Python's: a recursion far deeper than the interpreter's
recursion limit runs, and a spinning kernel stops."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from cuda.bindings.runtime import cudaError_t, cudaLimit

from gpusafe.cpu.driver import CUlimit, CUresult, Driver
from gpusafe.cpu.errors import StackOverflow
from gpusafe.cpu.frames import CALL_FRAME_BYTES
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.cpu.runtime import Runtime
from gpusafe_testkit.corpus import nvrtc_compile

OK = CUresult.CUDA_SUCCESS

RECURSION = r"""
__device__ int depth(int n) { return n ? 1 + depth(n - 1) : 0; }
extern "C" __global__ void recurse(int *out, int n) { out[threadIdx.x] = depth(n + threadIdx.x); }

extern "C" __global__ void big_frame(int *out, int n) {
    volatile int local[600];                    // 2400 bytes: more than the default stack
    for (int i = 0; i < 600; i++) local[i] = i * n;
    out[0] = local[n % 600] + local[599];
}
"""

SPIN = r"""
extern "C" __global__ void spin(volatile int *flag, int *out) {
    while (*flag) { }
    out[threadIdx.x] = 1;
}
"""


@pytest.fixture(scope="module")
def recursion_ptx() -> str:
    return nvrtc_compile(RECURSION, "recursion.cu", "compute_75", ("-G",))


class Device:
    """A driver with one context and one module loaded, for the tests below."""

    def __init__(self, ptx: str, **options: object) -> None:
        self.drv = drv = Driver(**options)
        assert drv.cuInit(0)[0] == OK
        err, dev = drv.cuDeviceGet(0)
        err, self.ctx = drv.cuCtxCreate(None, 0, dev)
        assert err == OK
        err, self.module = drv.cuModuleLoadData(ptx.encode() + b"\0")
        assert err == OK, drv.last_error_detail()

    def ok(self, ret: tuple) -> object:
        err, *out = ret
        assert err == OK, (err, self.drv.last_error_detail())
        return out[0] if len(out) == 1 else out

    def buffer(self, n: int) -> int:
        address = self.ok(self.drv.cuMemAlloc(4 * n))
        self.ok(self.drv.cuMemsetD32(address, 0, n))
        return int(address)

    def launch(self, kernel: str, threads: int, *args: np.ndarray) -> CUresult:
        fn = self.ok(self.drv.cuModuleGetFunction(self.module, kernel.encode()))
        params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
        (err,) = self.drv.cuLaunchKernel(fn, 1, 1, 1, threads, 1, 1, 0, 0, params.ctypes.data, 0)
        return err

    def read(self, address: int, n: int) -> np.ndarray:
        out = np.zeros(n, dtype=np.int32)
        self.ok(self.drv.cuMemcpyDtoH(out, address, out.nbytes))
        return out


def ptr(address: int) -> np.ndarray:
    return np.array([address], dtype=np.uint64)


def i32(value: int) -> np.ndarray:
    return np.array([value], dtype=np.int32)


# ---------------------------------------------------------------------------
# recursion and the stack


@pytest.mark.slow
def test_a_recursion_5000_deep_runs_with_a_stack_that_holds_it(recursion_ptx) -> None:
    dev = Device(recursion_ptx)
    dev.ok(dev.drv.cuCtxSetLimit(CUlimit.CU_LIMIT_STACK_SIZE, 128 << 10))
    out = dev.buffer(4)
    assert dev.launch("recurse", 4, ptr(out), i32(5000)) == OK
    np.testing.assert_array_equal(dev.read(out, 4), 5000 + np.arange(4))


@pytest.mark.slow
def test_recursion_depth_is_not_bounded_by_python_recursion(recursion_ptx) -> None:
    program = Program(recursion_ptx, memory := DeviceMemory())
    out = memory.alloc(4)
    depth = 3 * sys.getrecursionlimit()
    params = np.array([out], np.uint64).tobytes() + np.array([depth], np.int32).tobytes()
    program.launch("recurse", (1, 1, 1), (1, 1, 1), 0, params)
    assert np.frombuffer(memory.read(out, 4), np.int32)[0] == depth


def test_a_recursion_deeper_than_the_stack_fails_the_launch_naming_kernel_and_depth(
        recursion_ptx) -> None:
    dev = Device(recursion_ptx)
    default = dev.ok(dev.drv.cuCtxGetLimit(CUlimit.CU_LIMIT_STACK_SIZE))
    assert default == 1024
    out = dev.buffer(1)
    assert dev.launch("recurse", 1, ptr(out), i32(5000)) == CUresult.CUDA_ERROR_LAUNCH_FAILED
    detail = dev.drv.last_error_detail()
    assert "recurse" in detail and "stack overflow" in detail
    deepest = default // CALL_FRAME_BYTES  # depth() has no .local frame: 16 bytes a call
    assert f"call depth {deepest + 1} " in detail, detail
    assert "1024" in detail
    # a fault the real driver treats as fatal: the context keeps it
    assert dev.drv.cuCtxSynchronize()[0] == CUresult.CUDA_ERROR_LAUNCH_FAILED


def test_a_recursion_within_the_default_stack_runs(recursion_ptx) -> None:
    dev = Device(recursion_ptx)
    out = dev.buffer(1)
    assert dev.launch("recurse", 1, ptr(out), i32(1024 // CALL_FRAME_BYTES - 1)) == OK
    assert dev.read(out, 1)[0] == 1024 // CALL_FRAME_BYTES - 1


def test_a_kernel_frame_larger_than_the_stack_size_runs_as_the_driver_grows_it(
        recursion_ptx) -> None:
    dev = Device(recursion_ptx)
    out = dev.buffer(1)
    assert dev.launch("big_frame", 1, ptr(out), i32(7)) == OK
    assert dev.read(out, 1)[0] == 7 * 7 + 599 * 7


@pytest.mark.slow
def test_the_runtime_sets_the_stack_size_of_its_context(recursion_ptx) -> None:
    drv = Driver()
    rt = Runtime(drv)
    assert rt.cudaDeviceGetLimit(cudaLimit.cudaLimitStackSize) == (cudaError_t.cudaSuccess, 1024)
    assert rt.cudaDeviceSetLimit(cudaLimit.cudaLimitStackSize, 128 << 10)[0] == \
        cudaError_t.cudaSuccess
    assert drv.cuCtxGetLimit(CUlimit.CU_LIMIT_STACK_SIZE) == (OK, 128 << 10)
    err, module = drv.cuModuleLoadData(recursion_ptx.encode() + b"\0")
    err, fn = drv.cuModuleGetFunction(module, b"recurse")
    err, out = rt.cudaMalloc(4)
    args = [ptr(int(out)), i32(3000)]
    params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    assert drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, params.ctypes.data, 0) == (OK,)
    got = np.zeros(1, np.int32)
    assert drv.cuMemcpyDtoH(got, int(out), 4) == (OK,)
    assert got[0] == 3000


def test_the_stack_overflow_is_raised_by_the_program_with_its_depth(recursion_ptx) -> None:
    program = Program(recursion_ptx, memory := DeviceMemory())
    out = memory.alloc(4)
    params = np.array([out], np.uint64).tobytes() + np.array([100], np.int32).tobytes()
    with pytest.raises(StackOverflow, match=r"kernel recurse: .*call depth 33 \(calling "):
        program.launch("recurse", (1, 1, 1), (1, 1, 1), 0, params, stack_size=512)


# ---------------------------------------------------------------------------
# the watchdog


@pytest.mark.slow
def test_a_kernel_that_never_ends_times_out_with_a_sticky_error() -> None:
    dev = Device(nvrtc_compile(SPIN, "spin.cu", "compute_75"), kernel_timeout=1.0)
    flag = dev.buffer(1)
    dev.ok(dev.drv.cuMemsetD32(flag, 1, 1))
    out = dev.buffer(64)
    started = time.monotonic()
    err = dev.launch("spin", 64, ptr(flag), ptr(out))
    elapsed = time.monotonic() - started
    assert err == CUresult.CUDA_ERROR_LAUNCH_TIMEOUT
    assert 1.0 <= elapsed < 30
    detail = dev.drv.last_error_detail()
    assert "spin" in detail and "still running after" in detail
    assert "thread (0, 0, 0)" in detail and "block (0, 0, 0)" in detail
    assert "kernel timeout is 1 s" in detail
    # as after a real driver's watchdog, the context is unusable
    assert dev.drv.cuCtxSynchronize()[0] == CUresult.CUDA_ERROR_LAUNCH_TIMEOUT


def test_a_kernel_that_ends_in_time_is_not_stopped() -> None:
    dev = Device(nvrtc_compile(SPIN, "spin.cu", "compute_75"), kernel_timeout=30.0)
    flag = dev.buffer(1)
    out = dev.buffer(64)
    assert dev.launch("spin", 64, ptr(flag), ptr(out)) == OK
    np.testing.assert_array_equal(dev.read(out, 64), np.ones(64))


@pytest.mark.slow
def test_without_a_timeout_a_spinning_kernel_ends_when_its_flag_is_cleared() -> None:
    dev = Device(nvrtc_compile(SPIN, "spin.cu", "compute_75"))
    flag = dev.buffer(1)
    dev.ok(dev.drv.cuMemsetD32(flag, 1, 1))
    out = dev.buffer(1)
    view = dev.drv.memory.view(flag, 4).view(np.int32)
    clear = threading.Timer(0.5, lambda: view.__setitem__(0, 0))
    clear.start()
    try:
        assert dev.launch("spin", 1, ptr(flag), ptr(out)) == OK
    finally:
        clear.cancel()
    assert dev.read(out, 1)[0] == 1


def test_the_kernel_timeout_must_be_positive() -> None:
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="kernel timeout"):
            Driver(kernel_timeout=bad)
