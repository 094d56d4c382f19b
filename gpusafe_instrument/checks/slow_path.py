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
table and the device heap (:func:`_inline_lookup`).  No check makes a call
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
from typing import NamedTuple

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
from ..runtime import CHECK_FUNCTION, DYNAMIC_SHARED
from . import records
from .arguments import decide, descriptor_param
from .emission import Emitter, I, window_params
from .planning import Access, Mode


def slow_path(em: Emitter, acc: Access, slow: str, do: str, skip: str, *,
              again: bool = False) -> list[Statement]:
    """The code at label ``slow``: back to ``do`` to perform the access, or on
    to ``skip`` (after the instruction) without it; printed at once (one
    :class:`~gpusafe_instrument.nodes.Verbatim`: nothing later looks into it).
    ``again``: a good access is performed here, by a copy of the instruction,
    then on to ``skip`` (``rewrite.FunctionRewriter._again``)."""
    code = _slow_path(em, acc, slow, do, skip)
    if not again:
        return code
    text = "".join(v.text for v in code)  # type: ignore[attr-defined]
    back = statements_text([I("bra.uni", do)])
    performed = statements_text([acc.instr, I("bra.uni", skip)])
    return [Verbatim(text.replace(back, performed))]


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
        out.extend(_inline_lookup(em, acc, addr, do, skip))
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


class _Verdicts:
    """The labels a lookup branches to with a verdict: each sets the kind
    (and, where no allocation was found, the tag 0) right before the
    record, so that no kind register is live while the lookup searches and
    judges (issue 14: a lookup's temporaries count in the kernel's registers
    where they are live beside the program's, and a kind set first was live
    through all of it)."""

    def __init__(self, em: Emitter, record: str) -> None:
        self.em, self.record = em, record
        self.kind, self.tag = em.reg("kind", ".b32"), em.reg("tag", ".b32")
        self.labels: dict[tuple[ViolationKind, bool], str] = {}

    def __call__(self, kind: ViolationKind, *, tagged: bool) -> str:
        """The label of verdict ``kind``; ``tagged``: the tag register holds
        the allocation's tag (else the record's tag is 0)."""
        key = (kind, tagged)
        if key not in self.labels:
            self.labels[key] = self.em.label("vk")
        return self.labels[key]

    def code(self) -> list[Statement]:
        """The verdicts' blocks, then ``record`` (the last one falls into it)."""
        out: list[Statement] = []
        for n, ((kind, tagged), label) in enumerate(self.labels.items(), 1):
            out.append(ptx.Label(label))
            if not tagged:
                out.append(I("mov.u32", self.tag, 0))
            out.append(I("mov.u32", self.kind, kind.code))
            if n < len(self.labels):
                out.append(I("bra.uni", self.record))
        out.append(ptx.Label(self.record))
        return out


