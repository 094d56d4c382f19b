"""The slow path: out-of-line code a failing filter branches to.

It respects the instruction's guard (and, for a copy, the ignore-src
predicate and a src-size of zero: no source is read then), decides
precisely, leaves the violation for the host (``records``: a count in its
site's tally, or a violation record), then jumps back to perform the access
or skips it.  All of it is inline PTX, with the device runtime's verdicts in
its order: a window
access against the variable's extent (:func:`_inline_window`), a root access
against the bounds the host resolved at launch (:func:`_inline_root`), any
other access by classifying its space and looking it up in the allocation
table and the device heap (:func:`.lookup.inline_lookup`).  No check makes a call
(a call charges the callee's ABI frame to the kernel's registers, ptxas,
and an occupancy lost before a single check runs is what issue 14 removes),
except a lookup in a function that makes calls of its own: that one pays
for a call's frame already, and ``__gpusafe_check`` then costs it fewer
registers than the inline lookup (:func:`_runtime_lookup`).  A
skipped access is *not performed*: a load or an atomic has every destination
register zeroed; a ``cp.async`` whose source is bad copies zeros instead
(src-size 0); a bulk copy completing on an mbarrier signals its bytes to the
mbarrier so that the threads waiting on it do not hang.
"""

from __future__ import annotations

import functools

from .. import layout, ptx, query
from .. import provenance as prov
from ..kinds import AccessKind, ViolationKind
from ..nodes import (
    Address,
    ArgumentList,
    Immediate,
    Instruction,
    Negated,
    Register,
    Statement,
    Symbol,
    Variable,
    Vector,
    Verbatim,
)
from ..printer import statements_text
from ..runtime import CHECK_FUNCTION
from . import records
from .arguments import decide, descriptor_param
from .emission import Emitter, I, window_params
from .lookup import inline_lookup
from .planning import Access, Mode


def slow_path(em: Emitter, acc: Access, slow: str, do: str, skip: str, *,
              again: bool = False) -> list[Statement]:
    """The code at label ``slow``: back to ``do`` to perform the access, or on
    to ``skip`` (after the instruction) without it; printed at once (one
    :class:`~gpusafe_instrument.nodes.Verbatim`: nothing later looks into it).
    ``again``: a good access is performed here, by a copy of the instruction
    at the end of the slow path (every verdict that lets it go branches
    there instead of back to ``do``), then on to ``skip``
    (``rewrite.FunctionRewriter._again``)."""
    if not again:
        return _slow_path(em, acc, slow, do, skip)
    here = em.label("again")
    return [*_slow_path(em, acc, slow, here, skip),
            Verbatim(statements_text([ptx.Label(here), acc.instr, I("bra.uni", skip)]))]


