"""Warp-level instructions: shfl, vote, match, redux, activemask, elect, bar.warp.sync.

The ``.sync`` forms wait until every live lane of the member mask has reached
the instruction (see the executor's scheduling notes); then they compute over
the lanes that are there, warp by warp, vectorised across warps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from .decoded import DecodeError, Op
from .decoder import DecodeContext, guard_simple
from .frames import ALL, DONE, WARP, Frame, as_index
from .operands import const_reader

_FULL = np.array(0xFFFF_FFFF, dtype=np.uint32)


def _lane_info(fr: Frame, act: Any) -> tuple[np.ndarray, np.ndarray]:
    """(chunk warp id, lane id) of each selected lane."""
    chunk = fr.chunk
    w = fr.per_lane("@warp_id", chunk.warp_id)[act]
    lane = fr.per_lane("@laneid", chunk.laneid)[act]
    return w, lane


def _bits(lane: np.ndarray) -> np.ndarray:
    return np.left_shift(np.uint64(1), lane.astype(np.uint64))


def _per_warp_or(w: np.ndarray, bits: np.ndarray, nwarps: int) -> np.ndarray:
    """OR of distinct lane bits per warp (a sum, since the bits are distinct)."""
    s = np.bincount(w, weights=bits.astype(np.float64), minlength=nwarps)
    return s.astype(np.uint64)


def _split_ready(fr: Frame, act: Any, nact: int,
                 masks: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Which selected lanes may run (their whole member mask is here): returns
    (positions in ``act`` that run or None for all, positions that wait)."""
    if fr.force:
        fr.force = False
        return None, None
    if act is ALL:
        return None, None
    chunk = fr.chunk
    w, lane = _lane_info(fr, act)
    present = _per_warp_or(w, _bits(lane), chunk.nwarps)
    alive_idx = np.flatnonzero(fr.state < DONE)
    aw, alane = _lane_info(fr, alive_idx)
    alive = _per_warp_or(aw, _bits(alane), chunk.nwarps)
    need = masks.astype(np.uint64) & alive[w]
    ok = (need & ~present[w]) == 0
    if ok.all():
        return None, None
    return np.flatnonzero(ok), np.flatnonzero(~ok)


def _mask_reader(ctx: DecodeContext, operand: nodes.Operand | None) -> Any:
    if operand is None:
        return const_reader(_FULL)
    return ctx.reader(operand, "b32")


def _sync_op(ctx: DecodeContext, instr: nodes.Instruction, mask: Any, body: Any) -> Op:
    """A warp-synchronous control op: wait for the member mask, then ``body``.

    A lane whose guard is false still takes part in the synchronisation (it
    has reached the instruction); only the lanes whose guard is true compute.
    """
    guard = None
    if instr.guard is not None:
        guard = ctx.reader(nodes.Register(instr.guard.register), "pred")
        negated = instr.guard.negated

    def compute(fr: Frame, act: Any, nact: int, masks: np.ndarray) -> None:
        if guard is None:
            body(fr, act, nact, masks)
            return
        p = np.asarray(guard(fr, act, nact), dtype=bool)
        if negated:
            p = ~p
        count = int(np.count_nonzero(p))
        if count == nact:
            body(fr, act, nact, masks)
        elif count:
            sub = np.flatnonzero(p) if act is ALL else act[p]
            body(fr, sub, count, masks[p])

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        masks = np.asarray(mask(fr, act, nact), dtype=np.uint32)
        ready, waiting = _split_ready(fr, act, nact, masks)
        if waiting is None:
            compute(fr, act, nact, masks)
            return act, nact, cur + 1
        idx = as_index(act, fr.n)
        wait_lanes = idx[waiting]
        fr.state[wait_lanes] = WARP
        fr.pc[wait_lanes] = cur
        # a waiting lane runs this instruction again when its warp-mates
        # arrive: it executes it once, so this attempt does not count
        fr.launch.count -= len(wait_lanes)
        if len(ready):
            run_lanes = idx[ready]
            compute(fr, run_lanes, len(run_lanes), masks[ready])
            fr.pc[run_lanes] = cur + 1
        return None, 0, 0

    return Op(False, run, instr)


def _warp_runs(w: np.ndarray) -> np.ndarray:
    """Start positions of runs of equal warp ids (lanes are in ascending order)."""
    if len(w) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([[0], np.flatnonzero(w[1:] != w[:-1]) + 1])


# ---------------------------------------------------------------------------


