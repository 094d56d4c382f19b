"""The conditions a fast filter tests: each is true when its access may be bad.

A filter is a list of conditions.  Conditions of several accesses merge (same
form, same register, same root or variable: one compare covers the union of
their offset ranges), and one condition can imply another (the dominated-check
optimisation), so they are plain values, derived here from a planned access.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .. import provenance as prov
from ..nodes import Register
from .planning import Access, FunctionPlan, Mode


class Form(enum.Enum):
    """What a condition compares (``Cond.root`` and ``Cond.reg`` per form)."""

    ROOT_OFFSET = "root offset"
    """``reg`` is the offset from root ``root``'s pointer: ``reg + [start, end)``
    leaves the check slot's limit."""
    ROOT_CONSTANT = "root constant"
    """The offset from root ``root``'s pointer is the constant ``start``."""
    ROOT_ADDRESS = "root address"
    """``reg`` is the full address: the offset is ``reg`` minus root ``root``'s
    pointer (read from the parameter in the prologue)."""
    WINDOW_ADDRESS = "window address"
    """``reg`` minus the variable ``root`` = (name, space, bits), plus
    ``[start, end)``, leaves the variable."""
    WINDOW_OFFSET = "window offset"
    """``reg`` is the offset from the variable ``root`` = (name, space, bits)."""
    LOOKUP = "lookup"
    """``reg + [start, end)`` leaves the last allocation the runtime found."""
    PINNED = "pinned lookup"
    """``reg`` is the offset from the loop-invariant register ``root`` whose
    allocation one query before the loop found; ``reg + [start, end)``
    leaves the bytes from ``root`` to the end of that allocation
    (``optimisation.LoopHoister``: 2 instructions instead of the lookup
    cache's 4)."""
    ALIGNMENT = "alignment"
    """``reg`` + ``root[0]`` (or the constant address ``root[1]`` when ``reg``
    is None) is not a multiple of ``align``."""
    ALWAYS = "always"
    """The access always goes to the slow path."""


ROOT_FORMS = (Form.ROOT_OFFSET, Form.ROOT_CONSTANT, Form.ROOT_ADDRESS)
WINDOW_FORMS = (Form.WINDOW_ADDRESS, Form.WINDOW_OFFSET)


@dataclass(frozen=True)
class Cond:
    """The access may be bad when (see :class:`Form`) ..."""

    form: Form
    reg: str | None
    root: object
    align: int
    start: int
    end: int


def conditions(plan: FunctionPlan, acc: Access) -> list[Cond]:
    """The conditions of one root, window or lookup access's filter."""
    a = acc.access
    w = a.width
    al = a.alignment
    imm = a.address.offset
    v = acc.value
    base = a.address.base
    out: list[Cond] = []
    if w == 0:  # the size is known only at run time: the runtime decides
        return [Cond(Form.ALWAYS, None, None, 1, 0, 0)]
    if acc.mode is Mode.ROOT:
        assert isinstance(v, prov.Ptr)
        static_align = v.align % al == 0 and imm % al == 0
        align = al if static_align else 1
        if acc.fallback_root >= 0:
            assert isinstance(base, Register)
            out.append(Cond(Form.ROOT_ADDRESS, base.name, acc.root, align, imm, imm + w))
        else:
            assert v.off_const is not None
            s0 = v.off_const + imm
            if v.off_reg is None:
                out.append(Cond(Form.ROOT_CONSTANT, None, acc.root, align, s0, s0 + w))
            else:
                out.append(Cond(Form.ROOT_OFFSET, v.off_reg, acc.root, align, s0, s0 + w))
        if not static_align and al > 1:
            out.append(alignment_condition(plan, acc))
        return out
    if acc.mode is Mode.LOOKUP:
        assert isinstance(base, Register) and imm >= 0
        out.append(Cond(Form.LOOKUP, base.name, None, 1, imm, imm + w))
        if al > 1:
            out.append(alignment_condition(plan, acc))
        return out
    assert acc.mode is Mode.WINDOW and isinstance(v, prov.Ptr)
    root = v.root
    assert isinstance(root, prov.VarRoot)
    if not isinstance(base, Register):  # [var+imm] outside the variable
        return [Cond(Form.ALWAYS, None, None, 1, 0, 0)]
    bits = plan.bits(base.name)
    if v.off_reg is not None and v.off_const is not None:
        s0 = v.off_const + imm
        rbits = plan.bits(v.off_reg)
        out.append(Cond(Form.WINDOW_OFFSET, v.off_reg, (root.name, v.space, rbits), 1, s0,
                        s0 + w))
    else:
        out.append(Cond(Form.WINDOW_ADDRESS, base.name, (root.name, v.space, bits), 1, imm,
                        imm + w))
    if not (root.align % al == 0 and v.align % al == 0 and imm % al == 0) and al > 1:
        out.append(alignment_condition(plan, acc))
    return out


