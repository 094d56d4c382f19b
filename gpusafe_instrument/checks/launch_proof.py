"""Launch-time proofs (issue 14): a launch whose own values keep every access
of the kernel in bounds runs the kernel's *proven entry*, its original body.

Many kernels index their buffers with ``blockIdx.x * blockDim.x +
threadIdx.x`` under a guard ``if (i < n)``: in bounds exactly when ``n``
elements fit every buffer, which only the launch knows (the sizes of the
allocations the pointer arguments point into, ``n``, the grid and block
dimensions).  For such a kernel the pass writes, for each checked access,
its offset as an expression over the kernel's scalar parameters, the
special registers (``%tid``, ``%ntid``, ``%ctaid``, ``%nctaid``) and
constants, narrowed by the compares of the branches that dominate the
access (:func:`launch_proof`), and adds to the module a second entry,
``<kernel>__gpusafe_proven`` (:func:`proven_entry`): the original body
with the checked kernel's parameters, hidden ones included, so the same
argument buffer launches either.  The host evaluates the expressions over
intervals at each launch (``gpusafe_instrument.launch_bounds``); when every
access then lies inside its root's allocation (or its shared variable),
aligned, with no intermediate able to wrap, the launch pipeline names the
proven entry (``Launch.entry``) and the door launches it.  Otherwise the
checked kernel runs, as before: a bound past the allocation, a guard on the
wrong variable, a grid larger than ``n`` covers, all leave the proof unmet
and every access checked.

Why it is sound: every register in an expression has one unguarded
definition dominating its reader (``Guards._single``), so where it is read it
holds the value that definition computed from its operands; the
exceptions are a register whose other definitions cannot reach the reader
(``launch_loops.reaching``), the counter of a one-block loop read before its increment,
whose every value the host bounds from its entry value, step and exit
compare (``ranges``' argument, ``_induction``), and a 32-bit register that
loop steps beside its counter, bounded through the passes the counter
allows (``_derived``), and the registers a down-counting loop (NVRTC's
unrolled loops and their remainders) steps, bounded through its trip count
(``launch_loops``, whose docstring gives the argument).  Each narrowing
comes from a
branch whose compare saw the value the access reads (the argument of
``guards``); a compare of ``x + K`` narrows ``x`` only where ``x + K``
cannot wrap.  Every value is read as its register's signed value and the
interval of each node is computed exactly in mathematical integers: the
proof fails where a node could leave its register's signed range (where the
machine value would wrap), where a value read as unsigned could be
negative, or where a compare no value satisfies (a value misread).

What is not proven (the kernel has no proven entry): accesses with a lookup
(unknown provenance), dynamic shared memory, local memory, registers written
in a loop other than a one-block loop's counter and the 32-bit registers it
steps beside it, or a down-counting one-block loop's stepped registers
(loops of several blocks, counters not one launch value), a constant
offset the analysis lost, kernels with calls,
``brx.idx`` or nested scopes.
"""

from __future__ import annotations

import json

from .. import provenance as prov
from ..nodes import (
    Immediate,
    Instruction,
    Label,
    Loc,
    Pragma,
    Register,
    RegisterDecl,
    Symbol,
    Variable,
)
from ..sites import PROVEN_SUFFIX
from . import launch_loops, ranges
from .guards import Guards, _imm
from .launch_loops import NotProvable
from .launch_loops import reaching as _reaching
from .launch_loops import reentered as _reentered
from .planning import UNCHECKED_MODES, FunctionPlan, Mode


def proven_entry(kernel: str) -> str:
    """The name of ``kernel``'s proven entry: its original body, with the
    checked kernel's parameters, launched instead of it when the host proves
    the launch."""
    return kernel + PROVEN_SUFFIX

_SPECIAL = {"tid", "ntid", "ctaid", "nctaid"}
_ARITH = {"add": "add", "sub": "sub", "mul": "mul", "mad": "mad", "shl": "shl",
          "max": "max", "min": "min"}
_SIGNED_CMP = {"lt", "le", "gt", "ge"}
_UNSIGNED_CMP = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_FLIP = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


