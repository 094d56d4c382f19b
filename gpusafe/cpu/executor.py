"""The executor: runs one kernel launch on the CPU with the semantics of a GPU.

Design
======

*Decoded once.*  Each PTX function is decoded once per module
(:mod:`gpusafe.cpu.decoder`) into a list of closures with register slots,
types, ALU operations, symbol addresses and branch targets resolved.

*Vectorised across threads.*  A launch runs a *chunk* of whole blocks at a
time (:class:`Chunk`, up to ``MAX_CHUNK_LANES`` threads, fewer when the kernel
has many registers or a large local frame).  Every register is a numpy array
with one element per thread of the chunk; an instruction runs once for all the
threads ("lanes") that execute it.

*Scheduling.*  A :class:`Frame` (one activation of a function for a set of
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
reach" is static (:class:`Flow`): a path from their PC to the call in the
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
values are copied in and out.  Recursion is nesting; ``exit`` inside a callee
ends the thread in every frame.

*Memory.*  Global memory is the :class:`~gpusafe.cpu.memory.DeviceMemory`
arena; shared memory is one window per block of the chunk; local memory is one
stack per thread.  Every access is reported to the observers first
(:mod:`gpusafe.cpu.events`); an observer may suppress lanes (the oracle does
for bad accesses).  Atomics apply in lane order, so many lanes hitting one
address see the values a sequential execution gives.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from instrument import nodes

from .decoder import DecodeContext, DecodeError, FunctionCode, Op, align_up, guard_simple
from .errors import StackOverflow, TrapError, UnsupportedInstruction
from .events import LaunchInfo, Observer, ObserverBase
from .memory import LOCAL_STACK_BASE, DeviceMemory
from .operands import ALL, as_index
from .special_registers import chunk_value

if TYPE_CHECKING:
    from .program import Program

RUN, BAR, WARP, CALL, DONE, EXIT = 0, 1, 2, 3, 4, 5
"""Lane states in a frame (``state < DONE``: alive).  WARP: waiting at a
warp-synchronous instruction; CALL: waiting at a call for the lanes that can
still reach it."""

MAX_CHUNK_LANES = 1 << 18
CHUNK_BYTES = 384 << 20
"""Budget for the per-lane state of one chunk (registers, local stack, params)."""
MAX_CALL_DEPTH = 1000
MAX_LOCAL_PER_THREAD = 512 * 1024
"""Most local memory (stack) a thread may use, as on the GPU."""
MAX_CHUNK_LOCAL = 8 << 30
"""Most local memory all threads of a chunk may use together."""
SPIN_LIMIT = 256
"""Backward branches a group may take in a row while other lanes wait before
the scheduler lets the others run (so a spinning lane cannot starve a lock
holder)."""
_NO_PC = np.iinfo(np.int32).max


class Launch:
    """Everything one kernel launch shares across its chunks and frames."""

    def __init__(
        self,
        program: Program,
        kernel: FunctionCode,
        info: LaunchInfo,
        params: bytes,
        shared_offsets: dict[Any, int],
        observers: list[Observer],
        stdout: TextIO | None,
        grid_id: int,
    ) -> None:
        self.program = program
        self.memory: DeviceMemory = program.memory
        self.code = kernel
        self.info = info
        self.kernel = info.kernel
        self.grid = info.grid
        self.block = info.block
        self.tpb = info.threads_per_block
        self.dynamic_shared = info.dynamic_shared
        self.shared_window = info.shared_window
        self.shared_offsets = shared_offsets
        self.kparams = np.frombuffer(bytes(params) + bytes(16), dtype=np.uint8)
        self.observers = list(observers)
        # observers that look at memory events (an ObserverBase subclass that
        # does not override memory_access does not need them built)
        self.watchers = [
            o for o in observers
            if hasattr(o, "memory_access")
            and getattr(type(o), "memory_access", None) is not ObserverBase.memory_access
        ]
        self.stdout = stdout
        self.grid_id = grid_id
        self.start_ns = time.perf_counter_ns()
        self.count = 0
        self.reserved_shared = 0

    def clock_bias(self) -> int:
        return self.count

    def out(self) -> TextIO:
        return self.stdout if self.stdout is not None else sys.stdout


class Chunk:
    """A group of whole blocks executed together; per-lane data of its threads."""

    def __init__(self, launch: Launch, first_block: int, nblocks: int, local_size: int) -> None:
        self.launch = launch
        tpb = launch.tpb
        self.first_block = first_block
        self.nblocks = nblocks
        self.n = n = nblocks * tpb
        self.first_global = first_block * tpb
        lane = np.arange(n, dtype=np.int64)
        self.lane_index = lane
        self.block_row = lane // tpb
        self.tid_lin = lane - self.block_row * tpb
        self.laneid = (self.tid_lin & 31).astype(np.uint32)
        self.warp_in_block = self.tid_lin >> 5
        self.warps_per_block = (tpb + 31) // 32
        self.warp_id = self.block_row * self.warps_per_block + self.warp_in_block
        self.nwarps = nblocks * self.warps_per_block
        self.warp_size = np.minimum(32, tpb - self.warp_in_block * 32)
        self.shared_stride = align_up(max(launch.shared_window, 16), 16)
        self.shared = np.zeros(nblocks * self.shared_stride, dtype=np.uint8)
        self.local_stride = align_up(max(local_size, 16), 16)
        self.local = np.zeros(n * self.local_stride, dtype=np.uint8)
        self._special: dict[str, np.ndarray] = {}

    def tid(self, axis: int) -> np.ndarray:
        key = "tid" + "xyz"[axis]
        v = self._special.get(key)
        if v is None:
            bx, by, _ = self.launch.block
            t = self.tid_lin
            v = (t % bx, (t // bx) % by, t // (bx * by))[axis].astype(np.uint32)
            self._special[key] = v
        return v

    def ctaid(self, axis: int) -> np.ndarray:
        key = "ctaid" + "xyz"[axis]
        v = self._special.get(key)
        if v is None:
            gx, gy, _ = self.launch.grid
            b = self.block_row + self.first_block
            v = (b % gx, (b // gx) % gy, b // (gx * gy))[axis].astype(np.uint32)
            self._special[key] = v
        return v

    def special(self, name: str) -> np.ndarray:
        v = self._special.get(name)
        if v is None:
            v = chunk_value(name, self)
            self._special[name] = v
        return v

    def ensure_local(self, size: int) -> None:
        """Grow every thread's local stack to at least ``size`` bytes."""
        if size <= self.local_stride:
            return
        if size > MAX_LOCAL_PER_THREAD:
            raise StackOverflow(
                f"kernel {self.launch.kernel}: a thread needs {size} bytes of stack; the "
                f"device allows {MAX_LOCAL_PER_THREAD} (runaway recursion?)"
            )
        stride = min(max(align_up(size, 16), 2 * self.local_stride), MAX_LOCAL_PER_THREAD)
        if self.n * stride > MAX_CHUNK_LOCAL:
            stride = align_up(size, 16)
            if self.n * stride > MAX_CHUNK_LOCAL:
                raise StackOverflow(
                    f"kernel {self.launch.kernel}: {self.n} threads with {size} bytes of stack "
                    f"each do not fit the CPU device's {MAX_CHUNK_LOCAL >> 30} GiB of local memory"
                )
        grown = np.zeros(self.n * stride, dtype=np.uint8)
        grown.reshape(self.n, stride)[:, : self.local_stride] = self.local.reshape(
            self.n, self.local_stride
        )
        self.local = grown
        self.local_stride = stride


