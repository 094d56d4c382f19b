"""Several devices in one CPU driver (``Driver(devices=N)``, what ``gpusafe run
--cpu-devices N`` gives a program): their identities, contexts, one unified
address space, peer access (a kernel reaching another device's memory
without it faults, as on GPUs) and peer copies, on the driver and the
runtime surfaces.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpusafe.cpu import driver, runtime
from gpusafe.cpu.driver import Driver
from gpusafe.cpu.runtime import Runtime

R = driver.CUresult
OK = R.CUDA_SUCCESS
E = runtime.cudaError_t
K = runtime.cudaMemcpyKind
P = driver.CUpointer_attribute
P2P = driver.CUdevice_P2PAttribute

READ_INTO = r"""
extern "C" __global__ void read_into(const int *src, int *dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + 1;
}
"""


def ok(ret):
    err, *out = ret
    assert err in (OK, E.cudaSuccess), ret
    if not out:
        return None
    return out[0] if len(out) == 1 else tuple(out)


@pytest.fixture(scope="module")
def ptx() -> str:
    from gpusafe_testkit.corpus import nvrtc_compile

    return nvrtc_compile(READ_INTO, "read_into.cu")


def two_devices() -> tuple[Driver, list]:
    """A two-device driver and each device's primary context (none current)."""
    drv = Driver(devices=2)
    ok(drv.cuInit(0))
    return drv, [ok(drv.cuDevicePrimaryCtxRetain(d)) for d in range(2)]


def launch_read_into(drv: Driver, ptx: str, src: int, dst: int, n: int) -> tuple:
    """``read_into<<<1, n>>>(src, dst, n)`` in the current context; the raw result."""
    mod = ok(drv.cuModuleLoadData(ptx.encode()))
    fn = ok(drv.cuModuleGetFunction(mod, b"read_into"))
    values = [np.array([src], dtype=np.uint64), np.array([dst], dtype=np.uint64),
              np.array([n], dtype=np.int32)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    return drv.cuLaunchKernel(fn, 1, 1, 1, n, 1, 1, 0, 0, params.ctypes.data, 0)


# -- identities ---------------------------------------------------------------------


def test_a_driver_has_one_device_unless_asked_for_more() -> None:
    drv = Driver()
    ok(drv.cuInit(0))
    assert ok(drv.cuDeviceGetCount()) == 1
    assert drv.cuDeviceGet(1)[0] == R.CUDA_ERROR_INVALID_DEVICE


@pytest.mark.parametrize("n", [0, 17])
def test_a_device_count_outside_1_to_16_is_refused(n: int) -> None:
    with pytest.raises(ValueError, match="1 to 16 devices"):
        Driver(devices=n)


def test_each_device_has_its_own_name_uuid_and_pci_bus() -> None:
    drv = Driver(devices=3)
    ok(drv.cuInit(0))
    assert ok(drv.cuDeviceGetCount()) == 3
    devs = [ok(drv.cuDeviceGet(i)) for i in range(3)]
    assert [int(d) for d in devs] == [0, 1, 2]
    names = {ok(drv.cuDeviceGetName(64, d)).split(b"\0")[0] for d in devs}
    uuids = {ok(drv.cuDeviceGetUuid(d)).bytes for d in devs}
    buses = [ok(drv.cuDeviceGetPCIBusId(16, d)).split(b"\0")[0] for d in devs]
    assert len(names) == len(uuids) == len(set(buses)) == 3
    A = driver.CUdevice_attribute
    assert [ok(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d))
            for d in devs] == [0, 1, 2]
    assert [int(ok(drv.cuDeviceGetByPCIBusId(b))) for b in buses] == [0, 1, 2]
    assert drv.cuDeviceGet(3)[0] == R.CUDA_ERROR_INVALID_DEVICE


def test_runtime_properties_follow_the_device() -> None:
    rt = Runtime(Driver(devices=2))
    props = [ok(rt.cudaGetDeviceProperties(d)) for d in range(2)]
    assert props[0].name != props[1].name
    assert props[0].uuid.bytes != props[1].uuid.bytes
    assert [p.pciBusID for p in props] == [0, 1]
    assert all(p.unifiedAddressing == 1 for p in props)
    assert rt.cudaGetDeviceProperties(2)[0] == E.cudaErrorInvalidDevice


# -- contexts and the address space ---------------------------------------------------


def test_primary_contexts_and_created_contexts_belong_to_their_device() -> None:
    drv, primaries = two_devices()
    assert int(primaries[0]) != int(primaries[1])
    for d, ctx in enumerate(primaries):
        ok(drv.cuCtxSetCurrent(ctx))
        assert int(ok(drv.cuCtxGetDevice())) == d
    created = ok(drv.cuCtxCreate(None, 0, ok(drv.cuDeviceGet(1))))
    assert int(ok(drv.cuCtxGetDevice())) == 1
    ok(drv.cuCtxDestroy(created))
    assert ok(drv.cuDevicePrimaryCtxGetState(0)) == (0, 1)
    ok(drv.cuDevicePrimaryCtxRelease(1))
    assert ok(drv.cuDevicePrimaryCtxGetState(1)) == (0, 0)
    assert ok(drv.cuDevicePrimaryCtxGetState(0)) == (0, 1)