def _slow_path(em: Emitter, acc: Access, slow: str, do: str, skip: str) -> list[Statement]:
    instr = acc.instr
    plan = em.plan
    out: list[Statement] = [ptx.Label(slow)]
    if instr.guard is not None:
        g = instr.guard
        out.append(I("bra", skip, guard=ptx.Guard(g.register, not g.negated)))
    out.extend(_not_made(em, acc, do))
    addr, bits = em.address_reg(acc, out)
    if bits != 64:
        a64 = em.reg("a", ".b64")
        out.append(I("cvt.u64.u32", a64, addr))
        addr = a64
    v = acc.value
    if acc.mode is Mode.ROOT:
        assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.ParamRoot)
        out.extend(_inline_root(em, acc, addr, plan.root_index[v.root], do, skip))
        return [Verbatim(statements_text(out))]
    if acc.mode is Mode.WINDOW:
        assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.VarRoot)
        root = v.root
        tally = records.tally(em, acc)
        if tally >= 0 and root.size is not None:
            out.extend(records.tallied_window(em, acc, addr, tally, do))
            out.extend(_not_performed(em, acc))
            out.append(I("bra.uni", skip))
            return [Verbatim(statements_text(out))]
        lo, hi = em.reg("wlo", ".b64"), em.reg("whi", ".b64")
        out.append(I("mov.u64", lo, root.name))
        if v.space == "generic":
            out.append(I(f"cvta.{root.space}.u64", lo, lo))
        if root.size is not None:
            out.append(I("add.u64", hi, lo, root.size))
        else:
            out.append(I("add.u64", hi, lo, em.reg("dyn", ".b64")))
        out.extend(_inline_window(em, acc, addr, lo, hi, do, skip))
        return [Verbatim(statements_text(out))]
    if acc.mode is Mode.ARGUMENT and isinstance(v, prov.Ptr) \
            and isinstance(v.root, prov.ArgRoot) and v.root.index in plan.decided:
        # every caller passed a known window (``arguments``): no lookup
        tally = records.tally(em, acc)
        decision = decide(em, acc, addr, bits, do, tallied=tally >= 0)
        out.extend(decision.code)
        out.append(ptx.Label(decision.record))
        if tally >= 0:
            # each offender keeps its caller's window descriptor: the host
            # knows neither the window nor which caller's root it was
            descriptor = descriptor_param(v.root.index)
            out.extend(records.count(em, addr, tally, descriptor))
            if decision.misaligned != decision.record:
                refused = em.label("refd")
                out.append(I("bra.uni", refused))
                out.append(ptx.Label(decision.misaligned))
                out.extend(records.count(em, addr, tally + 1, descriptor))
                out.append(ptx.Label(refused))
        else:
            out.extend(records.record(em, acc, addr, decision.kind, decision.tag))
        out.extend(_not_performed(em, acc))
        out.append(I("bra.uni", skip))
        return [Verbatim(statements_text(out))]
    if not plan.kernel or plan.calls.direct or plan.calls.indirect:
        # a device function is called through the ABI, and a kernel making
        # calls pays for a call's frame already: the runtime's lookup costs
        # them fewer registers than the inline one (measured over the corpus)
        out.extend(_runtime_lookup(em, acc, addr, do, skip))
    else:
        out.extend(inline_lookup(em, acc, addr, do, skip, lambda: _not_performed(em, acc)))
    return [Verbatim(statements_text(out))]


def _runtime_lookup(em: Emitter, acc: Access, addr: str, do: str,
                    skip: str) -> list[Statement]:
    """``__gpusafe_check`` called for an access of unknown provenance (or
    through a pointer argument, with the window its caller passed)."""
    a = acc.access
    v = acc.value
    out: list[Statement] = []
    lo: object = 0
    hi: object = 0
    if acc.mode is Mode.ARGUMENT:
        assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.ArgRoot)
        lo, hi = em.reg("lo", ".b64"), em.reg("hi", ".b64")
        for reg, param in zip((lo, hi), window_params(v.root.index), strict=True):
            out.append(I("ld.param.u64", reg, Address(Symbol(param))))
        how = layout.how(layout.MODE_ARGUMENT, a.space, a.space == "generic")
    else:
        how = layout.how(layout.MODE_UNKNOWN, a.space, a.space == "generic")
    ctx = em.ctx()
    out.append(em.load_ctx())
    status = em.reg("st", ".b32")
    width: object = a.size.name if a.size is not None else a.width
    out.append(_runtime_call(em, acc, [(".b64", ctx), (".b64", addr), (".b64", lo),
                                       (".b64", hi), (".b32", width), (".b32", a.alignment),
                                       (".b32", acc.site), (".b32", how)], status))
    q = em.reg("q", ".pred")
    if em.debug and not em.plan.kernel:
        # the good access's way out unconditional, so that a debug build's
        # device function performs it here (``slow_path``'s ``again``)
        refused = em.label("refd")
        out += [I("setp.ne.u32", q, status, 0), I("bra", refused, guard=ptx.Guard(q)),
                I("bra.uni", do), ptx.Label(refused)]
    else:
        out.append(I("setp.eq.u32", q, status, 0))
        out.append(I("bra", do, guard=ptx.Guard(q)))
    out.extend(_not_performed(em, acc))
    out.append(I("bra.uni", skip))
    return out


