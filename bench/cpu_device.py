"""Throughput of the CPU device: thread-instructions per second, next to numpy.

    python bench/cpu_device.py            # the full sizes
    python bench/cpu_device.py --quick    # smaller inputs, for a smoke run

Each workload is a CUDA C++ kernel compiled with NVRTC and run through
``gpusafe.cpu.driver`` exactly as a cuda-python program would run it; the
same computation is then done with numpy in the same process. For each it
prints the thread-instructions the launch executed (``LaunchResult``), the
wall time of the launch (after one warm-up launch), the resulting
thread-instructions per second, the numpy time (best of several runs) and
the ratio of the two. Results are checked against numpy before anything is
printed, so a wrong answer is never timed.

The interpreter's columns run with ``GPUSAFE_CPU_ENGINE=interp`` (the
default, ``auto``, would compile these launches).  Each workload then runs
again with ``GPUSAFE_CPU_ENGINE=jit``
(:mod:`gpusafe.cpu.jit`): the JIT columns give a warm launch (compiled code
cached; the best of :data:`JIT_RUNS`), the first launch in brackets (lowering and compiling included) and
the warm time's ratio to numpy, checked against numpy too; a kernel the JIT
does not cover says "fallback" and the reason is printed under the table.
The last column is the scaling over cores: the warm launch with the blocks
on one thread (``GPUSAFE_CPU_THREADS=1``) and its speed-up on all of them
(``GPUSAFE_CPU_THREADS`` as set, default every CPU this process may use).
The load average at the start and at the end is printed under the table:
on a shared machine the figures are only comparable at a stated load.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpusafe.cpu import driver as cuda
from gpusafe.cpu.jit.cores import thread_count
from gpusafe_testkit.bench_kernels import BENCH_KERNELS
from gpusafe_testkit.corpus import nvrtc_compile


def check(result):
    err, *values = result
    if err != cuda.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{err.name}: {cuda.last_error_detail()}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def best_of(timed: Callable[[], float], min_runs: int = 3, min_seconds: float = 0.2) -> float:
    """The best of ``timed()``'s own timings over at least ``min_runs`` runs
    and ``min_seconds``."""
    best = float("inf")
    runs = 0
    start = time.perf_counter()
    while runs < min_runs or time.perf_counter() - start < min_seconds:
        best = min(best, timed())
        runs += 1
    return best


def best_time(fn: Callable[[], object]) -> float:
    """Best wall time of ``fn`` (:func:`best_of`)."""
    def timed() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return best_of(timed)


@dataclass
class Row:
    name: str
    threads: int
    instructions: int
    device_s: float
    numpy_s: float

    jit_s: float | None = None  # warm (compiled code cached)
    jit_cold_s: float | None = None  # first launch: lowering and compiling included
    jit_note: str = ""  # why the JIT did not run it
    jit_one_s: float | None = None  # warm, blocks on one thread (GPUSAFE_CPU_THREADS=1)

    @property
    def rate(self) -> float:
        return self.instructions / self.device_s

    @property
    def ratio(self) -> float:
        return self.device_s / self.numpy_s


JIT_RUNS = 5
JIT_SECONDS = 0.5
"""Warm JIT launches timed per column, at least :data:`JIT_RUNS` of them and
for at least this long (the best is shown): a launch takes milliseconds, and
one slow launch on a shared machine is noise, not the code."""


QUIET_S = 0.3
"""Seconds the JIT's columns wait after numpy's timing: OpenBLAS's threads
spin (``sched_yield``) for about 0.1 s after each matrix product before they
sleep, and launches timed in that window measured their contention on the
machine's cores, not the JIT (the matmul's warm launch 40-46 ms right after
numpy's runs, 32-36 ms after the pause)."""


def with_jit(row: Row, launch: Callable[[], float], verify: Callable[[], None]) -> Row:
    """Runs the workload again with GPUSAFE_CPU_ENGINE=jit: the first launch
    (compile included) and the best warm one, checked against numpy like the
    interpreter's; a kernel the JIT does not cover is named as a fallback."""
    from gpusafe.cpu.jit.engine import STATS
    before = len(STATS.fallbacks)
    os.environ["GPUSAFE_CPU_ENGINE"] = "jit"
    threads = os.environ.pop("GPUSAFE_CPU_THREADS", None)
    try:
        time.sleep(QUIET_S)
        cold = launch()
        warm = best_of(launch, JIT_RUNS, JIT_SECONDS)
        verify()
        os.environ["GPUSAFE_CPU_THREADS"] = "1"
        one = best_of(launch, JIT_RUNS, JIT_SECONDS)
        verify()
    finally:
        os.environ["GPUSAFE_CPU_ENGINE"] = "interp"
        os.environ.pop("GPUSAFE_CPU_THREADS", None)
        if threads is not None:
            os.environ["GPUSAFE_CPU_THREADS"] = threads
    if len(STATS.fallbacks) > before:
        row.jit_note = STATS.fallbacks[-1][1]
    else:
        row.jit_cold_s, row.jit_s, row.jit_one_s = cold, warm, one
    return row


