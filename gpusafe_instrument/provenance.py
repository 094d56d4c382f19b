"""Pointer provenance: where each address a function dereferences came from.

A forward dataflow analysis over the CFG (``gpusafe_instrument.cfg``) to a fixed
point.  Each register holds an abstract value:

* :class:`Ptr`: an address derived from a *root* — a kernel pointer parameter
  (:class:`ParamRoot`, including an 8-byte pointer inside a by-value struct
  parameter: ``ld.param`` at an offset of a ``.b8`` array parameter) or a
  ``.global``/``.shared``/``.local`` variable (:class:`VarRoot`; an unsized
  ``extern .shared`` array is dynamic shared memory) or a device function's
  8-byte parameter (:class:`ArgRoot`: where it points is for its callers to
  say, see ``gpusafe_instrument/checks/arguments.py``).  It records the space the
  value addresses, its offset from the root when that is exactly
  ``register + constant``, and the power of two the offset is known to be a
  multiple of (for alignment checks that need no instruction).
* :class:`Scalar`: a plain integer, with the power of two it is a multiple of
  and its value when constant.
* :data:`UNKNOWN`: anything else: a pointer loaded from memory, returned by a
  call, or merged from different roots.

It follows ``mov``, ``add``/``sub`` with offsets, ``mad``/``mul.wide``/``shl``
(through the alignment of the scaled index), ``cvt``, ``cvta``/``cvta.to``,
``selp``, guarded definitions, and registers assigned on several paths (the
join at a block entry).  Anything it does not follow gives UNKNOWN, which the
pass checks with a table lookup: imprecision costs speed, never a check.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Union

from . import cfg as cfg_mod
from .nodes import (
    SCALAR_SIZES,
    Address,
    ArgumentList,
    Block,
    Function,
    Immediate,
    Instruction,
    Negated,
    PredicatePair,
    Register,
    Statement,
    Symbol,
    SymbolOffset,
    Variable,
    Vector,
)
from .query import register_types

MAX_ALIGN = 256


@dataclass(frozen=True)
class ParamRoot:
    """A pointer held in kernel parameter ``index`` at byte ``offset``."""

    index: int
    offset: int
    param: str

    def __str__(self) -> str:
        return self.param if self.offset == 0 else f"{self.param}+{self.offset}"


@dataclass(frozen=True)
class VarRoot:
    """A variable; ``size`` None for dynamic shared memory (``extern .shared x[]``)."""

    name: str
    space: str  # "global", "shared", "local"
    size: int | None
    align: int

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ArgRoot:
    """The pointer a device function received in its 8-byte parameter
    ``index`` (named ``param``): its callers decide where it points."""

    index: int
    param: str

    def __str__(self) -> str:
        return self.param


Root = Union[ParamRoot, VarRoot, ArgRoot]


@dataclass(frozen=True)
class Ptr:
    root: Root
    space: str  # the space the value addresses: "generic", "global", "shared", "local"
    off_reg: str | None  # value = root + off_reg + off_const, when off_const is not None
    off_const: int | None
    align: int  # (value - root address) is a multiple of this


@dataclass(frozen=True)
class Scalar:
    align: int
    const: int | None = None


@dataclass(frozen=True)
class Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = Unknown()
Value = Union[Ptr, Scalar, Unknown]


def _lowbit(x: int) -> int:
    if x == 0:
        return MAX_ALIGN
    return min(x & -x, MAX_ALIGN)


def _scalar(const: int | None) -> Scalar:
    return Scalar(_lowbit(const) if const is not None else 1, const)


def join(a: Value | None, b: Value | None) -> Value | None:
    if a is None:
        return b
    if b is None or a == b:
        return a
    if isinstance(a, Ptr) and isinstance(b, Ptr):
        if a.root != b.root or a.space != b.space:
            return UNKNOWN
        align = min(a.align, b.align)
        if a.off_const is not None and b.off_const is not None:
            align = min(align, _lowbit(a.off_const - b.off_const))
        if a.off_reg == b.off_reg and a.off_const == b.off_const:
            return Ptr(a.root, a.space, a.off_reg, a.off_const, align)
        return Ptr(a.root, a.space, None, None, align)
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        align = min(a.align, b.align)
        if a.const is not None and b.const is not None:
            align = min(align, _lowbit(a.const - b.const))
        return Scalar(align, a.const if a.const == b.const else None)
    return UNKNOWN


# Opcodes that write no register.
_NO_DEFS = frozenset({
    "st", "red", "bra", "brx", "ret", "exit", "bar", "barrier", "membar", "fence", "call",
    "trap", "prefetch", "prefetchu", "pmevent", "nanosleep", "griddepcontrol", "stmatrix",
    "sust", "sured", "discard", "applypriority", "setmaxnreg", "cp", "brkpt",
})


def defs(instr: Instruction) -> list[str]:
    """Registers an instruction writes."""
    op = instr.op
    if op in _NO_DEFS or not instr.operands:
        return []
    if op == "wmma" and "store" in instr.modifiers:
        return []
    if op == "multimem" and ("st" in instr.modifiers or "red" in instr.modifiers):
        return []
    first = instr.operands[0]
    out: list[str] = []
    if isinstance(first, Register):
        out.append(first.name)
    elif isinstance(first, Vector):
        out.extend(i.name for i in first.items if isinstance(i, Register))
    elif isinstance(first, PredicatePair):
        if isinstance(first.first, Vector):
            out.extend(i.name for i in first.first.items if isinstance(i, Register))
        out.extend(x.name for x in (first.first, first.second) if isinstance(x, Register))
    return out


def reg_bits(types: dict[str, str], reg: str) -> int:
    t = types.get(reg)
    if t is None:
        return 64 if reg in ("%SP", "%SPL") else 32
    return SCALAR_SIZES.get(t.lstrip("."), 4) * 8


@dataclass
class AnalysisContext:
    """What the transfer functions need to know about the function."""

    kernel_params: dict[str, tuple[int, int]]  # param name -> (index, byte size); kernels only
    variables: dict[str, VarRoot]  # variable name -> root
    types: dict[str, str]
    function_params: dict[str, int] = field(default_factory=dict)
    """A device function's 8-byte scalar parameters: name -> index (:class:`ArgRoot`)."""