class Frame:
    """One activation of a function for a set of lanes of a chunk."""

    __slots__ = (
        "code", "launch", "chunk", "n", "lanes", "regs", "params", "state", "pc",
        "local_base", "local_top", "depth", "force", "bar_pc", "bar_id", "bar_count",
        "bar_value", "arrivals", "cache", "cc", "stop", "below",
        "yielded",
    )

    def __init__(
        self,
        code: FunctionCode,
        launch: Launch,
        chunk: Chunk,
        lanes: np.ndarray | None,
        local_base: int,
        depth: int,
    ) -> None:
        self.code = code
        self.launch = launch
        self.chunk = chunk
        self.lanes = lanes
        self.n = n = chunk.n if lanes is None else len(lanes)
        self.regs = [np.zeros(n, dtype=dt) for dt in code.reg_dtypes]
        self.params = np.zeros((n, code.param_size), dtype=np.uint8) if code.param_size else None
        self.state = np.zeros(n, dtype=np.int8)
        self.pc = np.zeros(n, dtype=np.int32)
        self.local_base = local_base
        self.local_top = local_base + code.local_size
        chunk.ensure_local(self.local_top - LOCAL_STACK_BASE)
        self.depth = depth
        self.force = False
        self.bar_pc: np.ndarray | None = None
        self.bar_id: np.ndarray | None = None
        self.bar_count: np.ndarray | None = None
        self.bar_value: np.ndarray | None = None
        self.arrivals: np.ndarray | None = None
        self.cache: dict[str, np.ndarray] = {}
        self.cc: np.ndarray | None = None
        self.stop = _NO_PC
        self.below = False
        self.yielded = False

    def carry(self) -> np.ndarray:
        """The per-lane carry flag (CC.CF) of ``add.cc``/``addc`` chains."""
        if self.cc is None:
            self.cc = np.zeros(self.n, dtype=np.uint32)
        return self.cc

    # -- lane mappings --------------------------------------------------------

    def chunk_lanes(self, act: Any) -> np.ndarray:
        """Chunk lane index of each selected frame lane."""
        if self.lanes is None:
            return self.chunk.lane_index if act is ALL else act
        return self.lanes if act is ALL else self.lanes[act]

    def global_ids(self, act: Any) -> np.ndarray:
        return self.chunk_lanes(act) + self.chunk.first_global

    def special(self, name: str) -> np.ndarray:
        v = self.cache.get(name)
        if v is None:
            v = self.chunk.special(name)
            if self.lanes is not None:
                v = v[self.lanes]
            self.cache[name] = v
        return v

    def per_lane(self, name: str, chunk_array: np.ndarray) -> np.ndarray:
        """A chunk-level per-lane array gathered to this frame's lanes (cached)."""
        if self.lanes is None:
            return chunk_array
        v = self.cache.get(name)
        if v is None:
            v = chunk_array[self.lanes]
            self.cache[name] = v
        return v

    def position(self) -> np.ndarray:
        """Frame lane index of every chunk lane (-1 where the lane is not in the frame)."""
        v = self.cache.get("@position")
        if v is None:
            if self.lanes is None:
                v = self.chunk.lane_index
            else:
                v = np.full(self.chunk.n, -1, dtype=np.int64)
                v[self.lanes] = np.arange(self.n, dtype=np.int64)
            self.cache["@position"] = v
        return v

    def alive(self) -> np.ndarray:
        return self.state < DONE

    def describe_lane(self, i: int) -> str:
        thread, block = self.launch.info.thread_of(int(self.global_ids(np.array([i]))[0]))
        return f"block ({block[0]}, {block[1]}, {block[2]}), thread ({thread[0]}, {thread[1]}, {thread[2]})"


