"""Wall time of each correct sample under `gpusafe run` on the CPU device,
checking on against checking off (`--no-check`), measured in one run; first,
the cost of recording one call site's stack at ``--stack-depth`` 0, the
default and 32.

Both runs start the same interpreter, route the same driver calls to the same
CPU device and run the same program; the difference is the checking itself:
instrumenting each module (the on-disk cache is cleared first, so the cold
cost is included), building launch contexts, the extra instructions the checks
execute, and draining the violation buffers.

The stack cost is per intercepted call (each allocation, free, copy, memset
and launch records one site): the walk of a 24-frame stack (a program 20
frames deep, calling through a one-statement helper, under 3 frames of an
installed test runner) from inside a door's wrapper, as the door does it.

Run: ``python bench/run_overhead.py [--repeat N] [--stacks-only]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpusafe.engine import callsite

ROOT = Path(__file__).resolve().parent.parent
EXPECTATIONS = json.loads((ROOT / "samples" / "expectations.json").read_text())["samples"]


def timed(args: list[str], cache: Path) -> float:
    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(cache))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"gpusafe run {' '.join(args)} failed ({proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")
    return elapsed


_LIBRARY = """
def runner(f, n):
    return step(f, n)
def step(f, n):
    return call(f, n)
def call(f, n):
    return f(n)
"""


_RECORD = [True]


def _wrapped_api() -> object:
    if not _RECORD[0]:
        return None  # the baseline: the same calls, no site recorded
    return callsite.program_site(2)  # as a door's wrapper asks, two frames above the site


def _helper() -> object:
    return _wrapped_api()


def _program(n: int) -> object:
    if n == 0:
        return _helper()
    site = _program(n - 1)
    return site


def stack_cost(calls: int = 20000) -> None:
    """Seconds per recorded site at each depth, best of five batches."""
    namespace: dict = {}
    lib = os.path.join(tempfile.gettempdir(), "site-packages", "runner.py")
    exec(compile(_LIBRARY, lib, "exec"), namespace)  # an installed package's frames, folded

    def batch() -> None:
        for _ in range(calls):
            namespace["runner"](_program, 19)

    def per_call(depth: int | None) -> float:
        _RECORD[0] = depth is not None
        callsite.configure(depth or 0)
        batch()  # warm: every code object classified once
        return min(_timed(batch) for _ in range(5)) / calls

    old = callsite.stack_depth()
    try:
        # interleaved, so a machine busy with something else slows every column alike
        none, base, default, deep = (per_call(d) for d in
                                     (None, 0, callsite.DEFAULT_STACK_DEPTH, 32))
    finally:
        callsite.configure(old)
        _RECORD[0] = True
    print("stack recording per intercepted call (24-frame stack, one helper, 3 library "
          f"frames); the calls themselves take {none * 1e6:.2f} us")
    cost0 = base - none
    for label, t in (("0", base), (str(callsite.DEFAULT_STACK_DEPTH), default), ("32", deep)):
        print(f"  --stack-depth {label:<3}: {(t - none) * 1e6:6.2f} us  "
              f"{(t - none) / cost0:5.2f}x depth 0")
    print()


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best counts")
    parser.add_argument("--stacks-only", action="store_true",
                        help="measure the stack recording only, not the samples")
    opts = parser.parse_args()
    stack_cost()
    if opts.stacks_only:
        return
    correct = sorted(n for n, e in EXPECTATIONS.items() if not e["violations"])
    print(f"{'sample':<16}{'checking off':>14}{'checking on':>14}{'on (cached)':>14}"
          f"{'ratio':>8}{'cached':>8}")
    ratios, cached_ratios = [], []
    for name in correct:
        program = ["--", "python", f"samples/{EXPECTATIONS[name]['program']}"]
        cache = Path(tempfile.mkdtemp(prefix="gpusafe-bench-"))
        try:
            off = min(timed(["--no-check", *program], cache) for _ in range(opts.repeat))
            cold = []
            for _ in range(opts.repeat):
                shutil.rmtree(cache, ignore_errors=True)
                cold.append(timed(program, cache))
            on = min(cold)
            warm = min(timed(program, cache) for _ in range(opts.repeat))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        ratios.append(on / off)
        cached_ratios.append(warm / off)
        print(f"{name:<16}{off:>13.2f}s{on:>13.2f}s{warm:>13.2f}s{on / off:>8.2f}"
              f"{warm / off:>8.2f}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    geo_cached = math.exp(sum(map(math.log, cached_ratios)) / len(cached_ratios))
    print(f"{'geometric mean':<58}{geo:>8.2f}{geo_cached:>8.2f}")


if __name__ == "__main__":
    main()
