"""Kernels compiled from Python strings: reported at the ``.py`` file and line
where the string is written, or with the captured text when no file holds
it (issue 12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpusafe.engine.callsite import CallSite
from gpusafe.engine.sources import KernelSources
from gpusafe.report import SourceLocation

ROOT = Path(__file__).resolve().parent.parent

KERNEL = '''KERNEL = r"""
extern "C" __global__ void fill(float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n)
        out[i] = 1.0f;
}
"""
'''
KERNEL_TEXT = KERNEL.split('r"""', 1)[1].rsplit('"""', 1)[0]
STORE_LINE = 6  # of the kernel's text: out[i] = 1.0f;


def _site(path: Path, cwd: Path) -> CallSite:
    return CallSite(((str(path), 30, "compile"),), 0, cwd=str(cwd))


def test_a_literal_written_line_for_line_is_located_in_the_py_file(tmp_path: Path) -> None:
    program = tmp_path / "app.py"
    program.write_text("import os\n\n" + KERNEL)
    sources = KernelSources()
    sources.captured("fill.cu", KERNEL_TEXT, _site(program, tmp_path))
    where, excerpt = sources.locate(SourceLocation(os.path.join(os.getcwd(), "fill.cu"),
                                                   STORE_LINE, 9))
    # the literal opens on line 3; its text's line 6 is the file's line 8
    assert where == SourceLocation("app.py", 3 + STORE_LINE - 1, 9) and excerpt is None
    assert "out[i] = 1.0f;" in program.read_text().splitlines()[where.line - 1]


def test_the_bytes_of_a_literal_are_found_too(tmp_path: Path) -> None:
    program = tmp_path / "app.py"
    program.write_text(KERNEL.replace('KERNEL = r"""', 'KERNEL = rb"""'))
    sources = KernelSources()
    sources.captured("fill.cu", KERNEL_TEXT, _site(program, tmp_path))
    where, _ = sources.locate(SourceLocation("fill.cu", STORE_LINE, 9))
    assert where.file == "app.py" and where.line == STORE_LINE


def test_a_string_no_file_holds_is_quoted_from_what_was_captured(tmp_path: Path) -> None:
    program = tmp_path / "app.py"
    program.write_text(KERNEL)
    built = KERNEL_TEXT.replace("1.0f", "2.0f")  # built at run time: no literal holds it
    sources = KernelSources()
    sources.captured("fill.cu", built, _site(program, tmp_path))
    where, excerpt = sources.locate(SourceLocation("fill.cu", STORE_LINE, 9))
    assert where == SourceLocation("fill.cu", STORE_LINE, 9)
    assert excerpt is not None and (STORE_LINE, "        out[i] = 2.0f;") in excerpt
    assert [n for n, _ in excerpt] == list(range(STORE_LINE - 2, STORE_LINE + 3))


def test_a_literal_with_escaped_newlines_is_not_mapped_line_for_line(tmp_path: Path) -> None:
    program = tmp_path / "app.py"
    program.write_text("K = " + json.dumps(KERNEL_TEXT) + "\n")  # one line, \\n escapes
    sources = KernelSources()
    sources.captured("fill.cu", KERNEL_TEXT, _site(program, tmp_path))
    where, excerpt = sources.locate(SourceLocation("fill.cu", STORE_LINE, 9))
    assert where.file == "fill.cu" and excerpt is not None


def test_a_source_gpusafe_did_not_see_is_left_alone() -> None:
    loc = SourceLocation("kernel.cu", 3, 1)
    assert KernelSources().locate(loc) == (loc, None)


PROGRAM = '''\
"""A kernel in a Python string, compiled through a helper, run past its end."""
import numpy as np
from cuda.bindings import driver, nvrtc

{kernel}

def check(result):
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA error {{err}}")
    return values[0] if len(values) == 1 else values


def compile_ptx(source, name):
    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    opts = [b"--gpu-architecture=compute_75", b"-lineinfo"]
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
    buf = bytearray(check(nvrtc.nvrtcGetPTXSize(prog)))
    check(nvrtc.nvrtcGetPTX(prog, buf))
    return bytes(buf)


def main():
    check(driver.cuInit(0))
    ctx = check(driver.cuCtxCreate(None, 0, check(driver.cuDeviceGet(0))))
    module = check(driver.cuModuleLoadData(compile_ptx({source}, "fill.cu")))
    kernel = check(driver.cuModuleGetFunction(module, b"fill"))
    d_out = check(driver.cuMemAlloc(4 * 256))
    args = [np.array([int(d_out)], dtype=np.uint64), np.array([256], dtype=np.int32)]
    params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    check(driver.cuLaunchKernel(kernel, 2, 1, 1, 256, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    check(driver.cuMemFree(d_out))
    check(driver.cuCtxDestroy(ctx))


main()
'''


def _run(tmp_path: Path, source_expr: str) -> tuple[dict, str]:
    program = tmp_path / "app.py"
    program.write_text(PROGRAM.format(kernel=KERNEL, source=source_expr))
    out = tmp_path / "report.json"
    env = dict(os.environ, NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    r = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu", "--json",
                        str(out), "--", sys.executable, "app.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.is_file(), r.stderr
    return json.loads(out.read_text()), r.stderr


@pytest.mark.slow
def test_a_kernel_in_a_python_string_is_reported_at_its_py_line(tmp_path: Path) -> None:
    report, text = _run(tmp_path, "KERNEL")
    (v,) = report["violations"]
    line = textwrap.dedent(PROGRAM.format(kernel=KERNEL, source="KERNEL")).splitlines().index(
        "        out[i] = 1.0f;") + 1
    assert v["location"] == {"file": "app.py", "line": line, "column": 9}
    assert f"at app.py:{line}:9" in text
    assert f"> {line} |         out[i] = 1.0f;" in text  # the excerpt, from the .py file
    assert "source" not in v


@pytest.mark.slow
def test_a_kernel_built_at_run_time_is_quoted_from_the_captured_text(tmp_path: Path) -> None:
    report, text = _run(tmp_path, 'KERNEL.replace("1.0f", "2.0f")')
    (v,) = report["violations"]
    assert Path(v["location"]["file"]).name == "fill.cu"
    assert [STORE_LINE, "        out[i] = 2.0f;"] in v["source"]
    assert f"> {STORE_LINE} |         out[i] = 2.0f;" in text
