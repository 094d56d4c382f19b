"""Optimisation: fewer filters for the same violations.

* **grouped** (:func:`regions`): the root/window/lookup accesses of a run
  inside one basic block share one filter before the first; when it fails,
  a slow copy of the run checks each access on its own.
* **dominated** (:func:`mark_dominated`): a filter whose every condition is
  implied by a dominating filter's branches on that filter's predicate.
* **hoisted** (:class:`LoopHoister`): conditions whose inputs a loop never
  writes are computed once before the loop into a predicate the filters in
  the loop OR in.
* **induction range** (:class:`LoopHoister` with ``ranges``): a condition on
  an offset that follows the loop's induction variable is replaced by the
  same condition on the largest offset the loop can reach, tested once before
  the loop into the same predicate (the premises of that bound included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import cfg as cfg_mod
from .. import provenance as prov
from ..nodes import ArgumentList, Block, Instruction, Loc, Pragma, Register, Statement
from . import conditions as cond
from . import ranges
from .conditions import Cond, Form
from .emission import Emitter, I
from .lookup import pinned_query
from .planning import Access, FunctionPlan, Mode
from .ranges import all_defs


@dataclass(eq=False)
class Unit:
    """One fast filter of the function: a grouped region's or a standalone
    root/window access's.  ``pred``: the predicate register its filter leaves
    true when any of its conditions may hold (set when it is emitted, only for
    units other filters are dominated by); ``dom``: the unit whose predicate
    this one's filter reuses instead of computing its own."""

    index: int  # the top-level statement the filter is placed before
    accesses: list[Access]
    region: bool
    conds: list[Cond]
    dom: Unit | None = None
    used: bool = False  # some other unit's filter reuses this one's predicate
    pred: str | None = None
    chains: list[Chain] = field(default_factory=list)
    """Accesses of the region checked through a chain of additions (:class:`Chain`)."""


# --------------------------------------------------------------------------
# grouped checks


@dataclass(frozen=True)
class Chain:
    """Accesses of a grouped run through addresses ``base + k * step``,
    ``k`` at most ``count``, each made by additions of ``step`` inside the
    run from ``base`` (both registers as they are where the run begins): an
    unrolled loop walking a column (``p += stride`` between accesses).  The
    run's filter checks ``base`` and ``base + count * step`` against the
    root, with the premises ``step <= 2**40`` and no wrap (the last address
    not below ``base``); the addresses in between then lie between the two,
    inside the root.  A failed premise or end sends the run to its slow copy,
    which checks each access on its own."""

    base: str
    step: str
    count: int
    root: object
    align: int
    start: int
    end: int


@dataclass
class Region:
    """A grouped run: its accesses, and those of them checked through a chain."""

    accesses: list[Access]
    chains: list[Chain] = field(default_factory=list)
    chained: set[int] = field(default_factory=set)  # ids of the accesses in a chain


CHAIN_STEP_LIMIT = 1 << 40
CHAIN_LENGTH = 4
"""Links a chain may have: one filter before a longer chain lets ptxas issue
all of its loads at once, and the registers go up to the plain kernel's and
more (lud diagonal, 16 rows: 53 -> 72 registers unlimited, 54 with 4)."""

CONVERGENT = frozenset({
    "bar", "barrier", "shfl", "vote", "match", "redux", "activemask", "elect", "mma", "wmma",
    "wgmma", "ldmatrix", "stmatrix", "call", "setmaxnreg", "griddepcontrol", "tcgen05",
}) | cfg_mod.TERMINATORS


def _ends_region(st: Statement) -> bool:
    if type(st) is Instruction:
        return st.op in CONVERGENT
    return type(st) not in (Loc, Pragma)


def _groupable(plan: FunctionPlan, acc: Access) -> bool:
    a = acc.access
    if a.width == 0 or _copies(acc):
        return False
    if acc.mode in (Mode.ROOT, Mode.WINDOW):
        return True
    base = a.address.base
    return (acc.mode is Mode.LOOKUP and a.space in ("global", "generic")
            and isinstance(base, Register) and plan.bits(base.name) == 64
            and a.address.offset >= 0)


