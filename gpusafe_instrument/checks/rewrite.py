"""Rewriting one function: every planned check placed around its access.

Each access gets a fast filter right before it (``emission``), possibly shared
with its neighbours or reduced to a branch on a dominating filter's predicate
(``optimisation``), and an out-of-line slow path at the end of the function
(``slow_path``).  An instruction with two accesses (a copy) gets both
checks nested, destination outside: a bad destination skips the whole copy,
a bad source (checked only once the destination is known good) copies zeros.
A one-block loop whose every check became a branch on the loop's hoisted
predicate is emitted twice (loop versioning): a copy without checks in place,
entered while the predicate is false, and the checked loop out of line.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ptx
from ..nodes import (
    Block,
    Instruction,
    Label,
    Loc,
    Pragma,
    Register,
    RegisterDecl,
    Statement,
    Variable,
    Verbatim,
)
from ..printer import statements_text
from . import conditions as cond
from .emission import Emitter, I
from .launch_proof import launch_proof
from .optimisation import (
    CONVERGENT,
    LoopHoister,
    Unit,
    chain_code,
    mark_dominated,
    regions,
)
from .planning import UNCHECKED_MODES, Access, FunctionPlan, Mode
from .slow_path import slow_path

Code = list[Statement]

VERSION_LIMIT = 48
"""The most statements a loop emitted twice may have (code size)."""


@dataclass(frozen=True)
class Versioned:
    """A loop emitted twice: its statements ``start:end``, labels up to
    ``first``, and the predicate choosing the checked copy."""

    start: int
    first: int
    end: int
    pred: str


class FunctionRewriter:
    """Places the checks of one planned function into its body."""

    def __init__(self, plan: FunctionPlan) -> None:
        self.plan = plan
        self.em = Emitter(plan)
        self.hoister = LoopHoister(plan, self.em)
        self._deferred: Code = []  # slow paths of the region copies' accesses
        self._placed: dict[tuple[int, ...], list[tuple[int, Code, Code]]] = {}
        self._order = {id(a): n for n, a in enumerate(plan.accesses)}
        self._before: dict[tuple[int, ...], Code] = {}
        self._after: dict[tuple[int, ...], Code] = {}
        self._slow_paths: Code = []
        self._at: dict[int, list[Access]] | None = None
        self._pure: set[int] = set()  # accesses whose filter is one branch on their loop's predicate

    # -- one access -------------------------------------------------------

    def _fast_filter(self, acc: Access, slow: str, unit: Unit | None,
                     hoist: bool) -> Code:
        """``unit``: the access's own unit when other filters reuse its
        predicate (it then gets a register of its own, named in ``unit.pred``);
        ``hoist``: loop-invariant conditions may move to the loop's preheader."""
        plan = self.plan
        if acc.mode in (Mode.ROOT, Mode.WINDOW):
            conds = cond.merge(plan, cond.conditions(plan, acc))
            seed = None
            if hoist and len(acc.path) == 1:
                conds, seed = self.hoister.hoist(conds, acc.path[0])
                if not conds and seed is not None:
                    self._pure.add(id(acc))
            if unit is None:
                return self.em.emit(conds, slow, seed=seed)
            return self._emit_unit(unit, conds, slow, seed)
        if acc.mode is Mode.LOOKUP:
            a = acc.access
            if hoist and len(acc.path) == 1 and a.space in ("global", "generic") and a.width \
                    and type(a.address.base) is Register and a.address.offset >= 0 \
                    and plan.bits(a.address.base.name) == 64:
                conds = cond.merge(plan, cond.conditions(plan, acc))
                if any(self.hoister.pinnable(c, acc.path[0]) for c in conds):
                    conds, seed = self.hoister.hoist(conds, acc.path[0])
                    return self.em.emit(conds, slow, seed=seed)
            return self.em.lookup_filter(acc, slow)
        if acc.mode is Mode.ARGUMENT:
            return self.em.argument_filter(acc, slow)
        assert acc.mode is Mode.ALIGNMENT
        return self.em.alignment_filter(acc, slow)

    def _emit_unit(self, unit: Unit, conds: list[cond.Cond], slow: str,
                   seed: str | None) -> Code:
        assert not any(cond.constant_failure(self.plan, c) for c in conds)
        code, unit.pred = self.em.emit_keeping_predicate(conds, slow, seed)
        return code

    def _checked(self, acc: Access, unit: Unit | None = None, *,
                 hoist: bool = False) -> tuple[Code, Code, Code]:
        """(before, after, out-of-line slow path) of one access checked on its
        own; ``unit``: the access's unit, when it dominates others or is
        dominated (then the filter is one branch on the dominating predicate)."""
        em = self.em
        slow, do, skip = em.label("slow"), em.label("do"), em.label("skip")
        if unit is not None and unit.dom is not None:
            assert unit.dom.pred is not None
            if len(acc.path) == 1 and unit.dom.pred == self.hoister.loop_predicate(acc.path[0]):
                self._pure.add(id(acc))
            pre: Code = [I("bra", slow, guard=ptx.Guard(unit.dom.pred))]
            pre.append(ptx.Label(do))
            return pre, [ptx.Label(skip)], slow_path(em, acc, slow, do, skip,
                                                     again=self._again(acc))
        pre = self._fast_filter(acc, slow, unit if unit is not None and unit.used else None,
                                hoist)
        pre.append(ptx.Label(do))
        return pre, [ptx.Label(skip)], slow_path(em, acc, slow, do, skip,
                                                 again=self._again(acc))

    def _again(self, acc: Access) -> bool:
        """Whether ``acc``'s slow path performs a good access itself (a copy
        of the instruction, then on to ``skip``) instead of branching back
        to ``do``: in a device function of a debug build, where ptxas at -O0
        keeps a convergence barrier for the branch back in a callee-saved
        register across the tally's call (``sinf`` of ``math_f32`` -G sm_80
        48 -> 42 registers); for the innermost access of its instruction
        (the one whose ``do`` is right before it), neither warp-collective
        nor atomic (the -G atomics' callees need 2 more with a copy)."""
        plan, instr = self.plan, acc.instr
        if plan.kernel or not self.em.debug or instr.op in CONVERGENT \
                or instr.op in ("atom", "red") or "aligned" in instr.modifiers:
            return False
        order = self._order[id(acc)]
        return not any(a.path == acc.path and a.mode not in UNCHECKED_MODES
                       and self._order[id(a)] > order for a in plan.accesses)

    def _place(self, acc: Access, pre: Code, post: Code) -> None:
        """Accesses of one instruction nest in their order: the first outermost."""
        self._placed.setdefault(acc.path, []).append(
            (self._order[id(acc)], _printed(pre), _printed(post)))

    def _nest(self, checks: list[tuple[int, Code, Code]]) -> tuple[Code, Code]:
        checks = sorted(checks, key=lambda c: c[0])
        before = [s for _, pre, _ in checks for s in pre]
        after = [s for _, _, post in reversed(checks) for s in post]
        return before, after

    # -- units ----------------------------------------------------------------

    def _units(self) -> tuple[list[Unit], set[int]]:
        plan = self.plan
        grouped: set[int] = set()
        units: list[Unit] = []
        for region in regions(plan):
            grouped.update(id(a) for a in region.accesses)
            units.append(Unit(region.accesses[0].path[0], region.accesses, True,
                              cond.merge(plan, [c for a in region.accesses
                                                if id(a) not in region.chained
                                                for c in cond.conditions(plan, a)]),
                              chains=region.chains))
        for acc in plan.accesses:
            if acc.mode in (Mode.ROOT, Mode.WINDOW) and id(acc) not in grouped \
                    and len(acc.path) == 1:
                units.append(Unit(acc.path[0], [acc], False,
                                  cond.merge(plan, cond.conditions(plan, acc))))
        mark_dominated(plan, units)
        return units, grouped

    def _emit_region(self, unit: Unit) -> None:
        plan, em = self.plan, self.em
        body = plan.fn.body
        assert body is not None
        region = unit.accesses
        plan.stats.removed["grouped-in-block"] += len(region) - 1
        copy, rejoin = em.label("copy"), em.label("rejoin")
        conds = unit.conds
        start, end = region[0].path[0], region[-1].path[0]
        dom = unit.dom
        if dom is not None:
            assert dom.pred is not None
            before = [I("bra", copy, guard=ptx.Guard(dom.pred))]
            plan.stats.removed["dominated"] += 1
            if dom.pred == self.hoister.loop_predicate(start):
                self._pure.update(id(a) for a in region)
        else:
            conds, seed = self.hoister.hoist(conds, start)
            setup: Code = []
            if unit.chains:  # after hoisting: the chains' registers change in loops
                setup, more, seed = chain_code(em, unit.chains, seed)
                conds = cond.merge(plan, conds + more)
                plan.stats.removed["chained"] += len(unit.chains)
            if not conds and not setup and seed is not None:
                self._pure.update(id(a) for a in region)
            if unit.used:
                before = setup + self._emit_unit(unit, conds, copy, seed)
            else:
                before = setup + em.emit(conds, copy, seed=seed)
        self._before[(start,)] = _printed(before)
        self._after[(end,)] = [ptx.Label(rejoin)]
        # the slow copy: the same statements, every access checked on its own
        code: Code = [ptx.Label(copy)]
        at = self._top_level_accesses()
        for i in range(start, end + 1):
            checks = [(self._order[id(a)], *self._checked(a)) for a in at.get(i, [])
                      if a.mode not in UNCHECKED_MODES]
            if not checks:
                code.append(body[i])
                continue
            pre, post = self._nest([(n, b, p) for n, b, p, _ in checks])
            code.extend(pre + [body[i]] + post)
            for *_, slow in checks:
                self._deferred.extend(slow)
        code.append(I("bra.uni", rejoin))
        self._slow_paths.extend(_printed(code))

    def _top_level_accesses(self) -> dict[int, list[Access]]:
        """Top-level statement index -> the accesses it makes (built once)."""
        if self._at is None:
            self._at = {}
            for a in self.plan.accesses:
                if len(a.path) == 1:
                    self._at.setdefault(a.path[0], []).append(a)
        return self._at

    def _emit_access(self, acc: Access, unit: Unit | None) -> None:
        if unit is not None and unit.dom is not None:
            self.plan.stats.removed["dominated"] += 1
        pre, post, slow = self._checked(acc, unit, hoist=True)
        self._place(acc, pre, post)
        self._slow_paths.extend(slow)

    # -- loop versioning ------------------------------------------------------

    def _versioned_loops(self, preheaders: dict[int, Code]) -> dict[int, Versioned]:
        """Loops to emit twice (first statement -> the loop): one-block
        loops, at most ``VERSION_LIMIT`` statements, none of them a barrier,
        warp-collective or call (``CONVERGENT``: threads of a block may take
        different copies), with some condition
        hoisted and every check inside reduced to a branch on the loop's
        predicate.  That predicate is written only before the loop, so while
        it is false no filter in the loop branches: a copy without them runs
        exactly the same instructions the checked loop would, minus the
        filters.  While it is true the original, checked loop runs."""
        plan = self.plan
        body = plan.fn.body
        assert body is not None
        checked: dict[int, list[Access]] = {}
        for a in plan.accesses:
            if a.mode not in UNCHECKED_MODES:
                checked.setdefault(plan.graph.block_of[a.path[0]], []).append(a)
        out: dict[int, Versioned] = {}
        for header, pred in self.hoister.hoisted_loops().items():
            bb = plan.graph.blocks[header]
            accs = checked.get(header, [])
            if set(plan.loops.get(header, ())) != {header} or not accs \
                    or bb.end - bb.start > VERSION_LIMIT \
                    or any(id(a) not in self._pure or len(a.path) != 1 for a in accs) \
                    or any(bb.start < k < bb.end for k in preheaders):
                continue
            stmts = body[bb.start:bb.end]
            n_labels = next((k for k, st in enumerate(stmts) if type(st) is not Label),
                            len(stmts))
            rest = stmts[n_labels:]
            last = rest[-1] if rest else None
            if n_labels == 0 or type(last) is not Instruction or last.op != "bra" \
                    or last.guard is None or len(last.operands) != 1 \
                    or getattr(last.operands[0], "name", None) not in \
                    {st.name for st in stmts[:n_labels]} \
                    or any(type(st) not in (Instruction, Pragma, Loc) or
                           (type(st) is Instruction and st.op in CONVERGENT)
                           for st in rest[:-1]):
                continue
            out[bb.start] = Versioned(bb.start, bb.start + n_labels, bb.end, pred)
            plan.stats.removed["loop-versioned"] += len(accs)
        return out

    def _emit_versioned(self, loop: Versioned, new_body: Code) -> int:
        """Append the loop's labels, the branch to its checked copy (placed
        out of line, with the slow paths) and its unchecked copy; return the
        index after the loop."""
        body = self.plan.fn.body
        assert body is not None
        em = self.em
        checked, fast, done = em.label("checked"), em.label("fast"), em.label("looped")
        new_body.extend(body[loop.start:loop.first])
        new_body.append(I("bra", checked, guard=ptx.Guard(loop.pred)))
        new_body.append(ptx.Label(fast))
        back = body[loop.end - 1]
        assert type(back) is Instruction
        new_body.extend(body[loop.first:loop.end - 1])
        new_body.append(I(back.opcode, fast, guard=back.guard))
        new_body.append(ptx.Label(done))
        code: Code = [ptx.Label(checked)]
        for k in range(loop.first, loop.end - 1):
            code.extend(self._checked_statement(k))
        code.append(I(back.opcode, checked, guard=back.guard))
        code.append(I("bra.uni", done))
        self._slow_paths.extend(_printed(code))
        return loop.end

    def _checked_statement(self, i: int) -> Code:
        body = self.plan.fn.body
        assert body is not None
        return self._before.get((i,), []) + [body[i]] + self._after.get((i,), [])

    # -- the function ---------------------------------------------------------

    def rewrite(self) -> None:
        """Insert every check, the preheader checks, the prologue, the slow
        paths and the declarations of the registers they use."""
        plan = self.plan
        fn = plan.fn
        body = fn.body
        assert body is not None
        plan.launch_proof = launch_proof(plan) if plan.kernel else None
        units, grouped = self._units()
        for u in units:
            if u.region:
                self.hoister.inside_regions.update(
                    range(u.accesses[0].path[0] + 1, u.accesses[-1].path[0] + 1))
        unit_of = {id(u.accesses[0]): u for u in units if not u.region}
        single = [acc for acc in plan.accesses
                  if acc.mode not in UNCHECKED_MODES and id(acc) not in grouped]
        # dominating filters first: the dominated ones branch on their predicates
        for late in (False, True):
            for u in units:
                if u.region and (u.dom is not None) == late:
                    self._emit_region(u)
            for acc in single:
                u = unit_of.get(id(acc))
                if (u is not None and u.dom is not None) == late:
                    self._emit_access(acc, u)
        for path, checks in self._placed.items():
            pre, post = self._nest(checks)
            self._before[path] = self._before.get(path, []) + pre
            self._after[path] = post + self._after.get(path, [])
        self._slow_paths.extend(self._deferred)
        preheaders = self.hoister.preheader_code()
        versioned = self._versioned_loops(preheaders)
        new_body: Code = []
        i = 0
        while i < len(body):
            if i in preheaders:
                new_body.extend(preheaders[i])
            if i in versioned:
                i = self._emit_versioned(versioned[i], new_body)
                continue
            new_body.extend(self._checked_statement(i))
            i += 1
        if len(body) in preheaders:
            new_body.extend(preheaders[len(body)])
        if plan.needs_ctx or plan.kernel:
            self.em.ctx()
            prologue = self.em.prologue()
            at = _prologue_position(new_body)
            new_body[at:at] = prologue
        new_body.extend(self._slow_paths)
        if plan.launch_proof is not None:
            plan.original_body = plan.unscheduled or body  # the proven entry's (``driver``)
            plan.stats.proven_at_launch = sum(
                a.mode not in UNCHECKED_MODES for a in plan.accesses)
        decls: Code = [RegisterDecl(t, ((n, None),)) for n, t in self.em.extra_regs.items()]
        fn.body = decls + new_body


def _printed(code: Code) -> Code:
    """``code`` as one :class:`Verbatim` statement: the check code is placed
    and never looked into again, so it is held as text (a few strings per
    access rather than a dozen nodes)."""
    return [Verbatim(statements_text(code))] if code else []


def _prologue_position(body: Code) -> int:
    first = next((i for i, s in enumerate(body) if type(s) in (Instruction, Block, Verbatim)),
                 len(body))
    at = 0
    for i in range(first):
        if type(body[i]) in (RegisterDecl, Variable):
            at = i + 1
    return at


def rewrite_function(plan: FunctionPlan) -> None:
    """Rewrite ``plan.fn``'s body with its checks (``plan.needs_ctx`` set
    by the driver when the function needs the launch context)."""
    FunctionRewriter(plan).rewrite()
