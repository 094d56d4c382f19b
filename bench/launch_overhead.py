"""Per-launch cost under ``gpusafe run --device cpu`` as launches accumulate,
checking on against checking off (``--no-check``), measured in one run.

    python bench/launch_overhead.py                  # 10,000 launches
    python bench/launch_overhead.py --launches 2000  # a quicker look

The same small cuda-python program (this file, started with ``--program``)
runs twice as a child of ``gpusafe run``: once checked, once with
``--no-check``.  It launches a one-block kernel again and again on a stream
and times each launch with its synchronisation; the parent prints the
median cost of the first 100 launches and of the last 100 of each run,
their ratio (a cost that grows with the number of launches made shows up
here: it must stay within 1.5x), and the checked vs unchecked ratio of the
whole loop.  Medians, so that a stray pause of the shared machine is not
counted as growth; the first launch (which decodes the kernel) is counted
in the mean, printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 100
GROWTH_LIMIT = 1.5

KERNEL = r"""
extern "C" __global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + 1.0f;
}
"""


def program(launches: int) -> int:
    """The checked program: launches ``scale`` ``launches`` times; prints
    one JSON line of per-launch seconds."""
    import numpy as np
    from cuda.bindings import driver

    sys.path.insert(0, str(ROOT / "samples"))
    from nvrtc import compile_to_ptx

    def check(result: tuple) -> object:
        err, *values = result
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA error {err.name}")
        return values[0] if len(values) == 1 else values

    check(driver.cuInit(0))
    dev = check(driver.cuDeviceGet(0))
    ctx = check(driver.cuDevicePrimaryCtxRetain(dev))
    check(driver.cuCtxSetCurrent(ctx))
    ptx = compile_to_ptx(KERNEL, "scale.cu", arch="compute_75")
    module = check(driver.cuModuleLoadData(ptx.encode() + b"\0"))
    kernel = check(driver.cuModuleGetFunction(module, b"scale"))
    n = 64
    d_x = check(driver.cuMemAlloc(n * 4))
    stream = check(driver.cuStreamCreate(0))
    args = [np.array([int(d_x)], dtype=np.uint64), np.array([1.0], dtype=np.float32),
            np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    times = []
    clock = time.perf_counter
    for _ in range(launches):
        t0 = clock()
        check(driver.cuLaunchKernel(kernel, 1, 1, 1, n, 1, 1, 0, stream, params.ctypes.data, 0))
        check(driver.cuStreamSynchronize(stream))
        times.append(clock() - t0)
    out = np.zeros(n, dtype=np.float32)
    check(driver.cuMemcpyDtoH(out.ctypes.data, d_x, out.nbytes))
    if not np.all(out == launches):  # x = x * 1 + 1 from 0, every launch
        raise SystemExit(f"wrong result: {out[:4]} after {launches} launches")
    check(driver.cuMemFree(d_x))
    check(driver.cuStreamDestroy(stream))
    check(driver.cuModuleUnload(module))
    print(json.dumps(times))
    return 0


def run(launches: int, *flags: str) -> tuple[list[float], float]:
    """Per-launch seconds of one run of the program under ``gpusafe run``,
    and the run's wall time."""
    with tempfile.TemporaryDirectory(prefix="gpusafe-bench-") as cache:
        env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=cache,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")])))
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "gpusafe", "run", "--device", "cpu", *flags, "--",
             sys.executable, __file__, "--program", "--launches", str(launches)],
            cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"gpusafe run {' '.join(flags)} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    return times, wall


def describe(name: str, times: list[float], wall: float) -> tuple[float, float]:
    first, last = times[:WINDOW], times[-WINDOW:]
    f, la = statistics.median(first), statistics.median(last)
    print(f"{name:<10}{f * 1e3:>10.3f}{statistics.fmean(first) * 1e3:>10.3f}"
          f"{la * 1e3:>10.3f}{statistics.fmean(last) * 1e3:>10.3f}{la / f:>9.2f}x"
          f"{sum(times):>10.2f}s{wall:>9.2f}s")
    return la / f, sum(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=10_000)
    parser.add_argument("--program", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.program:
        return program(opts.launches)
    if opts.launches < 2 * WINDOW:
        parser.error(f"--launches must be at least {2 * WINDOW}")
    n = opts.launches
    print(f"{n} launches of a 64-thread kernel under gpusafe run --device cpu; "
          f"per-launch ms, launches 1-{WINDOW} vs {n - WINDOW + 1}-{n}")
    print(f"{'':<10}{'first med':>10}{'mean':>10}{'last med':>10}{'mean':>10}{'growth':>10}"
          f"{'launches':>11}{'run':>10}")
    checked_growth, checked = describe("checked", *run(n))
    unchecked_growth, unchecked = describe("no-check", *run(n, "--no-check"))
    print(f"checked / --no-check (all launches): {checked / unchecked:.2f}x")
    worst = max(checked_growth, unchecked_growth)
    verdict = "within" if worst <= GROWTH_LIMIT else "OVER"
    print(f"growth, last {WINDOW} vs first {WINDOW}: {worst:.2f}x ({verdict} {GROWTH_LIMIT}x)")
    return 0 if worst <= GROWTH_LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