def _copies(acc: Access) -> bool:
    """An instruction with two accesses (a copy) is checked on its own: its
    slow paths decide for both ranges together."""
    return acc.instr.op == "cp"


def regions(plan: FunctionPlan) -> list[Region]:
    """Runs of root/window/lookup accesses inside one basic block whose
    checks can all be made before the first: no register a check reads is
    written in between (or, for a root address, it is a :class:`Chain` from
    registers that are not), and nothing in between needs the warp
    converged.  An access whose filter reads a register written since the
    run began starts the next run when it is a lookup (an address loaded
    from memory)."""
    graph = plan.graph
    body = plan.fn.body
    assert body is not None
    by_pos = {a.path[0]: a for a in plan.accesses
              if len(a.path) == 1 and _groupable(plan, a)}
    out: list[Region] = []
    for bb in graph.blocks:
        region = Region([])
        written: set[str] = set()
        chain: dict[str, tuple[str, str, int]] = {}  # register -> (base, step, k)
        for i in range(bb.start, bb.end):
            st = body[i]
            if region.accesses and _ends_region(st):
                if len(region.accesses) > 1:
                    out.append(region)
                region, written, chain = Region([]), set(), {}
            acc = by_pos.get(i)
            if acc is not None:
                if not region.accesses:
                    region = Region([acc])
                elif not (cond.inputs(plan, acc) & written):
                    region.accesses.append(acc)
                elif (link := _chained(plan, acc, chain)) is not None:
                    region.accesses.append(acc)
                    region.chains.append(link)
                    region.chained.add(id(acc))
                elif acc.mode is Mode.LOOKUP:
                    # a pointer loaded since the region began (a linked
                    # list's next node): the region ends before it and a new
                    # one starts with it.  Root and window accesses stay on
                    # their own instead: they usually join the old region
                    # later at no cost (merged offset ranges), measured
                    if len(region.accesses) > 1:
                        out.append(region)
                    region, written, chain = Region([acc]), set(), {}
            if region.accesses and type(st) is Instruction:
                defs = prov.defs(st)
                link_of = _chain_step(st, written, chain)
                for r in defs:
                    chain.pop(r, None)
                if link_of is not None:
                    chain[defs[0]] = link_of
                written.update(defs)
        if len(region.accesses) > 1:
            out.append(region)
    return out


def _chain_step(st: Instruction, written: set[str],
                chain: dict[str, tuple[str, str, int]]) -> tuple[str, str, int] | None:
    """``st`` as one more link of a chain: ``add.s64 R, Y, D`` with ``D``
    as at the run's start and ``Y`` either as at the run's start (``k`` 1)
    or a chain of the same step (``k`` + 1)."""
    ops = st.operands
    if st.opcode not in ("add.s64", "add.u64") or st.guard is not None or len(ops) != 3 \
            or not all(isinstance(o, Register) for o in ops):
        return None
    for y, d in ((ops[1].name, ops[2].name), (ops[2].name, ops[1].name)):
        if d in written:
            continue
        if y in chain and chain[y][1] == d:
            return chain[y][0], d, chain[y][2] + 1
        if y not in written:
            return y, d, 1
    return None


def _chained(plan: FunctionPlan, acc: Access,
             chain: dict[str, tuple[str, str, int]]) -> Chain | None:
    """The chain a root-address access's only condition follows, if any."""
    if acc.mode is not Mode.ROOT:
        return None
    conds = cond.conditions(plan, acc)
    if len(conds) != 1:
        return None
    c = conds[0]
    if c.form is not Form.ROOT_ADDRESS or c.start < 0 or c.reg not in chain:
        return None
    base, step, k = chain[c.reg]
    if k > CHAIN_LENGTH:
        return None
    return Chain(base, step, k, c.root, c.align, c.start, c.end)