_OPAQUE = frozenset({".texref", ".samplerref", ".surfref"})
"""Types of texture, sampler and surface handles: names, not memory."""


def variable_root(var: Variable) -> VarRoot | None:
    space = var.space.lstrip(".")
    if space not in ("global", "shared", "local", "const") or var.type in _OPAQUE:
        return None
    align = var.align or var.element_size
    return VarRoot(var.name, space, var.size, align)


def _int_type(instr: Instruction) -> bool:
    for m in instr.modifiers:
        if m in ("f16", "f32", "f64", "bf16", "f16x2", "bf16x2"):
            return False
    return True


class _Transfer:
    def __init__(self, ctx: AnalysisContext, relevant: set[str] | None = None) -> None:
        self.ctx = ctx
        self.relevant = relevant
        # register -> registers whose value may be a Ptr offset by it (rebuilt
        # by :meth:`begin` for each block walked; entries may be stale)
        self.users: dict[str, set[str]] = {}

    def begin(self, state: dict[str, Value]) -> None:
        """Start walking a block from ``state``."""
        users: dict[str, set[str]] = {}
        for reg, v in state.items():
            if type(v) is Ptr and v.off_reg is not None:
                users.setdefault(v.off_reg, set()).add(reg)
        self.users = users

    def value(self, state: dict[str, Value], op) -> Value | None:
        if isinstance(op, Register):
            v = state.get(op.name)
            if v is None:
                return UNKNOWN if reg_bits(self.ctx.types, op.name) == 64 else Scalar(1)
            return v
        if isinstance(op, Immediate):
            v = op.value
            return _scalar(v) if isinstance(v, int) else Scalar(1)
        if isinstance(op, Symbol):
            root = self.ctx.variables.get(op.name)
            if root is not None:
                return Ptr(root, root.space, None, 0, MAX_ALIGN)
            return UNKNOWN
        if isinstance(op, SymbolOffset):
            root = self.ctx.variables.get(op.name)
            if root is not None:
                return Ptr(root, root.space, None, op.offset, _lowbit(op.offset))
            return UNKNOWN
        return UNKNOWN

    def step(self, state: dict[str, Value], instr: Instruction) -> None:
        """Apply ``instr`` to ``state`` in place (:meth:`begin` first).  Only
        the registers of :func:`relevant_registers` are tracked."""
        targets = defs(instr)
        relevant = self.relevant
        if not targets or (relevant is not None and relevant.isdisjoint(targets)):
            return
        new = self._compute(state, instr, targets)
        users = self.users
        for reg, val in zip(targets, new, strict=True):
            if relevant is not None and reg not in relevant:
                continue
            if isinstance(val, Ptr) and val.off_reg == reg:
                val = replace(val, off_reg=None, off_const=None)
            if instr.guard is not None:
                val = join(state.get(reg), val)
            # the register changes: values whose offset was "reg + c" lose it
            for other in users.pop(reg, ()):
                ov = state.get(other)
                if type(ov) is Ptr and ov.off_reg == reg:
                    state[other] = replace(ov, off_reg=None, off_const=None)
            if val is None:
                state.pop(reg, None)
            else:
                state[reg] = val
                if type(val) is Ptr and val.off_reg is not None:
                    users.setdefault(val.off_reg, set()).add(reg)

    def _default(self, targets: list[str]) -> list[Value]:
        return [UNKNOWN if reg_bits(self.ctx.types, r) == 64 else Scalar(1) for r in targets]

    def _compute(self, state: dict[str, Value], instr: Instruction, targets: list[str]) -> list[Value]:
        op = instr.op
        ops = instr.operands
        mods = instr.modifiers
        if op == "ld" and "param" in mods and len(ops) >= 2 and isinstance(ops[1], Address):
            return self._ld_param(instr, targets)
        if len(targets) != 1:
            return self._default(targets)
        if op == "mov" and len(ops) == 2:
            v = self.value(state, ops[1])
            if isinstance(ops[1], Register) and ops[1].name.startswith("%") and "." in ops[1].name:
                v = Scalar(1)  # a special register
            return [v if v is not None else Scalar(1)]
        if op == "cvta" and len(ops) == 2:
            v = self.value(state, ops[1])
            if isinstance(v, Ptr):
                to = "to" in mods
                space = next((m for m in mods if m in ("global", "shared", "local", "const")),
                             None)
                if space is None:
                    return [UNKNOWN]
                return [replace(v, space=space if to else "generic")]
            return [UNKNOWN]
        if op in ("add", "sub") and len(ops) == 3 and _int_type(instr) and "cc" not in mods:
            a = self.value(state, ops[1])
            b = self.value(state, ops[2])
            return [self._add(a, b, ops[1], ops[2], op == "sub")]
        if op == "mad" and len(ops) == 4 and _int_type(instr) and "hi" not in mods:
            a, b, c = (self.value(state, o) for o in ops[1:])
            prod = _mul_align(a, b)
            if isinstance(c, Ptr):
                return [Ptr(c.root, c.space, None, None, min(c.align, prod))]
            if isinstance(c, Scalar):
                return [Scalar(min(c.align, prod))]
            return self._default(targets)
        if op == "mul" and len(ops) == 3 and _int_type(instr) and "hi" not in mods:
            a, b = self.value(state, ops[1]), self.value(state, ops[2])
            ca = a.const if isinstance(a, Scalar) else None
            cb = b.const if isinstance(b, Scalar) else None
            if ca is not None and cb is not None:
                return [_scalar(ca * cb)]
            return [Scalar(_mul_align(a, b))]
        if op == "shl" and len(ops) == 3:
            a, b = self.value(state, ops[1]), self.value(state, ops[2])
            if isinstance(b, Scalar) and b.const is not None and 0 <= b.const < 64:
                aa = a.align if isinstance(a, Scalar) else 1
                if isinstance(a, Scalar) and a.const is not None:
                    return [_scalar(a.const << b.const)]
                return [Scalar(min(aa << b.const, MAX_ALIGN))]
            return [Scalar(1)]
        if op == "cvt" and len(ops) == 2 and _int_type(instr):
            v = self.value(state, ops[1])
            if isinstance(v, Ptr):
                return [replace(v, off_reg=None, off_const=None)]
            if isinstance(v, Scalar):
                return [v]
            return self._default(targets)
        if op == "selp" and len(ops) == 4:
            v = join(self.value(state, ops[1]), self.value(state, ops[2]))
            return [v if v is not None else Scalar(1)]
        if op == "and" and len(ops) == 3:
            a, b = self.value(state, ops[1]), self.value(state, ops[2])
            if isinstance(a, Ptr) or isinstance(b, Ptr):
                return [UNKNOWN]
            al = max(a.align if isinstance(a, Scalar) else 1, b.align if isinstance(b, Scalar) else 1)
            return [Scalar(al)]
        return self._default(targets)

    def _ld_param(self, instr: Instruction, targets: list[str]) -> list[Value]:
        addr = instr.operands[1]
        assert isinstance(addr, Address)
        out: list[Value] = []
        param = addr.base.name if isinstance(addr.base, Symbol) else None
        info = self.ctx.kernel_params.get(param) if param is not None else None
        arg = self.ctx.function_params.get(param) if param is not None else None
        for i, reg in enumerate(targets):
            if reg_bits(self.ctx.types, reg) == 64 and _elem_size(instr) == 8:
                off = addr.offset + 8 * i
                if info is not None:
                    index, size = info
                    if off + 8 <= size:
                        out.append(Ptr(ParamRoot(index, off, param), "generic", None, 0,
                                       MAX_ALIGN))
                        continue
                elif arg is not None and off == 0 and len(targets) == 1:
                    # a pointer argument: where it points is its callers' business
                    out.append(Ptr(ArgRoot(arg, param), "generic", None, 0, 1))
                    continue
            out.append(UNKNOWN if reg_bits(self.ctx.types, reg) == 64 else Scalar(1))
        return out

    def _add(self, a: Value | None, b: Value | None, a_op, b_op, sub: bool) -> Value:
        if isinstance(b, Ptr) and isinstance(a, Scalar) and not sub:
            a, b, a_op, b_op = b, a, b_op, a_op
        if isinstance(a, Ptr) and isinstance(b, Scalar):
            if b.const is not None:
                if a.off_const is None:
                    return replace(a, align=min(a.align, _lowbit(b.const)))
                c = a.off_const - b.const if sub else a.off_const + b.const
                return replace(a, off_const=c, align=min(a.align, _lowbit(b.const)))
            align = min(a.align, b.align)
            if (not sub and isinstance(b_op, Register) and a.off_reg is None
                    and a.off_const is not None):
                return Ptr(a.root, a.space, b_op.name, a.off_const, align)
            return Ptr(a.root, a.space, None, None, align)
        if isinstance(a, Scalar) and isinstance(b, Scalar):
            if a.const is not None and b.const is not None:
                return _scalar(a.const - b.const if sub else a.const + b.const)
            return Scalar(min(a.align, b.align))
        if isinstance(a, Ptr) and isinstance(b, Ptr) and sub:
            return Scalar(1)
        return UNKNOWN


