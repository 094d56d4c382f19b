"""Pointer arguments that carry a window: what the callers know, the callee judges.

A device function's 8-byte parameter is a pointer of unknown provenance inside
the function: it could only be judged by looking the address up (the
allocation table, the device heap, the space of a generic address), which
compiled in a function reached through the ABI costs ptxas a frame and +10..+20
registers (``docs/decisions.md``, issue 14).  But its callers often know where
it points: into one of their kernel's pointer parameters (a *root*, whose
allocation the host resolves at launch), a ``.shared``, ``.global`` or
``.local`` variable, or their own parameter that carries a window.  So the
bounds travel with the pointer.

* A parameter is **decided** when it has a checked call site and every checked
  call site passes it such a pointer (a fixed point over the call graph).  Each
  call site then passes, in three hidden parameters after the launch context
  (``__gpusafe_wlo<k>``, ``__gpusafe_whi<k>``, ``__gpusafe_wd<k>``), the
  generic ``[low, high)`` of the root's allocation or of the variable, and a
  descriptor: for a root, the offset of its bounds (``layout.ROOT_BOUNDS``) in
  the launch context; for a variable, the code of its out-of-bounds kind.  A
  freed root passes ``[low, low)``, so that no access passes the fast filter.
  Inside the callee, an access through the parameter (``Mode.ARGUMENT``) is
  filtered against the window and decided inline (:func:`decide`): the
  verdicts of a kernel's own root check (null page, outside, freed,
  misaligned, against the root's bounds read from the launch context) or
  window check (null page, outside the variable, misaligned), with no call
  and no lookup.
* A parameter some call site passes a pointer of unknown provenance (loaded
  from memory, merged from two roots, returned by a call, or passed by a
  function that frees device-heap blocks: a root's state is the launch's)
  keeps the runtime's lookup.  When some call site passes a local variable
  (or forwards a window holding one), it still takes ``[low, high)`` in two
  hidden parameters: a local access is judged against that window, a generic
  one by the runtime, which tells a local address from others with
  ``isspacep.local``; the other call sites pass ``0, 0`` (not known).

The window is the root's or the variable's, not the pointer's: a caller
passing ``p + n`` past its allocation gives the callee the allocation's
bounds, and an access through it is out of bounds as it would be in the
caller.  A parameter no call site passes a known pointer to changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Union

from .. import layout, ptx, query
from .. import provenance as prov
from ..kinds import ViolationKind
from ..nodes import Address, ArgumentList, Instruction, Register, Statement, Symbol
from .emission import CONTEXT_REGISTER, Emitter, I, window_params
from .planning import Access, FunctionPlan
from .selection import calls_in

Source = Union[prov.VarRoot, prov.ParamRoot, int]
"""Where an argument points: a variable of the caller, a pointer parameter
of the calling kernel (a root), or the caller's own parameter of that index."""

LOCAL, VARIABLE, ROOT = "local", "variable", "root"
"""What a window holds (``FunctionPlan.window_kinds``): a local variable,
another variable, a root's allocation."""

DESCRIPTOR_PARAM = "__gpusafe_wd"
"""Name (before the parameter index) of the hidden parameter describing a
decided parameter's window: a root's bounds offset, or a variable's kind."""

_OUT_OF_BOUNDS = {
    "global": ViolationKind.GLOBAL_OUT_OF_BOUNDS,
    "const": ViolationKind.GLOBAL_OUT_OF_BOUNDS,  # constant memory is in the global window
    "shared": ViolationKind.SHARED_OUT_OF_BOUNDS,
    "local": ViolationKind.LOCAL_OUT_OF_BOUNDS,
}


def descriptor_param(k: int) -> str:
    """The hidden parameter holding the descriptor of decided parameter ``k``."""
    return DESCRIPTOR_PARAM + str(k)


def hidden_params(fp: FunctionPlan, k: int) -> tuple[str, ...]:
    """The hidden parameters of ``fp``'s parameter ``k`` (which carries a window)."""
    names = window_params(k)
    return (*names, descriptor_param(k)) if k in fp.decided else names


@dataclass(frozen=True)
class CallSite:
    """A direct call, and where each argument points."""

    instr: Instruction
    callee: str
    sources: tuple[Source | None, ...]


