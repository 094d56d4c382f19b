"""Wall time of each correct sample under `gpusafe run` on the CPU device,
checking on against checking off (`--no-check`), measured in one run.

Both runs start the same interpreter, route the same driver calls to the same
CPU device and run the same program; the difference is the checking itself:
instrumenting each module (the on-disk cache is cleared first, so the cold
cost is included), building launch contexts, the extra instructions the checks
execute, and draining the violation buffers.

Run: ``python bench/run_overhead.py [--repeat N]``.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best counts")
    opts = parser.parse_args()
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