def test_cudaSetDevice_makes_the_devices_primary_context_current() -> None:
    drv = Driver(devices=2)
    rt = Runtime(drv)
    assert ok(rt.cudaGetDevice()) == 0
    ok(rt.cudaSetDevice(1))
    assert ok(rt.cudaGetDevice()) == 1
    assert int(ok(drv.cuCtxGetCurrent())) == int(ok(drv.cuDevicePrimaryCtxRetain(1)))
    ok(rt.cudaSetDevice(0))
    assert ok(rt.cudaGetDevice()) == 0
    assert rt.cudaSetDevice(2)[0] == E.cudaErrorInvalidDevice


def test_allocations_of_two_devices_share_one_address_space_and_name_their_device() -> None:
    drv = Driver(devices=2)
    rt = Runtime(drv)
    spans = []
    for d in (0, 1, 0, 1):
        ok(rt.cudaSetDevice(d))
        p = int(ok(rt.cudaMalloc(1000)))
        spans.append((p, p + 1000, d))
    spans.sort()
    assert all(a_end <= b for (_, a_end, _), (b, _, _) in zip(spans, spans[1:], strict=False))
    for base, _, d in spans:
        assert ok(drv.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base)) == d
        assert ok(rt.cudaPointerGetAttributes(base + 10)).device == d


def test_each_device_has_its_own_default_pool() -> None:
    drv, primaries = two_devices()
    pools = [int(ok(drv.cuDeviceGetDefaultMemPool(d))) for d in range(2)]
    assert pools[0] != pools[1]
    ok(drv.cuCtxSetCurrent(primaries[1]))
    block = ok(drv.cuMemAllocAsync(256, 0))
    assert int(ok(drv.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, block))) \
        == pools[1]
    assert ok(drv.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, block)) == 1
    assert drv.cuDeviceSetMemPool(0, pools[1])[0] == R.CUDA_ERROR_INVALID_DEVICE


# -- peer access ------------------------------------------------------------------------


def test_two_different_devices_can_access_each_other_and_a_device_is_not_its_own_peer() -> None:
    drv, _ = two_devices()
    assert ok(drv.cuDeviceCanAccessPeer(0, 1)) == ok(drv.cuDeviceCanAccessPeer(1, 0)) == 1
    assert ok(drv.cuDeviceCanAccessPeer(1, 1)) == 0
    assert ok(drv.cuDeviceGetP2PAttribute(P2P.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1)) == 1
    assert ok(drv.cuDeviceGetP2PAttribute(
        P2P.CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 1, 0)) == 1
    assert ok(drv.cuDeviceGetP2PAttribute(
        P2P.CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, 0, 1)) == 0
    assert drv.cuDeviceGetP2PAttribute(P2P.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1)[0] \
        == R.CUDA_ERROR_INVALID_DEVICE
    rt = Runtime(drv)
    assert ok(rt.cudaDeviceCanAccessPeer(0, 1)) == 1
    assert ok(rt.cudaDeviceGetP2PAttribute(
        runtime.cudaDeviceP2PAttr.cudaDevP2PAttrAccessSupported, 1, 0)) == 1


def test_peer_access_errors_on_the_driver() -> None:
    drv, (c0, c1) = two_devices()
    ok(drv.cuCtxSetCurrent(c1))
    assert drv.cuCtxDisablePeerAccess(c0)[0] == R.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
    assert drv.cuCtxEnablePeerAccess(c1, 0)[0] == R.CUDA_ERROR_INVALID_CONTEXT
    assert drv.cuCtxEnablePeerAccess(c0, 1)[0] == R.CUDA_ERROR_INVALID_VALUE
    ok(drv.cuCtxEnablePeerAccess(c0, 0))
    assert drv.cuCtxEnablePeerAccess(c0, 0)[0] == R.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    ok(drv.cuCtxDisablePeerAccess(c0))
    other = ok(drv.cuCtxCreate(None, 0, ok(drv.cuDeviceGet(1))))  # now current
    assert drv.cuCtxEnablePeerAccess(c1, 0)[0] == R.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    ok(drv.cuCtxDestroy(other))


def test_peer_access_errors_on_the_runtime() -> None:
    rt = Runtime(Driver(devices=2))
    ok(rt.cudaSetDevice(0))
    assert rt.cudaDeviceDisablePeerAccess(1)[0] == E.cudaErrorPeerAccessNotEnabled
    assert rt.cudaDeviceEnablePeerAccess(0, 0)[0] == E.cudaErrorInvalidDevice
    assert rt.cudaDeviceEnablePeerAccess(2, 0)[0] == E.cudaErrorInvalidDevice
    assert rt.cudaDeviceEnablePeerAccess(1, 4)[0] == E.cudaErrorInvalidValue
    ok(rt.cudaDeviceEnablePeerAccess(1, 0))
    assert rt.cudaDeviceEnablePeerAccess(1, 0)[0] == E.cudaErrorPeerAccessAlreadyEnabled
    ok(rt.cudaDeviceDisablePeerAccess(1))


