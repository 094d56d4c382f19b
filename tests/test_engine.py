"""The engine and the Python door, in process, against stand-in drivers:
keyword calls, context teardown, the cache."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from cuda.bindings import driver as cuda_driver
from cuda.bindings import runtime as cuda_runtime

from gpusafe.doors.python_driver import DriverDoor
from gpusafe.doors.python_runtime import RuntimeDoor
from gpusafe.doors.wrappers import install
from gpusafe.engine import cache
from gpusafe.engine.checking import Engine, Policy
from gpusafe.engine.findings import Findings
from gpusafe.engine.registry import State
from gpusafe.report import ReportBuilder
from gpusafe_instrument.sites import SiteTable

OK = cuda_driver.CUresult.CUDA_SUCCESS
BASE = 0x7F00_0000_0000


class StandInDriver:
    """A driver that records what reaches it.  Addresses come from a counter
    that a context's destruction rewinds, as a real driver may hand a
    destroyed context's addresses out again."""

    CUresult = cuda_driver.CUresult

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.context = 1
        self.next = BASE

    def __getattr__(self, name: str):
        if not name.startswith(("cu", "cuda")):
            raise AttributeError(name)

        def call(*args):
            self.calls.append((name, *args))
            address = self.next
            self.next += 0x1_0000
            return (OK, address, 512)

        return call

    def cuCtxGetCurrent(self):
        return (OK, self.context)

    def cuCtxDestroy(self, ctx):
        self.calls.append(("cuCtxDestroy", ctx))
        self.next = BASE
        self.context += 1
        return (OK,)

    def cuCtxGetDevice(self):
        return (OK, 0)

    def cuDevicePrimaryCtxGetState(self, dev):
        return (OK, 0, 0)

    def cuFuncGetName(self, f):
        return (OK, b"kernel")


def make_engine(**policy) -> tuple[Engine, StandInDriver]:
    driver = StandInDriver()
    backend = SimpleNamespace(name="cuda", synchronous=False, driver=driver, runtime=driver,
                              record_memory=None, fault_detail=lambda: None)
    return Engine(backend, Findings(ReportBuilder(["app"], "stand-in")), Policy(**policy)), driver


def kinds(engine: Engine) -> list[str]:
    return [v["kind"] for v in engine.findings.report.build(exit_code=0).to_dict()["violations"]]


# -- keyword arguments ----------------------------------------------------------


SPECIAL = {
    "image": b"\x7fELF not PTX",
    "config": SimpleNamespace(sharedMemBytes=0),
    "kernelParams": None,
    "extra": None,
    "fname": "/nonexistent/module.ptx",
    "name": b"kernel",
    "kind": cuda_runtime.cudaMemcpyKind.cudaMemcpyHostToDevice,
}


def _arguments(original) -> dict[str, object]:
    names = list(inspect.signature(original).parameters)
    return {n: SPECIAL.get(n, 0x100 + 8 * i) for i, n in enumerate(names)}


def _wrapped(door_class, module) -> list[tuple[str, object]]:
    engine, driver = make_engine()
    names = door_class(engine, _Recorder(driver)).wrappers()
    return [(n, getattr(module, n)) for n in sorted(names)]


class _Recorder(dict):
    """The door's table of real functions: any name, served by the stand-in."""

    def __init__(self, driver: StandInDriver) -> None:
        super().__init__()
        self.driver = driver

    def __contains__(self, name: object) -> bool:
        return True

    def __getitem__(self, name: str):
        return getattr(self.driver, name)


@pytest.mark.parametrize(("door_class", "module"), [(DriverDoor, cuda_driver),
                                                    (RuntimeDoor, cuda_runtime)])
def test_every_wrapped_function_takes_keywords_as_the_real_one_does(door_class, module) -> None:
    checked = 0
    for name, original in _wrapped(door_class, module):
        arguments = _arguments(original)
        outcomes = []
        for by_keyword in (False, True):
            engine, driver = make_engine()
            wrappers = door_class(engine, _Recorder(driver)).wrappers()
            target = SimpleNamespace(**{name: original})
            install(target, {name: driver.__getattr__(name)}, {name: wrappers[name]}, {})
            fn = target.__dict__[name]
            result = fn(**arguments) if by_keyword else fn(*arguments.values())
            outcomes.append((result, driver.calls, kinds(engine)))
        assert outcomes[0] == outcomes[1], name
        with pytest.raises(TypeError):
            fn(nonsense=1)
        checked += 1
    assert checked >= 20 if module is cuda_driver else checked >= 15


