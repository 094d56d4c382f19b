"""Cooperative launches on the CPU device: ``grid.sync()`` (cooperative
groups' barrier in the driver's grid workspace, ``%envreg1:%envreg2``) holds
across every block of the grid, also when the scheduler's chunk budget
would split the grid; a grid larger than the device holds at once is
refused; ``cuLaunchKernelEx`` takes the cooperative attribute and refuses
the others by name; a non-cooperative launch of ``grid.sync()`` traps, as on
a GPU."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpusafe.cpu import driver, scheduler

R = driver.CUresult
A = driver.CUdevice_attribute

KERNELS = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Each block adds its slice into partial[block]; after the grid barrier,
// block 0 sums the partials.  Block b first spins b rounds, so blocks reach
// the barrier at different times.
extern "C" __global__ void grid_sum(const int *x, int *partial, int *out, int n, int sync) {
    __shared__ int s;
    if (threadIdx.x == 0) {
        s = 0;
        volatile int spin = 0;
        for (int k = 0; k < (int)blockIdx.x; k++) spin = spin + 1;
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&s, x[i]);
    }
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
    if (sync) cg::this_grid().sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        int t = 0;
        for (int b = 0; b < (int)gridDim.x; b++) t += partial[b];
        *out = t;
    }
}

// rounds of "read the next block's value, barrier, write mine, barrier":
// a rotation of buf by `rounds` places when every barrier holds grid-wide
extern "C" __global__ void rotate(int *buf, int rounds) {
    cg::grid_group grid = cg::this_grid();
    for (int r = 0; r < rounds; r++) {
        int v = buf[(blockIdx.x + 1) % gridDim.x];
        grid.sync();
        if (threadIdx.x == 0) buf[blockIdx.x] = v;
        grid.sync();
    }
}
"""


def ok(ret):
    err, *out = ret
    assert err == R.CUDA_SUCCESS, (err, driver.last_error_detail())
    return None if not out else out[0] if len(out) == 1 else tuple(out)


@pytest.fixture(scope="module")
def ptx() -> str:
    from gpusafe_testkit.corpus import nvrtc_compile

    return nvrtc_compile(KERNELS, "cooperative.cu", arch="compute_90")


@pytest.fixture
def mod(ptx, monkeypatch):
    driver.reset()
    # a grid barrier that never releases fails the launch instead of hanging the test
    monkeypatch.setattr(driver.default_driver(), "kernel_timeout", 30.0)
    ok(driver.cuInit(0))
    ok(driver.cuCtxCreate(None, 0, ok(driver.cuDeviceGet(0))))
    yield ok(driver.cuModuleLoadData(ptx.encode()))
    driver.reset()


def func(mod, name: str):
    return ok(driver.cuModuleGetFunction(mod, name.encode()))


def device_array(values: np.ndarray) -> int:
    d = ok(driver.cuMemAlloc(values.nbytes))
    ok(driver.cuMemcpyHtoD(d, values, values.nbytes))
    return int(d)


def fetch(d: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    ok(driver.cuMemcpyDtoH(out, d, out.nbytes))
    return out


PTR, INT = ctypes.c_void_p, ctypes.c_int


def sum_setup(blocks: int):
    x = (np.arange(5000, dtype=np.int32) % 13) - 4
    partial = device_array(np.full(blocks, -1000, dtype=np.int32))
    out = device_array(np.zeros(1, dtype=np.int32))
    return x, partial, out, device_array(x)


def test_the_device_says_it_launches_cooperatively() -> None:
    driver.reset()
    ok(driver.cuInit(0))
    assert ok(driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0)) == 1
    assert ok(driver.cuDeviceGetAttribute(
        A.CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, 0)) == 0
    assert "cuLaunchCooperativeKernel" in driver.IMPLEMENTED
    assert "cuLaunchCooperativeKernelMultiDevice" not in driver.IMPLEMENTED


