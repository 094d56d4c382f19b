"""Control-flow graph of a function body: basic blocks, successors,
dominators and natural loops.

Blocks are built over the top-level statement list of a function; a nested
``{ }`` block (a call sequence, inline assembly) is one opaque statement of
the block it sits in.  A block starts at a label or after a terminator
(``bra``, ``brx.idx``, ``ret``, ``exit``, ``trap``) and holds the index range
``[start, end)`` of the statements it covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .nodes import Function, Instruction, Label, Statement, Symbol, Targets

TERMINATORS = frozenset({"bra", "brx", "ret", "exit", "trap"})


@dataclass
class BasicBlock:
    index: int
    start: int
    end: int
    labels: list[str] = field(default_factory=list)
    successors: list[int] = field(default_factory=list)
    predecessors: list[int] = field(default_factory=list)


@dataclass
class CFG:
    body: list[Statement]
    blocks: list[BasicBlock]
    block_of: list[int]  # statement index -> block index

    @property
    def entry(self) -> int:
        return 0

    def reverse_postorder(self) -> list[int]:
        seen: set[int] = set()
        order: list[int] = []
        stack: list[tuple[int, int]] = [(0, 0)] if self.blocks else []
        if stack:
            seen.add(0)
        while stack:
            b, i = stack[-1]
            succ = self.blocks[b].successors
            if i < len(succ):
                stack[-1] = (b, i + 1)
                s = succ[i]
                if s not in seen:
                    seen.add(s)
                    stack.append((s, 0))
            else:
                stack.pop()
                order.append(b)
        order.reverse()
        return order

    def dominators(self) -> list[int | None]:
        """Immediate dominator of each block (None for the entry and unreachable blocks)."""
        rpo = self.reverse_postorder()
        pos = {b: i for i, b in enumerate(rpo)}
        idom: list[int | None] = [None] * len(self.blocks)
        if not rpo:
            return idom
        idom[0] = 0
        changed = True
        while changed:
            changed = False
            for b in rpo[1:]:
                new = None
                for p in self.blocks[b].predecessors:
                    if p not in pos or idom[p] is None:
                        continue
                    if new is None:
                        new = p
                    else:
                        a, c = p, new
                        while a != c:
                            while pos[a] > pos[c]:
                                a = idom[a]  # type: ignore[assignment]
                            while pos[c] > pos[a]:
                                c = idom[c]  # type: ignore[assignment]
                        new = a
                if new is not None and idom[b] != new:
                    idom[b] = new
                    changed = True
        idom[0] = None
        return idom

    def dominates(self, idom: list[int | None], a: int, b: int) -> bool:
        """True when block ``a`` dominates block ``b`` (walks ``b``'s dominator
        chain: :class:`DominatorTree` answers in constant time)."""
        x: int | None = b
        while x is not None:
            if x == a:
                return True
            x = idom[x]
        return False

    def dominator_tree(self) -> DominatorTree:
        return DominatorTree(self.dominators())

    def loops(self, tree: DominatorTree | None = None) -> dict[int, set[int]]:
        """Natural loops: header block -> the blocks of its body (header included)."""
        tree = tree or self.dominator_tree()
        out: dict[int, set[int]] = {}
        for b in self.blocks:
            for s in b.successors:
                if tree.dominates(s, b.index):  # back edge b -> s
                    body = out.setdefault(s, {s})
                    work = [b.index]
                    while work:
                        x = work.pop()
                        if x in body:
                            continue
                        body.add(x)
                        work.extend(self.blocks[x].predecessors)
        return out


class DominatorTree:
    """Dominance in constant time: each block's interval in a depth-first walk
    of the dominator tree (a dominates b when b's interval lies in a's), and
    each block's depth in the tree.  Unreachable blocks dominate nothing and
    are dominated by nothing but themselves."""

    def __init__(self, idom: list[int | None]) -> None:
        n = len(idom)
        self.idom = idom
        children: list[list[int]] = [[] for _ in range(n)]
        for b, d in enumerate(idom):
            if d is not None:
                children[d].append(b)
        self.enter = [-1] * n
        self.leave = [-1] * n
        self.depth = [0] * n
        clock = 0
        for root in range(n):
            if idom[root] is not None or self.enter[root] >= 0:
                continue
            self.enter[root] = clock
            clock += 1
            stack = [(root, 0)]
            while stack:
                b, i = stack[-1]
                if i < len(children[b]):
                    stack[-1] = (b, i + 1)
                    c = children[b][i]
                    self.enter[c] = clock
                    self.depth[c] = self.depth[b] + 1
                    clock += 1
                    stack.append((c, 0))
                else:
                    stack.pop()
                    self.leave[b] = clock
                    clock += 1

    def dominates(self, a: int, b: int) -> bool:
        """True when block ``a`` dominates block ``b``."""
        return self.enter[a] <= self.enter[b] and self.leave[b] <= self.leave[a]


def _branch_targets(instr: Instruction, target_lists: dict[str, tuple[str, ...]]) -> list[str]:
    if instr.op == "bra":
        return [o.name for o in instr.operands if isinstance(o, Symbol)][:1]
    if instr.op == "brx":
        for o in instr.operands:
            if isinstance(o, Symbol) and o.name in target_lists:
                return list(target_lists[o.name])
    return []


def build(fn: Function) -> CFG:
    body = fn.body or []
    # labels that hold a .branchtargets list (for brx.idx)
    target_lists: dict[str, tuple[str, ...]] = {}
    last_label: str | None = None
    for s in body:
        if type(s) is Label:
            last_label = s.name
        elif type(s) is Targets and s.kind == ".branchtargets" and last_label is not None:
            target_lists[last_label] = s.names
        elif type(s) is Instruction:
            last_label = None

    starts = {0}
    for i, s in enumerate(body):
        if type(s) is Label:
            starts.add(i)
        elif type(s) is Instruction and s.op in TERMINATORS:
            starts.add(i + 1)
    ordered = sorted(x for x in starts if x < len(body)) or [0]
    blocks: list[BasicBlock] = []
    block_of = [0] * len(body)
    label_block: dict[str, int] = {}
    for n, st in enumerate(ordered):
        end = ordered[n + 1] if n + 1 < len(ordered) else len(body)
        bb = BasicBlock(n, st, end)
        for i in range(st, end):
            block_of[i] = n
            s = body[i]
            if type(s) is Label:
                bb.labels.append(s.name)
                label_block[s.name] = n
        blocks.append(bb)
    for bb in blocks:
        last = None
        for i in range(bb.end - 1, bb.start - 1, -1):
            if type(body[i]) is Instruction:
                last = body[i]
                break
        falls = True
        succ: list[int] = []
        if last is not None and last.op in TERMINATORS:
            for t in _branch_targets(last, target_lists):
                if t in label_block:
                    succ.append(label_block[t])
            falls = last.guard is not None
        if falls and bb.index + 1 < len(blocks):
            succ.append(bb.index + 1)
        for s in succ:
            if s not in bb.successors:
                bb.successors.append(s)
    for bb in blocks:
        for s in bb.successors:
            blocks[s].predecessors.append(bb.index)
    return CFG(body, blocks, block_of)