def _source(value: prov.Value | None) -> Source | None:
    if not isinstance(value, prov.Ptr):
        return None
    root = value.root
    if isinstance(root, prov.VarRoot):
        if root.space == "local":
            return root if root.size is not None else None
        if value.space == "generic" or (root.space == "global" and value.space == "global"):
            return root
        return None
    if isinstance(root, prov.ParamRoot):
        return root if value.space in ("global", "generic") else None
    if isinstance(root, prov.ArgRoot):
        return root.index
    return None


def _kind(source: prov.VarRoot | prov.ParamRoot) -> str:
    if isinstance(source, prov.ParamRoot):
        return ROOT
    return LOCAL if source.space == "local" else VARIABLE


def _arguments(instr: Instruction) -> tuple:
    """The argument list of a direct call (after the callee's name)."""
    ops = instr.operands
    for i, o in enumerate(ops):
        if isinstance(o, Symbol):
            nxt = ops[i + 1] if i + 1 < len(ops) else None
            return nxt.items if isinstance(nxt, ArgumentList) else ()
    return ()


def call_sites(plan: FunctionPlan, callees: set[str]) -> list[CallSite]:
    """The calls of ``plan``'s function to ``callees``, with each argument's
    source: the provenance of the register stored to the argument's
    ``.param`` variable in the call sequence (or passed directly)."""
    out: list[CallSite] = []
    stored: dict[tuple[tuple[int, ...], str], prov.Value | None] = {}
    for path, instr, state in plan.analyze().states():
        op = instr.op
        if op == "st" and "param" in instr.modifiers and len(instr.operands) == 2:
            dst, val = instr.operands
            if isinstance(dst, Address) and isinstance(dst.base, Symbol) and dst.offset == 0:
                value = state.get(val.name) if isinstance(val, Register) else None
                stored[(path[:-1], dst.base.name)] = value
        elif op == "call":
            target = query.call_target(instr)
            if target not in callees:
                continue
            sources = []
            for arg in _arguments(instr):
                if isinstance(arg, Symbol):
                    value = stored.get((path[:-1], arg.name))
                elif isinstance(arg, Register):
                    value = state.get(arg.name)
                else:
                    value = None
                sources.append(_source(value))
            out.append(CallSite(instr, target, tuple(sources)))  # type: ignore[arg-type]
    return out


def _freeing(plans: list[FunctionPlan]) -> set[str]:
    """The functions that call the device heap's ``free`` (the CUDA
    runtime's, declared and not defined), directly or through their calls."""
    out = set()
    for fp in plans:
        free = next((f for f in fp.module.functions if f.name == "free"), None)
        if free is not None and free.body is None and "free" in calls_in(fp.fn.body or []):
            out.add(fp.fn.name)
    changed = True
    while changed:
        changed = False
        for fp in plans:
            if fp.fn.name not in out and calls_in(fp.fn.body or []) & out:
                out.add(fp.fn.name)
                changed = True
    return out


def plan_windows(plans: list[FunctionPlan]) -> dict[str, list[CallSite]]:
    """Decide which parameters carry a window and which of those are decided
    (sets ``FunctionPlan.windows``, ``decided`` and ``window_kinds``), register
    the roots the calling kernels pass (their bounds go in the launch
    context), and return the call sites of each caller that passes windows,
    by caller."""
    by_name = {fp.fn.name: fp for fp in plans}
    pointer_takers = {name for name, fp in by_name.items()
                      if not fp.kernel and fp.function_params}
    if not pointer_takers:
        return {}
    sites: dict[str, list[CallSite]] = {}
    for fp in plans:
        if calls_in(fp.fn.body or []) & pointer_takers:
            found = call_sites(fp, pointer_takers)
            if found:
                sites[fp.fn.name] = found
    called = {c.callee for calls in sites.values() for c in calls}
    freeing = _freeing(plans)
    # least fixed point: what each parameter may be passed, and whether some
    # call site passes it an unknown pointer
    kinds: dict[tuple[str, int], set[str]] = {}
    unknown = {(name, k) for name in pointer_takers
               for k in by_name[name].function_params.values()
               if name not in called or name in freeing}
    changed = True
    while changed:
        changed = False
        for caller, calls in sites.items():
            for call in calls:
                for k in by_name[call.callee].function_params.values():
                    # an argument the call sequence does not show is unknown
                    source = call.sources[k] if k < len(call.sources) else None
                    key = (call.callee, k)
                    got = kinds.setdefault(key, set())
                    before = (len(got), key in unknown)
                    if source is None or (caller in freeing and isinstance(source,
                                                                           prov.ParamRoot)):
                        unknown.add(key)
                    elif isinstance(source, int):
                        got |= kinds.get((caller, source), set())
                        if (caller, source) in unknown:
                            unknown.add(key)
                    else:
                        got.add(_kind(source))
                    changed = changed or before != (len(got), key in unknown)
    for (name, k), got in kinds.items():
        fp = by_name[name]
        if not got:
            continue
        if (name, k) not in unknown:
            fp.decided.add(k)
            fp.windows.add(k)
            fp.window_kinds[k] = frozenset(got)
        elif LOCAL in got:
            fp.windows.add(k)
    for caller, calls in sites.items():
        fp = by_name[caller]
        if not fp.kernel:
            continue
        for call in calls:
            callee = by_name[call.callee]
            for k, source in enumerate(call.sources):
                if k in callee.decided and isinstance(source, prov.ParamRoot):
                    fp.argument_root(source)
    return {caller: [c for c in calls if by_name[c.callee].windows]
            for caller, calls in sites.items()}