def test_grid_sync_holds_across_blocks_the_chunk_budget_would_split(mod, monkeypatch) -> None:
    monkeypatch.setattr(scheduler, "MAX_CHUNK_LANES", 64)  # a block per chunk
    f = func(mod, "grid_sum")
    blocks = 12
    x, partial, out, dx = sum_setup(blocks)
    args = ((dx, partial, out, len(x), 1), (PTR, PTR, PTR, INT, INT))
    ok(driver.cuLaunchCooperativeKernel(f, blocks, 1, 1, 64, 1, 1, 0, 0, args))
    assert fetch(out, np.zeros(1, np.int32))[0] == x.sum()
    # the same sum without the barrier, in chunks, misses the later blocks' partials
    ok(driver.cuMemcpyHtoD(partial, np.full(blocks, -1000, np.int32), 4 * blocks))
    args = ((dx, partial, out, len(x), 0), (PTR, PTR, PTR, INT, INT))
    ok(driver.cuLaunchKernel(f, blocks, 1, 1, 64, 1, 1, 0, 0, args, 0))
    assert fetch(out, np.zeros(1, np.int32))[0] != x.sum()


def test_repeated_grid_syncs_rotate_across_the_whole_grid(mod) -> None:
    f = func(mod, "rotate")
    blocks = 24
    values = np.arange(blocks, dtype=np.int32) * 7
    buf = device_array(values)
    ok(driver.cuLaunchCooperativeKernel(f, blocks, 1, 1, 96, 1, 1, 0, 0,
                                        ((buf, 5), (PTR, INT))))
    np.testing.assert_array_equal(fetch(buf, values), np.roll(values, -5))


def test_a_grid_larger_than_the_device_holds_is_too_large(mod) -> None:
    f = func(mod, "rotate")
    buf = device_array(np.zeros(4096, dtype=np.int32))
    sms = ok(driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0))
    for threads, shared in ((1024, 0), (256, 40 * 1024)):
        per_sm = ok(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, threads, shared))
        most = per_sm * sms
        args = ((buf, 1), (PTR, INT))
        err, = driver.cuLaunchCooperativeKernel(f, most + 1, 1, 1, threads, 1, 1, shared, 0,
                                                args)
        assert err == R.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
        detail = driver.last_error_detail()
        assert f"{most + 1} blocks" in detail and f"= {most} at once" in detail, detail
        ok(driver.cuLaunchCooperativeKernel(f, most, 1, 1, threads, 1, 1, shared, 0, args))


def _config(blocks: int, threads: int, attrs: list) -> driver.CUlaunchConfig:
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = blocks, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
    config.sharedMemBytes = 0
    config.hStream = 0
    config.attrs = attrs
    config.numAttrs = len(attrs)
    return config


def _attribute(ident, **values) -> driver.CUlaunchAttribute:
    attr = driver.CUlaunchAttribute()
    attr.id = ident
    for name, value in values.items():
        setattr(attr.value, name, value)
    return attr


def test_launch_kernel_ex_takes_the_cooperative_attribute_and_names_the_others(mod) -> None:
    f = func(mod, "grid_sum")
    blocks = 10
    x, partial, out, dx = sum_setup(blocks)
    args = ((dx, partial, out, len(x), 1), (PTR, PTR, PTR, INT, INT))
    ID = driver.CUlaunchAttributeID
    coop = _attribute(ID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, cooperative=1)
    ok(driver.cuLaunchKernelEx(_config(blocks, 128, [coop]), f, args, 0))
    assert fetch(out, np.zeros(1, np.int32))[0] == x.sum()
    err, = driver.cuLaunchKernelEx(_config(10_000, 128, [coop]), f, args, 0)
    assert err == R.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
    priority = _attribute(ID.CU_LAUNCH_ATTRIBUTE_PRIORITY, priority=1)
    err, = driver.cuLaunchKernelEx(_config(blocks, 128, [coop, priority]), f, args, 0)
    assert err == R.CUDA_ERROR_NOT_SUPPORTED
    assert "CU_LAUNCH_ATTRIBUTE_PRIORITY" in driver.last_error_detail()
    # cooperative = 0 is a plain launch: its grid.sync() traps
    plain = _attribute(ID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, cooperative=0)
    err, = driver.cuLaunchKernelEx(_config(blocks, 128, [plain]), f, args, 0)
    assert err == R.CUDA_ERROR_LAUNCH_FAILED
    assert "trap" in driver.last_error_detail()