def _inline_lookup(em: Emitter, acc: Access, addr: str, do: str, skip: str) -> list[Statement]:
    """``__gpusafe_check`` of an access of unknown provenance in a kernel
    that makes no call, inline: the runtime's verdicts in its order.  A
    generic address is classified by its space (``isspacep``); a shared one
    is judged against the block's shared window; a global one is looked up
    in the allocation table (binary search), then in the device heap's
    blocks (newest first), and a good access keeps the allocation's window
    in the lookup cache (``uclo``/``uchi``).  No call: a kernel that looks
    pointers up is not charged the runtime's registers.  The kind and the
    tag of a record are set on the way to it (:class:`_Verdicts`).

    Every way out of the lookup sets the cache: the allocation's window
    after a good access to one of at least 16 bytes, the empty window after
    any other (a smaller allocation, a shared or local address, a refused
    access), as ``__gpusafe_check``'s result does.  So the cache the
    lookup was entered with is dead through the search, the heap scan and
    the record: its 4 registers are not live beside them (issue 14:
    ``linked_list_walk`` 29 -> 25 registers at sm_75, 28 -> 24 at sm_80,
    28 -> 23 at sm_90, -G 30 -> 26; a kernel keeping the old window there
    paid for it at its peak).  What the next access loses is a cached
    window it would otherwise have kept: it looks its pointer up again."""
    a = acc.access
    space = a.space
    generic = space == "generic"
    ctx = em.ctx()
    bad = em.reg("bad", ".pred")
    size = em.reg("hi", ".b64")
    verdict = _Verdicts(em, em.label("rec"))
    forget = em.label("edo")  # the empty cache, then on to ``do``
    out: list[Statement] = []
    if space in ("global", "generic"):
        out.append(I("setp.lt.u64", bad, addr, layout.NULL_PAGE))
        out.append(I("bra", verdict(ViolationKind.NULL_POINTER, tagged=False),
                     guard=ptx.Guard(bad)))
    local, shared = em.label("local"), em.label("shared")
    if generic:
        out.append(I("isspacep.shared", bad, addr))
        out.append(I("bra", shared, guard=ptx.Guard(bad)))
        out.append(I("isspacep.local", bad, addr))
        out.append(I("bra", local, guard=ptx.Guard(bad)))
    if space in ("global", "generic"):
        judge, freed = em.label("judge"), em.reg("freed", ".pred")
        out.extend(_global_lookup(em, addr, freed, verdict, judge))
        out.append(ptx.Label(judge))
        out.extend(_judge(em, acc, addr, em.reg("span", ".b64"), size, freed,
                          ViolationKind.GLOBAL_OUT_OF_BOUNDS, verdict, do, cache=16,
                          uncached=forget))
    if space in ("shared", "generic"):
        out.append(ptx.Label(shared))
        # the block's shared window: [0, end of the dynamic shared memory)
        out.append(em.load_ctx())
        d32 = em.reg("ld32", ".b32")
        out.append(I("ld.global.u32", d32, Address(Register(ctx),
                     layout.LAUNCH_CONTEXT.offset("dynamic_shared_size"))))
        out.append(I("cvt.u64.u32", size, d32))
        end = em.reg("shend", ".b64")
        out.append(I("mov.u64", end, DYNAMIC_SHARED))
        out.append(I("add.u64", size, size, end))
        sa = addr
        if generic:
            sa = em.reg("sa", ".b64")
            out.append(I("cvta.to.shared.u64", sa, addr))
        out.extend(_judge(em, acc, sa, sa, size, None, ViolationKind.SHARED_OUT_OF_BOUNDS,
                          verdict, forget))
    if space in ("local", "generic"):
        out.append(ptx.Label(local))
        if a.alignment > 1:
            t = em.reg("span", ".b64")
            out.append(I("and.b64", t, addr, a.alignment - 1))
            out.append(I("setp.ne.u64", bad, t, 0))
            out.append(I("bra", verdict(ViolationKind.MISALIGNED_ACCESS, tagged=False),
                         guard=ptx.Guard(bad)))
        out.append(I("bra.uni", forget))
    out.extend(verdict.code())
    out.extend(records.record(em, acc, addr, verdict.kind, verdict.tag))
    out.extend(_not_performed(em, acc))
    out.extend(_empty_cache(em))
    out.append(I("bra.uni", skip))
    out.append(ptx.Label(forget))
    out.extend(_empty_cache(em))
    out.append(I("bra.uni", do))
    return out


def _empty_cache(em: Emitter) -> list[Statement]:
    """The lookup cache set to the empty window (no address passes its filter)."""
    return [I("mov.u64", em.reg("uclo", ".b64"), layout.EMPTY_WINDOW[0]),
            I("mov.u64", em.reg("uchi", ".b64"), layout.EMPTY_WINDOW[1])]


class _Search(NamedTuple):
    """The registers of a search of the allocation table."""

    tp: str  # the table
    n: str
    first: str
    mid: str
    ep: str  # the entry found
    lo: str  # its base
    size: str
    bad: str


