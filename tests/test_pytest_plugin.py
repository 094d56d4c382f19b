"""``pytest --gpusafe``: a small suite with one buggy test, run under the
plugin on the CPU device, fails exactly that test, with the report (issue 12).

The plugin is loaded with ``-p gpusafe.pytest_plugin``, so these tests do not
depend on the package's ``pytest11`` entry point being installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # each test runs a pytest session in a subprocess

CONFTEST = '''\
import numpy as np
import pytest
from cuda.bindings import driver, nvrtc

KERNEL = r"""
extern "C" __global__ void fill(float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = 1.0f;
}
"""


def check(result):
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA error {err}")
    return values[0] if len(values) == 1 else values


def alloc(nbytes):
    return check(driver.cuMemAlloc(nbytes))


@pytest.fixture(scope="session")
def fill():
    check(driver.cuInit(0))
    ctx = check(driver.cuCtxCreate(None, 0, check(driver.cuDeviceGet(0))))
    prog = check(nvrtc.nvrtcCreateProgram(KERNEL.encode(), b"fill.cu", 0, [], []))
    opts = [b"--gpu-architecture=compute_75", b"-lineinfo"]
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
    ptx = bytearray(check(nvrtc.nvrtcGetPTXSize(prog)))
    check(nvrtc.nvrtcGetPTX(prog, ptx))
    module = check(driver.cuModuleLoadData(bytes(ptx)))
    yield check(driver.cuModuleGetFunction(module, b"fill"))
    check(driver.cuCtxDestroy(ctx))


def launch(kernel, pointer, n, threads):
    args = [np.array([int(pointer)], dtype=np.uint64), np.array([n], dtype=np.int32)]
    params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    check(driver.cuLaunchKernel(kernel, 1, 1, 1, threads, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
'''

TESTS = '''\
from conftest import alloc, check, driver, launch


def test_fills_its_buffer(fill):
    d = alloc(4 * 64)
    launch(fill, d, 64, 64)
    check(driver.cuMemFree(d))


def test_says_it_has_more_room_than_it_has(fill):
    d = alloc(4 * 32)
    launch(fill, d, 64, 64)  # BUG: 32 floats, told 64
    check(driver.cuMemFree(d))


def test_without_cuda():
    assert sum(range(4)) == 6
'''


def _suite(tmp_path: Path, extra: list[str] = ()) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(TESTS)
    env = dict(os.environ, NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("GPUSAFE_SESSION", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "gpusafe.pytest_plugin",
                        "-p", "no:cacheprovider", "--gpusafe", "--gpusafe-device", "cpu",
                        "--junitxml", "pytest.xml", *extra, "test_suite.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return r, tmp_path


def _outcomes(junit: Path) -> dict[str, str]:
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        out[case.get("name")] = "failed" if failed else "passed"
    return out


def test_the_buggy_test_and_only_it_fails_with_the_report(tmp_path: Path) -> None:
    r, d = _suite(tmp_path, ["--gpusafe-sarif", "gpusafe.sarif", "--gpusafe-junit",
                             "gpusafe.xml", "--gpusafe-json", "gpusafe.json"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert _outcomes(d / "pytest.xml") == {
        "test_fills_its_buffer": "passed",
        "test_says_it_has_more_room_than_it_has": "failed",
        "test_without_cuda": "passed",
    }
    out = r.stdout
    assert "1 failed, 2 passed" in out
    # the failure is gpusafe's report: the kernel line from the Python string,
    # the launch's stack through the conftest helper, the picture
    assert "ERROR global-out-of-bounds" in out
    assert "at conftest.py:10:9" in out and "out[i] = 1.0f;" in out
    assert "launched here:" in out and "test_says_it_has_more_room_than_it_has" in out
    assert "^ +128: 0 B past the end" in out
    # the session's reports
    sarif = json.loads((d / "gpusafe.sarif").read_text())
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "global-out-of-bounds"
    uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "conftest.py"
    assert ET.parse(d / "gpusafe.xml").getroot() is not None
    report = json.loads((d / "gpusafe.json").read_text())
    assert report["summary"]["launches"] == 2


def test_a_suppressed_violation_fails_no_test(tmp_path: Path) -> None:
    (tmp_path / "known.supp").write_text("kind:global-out-of-bounds kernel:fill\n")
    r, d = _suite(tmp_path, ["--gpusafe-suppressions", "known.supp"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(_outcomes(d / "pytest.xml").values()) == {"passed"}
    assert "1 suppressed" in r.stdout


def test_a_suppressions_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    r, _ = _suite(tmp_path, ["--gpusafe-suppressions", "missing.supp"])
    assert r.returncode == pytest.ExitCode.USAGE_ERROR, r.stdout + r.stderr
    assert "cannot read suppressions file missing.supp" in r.stderr