def chain_code(em: Emitter, chains: list[Chain],
               seed: str | None) -> tuple[list[Statement], list[Cond], str]:
    """The instructions a region's filter needs for its chains (the last
    address of each, the premises into a predicate, ``seed`` ORed in), the
    conditions on both ends, and that predicate (the filter's new seed)."""
    merged: dict[tuple, Chain] = {}
    for ch in chains:
        k = (ch.base, ch.step, ch.root, ch.align)
        m = merged.get(k)
        merged[k] = ch if m is None else Chain(
            ch.base, ch.step, max(m.count, ch.count), ch.root, ch.align,
            min(m.start, ch.start), max(m.end, ch.end))
    pred = em.reg("chain", ".pred")
    code: list[Statement] = []
    conds: list[Cond] = []
    for n, ch in enumerate(merged.values()):
        top = em.reg(f"chain{n}", ".b64")
        code.append(I("mad.lo.s64", top, ch.step, ch.count, ch.base))
        if n == 0:
            code.append(I("setp.gt.u64", pred, ch.step, CHAIN_STEP_LIMIT))
        else:
            code.append(I("setp.gt.or.u64", pred, ch.step, CHAIN_STEP_LIMIT, pred))
        code.append(I("setp.lt.or.u64", pred, top, ch.base, pred))
        for reg in (ch.base, top):
            conds.append(Cond(Form.ROOT_ADDRESS, reg, ch.root, ch.align, ch.start, ch.end))
    if seed is not None:
        code.append(I("or.pred", pred, pred, seed))
    return code, conds, pred


# --------------------------------------------------------------------------
# dominated checks


def mark_dominated(plan: FunctionPlan, units: list[Unit]) -> None:
    """Mark each unit whose every condition is implied by a condition of a
    unit that dominates it ("dominated"): its filter becomes one branch on
    the dominating filter's predicate, ``@p bra slow``.

    Why this keeps every violation: a failing check does not stop the
    thread (the slow path skips only its own access and continues), so a
    dominated access can never simply go unchecked, or a bad access after a
    failed dominating check would run.  Instead the dominating filter
    leaves its predicate ``p`` in a register of its own, true when any of
    its conditions may hold (its loop-hoisted conditions included: they
    are ORed in).  At the dominated access:

    * ``p`` false: every condition of the dominating filter was false when
      it ran, i.e. each range it checks was in bounds (and each alignment
      held).  Each condition of the dominated filter tests the same kind of
      range against the same root or variable through the same register
      (or alignment of the same register), a sub-range ``[start, end)`` of
      one the dominating filter tested, with an alignment dividing it; and
      that register holds the same value at both places (below).  So the
      dominated access is in bounds and aligned: performing it unchecked
      is what its own filter would have done.
    * ``p`` true: the dominated access's own slow path runs, which checks it
      precisely and records it exactly as its own failing filter would.

    The register argument: a register with no definition in the function
    never changes; one with a single definition ``D`` that dominates the
    dominating filter ``A`` is not redefined on any path from ``A`` to the
    dominated filter ``B``: such a path through ``D`` would, after its last
    ``A``, reach ``B`` from ``D`` avoiding ``A``, and a path from the entry
    to ``D`` avoiding ``A`` exists (``D`` dominates ``A``), so ``B`` would
    be reachable avoiding ``A``, against ``A`` dominating ``B``.  Any other
    register (two definitions or more, e.g. a loop's induction variable;
    a definition not dominating ``A``) disqualifies the pair.  Loops need
    nothing more: a filter in a loop body that dominates an access after
    the loop covers it only through such stable registers, and ``p`` is
    then the last iteration's, computed from the same values.  The
    dominating access's guard does not matter: its filter runs whatever
    the guard (only its slow path looks at the guard), so ``p`` is set on
    every path through it.  Bounds do not depend on the access kind, so a
    load's filter covers a store or an atomic of a covered range.

    A unit reusing another's predicate computes none of its own, so it
    dominates nothing; units that may fail unconditionally (their filter
    is a bare ``bra.uni`` that sets no predicate) dominate nothing."""
    graph = plan.graph
    body = plan.fn.body
    assert body is not None
    tree = plan.domtree
    sites: dict[str, list[int]] = {}
    for i, st in enumerate(body):
        for r in writes(st):
            sites.setdefault(r, []).append(i)

    def dom_pos(i: int, j: int) -> bool:
        bi, bj = graph.block_of[i], graph.block_of[j]
        if bi == bj:
            return i < j
        return tree.dominates(bi, bj)

    def stable(reg: str | None, at: int) -> bool:
        if reg is None:
            return True
        where = sites.get(reg, [])
        return not where or (len(where) == 1 and dom_pos(where[0], at))

    candidates: dict[tuple, list[Unit]] = {}
    for u in sorted(units, key=lambda u: (tree.depth[graph.block_of[u.index]], u.index)):
        if not u.conds:
            continue
        k = cond.key(plan, u.conds[0])
        if u.chains:  # its chains are not among its conditions: it decides itself
            if not any(cond.constant_failure(plan, c) for c in u.conds):
                for c in u.conds:
                    candidates.setdefault(cond.key(plan, c), []).append(u)
            continue
        for a in reversed(candidates.get(k, [])[-64:]):
            if dom_pos(a.index, u.index) and all(
                    any(cond.implies(plan, c, d) and stable(c.reg, a.index) for c in a.conds)
                    for d in u.conds):
                u.dom = a
                a.used = True
                break
        if u.dom is None and not any(cond.constant_failure(plan, c) for c in u.conds):
            for c in u.conds:
                candidates.setdefault(cond.key(plan, c), []).append(u)


