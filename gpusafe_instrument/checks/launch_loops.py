"""Launch proofs through down-counting loops (issue 14): the pointer and
index registers NVRTC steps in an unrolled loop, bounded by the loop's
trip count.

NVRTC unrolls ``for (i = 0; i < n; ++i) ... p[i * s] ...`` into a main
loop counting ``C = n - (n & 3)`` down by 4 to ``C != 0`` while it steps
pointers (``p += 16``, or ``q += s`` four times through a chain of
registers) and an index (``i += 4``), then a remainder loop counting
``n & 3`` down by 1 from where the index stopped.  Neither loop has the
``I += S; I < N`` shape of ``ranges.loop_shape``, and the registers they
step have several definitions, so ``launch_proof`` used to give up.

The argument, for a one-block loop ending ``@p bra`` back to its own top,
with ``p`` set in it once by ``setp.ne.s32 p, C, 0`` and ``C`` written in
it once, by ``add.s32 C, C, -d`` (``d >= 1``) before that compare
(:func:`down_loop`):

- The loop is entered at its top only, with ``C = C0`` (the one value the
  loop's entry leaves in ``C``, ``entry``).  When ``C0`` is a positive
  multiple of ``d`` (the host checks it on the launch's value, which must be
  one value: a parameter's, not a thread's), pass ``k`` (from 0) ends with
  ``C = C0 - d (k + 1)``, never wrapping on the way down, and the loop exits
  exactly after pass ``C0 / d - 1``: the passes are ``[0, C0 / d - 1]``
  (node ``passes``).  Any other ``C0`` would count through the wrap: no
  proof, except ``C0 = 0`` for an access inside a loop whose entry is
  dominated by a branch that saw ``C0 != 0`` (the remainder loop's
  ``if (n & 3)``): that access is not reached.
- A register ``X`` written once in the loop, by an unguarded ``add``
  whose one operand is ``X``'s old value or a chain of such adds back to it
  (``Y1 = X + s1; Y2 = Y1 + s2; X = Y2 + s3``, each ``Yi`` written once in
  the loop before its use), the others loop-invariant, holds ``X0 + k S``
  (``S = s1 + s2 + s3``) wherever the loop reads it before that write in
  pass ``k``, ``X0`` its entry value (:func:`stepped`).  The host computes
  the hull over every pass in mathematical integers; the node widths refuse
  a value the machine would wrap.
- After the loop, a register with several definitions holds the value of
  the last one that ran, which has a path to the reader free of the others:
  the hull over every definition with a path to the reader, one of them
  dominating it (:func:`joined`).  The loop's write gives ``X0 + (k + 1) S``
  over its passes; a ``mov`` of a literal its literal.  The remainder loop's
  start is such a join: 0 when the main loop was skipped, the main loop's
  last index otherwise, so its passes end at ``4 (n / 4) + (n & 3) - 1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..nodes import Instruction, Register
from .guards import _imm
from .ranges import _label_of, all_defs


class NotProvable(Exception):
    """An access (or the kernel) outside what launch proofs cover."""


Expr = list


@dataclass(frozen=True)
class DownLoop:
    """A one-block loop counting ``C`` down by ``dec`` to ``C != 0``."""

    header: int  # its block
    counter: str  # C
    dec: int  # d >= 1
    defs: dict[str, list[int]]  # register -> where the loop writes it


def down_loop(g, body, loops, header: int) -> DownLoop | None:
    """The down-counting one-block loop ``header`` (module docstring), None
    when it is not one."""
    if set(loops.get(header, ())) != {header}:
        return None
    bb = g.graph.blocks[header]
    stmts = [(i, body[i]) for i in range(bb.start, bb.end)]
    instrs = [(i, s) for i, s in stmts if type(s) is Instruction]
    label = _label_of(body, bb.start)
    if not instrs or label is None or any(s.op in ("call", "brx") for _, s in instrs):
        return None
    last = instrs[-1][1]
    if last.op != "bra" or last.guard is None or last.guard.negated \
            or not last.operands or getattr(last.operands[0], "name", None) != label:
        return None
    if any(s.op == "bra" for _, s in instrs[:-1]):
        return None
    defs: dict[str, list[int]] = {}
    for i, st in stmts:
        for r in all_defs(st):
            defs.setdefault(r, []).append(i)
    where = defs.get(last.guard.register, [])
    if len(where) != 1:
        return None
    setp = body[where[0]]
    if type(setp) is not Instruction or setp.guard is not None \
            or setp.opcode not in ("setp.ne.s32", "setp.ne.u32", "setp.ne.b32") \
            or len(setp.operands) != 3:
        return None
    a, b = setp.operands[1], setp.operands[2]
    counter = a if _imm(b) == 0 else b if _imm(a) == 0 else None
    if not isinstance(counter, Register) or len(defs.get(counter.name, [])) != 1:
        return None
    dec_at = defs[counter.name][0]
    dec = body[dec_at]
    if not dec_at < where[0] or type(dec) is not Instruction or dec.guard is not None \
            or dec.opcode not in ("add.s32", "add.u32") or len(dec.operands) != 3:
        return None
    x, y = dec.operands[1], dec.operands[2]
    k = _imm(y) if isinstance(x, Register) and x.name == counter.name else \
        _imm(x) if isinstance(y, Register) and y.name == counter.name else None
    if k is None:
        return None
    k = (k & 0xFFFFFFFF) - ((k >> 31 & 1) << 32)  # as the 32-bit add reads it
    if not -(1 << 31) < k <= -1:
        return None
    return DownLoop(header, counter.name, -k, defs)


def loop_of(builder, reader: int) -> DownLoop | None:
    g = builder.guards
    return down_loop(g, builder.body, builder.plan.loops, g.graph.block_of[reader])


def chain_steps(builder, loop: DownLoop, name: str) -> tuple[int, list[object], int]:
    """``X``'s one write in the loop, the loop-invariant operands its chain
    of adds back to ``X``'s old value adds, and the width of those adds."""
    body = builder.body
    where = loop.defs.get(name, [])
    if len(where) != 1:
        raise NotProvable(f"{name}: not written once in the loop")
    q = where[0]
    steps: list[object] = []
    at, reg, width = q, name, 0
    for _ in range(8):
        st = body[at]
        if type(st) is not Instruction or st.guard is not None or st.op != "add" \
                or len(st.operands) != 3 \
                or st.opcode.split(".")[-1] not in ("s32", "u32", "s64", "u64"):
            raise NotProvable(f"{reg}: not an add in the chain")
        w = int(st.opcode[-2:])
        if width and w != width:
            raise NotProvable("chain widths")
        width = w
        nxt = None
        for k in (1, 2):
            src, step = st.operands[k], st.operands[3 - k]
            if not isinstance(src, Register) or (
                    isinstance(step, Register) and step.name in loop.defs):
                continue
            if src.name == name:
                return q, steps + [step], width
            d = loop.defs.get(src.name, [])
            if len(d) == 1 and d[0] < at:
                nxt = (d[0], src.name, step)
                break
        if nxt is None:
            raise NotProvable(f"{reg}: chain")
        at, reg = nxt[0], nxt[1]
        steps.append(nxt[2])
    raise NotProvable("chain too long")