def _runtime_call(em: Emitter, acc: Access, args: list[tuple[str, object]],
                  status: str) -> Verbatim:
    """``status = __gpusafe_check(args...)`` (and, for a lookup, the window of
    the allocation found, kept for the next lookup's filter): the call
    sequence, a ``{ }`` block, written as text at once (it is most of a slow
    path, and all of it but the argument values is the same every time)."""
    a = acc.access
    text = ["\n\t{"]
    for i, (t, val) in enumerate(args):
        text.append(_argument(i, t))
        text.append(f"\n\tst.param{t} \t[__gs_arg{i}], {val};")
    lookup = acc.mode in (Mode.LOOKUP, Mode.ARGUMENT) and a.space in ("global", "generic")
    cache = (em.reg("uclo", ".b64"), em.reg("uchi", ".b64")) if lookup else None
    text.append(_call_and_results(len(args), status, cache))
    return Verbatim("".join(text))


# The text every runtime call repeats, printed from nodes once.

@functools.cache
def _argument(i: int, t: str) -> str:
    return "\n\t" + Variable(".param", t, f"__gs_arg{i}").canonical()


@functools.cache
def _call_and_results(nargs: int, status: str, cache: tuple[str, str] | None) -> str:
    names = tuple(Symbol(f"__gs_arg{i}") for i in range(nargs))
    code: list[Statement] = [
        Variable(".param", ".b8", "__gs_ret", align=8, dims=(layout.CHECK_RESULT.size,)),
        Instruction("call", (ArgumentList((Symbol("__gs_ret"),)), Symbol(CHECK_FUNCTION),
                             ArgumentList(names))),
        _read_result(status, "status"),
    ]
    if cache is not None:
        code += [_read_result(cache[0], "low"), _read_result(cache[1], "high")]
    return statements_text(code) + "\n\t}"


def _read_result(reg: str, field: str) -> Instruction:
    width = "b32" if field == "status" else "b64"
    return I(f"ld.param.{width}", reg,
             Address(Symbol("__gs_ret"), layout.CHECK_RESULT.offset(field)))


def _not_made(em: Emitter, acc: Access, do: str) -> list[Statement]:
    """Branches to ``do`` when the instruction will not make this access: its
    ignore-src predicate is true, or its run-time size is zero."""
    a = acc.access
    out: list[Statement] = []
    ignore = a.ignored_when
    if isinstance(ignore, Register):
        out.append(I("bra", do, guard=ptx.Guard(ignore.name)))
    elif isinstance(ignore, Negated):
        out.append(I("bra", do, guard=ptx.Guard(ignore.operand.name, True)))
    if a.size is not None:
        z = em.reg("z", ".pred")
        out.append(I("setp.eq.u32", z, a.size.name, 0))
        out.append(I("bra", do, guard=ptx.Guard(z)))
    return out


def _not_performed(em: Emitter, acc: Access) -> list[Statement]:
    """What stands in for an access the runtime refused."""
    instr = acc.instr
    if instr.op in ("ld", "ldu", "atom"):
        return _zero_destinations(em, acc)
    if instr.op != "cp":
        return []
    mods = instr.modifiers
    if "bulk" not in mods:
        if acc.access.kind is AccessKind.READ:
            return [_zero_fill(instr)]
        return []
    if "mbarrier::complete_tx::bytes" in mods:
        return [_complete_tx(instr)]
    return []


def _zero_fill(instr: Instruction) -> Instruction:
    """The same ``cp.async`` with src-size 0: it reads nothing and writes zeros
    (a bad source yields zeros, as a bad load does)."""
    ops = list(instr.operands)
    hint = ops[-1:] if "L2::cache_hint" in instr.modifiers else []
    core = ops[:len(ops) - len(hint)]
    return Instruction(instr.opcode, tuple(core[:3]) + (Immediate("0"),) + tuple(hint))


def _complete_tx(instr: Instruction) -> Instruction:
    """``mbarrier.complete_tx`` of the copy's bytes on its mbarrier, as the
    copy would have done: the threads waiting on the mbarrier go on."""
    dst_space = next(m for m in instr.modifiers[2:] if m.split("::", 1)[0] == "shared")
    size, mbar = instr.operands[2], instr.operands[3]
    return Instruction(f"mbarrier.complete_tx.{dst_space}.b64", (mbar, size))


