"""Barriers in the JIT: each thread is a resumable function.

``bar.sync`` returns its suspension code (:meth:`BarrierLowering.suspend`)
and, called again with resume point ``k + 1``, goes on after the barrier; a
register live at any suspension lives in the thread's frame (a row of 8-byte
slots in a per-block array), so it survives the return (``lower.assemble``).  The block loop
(:mod:`.blocks`) runs every thread of a block up to its next suspension or
its end, then again, until none waits: the interpreter's release rule (a
block's waiting threads go on once every live thread waits; exited threads
do not count; when nothing can run, waiting threads are released anyway)
gives the same phases whichever barrier each thread waits at, so the
barrier's id does not matter.  ``bar.red`` also publishes a predicate and
reduces over the block after the barrier; thread counts
(``bar.sync 1, 64``), ``bar.arrive`` and cluster barriers are refused.
The same suspension serves warp instructions (:mod:`.warps`) and a thread's
yield in a long loop (:meth:`BarrierLowering.backward`).

Only registers live at a resume point get a frame slot: a backward liveness
pass over the flat instruction list, from the registers each instruction
reads and surely writes (a guarded write kills nothing), as recorded while
lowering.
"""

from __future__ import annotations

from collections.abc import Callable

from gpusafe_instrument import nodes

from .values import Values

SPIN_YIELD = 1 << 12
"""Backward branches a thread takes in one run before it yields."""


class BarrierLowering(Values):
    """``op_bar`` and ``op_barrier``: a return to the block loop and a resume point."""

    def op_bar(self, instr: nodes.Instruction) -> None:
        mods = [m for m in instr.modifiers if m != "aligned"]
        if mods == ["warp", "sync"] and len(instr.operands) == 1:
            self.read(instr.operands[0], "u32")
            self.suspend(warp=True)  # threads of the warp after it see each other's writes
            return
        if mods and mods[0] == "red" or mods[:2] == ["cta", "red"]:
            self.bar_red(instr, [m for m in mods if m not in ("cta", "red")])
            return
        if mods not in ([], ["sync"], ["cta", "sync"], ["sync", "cta"]):
            raise self.fail(f"only bar.sync without a thread count ({mods})")
        ops = instr.operands
        if len(ops) > 1:
            raise self.fail("a barrier with a thread count")
        if ops:
            self.read(ops[0], "u32")  # the id changes nothing here (module docstring)
        self.suspend(warp=False)

    def suspend(self, warp: bool, exchange: bool = False, resume_at: int | None = None) -> str:
        """Return to the block loop (``8 * (k + 1) + 4 * yields + 2 * exchange +
        warp``: suspension point k, whether the thread yields, whether the
        threads' published values must be snapshot, whether the thread waits
        at a warp-synchronous instruction (or yields) rather than at a block
        barrier) after saving the live
        registers; returns the label where the thread resumes: after a
        barrier, in the second half of an instruction that exchanges values,
        or at flat instruction ``resume_at`` (a loop's head, for a yield)."""
        k = len(self.barriers)
        inside = warp or exchange
        if resume_at is not None:
            label, point = f"L{resume_at}", resume_at
        elif inside:
            label, point = f"P{k}", self.index
        else:
            label, point = f"L{self.index + 1}", self.index + 1
        self.barriers.append(self.index)
        self.live_points.append(point)
        self.emit("%bc{k} = load i64, ptr %cnt\n  %bco{k} = load i64, ptr %count\n"
                  "  %bcs{k} = add i64 %bco{k}, %bc{k}\n  store i64 %bcs{k}, ptr %count"
                  .replace("{k}", str(k)))
        code = 8 * (k + 1) + 4 * int(resume_at is not None) + 2 * int(exchange) + int(warp)
        self.emit(f"ret i32 {code}")
        if label.startswith("P"):
            self.lines.append(f"{label}:")
        else:
            self.tmp += 1
            self.lines.append(f"dead{self.tmp}:")  # the caller's `br` to the next instruction
        self.resume_labels.append(label)
        return label

    def backward(self, target: int, taken: str, not_taken: str | None) -> None:
        """A backward branch: every ``SPIN_YIELD`` of them in one run the thread
        yields (a warp-kind suspension resuming at the loop's head), so a
        thread spinning on memory another thread of its block will write
        lets that thread run, as the interpreter's scheduler does after
        ``SPIN_LIMIT`` rounds; a block barrier still waits for it."""
        self.tmp += 1
        n = self.tmp
        if not_taken is not None:
            self.emit(f"br i1 {taken}, label %B{n}, label {not_taken}")
            self.lines.append(f"B{n}:")
        self.emit(f"%y{n} = load i32, ptr %spin\n  %y{n}n = add i32 %y{n}, 1\n"
                  f"  store i32 %y{n}n, ptr %spin\n  %y{n}h = icmp eq i32 %y{n}n, {SPIN_YIELD}\n"
                  f"  br i1 %y{n}h, label %Y{n}, label %L{target}, "
                  f"!prof !{{!\"branch_weights\", i32 1, i32 {SPIN_YIELD}}}")
        self.lines.append(f"Y{n}:")
        self.emit("store i32 0, ptr %spin")
        self.suspend(warp=True, resume_at=target)
        self.emit(f"br label %L{target}")

    def bar_red(self, instr: nodes.Instruction, mods: list[str]) -> None:
        """``bar.red.{popc,and,or}``: a barrier that reduces a predicate over
        the block's threads waiting at a ``bar.red`` of the same id, as the
        interpreter reduces over the lanes released together by barrier id."""
        ops = instr.operands
        kind = [m for m in mods if m in ("popc", "and", "or")]
        if len(kind) != 1 or sorted(mods) != sorted(kind + [("u32" if kind == ["popc"]
                                                              else "pred")]) or len(ops) != 3:
            raise self.fail(f"only bar.red.popc.u32/.and.pred/.or.pred without a thread "
                            f"count ({mods})")
        d, bar_id, pred = ops
        ident = self.read(bar_id, "u32")
        value = self.adapt(self.read(pred, "pred"), 1, 64, False)
        # published: the predicate in bit 0, the barrier id above it (the
        # interpreter reduces over the threads waiting at the same id,
        # whichever bar.red instruction each waits at)
        low, wide, shifted, both, p = (self.new() for _ in range(5))
        self.emit(f"{low} = and i32 {ident}, 15\n  {wide} = zext i32 {low} to i64\n"
                  f"  {shifted} = shl i64 {wide}, 1\n  {both} = or i64 {value}, {shifted}\n"
                  f"  {p} = getelementptr i64, ptr %pub, i32 %lin\n  store i64 {both}, ptr {p}")
        self.suspend(warp=False, exchange=True)
        n = self.new()
        self.emit(f"{n} = call i32 @block_count(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb)")
        if kind[0] == "popc":
            self.write(d, "u32", n)
            return
        r = self.new()
        if kind[0] == "or":
            self.emit(f"{r} = icmp ne i32 {n}, 0")
        else:
            here = self.new()
            self.emit(f"{here} = call i32 @block_here(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb)\n"
                      f"  {r} = icmp eq i32 {n}, {here}")
        self.write(d, "pred", r)

    def op_barrier(self, instr: nodes.Instruction) -> None:
        if "cluster" in instr.modifiers or "warp" in instr.modifiers:
            raise self.fail("cluster and warp barriers")
        self.op_bar(instr)