def alignment_condition(plan: FunctionPlan, acc: Access) -> Cond:
    """The access's address is misaligned.  When the base register is
    ``X + Y`` with ``Y`` always a multiple of the alignment (a pointer plus a
    scaled index: ``guards.aligned_part``), the condition tests ``X``, which
    a loop often leaves unchanged: the loop then tests it once, before it."""
    a = acc.access
    base = a.address.base
    al = a.alignment
    name = base.name if isinstance(base, Register) else None
    if name is not None and len(acc.path) == 1:
        name = plan.guards().aligned_part(name, acc.path[0], al) or name
    imm = a.address.offset % al
    return Cond(Form.ALIGNMENT, name, (imm, a.address.offset if name is None else 0), al, 0, 0)


def merge(plan: FunctionPlan, conds: list[Cond]) -> list[Cond]:
    """One condition per (form, register, root group or variable, alignment),
    covering the union of the merged offset ranges."""
    out: dict[tuple, Cond] = {}
    for c in conds:
        root = plan.find(c.root) if c.form is Form.ROOT_OFFSET else c.root  # type: ignore[arg-type]
        key = (c.form, c.reg, root, c.align)
        if key in out:
            m = out[key]
            out[key] = Cond(m.form, m.reg, m.root, m.align, min(m.start, c.start),
                            max(m.end, c.end))
        else:
            out[key] = c
    return list(out.values())


def constant_failure(plan: FunctionPlan, c: Cond) -> bool:
    """Whether the emitted filter turns ``c`` into an unconditional branch (or
    nothing): such a condition sets no predicate another filter could reuse."""
    if c.form is Form.ALWAYS:
        return True
    if c.form is Form.ROOT_CONSTANT:
        return c.start < 0
    if c.form in WINDOW_FORMS:
        root = plan.vars[c.root[0]]  # type: ignore[index]
        return root.size is not None and root.size - max(c.end, 0) < 0
    if c.form is Form.ALIGNMENT:
        return c.reg is None
    return c.form not in (Form.ROOT_OFFSET, Form.ROOT_ADDRESS)


def key(plan: FunctionPlan, c: Cond) -> tuple:
    """Conditions with equal keys compare the same thing (one may imply the other)."""
    if c.form in (Form.ROOT_OFFSET, Form.ROOT_CONSTANT):
        return (c.form, c.reg, plan.find(c.root))  # type: ignore[arg-type]
    if c.form is Form.ALIGNMENT:
        return (c.form, c.reg)
    return (c.form, c.reg, c.root)


def implies(plan: FunctionPlan, a: Cond, b: Cond) -> bool:
    """Whether ``a`` false (when checked) means ``b`` false (same registers)."""
    if a.form != b.form or a.reg != b.reg or constant_failure(plan, a):
        return False
    if b.form is Form.ALIGNMENT:
        return (a.reg is not None and a.align % b.align == 0
                and (b.root[0] - a.root[0]) % b.align == 0)  # type: ignore[index]
    if b.form not in ROOT_FORMS + WINDOW_FORMS:
        return False
    if b.form in (Form.ROOT_OFFSET, Form.ROOT_CONSTANT):
        if plan.find(a.root) != plan.find(b.root):  # type: ignore[arg-type]
            return False
    elif a.root != b.root:
        return False
    return a.align % b.align == 0 and a.start <= b.start and b.end <= a.end


def inputs(plan: FunctionPlan, acc: Access) -> set[str]:
    """The registers the filter of ``acc`` reads."""
    return {c.reg for c in conditions(plan, acc) if c.reg is not None}
