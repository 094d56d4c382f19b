"""The runtime API (``cuda.bindings.runtime``) under gpusafe.

End to end: ``gpusafe run --device cpu --json`` of a real cuda-python program
that allocates, copies, sets and frees through the runtime and launches its
kernel through the driver API with the runtime's pointers. Then the CPU
device's runtime surface, :mod:`gpusafe.cpu.runtime`, on its own.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_run_cli import KERNEL, ROOT, gpusafe_run, line_of

from gpusafe.cpu import driver
from gpusafe.cpu import runtime as rt
from gpusafe.doors.python_runtime import RuntimeDoor
from gpusafe.engine.checking import Engine, Policy
from gpusafe.engine.findings import Findings
from gpusafe.report import ReportBuilder

PROLOGUE = """\
import sys
import numpy as np
sys.path.insert(0, {samples!r})
from nvrtc import compile_to_ptx
from cuda.bindings import driver
{import_line}
H2D = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
D2H = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost

def check(result):
    if int(result[0]) != 0:
        raise RuntimeError(f"CUDA error {{result[0]!r}}")
    return None if len(result) == 1 else result[1] if len(result) == 2 else result[1:]

check(cudart.cudaSetDevice(0))  # the runtime's primary context, used by the driver calls below
"""

LAUNCH = """\
ptx = compile_to_ptx({kernel!r}, "add_one.cu")
mod = check(driver.cuModuleLoadData(ptx.encode()))
fn = check(driver.cuModuleGetFunction(mod, b"add_one"))
n = 256
host_in = np.arange(n, dtype=np.float32)
d_in = check({malloc}(host_in.nbytes))
d_out = check({malloc}(host_in.nbytes))
check(cudart.cudaMemcpy(d_in, host_in, host_in.nbytes, H2D))
values = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_in)], dtype=np.uint64),
          np.array([n], dtype=np.int32)]
