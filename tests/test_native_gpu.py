"""Native programs on a GPU (``--device cuda``, issue 11, third slice),
proven without one: a simulated GPU (``gpusafe.native.simulated``, the
stand-in's stubs served by a plain CPU device, not gpusafe's checked driver)
is named as the real driver by ``GPUSAFE_REAL_LIBCUDA``.  gpusafe's own
cuda.bindings runs the cuda backend on it; the program's driver calls reach
the checked driver through the preload door (and ``-lcuda``), the engine
instruments the kernels and reads the records back from the "GPU"."""

from __future__ import annotations

import importlib.util
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
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("cc") is None or INCLUDE is None,
                                 reason="needs a C compiler and the pip toolkit's cuda.h")]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from gpusafe.native.build import library_dir, simulated_driver
    from gpusafe_testkit.corpus import nvrtc_compile

    lib = library_dir()
    out = tmp_path_factory.mktemp("gpu")
    for kernel in ("saxpy", "fill"):
        cu = SOURCES / f"{kernel}.cu"
        (out / f"{kernel}.ptx").write_text(nvrtc_compile(cu.read_text(), str(cu),
                                                         options=["-lineinfo"]))
    found = {"dir": out, "simulated": simulated_driver()}
    for name in ("saxpy", "oob", "double_free", "proc_address"):
        link = ["-ldl"] if name == "proc_address" else [f"-L{lib}", "-lcuda"]
        subprocess.run(["cc", "-g", "-Wall", "-Werror", "-o", str(out / name),
                        str(SOURCES / f"{name}.c"), f"-I{INCLUDE}", *link], check=True)
        found[name] = out / name
    return found


def _run(argv: list[str], built: dict[str, Path], tmp_path: Path,
         **extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    env = dict(os.environ, GPUSAFE_REAL_LIBCUDA=str(built["simulated"]), **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cuda",
                           "--json", str(report), "--", *argv],
                          capture_output=True, text=True, errors="replace", env=env,
                          timeout=300)
    return done, json.loads(report.read_text()) if report.exists() else {}


def test_a_correct_driver_program_passes_on_the_gpu(built: dict[str, Path],
                                                    tmp_path: Path) -> None:
    done, doc = _run([str(built["saxpy"]), str(built["dir"] / "saxpy.ptx")], built, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "saxpy ok" in done.stdout
    assert "(--device cuda)" in done.stderr
    assert doc["violations"] == [] and not doc.get("unimplemented_calls")
    assert doc["checked_kernels"] == [{"name": "saxpy", "launches": 1}]


def test_a_kernel_out_of_bounds_write_is_found_at_its_line_on_the_gpu(
        built: dict[str, Path], tmp_path: Path) -> None:
    done, doc = _run([str(built["oob"]), str(built["dir"] / "fill.ptx")], built, tmp_path)
    assert done.returncode == 86, done.stdout + done.stderr
    [v] = doc["violations"]
    assert (v["kind"], v["access"], v["kernel"]) == ("global-out-of-bounds", "write", "fill")
    assert (v["location"]["file"], v["location"]["line"]) == (str(SOURCES / "fill.cu"), 4)
    assert (v["allocation"]["size"], v["allocation"]["offset"]) == (1024, 1024)
    assert v["threads"] == [{"block": [1, 0, 0], "thread": [0, 0, 0]}]
    assert v["allocation"]["allocated_at"].endswith("oob.c:16")


def test_frees_are_judged_on_the_gpu(built: dict[str, Path], tmp_path: Path) -> None:
    done, doc = _run([str(built["double_free"]), str(built["dir"] / "fill.ptx")], built,
                     tmp_path)
    assert done.returncode == 86, done.stdout + done.stderr
    assert [v["kind"] for v in doc["violations"]] == ["use-after-free", "double-free"]


def test_the_preload_door_routes_dlopen_and_cuGetProcAddress_on_the_gpu(
        built: dict[str, Path], tmp_path: Path) -> None:
    """The program opens the driver by a path that exists nowhere and
    resolves every function through cuGetProcAddress_v2: the checked ones
    reach gpusafe, the driver's handle is the real (simulated) one, and
    gpusafe's own cuda.bindings gets the real driver."""
    done, doc = _run([str(built["proc_address"]), "/nonexistent/libcuda.so.1"], built,
                     tmp_path, GPUSAFE_PRELOAD_TRACE="1")
    assert "resolved through cuGetProcAddress; overlong copy: 1" in done.stdout, done.stderr
    trace = done.stderr
    assert "dlopen(/nonexistent/libcuda.so.1) -> real driver, checked entry points" in trace
    assert "dlopen(libcuda.so.1) -> real driver (gpusafe's own door)" in trace
    assert "cuGetProcAddress(cuMemcpyDtoH) -> checked" in trace
    assert done.returncode == 86
    [v] = doc["violations"]
    assert (v["kind"], v["allocation"]["size"]) == ("api-out-of-bounds", 64)


needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba_cuda") is None,
                                 reason="needs numba-cuda")