def _table_search(em: Emitter, key: str, r: _Search, loop: str, found: str,
                  none: str) -> list[Statement]:
    """Binary search of the launch's allocation table (sorted by base) for
    the last entry whose base is at or below ``key``: its address in
    ``r.ep``, base and size in ``r.lo``, ``r.size``; on to ``none`` when
    every base is above it."""
    entry = layout.ALLOCATION_ENTRY
    ctxf = layout.LAUNCH_CONTEXT.offset
    ctx = em.ctx()
    return [
        em.load_ctx(),
        I("ld.global.u64", r.tp, Address(Register(ctx), ctxf("table"))),
        I("ld.global.u32", r.n, Address(Register(ctx), ctxf("table_len"))),
        I("mov.u32", r.first, 0),
        ptx.Label(loop),  # the first entry with base > key in [first, n)
        I("setp.ge.u32", r.bad, r.first, r.n),
        I("bra", found, guard=ptx.Guard(r.bad)),
        I("add.u32", r.mid, r.first, r.n),
        I("shr.u32", r.mid, r.mid, 1),
        I("mad.wide.u32", r.ep, r.mid, entry.size, r.tp),
        I("ld.global.u64", r.lo, Address(Register(r.ep), entry.offset("base"))),
        I("setp.le.u64", r.bad, r.lo, key),
        I("add.u32", r.first, r.mid, 1, guard=ptx.Guard(r.bad)),
        I("mov.u32", r.n, r.mid, guard=ptx.Guard(r.bad, True)),
        I("bra.uni", loop),
        ptx.Label(found),
        I("setp.eq.u32", r.bad, r.first, 0),
        I("bra", none, guard=ptx.Guard(r.bad)),
        I("sub.u32", r.first, r.first, 1),
        I("mad.wide.u32", r.ep, r.first, entry.size, r.tp),
        I("ld.global.u64", r.lo, Address(Register(r.ep), entry.offset("base"))),
        I("ld.global.u64", r.size, Address(Register(r.ep), entry.offset("size"))),
    ]


def _global_lookup(em: Emitter, addr: str, freed: str, verdict: _Verdicts,
                   judge: str) -> list[Statement]:
    """The allocation holding ``addr`` (``lo``, ``hi`` = its size, the
    verdict's tag, ``freed``: not live), on to ``judge``; or out of bounds
    of none, on to that verdict: the allocation table's entry (binary
    search: the last base at or below the address), else the newest
    published device-heap block whose extent and red zone hold it.  The
    context is loaded again for the heap, the state is a predicate as soon
    as it is read: neither is live through the search."""
    ctx = em.ctx()
    lo, size = em.reg("lo", ".b64"), em.reg("hi", ".b64")
    tag, state = verdict.tag, em.reg("state", ".b32")
    bad = em.reg("bad", ".pred")
    tp, ep, t = em.reg("tp", ".b64"), em.reg("ep", ".b64"), em.reg("span", ".b64")
    first, n, mid = em.reg("bl", ".b32"), em.reg("bn", ".b32"), em.reg("bm", ".b32")
    loop, found_none, heap, heap_loop = (em.label("bs"), em.label("bsd"), em.label("heap"),
                                         em.label("hs"))
    none = verdict(ViolationKind.GLOBAL_OUT_OF_BOUNDS, tagged=False)
    entry = layout.ALLOCATION_ENTRY
    block = functools.partial(_heap_field, ep)
    out: list[Statement] = [
        *_table_search(em, addr, _Search(tp, n, first, mid, ep, lo, size, bad),
                       loop, found_none, heap),
        I("sub.u64", t, addr, lo),
        I("setp.ge.u64", bad, t, size),
        I("bra", heap, guard=ptx.Guard(bad)),
        I("ld.global.u32", tag, Address(Register(ep), entry.offset("tag"))),
        I("ld.global.u32", state, Address(Register(ep), entry.offset("state"))),
        I("setp.ne.u32", freed, state, layout.ALLOC_LIVE),
        I("bra.uni", judge),
        # the device heap's blocks, newest first (__gpusafe_heap_find)
        ptx.Label(heap),
        em.load_ctx(),
        I("ld.global.u64", tp, Address(Register(ctx), layout.LAUNCH_CONTEXT.offset("heap"))),
        I("setp.eq.u64", bad, tp, 0),
        I("bra", none, guard=ptx.Guard(bad)),
        I("ld.volatile.global.u32", n, Address(Register(tp), layout.HEAP_HEADER.offset("count"))),
        I("ld.global.u32", mid, Address(Register(tp), layout.HEAP_HEADER.offset("capacity"))),
        I("min.u32", n, n, mid),
        ptx.Label(heap_loop),
        I("setp.eq.u32", bad, n, 0),
        I("bra", none, guard=ptx.Guard(bad)),
        I("sub.u32", n, n, 1),
        # the heap's address read again at each block from the context (it
        # does not change in a launch): not live through the scan beside the
        # kernel's values (issue 14: linked_list_walk 25 -> 24 at sm_75,
        # pointer_table 23 -> 21; the same for the allocation table's
        # search costs linked_list_walk -G one more)
        em.load_ctx(),
        I("ld.global.u64", ep, Address(Register(ctx), layout.LAUNCH_CONTEXT.offset("heap"))),
        I("mad.wide.u32", ep, n, layout.HEAP_ENTRY.size, ep),
        I("ld.volatile.global.u32", state, block("state")),
        I("setp.eq.u32", bad, state, 0),
        I("bra", heap_loop, guard=ptx.Guard(bad)),
        I("setp.ne.u32", freed, state, layout.ALLOC_LIVE),
        I("ld.volatile.global.u64", lo, block("base")),
        I("sub.u64", t, addr, lo),
        # a block's size does not change once it is published: read again
        # on a match, so that the size and its sum with the red zone are
        # not live at once
        I("ld.volatile.global.u64", size, block("size")),
        I("add.u64", size, size, layout.HEAP_RED_ZONE),
        I("setp.ge.u64", bad, t, size),
        I("bra", heap_loop, guard=ptx.Guard(bad)),
        I("ld.volatile.global.u64", size, block("size")),
        I("ld.volatile.global.u32", tag, block("tag")),
        I("bra.uni", judge),
    ]
    return out