def writes(st: Statement) -> set[str]:
    """Registers a top-level statement may write: its definitions and the
    registers in a call's return list."""
    out = all_defs(st)
    stack = [st]
    while stack:
        x = stack.pop()
        if type(x) is Block:
            stack.extend(x.statements)
        elif type(x) is Instruction and x.op == "call" and x.operands \
                and isinstance(x.operands[0], ArgumentList):
            out.update(r.name for r in x.operands[0].items if isinstance(r, Register))
    return out


# --------------------------------------------------------------------------
# loop-invariant checks


class LoopHoister:
    """Moves loop-invariant conditions to the loop's preheader."""

    _HOISTABLE = (Form.ROOT_OFFSET, Form.ROOT_ADDRESS, Form.WINDOW_ADDRESS, Form.WINDOW_OFFSET,
                  Form.ALIGNMENT, Form.ROOT_CONSTANT)

    def __init__(self, plan: FunctionPlan, emitter: Emitter) -> None:
        self.plan = plan
        self.emitter = emitter
        self._defs_cache: dict[int, set[str]] = {}
        self._invariant: dict[int, tuple[int, str, list[Cond]]] = {}
        self._innermost: dict[int, int] | None = None  # block -> its innermost loop's header
        self._ranges: dict[tuple[int, str], str] = {}  # (loop, offset register) -> its bound
        self._setup: dict[int, list[Statement]] = {}  # loop -> code computing the bounds
        self._pinned: dict[str, tuple[int, set[int]]] = {}  # base -> (its definition, ends)
        self.inside_regions: set[int] = set()  # statements a region's slow copy repeats

    def _loop_of(self, index: int) -> int | None:
        """The innermost loop (its header block) holding top-level statement ``index``."""
        if self._innermost is None:
            # each block's smallest loop: loops by size, largest first, the
            # smaller ones overwriting (natural loops nest or are disjoint)
            loops = self.plan.loops
            self._innermost = {}
            for h in sorted(loops, key=lambda h: (-len(loops[h]), h)):
                for b in loops[h]:
                    self._innermost[b] = h
        return self._innermost.get(self.plan.graph.block_of[index])

    def loop_predicate(self, index: int) -> str | None:
        """The invariant predicate of the innermost loop holding top-level
        statement ``index``, when some condition was hoisted to it."""
        header = self._loop_of(index)
        entry = self._invariant.get(header) if header is not None else None
        return entry[1] if entry is not None else None

    def hoisted_loops(self) -> dict[int, str]:
        """Loop header block -> its invariant predicate."""
        return {h: pred for h, (_, pred, _) in self._invariant.items()}

    def _loop_defs(self, header: int) -> set[str]:
        if header not in self._defs_cache:
            graph, body = self.plan.graph, self.plan.fn.body
            assert body is not None
            out: set[str] = set()
            for b in self.plan.loops[header]:
                bb = graph.blocks[b]
                for i in range(bb.start, bb.end):
                    out |= all_defs(body[i])
            self._defs_cache[header] = out
        return self._defs_cache[header]

    def _preheader(self, header: int) -> int | None:
        """Index of the statement before which code runs once on entry to the
        loop: the end of the loop's only predecessor outside it."""
        graph, body = self.plan.graph, self.plan.fn.body
        assert body is not None
        outside = [p for p in graph.blocks[header].predecessors
                   if p not in self.plan.loops[header]]
        if len(outside) != 1:
            return None
        bb = graph.blocks[outside[0]]
        for i in range(bb.end - 1, bb.start - 1, -1):
            st = body[i]
            if type(st) is Instruction:
                return i if st.op in cfg_mod.TERMINATORS else bb.end
            if type(st) is Block:
                return bb.end
        return bb.end

    def hoist(self, conds: list[Cond], index: int) -> tuple[list[Cond], str | None]:
        """Split a filter's conditions at top-level statement ``index``: those
        whose inputs the enclosing loop never writes are checked once before
        the loop into the loop's predicate (returned, to OR into the filter);
        the others stay."""
        header = self._loop_of(index)
        if header is None:
            return conds, None
        at = self._preheader(header)
        if at is None:
            return conds, None
        written = self._loop_defs(header)
        keep, hoist = [], []
        for c in conds:
            if (c.form in self._HOISTABLE and not cond.constant_failure(self.plan, c)
                    and (c.reg is None or c.reg not in written)):
                hoist.append(c)
                continue
            bounded = self._induction_bound(c, header, index)
            if bounded is not None:
                hoist.extend(bounded)
                self.plan.stats.removed["induction-range"] += 1
                continue
            pinned = self._pin(c, header, index)
            if pinned is not None:
                self.plan.stats.removed["pinned-lookup"] += 1
            keep.append(pinned or c)
        if not hoist:
            return keep, None
        pred = self.emitter.reg(f"inv{header}", ".pred")
        self._invariant.setdefault(header, (at, pred, []))[2].extend(hoist)
        self.plan.stats.removed["hoisted-out-of-loop"] += len(hoist)
        return keep, pred

    def _induction_bound(self, c: Cond, header: int, index: int) -> list[Cond] | None:
        """``c`` on the largest offset the loop's induction variable gives
        its register (``ranges``), or None when the loop or the register is
        not of that shape.  A negative start stays in the loop: only the
        largest offset is bounded.  (Addresses advanced by a pointer
        increment, bounded through the loop's iteration count, were measured
        a net loss on short loops and are not done: docs/decisions.md.)"""
        plan = self.plan
        if c.reg is None or cond.constant_failure(plan, c) or plan.bits(c.reg) != 64:
            return None
        key = (header, c.reg)
        if c.form in (Form.ROOT_OFFSET, Form.WINDOW_OFFSET) and c.start >= 0:
            top = self._ranges.get(key)
            if top is None:
                ind = ranges.induction(plan, header, c.reg, index)
                if ind is None:
                    return None
                em = self.emitter
                top = em.reg(f"top{len(self._ranges)}", ".b64")
                self._add_setup(header, lambda fresh: ranges.preheader_code(
                    ind, top, self._premise(header), em.reg("m", ".b32"),
                    em.reg("mx", ".b32"), fresh=fresh))
                self._ranges[key] = top
            return [Cond(c.form, top, c.root, c.align, c.start, c.end)]
        return None

    def _pin(self, c: Cond, header: int, index: int) -> Cond | None:
        """``c``, a lookup of ``B + X`` at statement ``index`` in loop
        ``header``, as a compare of ``X`` with the bytes from ``B`` to the end
        of its allocation (``_pinned_parts``); the base's query is placed
        with the preheader code."""
        parts = self._pinned_parts(c, header, index)
        if parts is None:
            return None
        base, off, def_at = parts
        self._pinned.setdefault(base, (def_at, set()))[1].add(c.end)
        return Cond(Form.PINNED, off, base, 1, c.start, c.end)

    def pinnable(self, c: Cond, index: int) -> bool:
        """Whether the lookup condition ``c`` of the filter before top-level
        statement ``index`` would be pinned (nothing is recorded)."""
        header = self._loop_of(index)
        return header is not None and self._preheader(header) is not None \
            and self._pinned_parts(c, header, index) is not None

    def _pinned_parts(self, c: Cond, header: int, index: int) -> tuple[str, str, int] | None:
        """``(B, X, B's definition)`` when ``c`` looks up ``B + X`` in loop
        ``header`` that never writes ``B`` (a 64-bit register with one
        unguarded definition, outside the loop, dominating the access) and
        makes no call.  The query right after ``B``'s definition finds a
        live allocation of the launch's table holding ``B`` or leaves 0 bytes
        (every access then takes the slow path, which judges it as before);
        a device-heap block is never pinned, so no ``free`` in the kernel can
        make the bytes stale.  An ``X`` that is negative as a signed value
        compares as a huge unsigned one and takes the slow path too."""
        plan = self.plan
        if c.form is not Form.LOOKUP or c.reg is None or c.start < 0:
            return None
        written = self._loop_defs(header)
        body = plan.fn.body
        assert body is not None
        if any(type(body[i]) is Instruction and body[i].op == "call"  # type: ignore[union-attr]
               for b in plan.loops[header]
               for i in range(plan.graph.blocks[b].start, plan.graph.blocks[b].end)):
            return None
        for base, off, def_at in plan.guards().sum_parts(c.reg, index):
            if base in written or plan.bits(base) != 64 or plan.bits(off) != 64:
                continue
            if plan.graph.block_of[def_at] in plan.loops[header] \
                    or def_at + 1 in self.inside_regions:
                continue  # a region's slow copy would define the base without its query
            return base, off, def_at
        return None

    def _premise(self, header: int) -> str:
        """The predicate the range arguments of loop ``header`` set when
        their premises fail (ORed into the loop's predicate)."""
        return self.emitter.reg(f"rng{header}", ".pred")

    def _add_setup(self, header: int, code) -> None:
        """Append the code ``code(fresh)`` makes to the loop's preheader;
        ``fresh``: it is the first to write the premise predicate."""
        fresh = header not in self._setup
        self._setup.setdefault(header, []).extend(code(fresh))

    def preheader_code(self) -> dict[int, list[Statement]]:
        """Statement index -> the invariant checks to insert before it (and
        the queries of pinned bases, right after each base's definition)."""
        out: dict[int, list[Statement]] = {}
        for base, (def_at, ends) in self._pinned.items():
            limits = {e: self.emitter.pinned_limit(base, e) for e in sorted(ends)}
            out.setdefault(def_at + 1, []).extend(pinned_query(self.emitter, base, limits))
        for header, (at, pred, conds) in self._invariant.items():
            setup = self._setup.get(header, [])
            seed = self.emitter.reg(f"rng{header}", ".pred") if setup else None
            code = self.emitter.emit(cond.merge(self.plan, conds), None, pred=pred, seed=seed)
            out.setdefault(at, []).extend(setup + code)
        return out