def _elem_size(instr: Instruction) -> int:
    size = 0
    for m in instr.modifiers:
        if m in SCALAR_SIZES and m != "pred":
            size = SCALAR_SIZES[m]
    return size


def _mul_align(a: Value | None, b: Value | None) -> int:
    aa = a.align if isinstance(a, Scalar) else 1
    bb = b.align if isinstance(b, Scalar) else 1
    return min(aa * bb, MAX_ALIGN)


@dataclass
class Provenance:
    """The analysis result: the value of every register before each statement
    that :meth:`at` is asked about."""

    cfg: cfg_mod.CFG
    block_in: list[dict[str, Value] | None]
    transfer: _Transfer

    def states(self) -> Iterator[tuple[tuple[int, ...], Instruction, dict[str, Value]]]:
        """Yield ``(path, instruction, state before it)`` for every instruction in
        source order; ``path`` is (top index,) or (top index, inner index, ...)
        into nested ``{ }`` blocks.  The state holds the registers the
        analysis tracks (:func:`relevant_registers`) that are still live."""
        body = self.cfg.body
        transfer = self.transfer
        for bb in self.cfg.blocks:
            state = dict(self.block_in[bb.index] or {})
            transfer.begin(state)
            for i in range(bb.start, bb.end):
                yield from _visit(body[i], (i,), state, transfer)