_COPIED = (Instruction, Label, Loc, Pragma, RegisterDecl, Variable)
"""What a body may hold for the proven entry to copy it."""
_NOT_COPIED = {"brx", "call"}  # a call's callee may need the context; an indirect branch


Expr = list  # a JSON-able node: [op, ...]


class _Builder:
    def __init__(self, plan: FunctionPlan) -> None:
        self.plan = plan
        self.guards: Guards = plan.guards()
        self.body = self.guards.body
        self.types = plan.types

    # -- registers to expressions ------------------------------------------

    def expr(self, op: object, at: int, relations: list[tuple[str, str, object, bool, int, int]],
             depth: int = 0, bits: int = 0, reader: int | None = None) -> Expr:
        """The expression of operand ``op`` as read at statement ``at`` (by
        the instruction at ``reader``, when that is not ``at``: the
        definition of a register the access reads), narrowed by
        ``relations`` (``Builder.relations``)."""
        if depth > 24:
            raise NotProvable("expression too deep")
        k = _imm(op)
        if k is not None:
            if bits:  # the literal's value in a register of that width, signed
                k = _signed(k, bits)
            if not -(1 << 31) <= k < 1 << 31:
                raise NotProvable("a literal the analysis does not place")
            return ["k", k]
        if not isinstance(op, Register):
            raise NotProvable("not a register")
        name = op.name
        if name.startswith("%") and name[1:].split(".")[0] in _SPECIAL and "." in name:
            sreg, axis = name[1:].split(".")
            return ["s", sreg, axis]
        d = self.guards._single(name, at)
        if d is None:
            r = _reaching(self.guards, name, at if reader is None else reader)
            if r is not None:  # no relation narrows it: a compare may have seen another value
                return self._definition(name, r[0], r[1], at, relations, depth)
            rd = at if reader is None else reader
            try:
                return self._induction(name, rd, at, relations, depth)
            except NotProvable:
                return launch_loops.value(self, name, rd, at, relations, depth)
        e = self._definition(name, d[0], d[1], at, relations, depth)
        for reg, cmp, other, unsigned, k, wrap in relations:
            if reg != name:
                continue
            bound = self.expr(other, at, [], depth + 1)
            e = _narrow(e, cmp, bound, unsigned, k, wrap)
        return e

    def _induction(self, name: str, reader: int, at: int, relations, depth: int) -> Expr:
        """The counter ``I`` of a one-block loop (``ranges.loop_shape``:
        ``I += S`` then ``I < N`` back to the top) read before its increment:
        its entry value ``I0`` (the one definition outside the loop,
        dominating it) or an earlier value plus ``S`` that passed ``I < N``.
        The host bounds it by ``[I0, max(I0, N - 1)]`` when ``I0 >= 0``,
        ``S >= 0`` and ``max(I0, N - 1) + S`` cannot wrap (``ranges``' argument)."""
        g = self.guards
        header = g.graph.block_of[reader]
        shape = ranges.loop_shape(self.plan, header)
        if shape is not None and shape.index != name:
            return self._derived(name, shape, header, reader, at, relations, depth)
        if shape is None or not reader < shape.inc_at:
            raise NotProvable(f"{name} has no single dominating definition")
        start = self._entry_value(name, header, at, relations, depth)
        step = self.expr(_as_operand(shape.step), at, relations, depth + 1, 32)
        bound = self.expr(_as_operand(shape.bound), at, relations, depth + 1, 32)
        return ["induct", start, step, bound]

    def _entry_value(self, name: str, header: int, at: int, relations, depth: int) -> Expr:
        """The value register ``name`` enters the one-block loop ``header``
        with: its one definition outside the loop, unguarded, dominating the
        loop, which the loop cannot be entered again without passing."""
        g = self.guards
        bb = g.graph.blocks[header]
        outside = [i for i in g.defs.get(name, []) if not bb.start <= i < bb.end]
        if len(outside) != 1:
            raise NotProvable(f"{name}: not one entry value")
        p0 = outside[0]
        st = self.body[p0]
        if type(st) is not Instruction or st.guard is not None \
                or not g._dominates(p0, bb.start) or _reentered(g, header, p0):
            raise NotProvable(f"{name}: entry value")
        return self._definition(name, p0, st, at, relations, depth + 1)

    def _derived(self, name: str, shape, header: int, reader: int, at: int, relations,
                 depth: int) -> Expr:
        """A register ``X`` the one-block loop ``header`` steps beside its
        counter ``I`` (``X += S`` once in the loop, ``S`` not written in it),
        read before its increment: in the loop's ``k``-th pass (from 0) it is
        ``X0 + S * k``, and a ``k``-th pass with ``k > 0`` means the exit
        compare saw ``I0 + s * k < N``.  The host bounds ``k`` by
        ``(N - 1 - I0) / s`` under ``induct``'s premises (``s >= 1`` here: a
        zero step would not bound the passes) and ``X`` by the hull of
        ``X0 + S * [0, k]``, which must fit 32 bits (no step wrapped)."""
        g = self.guards
        bb = g.graph.blocks[header]
        inside = [i for i in g.defs.get(name, []) if bb.start <= i < bb.end]
        if len(inside) != 1 or not reader < inside[0]:
            raise NotProvable(f"{name}: not stepped once in the loop, after its reads")
        inc = self.body[inside[0]]
        if type(inc) is not Instruction or inc.guard is not None or inc.opcode != "add.s32" \
                or len(inc.operands) != 3:
            raise NotProvable(f"{name}: step")
        a, b = inc.operands[1], inc.operands[2]
        step_op = b if isinstance(a, Register) and a.name == name else \
            a if isinstance(b, Register) and b.name == name else None
        if step_op is None or (isinstance(step_op, Register) and any(
                bb.start <= i < bb.end for i in g.defs.get(step_op.name, []))):
            raise NotProvable(f"{name}: step")
        x0 = self._entry_value(name, header, at, relations, depth)
        step = self.expr(step_op, at, relations, depth + 1, 32)
        i0 = self._entry_value(shape.index, header, at, relations, depth)
        istep = self.expr(_as_operand(shape.step), at, relations, depth + 1, 32)
        bound = self.expr(_as_operand(shape.bound), at, relations, depth + 1, 32)
        return ["derive", x0, step, i0, istep, bound]

    def _definition(self, name: str, def_at: int, st: Instruction, at: int, relations,
                    depth: int) -> Expr:
        """The expression of ``name`` as instruction ``st`` (at ``def_at``)
        defines it."""
        ops = st.operands
        parts = st.opcode.split(".")
        bits = prov.reg_bits(self.types, name)
        if bits not in (32, 64):
            raise NotProvable("not a 32- or 64-bit integer")

        width = bits
        if parts[-1][1:] in ("32", "64") and parts[-1][0] in "sub":
            width = int(parts[-1][1:])

        def sub(o: object) -> Expr:
            return self.expr(o, at, relations, depth + 1, width, reader=def_at)

        if st.op == "mov" and len(ops) == 2:
            return sub(ops[1])
        if st.op == "ld" and parts[1:2] == ["param"] and len(ops) == 2:
            addr = ops[1]
            base = getattr(addr, "base", None)
            if not isinstance(base, Symbol) or getattr(addr, "offset", 0) != 0 \
                    or base.name not in self.plan.kernel_params:
                raise NotProvable("ld.param of no scalar parameter")
            index, size = self.plan.kernel_params[base.name]
            t = parts[-1]
            if t[0] not in "sub" or int(t[1:]) != 8 * size or size not in (4, 8):
                raise NotProvable("parameter type")
            # read signed, as every value here is: what it is to its users
            # (unsigned compares and conversions) is checked where they read it
            return ["p", index, size, True]
        if st.op == "cvt" and len(parts) == 3 and len(ops) == 2:
            dst, src = parts[1], parts[2]
            if (dst, src) in (("s64", "s32"), ("s32", "s32"), ("s64", "s64")):
                return sub(ops[1])
            if (dst, src) in (("u64", "u32"), ("s64", "u32")):
                return ["u", sub(ops[1])]
            if (dst, src) in (("u32", "u64"), ("s32", "s64"), ("u32", "s64"), ("s32", "u64")):
                return ["trunc", sub(ops[1])]  # the same value when it fits 32 bits
            raise NotProvable(f"cvt {st.opcode}")
        if st.op == "mul" and parts[1] == "wide" and len(ops) == 3:
            a, b = sub(ops[1]), sub(ops[2])
            if parts[2] == "u32":
                a, b = ["u", a], ["u", b]
            elif parts[2] != "s32":
                raise NotProvable(st.opcode)
            return ["mul", a, b, 64]
        if st.op in _ARITH and len(parts) >= 2:
            if st.op in ("mul", "mad") and parts[1] != "lo":
                raise NotProvable(st.opcode)
            if parts[-1] not in ("s32", "u32", "b32", "s64", "u64", "b64"):
                raise NotProvable(st.opcode)
            if st.op in ("max", "min") and parts[-1][0] != "s":
                raise NotProvable(st.opcode)
            if st.op == "mad" and len(ops) == 4:
                return ["add", ["mul", sub(ops[1]), sub(ops[2]), bits], sub(ops[3]), bits]
            if len(ops) != 3:
                raise NotProvable(st.opcode)
            if st.op == "shl":
                k = _imm(ops[2])
                if k is None or not 0 <= k < bits - 1:
                    raise NotProvable("shift by a register")
                return ["mul", sub(ops[1]), ["k", 1 << k], bits]
            if st.op in ("max", "min"):
                return [st.op, sub(ops[1]), sub(ops[2])]
            if st.op == "add":
                for k in (1, 2):
                    sel = self._selp(ops[k], at)
                    if sel is not None:
                        # x + (p ? a : b): (x + a under p) or (x + b under not p),
                        # each side narrowed by the compare that chose it
                        other = ops[3 - k]
                        return ["hull", *(
                            ["add", self.expr(other, at, relations + extra, depth + 1),
                             self.expr(o, at, relations + extra, depth + 1), bits]
                            for o, extra in sel)]
            return [st.op, sub(ops[1]), sub(ops[2]), bits]
        sel = self._selp(Register(name), at)
        if sel is not None:
            # either value; each narrowed by the compare that chose it
            return ["hull", *(self.expr(o, at, relations + extra, depth + 1)
                              for o, extra in sel)]
        if st.opcode in ("neg.s32", "neg.s64") and len(ops) == 2:
            return ["sub", ["k", 0], sub(ops[1]), bits]
        if st.opcode in ("not.b32", "not.b64") and len(ops) == 2:
            return ["sub", ["k", -1], sub(ops[1]), bits]  # ~x = -x - 1
        if st.op == "and" and len(ops) == 3:
            k = next((c for c in map(_imm, ops[1:]) if c is not None), None)
            if k is not None and 0 <= k < 1 << 31:
                x = ops[1] if _imm(ops[2]) is not None else ops[2]
                try:  # exact for one value (n & 3 of a parameter n), else [0, k]
                    return ["band", sub(x), k]
                except NotProvable:
                    return ["k_range", 0, k]
        raise NotProvable(f"{st.opcode}")

    def root_offset(self, reg: str, root: prov.ParamRoot | prov.VarRoot, at: int, relations,
                    depth: int = 0, reader: int | None = None) -> Expr:
        """The offset of pointer register ``reg`` from ``root`` (a kernel
        parameter's value, or a variable's address): through ``cvta``,
        ``mov``, a shared address truncated to 32 bits and ``add`` of a
        scalar, down to the ``ld.param`` of the root (``mov`` of the
        variable); a pointer a down-counting loop steps (``launch_loops``)
        as ``reader`` (``at`` when None) reads it."""
        if depth > 16:
            raise NotProvable("pointer too deep")
        d = self.guards._single(reg, at)
        if d is None:
            return launch_loops.stepped(
                self, reg, at if reader is None else reader, at, relations, depth,
                lambda p0, st: self._root_def(reg, p0, st, root, at, relations, depth + 1))
        return self._root_def(reg, d[0], d[1], root, at, relations, depth)

    def _root_def(self, reg: str, def_at: int, st: Instruction,
                  root: prov.ParamRoot | prov.VarRoot, at: int, relations, depth: int) -> Expr:
        """``root_offset`` of ``reg`` as instruction ``st`` (at ``def_at``)
        defines it."""
        ops = st.operands
        var = isinstance(root, prov.VarRoot)
        if not var and st.op == "ld" and len(ops) == 2 \
                and st.opcode in ("ld.param.u64", "ld.param.b64", "ld.param.s64") \
                and isinstance(getattr(ops[1], "base", None), Symbol):
            if ops[1].base.name == root.param and ops[1].offset == root.offset:
                return ["k", 0]
            raise NotProvable("another parameter")
        if var and st.opcode in ("mov.u64", "mov.b64", "mov.u32", "mov.b32") and len(ops) == 2 \
                and isinstance(ops[1], Symbol):
            if ops[1].name == root.name:
                return ["k", 0]
            raise NotProvable("another variable")
        moves = ("mov.u64", "mov.b64", "cvta.to.global.u64") if not var else (
            "mov.u64", "mov.b64", "mov.u32", "mov.b32", "cvta.shared.u64", "cvta.to.shared.u64",
            "cvta.shared.u32", "cvta.to.shared.u32")
        # a shared address fits 32 bits: the truncation keeps the offset of an
        # access that is proven inside its variable
        if var and st.opcode in ("cvt.u32.u64", "cvt.s32.s64") and isinstance(ops[1], Register):
            return self.root_offset(ops[1].name, root, at, relations, depth + 1, def_at)
        if st.opcode in moves and len(ops) == 2 and isinstance(ops[1], Register):
            return self.root_offset(ops[1].name, root, at, relations, depth + 1, def_at)
        if st.opcode in ("add.s64", "add.u64", "add.s32", "add.u32") and len(ops) == 3:
            for k in (1, 2):
                base, other = ops[k], ops[3 - k]
                if isinstance(base, Register):
                    try:
                        inner = self.root_offset(base.name, root, at, relations, depth + 1,
                                                 def_at)
                    except NotProvable:
                        continue
                    return ["add", inner,
                            self.expr(other, at, relations, depth + 1, reader=def_at), 64]
        raise NotProvable(f"{st.opcode} in a pointer")

    def _selp(self, op: object, at: int) -> list[tuple[object, list]] | None:
        """``op`` defined by ``selp a, b, p``: ``[(a, relations p gives),
        (b, relations not p gives)]``."""
        if not isinstance(op, Register):
            return None
        d = self.guards._single(op.name, at)
        if d is None:
            return None
        st = d[1]
        ops = st.operands
        if st.opcode == "cvt.s64.s32" and len(ops) == 2:  # the same value, sign-extended
            return self._selp(ops[1], at)
        if st.op != "selp" or len(ops) != 4 or st.opcode.split(".")[-1] not in (
                "s32", "u32", "b32", "s64", "u64", "b64"):
            return None
        pred = ops[3]
        p = self.guards._single(pred.name, at) if isinstance(pred, Register) else None
        if p is not None and not self.guards._dominates(p[0], d[0]):
            p = None  # the selp might read another value of p
        out = []
        for o, outcome in ((ops[1], True), (ops[2], False)):
            rel = None if p is None else self._compare(p[0], outcome)
            out.append((o, [] if rel is None else self._implied(rel, at)))
        return out

    # -- guards --------------------------------------------------------------

    def relations(self, at: int) -> list[tuple[str, str, object, bool, int, int]]:
        """``(reg, cmp, other, unsigned, k, bits)`` for every compare of a
        branch dominating statement ``at`` whose outcome ``at``'s block
        implies: ``reg cmp other + k`` holds at ``at`` (``bits``: when
        ``reg - k`` fits them, see ``_narrow``).  A compare of ``x + K`` (``add``
        of an immediate, one definition) bounds ``x`` too."""
        g = self.guards
        graph = g.graph
        out: list[tuple[str, str, object, bool, int, int]] = []
        b: int | None = graph.block_of[at]
        while b is not None:
            for rel in self._edge(b):
                out.extend(self._implied(rel, at))
            b = g.tree.idom[b]
        return out

    def _implied(self, rel, at: int) -> list[tuple[str, str, object, bool, int, int]]:
        """The relations a compare ``(x, cmp, y, unsigned, setp_at)`` known to
        hold gives at ``at``: on ``x``, on ``y``, and on ``z`` where ``x`` or
        ``y`` is ``z + K``."""
        x, cmp, y, unsigned, setp_at = rel
        g = self.guards
        out: list[tuple[str, str, object, bool, int, int]] = []
        for reg, c, other in ((x, cmp, y), (y, _MIRROR[cmp], x)):
            if not isinstance(reg, Register) or not self._stable(reg.name, setp_at, at):
                continue
            if isinstance(other, Register) and not self._stable(other.name, setp_at, at):
                continue
            out.append((reg.name, c, other, unsigned, 0, 0))
            d = g._single(reg.name, at)
            if d is not None and not unsigned and d[1].opcode in ("add.s32", "add.s64") \
                    and isinstance(d[1].operands[1], Register) \
                    and _imm(d[1].operands[2]) is not None \
                    and self._stable(d[1].operands[1].name, setp_at, at):
                # reg = z + K: z cmp other - K, where z + K does not wrap (the
                # host checks it on z's interval before narrowing it)
                out.append((d[1].operands[1].name, c, other, False, -_imm(d[1].operands[2]),
                            int(d[1].opcode[-2:])))
        return out

    def _stable(self, reg: str, setp_at: int, at: int) -> bool:
        """``reg`` holds at ``at`` the value the compare at ``setp_at`` saw."""
        d = self.guards._single(reg, at)
        return d is not None and self.guards._dominates(d[0], setp_at)

    def _edge(self, b: int) -> list[tuple[object, str, object, bool, int]]:
        """The compares that hold on entering block ``b`` from its only
        predecessor's conditional branch: the one setting its predicate, or
        both of an ``or.pred`` that was false (``and.pred`` true)."""
        g = self.guards
        graph = g.graph
        preds = graph.blocks[b].predecessors
        if len(preds) != 1:
            return []
        pb = graph.blocks[preds[0]]
        idx = [i for i in range(pb.start, pb.end) if type(self.body[i]) is Instruction]
        if not idx:
            return []
        br = self.body[idx[-1]]
        if br.op != "bra" or br.guard is None or not br.operands:
            return []
        taken = g.label_block.get(getattr(br.operands[0], "name", ""))
        fall = pb.index + 1
        if taken is None or taken == fall or b not in (taken, fall):
            return []
        outcome = (b == taken) != br.guard.negated

        def setter(pred: str, before: int) -> int | None:
            return next((i for i in range(before - 1, pb.start - 1, -1)
                         if pred in _written(self.body[i])), None)

        def compares(pred: str, before: int, depth: int) -> list:
            at = setter(pred, before)
            if at is None or depth > 8:
                return []
            st = self.body[at]
            if st.op in ("or", "and") and st.opcode.endswith(".pred") and st.guard is None \
                    and len(st.operands) == 3 and (st.op == "or") != outcome \
                    and all(isinstance(o, Register) for o in st.operands[1:]):
                # both inputs of an or that was false (an and that was true)
                return [r for o in st.operands[1:] for r in compares(o.name, at, depth + 1)]
            rel = self._compare(at, outcome)
            return [] if rel is None else [rel]

        return compares(br.guard.register, idx[-1], 0)

    def _compare(self, setp_at: int, outcome: bool):
        setp = self.body[setp_at]
        parts = setp.opcode.split(".")
        if setp.op != "setp" or setp.guard is not None or len(setp.operands) != 3 \
                or len(parts) != 3 or parts[2] not in ("s32", "u32", "s64", "u64"):
            return None
        cmp = parts[1]
        unsigned = cmp in _UNSIGNED_CMP or parts[2][0] == "u"
        cmp = _UNSIGNED_CMP.get(cmp, cmp)
        if cmp not in _SIGNED_CMP:
            return None
        if not outcome:
            cmp = _FLIP[cmp]
        bits = int(parts[2][1:])
        a, b = (Immediate.integer(_signed(_imm(o), bits)) if _imm(o) is not None else o
                for o in setp.operands[1:])
        return a, cmp, b, unsigned, setp_at