def live_at(flat: list[nodes.Instruction], points: list[int], uses: list[set[str]],
            defs: list[set[str]], successors: Callable[[int], list[int]]) -> list[set[str]]:
    """The register slots live on entry to each flat index of ``points``
    (``len(flat)``: the implicit return)."""
    if not points:
        return []
    n = len(flat)
    names = sorted({r for u in uses for r in u} | {r for d in defs for r in d})
    bit = {r: 1 << k for k, r in enumerate(names)}

    def mask(regs: set[str]) -> int:
        m = 0
        for r in regs:
            m |= bit[r]
        return m

    use = [mask(u) for u in uses]
    kill = [mask(d) for d in defs]
    succ = [successors(i) for i in range(n)] + [[]]
    live_in = [0] * (n + 1)
    changed = True
    while changed:
        changed = False
        for i in range(n, -1, -1):
            out = 0
            for j in succ[i]:
                out |= live_in[j]
            new = use[i] | (out & ~kill[i])
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    return [{r for r in names if live_in[p] & bit[r]} for p in points]


def back_edges(n: int, successors: Callable[[int], list[int]]) -> set[tuple[int, int]]:
    """The back edges of a depth-first search over flat indices ``0..n-1``
    (from 0, then from every index not reached yet): every cycle holds one,
    so a thread that yields at them yields in every loop, and a branch that
    only goes back in the text (an out-of-line slow path returning to the
    code after its check, as the instrumentation places them) is no yield
    point: its target's registers need no frame slot."""
    state = [0] * n  # 0 new, 1 on the stack, 2 done
    back: set[tuple[int, int]] = set()
    for root in range(n):
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, iter(successors(root)))]
        while stack:
            node, rest = stack[-1]
            for nxt in rest:
                if nxt >= n:
                    continue  # the implicit return
                if state[nxt] == 1:
                    back.add((node, nxt))
                elif state[nxt] == 0:
                    state[nxt] = 1
                    stack.append((nxt, iter(successors(nxt))))
                    break
            else:
                state[node] = 2
                stack.pop()
    return back
