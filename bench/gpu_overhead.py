"""Kernel time on a GPU, checked against plain, measured in one run.

    python bench/gpu_overhead.py                   # the real driver: needs a GPU
    python bench/gpu_overhead.py --driver cpu      # a dry run on gpusafe's CPU device

``bench/overhead.py`` counts the instructions its kernels execute on the CPU
device; this times the same kernels on a GPU.  Each kernel is compiled with
NVRTC for the device, instrumented, and its launch prepared by gpusafe's own
launch pipeline (the records in device memory, as ``gpusafe run`` places
them).  Three variants run from the same inputs:

* plain: the kernel as compiled;
* gpusafe: the instrumented module with the launch gpusafe prepared: the
  proven entry where the host proves the launch in bounds, the checked
  kernel otherwise, which is what ``gpusafe run`` launches;
* checked: the checked kernel forced, as for a launch the host cannot prove.

One launch of each must leave identical outputs, and the checked launches
must report nothing, before anything is timed.  Times: CUDA events around
``--launches`` back-to-back launches, the best of ``--rounds`` rounds, per
launch.  The kernels that scale with ``bench/overhead.py``'s N run at
``--n`` threads (default 2^22); the others keep their CPU-bench size and are
marked launch-bound when the plain kernel takes under 20 us, where a launch's
own cost dominates.  Geometric means are printed over all kernels and over
the rest.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpusafe.cudaapi.params import PointerArray
from gpusafe.engine.launches import DriverMemory, LaunchPipeline
from gpusafe_instrument import host
from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile

LAUNCH_BOUND_US = 20.0
"""Below this a plain launch measures the launch more than the kernel."""


def _check(result: Any) -> Any:
    err, *values = result
    if int(err) != 0:
        raise SystemExit(f"CUDA call failed: {err!r}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass
class Variant:
    name: str
    function: Any
    params: bytes
    offsets: list[int]  # of each parameter in ``params``, the checked kernel's hidden ones too


class Gpu:
    """The driver calls this bench makes, on either driver module."""

    def __init__(self, cu: Any) -> None:
        self.cu = cu
        _check(cu.cuInit(0))
        device = _check(cu.cuDeviceGet(0))
        self.context = _check(cu.cuDevicePrimaryCtxRetain(device))
        _check(cu.cuCtxSetCurrent(self.context))
        attr = cu.CUdevice_attribute
        major = _check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device))
        minor = _check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
        self.cc = major * 10 + minor
        name = _check(cu.cuDeviceGetName(64, device))
        self.name = bytes(name).split(b"\0")[0].decode()
        self.start = _check(cu.cuEventCreate(0))
        self.end = _check(cu.cuEventCreate(0))

    def function(self, ptx: str, kernel: str) -> Any:
        module = _check(self.cu.cuModuleLoadData(ptx.encode()))
        return _check(self.cu.cuModuleGetFunction(module, kernel.encode()))

    def launch(self, bench: Any, variant: Variant) -> None:
        array = PointerArray(variant.params, variant.offsets)  # as gpusafe run launches
        _check(self.cu.cuLaunchKernel(variant.function, *bench.grid, *bench.block, bench.shared,
                                      0, array.address, 0))

    def time(self, bench: Any, variant: Variant, launches: int, rounds: int) -> float:
        """Microseconds a launch, the best of ``rounds`` runs of ``launches``."""
        cu = self.cu
        for _ in range(3):
            self.launch(bench, variant)
        _check(cu.cuCtxSynchronize())
        best = math.inf
        for _ in range(rounds):
            _check(cu.cuEventRecord(self.start, 0))
            for _ in range(launches):
                self.launch(bench, variant)
            _check(cu.cuEventRecord(self.end, 0))
            _check(cu.cuEventSynchronize(self.end))
            best = min(best, _check(cu.cuEventElapsedTime(self.start, self.end)))
        return best * 1e3 / launches


def _overhead_module(n: int) -> Any:
    """``bench/overhead.py`` with its N set to ``n``."""
    os.environ["GPUSAFE_BENCH_N"] = str(n)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    module = importlib.import_module("overhead")
    if module.N != n:
        raise SystemExit(f"bench/overhead.py was imported before with N={module.N}")
    return module


def measure(gpu: Gpu, bench: Any, overhead: Any, launches: int, rounds: int) -> dict:
    """One kernel's three variants: their outputs compared, then timed."""
    memory = DriverMemory(gpu.cu)
    text = nvrtc_compile(bench.source, bench.kernel + ".cu", f"compute_{gpu.cc}")
    result = instrument(text)
    info = result.sites.kernels[bench.kernel]
    addrs = overhead._place(memory, bench.args)
    params = overhead._pack(list(info.params), bench.args, addrs)
    records = [host.AllocationRecord(tag, base, overhead.allocation_size(a))
               for tag, (a, base) in enumerate(zip(bench.args, addrs, strict=True), 1)
               if base is not None]
    pipeline = LaunchPipeline(memory)
    launch = pipeline.prepare(result.sites, bench.kernel, params, records,
                              dynamic_shared=bench.shared, grid=bench.grid, block=bench.block)
    offsets = [offset for _, offset, _ in info.params]
    checked = offsets + list(info.hidden_offsets)
    variants = [Variant("plain", gpu.function(text, bench.kernel), params, offsets),
                Variant("gpusafe", gpu.function(result.ptx, launch.entry), launch.params,
                        checked)]
    proven = launch.entry != bench.kernel
    if proven:
        variants.append(Variant("checked", gpu.function(result.ptx, bench.kernel),
                                launch.params, checked))
    outputs = []
    for variant in variants:
        for a, base in zip(bench.args, addrs, strict=True):
            if isinstance(a, np.ndarray):
                memory.write(base, a.tobytes())
        gpu.launch(bench, variant)
        _check(gpu.cu.cuCtxSynchronize())
        outputs.append([memory.read(base, a.nbytes) for a, base in zip(bench.args, addrs,
                                                                       strict=True)
                        if isinstance(a, np.ndarray)])
    for variant, out in zip(variants[1:], outputs[1:], strict=True):
        if out != outputs[0]:
            raise SystemExit(f"{bench.name}: the {variant.name} launch's output differs "
                             "from the plain one")
    times = {v.name: gpu.time(bench, v, launches, rounds) for v in variants}
    found, dropped = pipeline.collect(launch)
    if found or dropped:
        raise SystemExit(f"{bench.name}: the checked launches reported {found[:3]} "
                         f"({dropped} dropped)")
    times.setdefault("checked", times["gpusafe"])
    for base in addrs:
        if base is not None:
            memory.free(base)
    return {"name": bench.name, "threads": math.prod(bench.grid) * math.prod(bench.block),
            "proven": proven, **times}


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", choices=("cuda", "cpu"), default="cuda",
                        help="cuda.bindings.driver (a GPU) or gpusafe's CPU device (dry run)")
    parser.add_argument("--n", type=int, default=1 << 22,
                        help="threads of the kernels that scale (default 2^22)")
    parser.add_argument("--launches", type=int, default=20, help="launches a timed round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds; the best counts")
    parser.add_argument("--only", default="", help="comma-separated kernel names")
    args = parser.parse_args(argv)
    if args.driver == "cuda":
        from cuda.bindings import driver as cu
    else:
        from gpusafe.cpu import driver as cu
    gpu = Gpu(cu)
    overhead = _overhead_module(args.n)
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    rows = []
    for bench in overhead.BENCHES:
        if wanted and bench.name not in wanted:
            continue
        if int(bench.arch.removeprefix("compute_")) > gpu.cc:
            print(f"{bench.name}: needs {bench.arch}, the device is {gpu.cc}: not run")
            continue
        rows.append(measure(gpu, bench, overhead, args.launches, args.rounds))
    print(f"{gpu.name} (compute_{gpu.cc}), {args.driver} driver; N = {args.n}; "
          f"best of {args.rounds} x {args.launches} launches")
    print(f"{'kernel':28} {'threads':>9} {'plain us':>10} {'gpusafe us':>11} {'ratio':>6} "
          f"{'checked us':>11} {'ratio':>6}")
    for r in rows:
        flag = "  launch-bound" if r["plain"] < LAUNCH_BOUND_US else ""
        proven = "" if r["proven"] else "  (not proven: gpusafe = checked)"
        print(f"{r['name']:28} {r['threads']:>9} {r['plain']:>10.1f} {r['gpusafe']:>11.1f} "
              f"{r['gpusafe'] / r['plain']:>6.3f} {r['checked']:>11.1f} "
              f"{r['checked'] / r['plain']:>6.3f}{flag}{proven}")
    for title, chosen in (("all kernels", rows),
                          ("not launch-bound", [r for r in rows
                                                if r["plain"] >= LAUNCH_BOUND_US])):
        print(f"geometric mean over {title} ({len(chosen)}): gpusafe "
              f"{_geomean([r['gpusafe'] / r['plain'] for r in chosen]):.3f}, checked "
              f"{_geomean([r['checked'] / r['plain'] for r in chosen]):.3f}")
    _check(cu.cuDevicePrimaryCtxRelease(_check(cu.cuDeviceGet(0))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
