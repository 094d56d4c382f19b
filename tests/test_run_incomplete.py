"""``gpusafe run`` never passes a run it could not check (issue 10): a call the
CPU device does not implement, a kernel that ran unchecked and a run that
launched nothing each give their report entry and exit status.  Subprocess
tests (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_run_cli import PROLOGUE, ROOT, gpusafe_run, line_of

pytestmark = pytest.mark.slow

BRACES = r"""
extern "C" __global__ void braces(int* out, const int* in)
{
    int v;
    asm volatile("{ .reg .u64 a; add.u64 a, %1, 4; ld.global.u32 %0, [a]; }" : "=r"(v) : "l"(in));
    out[threadIdx.x] = v;
}
"""

LAUNCH_BRACES = """\
ptx = compile_to_ptx({kernel!r}, "braces.cu")
mod = check(driver.cuModuleLoadData(ptx.encode()))
fn = check(driver.cuModuleGetFunction(mod, b"braces"))
host_in = np.arange(4, dtype=np.int32)
d_in = check(driver.cuMemAlloc(16))
d_out = check(driver.cuMemAlloc(128))
check(driver.cuMemcpyHtoD(d_in, host_in, 16))
values = [np.array([int(d_out)], dtype=np.uint64), np.array([int(d_in)], dtype=np.uint64)]
params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
check(driver.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0))
host_out = np.zeros(32, dtype=np.int32)
check(driver.cuMemcpyDtoH(host_out, d_out, 128))
assert (host_out == 1).all(), host_out
check(driver.cuMemFree(d_in))
check(driver.cuMemFree(d_out))
"""


def program(tmp_path: Path, body: str) -> Path:
    text = PROLOGUE.format(samples=str(ROOT / "samples"),
                           import_line="from cuda.bindings import driver, runtime")
    path = tmp_path / "app.py"
    path.write_text(text + body)
    return path


UNIMPLEMENTED = """\
try:
    runtime.cudaGraphicsMapResources(1, None, 0)
except RuntimeError as e:  # the program handles it and exits 0
    print("handled:", e)
"""


def test_an_unimplemented_call_is_reported_at_its_site_and_exits_2(tmp_path: Path) -> None:
    app = program(tmp_path, UNIMPLEMENTED)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 2, out
    assert doc["exit_code"] == 0  # the program's own status is kept in the report
    assert doc["unimplemented_calls"] == [{
        "name": "cudaGraphicsMapResources", "site": f"app.py:{line_of(app, 'cudaGraphicsMapResources')}",
        "reason": "not implemented by gpusafe's CPU device", "count": 1}]
    assert doc["summary"]["unimplemented_calls"] == 1
    assert "handled: cudaGraphicsMapResources is not implemented by gpusafe's CPU device" in out
    assert f"not implemented: cudaGraphicsMapResources at app.py:{line_of(app, 'cudaGraphicsMapResources')}" in out
    assert "could not serve (first: cudaGraphicsMapResources" in out


@pytest.mark.parametrize("flag", ["--allow-unchecked", "--no-check"])
def test_neither_allow_unchecked_nor_no_check_accepts_an_unimplemented_call(
        tmp_path: Path, flag: str) -> None:
    rc, doc, out = gpusafe_run(tmp_path, flag, "python", str(program(tmp_path, UNIMPLEMENTED)))
    assert rc == 2, out
    assert [c["name"] for c in doc["unimplemented_calls"]] == ["cudaGraphicsMapResources"]


def test_a_feature_the_device_lacks_is_reported_with_its_reason(tmp_path: Path) -> None:
    """A cubin: the program gets CUDA_ERROR_NOT_SUPPORTED, as a driver that
    cannot load it would answer, and the report says why."""
    app = program(tmp_path, "err, _ = driver.cuModuleLoadData(b'\\x7fELF' + bytes(60))\n"
                            "print('load:', err.name)\n")
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 2, out
    assert "load: CUDA_ERROR_NOT_SUPPORTED" in out
    (call,) = doc["unimplemented_calls"]
    assert call["name"] == "cuModuleLoadData"
    assert call["site"] == f"app.py:{line_of(app, 'cuModuleLoadData')}"
    assert call["reason"].startswith("the module image is an ELF cubin")


def test_an_unchecked_kernel_exits_2_unless_allowed(tmp_path: Path) -> None:
    app = program(tmp_path, LAUNCH_BRACES.format(kernel=BRACES))
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 2, out
    (k,) = doc["unchecked_kernels"]
    assert (k["name"], k["launches"]) == ("braces", 1) and "requested" not in k
    assert "inline" in k["reason"] or "braces" in k["reason"], k["reason"]
    assert (doc["summary"]["launches"], doc["summary"]["unchecked_launches"]) == (0, 1)
    assert "1 kernel ran unchecked (braces): exit 2 (--allow-unchecked accepts this)" in out
    rc, doc, out = gpusafe_run(tmp_path, "--allow-unchecked", "python", str(app))
    assert rc == 0, out  # the program's own status
    assert doc["unchecked_kernels"][0]["name"] == "braces"
    assert "--allow-unchecked accepts this" not in out


def test_a_run_that_launches_nothing_warns_and_keeps_the_programs_status(
        tmp_path: Path) -> None:
    app = program(tmp_path, "p = check(driver.cuMemAlloc(64))\ncheck(driver.cuMemFree(p))\n"
                            "sys.exit(5)\n")
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 5, out
    s = doc["summary"]
    assert (s["kernels_checked"], s["launches"], s["unchecked_launches"]) == (0, 0, 0)
    assert "warning: no kernel launch was checked (0 checked launches)" in out
    assert "gpusafe: no violations found in what was checked, but the run was not checked " \
           "whole" in out