def test_a_keyword_copy_is_judged_like_a_positional_one() -> None:
    engine, driver = make_engine()
    door = DriverDoor(engine, _Recorder(driver))
    target = SimpleNamespace(cuMemAlloc=cuda_driver.cuMemAlloc,
                             cuMemcpyHtoD=cuda_driver.cuMemcpyHtoD)
    install(target, {n: getattr(driver, n) for n in ("cuMemAlloc", "cuMemcpyHtoD")},
            door.wrappers(), {})
    _, p, _ = target.cuMemAlloc(bytesize=100)
    assert target.cuMemcpyHtoD(dstDevice=p, srcHost=b"x" * 100, ByteCount=100)[0] == OK
    assert target.cuMemcpyHtoD(dstDevice=p, srcHost=b"x" * 101, ByteCount=101) == \
        (cuda_driver.CUresult.CUDA_ERROR_INVALID_VALUE,)
    assert kinds(engine) == ["api-out-of-bounds"]


# -- contexts -------------------------------------------------------------------


def _door(engine: Engine, driver: StandInDriver) -> dict:
    return DriverDoor(engine, _Recorder(driver)).wrappers()


def test_destroying_a_context_reports_its_live_allocations_as_leaks() -> None:
    engine, driver = make_engine(leak_check=True)
    w = _door(engine, driver)
    _, kept, _ = w["cuMemAlloc"](64)
    _, freed, _ = w["cuMemAlloc"](32)
    assert w["cuMemFree"](freed) == (OK,)
    assert w["cuCtxDestroy"](driver.context) == (OK,)
    report = engine.findings.report.build(exit_code=0).to_dict()
    assert [(v["kind"], v["allocation"]["base"]) for v in report["violations"]] == \
        [("leak", hex(kept))]


def test_without_leak_check_a_destroyed_context_reports_nothing() -> None:
    engine, driver = make_engine()
    w = _door(engine, driver)
    w["cuMemAlloc"](64)
    w["cuCtxDestroy"](driver.context)
    assert kinds(engine) == []
    assert engine.registry.live() == []


def test_an_address_reused_after_context_destruction_is_a_new_allocation() -> None:
    engine, driver = make_engine()
    w = _door(engine, driver)
    _, first, _ = w["cuMemAlloc"](64)
    old = engine.registry.find(first)
    w["cuCtxDestroy"](driver.context)
    _, again, _ = w["cuMemAlloc"](128)
    assert again == first
    new = engine.registry.find(again)
    assert new is not old and new.size == 128 and new.tag > old.tag
    assert w["cuMemFree"](again) == (OK,)
    assert kinds(engine) == []


def test_context_destruction_drops_its_quarantine_without_freeing_it() -> None:
    engine, driver = make_engine()
    w = _door(engine, driver)
    _, p, _ = w["cuMemAlloc"](64)
    w["cuMemFree"](p)
    assert engine.registry.find(p).state is State.FREED  # quarantined
    w["cuCtxDestroy"](driver.context)
    assert engine.registry.find(p) is None
    assert engine.registry._quarantined_bytes == 0
    assert not any(c[0] == "cuMemFree" for c in driver.calls)  # the driver took it back


def test_an_address_the_driver_reclaimed_behind_our_back_does_not_fail_the_program() -> None:
    engine, driver = make_engine()
    w = _door(engine, driver)
    _, p, _ = w["cuMemAlloc"](64)
    driver.next = p  # the driver hands the same address out again
    assert w["cuMemAlloc"](64)[0] == OK
    assert engine.registry.find(p).tag == 2


# -- the cache ------------------------------------------------------------------

PTX = """\
.version 7.0
.target sm_75
.address_size 64

.visible .entry k(.param .u64 p)
{
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], 1;
    ret;
}
"""