# --------------------------------------------------------------------------
# what a call site passes

WINDOW_REGISTER = "%__gs_warg"
_HIGH_REGISTER, _STATE_REGISTER, _LIVE_PREDICATE = "%__gs_wargh", "%__gs_wargs", "%__gs_wargp"
CALL_REGISTERS = ((WINDOW_REGISTER, ".b64"), (_HIGH_REGISTER, ".b64"),
                  (_STATE_REGISTER, ".b32"), (_LIVE_PREDICATE, ".pred"))
"""The registers a call sequence passing windows declares in its block."""


class Caller(NamedTuple):
    """What a caller knows of the windows it passes: its own windowed
    parameters (``windows``, of which ``decided``), and its roots' indices."""

    windows: set[int]
    decided: set[int]
    roots: dict[prov.ParamRoot, int]


def window_arguments(source: Source | None, names: tuple[str, ...],
                     caller: Caller) -> list[Statement]:
    """Store the window of ``source`` into the call's argument variables
    ``names`` (``lo, hi``, and the descriptor for a decided parameter)."""
    decided = len(names) == 3
    lo, hi = names[:2]
    reg = WINDOW_REGISTER
    if isinstance(source, int) and source in caller.windows and (
            source in caller.decided or not decided):
        # the caller's own window, forwarded
        out: list[Statement] = []
        for param, arg in zip(window_params(source), (lo, hi), strict=True):
            out.append(I("ld.param.u64", reg, Address(Symbol(param))))
            out.append(I("st.param.b64", Address(Symbol(arg)), reg))
        if decided:
            out.append(I("ld.param.u32", _STATE_REGISTER,
                         Address(Symbol(descriptor_param(source)))))
            out.append(I("st.param.b32", Address(Symbol(names[2])), _STATE_REGISTER))
        return out
    if isinstance(source, prov.VarRoot) and (decided or source.space == "local"):
        out = [I("mov.u64", reg, source.name),
               I(f"cvta.{source.space}.u64", reg, reg),
               I("st.param.b64", Address(Symbol(lo)), reg)]
        if source.size is not None:
            out.append(I("add.u64", reg, reg, source.size))
        else:  # dynamic shared memory: the launch's size
            out += [
                I("ld.global.u32", _STATE_REGISTER, Address(
                    Register(CONTEXT_REGISTER),
                    layout.LAUNCH_CONTEXT.offset("dynamic_shared_size"))),
                I("cvt.u64.u32", _HIGH_REGISTER, _STATE_REGISTER),
                I("add.u64", reg, reg, _HIGH_REGISTER),
            ]
        out.append(I("st.param.b64", Address(Symbol(hi)), reg))
        if decided:
            out.append(I("st.param.b32", Address(Symbol(names[2])),
                         _OUT_OF_BOUNDS[source.space].code))
        return out
    if isinstance(source, prov.ParamRoot) and decided:
        at = layout.root_offset(caller.roots[source])
        field = layout.ROOT_BOUNDS.offset
        ctx = Register(CONTEXT_REGISTER)
        return [
            I("ld.global.u64", reg, Address(ctx, at + field("low"))),
            I("st.param.b64", Address(Symbol(lo)), reg),
            I("ld.global.u64", _HIGH_REGISTER, Address(ctx, at + field("high"))),
            I("ld.global.u32", _STATE_REGISTER, Address(ctx, at + field("state"))),
            I("setp.ne.u32", _LIVE_PREDICATE, _STATE_REGISTER, layout.ALLOC_LIVE),
            I("mov.u64", _HIGH_REGISTER, reg, guard=ptx.Guard(_LIVE_PREDICATE)),
            I("st.param.b64", Address(Symbol(hi)), _HIGH_REGISTER),
            I("st.param.b32", Address(Symbol(names[2])), at),
        ]
    assert not decided, "a decided parameter is passed a pointer of unknown provenance"
    return [I("st.param.b64", Address(Symbol(lo)), 0),
            I("st.param.b64", Address(Symbol(hi)), 0)]