def entry(builder, loop: DownLoop, name: str) -> tuple[int, Instruction]:
    """The definition whose value ``name`` enters the loop with: its one
    definition outside the loop, dominating it, or the last one in the
    loop's only predecessor outside it; either unguarded, and the loop not
    entered again after it exits without passing it (``reentered``)."""
    g = builder.guards
    bb = g.graph.blocks[loop.header]
    outside = [i for i in g.defs.get(name, []) if not bb.start <= i < bb.end]
    p0 = None
    if len(outside) == 1 and g._dominates(outside[0], bb.start):
        p0 = outside[0]
    else:
        preds = [p for p in bb.predecessors if p != loop.header]
        if len(preds) == 1:
            pb = g.graph.blocks[preds[0]]
            mine = [i for i in outside if pb.start <= i < pb.end]
            if mine:
                p0 = mine[-1]
    if p0 is None:
        raise NotProvable(f"{name}: entry value")
    st = builder.body[p0]
    if type(st) is not Instruction or st.guard is not None or reentered(g, loop.header, p0):
        raise NotProvable(f"{name}: entry value")
    return p0, st


def passes(builder, loop: DownLoop, at: int, relations, depth: int) -> Expr:
    """The node bounding the loop's pass index ``k`` (module docstring);
    ``guarded`` when statement ``at`` is in the loop and the loop's entry
    is dominated by a branch that saw its counter non-zero."""
    p0, st0 = entry(builder, loop, loop.counter)
    c0 = builder._definition(loop.counter, p0, st0, at, relations, depth + 1)
    bb = builder.guards.graph.blocks[loop.header]
    guarded = bb.start <= at < bb.end and _nonzero_on_entry(builder, loop, p0)
    return ["passes", c0, loop.dec, guarded]


