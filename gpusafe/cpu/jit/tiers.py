"""``GPUSAFE_CPU_ENGINE=auto``: which launches are worth compiling, as a tiered JIT decides.

A cold compile costs about 0.1-0.7 s a kernel (lowering, the O3 pipeline,
code generation); the interpreter costs about 0.8 ms a launch plus 7-15 ns a
thread-instruction on a large grid (much more per thread-instruction on a
small one: an instruction runs for few lanes at a time).  A test suite
launches many small kernels a few times each, which the interpreter runs in
a millisecond: compiling them all would make it slower, not faster.  So the
default engine interprets a kernel until compiling it pays, the rule of ski
rental (buy once the rent paid equals the price, never more than twice the
best cost), and runs it compiled from then on:

* a launch whose size alone pays: threads x the kernel's decoded
  instructions (a thread's work when it runs the body once) of at least
  :data:`TIER_INSTRUCTIONS`, what the interpreter runs in about the time of
  a median compile;
* a kernel whose interpreted launches have added up to
  :data:`TIER_INSTRUCTIONS` thread-instructions, or to
  :data:`TIER_SECONDS` of the interpreter's time (the time catches the
  kernels whose few threads loop: their thread-instructions undercount the
  interpreter's cost, one Python step per instruction of a handful of lanes);
* a kernel whose object code is already in the disk cache (a link, about
  2 ms) once a launch is worth that: :data:`DISK_INSTRUCTIONS` predicted;
  smaller launches stay interpreted whatever the cache holds, so the engine a
  small launch gets never depends on what an earlier process left on disk;
* a kernel that ran compiled once, for every later launch of it (of this
  decoded copy: a module loaded again starts over, so what a program's
  launches get never depends on what an earlier test compiled).

Everything else runs on the interpreter, with identical results (the
corpus differential, ``tests/test_cpu_jit_corpus.py``, is the proof).  A
kernel the policy interpreted is no fallback and is not named in the
report's notes; a launch that would have paid and that the JIT refused is
(:data:`gpusafe.cpu.scheduler.INTERPRETED`).  Only the time criterion
depends on the machine's load: it changes which engine runs, never a result.

This module imports neither llvmlite nor the compiler: a process whose
launches all stay small never loads them.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Any

ENGINES = ("auto", "interp", "jit")

TIER_INSTRUCTIONS = 16_000_000
"""Thread-instructions that pay for a cold compile: the interpreter runs 16 M
of a large grid's in 0.11-0.23 s on this machine (70-140 M/s measured on a
vector add, a block sum and a matmul), about a median compile."""

TIER_SECONDS = 0.25
"""Interpreter time that pays for a cold compile (the median compile, 235 ms,
measured over the corpus by ``bench/jit_compile.py``)."""

DISK_INSTRUCTIONS = 1_000_000
"""A launch this big (predicted) runs in about 10 ms on the interpreter, five
times the cost of linking a disk-cached kernel."""


def engine() -> str:
    """``GPUSAFE_CPU_ENGINE``: ``auto`` (the default), ``interp`` (or
    ``interpreter``) or ``jit``; any other value is an error rather than a
    silent choice."""
    raw = os.environ.get("GPUSAFE_CPU_ENGINE", "").strip().lower() or "auto"
    raw = "interp" if raw == "interpreter" else raw
    if raw not in ENGINES:
        raise ValueError(f"GPUSAFE_CPU_ENGINE={raw!r}: expected one of {', '.join(ENGINES)}")
    return raw


@dataclass
class Tier:
    """What the policy knows of one decoded kernel (one module's copy of it)."""

    instructions: int = 0  # thread-instructions of its interpreted launches
    seconds: float = 0.0  # the interpreter's time on them
    compiled: bool = False  # it ran compiled in this process
    on_disk: bool | None = None  # its object code is in the disk cache (asked once)


_TIERS: dict[int, Tier] = {}


def tier_of(code: Any) -> Tier:
    """The kernel's record, dropped with its decoded code (keyed by identity:
    the decoded code is not hashable, and a module loaded again is a new one)."""
    key = id(code)
    tier = _TIERS.get(key)
    if tier is None:
        tier = _TIERS[key] = Tier()
        weakref.finalize(code, _TIERS.pop, key, None)
    return tier


def predicted(launch: Any) -> int:
    """Thread-instructions of the launch if each thread ran the kernel's body once."""
    gx, gy, gz = launch.grid
    return gx * gy * gz * launch.tpb * max(len(launch.code.ops), 1)


def worth_compiling(launch: Any) -> str | None:
    """Why the launch should run compiled, or None to interpret it."""
    tier = tier_of(launch.code)
    if tier.compiled:
        return "it ran compiled before"
    size = predicted(launch)
    if size >= TIER_INSTRUCTIONS:
        return f"a launch of about {size:,} thread-instructions"
    if tier.instructions >= TIER_INSTRUCTIONS or tier.seconds >= TIER_SECONDS:
        return (f"{tier.instructions:,} thread-instructions interpreted "
                f"({tier.seconds:.2f} s) before this launch")
    if size >= DISK_INSTRUCTIONS:
        if tier.on_disk is None:
            from .engine import in_disk_cache
            tier.on_disk = in_disk_cache(launch.code, launch.functions,
                                         launch.module_globals)
        if tier.on_disk:
            return "its compiled code is in the disk cache"
    return None


def interpreted(launch: Any, seconds: float) -> None:
    """Count an interpreted launch towards its kernel's tier."""
    tier = tier_of(launch.code)
    tier.instructions += launch.count
    tier.seconds += seconds


def ran_compiled(launch: Any) -> None:
    tier_of(launch.code).compiled = True


def why_interpreted(launch: Any) -> str:
    """The launch's ``engine_note`` when the policy interpreted it."""
    tier = tier_of(launch.code)
    return (f"interpreter (auto: not worth compiling yet, {tier.instructions:,} "
            f"thread-instructions interpreted before)")