# --------------------------------------------------------------------------
# what the callee decides


class Decision(NamedTuple):
    """The inline verdict on one access: its code, which ends in a branch to
    ``do`` (a good access) or reaches ``record`` with the violation's kind
    in ``kind`` and its tag in ``tag``; a tallied site's reaches ``record``,
    or ``misaligned`` for an access inside a variable but misaligned, with
    neither computed (``kind`` and ``tag`` are then empty)."""

    code: list[Statement]
    record: str
    misaligned: str
    kind: str
    tag: str


def decide(em: Emitter, acc: Access, addr: str, bits: int, do: str, *,
           tallied: bool = False) -> Decision:
    """The slow path of an access through a decided parameter (``addr``: the
    full address, 64 bits; ``bits``: those of the access's own address): the
    verdicts of the runtime in its order, against the window the caller
    passed.  A root's descriptor is the offset of its bounds in the launch
    context: null page, outside the allocation, freed where the access
    starts, outside, misaligned, as ``slow_path._inline_root`` (a freed
    root's window is empty, so its accesses all come here).  A variable's
    descriptor is its out-of-bounds kind: null page (for a global or generic
    address), outside, misaligned, as ``slow_path._inline_window``.  Few
    temporaries: each compare's operand is computed in the one register
    ``off`` right before it (a slow path's registers count in the kernel's,
    ptxas).  A ``tallied`` site computes no kind and no tag: its offenders
    keep the descriptor, from which the host classifies them
    (``host.argument_verdict``; a kind computed beside the descriptor cost
    the `-G` atomics 9 registers, ptxas)."""
    a = acc.access
    v = acc.value
    assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.ArgRoot)
    k = v.root.index
    kinds = em.plan.window_kinds[k]
    kind = em.reg("kind", ".b32")
    tag = "" if tallied else em.reg("tag", ".b32")
    bad = em.reg("bad", ".pred")
    record, root = em.label("rec"), em.label("root")
    misaligned = em.label("recm") if tallied else record
    verdicts = _Verdicts(kind, tag, record, misaligned)
    out: list[Statement] = [] if tallied else [I("mov.u32", tag, 0)]
    if a.space in ("global", "generic"):
        out += [I("setp.lt.u64", bad, addr, layout.NULL_PAGE),
                *verdicts.set(ViolationKind.NULL_POINTER),
                I("bra", record, guard=ptx.Guard(bad))]
    out.append(I("ld.param.u32", kind, Address(Symbol(descriptor_param(k)))))
    if ROOT in kinds and kinds - {ROOT}:
        out.append(I("setp.ge.u32", bad, kind, layout.LAUNCH_CONTEXT.size))
        out.append(I("bra", root, guard=ptx.Guard(bad)))
    if kinds - {ROOT}:
        out += _in_variable(em, acc, addr, bits, verdicts, do)
    if ROOT in kinds:
        out.append(ptx.Label(root))
        out += _in_root(em, acc, addr, verdicts, do)
    return Decision(out, record, misaligned, kind, tag)


class _Verdicts(NamedTuple):
    """Where a decision leaves its verdicts: the kind and tag registers
    (empty tag: a tallied site, which computes neither), and the labels of
    a refused access and of one inside a variable but misaligned."""

    kind: str
    tag: str
    record: str
    misaligned: str

    def set(self, kind: ViolationKind, guard: str | None = None) -> list[Statement]:
        if not self.tag:
            return []
        return [I("mov.u32", self.kind, kind.code,
                  guard=None if guard is None else ptx.Guard(guard))]


