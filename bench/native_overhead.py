"""The cost of checking a native program on the CPU device: the same C
driver-API program (bench/native_bench.c) under ``gpusafe run --device cpu``
with checking (the engine behind every call) and with ``--no-check`` (the
stand-in driver straight to the CPU device), per call kind, and the ratio.

    python bench/native_overhead.py [--calls N] [--allocs N] [--launches N]

Both runs go through the stand-in ``libcuda.so.1`` and the interpreter it
starts in the program's process, so the difference is what checking adds;
the "plain" column is itself the price of a C -> Python crossing plus the
CPU device.  The kernel writes one int per thread (32 threads), so a launch
measures the launch path (instrumentation cached after the first, table
upload, record read-back), not the kernel.  The last columns run the same
calls from a cuda-python program through the Python door (checked): the
native door's own cost is their ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gpusafe.native.build import library_dir
from gpusafe_testkit.corpus import nvrtc_compile

HERE = Path(__file__).resolve().parent
PYTHON_MIRROR = """\
import sys, time
import numpy as np
from cuda.bindings import driver as D
calls, allocs, launches = (int(x) for x in sys.argv[2:5])
D.cuInit(0)
err, dev = D.cuDeviceGet(0)
err, ctx = D.cuCtxCreate(None, 0, dev)
err, mod = D.cuModuleLoadData(open(sys.argv[1], "rb").read() + b"\\0")
err, fn = D.cuModuleGetFunction(mod, b"touch")
t0 = time.perf_counter()
for _ in range(calls):
    D.cuDeviceGet(0)
t1 = time.perf_counter()
for _ in range(allocs):
    err, buf = D.cuMemAlloc(4096)
    D.cuMemFree(buf)
t2 = time.perf_counter()
err, buf = D.cuMemAlloc(128)
value = np.array([int(buf)], dtype=np.uint64)
params = np.array([value.ctypes.data], dtype=np.uint64)
for _ in range(launches):
    assert D.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0)[0] == 0
    D.cuCtxSynchronize()
t3 = time.perf_counter()
print((t1 - t0) / calls * 1e6, (t2 - t1) / allocs * 1e6, (t3 - t2) / launches * 1e6)
"""
"""The same calls from a cuda-python program, through the Python door."""

KERNEL = 'extern "C" __global__ void touch(int *p) { p[threadIdx.x] = threadIdx.x; }'


def _include() -> Path:
    for entry in sys.path:
        candidate = Path(entry) / "nvidia" / "cu13" / "include"
        if (candidate / "cuda.h").is_file():
            return candidate
    raise SystemExit("needs the pip toolkit's cuda.h (nvidia-cuda-runtime)")


def _measure(program: list[str], ptx: Path, counts: list[str], check: bool) -> list[float]:
    argv = [sys.executable, "-m", "gpusafe", "run", "--device", "cpu"]
    if not check:
        argv.append("--no-check")
    done = subprocess.run([*argv, "--", *program, str(ptx), *counts],
                          capture_output=True, text=True, env=dict(os.environ))
    if done.returncode != 0:
        raise SystemExit(f"the benchmark program failed:\n{done.stderr}")
    return [float(x) for x in done.stdout.split()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--allocs", type=int, default=2000)
    p.add_argument("--launches", type=int, default=200)
    args = p.parse_args()
    lib = library_dir()
    with tempfile.TemporaryDirectory() as tmp:
        exe, ptx = Path(tmp) / "native_bench", Path(tmp) / "touch.ptx"
        ptx.write_text(nvrtc_compile(KERNEL, "touch.cu"))
        subprocess.run(["cc", "-O2", "-o", str(exe), str(HERE / "native_bench.c"),
                        f"-I{_include()}", f"-L{lib}", "-lcuda"], check=True)
        counts = [str(args.calls), str(args.allocs), str(args.launches)]
        mirror = Path(tmp) / "mirror.py"
        mirror.write_text(PYTHON_MIRROR)
        plain = _measure([str(exe)], ptx, counts, check=False)
        checked = _measure([str(exe)], ptx, counts, check=True)
        python = _measure([sys.executable, str(mirror)], ptx, counts, check=True)
    print(f"{'per call (us)':<26}{'plain':>9}{'checked':>9}{'ratio':>7}"
          f"{'python door':>13}{'native/python':>15}")
    for name, a, b, c in zip(("cuDeviceGet", "cuMemAlloc + cuMemFree",
                              "cuLaunchKernel + sync"), plain, checked, python, strict=True):
        print(f"{name:<26}{a:>9.1f}{b:>9.1f}{b / a:>7.2f}{c:>13.1f}{b / c:>15.2f}")


if __name__ == "__main__":
    main()
