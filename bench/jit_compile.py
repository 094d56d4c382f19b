"""What compiling costs: every corpus kernel the JIT covers, compiled cold and warm.

    python bench/jit_compile.py            # every module of the corpus
    python bench/jit_compile.py --quick    # compute_75 modules, numba and LLVM only

For each kernel of the test corpus (NVRTC for every arch and option set,
numba, LLVM: ``gpusafe_testkit.corpus``) that the JIT lowers, it prints:

* lower: PTX -> LLVM IR in Python, by the lowering the engine chose
  (:func:`gpusafe.cpu.jit.lanes.lower_lanes` or
  :func:`gpusafe.cpu.jit.lower.lower_kernel`);
* cold: :func:`gpusafe.cpu.jit.engine.compile_function` with empty caches
  (a disk cache of its own for each kernel: many corpus modules share kernels)
  (lowering, the O3 pipeline, code generation, linking into an MCJIT engine,
  writing the disk cache entry);
* warm: the same call in a "new process" (the in-process cache emptied): the
  object code read from the disk cache and linked, nothing compiled.

then the median and the worst of each column and how many kernels fall
back.  The disk cache lives in a temporary directory, so the machine's own
cache is neither used nor touched.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from gpusafe.cpu.jit import cache, engine
from gpusafe.cpu.jit.lanes import lower_lanes
from gpusafe.cpu.jit.lower import Unsupported, lower_kernel
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe_testkit.corpus import corpus_modules


def _kernels(quick: bool):
    for module in corpus_modules():
        if quick and module.origin == "nvrtc" and module.name.split("[")[1][:10] != "compute_75":
            continue
        program = Program(module.ptx, DeviceMemory())
        # the callees the JIT inlines, and the module variables it refuses
        functions = {f.name: f for f in program.module.functions if f.body is not None}
        module_globals = frozenset(v.name for v in program.module.variables
                                   if v.space != ".shared")
        for function in program.module.functions:
            if function.body is not None and function.is_kernel:
                yield module.name, function, functions, module_globals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="compute_75, numba and LLVM only")
    args = parser.parse_args(argv)
    rows: list[tuple[str, float, float, float]] = []
    fallbacks = lanes = 0
    with tempfile.TemporaryDirectory(prefix="gpusafe-jit-bench-") as tmp:
        engine._target_machine()  # made once per process: not a kernel's cost
        for i, (name, function, functions, module_globals) in enumerate(_kernels(args.quick)):
            os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, str(i))  # the same kernel text
            engine._CACHE.clear()
            t0 = time.perf_counter()
            try:
                compiled = engine.compile_function(function, None, functions, module_globals)
            except Unsupported:  # neither lowering covers it
                fallbacks += 1
                continue
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()  # the lowering the engine chose, alone
            if compiled.lanes:
                lower_lanes(function, module_globals)
            else:
                lower_kernel(function, functions, module_globals)
            lower = time.perf_counter() - t0
            lanes += compiled.lanes
            engine._CACHE.clear()
            hits = cache.DISK.hits
            t0 = time.perf_counter()
            engine.compile_function(function, None, functions, module_globals)
            warm = time.perf_counter() - t0
            if cache.DISK.hits != hits + 1:
                print(f"{name}: {function.name}: the warm compile missed the disk cache",
                      file=sys.stderr)
                return 1
            rows.append((f"{name}:{function.name}", lower, cold, warm))
        engine._CACHE.clear()
    width = min(max((len(r[0]) for r in rows), default=10), 70)
    print(f"{'kernel':<{width}}  {'lower ms':>9}  {'cold ms':>9}  {'warm ms':>9}")
    for label, lower, cold, warm in rows:
        short = label if len(label) <= width else label[:width - 3] + "..."
        print(f"{short:<{width}}  {lower * 1e3:9.1f}  {cold * 1e3:9.1f}  {warm * 1e3:9.1f}")
    if not rows:
        print("no kernel compiled")
        return 1
    for title, k in (("lower", 1), ("cold", 2), ("warm", 3)):
        values = [r[k] for r in rows]
        print(f"{title:>5}: median {statistics.median(values) * 1e3:8.1f} ms, "
              f"worst {max(values) * 1e3:8.1f} ms, total {sum(values):7.2f} s")
    print(f"{len(rows)} kernels compiled ({lanes} with warps as vectors), "
          f"{fallbacks} fall back to the interpreter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