def _as_operand(x: str | int) -> Register | Immediate:
    return Register(x) if isinstance(x, str) else Immediate.integer(x)


def _signed(k: int, bits: int) -> int:
    """Literal ``k`` as the signed value of a ``bits``-wide register."""
    k &= (1 << bits) - 1
    return k - ((k >> (bits - 1)) << bits)


def _written(st) -> list[str]:
    return list(prov.defs(st)) if type(st) is Instruction else []


def _narrow(e: Expr, cmp: str, bound: Expr, unsigned: bool, k: int, bits: int) -> Expr:
    """``e`` known to satisfy ``e cmp bound + k``; ``bits`` non-zero: only
    when ``e - k`` fits that many bits (the compare saw ``e - k`` computed
    with wrapping: the host checks that it cannot wrap)."""
    delta = {"lt": -1, "le": 0, "gt": 1, "ge": 0}[cmp] + k
    side = "cap" if cmp in ("lt", "le") else "floor"
    return [side, e, bound, delta, unsigned, -k, bits]


def launch_proof(plan: FunctionPlan) -> str | None:
    """The JSON text of the kernel's launch proof (see the module
    docstring), or None when some access is outside what it covers."""
    body = plan.fn.body
    if not plan.kernel or body is None or plan.calls.direct or plan.calls.indirect \
            or plan.heap_calls or any(
                type(s) not in _COPIED or (type(s) is Instruction and s.op in _NOT_COPIED)
                for s in body):
        return None
    accesses = []
    builder = _Builder(plan)
    try:
        for acc in plan.accesses:
            if acc.mode in UNCHECKED_MODES:
                continue
            access = _access(builder, acc)
            conds = launch_loops.reach_conditions(builder, acc.path[0])
            accesses.append(["reach", conds, access] if conds else access)
    except NotProvable:
        return None
    if not accesses:
        return None
    return json.dumps(accesses, separators=(",", ":"))