def _heap_field(ep: str, field: str) -> Address:
    """Field ``field`` of the heap entry that ``ep`` addresses less the heap's header."""
    return Address(Register(ep), layout.HEAP_HEADER.size + layout.HEAP_ENTRY.offset(field))


def _judge(em: Emitter, acc: Access, addr: str, t: str, size: str, freed: str | None,
           oob: ViolationKind, verdict: _Verdicts, do: str, *,
           cache: int | None = None, uncached: str | None = None) -> list[Statement]:
    """The verdict on ``addr``, at offset ``t`` into the extent of ``size``
    bytes found for it (an address below the extent: an offset past any
    size, as the subtraction wraps), with ``freed`` (a predicate: the
    allocation is not live; None: a variable's window, always live and
    without a tag; ``oob``: the out-of-bounds kind): freed where the access
    starts, out of the extent, misaligned.  A good access goes on to ``do``,
    keeping the extent as the lookup cache when ``cache`` is not None and
    the extent has at least that many bytes (its low end: ``addr - t``;
    a smaller one goes on to ``uncached`` instead).
    Only the offset and the size are live: not the extent's low end."""
    a = acc.access
    tagged = freed is not None
    bad = em.reg("bad", ".pred")
    out: list[Statement] = []
    if freed is not None:
        uaf = em.reg("uaf", ".pred")
        out += [
            I("setp.lt.u64", uaf, t, size),
            I("and.pred", uaf, uaf, freed),
            I("bra", verdict(ViolationKind.USE_AFTER_FREE, tagged=True), guard=ptx.Guard(uaf)),
        ]
    width: object = a.width
    if a.size is not None:
        width = em.reg("w64", ".b64")
        out.append(I("cvt.u64.u32", width, a.size.name))
    out += [
        I("setp.lt.u64", bad, size, width),
        I("bra", verdict(oob, tagged=tagged), guard=ptx.Guard(bad)),
        I("sub.u64", size, size, width),
        I("setp.gt.u64", bad, t, size),
        I("bra", verdict(oob, tagged=tagged), guard=ptx.Guard(bad)),
        I("add.u64", size, size, width),
    ]
    if a.alignment > 1:
        m = em.reg("al", ".b64")
        out.append(I("and.b64", m, addr, a.alignment - 1))
        out.append(I("setp.ne.u64", bad, m, 0))
        out.append(I("bra", verdict(ViolationKind.MISALIGNED_ACCESS, tagged=tagged),
                     guard=ptx.Guard(bad)))
    if cache is not None:
        if cache:
            out.append(I("setp.lt.u64", bad, size, cache))
            out.append(I("bra", uncached or do, guard=ptx.Guard(bad)))
        uclo = em.reg("uclo", ".b64")
        out.append(I("sub.u64", uclo, addr, t))
        out.append(I("add.u64", em.reg("uchi", ".b64"), uclo, size))
    out.append(I("bra.uni", do))
    return out