def _zero_destinations(em: Emitter, acc: Access) -> list[Statement]:
    instr = acc.instr
    first = instr.operands[0]
    regs = []
    if isinstance(first, Register):
        regs = [first]
    elif isinstance(first, Vector):
        regs = [r for r in first.items if isinstance(r, Register)]
    out: list[Statement] = []
    elem = max(acc.access.width // query.vector_count(instr.modifiers), 1)
    for r in regs:
        t = em.plan.types.get(r.name)
        size = ptx.type_size(t) if t else elem
        if t == ".pred":
            out.append(I("setp.ne.u32", r.name, 0, 0))
        elif size == 1:
            u = em.reg("u", ".b32")
            out.append(I("mov.u32", u, 0))
            out.append(I("cvt.u8.u32", r.name, u))
        else:
            out.append(I(f"mov.b{size * 8}", r.name, 0))
    return out


def _inline_window(em: Emitter, acc: Access, addr: str, lo: str, hi: str,
                   do: str, skip: str) -> list[Statement]:
    """``__gpusafe_check`` of a window access, inline: the runtime's verdicts
    in its order (null page for a global or generic address, out of the
    variable's window, misaligned), a bad access recorded as the runtime
    records it and not performed.  No call: a kernel whose only slow paths
    are window checks does not reach the runtime, and ptxas does not charge
    the runtime's call tree to its registers."""
    a = acc.access
    v = acc.value
    assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.VarRoot)
    space = v.root.space
    out: list[Statement] = []
    kind = em.reg("kind", ".b32")
    bad = em.reg("bad", ".pred")
    record = em.label("rec")
    tally = records.tally(em, acc)
    # a tallied site's misaligned accesses count in its second tally: the
    # host cannot tell them from accesses outside the variable
    misaligned = em.label("recm") if tally >= 0 else record

    def verdict(value: ViolationKind) -> list[Statement]:
        return [] if tally >= 0 else [I("mov.u32", kind, value.code)]

    if space == "global" or v.space == "generic":
        out.append(I("setp.lt.u64", bad, addr, layout.NULL_PAGE))
        out.extend(verdict(ViolationKind.NULL_POINTER))
        out.append(I("bra", record, guard=ptx.Guard(bad)))
    # outside: not (addr >= lo && hi >= lo && hi - lo >= width && addr - lo <= hi - lo - width)
    w64, span = em.reg("w64", ".b64"), em.reg("span", ".b64")
    if a.size is not None:
        out.append(I("cvt.u64.u32", w64, a.size.name))
    else:
        out.append(I("mov.u64", w64, a.width))
    out.extend(verdict(_OUT_OF_BOUNDS[space]))
    for cmp in ((addr, lo), (hi, lo)):
        out.append(I("setp.lt.u64", bad, *cmp))
        out.append(I("bra", record, guard=ptx.Guard(bad)))
    out.append(I("sub.u64", span, hi, lo))
    out.append(I("setp.lt.u64", bad, span, w64))
    out.append(I("bra", record, guard=ptx.Guard(bad)))
    off = em.reg("off", ".b64")
    out.append(I("sub.u64", span, span, w64))
    out.append(I("sub.u64", off, addr, lo))
    out.append(I("setp.gt.u64", bad, off, span))
    out.append(I("bra", record, guard=ptx.Guard(bad)))
    if a.alignment > 1:
        out.append(I("and.b64", off, addr, a.alignment - 1))
        out.append(I("setp.ne.u64", bad, off, 0))
        out.extend(verdict(ViolationKind.MISALIGNED_ACCESS))
        out.append(I("bra", misaligned, guard=ptx.Guard(bad)))
    out.append(I("bra.uni", do))
    if tally < 0:
        out.append(ptx.Label(record))
        out.extend(records.record(em, acc, addr, kind))
    else:
        refused = em.label("refd")
        out.append(ptx.Label(record))
        out.extend(records.count(em, addr, tally))
        if a.alignment > 1:
            out.append(I("bra.uni", refused))
            out.append(ptx.Label(misaligned))
            out.extend(records.count(em, addr, tally + 1))
        out.append(ptx.Label(refused))
    out.extend(_not_performed(em, acc))
    out.append(I("bra.uni", skip))
    return out