def _nonzero_on_entry(builder, loop: DownLoop, p0: int) -> bool:
    """Whether a branch dominating the loop's entry saw its counter, as
    definition ``p0`` (its only one outside the loop) left it, non-zero:
    ``setp.eq C, 0`` not taken, or ``setp.ne C, 0`` taken."""
    g = builder.guards
    if [i for i in g.defs.get(loop.counter, []) if i not in loop.defs[loop.counter]] != [p0]:
        return False
    preds = [p for p in g.graph.blocks[loop.header].predecessors if p != loop.header]
    if len(preds) != 1:
        return False
    for setp_at, st, outcome in _deciding_compares(builder, preds[0]):
        if st.opcode in (("setp.ne.s32", "setp.ne.u32", "setp.ne.b32") if outcome else
                         ("setp.eq.s32", "setp.eq.u32", "setp.eq.b32")):
            x, y = st.operands[1], st.operands[2]
            c = x if _imm(y) == 0 else y if _imm(x) == 0 else None
            if isinstance(c, Register) and c.name == loop.counter \
                    and g._dominates(p0, setp_at) \
                    and _reaching_def(g, c.name, setp_at) == p0:
                return True
    return False


def _deciding_compares(builder, b: int) -> Iterator[tuple[int, Instruction, bool]]:
    """The compares that decide the way into block ``b`` and each block
    dominating it, where a block has one predecessor ending in a guarded
    branch: ``(index, setp, outcome)``, the outcome being the value of the
    compare's predicate on the way in (an unguarded three-operand ``setp``
    only)."""
    g = builder.guards
    body = builder.body
    at: int | None = b
    while at is not None:
        into = g.graph.blocks[at].predecessors
        if len(into) == 1:
            pb = g.graph.blocks[into[0]]
            idx = [i for i in range(pb.start, pb.end) if type(body[i]) is Instruction]
            br = body[idx[-1]] if idx else None
            taken = g.label_block.get(getattr(br.operands[0], "name", "")) \
                if br is not None and br.op == "bra" and br.guard is not None \
                and br.operands else None
            if taken is not None and taken != pb.index + 1 and at in (taken, pb.index + 1):
                outcome = (at == taken) != br.guard.negated
                setp_at = next((i for i in reversed(idx[:-1])
                                if br.guard.register in all_defs(body[i])), None)
                st = body[setp_at] if setp_at is not None else None
                if st is not None and st.guard is None and len(st.operands) == 3:
                    yield setp_at, st, outcome
        at = g.tree.idom[at]


def _reaching_def(g, name: str, reader: int) -> int | None:
    d = g._single(name, reader)
    if d is not None:
        return d[0]
    r = reaching(g, name, reader)
    return None if r is None else r[0]


def value(builder, name: str, reader: int, at: int, relations, depth: int) -> Expr:
    """``name`` (several definitions) as statement ``reader`` reads it:
    stepped in the down-counting loop holding the reader, the counter of a
    loop of several blocks holding it, or joined."""
    loop = loop_of(builder, reader)
    if loop is not None and name in loop.defs:
        return stepped(builder, name, reader, at, relations, depth,
                       lambda p0, st: builder._definition(name, p0, st, at, relations, depth + 1))
    c = counted(builder, name, reader, at, relations, depth)
    return c if c is not None else joined(builder, name, reader, at, relations, depth)


