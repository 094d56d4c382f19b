"""``gpusafe run`` end to end on the CPU device: a real cuda-python program in a
subprocess, interposed at start-up, its findings in the report and the exit
status; and the cases where gpusafe must say it could not do its job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

KERNEL = r"""
extern "C" __global__ void add_one(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        out[i] = in[i] + 1.0f;
    }
}
"""

PROLOGUE = """\
import sys
import numpy as np
sys.path.insert(0, {samples!r})
from nvrtc import compile_to_ptx
{import_line}

def check(result):
    if result[0] != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {{result[0]}}")
    return result[1] if len(result) == 2 else result[1:]

check(driver.cuInit(0))
ctx = check(driver.cuCtxCreate(None, 0, check(driver.cuDeviceGet(0))))
"""

LAUNCH = """\
ptx = compile_to_ptx({kernel!r}, "add_one.cu")
mod = check(driver.cuModuleLoadData(ptx.encode()))
fn = check(driver.cuModuleGetFunction(mod, b"add_one"))
n = {n}
host_in = np.arange(n, dtype=np.float32)
d_in = check(driver.cuMemAlloc(host_in.nbytes))
d_out = check(driver.cuMemAlloc(host_in.nbytes))
check(driver.cuMemcpyHtoD(d_in, host_in, host_in.nbytes))
values = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_in)], dtype=np.uint64),
          np.array([n], dtype=np.int32)]
