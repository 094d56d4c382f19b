"""The CPU device converts arguments exactly as cuda-python does (issue 10,
item 7), tested against the real ``cuda.bindings`` module, not a copy of
our expectations.

The real bindings convert every argument before they reach the C driver: a
value they cannot convert raises (``TypeError``, ``OverflowError``,
``ValueError``) before any driver is needed; a value they can convert goes
on to the driver, which on a machine without one fails to load
(``RuntimeError: Failed to dlopen libcuda.so.1``): "accepted" (where a
driver is there but no GPU, the result code it answers is "accepted" too;
where a GPU works, the calls, made with made-up handles, are not made and
those tests skip).  For each call and each
value below, the CPU device must accept what the real module accepts (it
may answer with an error code, never a conversion exception) and reject
what it rejects with the same exception and the same message.

What an accepted value *means* is observed through the real module too: a
struct field of the same C type converts with the same Cython code
(``CUlaunchConfig.gridDimX`` is an ``unsigned int``, like cuLaunchKernel's
``gridDimX``), and a kernel launched with ``gridDimX=196.3125`` runs as
many blocks as that field holds.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from cuda.bindings import driver as real
from cuda.bindings import runtime as real_rt

from gpusafe.cpu.driver import Driver
from gpusafe.cpu.runtime import Runtime
from gpusafe.cudaapi.args import c_int
from gpusafe_testkit.corpus import nvrtc_compile

KERNELS = r"""
extern "C" __global__ void nop() {}
extern "C" __global__ void count_blocks(unsigned* n)
{
    if (threadIdx.x == 0) atomicAdd(n, 1u);
}
"""

VALUES: list[Any] = [
    3, True, 196.3125, -0.5, 2.5e9, np.float32(2.5), np.float64(7.9), np.int64(3), np.uint8(3),
    np.uint64(2**63), np.bool_(True), np.array(3.7), np.array([3]), np.array([]),
    Decimal("2.5"), Fraction(7, 2), 1 + 0j, ctypes.c_uint(3), ctypes.c_void_p(8), None, "3",
    b"3", bytearray(4), [3], (3,), -1, -(2**31) - 1, 2**31, 2**32, 2**63, 2**64,
    math.nan, math.inf, -math.inf, real.CUdeviceptr(3), real.CUstream(0), real.CUdevice(0),
]


Outcome = tuple[str, str]  # ("accepted", "") or (exception type name, message)


def real_outcome(call: Callable[[], Any]) -> Outcome:
    try:
        call()
    except RuntimeError as e:
        if "dlopen" in str(e):  # converted; then there was no driver to call
            return ("accepted", "")
        return (type(e).__name__, str(e))
    except Exception as e:  # noqa: BLE001 - whatever the real module raises is the answer
        return (type(e).__name__, str(e))
    return ("accepted", "")


@pytest.fixture(scope="module")
def converting_only() -> None:
    """The real calls below carry made-up handles and sizes: where a working
    GPU driver would run them rather than stop after converting, they are
    not made."""
    try:
        (err,) = real.cuInit(0)
    except RuntimeError:
        return  # no driver to load: every call stops after its conversion
    if err == real.CUresult.CUDA_SUCCESS:
        pytest.skip("a working CUDA driver is here: the real calls would run, not only convert")


def cpu_outcome(call: Callable[[], Any]) -> Outcome:
    try:
        call()
    except Exception as e:  # noqa: BLE001 - compared with the real module's
        return (type(e).__name__, str(e))
    return ("accepted", "")


@pytest.fixture(scope="module")
def device() -> dict[str, Any]:
    """A CPU device with a context, a module, a function, a buffer and a runtime."""
    drv = Driver()
    ok = real.CUresult.CUDA_SUCCESS
    assert drv.cuInit(0)[0] == ok
    _, dev = drv.cuDeviceGet(0)
    _, ctx = drv.cuCtxCreate(None, 0, dev)
    ptx = nvrtc_compile(KERNELS, "conversion.cu")
    err, mod = drv.cuModuleLoadData(ptx.encode() + b"\0")
    assert err == ok
    _, nop = drv.cuModuleGetFunction(mod, b"nop")
    _, count = drv.cuModuleGetFunction(mod, b"count_blocks")
    _, buf = drv.cuMemAlloc(1 << 16)
    return {"driver": drv, "runtime": Runtime(drv), "nop": nop, "count": count, "buf": buf,
            "module": mod}


# Each case: a call of the real module and the same call of the CPU device,
# with the value under test in one argument.  The other arguments are valid
# on the CPU device (``d``: the fixture); to the real module only their
# conversion matters.
Case = Callable[[Any, dict[str, Any], Any], Any]


def _launch(position: int) -> Case:
    def call(api, d, v):
        args: list[Any] = [d["nop"] if api is not real else real.CUfunction(0),
                           1, 1, 1, 1, 1, 1, 0, 0, None, 0]
        args[position] = v
        return api.cuLaunchKernel(*args)
    return call


CASES: dict[str, Case] = {
    "cuLaunchKernel gridDimX": _launch(1),
    "cuLaunchKernel gridDimZ": _launch(3),
    "cuLaunchKernel blockDimX": _launch(4),
    "cuLaunchKernel sharedMemBytes": _launch(7),
    "cuLaunchKernel hStream": _launch(8),
    "cuLaunchKernel extra": _launch(10),
    "cuLaunchKernel f": lambda api, d, v: api.cuLaunchKernel(v, 1, 1, 1, 1, 1, 1, 0, 0, None, 0),
    "cuMemAlloc bytesize": lambda api, d, v: api.cuMemAlloc(v),
    "cuMemFree dptr": lambda api, d, v: api.cuMemFree(v),
    "cuMemsetD8 value": lambda api, d, v: api.cuMemsetD8(_buf(api, d), v, 4),
    "cuMemsetD16 value": lambda api, d, v: api.cuMemsetD16(_buf(api, d), v, 4),
    "cuMemsetD32 N": lambda api, d, v: api.cuMemsetD32(_buf(api, d), 0, v),
    "cuMemcpyHtoD ByteCount": lambda api, d, v: api.cuMemcpyHtoD(_buf(api, d), bytes(64), v),
    "cuMemcpyHtoD srcHost": lambda api, d, v: api.cuMemcpyHtoD(_buf(api, d), v, 0),
    "cuMemcpyDtoH ByteCount": lambda api, d, v: api.cuMemcpyDtoH(bytearray(64), _buf(api, d), v),
    "cuDeviceGet ordinal": lambda api, d, v: api.cuDeviceGet(v),
    "cuDeviceGetName length": lambda api, d, v: api.cuDeviceGetName(v, 0),
    "cuCtxCreate flags": lambda api, d, v: _ctx_create(api, v, 0),
    "cuCtxCreate dev": lambda api, d, v: _ctx_create(api, 0, v),
    "cuStreamCreate Flags": lambda api, d, v: api.cuStreamCreate(v),
    "cuStreamCreateWithPriority priority": lambda api, d, v: api.cuStreamCreateWithPriority(0, v),
    "cuEventCreate Flags": lambda api, d, v: api.cuEventCreate(v),
    "cuCtxSetLimit value": lambda api, d, v: api.cuCtxSetLimit(
        real.CUlimit.CU_LIMIT_PRINTF_FIFO_SIZE, v),
    "cuOccupancy blockSize": lambda api, d, v: api.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        _fn(api, d), v, 0),
    "cuOccupancy dynamicSMemSize": lambda api, d, v:
        api.cuOccupancyMaxActiveBlocksPerMultiprocessor(_fn(api, d), 32, v),
}

RUNTIME_CASES: dict[str, Case] = {
    "cudaMalloc size": lambda api, d, v: api.cudaMalloc(v),
    "cudaMallocHost size": lambda api, d, v: api.cudaMallocHost(v),
    "cudaMallocPitch width": lambda api, d, v: api.cudaMallocPitch(v, 2),
    "cudaSetDevice device": lambda api, d, v: api.cudaSetDevice(v),
    "cudaMemset value": lambda api, d, v: api.cudaMemset(_rbuf(api, d), v, 4),
    "cudaMemset count": lambda api, d, v: api.cudaMemset(_rbuf(api, d), 0, v),
    "cudaMemcpy count": lambda api, d, v: api.cudaMemcpy(
        bytearray(64), _rbuf(api, d), v, real_rt.cudaMemcpyKind.cudaMemcpyDeviceToHost),
    "cudaStreamCreateWithFlags flags": lambda api, d, v: api.cudaStreamCreateWithFlags(v),
    "cudaEventCreateWithFlags flags": lambda api, d, v: api.cudaEventCreateWithFlags(v),
    "cudaStreamSynchronize stream": lambda api, d, v: api.cudaStreamSynchronize(v),
    "cudaFree devPtr": lambda api, d, v: api.cudaFree(v),
}


def _buf(api: Any, d: dict[str, Any]) -> Any:
    return d["buf"] if api is not real else real.CUdeviceptr(0)


def _rbuf(api: Any, d: dict[str, Any]) -> Any:
    return int(d["buf"]) if api is not real_rt else 0


def _fn(api: Any, d: dict[str, Any]) -> Any:
    return d["nop"] if api is not real else real.CUfunction(0)


def _ctx_create(api: Any, flags: Any, dev: Any) -> Any:
    result = api.cuCtxCreate(None, flags, dev)
    if api is not real and result[0] == real.CUresult.CUDA_SUCCESS:
        api.cuCtxPopCurrent()  # keep the fixture's context current
    return result


ADDRESSES = {"cuLaunchKernel extra"}
"""Cases whose argument is an address the driver reads: a value the real
module accepts is tried only when it converts to NULL (any other would be
read, by a real driver as by the CPU device)."""


def differences(real_call: Callable[[Any], Any], our_call: Callable[[Any], Any],
                values: list[Any], skip_accepted_address: bool = False) -> list[tuple]:
    """``(value, ours, the real module's)`` for each value on which the two differ."""
    out = []
    for value in values:
        expected = real_outcome(lambda v=value: real_call(v))
        if skip_accepted_address and expected[0] == "accepted" and c_int(value, "void_ptr"):
            continue  # an address the driver would read
        got = cpu_outcome(lambda v=value: our_call(v))
        if got != expected:
            out.append((value, got, expected))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_driver_converts_as_cuda_bindings(converting_only, device, case: str) -> None:
    call = CASES[case]
    assert differences(lambda v: call(real, device, v),
                       lambda v: call(device["driver"], device, v), VALUES,
                       skip_accepted_address=case in ADDRESSES) == []


@pytest.mark.parametrize("case", list(RUNTIME_CASES))
def test_runtime_converts_as_cuda_bindings(converting_only, device, case: str) -> None:
    call = RUNTIME_CASES[case]
    assert differences(lambda v: call(real_rt, device, v),
                       lambda v: call(device["runtime"], device, v), VALUES) == []


FIELDS = [("unsigned int", real.CUlaunchConfig, "gridDimX"),
          ("size_t", real.CUDA_MEMCPY2D, "WidthInBytes")]


@pytest.mark.parametrize(("ctype", "struct", "field"), FIELDS, ids=[f[0] for f in FIELDS])
def test_a_c_integer_means_what_the_real_module_makes_of_it(ctype, struct, field) -> None:
    """The value a C integer argument receives: the real module's struct
    field of the same C type, set and read back, against ``c_int``."""

    def real_value(v: Any) -> int:
        s = struct()
        setattr(s, field, v)
        return int(getattr(s, field))

    ours = [_value(lambda v=v: c_int(v, ctype)) for v in VALUES]
    theirs = [_value(lambda v=v: real_value(v)) for v in VALUES]
    assert [(v, a, b) for v, a, b in zip(VALUES, ours, theirs, strict=True) if a != b] == []


def _value(call: Callable[[], int]) -> tuple[str, Any]:
    try:
        return ("value", call())
    except Exception as e:  # noqa: BLE001 - compared between the two
        return (type(e).__name__, str(e))


def test_a_float_grid_size_launches_as_many_blocks_as_cuda_bindings_passes(device) -> None:
    """NVIDIA's vectorAddDrv passes ``gridDimX`` as a float (196.3125)."""
    drv = device["driver"]
    grid = 196.3125
    config = real.CUlaunchConfig()
    config.gridDimX = grid
    counter = device["buf"]
    assert drv.cuMemsetD32(counter, 0, 1)[0] == real.CUresult.CUDA_SUCCESS
    cell = np.array([int(counter)], dtype=np.uint64)
    params = np.array([cell.ctypes.data], dtype=np.uint64)
    err, = drv.cuLaunchKernel(device["count"], grid, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0)
    assert err == real.CUresult.CUDA_SUCCESS
    out = np.zeros(1, dtype=np.uint32)
    drv.cuMemcpyDtoH(out, counter, 4)
    assert int(out[0]) == int(config.gridDimX) == 196


# -- arguments that are not C integers: each with values of its own ------------------------

_c = ctypes
KERNEL_PARAMS: list[Any] = [
    None, 0, 8, bytearray(16), np.zeros(2, dtype=np.uint64), "x", [1], 2.5,
    ((), ()), ((1,), (_c.c_int,)), ((2.5,), (_c.c_int,)), ((np.float32(1),), (_c.c_float,)),
    ((np.int64(3),), (_c.c_int,)), ((_c.c_float(1.5),), (_c.c_double,)), ((None,), (None,)),
    ((real.CUdeviceptr(3),), (None,)), ((3,), (_c.c_void_p,)), ((2.5,), (_c.c_void_p,)),
    ((np.uint64(5),), (_c.c_void_p,)), ((1, 2), (_c.c_int,)), ((1,), (int,)),
    ((True,), (_c.c_bool,)), ((real.CUresult.CUDA_SUCCESS,), (None,)), ([1], [_c.c_int]),
    ((2**40,), (_c.c_int,)), (("a",), (_c.c_char,)), ((b"a",), (_c.c_char,)),
]

OTHER: dict[str, tuple[Case, list[Any]]] = {
    "cuLaunchKernel kernelParams": (
        lambda api, d, v: api.cuLaunchKernel(_fn(api, d), 1, 1, 1, 1, 1, 1, 0, 0, v, 0),
        KERNEL_PARAMS),
    "cuModuleGetFunction name": (
        lambda api, d, v: api.cuModuleGetFunction(
            d["module"] if api is not real else real.CUmodule(0), v),
        [b"nop", "nop", bytearray(b"nop"), None, 3, np.bytes_(b"nop"), memoryview(b"nop")]),
    "cuModuleLoadData image": (
        lambda api, d, v: api.cuModuleLoadData(v),
        [None, 0, "text", 2.5, [1], b"", bytearray(b"\0"), np.zeros(1, dtype=np.uint8)]),
    "cuDeviceGetAttribute attrib": (
        lambda api, d, v: api.cuDeviceGetAttribute(v, 0),
        [real.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 10, None, "x", 2.5,
         real_rt.cudaDeviceAttr.cudaDevAttrWarpSize]),
    "cuMemcpyDtoH dstHost": (
        lambda api, d, v: api.cuMemcpyDtoH(v, _buf(api, d), 0),
        [None, 0, bytearray(4), b"abc", np.zeros(3), np.zeros((4, 4))[:, 0], memoryview(b"x"),
         _c.c_int(0), (_c.c_char * 4)(), "s", 2.5, -1]),
    "cuStreamSynchronize hStream": (
        lambda api, d, v: api.cuStreamSynchronize(v),
        [None, 0, real.CUstream(0), real_rt.cudaStream_t(0), real.CUevent(0), "3", 2.5, -1,
         _c.c_void_p(0)]),
}

RUNTIME_OTHER: dict[str, tuple[Case, list[Any]]] = {
    "cudaMemcpy kind": (
        lambda api, d, v: api.cudaMemcpy(bytearray(4), _rbuf(api, d), 4, v),
        [real_rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, 2, None, "x", 2.5]),
    "cudaEventSynchronize event": (
        lambda api, d, v: api.cudaEventSynchronize(v),
        [None, 0, real_rt.cudaEvent_t(0), real.CUevent(0), real.CUstream(0), "3", 2.5, -1,
         [1]]),
    "cudaMemcpy dst": (
        lambda api, d, v: api.cudaMemcpy(v, _rbuf(api, d), 0,
                                         real_rt.cudaMemcpyKind.cudaMemcpyDeviceToHost),
        [None, 0, bytearray(4), "s", 2.5, -1, real.CUdeviceptr(0), [1]]),
}


@pytest.mark.parametrize("case", list(OTHER))
def test_driver_takes_handles_buffers_and_kernel_params_as_cuda_bindings(
        converting_only, device, case) -> None:
    call, values = OTHER[case]
    assert differences(lambda v: call(real, device, v),
                       lambda v: call(device["driver"], device, v), values) == []


@pytest.mark.parametrize("case", list(RUNTIME_OTHER))
def test_runtime_takes_handles_buffers_and_enums_as_cuda_bindings(
        converting_only, device, case) -> None:
    call, values = RUNTIME_OTHER[case]
    assert differences(lambda v: call(real_rt, device, v),
                       lambda v: call(device["runtime"], device, v), values) == []


# -- through gpusafe's door: the checks read the arguments the bindings would --------------


@pytest.fixture(scope="module")
def door() -> dict[str, Any]:
    """The checking wrappers of both APIs over a CPU device, with a context
    and a buffer the registry tracks."""
    from gpusafe.backends.cpu import CpuBackend
    from gpusafe.doors.python_driver import DriverDoor
    from gpusafe.doors.python_runtime import RuntimeDoor
    from gpusafe.engine.checking import Engine
    from gpusafe.engine.findings import Findings
    from gpusafe.report import ReportBuilder

    backend = CpuBackend()
    engine = Engine(backend, Findings(ReportBuilder(["app"], "cpu")))
    drv = {n: getattr(backend.driver, n) for n in backend.driver.IMPLEMENTED}
    rt = {n: getattr(backend.runtime, n) for n in backend.runtime.IMPLEMENTED}
    wrapped = {**drv, **DriverDoor(engine, drv).wrappers(), **rt,
               **RuntimeDoor(engine, rt).wrappers()}
    assert wrapped["cuInit"](0)[0] == real.CUresult.CUDA_SUCCESS
    _, dev = wrapped["cuDeviceGet"](0)
    wrapped["cuCtxCreate"](None, 0, dev)
    _, buf = wrapped["cuMemAlloc"](256)
    return {"w": wrapped, "buf": buf}


DOOR_CASES: dict[str, tuple[Any, Callable[[Any, Any], Any]]] = {
    "cuMemAlloc bytesize": (real, lambda f, d: f["cuMemAlloc"]),
    "cuMemcpyHtoD ByteCount": (real, lambda f, d: lambda v: f["cuMemcpyHtoD"](d, bytes(64), v)),
    "cuMemcpyHtoD dstDevice": (real, lambda f, d: lambda v: f["cuMemcpyHtoD"](v, bytes(64), 0)),
    "cuMemsetD8 N": (real, lambda f, d: lambda v: f["cuMemsetD8"](d, 0, v)),
    "cudaMalloc size": (real_rt, lambda f, d: f["cudaMalloc"]),
    "cudaMallocPitch width": (real_rt, lambda f, d: lambda v: f["cudaMallocPitch"](v, 2)),
    "cudaMemset count": (real_rt, lambda f, d: lambda v: f["cudaMemset"](int(d), 0, v)),
    "cudaMemcpy count": (real_rt, lambda f, d: lambda v: f["cudaMemcpy"](
        bytearray(64), int(d), v, real_rt.cudaMemcpyKind.cudaMemcpyDeviceToHost)),
}


@pytest.mark.parametrize("case", list(DOOR_CASES))
def test_the_door_converts_as_cuda_bindings(converting_only, door, case: str) -> None:
    module, make = DOOR_CASES[case]
    name = case.split()[0]
    real_fn = make({name: getattr(module, name)}, real.CUdeviceptr(0) if module is real else 0)
    assert differences(real_fn, make(door["w"], door["buf"]), VALUES) == []


@pytest.mark.slow
def test_a_float_grid_size_is_checked_under_gpusafe_run(tmp_path) -> None:
    """vectorAddDrv's float grid through the door, the engine and the CPU
    device: the kernel runs checked, and its off-by-one is found."""
    from test_run_cli import gpusafe_run, write_program

    app = write_program(tmp_path, "")
    text = app.read_text()
    assert "n // 128 + 1, 1, 1," in text
    app.write_text(text.replace("n // 128 + 1, 1, 1,", "(n + 128) / 128 + 0.3125, 1, 1,"))
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    assert doc["summary"]["launches"] == 1 and doc["summary"]["unchecked_launches"] == 0
    assert {v["kind"] for v in doc["violations"]} == {"global-out-of-bounds"}
