"""``call``: direct and indirect calls of device functions, and calls of the
external functions the CUDA runtime provides (:mod:`gpusafe.cpu.device_calls`).

The callee runs as a nested frame for exactly the calling lanes, with its own
registers, its own ``.local`` frame above the caller's on each thread's stack,
and a per-lane ``.param`` area; arguments and return values are copied in and
out (:mod:`gpusafe.cpu.call_operands`).  A call op does not run its callee
itself: it hands the scheduler a pending call (:class:`_Call`), whose callee
frames run on the scheduler's explicit stack, so a recursion is as deep as
the thread's stack allows (``CU_LIMIT_STACK_SIZE``; a deeper one is a
:class:`~gpusafe.cpu.errors.StackOverflow` naming the depth), never bounded
by Python's.  ``exit`` inside a callee ends the thread in every frame.  A call is a gathering point
for the lanes that can still reach it (:mod:`gpusafe.cpu.call_gathering`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from .call_gathering import gathering
from .call_operands import CallOperand, call_operand, copy_in, copy_out
from .control_ops import guard_control, guard_predicate
from .decoded import DecodeError, FunctionCode, Op, align_up
from .decoder import DecodeContext
from .device_calls import builtin_call
from .errors import StackOverflow, TrapError, UnsupportedInstruction
from .frames import ALL, CALL, CALL_FRAME_BYTES, CALLING, EXIT, RUN, Frame, as_index
from .memory import LOCAL_STACK_BASE

_Target = tuple[FunctionCode, np.ndarray | None]
"""A function a call reaches and which of the calling lanes go there (None: all)."""


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

        def direct(fr: Frame, act: Any, nact: int) -> list[_Target]:
            return [(program.code(name), None)]

        return _joining(_call_op(ctx, instr, direct, arg_moves, ret_moves))

    address = ctx.reader(target, "u64")

    def indirect(fr: Frame, act: Any, nact: int) -> list[_Target]:
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
        return groups

    return _joining(_call_op(ctx, instr, indirect, arg_moves, ret_moves))


def _call_op(ctx: DecodeContext, instr: nodes.Instruction,
             targets: Callable[[Frame, Any, int], list[_Target]],
             arg_moves: list[CallOperand], ret_moves: list[CallOperand]) -> Op:
    """The call itself, for the lanes its guard selects: the callees go to the
    scheduler as the frame's pending call (:class:`_Call`)."""
    pred = guard_predicate(ctx, instr)

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        guarded = False
        if pred is not None:
            p = pred(fr, act, nact)
            count = int(np.count_nonzero(p))
            if count == 0:
                return act, nact, cur + 1
            if count < nact:
                idx = as_index(act, fr.n)
                fr.pc[idx[~p]] = cur + 1
                act, nact, guarded = idx[p], count, True
        fr.call = _Call(fr, act, nact, cur, targets(fr, act, nact), arg_moves, ret_moves,
                        instr, guarded)
        return CALLING, 0, 0

    return Op(False, run, instr)


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
                    # they run the call once, later: this attempt does not count
                    fr.launch.count -= nact
                    return None, 0, 0
            fr.launch.count += len(idx) - nact  # the lanes that waited here run now
            nact = len(idx)
            act = ALL if nact == fr.n else idx
        return inner(fr, act, nact, cur)

    op.run = run
    op.joins = True
    return op


class _Call:
    """One call made by lanes of a frame (a :class:`~gpusafe.cpu.frames.PendingCall`):
    each group of lanes (an indirect call may reach several functions) runs
    its callee in a nested frame of its own, one after the other, on the
    scheduler's stack; arguments go in as a callee starts, results come back
    as it returns."""

    __slots__ = ("fr", "act", "nact", "pc", "idx", "groups", "next", "arg_moves", "ret_moves",
                 "instr", "guarded", "exited", "callee", "sel", "sub")

    def __init__(self, fr: Frame, act: Any, nact: int, pc: int, groups: list[_Target],
                 arg_moves: list[CallOperand], ret_moves: list[CallOperand],
                 instr: nodes.Instruction, guarded: bool) -> None:
        self.fr = fr
        self.act = act
        self.nact = nact
        self.pc = pc
        self.idx = as_index(act, fr.n)
        self.groups = groups
        self.next = 0
        self.arg_moves = arg_moves
        self.ret_moves = ret_moves
        self.instr = instr
        self.guarded = guarded  # some lanes skipped the call: they wait at pc + 1
        self.exited = np.zeros(nact, dtype=bool)
        self.callee: Frame | None = None
        self.sel: np.ndarray | None = None
        self.sub = self.idx

    def next_frame(self) -> Frame | None:
        if self.callee is not None:
            self._returned(self.callee)
        if self.next == len(self.groups):
            return None
        code, sel = self.groups[self.next]
        self.next += 1
        fr = self.fr
        instr = self.instr
        if len(self.arg_moves) != len(code.params) or len(self.ret_moves) > len(code.returns):
            raise UnsupportedInstruction(
                fr.launch.kernel, instr.line, instr.opcode,
                f"{code.name} takes {len(code.params)} parameters and returns "
                f"{len(code.returns)} values; called with {len(self.arg_moves)} and "
                f"{len(self.ret_moves)}")
        base = align_up(fr.local_top, 16)
        depth = fr.depth + 1
        need = base + code.local_size - LOCAL_STACK_BASE + depth * CALL_FRAME_BYTES
        if need > fr.launch.stack_limit:
            raise StackOverflow(
                f"kernel {fr.launch.kernel}: PTX line {instr.line}: stack overflow at call "
                f"depth {depth} (calling {code.name}): a thread needs {need} bytes of stack, "
                f"the stack size is {fr.launch.stack_limit} bytes (CU_LIMIT_STACK_SIZE)")
        sub = self.idx if sel is None else self.idx[sel]
        callee = Frame(code, fr.launch, fr.chunk, fr.chunk_lanes(sub), base, depth)
        for move, dst in zip(self.arg_moves, code.params, strict=True):
            copy_in(fr, sub, move, callee, dst)
        self.callee, self.sel, self.sub = callee, sel, sub
        return callee

    def _returned(self, callee: Frame) -> None:
        gone = callee.state == EXIT
        if gone.any():
            if self.sel is None:
                self.exited |= gone
            else:
                self.exited[self.sel] |= gone
        keep = np.flatnonzero(~gone)
        for move, src in zip(self.ret_moves, callee.code.returns, strict=False):
            copy_out(callee, keep, src, self.fr, self.sub[keep], move)
        self.callee = None

    def result(self) -> tuple[Any, int, int]:
        fr = self.fr
        act, nact = self.act, self.nact
        if self.exited.any():
            fr.state[self.idx[self.exited]] = EXIT
            act = self.idx[~self.exited]
            nact = len(act)
        if self.guarded:
            fr.pc[as_index(act, fr.n)] = self.pc + 1
            return None, 0, 0
        if nact == 0:
            return None, 0, 0
        return act, nact, self.pc + 1