def _access(builder: _Builder, acc) -> list:
    a = acc.access
    v = acc.value
    if len(acc.path) != 1 or a.size is not None or a.width <= 0 \
            or not isinstance(v, prov.Ptr):
        raise NotProvable("access shape")
    al = a.alignment
    at = acc.path[0]
    relations = builder.relations(at)
    if v.off_const is not None:
        c = v.off_const + a.address.offset
        offset: Expr = ["k", 0] if v.off_reg is None \
            else builder.expr(Register(v.off_reg), at, relations)
    elif isinstance(a.address.base, Register) and (
            acc.mode is Mode.ROOT or isinstance(v.root, prov.VarRoot)):
        # base + x + y...: the offset is the sum of what was added to the root
        c = a.address.offset
        root = builder.plan.roots[acc.root] if acc.mode is Mode.ROOT else v.root
        offset = builder.root_offset(a.address.base.name, root, at, relations)
    else:
        raise NotProvable("offset from the root")
    if v.align % al or c % al:
        raise NotProvable("alignment")
    if acc.mode is Mode.ROOT:
        return ["root", acc.root, offset, c, a.width, al]
    if acc.mode is Mode.WINDOW and isinstance(v.root, prov.VarRoot) \
            and v.root.size is not None and v.root.space == "shared" \
            and v.root.align % al == 0:
        return ["var", v.root.size, offset, c, a.width]
    raise NotProvable(f"mode {acc.mode.value}")