def test_a_kernel_reaching_another_devices_memory_without_peer_access_faults(ptx: str) -> None:
    drv, (c0, c1) = two_devices()
    n = 32
    ok(drv.cuCtxSetCurrent(c0))
    src = int(ok(drv.cuMemAlloc(4 * n)))
    ok(drv.cuMemcpyHtoD(src, np.arange(n, dtype=np.int32), 4 * n))
    ok(drv.cuCtxSetCurrent(c1))
    dst = int(ok(drv.cuMemAlloc(4 * n)))
    err, = launch_read_into(drv, ptx, src, dst, n)
    assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "memory of device 0" in drv.last_error_detail()
    assert "no peer access" in drv.last_error_detail()


def test_with_peer_access_the_kernel_reads_the_peers_memory_until_it_is_disabled(
        ptx: str) -> None:
    drv, (c0, c1) = two_devices()
    n = 32
    ok(drv.cuCtxSetCurrent(c0))
    src = int(ok(drv.cuMemAlloc(4 * n)))
    ok(drv.cuMemcpyHtoD(src, np.arange(n, dtype=np.int32), 4 * n))
    ok(drv.cuCtxSetCurrent(c1))
    dst = int(ok(drv.cuMemAlloc(4 * n)))
    ok(drv.cuCtxEnablePeerAccess(c0, 0))
    ok(launch_read_into(drv, ptx, src, dst, n))
    out = np.zeros(n, dtype=np.int32)
    ok(drv.cuMemcpyDtoH(out, dst, 4 * n))
    assert out.tolist() == list(range(1, n + 1))
    ok(drv.cuCtxDisablePeerAccess(c0))
    assert launch_read_into(drv, ptx, src, dst, n)[0] == R.CUDA_ERROR_ILLEGAL_ADDRESS


def test_pinned_and_managed_memory_are_every_devices(ptx: str) -> None:
    drv, (c0, c1) = two_devices()
    n = 16
    ok(drv.cuCtxSetCurrent(c0))
    pinned = ok(drv.cuMemHostAlloc(4 * n, 0))
    managed = int(ok(drv.cuMemAllocManaged(4 * n, 1)))
    ctypes.memmove(pinned, np.arange(n, dtype=np.int32).ctypes.data, 4 * n)
    ok(drv.cuCtxSetCurrent(c1))
    ok(launch_read_into(drv, ptx, pinned, managed, n))
    out = np.frombuffer((ctypes.c_int32 * n).from_address(managed), dtype=np.int32)
    assert out.tolist() == list(range(1, n + 1))


# -- peer copies ----------------------------------------------------------------------------


def test_peer_copies_move_bytes_between_devices_and_are_range_checked() -> None:
    drv, (c0, c1) = two_devices()
    ok(drv.cuCtxSetCurrent(c0))
    a = int(ok(drv.cuMemAlloc(64)))
    ok(drv.cuMemcpyHtoD(a, bytes(range(64)), 64))
    ok(drv.cuCtxSetCurrent(c1))
    b = int(ok(drv.cuMemAlloc(64)))
    ok(drv.cuMemcpyPeer(b, c1, a, c0, 64))
    out = bytearray(64)
    ok(drv.cuMemcpyDtoH(out, b, 64))
    assert bytes(out) == bytes(range(64))
    assert drv.cuMemcpyPeerAsync(b, c1, a, c0, 65, 0)[0] == R.CUDA_ERROR_INVALID_VALUE
    assert "leaves its allocation" in drv.last_error_detail()
    assert drv.cuMemcpyPeer(b, c0, a, c0, 16)[0] == R.CUDA_ERROR_INVALID_VALUE
    assert "memory of device 1" in drv.last_error_detail()


def test_runtime_peer_copies_and_unified_copies_across_devices() -> None:
    rt = Runtime(Driver(devices=2))
    ok(rt.cudaSetDevice(0))
    a = ok(rt.cudaMalloc(64))
    ok(rt.cudaMemcpy(a, bytes(range(64)), 64, K.cudaMemcpyHostToDevice))
    ok(rt.cudaSetDevice(1))
    b = ok(rt.cudaMalloc(64))
    c = ok(rt.cudaMalloc(64))
    ok(rt.cudaMemcpyPeer(b, 1, a, 0, 64))
    ok(rt.cudaMemcpy(c, b, 64, K.cudaMemcpyDefault))
    out = bytearray(64)
    ok(rt.cudaMemcpy(out, c, 64, K.cudaMemcpyDeviceToHost))
    assert bytes(out) == bytes(range(64))
    assert rt.cudaMemcpyPeerAsync(b, 1, a, 0, 128, 0)[0] == E.cudaErrorInvalidValue
    assert rt.cudaMemcpyPeer(b, 2, a, 0, 64)[0] == E.cudaErrorInvalidDevice