_OUT_OF_BOUNDS = {
    "global": ViolationKind.GLOBAL_OUT_OF_BOUNDS,
    "const": ViolationKind.GLOBAL_OUT_OF_BOUNDS,  # constant memory is in the global window
    "shared": ViolationKind.SHARED_OUT_OF_BOUNDS,
    "local": ViolationKind.LOCAL_OUT_OF_BOUNDS,
}


def warp_collectives(module) -> bool:
    """Whether ``module``'s code may use ``activemask``/``match.sync``
    (PTX ISA 6.2 on sm_70 or later)."""
    version, target = module.version, module.target
    if version is None or target is None or version.number < (6, 2):
        return False
    sm = next((t for t in target.targets if t.startswith("sm_")), "")
    digits = "".join(ch for ch in sm[3:] if ch.isdigit())
    return bool(digits) and int(digits) >= 70


def pinned_query(em: Emitter, base: str, limits: dict[int, str]) -> list[Statement]:
    """The query of a pinned base (``optimisation.LoopHoister``), run right
    after ``base`` is defined: the bytes from ``base`` to the end of the live
    allocation of the launch's table holding it (binary search, as
    ``_global_lookup``), 0 when there is none (a freed allocation, a
    device-heap block, no allocation); then for each access end ``e`` its
    limit ``limits[e]``: how many offsets ``X`` keep ``[X, X + e)`` in those
    bytes, 0 when none does.  It records nothing: the accesses it lets
    through are in bounds, and the others take their slow paths, which judge
    and record them as before.

    Where the module may use warp collectives, the lanes that arrive
    together (``activemask``) and hold the same base (``match.any``) query it
    once: the highest of them searches and ``shfl.sync`` gives its answer to
    the others (a warp whose 32 threads follow 4 lists searches 4 times, not
    32).  No lane leaves between the match and the shuffle, so every lane of
    the mask reaches the shuffle."""
    lo, size = em.reg("lo", ".b64"), em.reg("hi", ".b64")
    state, bad = em.reg("state", ".b32"), em.reg("bad", ".pred")
    tp, ep, t = em.reg("tp", ".b64"), em.reg("ep", ".b64"), em.reg("span", ".b64")
    first, n, mid = em.reg("bl", ".b32"), em.reg("bn", ".b32"), em.reg("bm", ".b32")
    loop, found, done = em.label("pq"), em.label("pqd"), em.label("pqe")
    entry = layout.ALLOCATION_ENTRY
    out: list[Statement] = []
    warp = warp_collectives(em.plan.module)
    if warp:
        mask, leader = em.reg("wm", ".b32"), em.reg("wl", ".b32")
        shared = em.label("pqs")
        out += [
            I("activemask.b32", mask),
            I("match.any.sync.b64", mid, base, mask),
            I("bfind.u32", leader, mid),  # the highest peer's lane
            I("mov.u32", n, "%laneid"),
            I("setp.ne.u32", bad, n, leader),
            I("bra", shared, guard=ptx.Guard(bad)),
        ]
    out += [
        I("mov.u64", t, 0),
        *_table_search(em, base, _Search(tp, n, first, mid, ep, lo, size, bad),
                       loop, found, done),
        I("ld.global.u32", state, Address(Register(ep), entry.offset("state"))),
        I("sub.u64", t, base, lo),
        I("setp.ge.u64", bad, t, size),
        I("setp.ne.or.u32", bad, state, layout.ALLOC_LIVE, bad),
        I("sub.u64", t, size, t),
        I("mov.u64", t, 0, guard=ptx.Guard(bad)),
        ptx.Label(done),
    ]
    if warp:
        # one 32-bit shuffle: past 4 GiB from the base the slow path judges
        out += [
            I("min.u64", t, t, 0xFFFFFFFF),
            I("cvt.u32.u64", first, t),
            ptx.Label(shared),
            I("shfl.sync.idx.b32", first, first, leader, 31, mask),
            I("cvt.u64.u32", t, first),
        ]
    for end, lim in limits.items():
        out.append(I("sub.u64", lim, t, max(end, 1) - 1))
        out.append(I("setp.lt.u64", bad, t, max(end, 1)))
        out.append(I("mov.u64", lim, 0, guard=ptx.Guard(bad)))
    return out
