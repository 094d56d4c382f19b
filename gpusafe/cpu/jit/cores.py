"""A compiled grid spread over the machine's cores: block ranges on OS threads.

The compiled ``@kernel`` runs a range of blocks (:mod:`.blocks`);
a ctypes call into it releases the GIL, so block ranges called from a pool
of threads run on several cores at once.  Each OS thread (a worker, made
once per launch, claiming ranges in block order) gets what compiled code
writes besides device memory: its own copy of ``ctx`` with its own segment
hints (``@resolve`` stores the segment it found, per access site: start,
the last address an access of the site's width fits at, pointer), its own
block buffers, instruction counter and Python callback with its own error
slot.

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
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

RANGES_PER_THREAD = 4
"""Block ranges per thread: blocks of uneven cost balance out across threads
(a worker that finishes early claims the next range)."""

MIN_RANGE_THREADS = 32768
"""GPU threads a range holds at least when nothing better is known (a
kernel's first launch): handing work to a helper thread costs tens of
microseconds, what a few thousand compiled threads of a vector add take."""

MIN_RANGE_WORK = 1_000_000
"""Thread-instructions a range holds at least once the kernel's last launch
told how many a thread runs (0.04-0.4 ms of compiled code): a grid of few
threads that each loop long (the bench's histogram, 16384 threads of 616
instructions) is worth both cores, a grid of many short ones may not be."""

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


def block_ranges(blocks: int, threads: int, block_threads: int = 1,
                 per_thread: float | None = None) -> list[tuple[int, int]]:
    """Contiguous [first, last) ranges covering ``blocks`` in order, each of at
    least :data:`MIN_RANGE_WORK` thread-instructions (``per_thread``: what a
    thread of the kernel's last launch ran) or, not knowing that, of
    :data:`MIN_RANGE_THREADS` GPU threads, where the grid has that much."""
    size = (blocks * block_threads // MIN_RANGE_THREADS if per_thread is None
            else int(blocks * block_threads * per_thread) // MIN_RANGE_WORK)
    pieces = min(blocks, threads * RANGES_PER_THREAD, size)
    pieces = 1 if threads <= 1 else max(pieces, 1)
    edges = [blocks * k // pieces for k in range(pieces + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a] or [(0, 0)]


def _pool(threads: int) -> ThreadPoolExecutor:
    key = (os.getpid(), threads)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(threads, thread_name_prefix="gpusafe-jit")
    return pool


class Worker(Protocol):
    """One OS thread's share of a launch (:func:`run_ranges`)."""

    instructions: int  # what its ranges executed so far

    def run(self, first: int, last: int) -> int:
        """Run blocks [first, last); the compiled kernel's status (0: no fault)."""
        ...


def run_ranges(new_worker: Callable[[int], Worker], blocks: int, block_threads: int,
               threads: int, per_thread: float | None = None) -> tuple[int, int, Worker | None]:
    """Run the grid's block ranges on up to ``threads`` workers; returns (status,
    instructions, the worker whose range faulted first in block order, or None).

    Each worker is made once (``new_worker(k)``, worker 0 in the calling
    thread), when it first claims a range, and claims ranges in block order
    until none is left, so what a
    range costs besides its blocks is a lock, not a fresh context, callback
    and buffers: handing out eight ranges that way cost the bench's block
    sum (2 ms of blocks) about 1 ms.  A worker stops at its range's fault,
    and no worker claims a range after the first fault found: every range
    before it was claimed already and runs to its end, so the fault a
    sequential run meets first is among those found."""
    ranges = block_ranges(blocks, threads, block_threads, per_thread)
    lock = threading.Lock()
    claimed = [0]
    faults: list[tuple[int, int, Worker]] = []  # (range, status, worker)

    def claim() -> int | None:
        with lock:
            r = claimed[0]
            if r >= len(ranges) or any(r > f[0] for f in faults):
                return None
            claimed[0] = r + 1
            return r

    def work(k: int, r: int | None) -> Worker | None:
        worker = None  # made once it has a range: a helper that finds none costs no worker
        while r is not None:
            if worker is None:
                worker = new_worker(k)
            status = worker.run(*ranges[r])
            if status != 0:
                with lock:
                    faults.append((r, status, worker))
                break
            r = claim()
        return worker

    # the calling thread takes the first range before any helper starts: it
    # works whatever the scheduler does (a helper started first could take
    # every range of a short grid while the caller only waited)
    first = claim()
    helpers = min(threads, len(ranges)) - 1
    pending = [_pool(helpers).submit(lambda k=k: work(k, claim()))
               for k in range(1, helpers + 1)] if helpers else []
    # a helper the pool had not started when the ranges ran out is not waited for
    workers = [work(0, first)] + [f.result() for f in pending if not f.cancel()]
    total = sum(w.instructions for w in workers if w is not None)
    if faults:
        _, status, worker = min(faults, key=lambda f: f[0])
        return status, total, worker
    return 0, total, None
