"""The scheduler: runs one kernel launch on the CPU with the semantics of a GPU.

Design
======

*Decoded once.*  Each PTX function is decoded once per module
(:mod:`gpusafe.cpu.decoder`) into a list of closures with register slots,
types, ALU operations, symbol addresses and branch targets resolved.

*Vectorised across threads.*  A launch runs a *chunk* of whole blocks at a
time (:class:`~gpusafe.cpu.frames.Chunk`, up to ``MAX_CHUNK_LANES`` threads,
fewer when the kernel has many registers or a large local frame).  Every register is a numpy array
with one element per thread of the chunk; an instruction runs once for all the
threads ("lanes") that execute it.

*Scheduling.*  A :class:`~gpusafe.cpu.frames.Frame` (one activation of a function for a set of
lanes) keeps a per-lane program counter and state.  The scheduler picks the
smallest PC among runnable lanes and runs the lanes at that PC together; the
group keeps running (a branch where all its lanes agree costs no rescan)
until it diverges, blocks, or reaches the smallest PC of the lanes left
behind, where it merges with them (waiting lanes below its PC are met only
after a backward jump, so it is not stopped at every instruction).  Running
the smallest PC first makes divergent lanes of structured code reconverge at
the join point, so warps are whole again when they reach a warp-synchronous
instruction.  A group that keeps taking backward branches while other lanes
wait (a spin lock, a consumer polling a flag) yields to them after
``SPIN_LIMIT`` iterations, so it cannot starve the lane it waits for: lanes
held at a call (below) go first, then other runnable lanes.

*Gathering at calls.*  The smallest PC is not always the earliest point in
program order: a block placed out of line (``-G`` code, the slow path of a
check) sits at a higher PC and branches back, so lanes that took it reach a
call after the others.  A call is therefore a gathering point: a group that
reaches a ``call`` while other runnable lanes of the frame can still reach it
waits there (state CALL) until they arrive and merge with it.  "Can still
reach" is static (:mod:`gpusafe.cpu.call_gathering`): a path from their PC to the call in the
function's control-flow graph without a loop's back edge (the back edges of a
depth-first search), i.e. in the same iteration of the loops around them;
lanes that left the loop or went on to the next iteration are not waited
for, so the usual interleaving is unchanged.  Held lanes go ahead when no
lane can run (before waiting warp-synchronous lanes are forced), when a
spinning group yields, and a group chosen because another spins does not
wait at all (the spinner may be waiting for it).  Only lanes of the same
frame gather: lanes that call a function from different call sites (each
side of an ``if`` calling it) run it separately.

*Barriers.*  A lane at ``bar.sync`` waits; when no lane of the frame can run,
each block whose live lanes have all arrived (exited lanes do not count; a
thread count, ``bar.sync 1, 64``, and ``bar.arrive`` arrivals are honoured) is
released.  ``bar.red`` reduces over the block at release.  A barrier inside a
function counts the lanes that called it: with gathering at calls, the whole
block when its threads call from the same site (even after a divergence that
rejoins before the call), but only one call site's lanes when they call from
different sites.

*Grid-wide barriers.*  ``cooperative_groups::this_grid().sync()`` is no
instruction: each block's master thread adds to a counter in the launch's
grid workspace (``%envreg1:%envreg2``) and polls it until the last block's
arrival flips its top bit, between two ``bar.sync`` of its block.  That
works here only if every block is resident, so a cooperative launch (one with
a workspace) runs all its blocks in one chunk, whatever the chunk budget says
(the driver refuses a grid larger than occupancy times the multiprocessor
count, at most 16384 threads); a master polling while other blocks still work
yields to them after ``SPIN_LIMIT`` rounds, as any spinning group does.

*Warp-synchronous instructions* (``shfl.sync``, ``vote.sync``,
``match.sync``, ``redux.sync``, ``bar.warp.sync``) run for a warp only once
every live lane of its member mask is at the instruction; lanes that arrive
early wait.  If nothing else can run, waiting lanes run with whoever is there.
Inside a callee only the lanes of that call take part (the member mask is
cut to the frame's live lanes): a full-mask ``shfl.sync`` in a function that
the two sides of a divergent branch call separately, undefined on a GPU, runs
for each side alone, and a lane whose source lane is absent reads its own
value.

*Calls.*  ``call`` runs the callee as a nested frame for exactly the calling
lanes, with its own registers, its own ``.local`` frame above the caller's on
each thread's stack, and a per-lane ``.param`` area; arguments and return
values are copied in and out.  Frames nest on an explicit stack
(:func:`run_stack`), so a recursion is as deep as the thread's stack allows
(``CU_LIMIT_STACK_SIZE``), never bounded by Python's recursion; ``exit``
inside a callee ends the thread in every frame.

*Watchdog.*  A launch with a timeout checks its deadline once a round: each
time the scheduler picks a group and each time a group jumps back (a loop's
next iteration), never per instruction.

*Memory.*  Global memory is the :class:`~gpusafe.cpu.memory.DeviceMemory`
arena; shared memory is one window per block of the chunk; local memory is one
stack per thread.  Every access is reported to the observers first
(:mod:`gpusafe.cpu.events`); an observer may suppress lanes (the oracle does
for bad accesses).  Atomics apply in lane order, so many lanes hitting one
address see the values a sequential execution gives.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .errors import DeviceError
from .frames import ALL, BAR, CALL, CALLING, DONE, NO_PC, RUN, WARP, Chunk, Frame, Launch
from .jit import tiers
from .memory import LOCAL_STACK_BASE

MAX_CHUNK_LANES = 1 << 18
CHUNK_BYTES = 384 << 20
"""Budget for the per-lane state of one chunk (registers, local stack, params)."""
SPIN_LIMIT = 256
"""Backward branches a group may take in a row while other lanes wait before
the scheduler lets the others run (so a spinning lane cannot starve a lock
holder)."""


def run_stack(root: Frame) -> None:
    """Run a frame and every call its lanes make, to the end.

    Calls are an explicit stack of frames, not Python recursion: a call op
    sets its frame's :attr:`~gpusafe.cpu.frames.Frame.call` and returns
    :data:`~gpusafe.cpu.frames.CALLING`; the callee frames it gives run on
    top of it, then the caller resumes where the call says.  How deep a
    recursion goes is bounded by the thread's stack (the call op checks it),
    never by the interpreter."""
    stack = [root]
    while stack:
        fr = stack[-1]
        resume = None
        call = fr.call
        if call is not None:
            callee = call.next_frame()
            if callee is not None:
                stack.append(callee)
                continue
            fr.call = None
            resume = call.result()
        if not run_frame(fr, resume):
            stack.pop()


def run_frame(fr: Frame, resume: tuple[Any, int, int] | None = None) -> bool:
    """Run a frame until every lane has returned or exited (False), or until
    its lanes make a call (True: ``fr.call`` is set; run the callees, then
    this again with ``resume``, the call's result)."""
    ops = fr.code.ops
    launch = fr.launch
    timed = launch.deadline is not None
    if resume is None:
        act: Any = ALL
        nact = fr.n
        cur = 0
        stop = NO_PC  # the smallest PC of other lanes: reaching it merges with them
        spins = 0
    else:
        act, nact, cur = resume
        stop = fr.stop
        spins = fr.spins
    count = 0
    try:
        while True:
            if act is None:
                act, nact, cur = schedule(fr)
                if act is None:
                    return False
                if timed:
                    launch.check_deadline(fr, act, cur)
                stop = fr.stop
                spins = 0
            elif cur >= stop:
                fr.pc[act] = cur
                act = None
                continue
            op = ops[cur]
            count += nact
            if op.simple:
                op.run(fr, act, nact)
                cur += 1
                continue
            before = cur
            act, nact, cur = op.run(fr, act, nact, cur)
            if act is CALLING:
                fr.stop = stop
                fr.spins = spins
                return True
            if act is None or cur > before:
                continue
            # a backward jump: a loop's next round
            if timed:
                launch.check_deadline(fr, act, cur)
            if stop != NO_PC or fr.below:
                if fr.below:
                    # a backward jump may lead to lanes waiting below
                    stop = min(stop, _waiting_from(fr, cur))
                spins += 1
                if spins > SPIN_LIMIT:
                    # this group keeps looping while others wait: let the
                    # others run (a lock holder, a producer) for a while
                    fr.pc[act] = cur
                    act, nact, cur = schedule(fr, exclude=act)
                    stop = fr.stop
                    spins = 0
    except DeviceError as e:
        if e.ptx_line is None and 0 <= cur < len(ops) and ops[cur].instr is not None:
            e.ptx_line = ops[cur].instr.line
        raise
    finally:
        launch.count += count


def schedule(fr: Frame, exclude: Any = None) -> tuple[Any, int, int]:
    """The lanes to run next: those at the smallest PC among runnable lanes,
    with the waiting lanes at that PC.  ``exclude`` (a group that spins while
    others wait) runs again only if nothing else can: lanes held at a call
    are released first, then other runnable lanes.  Sets ``fr.stop``, the
    smallest PC at or above the group's of the lanes left behind, and
    ``fr.below``, whether waiting lanes sit below it (met only after a
    backward jump; see :func:`_waiting_from`)."""
    state = fr.state
    pc = fr.pc
    while True:
        running = state == RUN
        calls_first = False
        fr.yielded = False
        if exclude is not None:
            if (state == CALL).any():
                calls_first = True
            else:
                others = running.copy()
                others[exclude] = False
                if others.any():
                    running = others
                    fr.yielded = True
            exclude = None
        waiting = (state == WARP) | (state == CALL)
        any_waiting = bool(waiting.any())
        if not calls_first and running.any():
            pcs = np.where(running, pc, NO_PC)
            m = int(pcs.min())
            sel = pcs == m
            if any_waiting:
                sel |= waiting & (pc == m)
                pcs = np.where(waiting, pc, pcs)
            idx = np.flatnonzero(sel)
            if any_waiting:
                state[idx] = RUN
            if len(idx) == fr.n:
                fr.stop = NO_PC
                fr.below = False
                return ALL, fr.n, m
            pcs[idx] = NO_PC
            fr.below = False
            if any_waiting:
                low = pcs < m  # only waiting lanes can be below m
                if low.any():
                    fr.below = True
                    pcs[low] = NO_PC
            fr.stop = int(pcs.min())
            return idx, len(idx), m
        if not calls_first and release_barriers(fr, force=False):
            continue
        for hold in (CALL, WARP):
            held = state == hold
            if held.any():
                # nothing else can run: the waiting lanes at the smallest PC
                # go ahead with whoever is there
                m = int(pc[held].min())
                idx = np.flatnonzero(held & (pc == m))
                state[idx] = RUN
                fr.force = True
                fr.stop = NO_PC
                fr.below = False
                if len(idx) == fr.n:
                    return ALL, fr.n, m
                return idx, len(idx), m
        if (state == BAR).any():
            release_barriers(fr, force=True)
            continue
        return None, 0, 0


def _waiting_from(fr: Frame, cur: int) -> int:
    """The smallest PC at or above ``cur`` of a waiting lane (a group that
    jumped back to ``cur`` merges with it there)."""
    state = fr.state
    pcs = fr.pc[(state == WARP) | (state == CALL)]
    pcs = pcs[pcs >= cur]
    return int(pcs.min()) if len(pcs) else NO_PC


def release_barriers(fr: Frame, force: bool) -> bool:
    """Release the lanes of every block whose barrier is complete."""
    state = fr.state
    waiting = state == BAR
    if not waiting.any():
        return False
    chunk = fr.chunk
    rows = fr.per_lane("@block_row", chunk.block_row)
    nb = chunk.nblocks
    idx = np.flatnonzero(waiting)
    wrows = rows[idx]
    ids = fr.bar_id[idx]
    keys = wrows * 16 + ids
    alive_per_block = np.bincount(rows[state < DONE], minlength=nb)
    counts = fr.bar_count[idx]
    expected = np.where(counts > 0, counts, alive_per_block[wrows])
    arrived = np.bincount(keys, minlength=nb * 16)
    if fr.arrivals is not None:
        arrived = arrived + fr.arrivals.reshape(-1)
    release = arrived[keys] >= expected
    if force:
        release[:] = True
    if not release.any():
        return False
    rel = idx[release]
    rel_keys = keys[release]
    state[rel] = RUN
    if fr.arrivals is not None:
        fr.arrivals.reshape(-1)[np.unique(rel_keys)] = 0
    pcs = fr.bar_pc[rel]
    for p in np.unique(pcs):
        finish = getattr(fr.code.ops[int(p)].run, "finish", None)
        if finish is not None:
            finish(fr, rel, rel_keys, pcs == p)
    return True


INTERPRETED: dict[str, str] = {}
"""Kernels the JIT was asked for (``GPUSAFE_CPU_ENGINE=jit``, or ``auto`` for a
launch worth compiling) and left to the interpreter, with the first reason:
the report names them (:meth:`gpusafe.backends.cpu.CpuBackend.notes`)."""


def run_launch(launch: Launch) -> None:
    """Run a launch in compiled code or on the interpreter, as
    ``GPUSAFE_CPU_ENGINE`` says: ``auto`` (the default) compiles the kernels
    whose work pays for it (:mod:`gpusafe.cpu.jit.tiers`), ``jit`` every
    kernel, ``interp`` none; a kernel the JIT does not cover runs on the
    interpreter, with the same results."""
    engine = tiers.engine()
    if engine == "jit" or (engine == "auto" and tiers.worth_compiling(launch)):
        from .jit.engine import run as run_compiled
        from .jit.lower import Unsupported

        try:
            run_compiled(launch)
            launch.engine_note = "jit"
            tiers.ran_compiled(launch)
            return
        except Unsupported as e:
            # nothing ran yet: the interpreter runs the launch, and says why
            launch.engine_note = f"interpreter: {e}"
            INTERPRETED.setdefault(launch.kernel, str(e))
    elif engine == "auto":
        launch.engine_note = tiers.why_interpreted(launch)
    start = time.perf_counter()
    try:
        interpret(launch)
    finally:
        tiers.interpreted(launch, time.perf_counter() - start)


def interpret(launch: Launch) -> None:
    """Run every block of a launch on the interpreter, a chunk of blocks at a
    time; a cooperative launch (one with a grid workspace) in a single chunk,
    so that every block is resident while another waits at a grid-wide
    barrier (the driver refused a grid larger than the device holds at once)."""
    code = launch.code
    tpb = launch.tpb
    gx, gy, gz = launch.grid
    nblocks_total = gx * gy * gz
    per_lane = code.register_bytes + code.local_size + code.param_size + 64
    lanes = max(tpb, min(MAX_CHUNK_LANES, CHUNK_BYTES // per_lane))
    blocks_per_chunk = max(1, lanes // tpb)
    if launch.workspace:
        blocks_per_chunk = nblocks_total
    first = 0
    while first < nblocks_total:
        nb = min(blocks_per_chunk, nblocks_total - first)
        chunk = Chunk(launch, first, nb, code.local_size)
        run_stack(Frame(code, launch, chunk, None, LOCAL_STACK_BASE, 0))
        first += nb
