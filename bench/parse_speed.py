"""Parse and emit throughput of the PTX front end over the test corpus.

Prints MB/s for parse, emit and both together over every corpus module, and
the time for the largest module.  Run: ``python bench/parse_speed.py``.
"""

from __future__ import annotations

import time

from gpusafe_instrument import ptx
from gpusafe_testkit.corpus import corpus_modules


def main() -> None:
    modules = corpus_modules()
    texts = [m.ptx for m in modules]
    total = sum(len(t) for t in texts)
    # warm the regex caches once, as a long-running tool would be
    ptx.parse(texts[0])
    t0 = time.perf_counter()
    trees = [ptx.parse(t) for t in texts]
    t1 = time.perf_counter()
    for tree in trees:
        ptx.emit(tree)
    t2 = time.perf_counter()
    largest = max(modules, key=lambda m: len(m.ptx))
    t3 = time.perf_counter()
    ptx.emit(ptx.parse(largest.ptx))
    t4 = time.perf_counter()
    mb = total / 1e6
    print(f"corpus: {len(texts)} modules, {mb:.1f} MB of PTX")
    print(f"parse:          {mb / (t1 - t0):6.1f} MB/s")
    print(f"emit:           {mb / (t2 - t1):6.1f} MB/s")
    print(f"parse + emit:   {mb / (t2 - t0):6.1f} MB/s")
    print(f"largest module: {largest.name}, {len(largest.ptx) / 1e6:.2f} MB, "
          f"parse + emit {t4 - t3:.3f} s ({len(largest.ptx) / 1e6 / (t4 - t3):.1f} MB/s)")


if __name__ == "__main__":
    main()
