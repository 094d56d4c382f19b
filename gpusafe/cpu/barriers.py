"""Block-wide barriers: ``bar.sync``/``barrier.sync`` (with a thread count),
``bar.arrive`` and ``bar.red.{popc,and,or}``.

A lane at a barrier waits (state BAR); the scheduler releases each block whose
live lanes have all arrived (:func:`gpusafe.cpu.scheduler.release_barriers`)
and calls the op's ``finish`` for ``bar.red``, which reduces over the
released lanes of each block.  A cluster of one block makes
``barrier.cluster`` a block barrier (its ``arrive`` is part of the wait).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from .control_ops import build_noop, guard_control
from .decoded import DecodeError, Op
from .decoder import DecodeContext, guard_simple
from .frames import BAR, Frame, as_index


def _barrier_state(fr: Frame) -> None:
    if fr.bar_pc is None:
        fr.bar_pc = np.zeros(fr.n, dtype=np.int32)
        fr.bar_id = np.zeros(fr.n, dtype=np.int64)
        fr.bar_count = np.zeros(fr.n, dtype=np.int64)
        fr.bar_value = np.zeros(fr.n, dtype=bool)


def build_barrier(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """bar.sync / barrier.sync / bar.arrive / bar.red (block-wide barriers; the
    instruction table sends ``bar.warp.sync`` to the warp-level ops)."""
    mods = instr.modifiers
    ops = list(instr.operands)
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
