"""A compiled grid spread over the machine's cores: block ranges on OS threads.

The compiled ``@kernel`` runs a range of blocks (:mod:`.blocks`);
a ctypes call into it releases the GIL, so block ranges called from a pool
of threads run on several cores at once.  Each range gets what compiled code
writes besides device memory: its own copy of ``ctx`` with its own segment
hints (``@resolve`` stores the segment it found, per access site: start,
the last address an access of the site's width fits at, pointer), its own
instruction counter and its own Python callback with its own error slot.

Only kernels whose blocks do not talk to each other except through atomics
run in parallel: the lowering refuses volatile and relaxed/acquire accesses
(how blocks wait for each other), and a kernel with atomics runs on several
threads only when every ``atom``/``red`` of its PTX became an LLVM atomic
(``Compiled.parallel``, decided when it is compiled); otherwise one thread.

The error of a faulting launch is the one a sequential run meets first: the
ranges are contiguous in block order and each runs its blocks in order, so
the first range (in block order) that faulted holds it.  Other ranges may
have run on; the memory a faulting launch leaves differs from the
interpreter's anyway (docs/decisions.md).

``GPUSAFE_CPU_THREADS`` sets the number of threads (default: the CPUs this
process may run on); ``1`` runs the grid in the calling thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

RANGES_PER_THREAD = 4
"""Block ranges per thread: blocks of uneven cost balance out across threads."""

MIN_RANGE_THREADS = 32768
"""GPU threads a range holds at least: handing a range to the pool costs tens of
microseconds, what a few thousand compiled threads of a vector add take."""

_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
"""Pools by (process id, threads): a forked child inherits the parent's pool
without its threads (and with its idle count), where a task would wait forever."""


def thread_count() -> int:
    """``GPUSAFE_CPU_THREADS``, or the CPUs this process may run on."""
    raw = os.environ.get("GPUSAFE_CPU_THREADS", "")
    if raw.strip():
        try:
            return max(1, int(raw))
        except ValueError:
            raise ValueError(f"GPUSAFE_CPU_THREADS={raw!r} is not a number of threads") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def block_ranges(blocks: int, threads: int, block_threads: int = 1) -> list[tuple[int, int]]:
    """Contiguous [first, last) ranges covering ``blocks`` in order, each of at
    least :data:`MIN_RANGE_THREADS` GPU threads where the grid has that many."""
    pieces = min(blocks, threads * RANGES_PER_THREAD,
                 blocks * block_threads // MIN_RANGE_THREADS)
    pieces = 1 if threads <= 1 else max(pieces, 1)
    edges = [blocks * k // pieces for k in range(pieces + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a] or [(0, 0)]


def _pool(threads: int) -> ThreadPoolExecutor:
    key = (os.getpid(), threads)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(threads, thread_name_prefix="gpusafe-jit")
    return pool


def run_ranges(call: Callable[[np.ndarray, np.ndarray, int, int], int],
               ctx: np.ndarray, sites: int, blocks: int, block_threads: int, threads: int,
               make_slow: Callable[[], tuple[Any, int]]) -> tuple[int, int, Any]:
    """Run ``call(ctx, count, first, last)`` over block ranges; returns (status,
    instructions, the failing range's callback owner or None).

    ``make_slow`` gives a fresh callback owner (its ``error`` read after a
    fault) and the address of its C callback, stored in ``ctx[4]``; ``ctx[5]``
    gets the range's own segment hints."""
    ranges = block_ranges(blocks, threads, block_threads)

    def one(first: int, last: int) -> tuple[int, int, Any]:
        own = ctx.copy()
        owner, address = make_slow()
        own[4] = address
        # per site: start, last address an access fits at, pointer, pad; start 1
        # above last 0 until a miss fills it: no address hits an empty hint
        hints = np.zeros(4 * max(sites, 1), np.uint64)
        hints[0::4] = 1
        own[5] = hints.ctypes.data
        count = np.zeros(1, np.uint64)
        status = call(own, count, first, last)
        return status, int(count[0]), owner

    if len(ranges) == 1:
        results = [one(*ranges[0])]
    else:
        results = list(_pool(threads).map(lambda r: one(*r), ranges))
    total = sum(n for _, n, _ in results)
    for status, _, owner in results:  # in block order: the first fault a sequential run meets
        if status != 0:
            return status, total, owner
    return 0, total, None
