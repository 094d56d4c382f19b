"""Range analysis: the offsets a loop's induction variable can reach, bounded
once in front of the loop instead of at every iteration (issue 14).

The shape recognised is the one NVRTC gives a counted or grid-stride loop
after rotation, a loop of one basic block::

    L:  ...
        mul.wide.s32  R, I, c        (or cvt.s64.s32 R, I: c = 1)
        ...           accesses at R + [start, end) after this point
        add.s32       I, I, S
        setp.lt.s32   p, I, N
        @p bra        L

with ``R``, ``I`` and ``p`` written once in the block, ``N`` and ``S`` never
(registers or immediates), ``c`` a positive constant.  Every value ``I``
holds when ``R`` is computed is the entry value ``I0`` or an earlier value
plus ``S`` that passed ``I < N``.  Before the loop (:func:`preheader_code`)
the pass computes ``M = max(I0, N - 1)`` and a predicate that is true when
the argument below does not hold: ``I0 < 0``, ``S < 0``, or
``M + S`` above the largest ``s32`` (an increment could wrap to a negative
index that still passes ``I < N``).  When that predicate is false, each ``I``
is in ``[I0, M]`` (non-negative, non-decreasing, never wrapping), so each
``R`` is in ``[0, M * c]``; the filter's condition on ``R`` is replaced by
the same condition on ``M * c``, tested once before the loop.

Soundness (what the hoisted check must not lose): the loop's checks OR the
loop's predicate in (``optimisation.LoopHoister``), so when the range check
fails, or the argument's premises fail, every access of every iteration goes
to its own slow path and is decided and recorded exactly as without the
optimisation.  When it passes, every iteration's offset is in bounds, which
is what the per-iteration check would have found.  A guard on the wrong
bound, a bound past the allocation, an off-by-one all make ``M * c + end``
leave the allocation: the loop then runs checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import provenance as prov
from ..nodes import Block, Immediate, Instruction, Label, Register, Statement
from .emission import I
from .planning import FunctionPlan

INT32_MAX = (1 << 31) - 1
MAX_SCALE = 1 << 20
"""A larger scale is not recognised (``M * c`` must stay far from 2**64)."""


@dataclass(frozen=True)
class Induction:
    """``R = I * scale`` in a one-block loop counting ``I`` up by ``step``
    while ``I < bound`` (each a register name or an ``int``)."""

    offset: str
    index: str
    step: str | int
    bound: str | int
    scale: int


def _int(op: object) -> int | None:
    if isinstance(op, Immediate):
        v = op.value
        return v if isinstance(v, int) else None
    return None


def _operand(op: object) -> str | int | None:
    if isinstance(op, Register):
        return op.name
    return _int(op)


@dataclass(frozen=True)
class Shape:
    """A one-block loop ending ``@p bra L`` back to its own label, with
    ``p`` from its counter's test ``setp.lt.s32 p, I, N`` after
    ``add.s32 I, I, S``."""

    index: str  # I
    step: str | int  # S
    bound: str | int  # N
    inc_at: int  # where the counter is incremented
    defs: dict[str, list[int]]  # register -> where the loop writes it


def loop_shape(plan: FunctionPlan, header: int) -> Shape | None:
    """The counter of the one-block loop ``header``, None when the loop is
    not of a recognised shape."""
    graph, body = plan.graph, plan.fn.body
    assert body is not None
    if set(plan.loops.get(header, ())) != {header}:
        return None
    bb = graph.blocks[header]
    stmts = [(i, body[i]) for i in range(bb.start, bb.end)]
    instrs = [s for _, s in stmts if type(s) is Instruction]
    label = _label_of(body, bb.start)
    if not instrs or label is None or any(s.op == "call" for s in instrs):
        return None  # (a call may write registers through its return list)
    last = instrs[-1]
    if last.op != "bra" or last.guard is None or last.guard.negated \
            or not last.operands or getattr(last.operands[0], "name", None) != label:
        return None
    defs: dict[str, list[int]] = {}
    for i, st in stmts:
        for r in all_defs(st):
            defs.setdefault(r, []).append(i)
    pred = last.guard.register
    if len(defs.get(pred, [])) != 1:
        return None
    test_at = defs[pred][0]
    setp = body[test_at]
    if not (type(setp) is Instruction and len(setp.operands) == 3
            and isinstance(setp.operands[1], Register)):
        return None
    index = setp.operands[1].name
    bound = _operand(setp.operands[2])
    if len(defs.get(index, [])) != 1 or bound is None \
            or (isinstance(bound, str) and bound in defs):
        return None
    inc_at = defs[index][0]
    inc = body[inc_at]
    if not (inc_at < test_at and type(inc) is Instruction and inc.opcode == "add.s32"
            and len(inc.operands) == 3):
        return None
    a, b = (_operand(o) for o in inc.operands[1:])
    step = b if a == index else a if b == index else None
    if step is None or (isinstance(step, str) and step in defs):
        return None
    if setp.opcode != "setp.lt.s32" or (isinstance(step, int) and not 0 < step <= INT32_MAX) \
            or (isinstance(bound, int) and not -INT32_MAX <= bound <= INT32_MAX):
        return None
    return Shape(index, step, bound, inc_at, defs)


def induction(plan: FunctionPlan, header: int, offset: str, at: int) -> Induction | None:
    """How ``offset`` follows the counter of the one-block loop ``header``
    (``R = I * c`` computed before the counter's increment), read by a
    filter before top-level statement ``at``; None when the loop or the
    register is not of the recognised shape."""
    body = plan.fn.body
    assert body is not None
    shape = loop_shape(plan, header)
    if shape is None or len(shape.defs.get(offset, [])) != 1:
        return None
    off_at = shape.defs[offset][0]
    if not (off_at < shape.inc_at and off_at < at):
        return None
    scale = _scale(body[off_at], shape.index)
    if scale is None:
        return None
    return Induction(offset, shape.index, shape.step, shape.bound, scale)


def all_defs(st: Statement) -> set[str]:
    """Registers a top-level statement (an instruction or a ``{ }`` block) writes."""
    if type(st) is Instruction:
        return set(prov.defs(st))
    if type(st) is Block:
        out: set[str] = set()
        for inner in st.statements:
            out |= all_defs(inner)
        return out
    return set()


def _scale(st: Statement, index: str) -> int | None:
    """``c`` when ``st`` is ``mul.wide.s32 R, I, c`` (either order) or
    ``cvt.s64.s32 R, I``."""
    if type(st) is not Instruction or len(st.operands) < 2:
        return None
    ops = st.operands
    if st.opcode == "cvt.s64.s32" and isinstance(ops[1], Register) and ops[1].name == index:
        return 1
    if st.opcode == "mul.wide.s32" and len(ops) == 3:
        regs = [o for o in ops[1:] if isinstance(o, Register) and o.name == index]
        consts = [_int(o) for o in ops[1:] if _int(o) is not None]
        if len(regs) == 1 and len(consts) == 1 and 0 < consts[0] <= MAX_SCALE:  # type: ignore[operator]
            return consts[0]
    return None


def _label_of(body: list[Statement], start: int) -> str | None:
    """The label a block starting at ``start`` begins with (loops are
    entered by a branch to it)."""
    for i in range(start, min(start + 4, len(body))):
        s = body[i]
        if isinstance(s, Label):
            return s.name
        if type(s) is Instruction:
            return None
    return None


def preheader_code(ind: Induction, top: str, pred: str, m: str, x: str, *,
                   fresh: bool) -> list[Instruction]:
    """Instructions that leave in ``top`` (64 bits) the largest offset
    ``M * scale`` and set ``pred`` when the range argument's premises fail
    (see the module docstring), ORed into ``pred`` unless ``fresh``; ``m`` and
    ``x`` scratch 32-bit registers.

    In 32 bits: ``M = max(N - 1, I0)`` (when ``N - 1`` wraps, ``M`` is the
    largest ``s32``, still at least every ``I``; the no-wrap premise then
    fails unless ``S`` is 0, and the bound is past any allocation), and
    ``I0``, ``S`` and ``M + S`` each have the sign bit clear: ``I0 >= 0``,
    ``S >= 0``, and (both addends non-negative) ``M + S`` did not wrap."""
    out: list[Instruction] = []
    if isinstance(ind.bound, int):
        out.append(I("max.s32", m, ind.index, ind.bound - 1))
    else:
        out.append(I("add.s32", m, ind.bound, -1))
        out.append(I("max.s32", m, m, ind.index))
    out.append(I("add.s32", x, m, ind.step))
    out.append(I("or.b32", x, x, ind.index))
    if not isinstance(ind.step, int):
        out.append(I("or.b32", x, x, ind.step))
    if fresh:
        out.append(I("setp.lt.s32", pred, x, 0))
    else:
        out.append(I("setp.lt.or.s32", pred, x, 0, pred))
    if ind.scale == 1:
        out.append(I("cvt.s64.s32", top, m))
    else:
        out.append(I("mul.wide.s32", top, m, ind.scale))
    return out
