"""The stand-in runtime and driver, third slice (issue 11): a program linked
against CUDA 12's shared runtime (``libcudart.so.12``, symbols versioned
``libcudart.so.12``) is served and checked, and CUDA 12's forms that differ
from CUDA 13's are named; cooperative launches (``grid.sync()``) from nvcc
programs (``cudaLaunchCooperativeKernel``) and driver-API programs
(``cuLaunchCooperativeKernel``, ``cuLaunchKernelEx`` with the cooperative
attribute) run checked on the CPU device."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpusafe_testkit.corpus import driver_header_dir

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "native"


INCLUDE = driver_header_dir()
NVCC = INCLUDE.parent / "bin" / "nvcc" if INCLUDE is not None else None
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("cc") is None or NVCC is None
                                 or not NVCC.is_file(),
                                 reason="needs a C compiler and the pip toolkit's nvcc")]


def _run(argv: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu",
                           "--json", str(report), "--", *argv],
                          capture_output=True, text=True, errors="replace", env=env,
                          timeout=300)
    return done, json.loads(report.read_text()) if report.exists() else {}


def _nvcc(tmp_path: Path, name: str, runtime: str = "libcudart.so.13") -> Path:
    """``name``.cu built with ``-cudart shared`` against the stand-in runtime
    of soname ``runtime`` (a folder whose ``libcudart.so`` is that one, as a
    CUDA 12 toolkit's would be)."""
    from gpusafe.native.build import library_dir

    assert NVCC is not None and INCLUDE is not None
    lib = library_dir()
    link = tmp_path / "link"
    link.mkdir(exist_ok=True)
    (link / "libcudart.so").unlink(missing_ok=True)
    (link / "libcudart.so").symlink_to(lib / runtime)
    exe = tmp_path / name
    subprocess.run([str(NVCC), "-o", str(exe), str(SOURCES / f"{name}.cu"), "-lineinfo", "-g",
                    "-cudart", "shared", "--no-compress", f"-L{link}",
                    "-Xlinker", f"-rpath-link={lib}", f"-L{INCLUDE.parent / 'lib'}"],
                   check=True, capture_output=True)
    return exe


def _needs(exe: Path) -> tuple[list[str], str]:
    dynamic = subprocess.run(["readelf", "-d", "-V", str(exe)], capture_output=True,
                             text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines()
              if "(NEEDED)" in line]
    return needed, dynamic


def test_a_program_linked_against_libcudart_so_12_is_checked(tmp_path: Path) -> None:
    exe = _nvcc(tmp_path, "runtime_oob", "libcudart.so.12")
    needed, dynamic = _needs(exe)
    assert "libcudart.so.12" in needed and "libcudart.so.13" not in needed
    assert "File: libcudart.so.12" in dynamic  # its symbols need version libcudart.so.12
    done, doc = _run([str(exe)], tmp_path)
    assert done.returncode == 86, done.stderr
    assert "sync: cudaSuccess, host[63] = 63" in done.stdout
    oob, double = doc["violations"]
    assert (oob["kind"], oob["access"]) == ("global-out-of-bounds", "write")
    assert (Path(oob["location"]["file"]).name, oob["location"]["line"]) == ("runtime_oob.cu", 6)
    assert double["kind"] == "double-free"


def test_cuda_12_device_properties_are_named_not_misread(tmp_path: Path) -> None:
    """cudaDeviceProp of CUDA 12 is laid out otherwise than CUDA 13's: the
    stand-in libcudart.so.12 names the call (exit 2), never fills the
    program's struct with CUDA 13's layout."""
    exe = _nvcc(tmp_path, "runtime_properties", "libcudart.so.12")
    done, doc = _run([str(exe)], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("operation not supported: 1 device(s)")
    [call] = doc["unimplemented_calls"]
    assert call["name"] == "cudaGetDeviceProperties"
    assert call["site"].endswith("runtime_properties.cu:7")
    assert "CUDA 12's runtime (libcudart.so.12)" in call["reason"]


def test_cuda_12_only_functions_are_exported_and_versioned() -> None:
    from gpusafe.native.build import library_dir

    lib = library_dir()
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libcudart.so.12")],
                         capture_output=True, text=True, check=True).stdout
    for name in ("cudaGetDeviceProperties_v2@@libcudart.so.12", "cudaMalloc@@libcudart.so.12",
                 "cudaLaunchKernel@@libcudart.so.12", "cudaThreadSynchronize@@libcudart.so.12"):
        assert name in out
    out13 = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libcudart.so.13")],
                           capture_output=True, text=True, check=True).stdout
    assert "cudaMalloc@@libcudart.so.13" in out13
    assert "cudaThreadSynchronize" not in out13  # CUDA 13 has no such function


def test_grid_sync_in_an_nvcc_program_runs_checked(tmp_path: Path) -> None:
    """cudaLaunchCooperativeKernel: grid.sync() holds (the sum is right) and
    the read one past the partial sums is found at its line."""
    done, doc = _run([str(_nvcc(tmp_path, "runtime_grid_sync"))], tmp_path)
    assert done.returncode == 86, done.stderr
    assert "cooperative: cudaSuccess, sum 499500" in done.stdout
    [v] = doc["violations"]
    assert (v["kind"], v["access"]) == ("global-out-of-bounds", "read")
    assert (Path(v["location"]["file"]).name, v["location"]["line"]) == (
        "runtime_grid_sync.cu", 19)
    assert (v["allocation"]["size"], v["threads"]) == (
        16, [{"block": [0, 0, 0], "thread": [0, 0, 0]}])
    assert doc["checked_kernels"] == [{"name": "_Z8grid_sumPKiPiS1_i", "launches": 1}]
    assert not doc.get("unimplemented_calls")


def test_cooperative_driver_launches_run_checked(tmp_path: Path) -> None:
    from gpusafe.native.build import library_dir
    from gpusafe_testkit.corpus import nvrtc_compile

    assert INCLUDE is not None
    lib = library_dir()
    cu = SOURCES / "grid_sum.cu"
    ptx = tmp_path / "grid_sum.ptx"
    ptx.write_text(nvrtc_compile(cu.read_text(), str(cu), options=["-lineinfo"]))
    exe = tmp_path / "cooperative"
    subprocess.run(["cc", "-g", "-Wall", "-Werror", "-o", str(exe), str(SOURCES / "cooperative.c"),
                    f"-I{INCLUDE}", f"-L{lib}", "-lcuda"], check=True)
    done, doc = _run([str(exe), str(ptx)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cooperative sums 499500 499500" in done.stdout
    assert doc["violations"] == []
    assert doc["checked_kernels"] == [{"name": "grid_sum", "launches": 2}]
