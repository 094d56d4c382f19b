"""``call``: direct and indirect calls of device functions, and calls of the
external functions the CUDA runtime provides (:mod:`gpusafe.cpu.device_calls`).

The callee runs as a nested frame for exactly the calling lanes, with its own
registers, its own ``.local`` frame above the caller's on each thread's stack,
and a per-lane ``.param`` area; arguments and return values are copied in and
out (:mod:`gpusafe.cpu.call_operands`).  Recursion is nesting; ``exit``
inside a callee ends the thread in every frame.  A call is a gathering point
for the lanes that can still reach it (:mod:`gpusafe.cpu.call_gathering`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from instrument import nodes

from .call_gathering import gathering
from .call_operands import CallOperand, call_operand, copy_in, copy_out
from .control_ops import guard_control
from .decoded import DecodeError, FunctionCode, Op, align_up
from .decoder import DecodeContext
from .device_calls import builtin_call
from .errors import StackOverflow, TrapError, UnsupportedInstruction
from .frames import ALL, CALL, EXIT, MAX_CALL_DEPTH, RUN, Frame, as_index
from .scheduler import run_frame


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
    arg_moves = [call_operand(ctx, a) for a in args]
    ret_moves = [call_operand(ctx, r) for r in rets]
    program = ctx.symbols

    if isinstance(target, nodes.Symbol):
        b = ctx.lookup(target.name)
        if b.kind != "func":
            raise DecodeError(f"call target {target.name} is not a function")
        ctx.code.callees.add(b.name)
        function = b.node
        if function.body is None:
            body = builtin_call(ctx, instr, function, arg_moves, ret_moves)
            return guard_control(ctx, instr, body)

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
    reach the call without a loop's back edge (:mod:`gpusafe.cpu.call_gathering`),
    the group waits (state CALL) for them.  Lanes whose guard is false take part in the
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
                if others.any() and gathering(fr.code).reaches(cur, fr.pc[others]):
                    state[idx] = CALL
                    fr.pc[idx] = cur
                    return None, 0, 0
            nact = len(idx)
            act = ALL if nact == fr.n else idx
        return inner(fr, act, nact, cur)

    op.run = run
    op.joins = True
    return op


def _invoke(fr: Frame, act: Any, nact: int, cur: int,
            groups: list[tuple[FunctionCode, np.ndarray | None]], arg_moves: list[CallOperand],
            ret_moves: list[CallOperand], instr: nodes.Instruction) -> tuple[Any, int, int]:
    """Run the callee(s) for the calling lanes: each group of lanes (an indirect
    call may reach several functions) in a nested frame of its own."""
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
            copy_in(fr, sub, move, callee, dst)
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
            copy_out(callee, keep, src, fr, sub[keep], move)
    if not any_exit:
        return act, nact, cur + 1
    fr.state[idx[exited]] = EXIT
    survivors = idx[~exited]
    if len(survivors) == 0:
        return None, 0, 0
    return survivors, len(survivors), cur + 1