def _visit(s: Statement, path: tuple[int, ...], state: dict[str, Value],
           transfer: _Transfer) -> Iterator[tuple[tuple[int, ...], Instruction, dict[str, Value]]]:
    """The instructions of one top-level statement (recursively through
    nested blocks), each yielded before ``state`` steps over it."""
    if type(s) is Instruction:
        yield path, s, state
        transfer.step(state, s)
    elif type(s) is Block:
        for j, inner in enumerate(s.statements):
            yield from _visit(inner, path + (j,), state, transfer)


def _walk_block(s: Statement, state: dict[str, Value], transfer: _Transfer) -> None:
    """:func:`_visit` without the yields (the fixed-point iteration)."""
    if type(s) is Instruction:
        transfer.step(state, s)
    elif type(s) is Block:
        for inner in s.statements:
            _walk_block(inner, state, transfer)


def _instructions(s: Statement) -> Iterator[Instruction]:
    if type(s) is Instruction:
        yield s
    elif type(s) is Block:
        for inner in s.statements:
            yield from _instructions(inner)


def operand_registers(op, out: set[str]) -> None:
    """The register names ``op`` reads."""
    t = type(op)
    if t is Register:
        out.add(op.name)
    elif t is Address:
        if type(op.base) is Register:
            out.add(op.base.name)
    elif t is Vector or t is ArgumentList:
        for item in op.items:
            operand_registers(item, out)
    elif t is Negated:
        out.add(op.operand.name)