def _inline_root(em: Emitter, acc: Access, addr: str, index: int,
                 do: str, skip: str) -> list[Statement]:
    """``__gpusafe_check`` of a root access, inline: the verdicts of the
    runtime in its order (null page, use after free where the access starts,
    out of the root's allocation, misaligned) against the bounds the host
    resolved for root ``index`` (``layout.ROOT_BOUNDS`` in the launch
    context).  A root the host found in no allocation has the empty window
    ``[0, 0)``: every access through it that is not a null access is out of
    bounds, with tag 0.  No call, so that a kernel of root and window checks
    is not charged the runtime's registers."""
    a = acc.access
    at = layout.root_offset(index)
    field = layout.ROOT_BOUNDS.offset
    ctx = em.ctx()
    kind, tag = em.reg("kind", ".b32"), em.reg("tag", ".b32")
    bad = em.reg("bad", ".pred")
    lo, hi = em.reg("lo", ".b64"), em.reg("hi", ".b64")
    record = em.label("rec")
    tally = records.tally(em, acc)

    def verdict(reg: str, value: object) -> list[Statement]:
        # a tallied site's kind and tag are the host's to classify
        return [] if tally >= 0 else [I("mov.u32", reg, value)]

    out: list[Statement] = [
        I("setp.lt.u64", bad, addr, layout.NULL_PAGE),
        *verdict(kind, ViolationKind.NULL_POINTER.code),
        *verdict(tag, 0),
        I("bra", record, guard=ptx.Guard(bad)),
        em.load_ctx(),
        *([] if tally >= 0 else
          [I("ld.global.u32", tag, Address(Register(ctx), at + field("tag")))]),
        I("ld.global.u64", lo, Address(Register(ctx), at + field("low"))),
        *verdict(kind, ViolationKind.GLOBAL_OUT_OF_BOUNDS.code),
        I("setp.lt.u64", bad, addr, lo),
        I("bra", record, guard=ptx.Guard(bad)),
        # the high end read once the low end is dead: the two are never
        # live at once beside the kernel's values (issue 14: 184 corpus
        # kernels need fewer registers than with both read first, 14 one
        # more; over the optimised builds mean +3.41 -> +2.92)
        I("ld.global.u64", hi, Address(Register(ctx), at + field("high"))),
        # a static zero-width access may start at the end
        I("setp.gt.u64" if a.size is None and a.width == 0 else "setp.ge.u64", bad, addr, hi),
        I("bra", record, guard=ptx.Guard(bad)),
    ]
    state = em.reg("state", ".b32")
    out += [
        I("ld.global.u32", state, Address(Register(ctx), at + field("state"))),
        I("setp.ne.u32", bad, state, layout.ALLOC_LIVE),
        *verdict(kind, ViolationKind.USE_AFTER_FREE.code),
        I("bra", record, guard=ptx.Guard(bad)),
        *verdict(kind, ViolationKind.GLOBAL_OUT_OF_BOUNDS.code),
    ]
    # inside [lo, hi): the access fits when hi - addr >= its width
    span = em.reg("span", ".b64")
    out.append(I("sub.u64", hi, hi, addr))
    if a.size is not None:
        out.append(I("cvt.u64.u32", span, a.size.name))
        out.append(I("setp.lt.u64", bad, hi, span))
    else:
        out.append(I("setp.lt.u64", bad, hi, a.width))
    out.append(I("bra", record, guard=ptx.Guard(bad)))
    if a.alignment > 1:
        out.append(I("and.b64", span, addr, a.alignment - 1))
        out.append(I("setp.ne.u64", bad, span, 0))
        out.extend(verdict(kind, ViolationKind.MISALIGNED_ACCESS.code))
        out.append(I("bra", record, guard=ptx.Guard(bad)))
    out.append(I("bra.uni", do))
    out.append(ptx.Label(record))
    if tally >= 0:
        out.extend(records.count(em, addr, tally))
    else:
        out.extend(records.record(em, acc, addr, kind, tag))
    out.extend(_not_performed(em, acc))
    out.append(I("bra.uni", skip))
    return out


_OUT_OF_BOUNDS = {
    "global": ViolationKind.GLOBAL_OUT_OF_BOUNDS,
    "const": ViolationKind.GLOBAL_OUT_OF_BOUNDS,  # constant memory is in the global window
    "shared": ViolationKind.SHARED_OUT_OF_BOUNDS,
    "local": ViolationKind.LOCAL_OUT_OF_BOUNDS,
}