def counted(builder, name: str, reader: int, at: int, relations, depth: int) -> Expr | None:
    """The counter ``I`` of a loop of several blocks, read in it before its
    increment: ``induct`` as for a one-block loop (``ranges``' argument),
    where the loop's one write of ``I`` is ``I += S`` in its one latch,
    which ends ``setp.lt.s32 p, I, N; @p bra header`` and otherwise leaves
    the loop, ``S`` and ``N`` not written in it.  Every pass starts at the
    header with ``I0`` or a value that passed ``I < N``, and keeps it until
    the latch's increment.  None when no loop holding the reader writes
    ``I`` (not this shape)."""
    g = builder.guards
    body = builder.body
    graph = g.graph
    rb = graph.block_of[reader]
    for header, blocks in builder.plan.loops.items():
        ins = [i for i in g.defs.get(name, []) if graph.block_of[i] in blocks]
        if rb not in blocks or len(blocks) < 2 or len(ins) != 1:
            continue
        inc_at = ins[0]
        latch = graph.blocks[graph.block_of[inc_at]]
        instrs = [i for i in range(latch.start, latch.end) if type(body[i]) is Instruction]
        last = body[instrs[-1]]
        label = _label_of(body, graph.blocks[header].start)
        written = {r for b in blocks for i in range(graph.blocks[b].start, graph.blocks[b].end)
                   for r in all_defs(body[i])}
        inc, setp = body[inc_at], body[instrs[-2]] if len(instrs) > 1 else None
        if [p for p in graph.blocks[header].predecessors if p in blocks] != [latch.index] \
                or any(b in blocks for b in latch.successors if b != header) \
                or last.op != "bra" or last.guard is None or last.guard.negated \
                or getattr(last.operands[0], "name", None) != label \
                or setp is None or setp.opcode != "setp.lt.s32" or setp.guard is not None \
                or len(setp.operands) != 3 or len(inc.operands) != 3 \
                or last.guard.register not in all_defs(setp) \
                or sum(last.guard.register in all_defs(body[i]) for i in instrs) != 1 \
                or not inc_at < instrs[-2] or not isinstance(setp.operands[1], Register) \
                or setp.operands[1].name != name or inc.guard is not None \
                or inc.opcode != "add.s32" or (rb == latch.index and reader > inc_at):
            raise NotProvable(f"{name}: not a loop counter")
        a, b = inc.operands[1], inc.operands[2]
        step = b if isinstance(a, Register) and a.name == name else \
            a if isinstance(b, Register) and b.name == name else None
        bound = setp.operands[2]
        if step is None or any(isinstance(o, Register) and o.name in written
                               for o in (step, bound)):
            raise NotProvable(f"{name}: step or bound written in the loop")
        outside = [i for i in g.defs.get(name, []) if i not in ins]
        p0 = outside[0] if len(outside) == 1 else None
        st0 = body[p0] if p0 is not None else None
        if st0 is None or type(st0) is not Instruction or st0.guard is not None \
                or not g._dominates(p0, graph.blocks[header].start) \
                or _reentered_from(g, blocks, header, p0):
            raise NotProvable(f"{name}: entry value")
        start = builder._definition(name, p0, st0, at, relations, depth + 1)
        return ["induct", start, builder.expr(step, at, relations, depth + 1, 32),
                builder.expr(bound, at, relations, depth + 1, 32)]
    return None


def _reentered_from(g, blocks: set[int], header: int, p0: int) -> bool:
    """Whether the loop (``blocks``) can be entered again after it exits
    without passing statement ``p0``."""
    home = g.graph.block_of[p0]
    seen: set[int] = set()
    todo = [s for b in blocks for s in g.graph.blocks[b].successors if s not in blocks]
    while todo:
        b = todo.pop()
        if b == header:
            return True
        if b in seen or b == home:
            continue
        seen.add(b)
        todo.extend(g.graph.blocks[b].successors)
    return False


def stepped(builder, name: str, reader: int, at: int, relations, depth: int,
            start) -> Expr:
    """``X``, stepped in the down-counting loop holding statement
    ``reader``, as ``reader`` reads it before its write: ``X0 + k S``
    (``start(p0, st)``: the expression of ``X0`` from its entry
    definition)."""
    loop = loop_of(builder, reader)
    if loop is None or name not in loop.defs:
        raise NotProvable(f"{name}: not stepped in a down-counting loop")
    q, steps, width = chain_steps(builder, loop, name)
    if not reader <= q:
        raise NotProvable(f"{name}: read after its step")
    p0, st0 = entry(builder, loop, name)
    k = passes(builder, loop, at, relations, depth)
    return ["add", start(p0, st0), ["mul", k, _sum(builder, steps, at, relations, depth, width),
                                    width], width]


def _sum(builder, steps: list[object], at: int, relations, depth: int, width: int) -> Expr:
    s = builder.expr(steps[0], at, relations, depth + 1, width)
    for o in steps[1:]:
        s = ["add", s, builder.expr(o, at, relations, depth + 1, width), width]
    return s