def relevant_registers(body: list[Statement]) -> set[str]:
    """The registers whose values can reach an address: the base register
    of every address operand, a call argument (stored to its ``.param``
    variable or passed directly), and (transitively) every register read by an
    instruction defining one of them.  The analysis tracks only these: the
    value of any other register can never decide a check, and not tracking
    it keeps the work and the memory of the analysis proportional to the
    pointers of the function, not to all its registers."""
    defined_by: dict[str, list[Instruction]] = {}
    work: list[str] = []
    for s in body:
        for instr in _instructions(s):
            for o in instr.operands:
                if type(o) is Address and type(o.base) is Register:
                    work.append(o.base.name)
            if (instr.op == "st" and "param" in instr.modifiers) or instr.op == "call":
                # a call argument, stored to its .param variable or passed directly
                seeds: set[str] = set()
                for o in instr.operands[1:]:
                    operand_registers(o, seeds)
                work.extend(seeds)
            for d in defs(instr):
                defined_by.setdefault(d, []).append(instr)
    relevant: set[str] = set()
    while work:
        reg = work.pop()
        if reg in relevant:
            continue
        relevant.add(reg)
        for instr in defined_by.get(reg, ()):
            reads: set[str] = set()
            for o in instr.operands:
                operand_registers(o, reads)
            work.extend(reads - relevant)
    return relevant


