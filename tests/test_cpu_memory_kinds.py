"""The CPU device's attributes and memory kinds, on its API directly.

Attributes: every member of cuda-bindings' ``CUdevice_attribute`` and
``cudaDeviceAttr`` enums has a value, the runtime's agree with the driver's
and with ``cudaGetDeviceProperties``, and a feature attribute says 1 exactly
where the calls behind the feature exist.  Memory kinds: mapped pinned
memory, registered program memory, managed memory and memory pools, with
kernels reading and writing them and the oracle judging every access.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda.bindings import driver as real_driver
from cuda.bindings import runtime as real_runtime

from gpusafe.cpu import driver_profile as profile
from gpusafe.cpu.driver import Driver
from gpusafe.cpu.host_memory import FreshPages, host_bytes
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.oracle import Oracle
from gpusafe.cpu.runtime import Runtime
from gpusafe.cudaapi import device_props
from gpusafe_instrument.kinds import ViolationKind

R = real_driver.CUresult
A = real_driver.CUdevice_attribute
RA = real_runtime.cudaDeviceAttr
OK = R.CUDA_SUCCESS
ATTACH = real_driver.CUmemAttach_flags

KERNELS = r"""
extern "C" __global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
extern "C" __global__ void touch(int *p, int i) { p[i] = 7; }
"""


@pytest.fixture(scope="module")
def ptx() -> str:
    from gpusafe_testkit.corpus import nvrtc_compile

    return nvrtc_compile(KERNELS, "memory_kinds.cu")


class Device:
    """One fresh CPU device with a current context, its module and an oracle."""

    def __init__(self, ptx: str) -> None:
        self.drv = Driver()
        self.rt = Runtime(self.drv)
        self.ok(self.drv.cuInit(0))
        self.ok(self.drv.cuCtxCreate(None, 0, 0))
        module = self.ok(self.drv.cuModuleLoadData(ptx.encode()))
        self.add_one = self.ok(self.drv.cuModuleGetFunction(module, b"add_one"))
        self.touch = self.ok(self.drv.cuModuleGetFunction(module, b"touch"))
        self.oracle = Oracle(self.drv.memory)
        self.drv.set_launch_observers([self.oracle])

    def ok(self, ret):
        err, *out = ret
        assert int(err) == 0, (err, self.drv.last_error_detail())
        return None if not out else out[0] if len(out) == 1 else tuple(out)

    def fails(self, ret, result) -> str:
        assert ret[0] == result, (ret, self.drv.last_error_detail())
        return self.drv.last_error_detail() or ""

    def launch(self, fn, *args: tuple) -> None:
        """``add_one`` on 1024 threads, ``touch`` on one."""
        values = tuple(int(v) for v, _ in args)
        types = tuple(t for _, t in args)
        blocks, threads = (4, 256) if fn is self.add_one else (1, 1)
        self.ok(self.drv.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, 0, (values, types),
                                        0))

    def kinds(self) -> list[ViolationKind]:
        return [v.kind for v in self.oracle.violations]


@pytest.fixture
def dev(ptx):
    d = Device(ptx)
    yield d
    d.drv.reset()


def ints(address: int, n: int) -> np.ndarray:
    return host_bytes(address, 4 * n).view(np.int32)


# -- attributes ----------------------------------------------------------------


def test_every_driver_attribute_has_a_value_in_the_profile() -> None:
    members = {a.name.removeprefix("CU_DEVICE_ATTRIBUTE_") for a in A} - {"MAX"}
    assert set(profile.DEVICE_ATTRIBUTES) == members


def test_every_runtime_attribute_is_the_driver_attribute_of_its_value() -> None:
    drv = Driver()
    rt = Runtime(drv)
    drv.cuInit(0)
    for attr in RA:
        if attr == RA.cudaDevAttrMax:
            continue
        err, value = rt.cudaDeviceGetAttribute(attr, 0)
        assert err == real_runtime.cudaError_t.cudaSuccess, attr
        assert value == drv.cuDeviceGetAttribute(A(int(attr)), 0)[1], attr
    assert rt.cudaDeviceGetAttribute(RA.cudaDevAttrWarpSize, 1)[0] == \
        real_runtime.cudaError_t.cudaErrorInvalidDevice
    # as cuda-bindings: any enum member by its value (NVIDIA's examples pass the
    # driver's), an int has no .value, None is refused
    assert rt.cudaDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0)[1] == 1
    with pytest.raises(AttributeError):
        rt.cudaDeviceGetAttribute(10, 0)
    with pytest.raises(TypeError):
        rt.cudaDeviceGetAttribute(None, 0)


def test_device_properties_are_the_attributes() -> None:
    drv = Driver()
    rt = Runtime(drv)
    err, prop = rt.cudaGetDeviceProperties(0)
    assert err == real_runtime.cudaError_t.cudaSuccess

    def attr(name: str) -> int:
        return drv.cuDeviceGetAttribute(getattr(A, f"CU_DEVICE_ATTRIBUTE_{name}"), 0)[1]

    fields = {f for f in dir(prop) if not f.startswith("_") and f != "getPtr"}
    covered = (set(device_props.PROP_ATTRIBUTES) | set(device_props.PROP_ARRAYS)
               | device_props.PROP_FIELDS_NOT_ATTRIBUTES)
    assert fields <= covered, fields - covered
    for field, name in device_props.PROP_ATTRIBUTES.items():
        assert getattr(prop, field) == attr(name), field
    for field, names in device_props.PROP_ARRAYS.items():
        assert list(getattr(prop, field)) == [attr(n) for n in names], field
    assert prop.totalGlobalMem == drv.cuDeviceTotalMem(0)[1]
    assert bytes(prop.name).startswith(profile.DEVICE_NAME.encode())


@pytest.mark.parametrize("attribute, value, functions", [
    ("CAN_MAP_HOST_MEMORY", 1, ["cuMemHostAlloc", "cuMemHostGetDevicePointer"]),
    ("HOST_REGISTER_SUPPORTED", 1, ["cuMemHostRegister", "cuMemHostUnregister"]),
    ("MANAGED_MEMORY", 1, ["cuMemAllocManaged", "cuMemPrefetchAsync", "cuMemAdvise",
                           "cuStreamAttachMemAsync"]),
    ("MEMORY_POOLS_SUPPORTED", 1, ["cuMemAllocAsync", "cuMemPoolCreate",
                                   "cuMemAllocFromPoolAsync", "cuDeviceGetDefaultMemPool"]),
    ("VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED", 1, ["cuMemCreate", "cuMemMap", "cuMemSetAccess",
                                                 "cuMemAddressReserve"]),
    ("COOPERATIVE_LAUNCH", 1, ["cuLaunchCooperativeKernel"]),
    ("COOPERATIVE_MULTI_DEVICE_LAUNCH", 0, ["cuLaunchCooperativeKernelMultiDevice"]),
])
def test_a_feature_attribute_says_yes_exactly_when_its_calls_exist(
        attribute: str, value: int, functions: list[str]) -> None:
    assert profile.DEVICE_ATTRIBUTES[attribute] == value
    for name in functions:
        assert (name in Driver.IMPLEMENTED) == bool(value), name


def test_device_flags_are_the_primary_contexts() -> None:
    drv = Driver()
    rt = Runtime(drv)
    E = real_runtime.cudaError_t
    flags = real_runtime.cudaDeviceScheduleBlockingSync | real_runtime.cudaDeviceMapHost
    assert rt.cudaSetDeviceFlags(flags) == (E.cudaSuccess,)
    err, got = rt.cudaGetDeviceFlags()
    assert err == E.cudaSuccess and got & flags == flags
    assert drv.cuDevicePrimaryCtxGetState(0)[1] == real_runtime.cudaDeviceScheduleBlockingSync
    assert rt.cudaSetDeviceFlags(0x1000) == (E.cudaErrorInvalidValue,)
    assert rt.cudaGetLastError() == (E.cudaErrorInvalidValue,)
    assert rt.cudaGetLastError() == (E.cudaSuccess,)
    assert rt.cudaGetErrorName(E.cudaErrorInvalidValue) == (E.cudaSuccess,
                                                             b"cudaErrorInvalidValue")
    assert drv.cuGetErrorString(R.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)[1].startswith(b"pointer")


# -- mapped pinned memory ---------------------------------------------------------


def test_mapped_pinned_memory_is_one_pointer_for_host_and_kernel(dev) -> None:
    n = 256
    p = dev.ok(dev.drv.cuMemHostAlloc(4 * n, real_driver.CU_MEMHOSTALLOC_DEVICEMAP))
    host = ints(p, n)
    host[:] = np.arange(n)
    d = dev.ok(dev.drv.cuMemHostGetDevicePointer(p, 0))
    assert int(d) == p
    assert int(dev.ok(dev.drv.cuMemHostGetDevicePointer(p + 40, 0))) == p + 40
    dev.launch(dev.add_one, (d, ctypes.c_void_p), (n, ctypes.c_int))
    assert (host == np.arange(n) + 1).all()
    assert dev.ok(dev.drv.cuMemHostGetFlags(p)) & real_driver.CU_MEMHOSTALLOC_DEVICEMAP
    dev.fails(dev.drv.cuMemHostGetDevicePointer(p, 1), R.CUDA_ERROR_INVALID_VALUE)
    # the host copies from and to it as host memory, and the range is checked
    d2 = dev.ok(dev.drv.cuMemAlloc(4 * n))
    dev.ok(dev.drv.cuMemcpyHtoD(d2, p, 4 * n))
    dev.fails(dev.drv.cuMemcpyHtoD(d2, p, 4 * n + 4), R.CUDA_ERROR_INVALID_VALUE)
    dev.ok(dev.drv.cuMemFreeHost(p))
    assert dev.kinds() == []


def test_a_kernel_overflowing_mapped_memory_is_caught(dev) -> None:
    p = dev.ok(dev.drv.cuMemAllocHost(64))
    dev.launch(dev.touch, (p, ctypes.c_void_p), (16, ctypes.c_int))
    assert set(dev.kinds()) == {ViolationKind.GLOBAL_OUT_OF_BOUNDS}
    assert dev.oracle.violations[0].allocation.base == p


# -- registered program memory --------------------------------------------------------


def test_registered_memory_is_reached_through_its_device_pointer(dev) -> None:
    n = 300
    data = np.arange(n, dtype=np.int32)
    dev.ok(dev.drv.cuMemHostRegister(data, data.nbytes, real_driver.CU_MEMHOSTREGISTER_DEVICEMAP))
    d = int(dev.ok(dev.drv.cuMemHostGetDevicePointer(data.ctypes.data, 0)))
    assert d != data.ctypes.data  # CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0
    dev.launch(dev.add_one, (d, ctypes.c_void_p), (n, ctypes.c_int))
    assert (data == np.arange(n) + 1).all()
    dev.fails(dev.drv.cuMemHostRegister(data[10:].ctypes.data, 8, 0),
              R.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    dev.ok(dev.drv.cuMemHostUnregister(data))
    dev.fails(dev.drv.cuMemHostUnregister(data), R.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    # after unregistering, the device pointer is freed memory: the program's bytes stay its own
    dev.launch(dev.touch, (d, ctypes.c_void_p), (0, ctypes.c_int))
    assert dev.kinds() == [ViolationKind.USE_AFTER_FREE]
    assert data[0] == 1


def test_what_registration_cannot_do_is_named(dev) -> None:
    data = np.zeros(64, np.uint8)
    detail = dev.fails(dev.drv.cuMemHostRegister(data, 64, real_driver.CU_MEMHOSTREGISTER_READ_ONLY),
                       R.CUDA_ERROR_NOT_SUPPORTED)
    assert "READ_ONLY" in detail
    detail = dev.fails(dev.drv.cuMemHostRegister(data, 64, real_driver.CU_MEMHOSTREGISTER_IOMEMORY),
                       R.CUDA_ERROR_NOT_SUPPORTED)
    assert "IOMEMORY" in detail
    dev.fails(dev.drv.cuMemHostRegister(data, 65, 0), R.CUDA_ERROR_INVALID_VALUE)
    assert profile.DEVICE_ATTRIBUTES["READ_ONLY_HOST_REGISTER_SUPPORTED"] == 0


# -- managed memory ------------------------------------------------------------------


def test_managed_memory_is_written_by_the_host_and_the_kernel_at_one_address(dev) -> None:
    n = 500
    m = int(dev.ok(dev.drv.cuMemAllocManaged(4 * n, ATTACH.CU_MEM_ATTACH_GLOBAL)))
    host = ints(m, n)
    host[:] = 41
    loc = real_driver.CUmemLocation()
    loc.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    dev.ok(dev.drv.cuMemAdvise(m, 4 * n, real_driver.CUmem_advise.CU_MEM_ADVISE_SET_READ_MOSTLY,
                               loc))
    dev.ok(dev.drv.cuMemPrefetchAsync(m, 4 * n, loc, 0, 0))
    stream = dev.ok(dev.drv.cuStreamCreate(0))
    dev.ok(dev.drv.cuStreamAttachMemAsync(stream, m, 0, ATTACH.CU_MEM_ATTACH_SINGLE))
    dev.launch(dev.add_one, (m, ctypes.c_void_p), (n, ctypes.c_int))
    assert (host == 42).all()
    out = np.zeros(n, np.int32)
    dev.ok(dev.drv.cuMemcpyDtoH(out, m, out.nbytes))
    assert (out == 42).all()
    assert dev.kinds() == []


def test_managed_calls_refuse_what_the_real_driver_refuses(dev) -> None:
    m = int(dev.ok(dev.drv.cuMemAllocManaged(4096, ATTACH.CU_MEM_ATTACH_GLOBAL)))
    plain = int(dev.ok(dev.drv.cuMemAlloc(4096)))
    loc = real_driver.CUmemLocation()
    loc.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    assert "leave" in dev.fails(dev.drv.cuMemPrefetchAsync(m, 8192, loc, 0, 0),
                                R.CUDA_ERROR_INVALID_VALUE)
    assert "not in managed memory" in dev.fails(dev.drv.cuMemPrefetchAsync(plain, 4, loc, 0, 0),
                                                R.CUDA_ERROR_INVALID_VALUE)
    loc.id = 3
    dev.fails(dev.drv.cuMemAdvise(m, 4, real_driver.CUmem_advise.CU_MEM_ADVISE_SET_ACCESSED_BY,
                                  loc), R.CUDA_ERROR_INVALID_DEVICE)
    dev.fails(dev.drv.cuStreamAttachMemAsync(0, m + 16, 0, 1), R.CUDA_ERROR_INVALID_VALUE)
    dev.fails(dev.drv.cuMemAllocManaged(64, 0), R.CUDA_ERROR_INVALID_VALUE)
    dev.fails(dev.drv.cuMemAllocManaged(0, 1), R.CUDA_ERROR_INVALID_VALUE)
    err, = Runtime(dev.drv).cudaMallocManaged(0, 1)[:1]
    assert err == real_runtime.cudaError_t.cudaErrorInvalidValue


def test_managed_memory_out_of_bounds_and_after_free_are_caught(dev) -> None:
    m = int(dev.ok(dev.drv.cuMemAllocManaged(64, ATTACH.CU_MEM_ATTACH_GLOBAL)))
    dev.launch(dev.touch, (m, ctypes.c_void_p), (16, ctypes.c_int))
    assert dev.kinds() == [ViolationKind.GLOBAL_OUT_OF_BOUNDS]
    dev.ok(dev.drv.cuMemFree(m))
    dev.launch(dev.touch, (m, ctypes.c_void_p), (0, ctypes.c_int))
    assert dev.kinds()[1:] == [ViolationKind.USE_AFTER_FREE]


def test_host_visible_memory_goes_past_addresses_the_process_already_maps() -> None:
    memory = DeviceMemory()
    squatter = FreshPages()
    taken = -(-memory.top // 4096) * 4096
    squatter.place(taken, 3 * 4096)
    try:
        base = memory.alloc(100, backing=FreshPages())
        assert base >= taken + 3 * 4096
        host_bytes(base, 100)[:] = 9
        assert memory.read(base, 100) == b"\x09" * 100
    finally:
        squatter.release()
        memory.close()


def test_two_devices_have_managed_memory_of_their_own(ptx) -> None:
    one, two = Device(ptx), Device(ptx)
    a = int(one.ok(one.drv.cuMemAllocManaged(4096, 1)))
    b = int(two.ok(two.drv.cuMemAllocManaged(4096, 1)))
    assert a != b
    ints(a, 1)[0], ints(b, 1)[0] = 1, 2
    one.launch(one.add_one, (a, ctypes.c_void_p), (1, ctypes.c_int))
    two.launch(two.add_one, (b, ctypes.c_void_p), (1, ctypes.c_int))
    assert (ints(a, 1)[0], ints(b, 1)[0]) == (2, 3)
    one.drv.reset()
    two.drv.reset()


# -- memory pools ------------------------------------------------------------------


def test_the_default_pool_serves_stream_ordered_allocations(dev) -> None:
    drv = dev.drv
    pool = dev.ok(drv.cuDeviceGetDefaultMemPool(0))
    assert int(dev.ok(drv.cuDeviceGetMemPool(0))) == int(pool)
    PA = real_driver.CUmemPool_attribute
    used = PA.CU_MEMPOOL_ATTR_USED_MEM_CURRENT
    p = dev.ok(drv.cuMemAllocAsync(1000, 0))
    assert int(dev.ok(drv.cuMemPoolGetAttribute(pool, used))) == 1000
    dev.ok(drv.cuMemFreeAsync(p, 0))
    assert int(dev.ok(drv.cuMemPoolGetAttribute(pool, used))) == 0
    assert int(dev.ok(drv.cuMemPoolGetAttribute(pool, PA.CU_MEMPOOL_ATTR_USED_MEM_HIGH))) == 1000
    dev.ok(drv.cuMemPoolSetAttribute(pool, PA.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                     real_driver.cuuint64_t(1 << 40)))
    assert int(dev.ok(drv.cuMemPoolGetAttribute(pool, PA.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD))) \
        == 1 << 40
    dev.ok(drv.cuMemPoolSetAttribute(pool, PA.CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0))
    assert int(dev.ok(drv.cuMemPoolGetAttribute(pool, PA.CU_MEMPOOL_ATTR_USED_MEM_HIGH))) == 0
    dev.fails(drv.cuMemPoolSetAttribute(pool, PA.CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 0),
              R.CUDA_ERROR_INVALID_VALUE)
    dev.fails(drv.cuMemPoolDestroy(pool), R.CUDA_ERROR_INVALID_VALUE)
    # a block used after its stream-ordered free is freed memory
    dev.launch(dev.touch, (p, ctypes.c_void_p), (0, ctypes.c_int))
    assert dev.kinds() == [ViolationKind.USE_AFTER_FREE]


def test_an_explicit_pool_has_its_limit_and_refuses_what_cannot_exist(dev) -> None:
    drv = dev.drv
    props = real_driver.CUmemPoolProps()
    props.allocType = real_driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.maxSize = 4096
    pool = dev.ok(drv.cuMemPoolCreate(props))
    p = dev.ok(drv.cuMemAllocFromPoolAsync(4000, pool, 0))
    dev.fails(drv.cuMemAllocFromPoolAsync(200, pool, 0), R.CUDA_ERROR_OUT_OF_MEMORY)
    dev.ok(drv.cuDeviceSetMemPool(0, pool))
    q = dev.ok(drv.cuMemAllocAsync(64, 0))
    dev.ok(drv.cuMemFreeAsync(q, 0))
    dev.ok(drv.cuMemPoolTrimTo(pool, 0))
    dev.ok(drv.cuMemPoolDestroy(pool))
    assert int(dev.ok(drv.cuDeviceGetMemPool(0))) == int(dev.ok(drv.cuDeviceGetDefaultMemPool(0)))
    dev.ok(drv.cuMemFree(p))  # a block of a destroyed pool stays until freed
    dev.fails(drv.cuMemAllocFromPoolAsync(8, pool, 0), R.CUDA_ERROR_INVALID_VALUE)
    props.location.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
    assert "HOST_MEMORY_POOLS_SUPPORTED" in dev.fails(drv.cuMemPoolCreate(props),
                                                      R.CUDA_ERROR_NOT_SUPPORTED)
    props.location.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.handleTypes = real_driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    dev.fails(drv.cuMemPoolCreate(props), R.CUDA_ERROR_NOT_SUPPORTED)


def test_runtime_pools_are_the_drivers(dev) -> None:
    rt = dev.rt
    E = real_runtime.cudaError_t
    props = real_runtime.cudaMemPoolProps()
    props.allocType = real_runtime.cudaMemAllocationType.cudaMemAllocationTypePinned
    props.location.type = real_runtime.cudaMemLocationType.cudaMemLocationTypeDevice
    err, pool = rt.cudaMemPoolCreate(props)
    assert err == E.cudaSuccess
    err, p = rt.cudaMallocFromPoolAsync(128, pool, 0)
    assert err == E.cudaSuccess
    err, used = rt.cudaMemPoolGetAttribute(
        pool, real_runtime.cudaMemPoolAttr.cudaMemPoolAttrUsedMemCurrent)
    assert int(used) == 128
    assert rt.cudaFreeAsync(p, 0) == (E.cudaSuccess,)
    assert rt.cudaMemPoolDestroy(pool) == (E.cudaSuccess,)
    err, default = rt.cudaDeviceGetDefaultMemPool(0)
    assert err == E.cudaSuccess and rt.cudaMemPoolDestroy(default) == (E.cudaErrorInvalidValue,)


# -- virtual memory management -------------------------------------------------------


def vmm_prop():
    prop = real_driver.CUmemAllocationProp()
    prop.type = real_driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    return prop


def read_write():
    desc = real_driver.CUmemAccessDesc()
    desc.location.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = 0
    desc.flags = real_driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    return desc


def test_each_vmm_mapping_is_an_allocation_of_its_own(dev) -> None:
    drv = dev.drv
    G = real_driver.CUmemAllocationGranularity_flags
    gran = dev.ok(drv.cuMemGetAllocationGranularity(vmm_prop(), G.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
    first = dev.ok(drv.cuMemCreate(gran, vmm_prop(), 0))
    second = dev.ok(drv.cuMemCreate(gran, vmm_prop(), 0))
    va = int(dev.ok(drv.cuMemAddressReserve(4 * gran, 0, 0, 0)))
    dev.ok(drv.cuMemMap(va, gran, 0, first, 0))
    dev.ok(drv.cuMemMap(va + gran, gran, 0, second, 0))
    dev.ok(drv.cuMemRelease(first))  # the mapping keeps the memory
    dev.ok(drv.cuMemRelease(second))
    # no access yet: a copy there fails, a kernel faults
    dev.fails(drv.cuMemcpyHtoD(va, np.ones(4, np.int32), 16), R.CUDA_ERROR_INVALID_VALUE)
    dev.ok(drv.cuMemSetAccess(va, 2 * gran, [read_write()], 1))
    n = 2 * gran // 4
    # each mapping is an allocation: a copy or set stays inside one
    dev.fails(drv.cuMemsetD32(va, 5, n), R.CUDA_ERROR_INVALID_VALUE)
    dev.ok(drv.cuMemsetD32(va, 5, n // 2))
    dev.ok(drv.cuMemsetD32(va + gran, 5, n // 2))
    dev.ok(drv.cuLaunchKernel(dev.add_one, n // 256, 1, 1, 256, 1, 1, 0, 0,
                              ((va, n), (ctypes.c_void_p, ctypes.c_int)), 0))
    out = np.zeros(n, np.int32)
    dev.ok(drv.cuMemcpyDtoH(out[: n // 2], va, gran))
    dev.ok(drv.cuMemcpyDtoH(out[n // 2:], va + gran, gran))
    assert (out == 6).all() and dev.kinds() == []
    # below the first mapping is no allocation
    dev.launch(dev.touch, (va, ctypes.c_void_p), (-1, ctypes.c_int))
    assert dev.kinds() == [ViolationKind.GLOBAL_OUT_OF_BOUNDS]
    dev.ok(drv.cuMemUnmap(va, 2 * gran))
    dev.launch(dev.touch, (va, ctypes.c_void_p), (0, ctypes.c_int))
    assert dev.kinds()[1:] == [ViolationKind.USE_AFTER_FREE]
    dev.fails(drv.cuMemAddressFree(va, gran), R.CUDA_ERROR_INVALID_VALUE)
    dev.ok(drv.cuMemAddressFree(va, 4 * gran))


def test_an_unmapped_reserved_address_faults_like_a_gpu(ptx) -> None:
    device = Device(ptx)
    drv = device.drv
    drv.set_launch_observers([])
    va = int(device.ok(drv.cuMemAddressReserve(2 << 20, 0, 0, 0)))
    err = drv.cuLaunchKernel(device.touch, 1, 1, 1, 1, 1, 1, 0, 0,
                             ((va, 0), (ctypes.c_void_p, ctypes.c_int)), 0)[0]
    assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS
    drv.reset()


def test_what_vmm_cannot_do_is_named(dev) -> None:
    drv = dev.drv
    gran = 2 << 20
    prop = vmm_prop()
    prop.location.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
    assert "HOST_VIRTUAL_MEMORY" in dev.fails(drv.cuMemCreate(gran, prop, 0),
                                              R.CUDA_ERROR_NOT_SUPPORTED)
    prop = vmm_prop()
    prop.requestedHandleTypes = \
        real_driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    dev.fails(drv.cuMemCreate(gran, prop, 0), R.CUDA_ERROR_NOT_SUPPORTED)
    dev.fails(drv.cuMemCreate(gran + 1, vmm_prop(), 0), R.CUDA_ERROR_INVALID_VALUE)
    handle = dev.ok(drv.cuMemCreate(gran, vmm_prop(), 0))
    va = int(dev.ok(drv.cuMemAddressReserve(gran, 0, 0, 0)))
    dev.ok(drv.cuMemMap(va, gran, 0, handle, 0))
    dev.fails(drv.cuMemMap(va, gran, 0, handle, 0), R.CUDA_ERROR_INVALID_VALUE)
    desc = read_write()
    desc.flags = real_driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READ
    assert "read-only" in dev.fails(drv.cuMemSetAccess(va, gran, [desc], 1),
                                    R.CUDA_ERROR_NOT_SUPPORTED)
    loc = real_driver.CUmemLocation()
    loc.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    assert dev.ok(drv.cuMemGetAccess(loc, va)) == 0
    dev.ok(drv.cuMemSetAccess(va, gran, [read_write()], 1))
    assert dev.ok(drv.cuMemGetAccess(loc, va)) == 3
    assert int(dev.ok(drv.cuMemRetainAllocationHandle(va))) == int(handle)
    dev.fails(drv.cuMemFree(va), R.CUDA_ERROR_INVALID_VALUE)


# -- pointer attributes ----------------------------------------------------------------


def test_pointer_attributes_say_what_kind_of_memory_a_pointer_is(dev) -> None:
    drv, rt = dev.drv, dev.rt
    P = real_driver.CUpointer_attribute
    T = real_runtime.cudaMemoryType

    def attr(a, p):
        return dev.ok(drv.cuPointerGetAttribute(a, p))

    managed = int(dev.ok(drv.cuMemAllocManaged(64, ATTACH.CU_MEM_ATTACH_GLOBAL)))
    plain = int(dev.ok(drv.cuMemAlloc(64)))
    pinned = dev.ok(drv.cuMemAllocHost(64))
    data = np.zeros(8)
    dev.ok(drv.cuMemHostRegister(data, 64, 0))
    registered = int(dev.ok(drv.cuMemHostGetDevicePointer(data, 0)))
    assert attr(P.CU_POINTER_ATTRIBUTE_IS_MANAGED, managed) is True
    assert attr(P.CU_POINTER_ATTRIBUTE_IS_MANAGED, plain) is False
    assert attr(P.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pinned) == 1  # CU_MEMORYTYPE_HOST
    assert int(attr(P.CU_POINTER_ATTRIBUTE_DEVICE_POINTER, data.ctypes.data)) == registered
    assert attr(P.CU_POINTER_ATTRIBUTE_HOST_POINTER, registered + 8) == data.ctypes.data + 8
    assert int(attr(P.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, plain + 10)) == plain
    assert attr(P.CU_POINTER_ATTRIBUTE_RANGE_SIZE, plain + 10) == 64
    assert attr(P.CU_POINTER_ATTRIBUTE_BUFFER_ID, plain) != attr(P.CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                                                 managed)
    dev.fails(drv.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_HOST_POINTER, plain),
              R.CUDA_ERROR_INVALID_VALUE)
    dev.fails(drv.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x1234),
              R.CUDA_ERROR_INVALID_VALUE)
    assert drv.cuPointerGetAttributes(2, [P.CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                          P.CU_POINTER_ATTRIBUTE_RANGE_SIZE], 0x1234)[1] == [
        False, 0]
    with pytest.raises(TypeError):
        drv.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_MAPPING_SIZE, plain)
    kinds = {p: rt.cudaPointerGetAttributes(p)[1] for p in (managed, plain, pinned, 0x1234)}
    assert [kinds[p].type for p in (managed, plain, pinned, 0x1234)] == [
        T.cudaMemoryTypeManaged, T.cudaMemoryTypeDevice, T.cudaMemoryTypeHost,
        T.cudaMemoryTypeUnregistered]
    assert kinds[0x1234].device == -2 and kinds[0x1234].hostPointer == 0x1234
    assert kinds[plain].hostPointer == 0 and kinds[managed].hostPointer == managed


def test_advice_and_prefetches_are_reported_page_by_page(dev) -> None:
    drv = dev.drv
    M = real_driver.CUmem_range_attribute
    Adv = real_driver.CUmem_advise
    page = 4096
    m = int(dev.ok(drv.cuMemAllocManaged(4 * page, ATTACH.CU_MEM_ATTACH_GLOBAL)))
    on_device = real_driver.CUmemLocation()
    on_device.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    on_host = real_driver.CUmemLocation()
    on_host.type = real_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST

    def query(attribute, address=m, count=4 * page, size=4):
        return dev.ok(drv.cuMemRangeGetAttribute(size, attribute, address, count))

    assert query(M.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY) == 0
    assert query(M.CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION) == -2  # CU_DEVICE_INVALID
    dev.ok(drv.cuMemAdvise(m, 2 * page, Adv.CU_MEM_ADVISE_SET_READ_MOSTLY, on_device))
    assert query(M.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY) == 0
    assert query(M.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, count=2 * page) == 1
    dev.ok(drv.cuMemAdvise(m, 4 * page, Adv.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_host))
    assert query(M.CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION) == -1  # CU_DEVICE_CPU
    dev.ok(drv.cuMemAdvise(m, 4 * page, Adv.CU_MEM_ADVISE_SET_ACCESSED_BY, on_device))
    assert query(M.CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, size=8) == [0, -2]
    dev.ok(drv.cuMemPrefetchAsync(m + page, page, on_device, 0, 0))
    assert query(M.CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m + page, page) == 0
    assert query(M.CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION) == -2
    dev.fails(drv.cuMemRangeGetAttribute(8, M.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, page),
              R.CUDA_ERROR_INVALID_VALUE)
    with pytest.raises(TypeError):
        drv.cuMemRangeGetAttribute(4, M.CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, m, page)
    rt_attr = real_runtime.cudaMemRangeAttribute.cudaMemRangeAttributeReadMostly
    assert dev.rt.cudaMemRangeGetAttribute(4, rt_attr, m, 2 * page)[1] == 1
