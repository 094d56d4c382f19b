"""Where lanes gather at calls: which PCs can still reach a call in the same
iteration of the loops around them.

The scheduler runs the smallest PC first, which is not always the earliest
point in program order: a block placed out of line (``-G`` code, the slow
path of a check) sits at a higher PC and branches back, so lanes that took it
reach a call after the others.  A group at a call therefore waits for the
runnable lanes of its frame that can still reach it (:mod:`gpusafe.cpu.calls`).

"Can still reach" is answered on the function's control-flow graph from
:func:`gpusafe_instrument.cfg.build` (the toolkit's one CFG, over the top-level
statements of the body) mapped onto the decoded ops: the back edges of a
depth-first search from the entry (the back edges of loops, in structured
code) are removed, what remains is acyclic, and a lane at PC ``p`` can still
reach the call at ``c`` when a path without back edges leads from ``p``'s
block to ``c``.  A lane on an out-of-line block that branches back is such a
lane; one that has left the loop or gone on to the next iteration is not.

A nested ``{ }`` block is one opaque statement of the CFG: a branch inside
one (inline assembly with local labels) is not an edge, so lanes that take
it count as staying in the block.  Gathering is a scheduling choice, never a
semantic one: a missed or extra wait changes which lanes run a callee
together, not what any lane computes.
"""

from __future__ import annotations

import numpy as np

from gpusafe_instrument import cfg

from .decoded import FunctionCode


class CallGathering:
    """For each call of a function: the PCs from which a lane can still reach it."""

    def __init__(self, code: FunctionCode) -> None:
        graph = cfg.build(code.function)
        ops = code.ops
        n = len(ops)
        first_op = code.op_of_statement
        nb = len(graph.blocks)
        starts = np.array([first_op[b.start] for b in graph.blocks], dtype=np.int64)
        ends = np.array([first_op[b.end] for b in graph.blocks], dtype=np.int64)
        ends[-1] = n  # the implicit return at the end belongs to the last block
        self.block_of = np.zeros(n, dtype=np.int64)
        calls = [0] * nb
        call_bit: dict[int, int] = {}
        for b in range(nb):
            self.block_of[starts[b]:ends[b]] = b
            for i in range(int(starts[b]), int(ends[b])):
                if ops[i].joins:
                    call_bit[i] = len(call_bit)
                    calls[b] |= 1 << call_bit[i]
        forward, post = _forward_edges([blk.successors for blk in graph.blocks])
        # calls reachable from the end of each block (successors first)
        reach = [0] * nb
        after = [0] * nb
        for b in post:
            m = 0
            for s in forward[b]:
                m |= reach[s]
            after[b] = m
            reach[b] = m | calls[b]
        self.after = after
        self.call_bit = call_bit
        self.starts = starts
        self.cache: dict[int, np.ndarray] = {}

    def reaching(self, c: int) -> np.ndarray:
        """Per PC: whether a lane there can still reach the call at ``c``."""
        v = self.cache.get(c)
        if v is None:
            bit = self.call_bit[c]
            per_block = np.array([(m >> bit) & 1 for m in self.after], dtype=bool)
            v = per_block[self.block_of]
            b = int(self.block_of[c])
            v[int(self.starts[b]): c] = True
            self.cache[c] = v
        return v

    def reaches(self, c: int, pcs: np.ndarray) -> bool:
        return bool(self.reaching(c)[pcs].any())


def gathering(code: FunctionCode) -> CallGathering:
    """The function's gathering analysis, built on first need and kept with its code."""
    if code.gathering is None:
        code.gathering = CallGathering(code)
    return code.gathering


def _forward_edges(successors: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The edges left when the back edges of a depth-first search (from block
    0, then from every block not reached yet) are removed, an acyclic graph,
    and its blocks in postorder (each after all its successors)."""
    nb = len(successors)
    color = [0] * nb  # 0 new, 1 on the stack, 2 done
    forward: list[list[int]] = [[] for _ in range(nb)]
    post: list[int] = []
    for root in range(nb):
        if color[root]:
            continue
        color[root] = 1
        stack = [(root, 0)]
        while stack:
            b, k = stack[-1]
            if k < len(successors[b]):
                stack[-1] = (b, k + 1)
                s = successors[b][k]
                if color[s] == 1:
                    continue  # a back edge
                forward[b].append(s)
                if color[s] == 0:
                    color[s] = 1
                    stack.append((s, 0))
            else:
                color[b] = 2
                post.append(b)
                stack.pop()
    return forward, post
