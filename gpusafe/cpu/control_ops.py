"""Control instructions: ``bra``, ``brx.idx``, ``ret``, ``exit``, ``trap`` and
the instructions that do nothing on the CPU device (fences, hints, prefetches).

A control op returns where its lanes go: ``(act, nact, pc)`` when they stay
together, ``(None, 0, 0)`` after writing each lane's PC (or state) into the
frame, for the scheduler to pick the next group (:mod:`gpusafe.cpu.scheduler`).
Each op also tells the scheduler's analyses where it may jump
(:attr:`Op.jumps`) and whether lanes may fall through (:attr:`Op.falls`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from .decoded import DecodeError, Op
from .decoder import DecodeContext
from .errors import TrapError
from .frames import DONE, EXIT, Frame, as_index


def guard_predicate(ctx: DecodeContext,
                    instr: nodes.Instruction) -> Callable[[Frame, Any, int], np.ndarray] | None:
    """The lanes an instruction's guard (``@%p``, ``@!%p``) selects, per lane
    of ``act``; None for an unguarded instruction."""
    if instr.guard is None:
        return None
    pred = ctx.reader(nodes.Register(instr.guard.register), "pred")
    if not instr.guard.negated:
        return pred
    return lambda fr, act, nact: ~pred(fr, act, nact)


def guard_control(ctx: DecodeContext, instr: nodes.Instruction, run: Any) -> Op:
    """A control op that only runs for the lanes its guard selects."""
    pred = guard_predicate(ctx, instr)
    if pred is None:
        return Op(False, run, instr)

    def guarded(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        p = pred(fr, act, nact)
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