# ---------------------------------------------------------------------------
# running


def run_frame(fr: Frame) -> None:
    """Run a frame until every lane has returned or exited."""
    ops = fr.code.ops
    act: Any = ALL
    nact = fr.n
    cur = 0
    stop = _NO_PC  # the smallest PC of other lanes: reaching it merges with them
    spins = 0
    count = 0
    try:
        while True:
            if act is None:
                act, nact, cur = schedule(fr)
                if act is None:
                    return
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
            if act is not None and cur <= before and (stop != _NO_PC or fr.below):
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
    finally:
        fr.launch.count += count


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
            pcs = np.where(running, pc, _NO_PC)
            m = int(pcs.min())
            sel = pcs == m
            if any_waiting:
                sel |= waiting & (pc == m)
                pcs = np.where(waiting, pc, pcs)
            idx = np.flatnonzero(sel)
            if any_waiting:
                state[idx] = RUN
            if len(idx) == fr.n:
                fr.stop = _NO_PC
                fr.below = False
                return ALL, fr.n, m
            pcs[idx] = _NO_PC
            fr.below = False
            if any_waiting:
                low = pcs < m  # only waiting lanes can be below m
                if low.any():
                    fr.below = True
                    pcs[low] = _NO_PC
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
                fr.stop = _NO_PC
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
    return int(pcs.min()) if len(pcs) else _NO_PC


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