def test_grid_sync_in_a_plain_launch_traps_as_on_a_gpu(mod) -> None:
    f = func(mod, "rotate")
    buf = device_array(np.zeros(4, dtype=np.int32))
    err, = driver.cuLaunchKernel(f, 4, 1, 1, 32, 1, 1, 0, 0, ((buf, 1), (PTR, INT)), 0)
    assert err == R.CUDA_ERROR_LAUNCH_FAILED
    assert "trap" in driver.last_error_detail()


def _checked_door(ptx: str, backend):
    """An engine over ``backend`` with the cooperative kernels loaded through its door."""
    from gpusafe.doors.python_driver import DriverDoor
    from gpusafe.engine.checking import Engine, Policy
    from gpusafe.engine.findings import Findings
    from gpusafe.report import ReportBuilder

    engine = Engine(backend, Findings(ReportBuilder(["app"], "cpu")), Policy())
    d = backend.driver
    ok(d.cuInit(0))
    ok(d.cuCtxCreate(None, 0, 0))
    names = ("cuModuleLoadData", "cuModuleGetFunction", "cuMemAlloc", "cuLaunchCooperativeKernel")
    w = DriverDoor(engine, {n: getattr(d, n) for n in names}).wrappers()
    module = ok(w["cuModuleLoadData"](ptx.encode()))
    return engine, d, w, ok(w["cuModuleGetFunction"](module, b"rotate"))


@pytest.mark.slow  # instrumenting cooperative_groups' module takes about a second
def test_a_checked_cooperative_launch_sees_the_grid_workspace_as_valid_memory(ptx) -> None:
    from gpusafe.backends.cpu import CpuBackend

    engine, d, w, f = _checked_door(ptx, CpuBackend())
    values = np.arange(16, dtype=np.int32)
    buf = int(ok(w["cuMemAlloc"](values.nbytes)))
    ok(d.cuMemcpyHtoD(buf, values, values.nbytes))
    ok(w["cuLaunchCooperativeKernel"](f, 16, 1, 1, 32, 1, 1, 0, 0, ((buf, 3), (PTR, INT))))
    report = engine.findings.report.build(exit_code=0).to_dict()
    assert report["violations"] == [] and report["summary"]["launches"] == 1, report
    np.testing.assert_array_equal(fetch_from(d, buf, values), np.roll(values, -3))


@pytest.mark.slow
def test_a_backend_that_cannot_place_the_workspace_refuses_a_checked_cooperative_launch(
        ptx) -> None:
    from gpusafe.backends.cpu import CpuBackend

    class NoWorkspace(CpuBackend):
        def grid_workspace(self) -> int | None:
            return None

    engine, d, w, f = _checked_door(ptx, NoWorkspace())
    buf = int(ok(w["cuMemAlloc"](64)))
    err, = w["cuLaunchCooperativeKernel"](f, 16, 1, 1, 32, 1, 1, 0, 0, ((buf, 1), (PTR, INT)))
    assert err == R.CUDA_ERROR_NOT_SUPPORTED
    report = engine.findings.report.build(exit_code=0).to_dict()
    calls = report["unimplemented_calls"]
    assert [c["name"] for c in calls] == ["cuLaunchCooperativeKernel"], calls
    assert "grid workspace" in calls[0]["reason"] and "rotate" in calls[0]["reason"], calls
    assert report["summary"]["launches"] == 0 and report["summary"]["unimplemented_calls"] == 1


def fetch_from(d, address: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    ok(d.cuMemcpyDtoH(out, address, out.nbytes))
    return out
