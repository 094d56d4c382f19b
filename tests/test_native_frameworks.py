"""Python frameworks that load the CUDA driver themselves, run under
``gpusafe run --device cpu`` (issue 11): numba-cuda (atomics out of bounds;
its other programs are in test_native_driver.py) and CuPy (elementwise,
reduction and RawKernel kernels checked, its memory pool bypassed, its CUDA
libraries named).  Every test that runs a whole program is slow."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpusafe.native.capsules import Signature, parse, source

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "native"

needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba_cuda") is None,
                                 reason="needs numba-cuda")
needs_cupy = pytest.mark.skipif(importlib.util.find_spec("cupy") is None,
                                reason="needs CuPy (pip install cupy-cuda13x)")


def _run(program: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["CUPY_CACHE_DIR"] = str(tmp_path / "cupy-cache")
    done = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu",
                           "--json", str(report), "--", sys.executable, str(SOURCES / program)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    doc = json.loads(report.read_text()) if report.exists() else {}
    return done, doc


def _source_line(v: dict) -> str:
    lines = Path(v["location"]["file"]).read_text().splitlines()
    return lines[v["location"]["line"] - 1].strip()


def test_capsule_signatures_parse_as_cython_writes_them() -> None:
    assert parse("intptr_t (size_t, int __pyx_skip_dispatch)") == Signature(
        "intptr_t", ("size_t", "int __pyx_skip_dispatch"))
    assert parse("struct __pyx_obj_x_PointerAttributes *(intptr_t, int __pyx_skip_dispatch)"
                 ).result == "PyObject *"
    assert parse("int") is None  # a constant
    assert parse("cudaExtent (size_t, size_t, size_t)") is None  # a struct by value
    text = source([(parse("int (int __pyx_skip_dispatch)"), -1)])
    assert "int gs_t0(int a0)" in text and "int v = (int)-1;" in text


def test_kept_source_replaces_the_temporary_file_in_ptx(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpusafe.native.cupy_runtime import keep_source

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ptx = b'.file 1 "/tmp/tmpab12/k1.cubin.cu"\n.file 2 "/usr/include/x.h"\n'
    out = keep_source(ptx, "int a;\n", "k1.cubin.cu")
    kept = Path(out.split(b'"')[1].decode())
    assert kept.parent.parent == tmp_path / "gpusafe" / "native"
    assert kept.read_text() == "int a;\n"
    assert out.endswith(b'.file 2 "/usr/include/x.h"\n')


@pytest.mark.slow
@needs_numba
def test_numba_atomic_out_of_bounds_found_at_its_line(tmp_path: Path) -> None:
    done, doc = _run("numba_atomic_oob.py", tmp_path)
    assert done.returncode == 86, done.stderr
    assert "bins: [2, 2," in done.stdout
    [v] = doc["violations"]
    assert (v["kind"], v["access"], v["size"], v["count"]) == (
        "global-out-of-bounds", "atomic", 4, 2)
    assert v["location"]["file"].endswith("numba_atomic_oob.py")
    assert v["location"]["line"] == 14
    assert (v["allocation"]["size"], v["allocation"]["offset"]) == (64, 64)
    assert {tuple(t["thread"]) for t in v["threads"]} == {(16, 0, 0), (33, 0, 0)}


@pytest.mark.slow
@needs_cupy
def test_cupy_program_passes_with_its_kernels_checked(tmp_path: Path) -> None:
    done, doc = _run("cupy_ok.py", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cupy ok" in done.stdout
    # nothing printed at exit (CuPy's kernel modules freed while Python shuts down)
    assert "Traceback" not in done.stderr and "excepthook" not in done.stderr, done.stderr
    assert doc["violations"] == []
    assert doc.get("unimplemented_calls", []) == []
    names = {k["name"] for k in doc["checked_kernels"]}
    assert {"cupy_arange__float_float_float32", "cupy_sqrt__float32_float32", "cupy_sum",
            "scale"} <= names


@pytest.mark.slow
@needs_cupy
def test_cupy_raw_kernel_out_of_bounds_found_at_its_line(tmp_path: Path) -> None:
    """The line is the kernel source's own (CuPy compiles it with -lineinfo
    under gpusafe), and the allocation the array's exact 400 bytes: CuPy's
    pool, which would round it to 512 and hide the overrun, is bypassed."""
    done, doc = _run("cupy_rawkernel_oob.py", tmp_path)
    assert done.returncode == 86, done.stderr
    assert "first: [0.0, 2.0, 4.0]" in done.stdout
    [v] = doc["violations"]
    assert (v["kind"], v["access"], v["size"], v["kernel"]) == (
        "global-out-of-bounds", "write", 4, "fill")
    assert v["location"]["line"] == 5  # `out[i] = 2.0f * i;` in SOURCE
    assert _source_line(v) == "out[i] = 2.0f * i;"  # a lasting copy of SOURCE
    assert (v["allocation"]["size"], v["allocation"]["offset"]) == (400, 400)
    assert v["threads"] == [{"block": [0, 0, 0], "thread": [100, 0, 0]}]


@pytest.mark.slow
@needs_cupy
def test_cupy_elementwise_kernel_out_of_bounds_found_at_its_operation(tmp_path: Path) -> None:
    """The line is in the source CuPy generates around the operation; the
    report shows the operation's own text there."""
    done, doc = _run("cupy_elementwise_oob.py", tmp_path)
    assert done.returncode == 86, done.stderr
    [v] = doc["violations"]
    assert (v["kind"], v["access"], v["size"], v["kernel"]) == (
        "global-out-of-bounds", "read", 4, "shift_left")
    assert _source_line(v) == "y = x[i + 1];"
    assert (v["allocation"]["size"], v["allocation"]["offset"]) == (400, 400)
    assert v["allocation"]["allocated_at"] == "tests/native/cupy_elementwise_oob.py:7"
    assert v["threads"] == [{"block": [0, 0, 0], "thread": [99, 0, 0]}]