def _fits(em: Emitter, acc: Access, room: str, bad: str, record: str) -> list[Statement]:
    """On to ``record`` when the ``room`` bytes left from the address do not
    hold the access, or the address is misaligned (``room`` is then free)."""
    a = acc.access
    out: list[Statement] = []
    if a.size is not None:
        w = em.reg("w64", ".b64")
        out += [I("cvt.u64.u32", w, a.size.name), I("setp.lt.u64", bad, room, w)]
    else:
        out.append(I("setp.lt.u64", bad, room, a.width))
    out.append(I("bra", record, guard=ptx.Guard(bad)))
    return out


def _aligned(acc: Access, addr: str, t: str, bad: str, verdicts: _Verdicts,
             target: str) -> list[Statement]:
    al = acc.access.alignment
    if al <= 1:
        return []
    return [I("and.b64", t, addr, al - 1),
            I("setp.ne.u64", bad, t, 0),
            *verdicts.set(ViolationKind.MISALIGNED_ACCESS),
            I("bra", target, guard=ptx.Guard(bad))]


def _in_variable(em: Emitter, acc: Access, addr: str, bits: int, verdicts: _Verdicts,
                 do: str) -> list[Statement]:
    """``addr`` against the window ``[low, low + size)`` the filter compared
    with (``verdicts.kind`` holds the variable's out-of-bounds kind)."""
    v = acc.value
    assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.ArgRoot)
    out: list[Statement] = []
    low, size = em.argument_window(v.root.index, acc.access.space, bits, out)
    bad, off = em.reg("bad", ".pred"), em.reg("off", ".b64")
    record = verdicts.record
    static_empty = acc.access.size is None and acc.access.width == 0
    if bits != 64:
        lo64, size64 = em.reg("lo", ".b64"), em.reg("hi", ".b64")
        out += [I("cvt.u64.u32", lo64, low), I("cvt.u64.u32", size64, size)]
        low, size = lo64, size64
    out += [
        I("setp.lt.u64", bad, addr, low),
        I("bra", record, guard=ptx.Guard(bad)),
        I("sub.u64", off, addr, low),
        I("setp.gt.u64" if static_empty else "setp.ge.u64", bad, off, size),
        I("bra", record, guard=ptx.Guard(bad)),
        I("sub.u64", off, size, off),
        *_fits(em, acc, off, bad, record),
        *_aligned(acc, addr, off, bad, verdicts, verdicts.misaligned),
        I("bra.uni", do),
    ]
    return out


def _in_root(em: Emitter, acc: Access, addr: str, verdicts: _Verdicts,
             do: str) -> list[Statement]:
    """``addr`` against the bounds of the root whose offset in the launch
    context ``verdicts.kind`` holds (its tag loaded unless the site is
    tallied: the host classifies a tallied root's offenders as a kernel's
    root sites', ``host.classify_root``)."""
    a = acc.access
    field = layout.ROOT_BOUNDS.offset
    ctx, rp = em.ctx(), em.reg("rp", ".b64")
    bad, off = em.reg("bad", ".pred"), em.reg("off", ".b64")
    state = em.reg("state", ".b32")
    kind, tag, record = verdicts.kind, verdicts.tag, verdicts.record
    static_empty = a.size is None and a.width == 0  # may start at the end
    return [
        em.load_ctx(),
        I("cvt.u64.u32", rp, kind),
        I("add.u64", rp, rp, ctx),
        *([I("ld.global.u32", tag, Address(Register(rp), field("tag")))] if tag else []),
        *verdicts.set(ViolationKind.GLOBAL_OUT_OF_BOUNDS),
        I("ld.global.u64", off, Address(Register(rp), field("low"))),
        I("setp.lt.u64", bad, addr, off),
        I("bra", record, guard=ptx.Guard(bad)),
        I("ld.global.u64", off, Address(Register(rp), field("high"))),
        I("setp.gt.u64" if static_empty else "setp.ge.u64", bad, addr, off),
        I("bra", record, guard=ptx.Guard(bad)),
        I("ld.global.u32", state, Address(Register(rp), field("state"))),
        I("setp.ne.u32", bad, state, layout.ALLOC_LIVE),
        *verdicts.set(ViolationKind.USE_AFTER_FREE, guard=bad),
        I("bra", record, guard=ptx.Guard(bad)),
        I("sub.u64", off, off, addr),
        *_fits(em, acc, off, bad, record),
        # a root's misaligned offender counts in the first tally: the host
        # judges it against the root's bounds
        *_aligned(acc, addr, off, bad, verdicts, record),
        I("bra.uni", do),
    ]
