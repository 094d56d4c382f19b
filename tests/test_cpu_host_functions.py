"""Host functions and stream callbacks in stream order on the CPU device
(``cuLaunchHostFunc``, ``cuStreamAddCallback``, ``cudaLaunchHostFunc``,
``cudaStreamAddCallback``), and the runtime's remaining stream and event
calls, passed C function pointers the way cuda-python programs make them
(ctypes ``CFUNCTYPE``)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda.bindings import driver as real_driver
from cuda.bindings import runtime as real_runtime

from gpusafe.cpu.driver import Driver
from gpusafe.cpu.runtime import Runtime

R = real_driver.CUresult
E = real_runtime.cudaError_t
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


@pytest.fixture
def device():
    drv = Driver()
    rt = Runtime(drv)
    assert rt.cudaSetDevice(0) == (E.cudaSuccess,)
    yield drv, rt
    drv.reset()


def test_a_host_function_runs_after_the_work_before_it(device) -> None:
    drv, rt = device
    seen = []
    data = np.zeros(4, np.int32)
    err, d = rt.cudaMalloc(16)
    stream = rt.cudaStreamCreate()[1]
    rt.cudaMemcpyAsync(d, np.arange(4, dtype=np.int32), 16,
                       real_runtime.cudaMemcpyKind.cudaMemcpyHostToDevice, stream)

    @HOST_FN
    def after_copy(user):
        rt.cudaMemcpy(data, d, 16, real_runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost)
        seen.append((user, data.tolist()))

    pointer = real_driver.CUhostFn(ctypes.cast(after_copy, ctypes.c_void_p).value)
    assert drv.cuLaunchHostFunc(stream, pointer, 1234) == (R.CUDA_SUCCESS,)
    fn = real_runtime.cudaHostFn_t(ctypes.cast(after_copy, ctypes.c_void_p).value)
    assert rt.cudaLaunchHostFunc(stream, fn, 99) == (E.cudaSuccess,)
    assert seen == [(1234, [0, 1, 2, 3]), (99, [0, 1, 2, 3])]
    assert drv.cuLaunchHostFunc(stream, None, 0) == (R.CUDA_ERROR_INVALID_VALUE,)
    with pytest.raises(TypeError):
        drv.cuLaunchHostFunc(stream, after_copy, 0)  # cuda-python wants the address


def test_a_stream_callback_gets_its_stream_status_and_data(device) -> None:
    drv, rt = device
    calls = []

    @CALLBACK
    def callback(stream, status, user):
        calls.append((stream, status, user))

    address = ctypes.cast(callback, ctypes.c_void_p).value
    stream = rt.cudaStreamCreate()[1]
    assert drv.cuStreamAddCallback(stream, real_driver.CUstreamCallback(address), 7, 0) == \
        (R.CUDA_SUCCESS,)
    assert rt.cudaStreamAddCallback(stream, real_runtime.cudaStreamCallback_t(address), 8, 0) == \
        (E.cudaSuccess,)
    assert calls == [(int(stream), 0, 7), (int(stream), 0, 8)]
    assert drv.cuStreamAddCallback(stream, real_driver.CUstreamCallback(address), 7, 1) == \
        (R.CUDA_ERROR_INVALID_VALUE,)
    bad = real_driver.CUstream(0xDEAD0)
    assert drv.cuStreamAddCallback(bad, real_driver.CUstreamCallback(address), 0, 0) == \
        (R.CUDA_ERROR_INVALID_HANDLE,)
    assert len(calls) == 2


def test_runtime_stream_and_event_calls(device) -> None:
    drv, rt = device
    err, stream = rt.cudaStreamCreateWithPriority(real_runtime.cudaStreamNonBlocking, -1)
    assert err == E.cudaSuccess
    assert rt.cudaStreamGetFlags(stream) == (E.cudaSuccess, real_runtime.cudaStreamNonBlocking)
    assert rt.cudaStreamGetPriority(stream) == (E.cudaSuccess, 0)
    assert rt.cudaDeviceGetStreamPriorityRange() == (E.cudaSuccess, 0, 0)
    err, event = rt.cudaEventCreate()
    assert rt.cudaEventRecordWithFlags(event, stream, 0) == (E.cudaSuccess,)
    assert rt.cudaEventRecordWithFlags(event, stream, 8) == (E.cudaErrorInvalidValue,)
    assert rt.cudaStreamWaitEvent(stream, event, 0) == (E.cudaSuccess,)
    assert rt.cudaStreamWaitEvent(stream, event, 4) == (E.cudaErrorInvalidValue,)
    assert rt.cudaStreamDestroy(stream) == (E.cudaSuccess,)