@pytest.mark.slow
@needs_cupy
def test_cupy_library_calls_are_named_never_passed(tmp_path: Path) -> None:
    done, doc = _run("cupy_libraries.py", tmp_path)
    for name in ("matmul", "sort", "rand"):
        assert f"{name} failed: NotImplementedError" in done.stdout, done.stderr
    assert done.returncode == 2
    calls = {c["name"].split(".")[0]: c for c in doc["unimplemented_calls"]}
    assert set(calls) == {"cuBLAS: cupy_backends", "Thrust: cupy", "cuRAND: cupy_backends"}
    # the program's line that called into CuPy: `work()`
    assert {c["site"] for c in calls.values()} == {"tests/native/cupy_libraries.py:11"}


@pytest.mark.slow
@needs_cupy
def test_cupy_generator_api_is_named_as_curand(tmp_path: Path) -> None:
    """``default_rng`` reaches the driver from CuPy's own extension module
    (NVIDIA's runtime linked in, cuRAND's kernels): named as cuRAND at the
    program's line, with no advice to rebuild with ``-cudart shared``, which a
    CuPy user cannot follow."""
    done, doc = _run("cupy_default_rng.py", tmp_path)
    assert done.returncode == 2, done.stderr
    [call] = doc["unimplemented_calls"]
    assert call["name"] == "cuRAND: cupy.random._generator_api"
    assert call["site"] == "tests/native/cupy_default_rng.py:6"
    assert call["reason"].startswith("cuRAND is a CUDA library, which gpusafe's CPU device "
                                     "does not run")
    assert "-cudart" not in done.stderr


def test_extension_modules_are_named_by_their_package_path() -> None:
    from gpusafe.native.calls import _extension_module

    site = "/venv/lib/python3.11/site-packages"
    assert _extension_module(f"{site}/cupy/random/_generator_api.cpython-311-x86_64-linux-gnu"
                             ".so") == "cupy/random/_generator_api"
    assert _extension_module("/opt/app/fast.abi3.so") == "fast"
    assert _extension_module("/opt/app/libkernels.so") is None  # a program's own library