def test_a_change_to_the_instrumenter_or_the_runtime_misses_the_cache(tmp_path: Path) -> None:
    package = tmp_path / "gpusafe_instrument"
    shutil.copytree(Path(cache._instrument_package.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    runtime = cache.runtime_text()
    before = cache.fingerprint(package, runtime)
    assert cache.fingerprint(package, runtime) == before
    pass_file = next(p for p in sorted(package.rglob("*.py")) if "check" in str(p.relative_to(package)))
    pass_file.write_text(pass_file.read_text() + "\n# a change to the pass\n")
    changed_pass = cache.fingerprint(package, runtime)
    assert changed_pass != before
    assert cache.fingerprint(package, runtime + "\n// new runtime\n") != changed_pass


def test_the_cache_key_covers_the_fingerprint(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    key = cache.entry_key(PTX, None)
    cache.store(key, "instrumented", SiteTable())
    assert cache.load(key) is not None
    monkeypatch.setattr(cache, "instrumenter_fingerprint", lambda: "another instrumenter")
    assert cache.entry_key(PTX, None) != key
    assert cache.load(cache.entry_key(PTX, None)) is None


def test_a_tampered_or_truncated_cache_entry_is_a_miss(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    key = cache.entry_key(PTX, None)
    cache.store(key, "instrumented", SiteTable())
    path = cache.cache_dir() / f"{key}.json"
    text = path.read_text()
    path.write_text(text.replace("instrumented", "tampered!!!!"))
    assert cache.load(key) is None
    path.write_text(text[: len(text) // 2])
    assert cache.load(key) is None
    path.write_text(text)
    assert cache.load(key) is not None


# -- what the program sees ------------------------------------------------------


def test_a_unified_copy_is_range_checked_on_each_tracked_side() -> None:
    engine, driver = make_engine()
    w = _door(engine, driver)
    _, p, _ = w["cuMemAlloc"](1000)
    _, q, _ = w["cuMemAlloc"](1024)
    assert w["cuMemcpy"](q, p, 1000)[0] == OK
    assert w["cuMemcpy"](p, q, 1024) == (cuda_driver.CUresult.CUDA_ERROR_INVALID_VALUE,)
    assert w["cuMemcpyAsync"](p, q, 1024, 0) == (cuda_driver.CUresult.CUDA_ERROR_INVALID_VALUE,)
    assert kinds(engine) == ["api-out-of-bounds"] * 2  # one entry per call site


def test_the_address_range_is_the_programs_never_the_red_zone() -> None:
    engine, driver = make_engine()
    w = _door(engine, driver)
    _, p, _ = w["cuMemAlloc"](1000)
    assert driver.calls[-1] == ("cuMemAlloc", 1000 + engine.padding)
    err, base, size = w["cuMemGetAddressRange"](p + 10)
    assert (err, int(base), size) == (OK, p, 1000)


def test_a_forked_child_reports_only_its_own_findings_and_leaks() -> None:
    engine, driver = make_engine(leak_check=True)
    w = _door(engine, driver)
    _, p, _ = w["cuMemAlloc"](64)
    w["cuMemFree"](p + 1)  # the parent's invalid free
    assert kinds(engine) == ["invalid-free"]
    engine.findings.forked()
    engine.forked()
    assert kinds(engine) == []
    _, mine, _ = w["cuMemAlloc"](32)
    engine.finish()
    leaks = engine.findings.report.build(exit_code=0).to_dict()["violations"]
    assert [(v["kind"], v["allocation"]["base"]) for v in leaks] == [("leak", hex(mine))]


# -- the CPU device as a backend ------------------------------------------------


def test_under_the_cpu_device_the_red_zone_is_applied_once() -> None:
    from gpusafe.backends.cpu import CpuBackend
    from gpusafe.cpu.memory import SEGMENT_ALIGN

    backend = CpuBackend()
    engine = Engine(backend, Findings(ReportBuilder(["app"], "cpu")), Policy(padding=256))
    real = {n: getattr(backend.driver, n) for n in ("cuMemAlloc", "cuMemFree")}
    w = DriverDoor(engine, real).wrappers()
    d = backend.driver
    assert d.cuInit(0)[0] == OK
    _, dev = d.cuDeviceGet(0)
    _, ctx = d.cuCtxCreate(None, 0, dev)
    _, first = w["cuMemAlloc"](1000)
    _, second = w["cuMemAlloc"](1000)
    reserved = -(-(1000 + 256) // SEGMENT_ALIGN) * SEGMENT_ALIGN
    assert int(second) - int(first) == reserved  # the registry's red zone, and no second one
    record = d.memory.find(int(first))
    assert (record.base, record.size) == (int(first), 1000 + 256)
    w["cuMemFree"](first)
    assert d.memory.find(int(first)).live  # the registry quarantines; the device does not


def test_ptx_with_a_byte_that_is_not_utf8_is_instrumented_byte_for_byte() -> None:
    from gpusafe.engine.modules import Modules

    image = PTX.replace("ret;", "ret; // caf\xe9").encode("latin-1") + b"\0"
    plan = Modules().plan(image)
    assert plan.problem is None and plan.info.sites is not None
    assert "k" in plan.info.sites.kernels
    assert b"caf\xe9" in plan.image  # the comment's byte went through untouched


def test_the_pipeline_reuses_its_buffers_from_launch_to_launch() -> None:
    from gpusafe.cpu.memory import DeviceMemory
    from gpusafe.engine.launches import LaunchPipeline
    from gpusafe_instrument.checks import instrument
    from gpusafe_instrument.host import AllocationRecord

    result = instrument(PTX)
    memory = DeviceMemory()
    buf = memory.alloc(64)
    records = [AllocationRecord(1, buf, 64)]
    pipeline = LaunchPipeline(memory)
    params = buf.to_bytes(8, "little")

    def launch_once() -> None:
        launch = pipeline.prepare(result.sites, "k", params, records, table_key="t")
        assert pipeline.collect(launch) == ([], 0)

    launch_once()
    after_one = len(memory.allocations)
    for _ in range(10):
        launch_once()
    assert len(memory.allocations) == after_one  # no new buffer after the first launch


def test_an_internal_error_while_instrumenting_is_a_tool_failure_not_the_programs() -> None:
    engine, driver = make_engine()

    def broken(image):
        raise FileNotFoundError("gpusafe_runtime.ptx")

    engine.modules.plan = broken
    w = _door(engine, driver)
    image = PTX.encode() + b"\0"
    assert w["cuModuleLoadData"](image)[0] == OK  # the program goes on
    assert driver.calls[-1] == ("cuModuleLoadData", image)  # its own module, unchecked
    assert engine.findings.problems and "internal error" in engine.findings.problems[0]


def _cpu_door(names: tuple[str, ...]):
    from gpusafe.backends.cpu import CpuBackend

    backend = CpuBackend()
    engine = Engine(backend, Findings(ReportBuilder(["app"], "cpu")), Policy(padding=256))
    d = backend.driver
    assert d.cuInit(0)[0] == OK
    assert d.cuCtxCreate(None, 0, 0)[0] == OK
    real = {n: getattr(d, n) for n in names}
    return engine, d, DriverDoor(engine, real).wrappers()


def test_memory_kinds_reach_the_registry_through_the_driver_door() -> None:
    import numpy as np

    engine, d, w = _cpu_door(("cuMemAllocManaged", "cuMemHostRegister", "cuMemHostUnregister",
                              "cuMemHostGetDevicePointer", "cuMemMap", "cuMemUnmap", "cuMemFree",
                              "cuPointerGetAttribute", "cuPointerGetAttributes"))
    reg = engine.registry
    _, managed = w["cuMemAllocManaged"](100, 1)
    assert (reg.find(int(managed)).size, reg.find(int(managed)).owned) == (100, True)
    P = cuda_driver.CUpointer_attribute
    size = P.CU_POINTER_ATTRIBUTE_RANGE_SIZE
    assert d.cuPointerGetAttribute(size, managed)[1] == 100 + 256  # the device's view
    assert w["cuPointerGetAttribute"](size, managed) == (OK, 100)  # the program's
    assert w["cuPointerGetAttributes"](2, [P.CU_POINTER_ATTRIBUTE_IS_MANAGED, size],
                                       managed) == (OK, [True, 100])
    data = np.zeros(64, np.uint8)
    assert w["cuMemHostRegister"](data, 64, 0) == (OK,)
    device = int(d.cuMemHostGetDevicePointer(data, 0)[1])
    assert reg.find(device).size == 64 and not reg.find(device).owned
    assert w["cuMemHostUnregister"](data) == (OK,)
    assert reg.find(device).state is State.FREED
    # a VMM mapping is an allocation of its own until cuMemUnmap frees it
    prop = cuda_driver.CUmemAllocationProp()
    prop.type = cuda_driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cuda_driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    handle = d.cuMemCreate(2 << 20, prop, 0)[1]
    va = int(d.cuMemAddressReserve(4 << 20, 0, 0, 0)[1])
    assert w["cuMemMap"](va, 2 << 20, 0, handle, 0) == (OK,)
    assert reg.find(va + 100).size == 2 << 20
    assert w["cuMemUnmap"](va, 2 << 20) == (OK,)
    assert reg.find(va).state is State.FREED and reg.find(va).freed_at is not None
    d.reset()


# -- records that outlive a faulting context (the CUDA backend's arrangement) ----

FAULTING = r"""
extern "C" __device__ void __assertfail(const char*, const char*, unsigned, const char*, size_t);
extern "C" __global__ void write_then_assert(int* out, int n)
{
    int i = threadIdx.x;
    out[i] = i;                                                  // past the end from n on
    if (i >= n + 8) __assertfail("i < n + 8", "f.cu", 7, "k", 1);  // then the kernel faults
}
"""


class _AsOnAGpu:
    """The CPU device arranged as the CUDA backend is: launches through the
    driver API, gpusafe's records in memory it allocates through that API
    (device memory for the table and contexts, mapped host memory for the
    violation records), and a fault that makes the context's error sticky."""

    name = "cuda"
    synchronous = False
    record_memory = None
    unsupported_results: frozenset = frozenset()

    def __init__(self) -> None:
        from gpusafe.cpu.driver import Driver

        self.driver = Driver(red_zone=0, quarantine=0)
        self.runtime = None

    def fault_detail(self) -> str | None:
        return self.driver.last_error_detail()

    def unsupported_reason(self) -> str:
        return ""


def test_the_records_of_a_launch_that_faults_are_read_after_the_fault() -> None:
    import numpy as np

    from gpusafe.engine.launches import DeviceMemoryError, DriverMemory
    from gpusafe_testkit.corpus import nvrtc_compile

    backend = _AsOnAGpu()
    engine = Engine(backend, Findings(ReportBuilder(["app"], "cuda")), Policy())
    d = backend.driver
    names = ("cuModuleLoadData", "cuModuleGetFunction", "cuMemAlloc", "cuLaunchKernel")
    w = DriverDoor(engine, {n: getattr(d, n) for n in names}).wrappers()
    assert d.cuInit(0)[0] == OK and d.cuCtxCreate(None, 0, 0)[0] == OK
    ptx = nvrtc_compile(FAULTING, "f.cu", "compute_75")
    _, module = w["cuModuleLoadData"](ptx.encode() + b"\0")
    _, fn = w["cuModuleGetFunction"](module, b"write_then_assert")
    _, out = w["cuMemAlloc"](4 * 16)
    values = [np.array([int(out)], dtype=np.uint64), np.array([16], dtype=np.int32)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    err, = w["cuLaunchKernel"](fn, 1, 1, 1, 64, 1, 1, 0, 0, params.ctypes.data, 0)
    assert err == cuda_driver.CUresult.CUDA_ERROR_ASSERT
    # the context is dead: nothing can be copied out of its device memory now ...
    with pytest.raises(DeviceMemoryError):
        DriverMemory(d).read(int(out), 4)
    # ... yet the writes past the end, recorded before the fault, are reported
    report = engine.findings.report.build(exit_code=1).to_dict()
    assert [(v["kind"], v["access"]) for v in report["violations"]] == [
        ("global-out-of-bounds", "write")]
    assert report["faults"][0]["error"] == "CUDA_ERROR_ASSERT"