def joined(builder, name: str, reader: int, at: int, relations, depth: int) -> Expr:
    """``name`` (several definitions) as ``reader`` reads it: the hull over
    every definition with a path to the reader (module docstring)."""
    g = builder.guards
    defs = g.defs.get(name, [])
    if not any(g._dominates(d, reader) and type(builder.body[d]) is Instruction
               and builder.body[d].guard is None for d in defs):
        raise NotProvable(f"{name}: may be read unset")
    values = []
    for d in (d for d in defs if reaches(g, d, reader)):
        st = builder.body[d]
        if type(st) is not Instruction or st.guard is not None:
            raise NotProvable(f"{name}: a guarded definition")
        loop = down_loop(g, builder.body, builder.plan.loops, g.graph.block_of[d])
        if loop is None or loop.defs.get(name) != [d]:
            # its value when it ran, from its operands as it read them
            values.append(builder._definition(name, d, st, at, relations, depth + 1))
            continue
        q, steps, width = chain_steps(builder, loop, name)
        p0, st0 = entry(builder, loop, name)
        x0 = builder._definition(name, p0, st0, at, relations, depth + 1)
        p0c, stc = entry(builder, loop, loop.counter)
        k = ["passes", builder._definition(loop.counter, p0c, stc, at, relations, depth + 1),
             loop.dec, False]
        values.append(["add", x0, ["mul", ["add", k, ["k", 1], 32],
                                   _sum(builder, steps, at, relations, depth, width), width],
                       width])
    if not values:
        raise NotProvable(f"{name}: no definition reaches")
    out = values[0]
    for v in values[1:]:
        out = ["hull", out, v]
    return out


def reaching(g, name: str, reader: int) -> tuple[int, Instruction] | None:
    """The one definition of ``name`` (written more than once) that the
    read at statement ``reader`` can see: an unguarded instruction
    dominating the reader, with the reader reachable from no other
    definition.  Some definition ran before the read (that one dominates
    it), and the last to run was that one: any other would have a path
    to the reader.  (A histogram's ``b = threadIdx.x`` loop starts from
    ``threadIdx.x``, whose register a later loop counts on.)"""
    defs = g.defs.get(name, [])
    if len(defs) < 2:
        return None
    for d0 in defs:
        st = g.body[d0]
        if type(st) is Instruction and st.guard is None and g._dominates(d0, reader) \
                and not any(reaches(g, d, reader) for d in defs if d != d0):
            return d0, st
    return None


def reaches(g, i: int, j: int) -> bool:
    """Whether some path runs from statement ``i`` to statement ``j``."""
    graph = g.graph
    bi, bj = graph.block_of[i], graph.block_of[j]
    if bi == bj and i < j:
        return True
    seen: set[int] = set()
    todo = list(graph.blocks[bi].successors)
    while todo:
        b = todo.pop()
        if b == bj:
            return True
        if b not in seen:
            seen.add(b)
            todo.extend(graph.blocks[b].successors)
    return False


def reentered(g, header: int, p0: int) -> bool:
    """Whether the loop ``header`` can be entered again after it exits
    without passing statement ``p0`` (its counter's entry value): an
    outer loop would then start it from where it stopped."""
    graph = g.graph
    home = graph.block_of[p0]
    seen: set[int] = set()
    todo = [b for b in graph.blocks[header].successors if b != header]
    while todo:
        b = todo.pop()
        if b == header:
            return True
        if b in seen or b == home:  # entering p0's block runs p0
            continue
        seen.add(b)
        todo.extend(graph.blocks[b].successors)
    return False


def reach_conditions(builder, at: int) -> list[list]:
    """``[x, "eq" | "ne", k]`` for every equality compare of a branch
    dominating statement ``at`` whose outcome ``at``'s block implies, ``x``
    the expression of the register the compare saw: where the launch's
    values contradict one, the access is not reached (the remainder of an
    unrolled loop under ``n & 3 != 1``)."""
    out: list[list] = []
    for setp_at, st, outcome in _deciding_compares(builder, builder.guards.graph.block_of[at]):
        parts = st.opcode.split(".")
        if len(parts) == 3 and parts[0] == "setp" and parts[1] in ("eq", "ne") \
                and parts[2] in ("s32", "u32", "b32", "s64", "u64", "b64"):
            x, y = st.operands[1], st.operands[2]
            reg, k = (x, _imm(y)) if _imm(y) is not None else (y, _imm(x))
            if isinstance(reg, Register) and k is not None:
                bits = int(parts[2][1:])
                k &= (1 << bits) - 1
                k -= (k >> (bits - 1)) << bits
                try:
                    e = builder.expr(reg, setp_at, [], 0, bits)
                except NotProvable:
                    e = None
                if e is not None:
                    out.append([e, "ne" if (parts[1] == "ne") == outcome else "eq", k])
    return out