@needs_numba
def test_numba_kernel_out_of_bounds_found_at_its_line_on_the_gpu(built: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """numba-cuda loads and launches its kernels from C (cuda.core over
    cuda.bindings' C layer): on a GPU that layer loads the stand-in, which
    checks the program's calls and forwards gpusafe's own to the real driver."""
    done, doc = _run([sys.executable, str(SOURCES / "numba_oob.py")], built, tmp_path)
    assert done.returncode == 86, done.stdout + done.stderr
    assert "first: [1.0, 2.0, 3.0]" in done.stdout
    found = sorted((v["kind"], v["access"], v["location"]["line"], v["allocation"]["size"])
                   for v in doc["violations"])
    assert found == [("global-out-of-bounds", "read", 12, 400),
                     ("global-out-of-bounds", "write", 12, 400)]
    assert all(v["location"]["file"].endswith("numba_oob.py") for v in doc["violations"])
    assert [k["launches"] for k in doc["checked_kernels"]] == [1]


@needs_numba
def test_numba_shared_memory_and_atomics_pass_on_the_gpu(built: dict[str, Path],
                                                         tmp_path: Path) -> None:
    done, doc = _run([sys.executable, str(SOURCES / "numba_histogram.py")], built, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert doc["violations"] == [] and not doc.get("unimplemented_calls")
    assert doc["checked_kernels"] and not doc.get("unchecked_kernels")


def test_a_cuda_python_program_keeps_the_python_door_on_the_gpu(built: dict[str, Path],
                                                                tmp_path: Path) -> None:
    """A cuda-python program's calls are checked once, by the Python door:
    its backend's calls pass the stand-in to the real driver."""
    done, doc = _run([sys.executable, str(ROOT / "samples" / "double_free.py")], built,
                     tmp_path)
    assert done.returncode == 86, done.stdout + done.stderr
    assert [v["kind"] for v in doc["violations"]] == ["double-free"]
    assert not doc.get("unimplemented_calls")


def _nvcc() -> Path | None:
    nvcc = INCLUDE.parent / "bin" / "nvcc" if INCLUDE is not None else None
    return nvcc if nvcc is not None and nvcc.is_file() else None


def _nvcc_build(tmp_path: Path, name: str) -> Path:
    from gpusafe.native.build import library_dir

    nvcc = _nvcc()
    assert nvcc is not None and INCLUDE is not None
    exe = tmp_path / name
    subprocess.run([str(nvcc), "-o", str(exe), str(SOURCES / f"{name}.cu"), "-lineinfo", "-g",
                    "-cudart", "shared", "--no-compress", f"-L{library_dir()}",
                    f"-L{INCLUDE.parent / 'lib'}"], check=True, capture_output=True)
    return exe


@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc")
def test_a_shared_runtime_program_is_checked_on_the_gpu(built: dict[str, Path],
                                                        tmp_path: Path) -> None:
    """``nvcc -cudart shared``: the stand-in runtime serves it over the driver
    door on a GPU (context, allocation, copies, the kernel's PTX loaded and
    launched checked), never through NVIDIA's runtime."""
    done, doc = _run([str(_nvcc_build(tmp_path, "runtime_oob"))], built, tmp_path)
    assert done.returncode == 86, done.stdout + done.stderr
    assert "sync: cudaSuccess, host[63] = 63" in done.stdout
    oob, double = doc["violations"]
    assert (oob["kind"], oob["access"], oob["kernel"]) == (
        "global-out-of-bounds", "write", "_Z4fillPii")
    assert (oob["location"]["file"], oob["location"]["line"]) == (
        str(SOURCES / "runtime_oob.cu"), 6)
    assert oob["allocation"]["allocated_at"].endswith("runtime_oob.cu:11")
    assert double["kind"] == "double-free"
    assert not doc.get("unimplemented_calls")


@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc")
def test_streams_events_and_device_variables_on_the_gpu(built: dict[str, Path],
                                                        tmp_path: Path) -> None:
    done, doc = _run([str(_nvcc_build(tmp_path, "runtime_events"))], built, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "events: no error 1 1" in done.stdout
    assert doc["violations"] == [] and not doc.get("unimplemented_calls")
    done, doc = _run([str(_nvcc_build(tmp_path, "runtime_symbols"))], built, tmp_path)
    assert "symbols: 64 10 252 over=1" in done.stdout, done.stderr
    assert done.returncode == 86
    [v] = doc["violations"]
    assert v["kind"] == "api-out-of-bounds"
    assert (v["allocation"]["size"], v["allocation"]["offset"]) == (16, 4)


@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc")
@pytest.mark.parametrize("name, line", [
    ("runtime_properties", "no error: 1 device(s), "),
    ("runtime_reset", "reset: cudaSuccess cudaSuccess host[63] = 63"),
])
def test_properties_and_reset_run_on_the_gpu_as_on_the_cpu_device(
        built: dict[str, Path], tmp_path: Path, name: str, line: str) -> None:
    """cudaGetDeviceProperties is built from the driver's answers and
    cudaDeviceReset resets the primary context through the door (NVIDIA's
    runtime is not used on a GPU): the program prints what it prints on the
    CPU device, whose driver the simulated GPU is."""
    exe = _nvcc_build(tmp_path, name)
    done, doc = _run([str(exe)], built, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert doc["violations"] == [] and not doc.get("unimplemented_calls")
    on_cpu = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu", "--",
                             str(exe)], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert on_cpu.returncode == 0, on_cpu.stdout + on_cpu.stderr
    assert done.stdout.startswith(line)
    assert done.stdout.splitlines()[0] == on_cpu.stdout.splitlines()[0]


def test_every_runtime_call_has_its_gpu_form() -> None:
    """A call the stand-in runtime serves on the CPU device either runs the
    same code on a GPU or has a driver-door form there: never NVIDIA's
    runtime behind the engine's back."""
    from gpusafe.native import runtime_calls, runtime_on_driver

    missing = set(runtime_calls.CALLS) - set(runtime_calls.SAME_ON_A_GPU) \
        - set(runtime_on_driver.CALLS)
    assert missing == set()