def upload(arr: np.ndarray):
    d = check(cuda.cuMemAlloc(arr.nbytes))
    check(cuda.cuMemcpyHtoD(d, arr, arr.nbytes))
    return d


def download(d, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    check(cuda.cuMemcpyDtoH(out, d, out.nbytes))
    return out


def timed_launch(kernel, grid, block, params, before: Callable[[], None] | None = None,
                 runs: int = 2):
    """Warm-up launch, then the timed one; returns (seconds, thread-instructions)."""
    for _ in range(runs):
        if before is not None:
            before()
        t0 = time.perf_counter()
        check(cuda.cuLaunchKernel(kernel, *grid, *block, 0, 0, params, 0))
        check(cuda.cuCtxSynchronize())
        elapsed = time.perf_counter() - t0
    return elapsed, cuda.last_launch_result().instructions


def bench_vector_add(module, n: int) -> Row:
    kernel = check(cuda.cuModuleGetFunction(module, b"vector_add"))
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    da, db, dc = upload(a), upload(b), check(cuda.cuMemAlloc(a.nbytes))
    block = 256
    grid = (n + block - 1) // block
    secs, instr = timed_launch(kernel, (grid, 1, 1), (block, 1, 1),
                               ((da, db, dc, n), (None, None, None, ctypes.c_int)))
    assert np.array_equal(download(dc, a), a + b)
    row = Row(f"vector add, {n:,} floats", grid * block, instr, secs, best_time(lambda: a + b))
    check(cuda.cuMemsetD32(dc, 0, n))

    def again() -> float:
        return timed_launch(kernel, (grid, 1, 1), (block, 1, 1),
                            ((da, db, dc, n), (None, None, None, ctypes.c_int)), runs=1)[0]

    return with_jit(row, again, lambda: np.testing.assert_array_equal(download(dc, a), a + b))


def bench_matmul(module, n: int) -> Row:
    kernel = check(cuda.cuModuleGetFunction(module, b"matmul"))
    rng = np.random.default_rng(1)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    dA, dB, dC = upload(A), upload(B), check(cuda.cuMemAlloc(A.nbytes))
    secs, instr = timed_launch(kernel, (n // 16, n // 16, 1), (16, 16, 1),
                               ((dA, dB, dC, n), (None, None, None, ctypes.c_int)))
    expected = A @ B  # once: each BLAS call leaves its threads spinning (QUIET_S)
    np.testing.assert_allclose(download(dC, A), expected, rtol=1e-3, atol=1e-3)
    row = Row(f"16x16 tiled matmul, {n}x{n}", n * n, instr, secs, best_time(lambda: A @ B))
    return with_jit(row, lambda: timed_launch(
        kernel, (n // 16, n // 16, 1), (16, 16, 1),
        ((dA, dB, dC, n), (None, None, None, ctypes.c_int)), runs=1)[0],
        lambda: np.testing.assert_allclose(download(dC, A), expected, rtol=1e-3, atol=1e-3))


def bench_reduction(module, n: int) -> Row:
    kernel = check(cuda.cuModuleGetFunction(module, b"block_sum"))
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    dx, dt = upload(x), check(cuda.cuMemAlloc(4))
    block = 256
    grid = (n + block - 1) // block
    secs, instr = timed_launch(kernel, (grid, 1, 1), (block, 1, 1),
                               ((dx, dt, n), (None, None, ctypes.c_int)),
                               before=lambda: check(cuda.cuMemsetD32(dt, 0, 1)))
    total = download(dt, np.zeros(1, np.float32))[0]
    np.testing.assert_allclose(total, x.sum(dtype=np.float64), rtol=1e-4)
    row = Row(f"shuffle block sum, {n:,} floats", grid * block, instr, secs,
              best_time(lambda: x.sum()))
    return with_jit(row, lambda: timed_launch(
        kernel, (grid, 1, 1), (block, 1, 1), ((dx, dt, n), (None, None, ctypes.c_int)),
        before=lambda: check(cuda.cuMemsetD32(dt, 0, 1)), runs=1)[0],
        lambda: np.testing.assert_allclose(download(dt, np.zeros(1, np.float32))[0],
                                           x.sum(dtype=np.float64), rtol=1e-4))


def bench_histogram(module, n: int) -> Row:
    kernel = check(cuda.cuModuleGetFunction(module, b"histogram"))
    x = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8)
    dx, dbins = upload(x), check(cuda.cuMemAlloc(256 * 4))
    block, grid = 256, 64
    secs, instr = timed_launch(kernel, (grid, 1, 1), (block, 1, 1),
                               ((dx, dbins, n), (None, None, ctypes.c_int)),
                               before=lambda: check(cuda.cuMemsetD32(dbins, 0, 256)))
    bins = download(dbins, np.zeros(256, np.uint32))
    assert np.array_equal(bins, np.bincount(x, minlength=256))
    row = Row(f"shared-mem histogram, {n:,} bytes", grid * block, instr, secs,
              best_time(lambda: np.bincount(x, minlength=256)))
    return with_jit(row, lambda: timed_launch(
        kernel, (grid, 1, 1), (block, 1, 1), ((dx, dbins, n), (None, None, ctypes.c_int)),
        before=lambda: check(cuda.cuMemsetD32(dbins, 0, 256)), runs=1)[0],
        lambda: np.testing.assert_array_equal(download(dbins, np.zeros(256, np.uint32)),
                                              np.bincount(x, minlength=256)))


def print_rows(rows: list[Row]) -> None:
    headers = ["workload", "threads", "thread-instr", "device time", "thread-instr/s",
               "numpy time", "device/numpy", "JIT warm (cold)", "JIT/numpy",
               f"JIT 1 -> {thread_count()} threads"]
    body = [[r.name, f"{r.threads:,}", f"{r.instructions:,}", f"{r.device_s:.3f} s",
             f"{r.rate / 1e6:,.1f} M", f"{r.numpy_s * 1e3:.3f} ms", f"{r.ratio:,.0f}x",
             f"{r.jit_s * 1e3:.1f} ms ({r.jit_cold_s * 1e3:.0f} ms)" if r.jit_s
             else "fallback",
             f"{r.jit_s / r.numpy_s:,.1f}x" if r.jit_s else "-",
             f"{r.jit_one_s * 1e3:.1f} ms: {r.jit_one_s / r.jit_s:.2f}x" if r.jit_s
             and r.jit_one_s else "-"]
            for r in rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
        for line in [headers, *body]:
            print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                            for i, (c, w) in enumerate(zip(line, widths, strict=True))))
        return
    table = Table(title="gpusafe CPU device throughput (one run, same process)")
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 else "right")
    for b in body:
        table.add_row(*b)
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    console.print(table)
    for r in rows:
        if r.jit_note:
            print(f"JIT fallback, {r.name}: {r.jit_note}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs (a smoke run)")
    args = ap.parse_args(argv)
    sizes = dict(vec=1 << 20, mat=512, red=1 << 20, hist=1 << 20)
    if args.quick:
        sizes = dict(vec=1 << 14, mat=64, red=1 << 14, hist=1 << 14)

    load_start = os.getloadavg()[0]
    os.environ["GPUSAFE_CPU_ENGINE"] = "interp"  # the interpreter's columns; the JIT's below
    check(cuda.cuInit(0))
    dev = check(cuda.cuDeviceGet(0))
    A = cuda.CUdevice_attribute
    major = check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    ctx = check(cuda.cuCtxCreate(None, 0, dev))
    module = check(cuda.cuModuleLoadData(
        nvrtc_compile(BENCH_KERNELS, "bench.cu", f"compute_{major}{minor}").encode()))
    rows = [
        bench_vector_add(module, sizes["vec"]),
        bench_matmul(module, sizes["mat"]),
        bench_reduction(module, sizes["red"]),
        bench_histogram(module, sizes["hist"]),
    ]
    check(cuda.cuCtxDestroy(ctx))
    print_rows(rows)
    print(f"load average (1 min) at the start {load_start:.2f}, at the end "
          f"{os.getloadavg()[0]:.2f}, on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