def run_launch(launch: Launch) -> None:
    """Run every block of a launch, a chunk of blocks at a time."""
    code = launch.code
    tpb = launch.tpb
    gx, gy, gz = launch.grid
    nblocks_total = gx * gy * gz
    per_lane = code.register_bytes + code.local_size + code.param_size + 64
    lanes = max(tpb, min(MAX_CHUNK_LANES, CHUNK_BYTES // per_lane))
    blocks_per_chunk = max(1, lanes // tpb)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20 * MAX_CALL_DEPTH))
    try:
        first = 0
        while first < nblocks_total:
            nb = min(blocks_per_chunk, nblocks_total - first)
            chunk = Chunk(launch, first, nb, code.local_size)
            frame = Frame(code, launch, chunk, None, LOCAL_STACK_BASE, 0)
            run_frame(frame)
            first += nb
    finally:
        sys.setrecursionlimit(old_limit)


# ---------------------------------------------------------------------------
# control instructions


def _continue(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
    return act, nact, cur + 1


def guard_control(ctx: DecodeContext, instr: nodes.Instruction, run: Any) -> Op:
    """A control op that only runs for the lanes its guard selects."""
    if instr.guard is None:
        return Op(False, run, instr)
    pred = ctx.reader(nodes.Register(instr.guard.register), "pred")
    negated = instr.guard.negated

    def guarded(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        p = pred(fr, act, nact)
        if negated:
            p = ~p
        count = int(np.count_nonzero(p))
        if count == nact:
            return run(fr, act, nact, cur)
        if count == 0:
            return act, nact, cur + 1
        idx = as_index(act, fr.n)
        fr.pc[idx[~p]] = cur + 1
        nxt, nn, npc = run(fr, idx[p], count, cur)
        if nxt is not None:
            fr.pc[as_index(nxt, fr.n)] = npc
        return None, 0, 0

    if hasattr(run, "finish"):
        guarded.finish = run.finish  # type: ignore[attr-defined]
    return Op(False, guarded, instr)


def build_bra(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    if len(instr.operands) != 1 or not isinstance(instr.operands[0], nodes.Symbol):
        raise DecodeError("bra needs one label operand")
    target = ctx.label(instr.operands[0].name)
    if instr.guard is None:
        def jump(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
            return act, nact, target
        return Op(False, jump, instr, jumps=(target,), falls=False)
    pred = ctx.reader(nodes.Register(instr.guard.register), "pred")
    negated = instr.guard.negated

    def branch(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        p = pred(fr, act, nact)
        if negated:
            p = ~p
        taken = int(np.count_nonzero(p))
        if taken == nact:
            return act, nact, target
        if taken == 0:
            return act, nact, cur + 1
        idx = as_index(act, fr.n)
        fr.pc[idx] = np.where(p, target, cur + 1)
        return None, 0, 0

    return Op(False, branch, instr, jumps=(target,))


def build_brx(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    ops = instr.operands
    if len(ops) != 2 or not isinstance(ops[1], nodes.Symbol):
        raise DecodeError("brx.idx needs an index and a .branchtargets label")
    table = ctx.branch_table(ops[1].name)
    targets = np.array([ctx.label(t) for t in table], dtype=np.int32)
    index = ctx.reader(ops[0], "u32")

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        i = index(fr, act, nact)
        if (i >= len(targets)).any():
            bad = int(np.flatnonzero(i >= len(targets))[0])
            raise TrapError(
                f"kernel {fr.launch.kernel}: PTX line {instr.line}: brx.idx index {int(i[bad])} "
                f"out of range (table of {len(targets)})"
            )
        pcs = targets[i]
        if (pcs == pcs[0]).all():
            return act, nact, int(pcs[0])
        fr.pc[as_index(act, fr.n)] = pcs
        return None, 0, 0

    op = guard_control(ctx, instr, run)
    op.jumps = tuple(int(t) for t in targets)
    op.falls = instr.guard is not None
    return op


def implicit_return(function: nodes.Function) -> Op:
    """The return at the end of every function body (falling off the end)."""
    state = EXIT if function.is_kernel else DONE

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        fr.state[act] = state
        return None, 0, 0

    return Op(False, run, None, falls=False)


def build_ret(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    state = EXIT if ctx.code.is_kernel else DONE

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        fr.state[act] = state
        return None, 0, 0

    return _ends(guard_control(ctx, instr, run))


def build_exit(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        fr.state[act] = EXIT
        return None, 0, 0

    return _ends(guard_control(ctx, instr, run))


def build_trap(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        first = int(as_index(act, fr.n)[0])
        raise TrapError(
            f"kernel {fr.launch.kernel}: trap at PTX line {instr.line} "
            f"({fr.describe_lane(first)})"
        )

    return _ends(guard_control(ctx, instr, run))


def _ends(op: Op) -> Op:
    """Mark a ret/exit/trap: only lanes its guard leaves out go on."""
    op.falls = op.instr is not None and op.instr.guard is not None
    return op


def build_noop(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    def run(fr: Frame, act: Any, nact: int) -> None:
        pass

    return Op(True, run, instr)


# -- barriers ------------------------------------------------------------------


def _barrier_state(fr: Frame) -> None:
    if fr.bar_pc is None:
        fr.bar_pc = np.zeros(fr.n, dtype=np.int32)
        fr.bar_id = np.zeros(fr.n, dtype=np.int64)
        fr.bar_count = np.zeros(fr.n, dtype=np.int64)
        fr.bar_value = np.zeros(fr.n, dtype=bool)


def build_barrier(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """bar.sync / barrier.sync / bar.arrive / bar.red (block-wide barriers)."""
    mods = instr.modifiers
    ops = list(instr.operands)
    if "warp" in mods:
        from .warp_ops import build_warp_sync

        return build_warp_sync(ctx, instr)
    if "cluster" in mods:
        # a cluster of one block: arrive is part of the wait that follows
        if "arrive" in mods:
            return build_noop(ctx, instr)
        ops = [nodes.Immediate("0")]
        mods = ("sync",)
    red_op = None
    red_dst = None
    arrive_only = "arrive" in mods
    if not arrive_only and "red" in mods:
        red_op = next((m for m in mods if m in ("popc", "and", "or")), None)
        if red_op is None:
            raise DecodeError("bar.red needs .popc, .and or .or")
        red_dst = ctx.writer(ops[0], "u32" if red_op == "popc" else "pred")
        pred_reader = ctx.reader(ops[-1], "pred")
        ops = ops[1:-1]
    if not ops:
        ops = [nodes.Immediate("0")]
    bar_id = ctx.reader(ops[0], "u32")
    count = ctx.reader(ops[1], "u32") if len(ops) > 1 else None

    if arrive_only:
        def arrive(fr: Frame, act: Any, nact: int) -> None:
            if fr.arrivals is None:
                fr.arrivals = np.zeros((fr.chunk.nblocks, 16), dtype=np.int64)
            rows = fr.per_lane("@block_row", fr.chunk.block_row)[act]
            ids = bar_id(fr, act, nact).astype(np.int64) & 15
            np.add.at(fr.arrivals, (rows, ids), 1)

        return guard_simple(ctx, instr, Op(True, arrive, instr))

    def wait(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        _barrier_state(fr)
        idx = as_index(act, fr.n)
        fr.state[idx] = BAR
        fr.pc[idx] = cur + 1
        fr.bar_pc[idx] = cur
        fr.bar_id[idx] = bar_id(fr, act, nact).astype(np.int64) & 15
        fr.bar_count[idx] = 0 if count is None else count(fr, act, nact).astype(np.int64)
        if red_op is not None:
            fr.bar_value[idx] = pred_reader(fr, act, nact)
        return None, 0, 0

    if red_op is not None:
        def finish(fr: Frame, rel: np.ndarray, keys: np.ndarray, which: np.ndarray) -> None:
            lanes = rel[which]
            k = keys[which]
            values = fr.bar_value[rel]
            # reduce over every released lane of the same block and barrier
            uniq, inverse = np.unique(keys, return_inverse=True)
            trues = np.bincount(inverse, weights=values.astype(np.float64), minlength=len(uniq))
            totals = np.bincount(inverse, minlength=len(uniq))
            pos = np.searchsorted(uniq, k)
            if red_op == "popc":
                result = trues[pos].astype(np.uint32)
            elif red_op == "and":
                result = trues[pos] == totals[pos]
            else:
                result = trues[pos] > 0
            red_dst(fr, lanes, result)

        wait.finish = finish  # type: ignore[attr-defined]
    return guard_control(ctx, instr, wait)


# -- calls ---------------------------------------------------------------------


def build_call(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    ops = list(instr.operands)
    rets: tuple[nodes.Operand, ...] = ()
    i = 0
    if ops and isinstance(ops[0], nodes.ArgumentList):
        rets = ops[0].items
        i = 1
    if i >= len(ops):
        raise DecodeError("call without a target")
    target = ops[i]
    args: tuple[nodes.Operand, ...] = ()
    if i + 1 < len(ops) and isinstance(ops[i + 1], nodes.ArgumentList):
        args = ops[i + 1].items
    arg_moves = [_call_operand(ctx, a) for a in args]
    ret_moves = [_call_operand(ctx, r) for r in rets]
    program = ctx.symbols

    if isinstance(target, nodes.Symbol):
        b = ctx.lookup(target.name)
        if b.kind != "func":
            raise DecodeError(f"call target {target.name} is not a function")
        ctx.code.callees.add(b.name)
        function = b.node
        if function.body is None:
            from .device_calls import builtin_call

            return guard_control(ctx, instr, builtin_call(ctx, instr, function, arg_moves, ret_moves))

        name = b.name

        def direct(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
            code = program.code(name)
            return _invoke(fr, act, nact, cur, [(code, None)], arg_moves, ret_moves, instr)

        return _joining(guard_control(ctx, instr, direct))

    address = ctx.reader(target, "u64")

    def indirect(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        addrs = address(fr, act, nact)
        groups = []
        uniq = np.unique(addrs)
        for a in uniq:
            fn = program.function_at(int(a))
            if fn is None:
                raise TrapError(
                    f"kernel {fr.launch.kernel}: PTX line {instr.line}: indirect call to "
                    f"{int(a):#x}, which is not a function"
                )
            if fn.body is None:
                raise TrapError(
                    f"kernel {fr.launch.kernel}: PTX line {instr.line}: indirect call to the "
                    f"external function {fn.name}"
                )
            code = program.code(fn.name)
            if code.errors:
                program.raise_errors(fr.launch.kernel, code)
            sel = None if len(uniq) == 1 else np.flatnonzero(addrs == a)
            groups.append((code, sel))
        return _invoke(fr, act, nact, cur, groups, arg_moves, ret_moves, instr)

    return _joining(guard_control(ctx, instr, indirect))


def _joining(op: Op) -> Op:
    """A call that the lanes which can still reach it run together.

    Before the callee runs for a group of lanes, lanes already waiting at
    this call join the group; if other runnable lanes of the frame can still
    reach the call without a loop's back edge (:class:`Flow`), the group
    waits (state CALL) for them.  Lanes whose guard is false take part in the
    gathering like the others, then skip the call."""
    inner = op.run

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        forced = fr.force
        if forced:
            fr.force = False
        if act is not ALL:
            state = fr.state
            idx = act
            here = ((state == CALL) | (state == RUN)) & (fr.pc == cur)
            if here.any():
                state[here] = RUN
                idx = np.union1d(idx, np.flatnonzero(here))
            if not forced and not fr.yielded:
                others = state == RUN
                others[idx] = False
                if others.any() and _flow(fr.code).reaches(cur, fr.pc[others]):
                    state[idx] = CALL
                    fr.pc[idx] = cur
                    return None, 0, 0
            nact = len(idx)
            act = ALL if nact == fr.n else idx
        return inner(fr, act, nact, cur)

    op.run = run
    op.joins = True
    return op


class Flow:
    """The control flow of a function, for gathering lanes at calls.

    Basic blocks, with the back edges of a depth-first search from the entry
    removed (the back edges of loops, in structured code): what remains is
    acyclic, and a lane at PC ``p`` *can still reach* the call at ``c`` when a
    path without back edges leads from ``p`` to ``c``, that is, in the same
    iteration of every loop around them.  A lane on an out-of-line block (the
    slow path of a check, code that ``-G`` places after the function's
    return) that branches back is such a lane; one that has left the loop or
    gone on to the next iteration is not."""

    def __init__(self, code: FunctionCode) -> None:
        ops = code.ops
        n = len(ops)
        leaders = {0}
        for i, op in enumerate(ops):
            if op.jumps or not op.falls:
                leaders.update(t for t in op.jumps if 0 <= t < n)
                if i + 1 < n:
                    leaders.add(i + 1)
        starts = np.array(sorted(leaders), dtype=np.int64)
        nb = len(starts)
        self.block_of = np.searchsorted(starts, np.arange(n), side="right") - 1
        ends = np.append(starts[1:], n)
        succ: list[list[int]] = []
        calls = [0] * nb
        call_bit: dict[int, int] = {}
        for b in range(nb):
            last = ops[int(ends[b]) - 1]
            out = [int(self.block_of[t]) for t in last.jumps if 0 <= t < n]
            if last.falls and ends[b] < n:
                out.append(b + 1)
            succ.append(out)
            for i in range(int(starts[b]), int(ends[b])):
                if ops[i].joins:
                    call_bit[i] = len(call_bit)
                    calls[b] |= 1 << call_bit[i]
        # depth-first search (iterative), postorder; edges to a block on the
        # stack are back edges
        color = [0] * nb  # 0 new, 1 on the stack, 2 done
        post: list[int] = []
        forward: list[list[int]] = [[] for _ in range(nb)]
        for root in range(nb):
            if color[root]:
                continue
            color[root] = 1
            stack = [(root, 0)]
            while stack:
                b, k = stack[-1]
                if k < len(succ[b]):
                    stack[-1] = (b, k + 1)
                    s = succ[b][k]
                    if color[s] == 1:
                        continue  # a back edge
                    forward[b].append(s)
                    if color[s] == 0:
                        color[s] = 1
                        stack.append((s, 0))
                else:
                    color[b] = 2
                    post.append(b)
                    stack.pop()
        # calls reachable from the end of each block (successors first)
        reach = [0] * nb
        after = [0] * nb
        for b in post:
            m = 0
            for s in forward[b]:
                m |= reach[s]
            after[b] = m
            reach[b] = m | calls[b]
        self.after = after
        self.call_bit = call_bit
        self.starts = starts
        self.cache: dict[int, np.ndarray] = {}

    def reaching(self, c: int) -> np.ndarray:
        """Per PC: whether a lane there can still reach the call at ``c``."""
        v = self.cache.get(c)
        if v is None:
            bit = self.call_bit[c]
            per_block = np.array([(m >> bit) & 1 for m in self.after], dtype=bool)
            v = per_block[self.block_of]
            b = int(self.block_of[c])
            v[int(self.starts[b]): c] = True
            self.cache[c] = v
        return v

    def reaches(self, c: int, pcs: np.ndarray) -> bool:
        return bool(self.reaching(c)[pcs].any())


def _flow(code: FunctionCode) -> Flow:
    if code.flow is None:
        code.flow = Flow(code)
    return code.flow


class _CallOperand:
    """How one call argument / return value is held by the caller."""

    __slots__ = ("kind", "offset", "size", "slot", "dtype", "reader")

    def __init__(self, kind: str, offset: int = 0, size: int = 0, slot: int = -1,
                 dtype: Any = None, reader: Any = None) -> None:
        self.kind = kind
        self.offset = offset
        self.size = size
        self.slot = slot
        self.dtype = dtype
        self.reader = reader


def _call_operand(ctx: DecodeContext, operand: nodes.Operand) -> _CallOperand:
    if isinstance(operand, nodes.Symbol):
        b = ctx.lookup(operand.name)
        if b.kind == "param":
            return _CallOperand("param", offset=b.offset, size=b.size)
        if b.kind == "reg":
            return _CallOperand("reg", slot=b.slot, dtype=b.dtype, size=b.dtype.itemsize)
        raise DecodeError(f"call operand {operand.name} is not a .param variable")
    if isinstance(operand, nodes.Register):
        b = ctx.lookup(operand.name)
        if b.kind == "reg":
            return _CallOperand("reg", slot=b.slot, dtype=b.dtype, size=b.dtype.itemsize)
    if isinstance(operand, nodes.Immediate):
        return _CallOperand("imm", reader=operand)
    raise DecodeError(f"unsupported call operand {operand}")


def _arg_bytes(fr: Frame, idx: np.ndarray, move: _CallOperand, size: int) -> np.ndarray:
    """The caller's bytes of one argument for lanes ``idx``: (len(idx), size) uint8."""
    if move.kind == "param":
        return fr.params[idx, move.offset: move.offset + min(size, move.size)]
    if move.kind == "reg":
        v = np.ascontiguousarray(fr.regs[move.slot][idx])
        return v.view(np.uint8).reshape(len(idx), -1)[:, :size]
    value = move.reader.value
    raw = int(value) if not isinstance(value, float) else 0
    b = (raw & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return np.broadcast_to(np.frombuffer(b, np.uint8), (len(idx), size))


def _invoke(fr: Frame, act: Any, nact: int, cur: int, groups: list, arg_moves: list,
            ret_moves: list, instr: nodes.Instruction) -> tuple[Any, int, int]:
    if fr.depth + 1 > MAX_CALL_DEPTH:
        raise StackOverflow(
            f"kernel {fr.launch.kernel}: PTX line {instr.line}: calls nested deeper than "
            f"{MAX_CALL_DEPTH} (runaway recursion?)"
        )
    idx = as_index(act, fr.n)
    exited = np.zeros(nact, dtype=bool)
    any_exit = False
    for code, sel in groups:
        sub = idx if sel is None else idx[sel]
        callee = Frame(code, fr.launch, fr.chunk, fr.chunk_lanes(sub),
                       align_up(fr.local_top, 16), fr.depth + 1)
        if len(arg_moves) != len(code.params) or len(ret_moves) > len(code.returns):
            raise UnsupportedInstruction(
                fr.launch.kernel, instr.line, instr.opcode,
                f"{code.name} takes {len(code.params)} parameters and returns "
                f"{len(code.returns)} values; called with {len(arg_moves)} and {len(ret_moves)}")
        for move, dst in zip(arg_moves, code.params, strict=True):
            _copy_in(fr, sub, move, callee, dst)
        run_frame(callee)
        gone = callee.state == EXIT
        if gone.any():
            any_exit = True
            if sel is None:
                exited |= gone
            else:
                exited[sel] |= gone
        keep = np.flatnonzero(~gone)
        for move, src in zip(ret_moves, code.returns, strict=False):
            _copy_out(callee, keep, src, fr, sub[keep], move)
    if not any_exit:
        return act, nact, cur + 1
    fr.state[idx[exited]] = EXIT
    survivors = idx[~exited]
    if len(survivors) == 0:
        return None, 0, 0
    return survivors, len(survivors), cur + 1


def _copy_in(fr: Frame, sub: np.ndarray, move: _CallOperand, callee: Frame, dst: Any) -> None:
    if dst.kind == "param":
        data = _arg_bytes(fr, sub, move, dst.size)
        callee.params[:, dst.offset: dst.offset + data.shape[1]] = data
    else:  # a .reg parameter
        data = _arg_bytes(fr, sub, move, dst.dtype.itemsize)
        raw = np.ascontiguousarray(data).view(dst.dtype).reshape(-1)
        callee.regs[dst.slot][:] = raw


def _copy_out(callee: Frame, keep: np.ndarray, src: Any, fr: Frame, dst_lanes: np.ndarray,
              move: _CallOperand) -> None:
    if src.kind == "param":
        data = callee.params[keep, src.offset: src.offset + src.size]
    else:
        data = np.ascontiguousarray(callee.regs[src.slot][keep]).view(np.uint8).reshape(len(keep), -1)
    if move.kind == "param":
        width = min(move.size, data.shape[1])
        fr.params[dst_lanes, move.offset: move.offset + width] = data[:, :width]
    elif move.kind == "reg":
        width = move.dtype.itemsize
        padded = np.zeros((len(keep), max(width, data.shape[1])), dtype=np.uint8)
        padded[:, : data.shape[1]] = data
        fr.regs[move.slot][dst_lanes] = np.ascontiguousarray(padded[:, :width]).view(move.dtype).reshape(-1)
    else:
        raise DecodeError("a call cannot return into an immediate")