def _uses_and_kills(s: Statement, relevant: set[str], uses: set[str], kills: set[str]) -> None:
    """Add to ``uses`` the registers of ``relevant`` that ``s`` reads before
    ``kills`` (built up in statement order) overwrites them, and to
    ``kills`` those it overwrites unconditionally (a guarded definition
    keeps the old value where its guard is false: a read, not a kill)."""
    for instr in _instructions(s):
        targets = defs(instr)
        reads: set[str] = set()
        ops = instr.operands
        for o in (ops[1:] if targets else ops):
            operand_registers(o, reads)
        if instr.guard is not None:
            reads.update(targets)
        for r in reads:
            if r in relevant and r not in kills:
                uses.add(r)
        if instr.guard is None:
            kills.update(t for t in targets if t in relevant)


def live_in(graph: cfg_mod.CFG, relevant: set[str]) -> list[set[str]]:
    """The registers of ``relevant`` live on entry to each block (read on
    some path before being overwritten): the only ones a block's entry
    state needs to hold."""
    body = graph.body
    n = len(graph.blocks)
    uses: list[set[str]] = []
    kills: list[set[str]] = []
    for bb in graph.blocks:
        u: set[str] = set()
        k: set[str] = set()
        for i in range(bb.start, bb.end):
            _uses_and_kills(body[i], relevant, u, k)
        uses.append(u)
        kills.append(k)
    live: list[set[str]] = [set(u) for u in uses]
    order = graph.reverse_postorder()
    reached = set(order)
    order = list(reversed(order)) + [b for b in range(n) if b not in reached]
    changed = True
    while changed:
        changed = False
        for b in order:
            out: set[str] = set()
            for succ in graph.blocks[b].successors:
                out |= live[succ]
            new = uses[b] | (out - kills[b])
            if len(new) != len(live[b]):
                live[b] = new
                changed = True
    return live


def analyze(fn: Function, ctx: AnalysisContext, graph: cfg_mod.CFG | None = None) -> Provenance:
    """The values to a fixed point: a worklist over blocks in reverse
    postorder, each block's entry state holding only the registers that
    matter there (relevant and live), so the cost follows the pointers of
    the function rather than blocks times registers."""
    graph = graph or cfg_mod.build(fn)
    body = graph.body
    relevant = relevant_registers(body)
    transfer = _Transfer(ctx, relevant)
    n = len(graph.blocks)
    block_in: list[dict[str, Value] | None] = [None] * n
    if n == 0:
        return Provenance(graph, block_in, transfer)
    live = live_in(graph, relevant)
    block_in[0] = {}
    order = graph.reverse_postorder()
    rpo_pos = {b: i for i, b in enumerate(order)}
    work = [(rpo_pos[b], b) for b in order]
    heapq.heapify(work)
    in_work = set(order)
    while work:
        _, b = heapq.heappop(work)
        in_work.discard(b)
        state = dict(block_in[b] or {})
        transfer.begin(state)
        bb = graph.blocks[b]
        for i in range(bb.start, bb.end):
            _walk_block(body[i], state, transfer)
        for succ in bb.successors:
            old = block_in[succ]
            wanted = live[succ]
            merged: dict[str, Value] = {}
            for reg in wanted:
                v = state.get(reg)
                if old is not None:
                    v = join(old.get(reg), v)
                if v is not None:
                    merged[reg] = v
            if merged != old:
                block_in[succ] = merged
                if succ not in in_work:
                    heapq.heappush(work, (rpo_pos.get(succ, n), succ))
                    in_work.add(succ)
    return Provenance(graph, block_in, transfer)


__all__ = [
    "ParamRoot", "VarRoot", "ArgRoot", "Root", "Ptr", "Scalar", "Unknown", "UNKNOWN", "Value",
    "AnalysisContext", "Provenance", "analyze", "defs", "join", "register_types", "reg_bits",
    "variable_root", "relevant_registers", "live_in",
]