params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
check(driver.cuLaunchKernel(fn, n // 128 + 1, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
check(cudart.cudaDeviceSynchronize())
host_out = np.zeros(n, dtype=np.float32)
check(cudart.cudaMemcpy(host_out, d_out, host_out.nbytes, D2H))
assert (host_out == host_in + 1).all(), "wrong result"
"""

STYLES = {
    "from-import-module": ("from cuda.bindings import runtime\ncudart = runtime",
                           "cudart.cudaMalloc", "cudart.cudaFree"),
    "import-as": ("import cuda.bindings.runtime as cudart",
                  "cudart.cudaMalloc", "cudart.cudaFree"),
    "from-import-names": ("import cuda.bindings.runtime as cudart\n"
                          "from cuda.bindings.runtime import cudaMalloc, cudaFree",
                          "cudaMalloc", "cudaFree"),
}


def write_program(tmp_path: Path, body: str, *, style: str = "import-as",
                  kernel: str = KERNEL) -> Path:
    import_line, malloc, free = STYLES[style]
    text = PROLOGUE.format(samples=str(ROOT / "samples"), import_line=import_line)
    text += LAUNCH.format(kernel=kernel, malloc=malloc)
    text += textwrap.dedent(body).replace("FREE", free)
    path = tmp_path / "app.py"
    path.write_text(text)
    return path


def of_kind(doc: dict, kind: str) -> list[dict]:
    return [v for v in doc["violations"] if v["kind"] == kind]


# -- gpusafe run, end to end ------------------------------------------------


def test_kernel_overflow_of_a_cudamalloc_buffer_names_the_cudamalloc_line(tmp_path: Path) -> None:
    app = write_program(tmp_path, "check(cudart.cudaFree(d_in))\ncheck(cudart.cudaFree(d_out))\n")
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", str(app))
    assert rc == 86, out
    kinds = sorted((v["kind"], v["access"]) for v in doc["violations"])
    assert kinds == [("global-out-of-bounds", "read"), ("global-out-of-bounds", "write")]
    read = next(v for v in doc["violations"] if v["access"] == "read")
    assert read["kernel"] == "add_one" and read["location"]["line"] == 6
    alloc = read["allocation"]
    assert (alloc["tag"], alloc["size"], alloc["offset"]) == (1, 1024, 1024)
    assert alloc["allocated_at"] == f"app.py:{line_of(app, 'd_in = check')}"
    write = next(v for v in doc["violations"] if v["access"] == "write")
    assert write["allocation"]["tag"] == 2
    assert write["allocation"]["allocated_at"] == f"app.py:{line_of(app, 'd_out = check')}"
    assert doc["exit_code"] == 0 and doc["summary"]["launches"] == 1


def test_a_correct_runtime_program_reports_nothing(tmp_path: Path) -> None:
    body = """\
    check(cudart.cudaMemset(d_out, 0, host_in.nbytes))
    check(cudart.cudaFree(d_in))
    check(cudart.cudaFree(d_out))
    check(cudart.cudaFree(0))
    """
    app = write_program(tmp_path, body, kernel=KERNEL.replace("i <= n", "i < n"))
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", str(app))
    assert rc == 0, out
    assert doc["violations"] == [] and doc["summary"]["launches"] == 1


@pytest.mark.parametrize("style", sorted(STYLES))
def test_double_free_in_every_import_style(tmp_path: Path, style: str) -> None:
    body = """\
    check(FREE(d_in))
    result = FREE(d_in)
    assert result == (cudart.cudaError_t.cudaErrorInvalidValue,), result
    """
    app = write_program(tmp_path, body, style=style)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    (v,) = of_kind(doc, "double-free")
    assert v["location"]["line"] == line_of(app, "result = ")
    alloc = v["allocation"]
    assert alloc["tag"] == 1
    assert alloc["allocated_at"] == f"app.py:{line_of(app, 'd_in = check')}"
    assert alloc["freed_at"] == f"app.py:{line_of(app, 'check(' + STYLES[style][2])}"
    assert doc["exit_code"] == 0  # the program saw the error code and went on


def test_invalid_free(tmp_path: Path) -> None:
    body = """\
    result = cudart.cudaFree(int(d_in) + 16)
    assert result == (cudart.cudaError_t.cudaErrorInvalidValue,), result
    check(cudart.cudaFree(d_in))  # the allocation is still live: the bad free was not passed on
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    (v,) = of_kind(doc, "invalid-free")
    assert v["location"]["line"] == line_of(app, "result = ")
    assert v["allocation"]["tag"] == 1 and v["allocation"]["offset"] == 16
    assert of_kind(doc, "double-free") == [] and doc["exit_code"] == 0


@pytest.mark.parametrize("copy", [
    "cudart.cudaMemcpy(d_in, big, big.nbytes, H2D)",
    "cudart.cudaMemcpy(big, d_in, big.nbytes, D2H)",
    "cudart.cudaMemcpy(big.ctypes.data, d_in, big.nbytes, cudart.cudaMemcpyKind.cudaMemcpyDefault)",
    "cudart.cudaMemcpyAsync(d_in, big, big.nbytes, H2D, 0)",
])
def test_copy_past_the_end_is_refused_and_reported(tmp_path: Path, copy: str) -> None:
    body = f"""\
    big = np.full(n + 16, 7, dtype=np.float32)
    result = {copy}
    assert result == (cudart.cudaError_t.cudaErrorInvalidValue,), result
    assert (big == 7).all(), "the refused copy was performed"
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    (v,) = of_kind(doc, "api-out-of-bounds")
    assert v["location"]["line"] == line_of(app, "result = ")
    assert v["kernel"] is None and v["size"] == (256 + 16) * 4
    assert (v["allocation"]["tag"], v["allocation"]["offset"]) == (1, 0)
    assert doc["exit_code"] == 0


def test_memset_past_the_end_is_refused_and_reported(tmp_path: Path) -> None:
    body = """\
    result = cudart.cudaMemset(int(d_out) + 1000, 0xFF, 32)
    assert result == (cudart.cudaError_t.cudaErrorInvalidValue,), result
    check(cudart.cudaMemcpy(host_out, d_out, host_out.nbytes, D2H))
    assert (host_out == host_in + 1).all(), "the refused memset was performed"
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    (v,) = of_kind(doc, "api-out-of-bounds")
    assert v["location"]["line"] == line_of(app, "result = ")
    assert (v["allocation"]["tag"], v["allocation"]["offset"], v["size"]) == (2, 1000, 32)
    assert doc["exit_code"] == 0


def test_copy_from_a_freed_buffer_is_a_use_after_free(tmp_path: Path) -> None:
    body = """\
    check(cudart.cudaFree(d_out))
    result = cudart.cudaMemcpy(host_out, d_out, host_out.nbytes, D2H)
    assert result == (cudart.cudaError_t.cudaErrorInvalidValue,), result
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    (v,) = of_kind(doc, "use-after-free")
    assert v["location"]["line"] == line_of(app, "result = ")
    assert v["allocation"]["tag"] == 2
    assert v["allocation"]["freed_at"] == f"app.py:{line_of(app, 'check(cudart.cudaFree(d_out))')}"


def test_leak_check_reports_cudamalloc_allocations_at_their_sites(tmp_path: Path) -> None:
    app = write_program(tmp_path, "check(cudart.cudaFree(d_out))\n")
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", str(app))
    assert rc == 86, out
    leaks = of_kind(doc, "leak")
    assert [v["allocation"]["tag"] for v in leaks] == [1]
    assert leaks[0]["location"]["line"] == line_of(app, "d_in = check")
    assert leaks[0]["allocation"]["size"] == 1024


def test_driver_and_runtime_share_the_registry(tmp_path: Path) -> None:
    body = """\
    p = check(driver.cuMemAlloc(64))
    check(cudart.cudaFree(p))
    result = driver.cuMemFree(p)
    assert result == (driver.CUresult.CUDA_ERROR_INVALID_VALUE,), result
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    (v,) = of_kind(doc, "double-free")
    assert v["location"]["line"] == line_of(app, "result = ")
    assert v["allocation"]["tag"] == 3
    assert v["allocation"]["freed_at"] == f"app.py:{line_of(app, 'check(cudart.cudaFree(p))')}"


def test_unimplemented_runtime_function_is_named_on_the_cpu_device(tmp_path: Path) -> None:
    app = write_program(tmp_path, "cudart.cudaGraphicsMapResources(1, None, 0)\n")
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert "NotImplementedError: cudaGraphicsMapResources is not implemented by gpusafe's CPU device" in out
    assert doc["exit_code"] == 1


def test_no_check_still_serves_the_runtime_from_the_cpu_device(tmp_path: Path) -> None:
    app = write_program(tmp_path, "check(cudart.cudaFree(d_in))\ncudart.cudaFree(d_in)\n")
    rc, doc, out = gpusafe_run(tmp_path, "--no-check", "python", str(app))
    assert rc == 0, out
    assert doc["violations"] == []


# -- gpusafe.cpu.runtime on its own ----------------------------------------------

E = rt.cudaError_t
K = rt.cudaMemcpyKind


@pytest.fixture
def fresh():
    driver.reset()
    rt.cudaGetLastError()
    yield
    driver.reset()
    rt.cudaGetLastError()


def ok(result):
    assert result[0] == E.cudaSuccess, result
    return None if len(result) == 1 else result[1] if len(result) == 2 else result[1:]


def test_implicit_primary_context_and_shared_memory_with_the_driver(fresh) -> None:
    p = ok(rt.cudaMalloc(64))
    assert isinstance(p, int) and p
    current = ok(driver.cuCtxGetCurrent())
    primary = ok(driver.cuDevicePrimaryCtxRetain(0))
    assert int(current) == int(primary)
    data = np.arange(16, dtype=np.uint32)
    assert driver.cuMemcpyHtoD(p, data, data.nbytes)[0] == driver.CUresult.CUDA_SUCCESS
    back = np.zeros_like(data)
    ok(rt.cudaMemcpy(back, p, back.nbytes, K.cudaMemcpyDeviceToHost))
    assert (back == data).all()
    ok(rt.cudaFree(p))


def test_a_context_made_current_through_the_driver_is_used(fresh) -> None:
    driver.cuInit(0)
    _, ctx = driver.cuCtxCreate(None, 0, 0)
    p = ok(rt.cudaMalloc(64))
    assert int(ok(driver.cuCtxGetCurrent())) == int(ctx)
    driver.cuCtxDestroy(ctx)  # the context's memory goes with it
    driver.cuCtxSetCurrent(0)
    assert rt.cudaFree(p) == (E.cudaErrorInvalidValue,)


def test_copies_of_every_kind(fresh) -> None:
    a = np.arange(64, dtype=np.uint8)
    p, q = ok(rt.cudaMalloc(64)), ok(rt.cudaMalloc(64))
    ok(rt.cudaMemcpy(p, a, 64, K.cudaMemcpyHostToDevice))
    ok(rt.cudaMemcpy(q, p, 64, K.cudaMemcpyDeviceToDevice))
    b = np.zeros(64, np.uint8)
    ok(rt.cudaMemcpy(b.ctypes.data, q, 64, K.cudaMemcpyDefault))
    assert (b == a).all()
    c = np.zeros(64, np.uint8)
    ok(rt.cudaMemcpy(c, b, 64, K.cudaMemcpyHostToHost))
    assert (c == a).all()
    ok(rt.cudaMemset(q, 0xAB, 8))
    ok(rt.cudaMemcpyAsync(b, q, 64, K.cudaMemcpyDeviceToHost, 0))
    assert (b[:8] == 0xAB).all() and (b[8:] == a[8:]).all()


def test_bad_copies_and_frees_are_errors_and_set_the_last_error(fresh) -> None:
    p = ok(rt.cudaMalloc(64))
    small = np.zeros(8, np.uint8)
    assert rt.cudaMemcpy(small, p, 64, K.cudaMemcpyDeviceToHost) == (E.cudaErrorInvalidValue,)
    assert rt.cudaPeekAtLastError() == (E.cudaErrorInvalidValue,)
    assert rt.cudaGetLastError() == (E.cudaErrorInvalidValue,)
    assert rt.cudaGetLastError() == (E.cudaSuccess,)
    ok(rt.cudaFree(p))
    assert rt.cudaFree(p) == (E.cudaErrorInvalidValue,)
    with pytest.raises(AttributeError):  # cuda-python reads kind.value: an int has none
        rt.cudaMemcpy(small, p, 8, 2)


def test_zero_sizes_and_null_free(fresh) -> None:
    assert rt.cudaMalloc(0) == (E.cudaSuccess, 0)
    assert rt.cudaFree(0) == (E.cudaSuccess,)
    assert rt.cudaFree(None) == (E.cudaSuccess,)


def test_pitch_streams_events_and_device_queries(fresh) -> None:
    p, pitch = ok(rt.cudaMallocPitch(100, 3))
    assert pitch == 512 and p
    assert ok(driver.cuMemGetAddressRange(p))[1] == 512 * 3
    s = ok(rt.cudaStreamCreate())
    assert isinstance(s, rt.cudaStream_t)
    q = ok(rt.cudaMallocAsync(32, s))
    ok(rt.cudaMemsetAsync(q, 1, 32, s))
    ok(rt.cudaFreeAsync(q, s))
    start, end = ok(rt.cudaEventCreate()), ok(rt.cudaEventCreate())
    ok(rt.cudaEventRecord(start, s))
    ok(rt.cudaEventRecord(end, s))
    ok(rt.cudaStreamSynchronize(s))
    ok(rt.cudaEventSynchronize(end))
    assert ok(rt.cudaEventElapsedTime(start, end)) >= 0.0
    ok(rt.cudaEventDestroy(start))
    ok(rt.cudaStreamDestroy(s))
    assert rt.cudaStreamSynchronize(s) == (E.cudaErrorInvalidResourceHandle,)
    ok(rt.cudaDeviceSynchronize())
    assert ok(rt.cudaGetDeviceCount()) == 1 and ok(rt.cudaGetDevice()) == 0
    assert rt.cudaSetDevice(1) == (E.cudaErrorInvalidDevice,)
    prop = ok(rt.cudaGetDeviceProperties(0))
    assert prop.name.startswith(b"gpusafe CPU device")
    assert (prop.major, prop.minor, prop.warpSize) == (9, 0, 32)
    assert prop.maxThreadsDim == [1024, 1024, 64] and prop.totalGlobalMem > 0
    assert rt.cudaGetDeviceProperties(3)[0] == E.cudaErrorInvalidDevice


def test_device_reset_releases_the_primary_contexts_memory(fresh) -> None:
    p = ok(rt.cudaMalloc(64))
    ok(rt.cudaDeviceReset())
    assert rt.cudaMemset(p, 0, 64) == (E.cudaErrorInvalidValue,)
    q = ok(rt.cudaMalloc(64))  # the runtime is usable again
    ok(rt.cudaMemset(q, 0, 64))


def test_errors_map_from_the_driver_and_have_names(fresh) -> None:
    assert rt.to_cuda_error(driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY) == \
        E.cudaErrorMemoryAllocation
    assert rt.to_cuda_error(driver.CUresult.CUDA_ERROR_INVALID_HANDLE) == \
        E.cudaErrorInvalidResourceHandle
    assert rt.to_cuda_error(driver.CUresult.CUDA_ERROR_KEY_ROTATION) == E.cudaErrorUnknown
    assert rt.cudaGetErrorName(E.cudaErrorInvalidValue) == (E.cudaSuccess, b"cudaErrorInvalidValue")
    assert rt.cudaGetErrorString(E.cudaErrorInvalidValue) == (E.cudaSuccess, b"invalid argument")
    assert ok(rt.cudaRuntimeGetVersion()) == 13000


def test_unimplemented_functions_are_absent_and_named() -> None:
    assert "cudaMalloc" in rt.IMPLEMENTED and "cudaGraphicsMapResources" not in rt.IMPLEMENTED
    assert not hasattr(rt, "cudaGraphicsMapResources")
    with pytest.raises(AttributeError, match="cudaLibraryLoadData is a cuda.bindings.runtime"):
        rt.cudaLibraryLoadData  # noqa: B018
    assert rt.cudaMemcpyKind is __import__("cuda.bindings.runtime").bindings.runtime.cudaMemcpyKind


# -- the --device cuda wrappers, against a stand-in for the real runtime --------


class FakeRuntime:
    """Records the calls that reach "the real runtime"; hands out addresses."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.next = 0x7000_0000

    def table(self) -> dict:
        def malloc(size, *rest):
            self.calls.append(("cudaMalloc", size))
            self.next += 0x10000
            return (E.cudaSuccess, self.next)

        def pitch(width, height):
            self.calls.append(("cudaMallocPitch", width, height))
            self.next += 0x10000
            return (E.cudaSuccess, self.next, 512)

        def plain(name):
            def call(*args):
                self.calls.append((name, *args))
                return (E.cudaSuccess,)
            return call

        names = ["cudaFree", "cudaFreeAsync", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset",
                 "cudaMemsetAsync", "cudaMemcpy2D", "cudaMemset2D", "cudaDeviceSynchronize",
                 "cudaStreamSynchronize", "cudaDeviceReset"]
        return {"cudaMalloc": malloc, "cudaMallocAsync": malloc, "cudaMallocPitch": pitch,
                **{n: plain(n) for n in names}}


class FakeDriver:
    """The little of the driver API the engine asks the stand-in runtime's
    device: there is no current context."""

    CUresult = __import__("cuda.bindings.driver").bindings.driver.CUresult

    def cuCtxGetCurrent(self):
        return (self.CUresult.CUDA_SUCCESS, 0)

    def cuCtxGetDevice(self):
        return (self.CUresult.CUDA_ERROR_INVALID_CONTEXT, None)


class FakeBackend:
    name = "cuda"
    synchronous = False
    driver = FakeDriver()
    runtime = None
    record_memory = None


class CountingEngine(Engine):
    drains = 0

    def drain(self) -> None:
        self.drains += 1


@pytest.fixture
def cuda_wrappers():
    findings = Findings(ReportBuilder(["app"], "fake"))
    engine = CountingEngine(FakeBackend(), findings, Policy(quarantine=1024))
    fake = FakeRuntime()
    w = RuntimeDoor(engine, fake.table()).wrappers()
    return engine, fake, engine, w


def test_cuda_wrappers_register_pad_and_judge_frees(cuda_wrappers) -> None:
    session, fake, _, w = cuda_wrappers
    p = ok(w["cudaMalloc"](100))
    assert fake.calls == [("cudaMalloc", 100 + 256)]  # the red zone
    alloc = session.registry.find(p)
    assert (alloc.size, alloc.api) == (100, "cudaMalloc")
    assert str(alloc.allocated_at).split(":")[0].endswith("test_run_runtime_api.py")
    ok(w["cudaFree"](p))
    assert [c[0] for c in fake.calls] == ["cudaMalloc"]  # quarantined, not freed
    assert w["cudaFree"](p) == (E.cudaErrorInvalidValue,)
    assert w["cudaFree"](p + 8) == (E.cudaErrorInvalidValue,)
    assert [c[0] for c in fake.calls] == ["cudaMalloc"]  # neither bad free was passed on
    kinds = [v["kind"] for v in session.findings.report.build(exit_code=0).to_dict()
             ["violations"]]
    assert kinds == ["double-free", "invalid-free"]
    ok(w["cudaFree"](0))
    assert fake.calls[-1] == ("cudaFree", 0)  # the documented no-op goes through
    big = ok(w["cudaMalloc"](2048))
    ok(w["cudaFree"](big))  # over the 1 KiB quarantine: both are really freed now
    assert ("cudaFree", p) in fake.calls and ("cudaFree", big) in fake.calls
    q, pitch = ok(w["cudaMallocPitch"](100, 4))
    assert fake.calls[-1] == ("cudaMallocPitch", 100, 4 + 3)  # extra rows for the red zone
    assert session.registry.find(q).size == pitch * 4


def test_cuda_wrappers_check_copies_by_kind(cuda_wrappers) -> None:
    session, fake, launches, w = cuda_wrappers
    p = ok(w["cudaMalloc"](64))
    host = np.zeros(128, np.uint8)
    n = len(fake.calls)
    ok(w["cudaMemcpy"](p, host, 64, K.cudaMemcpyHostToDevice))
    assert len(fake.calls) == n + 1 and launches.drains == 1  # synchronous: drained
    assert w["cudaMemcpy"](p, host, 65, K.cudaMemcpyHostToDevice) == (E.cudaErrorInvalidValue,)
    assert w["cudaMemcpy"](host, p + 32, 64, K.cudaMemcpyDeviceToHost) == \
        (E.cudaErrorInvalidValue,)
    # the host side of an explicit kind is not judged, even an address that looks like p
    ok(w["cudaMemcpy"](p + 32, p, 32, K.cudaMemcpyHostToDevice))
    # cudaMemcpyDefault: each side judged when the registry tracks it
    ok(w["cudaMemcpy"](host.ctypes.data, p, 64, K.cudaMemcpyDefault))
    assert w["cudaMemcpy"](host.ctypes.data, p, 100, K.cudaMemcpyDefault) == \
        (E.cudaErrorInvalidValue,)
    assert w["cudaMemcpy"](p, host.ctypes.data, 100, K.cudaMemcpyDefault) == \
        (E.cudaErrorInvalidValue,)
    assert w["cudaMemcpyAsync"](p, host, 65, K.cudaMemcpyHostToDevice, 0) == \
        (E.cudaErrorInvalidValue,)
    assert w["cudaMemset"](p + 60, 0, 8) == (E.cudaErrorInvalidValue,)
    ok(w["cudaMemset2D"](p, 16, 0, 16, 4))
    assert w["cudaMemset2D"](p, 16, 0, 16, 5) == (E.cudaErrorInvalidValue,)
    ok(w["cudaMemcpy2D"](host, 16, p, 16, 16, 4, K.cudaMemcpyDeviceToHost))
    assert w["cudaMemcpy2D"](host, 16, p, 32, 16, 3, K.cudaMemcpyDeviceToHost) == \
        (E.cudaErrorInvalidValue,)
    ok(w["cudaFree"](p))
    assert w["cudaMemcpy"](host, p, 8, K.cudaMemcpyDeviceToHost) == (E.cudaErrorInvalidValue,)
    kinds = [v["kind"] for v in session.findings.report.build(exit_code=0).to_dict()
             ["violations"]]
    assert kinds.count("api-out-of-bounds") >= 6 and kinds[-1] == "use-after-free"
    drains = launches.drains
    ok(w["cudaDeviceSynchronize"]())
    ok(w["cudaStreamSynchronize"](0))
    ok(w["cudaDeviceReset"]())
    assert launches.drains == drains + 3