params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
check(driver.cuLaunchKernel(fn, n // 128 + 1, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
check(driver.cuCtxSynchronize())
host_out = np.zeros(n, dtype=np.float32)
check(driver.cuMemcpyDtoH(host_out, d_out, host_out.nbytes))
assert (host_out == host_in + 1).all(), "wrong result"
"""


def write_program(tmp_path: Path, body: str, *, n: int = 256,
                  import_line: str = "from cuda.bindings import driver") -> Path:
    text = PROLOGUE.format(samples=str(ROOT / "samples"), import_line=import_line)
    text += LAUNCH.format(kernel=KERNEL, n=n) + textwrap.dedent(body)
    path = tmp_path / "app.py"
    path.write_text(text)
    return path


def gpusafe_run(tmp_path: Path, *args: str, timeout: int = 300) -> tuple[int, dict | None, str]:
    report = tmp_path / "report.json"
    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])  # this checkout
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "gpusafe", "run", "--device", "cpu", "--json", str(report),
         *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    doc = json.loads(report.read_text()) if report.exists() else None
    return proc.returncode, doc, proc.stdout + proc.stderr


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().split("\n"), 1) if needle in line)


def test_off_by_one_is_reported_with_line_thread_and_allocation(tmp_path: Path) -> None:
    app = write_program(tmp_path, "")
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    kinds = sorted((v["kind"], v["access"]) for v in doc["violations"])
    assert kinds == [("global-out-of-bounds", "read"), ("global-out-of-bounds", "write")]
    read = next(v for v in doc["violations"] if v["access"] == "read")
    assert read["kernel"] == "add_one"
    assert read["location"]["file"].endswith("add_one.cu") and read["location"]["line"] == 6
    assert read["threads"] == [{"block": [2, 0, 0], "thread": [0, 0, 0]}]
    alloc = read["allocation"]
    assert (alloc["tag"], alloc["size"], alloc["offset"]) == (1, 1024, 1024)
    assert alloc["allocated_at"] == f"app.py:{line_of(app, 'd_in = check')}"
    assert doc["exit_code"] == 0 and doc["summary"]["launches"] == 1


def test_every_offender_lists_each_offending_thread(tmp_path: Path) -> None:
    """Eight threads overflow both buffers: the site tallies keep the first 4
    of each site, ``--every-offender`` all eight; both count eight."""
    app = write_program(tmp_path, "")
    wide = KERNEL.replace("i <= n", "i <= n + 7")
    app.write_text(app.read_text().replace(repr(KERNEL), repr(wide))
                   .replace('assert (host_out == host_in + 1).all(), "wrong result"', ""))
    for flags, kept in (((), 4), (("--every-offender",), 8)):
        rc, doc, out = gpusafe_run(tmp_path, *flags, "python", str(app))
        assert rc == 86, out
        assert sorted((v["access"], v["count"], len(v["threads"])) for v in doc["violations"]) \
            == [("read", 8, kept), ("write", 8, kept)], flags


def test_a_correct_program_keeps_its_exit_status_and_reports_nothing(tmp_path: Path) -> None:
    kernel_fixed = KERNEL.replace("i <= n", "i < n")
    app = write_program(tmp_path, "sys.exit(3)\n")
    app.write_text(app.read_text().replace(repr(KERNEL), repr(kernel_fixed)))
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 3, out
    assert doc["violations"] == [] and doc["exit_code"] == 3


@pytest.mark.parametrize("import_line,free", [
    ("import cuda.bindings.driver as driver", "driver.cuMemFree"),
    ("from cuda.bindings.driver import cuMemFree\nfrom cuda.bindings import driver", "cuMemFree"),
])
def test_every_import_style_is_interposed(tmp_path: Path, import_line: str, free: str) -> None:
    body = f"check({free}(d_in))\nresult = {free}(d_in)\n"
    app = write_program(tmp_path, body, import_line=import_line)
    rc, doc, _ = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86
    (v,) = [v for v in doc["violations"] if v["kind"] == "double-free"]
    assert v["location"]["line"] == line_of(app, "result = ")


def test_copy_past_the_end_is_refused_and_reported(tmp_path: Path) -> None:
    body = """\
    big = np.zeros(n + 16, dtype=np.float32)
    result = driver.cuMemcpyHtoD(d_in, big, big.nbytes)
    assert result[0] == driver.CUresult.CUDA_ERROR_INVALID_VALUE, result
    """
    app = write_program(tmp_path, body)
    rc, doc, _ = gpusafe_run(tmp_path, "python", str(app))
    (v,) = [v for v in doc["violations"] if v["kind"] == "api-out-of-bounds"]
    assert v["location"]["line"] == line_of(app, "result = driver.cuMemcpyHtoD")
    assert v["allocation"]["tag"] == 1 and v["kernel"] is None


def test_leak_check_reports_live_allocations_at_their_sites(tmp_path: Path) -> None:
    app = write_program(tmp_path, "check(driver.cuMemFree(d_out))\n")
    rc, doc, _ = gpusafe_run(tmp_path, "--leak-check", "python", str(app))
    leaks = [v for v in doc["violations"] if v["kind"] == "leak"]
    assert [v["allocation"]["tag"] for v in leaks] == [1]
    assert leaks[0]["location"]["line"] == line_of(app, "d_in = check")


def test_freed_pointer_passed_to_a_kernel(tmp_path: Path) -> None:
    body = """\
    check(driver.cuMemFree(d_in))
    check(driver.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    """
    app = write_program(tmp_path, body)
    rc, doc, _ = gpusafe_run(tmp_path, "python", str(app))
    # one bug, one entry (issue 12): the kernel's read through the freed argument,
    # which notes the argument; no second entry at the launch
    host = [v for v in doc["violations"] if v["kind"] == "use-after-free" and v["threads"] is None]
    assert host == []
    device = [v for v in doc["violations"] if v["kind"] == "use-after-free" and v["threads"]]
    assert device and device[0]["access"] == "read" and device[0]["kernel"] == "add_one"
    assert device[0]["argument"] == 1  # add_one(out, in, n): `in` was freed
    assert device[0]["allocation"]["freed_at"] == f"app.py:{line_of(app, 'cuMemFree(d_in)')}"
    assert device[0]["stack"][0]["line"] == line_of(app, "cuLaunchKernel(fn, 1, 1, 1, 32")


def test_child_python_processes_are_checked_too(tmp_path: Path) -> None:
    child = write_program(tmp_path, "")
    child.rename(tmp_path / "child.py")
    parent = tmp_path / "parent.py"
    parent.write_text("import subprocess, sys\n"
                      "sys.exit(subprocess.call([sys.executable, 'child.py']))\n")
    rc, doc, out = gpusafe_run(tmp_path, "python", "parent.py")
    assert rc == 86, out
    assert {v["kind"] for v in doc["violations"]} == {"global-out-of-bounds"}


def test_a_program_killed_by_a_signal_still_gets_its_report(tmp_path: Path) -> None:
    app = write_program(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out  # the violations found before the crash
    assert doc["exit_code"] == 128 + 9
    assert len(doc["violations"]) == 2


def test_no_check_runs_the_program_and_says_nothing_was_checked(tmp_path: Path) -> None:
    app = write_program(tmp_path, "")
    rc, doc, out = gpusafe_run(tmp_path, "--no-check", "python", str(app))
    assert rc == 0, out  # the program's own status: the off-by-one went unnoticed
    assert doc["violations"] == [] and doc["summary"]["launches"] == 0
    assert doc["unchecked_kernels"] == [
        {"name": "*", "reason": "checking was turned off with --no-check", "launches": 1,
         "requested": True}]
    assert doc["summary"]["unchecked_launches"] == 1
    assert "checking is off" in out


def test_native_program_that_never_calls_the_driver_is_not_a_pass(tmp_path: Path) -> None:
    """A native program runs with the stand-in driver (tests/test_native_driver.py);
    one that never loads it was not checked, and says so in its exit status."""
    rc, _, out = gpusafe_run(tmp_path, "/bin/true")
    assert rc == 2
    assert "nothing was checked" in out


def test_unknown_command_is_a_tool_error(tmp_path: Path) -> None:
    rc, _, out = gpusafe_run(tmp_path, "no-such-program-here")
    assert rc == 2 and "command not found" in out


def test_device_cuda_without_a_gpu_is_a_tool_error(tmp_path: Path) -> None:
    env = dict(os.environ, NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cuda", "python",
                           "-c", "pass"], env=env, capture_output=True, text=True, cwd=tmp_path)
    if proc.returncode == 0:
        pytest.skip("a GPU is present")
    assert proc.returncode == 2 and "no working CUDA driver" in proc.stderr


def test_kernel_filter_checks_only_matching_kernels(tmp_path: Path) -> None:
    app = write_program(tmp_path, "")
    rc, doc, out = gpusafe_run(tmp_path, "--kernel-filter", "^nothing$", "python", str(app))
    assert rc == 0, out
    assert doc["violations"] == []
    assert doc["unchecked_kernels"] == [
        {"name": "add_one", "reason": "excluded by --kernel-filter '^nothing$'", "launches": 1,
         "requested": True}]
    rc, doc, out = gpusafe_run(tmp_path, "--kernel-filter", "add_", "python", str(app))
    assert rc == 86 and len(doc["violations"]) == 2


def test_bad_kernel_filter_is_a_tool_error(tmp_path: Path) -> None:
    rc, doc, out = gpusafe_run(tmp_path, "--kernel-filter", "(", "python", "-c", "pass")
    assert rc == 2 and "--kernel-filter" in out and doc is None


def test_allocation_table_is_uploaded_again_only_after_a_change(tmp_path: Path) -> None:
    body = """\
    from gpusafe.process.session import current
    launches = current().engine.pipeline
    before = launches.table_uploads
    for _ in range(3):
        check(driver.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0))
    assert launches.table_uploads == before, "re-uploaded an unchanged table"
    extra = check(driver.cuMemAlloc(64))
    check(driver.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0))
    assert launches.table_uploads == before + 1, "missed a registry change"
    check(driver.cuCtxSynchronize())
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert doc["exit_code"] == 0, out


def test_ptx_gpusafe_cannot_instrument_is_a_tool_error_not_a_pass(tmp_path: Path) -> None:
    # an instrumented module cannot be instrumented again: gpusafe refuses it
    body = """\
    from gpusafe_instrument.checks import instrument
    twice = instrument(ptx).ptx
    mod2 = check(driver.cuModuleLoadData(twice.encode()))
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 2, out
    assert "could not instrument a module loaded at app.py:" in out
    assert "already instrumented" in out


def test_module_loaded_from_a_ptx_file_is_checked(tmp_path: Path) -> None:
    body = """\
    open("k.ptx", "w").write(ptx)
    mod2 = check(driver.cuModuleLoad(b"k.ptx"))
    fn2 = check(driver.cuModuleGetFunction(mod2, b"add_one"))
    check(driver.cuLaunchKernel(fn2, n // 128 + 1, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    assert doc["summary"]["launches"] == 2
    assert sum(v["count"] for v in doc["violations"]) == 4  # a read and a write, twice


def test_launch_through_cuLaunchKernelEx_is_checked(tmp_path: Path) -> None:
    body = """\
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = n // 128 + 1, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = 128, 1, 1
    config.sharedMemBytes = 0
    config.numAttrs = 0
    check(driver.cuLaunchKernelEx(config, fn, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    assert doc["summary"]["launches"] == 2 and doc["exit_code"] == 0


GLOBAL_KERNEL = r"""
__device__ float table[64];
extern "C" __global__ void fill(float* t, int n)
{
    int i = threadIdx.x;
    if (i < n) t[i] = 2.0f * i;
}
"""


def test_a_module_global_passed_as_a_pointer_is_valid_memory(tmp_path: Path) -> None:
    body = f"""\
    mod2 = check(driver.cuModuleLoadData(compile_to_ptx({GLOBAL_KERNEL!r}, "g.cu").encode()))
    fill = check(driver.cuModuleGetFunction(mod2, b"fill"))
    d_table, size = check(driver.cuModuleGetGlobal(mod2, b"table"))
    assert size == 256
    for count in (64, 65):
        vals = [np.array([int(d_table)], dtype=np.uint64), np.array([count], dtype=np.int32)]
        p2 = np.array([v.ctypes.data for v in vals], dtype=np.uint64)
        check(driver.cuLaunchKernel(fill, 1, 1, 1, 96, 1, 1, 0, 0, p2.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    assert driver.cuMemFree(d_table)[0] == driver.CUresult.CUDA_ERROR_INVALID_VALUE
    """
    app = write_program(tmp_path, body)
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", str(app))
    fill = [v for v in doc["violations"] if v["kernel"] == "fill"]
    # 64 in-bounds writes report nothing; the 65th is one past the global
    assert [(v["kind"], v["count"], v["allocation"]["offset"]) for v in fill] == [
        ("global-out-of-bounds", 1, 256)], out
    assert fill[0]["allocation"]["size"] == 256
    kinds = sorted(v["kind"] for v in doc["violations"] if v["kernel"] is None)
    # freeing a global is invalid; only the program's own two buffers leak
    assert kinds == ["invalid-free", "leak", "leak"], out