def build_shfl(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    mode = next((m for m in mods if m in ("up", "down", "bfly", "idx")), None)
    if mode is None:
        raise DecodeError("shfl needs .up, .down, .bfly or .idx")
    type_ = next((m for m in mods if m in ("b32", "f32", "u32", "s32")), "b32")
    ops = list(instr.operands)
    sync = "sync" in mods
    if len(ops) != (5 if sync else 4):
        raise DecodeError(f"shfl expects {5 if sync else 4} operands")
    dst = ops[0]
    if isinstance(dst, nodes.PredicatePair):
        write = ctx.writer(dst.first, type_)
        write_p = ctx.writer(dst.second, "pred")
    else:
        write = ctx.writer(dst, type_)
        write_p = None
    a = ctx.reader(ops[1], type_)
    b = ctx.reader(ops[2], "u32")
    c = ctx.reader(ops[3], "u32")
    mask = _mask_reader(ctx, ops[4] if sync else None)

    def body(fr: Frame, act: Any, nact: int, masks: np.ndarray) -> None:
        chunk = fr.chunk
        cl = fr.chunk_lanes(act)
        lane = chunk.laneid[cl].astype(np.int64)
        bval = b(fr, act, nact).astype(np.int64) & 31
        cv = c(fr, act, nact).astype(np.int64)
        segmask = (cv >> 8) & 0x1F
        clamp = cv & 0x1F
        max_lane = (lane & segmask) | (clamp & ~segmask)
        min_lane = lane & segmask
        if mode == "up":
            j = lane - bval
            p = j >= max_lane
        elif mode == "down":
            j = lane + bval
            p = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            p = j <= max_lane
        else:
            j = min_lane | (bval & ~segmask)
            p = j <= max_lane
        j = np.where(p, j, lane)
        exists = j < chunk.warp_size[cl]
        src_cl = np.where(exists, cl - lane + j, cl)
        pos = fr.position()[src_cl]
        own = as_index(act, fr.n)
        src = np.where(pos >= 0, pos, own)
        values = np.array(a(fr, src, nact))
        write(fr, act, values)
        if write_p is not None:
            write_p(fr, act, p)

    if not sync:
        return guard_simple(
            ctx, instr, Op(True, lambda fr, act, nact: body(fr, act, nact, None), instr))
    return _sync_op(ctx, instr, mask, body)


def build_vote(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    mode = next((m for m in mods if m in ("all", "any", "uni", "ballot")), None)
    if mode is None:
        raise DecodeError("vote needs .all, .any, .uni or .ballot")
    sync = "sync" in mods
    ops = list(instr.operands)
    if len(ops) != (3 if sync else 2):
        raise DecodeError("wrong number of operands for vote")
    write = ctx.writer(ops[0], "b32" if mode == "ballot" else "pred")
    pred = ctx.reader(ops[1], "pred")
    mask = _mask_reader(ctx, ops[2] if sync else None)

    def body(fr: Frame, act: Any, nact: int, masks: np.ndarray | None) -> None:
        if masks is None:
            masks = np.full(nact, 0xFFFF_FFFF, dtype=np.uint32)
        nw = fr.chunk.nwarps
        w, lane = _lane_info(fr, act)
        bits = _bits(lane)
        p = np.asarray(pred(fr, act, nact), dtype=bool)
        present = _per_warp_or(w, bits, nw)[w]
        trues = _per_warp_or(w[p], bits[p], nw)[w]
        m = masks.astype(np.uint64)
        if mode == "ballot":
            write(fr, act, (trues & m).astype(np.uint32))
            return
        part = m & present
        if mode == "all":
            r = (part & ~trues) == 0
        elif mode == "any":
            r = (part & trues) != 0
        else:
            r = ((part & trues) == 0) | ((part & ~trues) == 0)
        write(fr, act, r)

    if not sync:
        return guard_simple(
            ctx, instr, Op(True, lambda fr, act, nact: body(fr, act, nact, None), instr))
    return _sync_op(ctx, instr, mask, body)


def build_match(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    mode = next((m for m in mods if m in ("any", "all")), None)
    type_ = next((m for m in mods if m in ("b32", "b64")), None)
    if mode is None or type_ is None or "sync" not in mods:
        raise DecodeError("match needs .sync, .any or .all, and .b32 or .b64")
    ops = list(instr.operands)
    if len(ops) != 3:
        raise DecodeError("match expects three operands")
    dst = ops[0]
    write_p = None
    if isinstance(dst, nodes.PredicatePair):
        write = ctx.writer(dst.first, "b32")
        write_p = ctx.writer(dst.second, "pred")
    else:
        write = ctx.writer(dst, "b32")
    value = ctx.reader(ops[1], type_)
    mask = _mask_reader(ctx, ops[2])

    def body(fr: Frame, act: Any, nact: int, masks: np.ndarray) -> None:
        nw = fr.chunk.nwarps
        w, lane = _lane_info(fr, act)
        bits = _bits(lane)
        v = np.asarray(value(fr, act, nact))
        m = masks.astype(np.uint64)
        if mode == "any":
            order = np.lexsort((v, w))
            sw = w[order]
            sv = v[order]
            change = (sw[1:] != sw[:-1]) | (sv[1:] != sv[:-1])
            starts = np.concatenate([[0], np.flatnonzero(change) + 1])
            group_bits = np.add.reduceat(bits[order], starts)
            lengths = np.diff(np.append(starts, nact))
            result = np.empty(nact, dtype=np.uint64)
            result[order] = np.repeat(group_bits, lengths)
            write(fr, act, (result & m).astype(np.uint32))
            return
        present = _per_warp_or(w, bits, nw)[w]
        runs = _warp_runs(w)
        lengths = np.diff(np.append(runs, nact))
        lo = np.repeat(np.minimum.reduceat(v, runs), lengths)
        hi = np.repeat(np.maximum.reduceat(v, runs), lengths)
        same = lo == hi
        write(fr, act, np.where(same, present & m, 0).astype(np.uint32))
        if write_p is not None:
            write_p(fr, act, same)

    return _sync_op(ctx, instr, mask, body)


def build_redux(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    op = next((m for m in mods if m in ("add", "min", "max", "and", "or", "xor")), None)
    type_ = next((m for m in mods if m in ("u32", "s32", "b32")), None)
    if op is None or type_ is None or "sync" not in mods:
        raise DecodeError("redux.sync needs an operation and .u32, .s32 or .b32")
    ops = list(instr.operands)
    if len(ops) != 3:
        raise DecodeError("redux.sync expects three operands")
    write = ctx.writer(ops[0], type_)
    value = ctx.reader(ops[1], type_)
    mask = _mask_reader(ctx, ops[2])
    ufunc = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and,
             "or": np.bitwise_or, "xor": np.bitwise_xor}[op]

    def body(fr: Frame, act: Any, nact: int, masks: np.ndarray) -> None:
        w, _ = _lane_info(fr, act)
        v = np.asarray(value(fr, act, nact))
        if op == "add":
            v = v.astype(np.int64 if type_ == "s32" else np.uint64)
        runs = _warp_runs(w)
        lengths = np.diff(np.append(runs, nact))
        r = np.repeat(ufunc.reduceat(v, runs), lengths)
        if op == "add":
            r = (r.astype(np.uint64) & np.uint64(0xFFFF_FFFF)).astype(np.uint32)
        r = r.astype(np.uint32)
        write(fr, act, r.view(np.int32) if type_ == "s32" else r)

    return _sync_op(ctx, instr, mask, body)


def build_activemask(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    if len(instr.operands) != 1:
        raise DecodeError("activemask expects one operand")
    write = ctx.writer(instr.operands[0], "b32")

    def run(fr: Frame, act: Any, nact: int) -> None:
        w, lane = _lane_info(fr, act)
        present = _per_warp_or(w, _bits(lane), fr.chunk.nwarps)[w]
        write(fr, act, present.astype(np.uint32))

    return guard_simple(ctx, instr, Op(True, run, instr))


def build_elect(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    ops = list(instr.operands)
    if len(ops) != 2 or not isinstance(ops[0], nodes.PredicatePair):
        raise DecodeError("elect.sync expects d|p, membermask")
    write = ctx.writer(ops[0].first, "b32")
    write_p = ctx.writer(ops[0].second, "pred")
    mask = _mask_reader(ctx, ops[1])

    def body(fr: Frame, act: Any, nact: int, masks: np.ndarray) -> None:
        w, lane = _lane_info(fr, act)
        present = _per_warp_or(w, _bits(lane), fr.chunk.nwarps)[w] & masks.astype(np.uint64)
        low = present & (~present + np.uint64(1))  # lowest set bit
        leader = np.log2(np.maximum(low, 1).astype(np.float64)).astype(np.uint32)
        write(fr, act, leader)
        write_p(fr, act, (lane == leader) & (present != 0))

    return _sync_op(ctx, instr, mask, body)


def build_warp_sync(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """``bar.warp.sync membermask``: wait for the member lanes, nothing else."""
    if len(instr.operands) != 1:
        raise DecodeError("bar.warp.sync expects a member mask")
    mask = _mask_reader(ctx, instr.operands[0])

    def body(fr: Frame, act: Any, nact: int, masks: np.ndarray) -> None:
        pass

    return _sync_op(ctx, instr, mask, body)
