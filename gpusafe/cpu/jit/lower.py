"""PTX kernel -> LLVM IR (text), one thread per call of ``@thread``.

Every PTX instruction becomes its own basic block (LLVM merges them), so
labels and guards need no analysis; each counts one executed instruction, as
the interpreter counts.  Operands are :mod:`.values`' business, instructions
:mod:`.alu`'s and :mod:`.access`'s.  Whatever this slice does not cover
raises :class:`~.values.Unsupported` with the PTX line, and the launch runs
on the interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpusafe_instrument import nodes

from .access import MemoryLowering
from .alu import AluLowering
from .bits import BitLowering
from .calls import CallLowering
from .floats import FloatLowering
from .halves import HalfLowering
from .regions import BarrierLowering, back_edges, live_at
from .unary import UnaryLowering
from .values import BITS, TRAP_BRX, Unsupported
from .warps import WarpLowering

__all__ = ["Lowered", "Unsupported", "lower_kernel"]


class _Lowerer(CallLowering, AluLowering, UnaryLowering, BitLowering, FloatLowering,
               HalfLowering, MemoryLowering, BarrierLowering, WarpLowering):
    """The kernel's structure: declarations, labels, guards, branches, returns."""

    # -- structure ------------------------------------------------------------

    def flatten(self, statements: list, out: list) -> None:
        for s in statements:
            if isinstance(s, nodes.Instruction):
                if s.op == "call":
                    self.inline(s, out)
                    continue
                if s.op == "ret":
                    self.note_ret(len(out))
                out.append((s, list(self.scopes)))
            elif isinstance(s, nodes.Label):
                self.scopes[-1][("label", s.name)] = len(out)  # { } scopes labels too
                self.last_label = s.name
            elif isinstance(s, nodes.Targets):
                if s.kind != ".branchtargets" or self.last_label is None:
                    raise Unsupported(f"{s.kind} (indirect calls)", s.line)
                self.scopes[-1][("targets", self.last_label)] = s.names
            elif isinstance(s, nodes.RegisterDecl):
                if s.vector:
                    raise Unsupported("vector registers", s.line)
                for name in s.registers():
                    self.declare(name, s.type.lstrip("."))
            elif isinstance(s, nodes.Block):
                self.scopes.append({})
                self.flatten(s.statements, out)
                self.scopes.pop()
            elif isinstance(s, nodes.Variable):
                self.variable(s)
            elif isinstance(s, (nodes.Loc, nodes.Pragma)):
                continue
            else:
                raise Unsupported(f"statement {type(s).__name__}", getattr(s, "line", None))

    def variable(self, var: nodes.Variable) -> None:
        """``.shared`` variables get their offset from the launch; ``.local``
        ones a place in the thread's frame, in declaration order as the
        interpreter's decoder lays them out."""
        if var.space == ".shared":
            self.scopes[-1][("shared", var.name)] = True
        elif var.space == ".param" and var.size is not None:
            self.param_var(var.name, var.size)
        elif var.space == ".local" and var.size is not None:
            align = var.align or var.element_size
            offset = -(-self.local_size // align) * align
            self.local_size = offset + var.size
            self.scopes[-1][("local", var.name)] = offset
        else:
            raise Unsupported(f"{var.space} variable {var.name}", var.line)

    def lower(self) -> str:
        f = self.function
        if not f.is_kernel:
            raise Unsupported("not a kernel", f.line)
        for p in f.params:
            if p.type.lstrip(".") not in BITS and p.type.lstrip(".") != "b8":
                raise Unsupported(f"kernel parameter type {p.type}", f.line)
        flat: list[tuple[nodes.Instruction, list]] = []
        self.flatten(f.body or [], flat)
        self.flat_scopes = [scopes for _, scopes in flat]
        self.flat = [instr for instr, _ in flat]
        n = len(flat)
        self.back = back_edges(n, lambda i: self.successors(self.flat, i))
        self.uses = [set() for _ in range(n + 1)]
        self.defs = [set() for _ in range(n + 1)]
        for i, (instr, scopes) in enumerate(flat):
            self.scopes = scopes
            self.instr = instr
            self.index = i
            self.lines.append(f"L{i}:")
            nxt = f"%L{i + 1}"
            if i in self.returns:  # not an instruction: the results of a call come back
                self.call_return(self.returns[i])
                self.emit(f"br label {nxt}")
                continue
            self.emit(f"%c{i} = load i64, ptr %cnt\n  %c{i}n = add i64 %c{i}, 1\n"
                      f"  store i64 %c{i}n, ptr %cnt")
            if instr.op in ("atom", "red") and not _SHARED_SPACES & set(instr.modifiers):
                self.atomics += 1  # one that other blocks' threads may race on (parallel)
            if instr.op == "brx":
                self.branch_indexed(instr, i, nxt)
                continue
            if instr.op == "bra":
                target = self.target(instr)
                p = self.guard(instr.guard) if instr.guard is not None else None
                if (i, int(target[2:])) in self.back:
                    self.backward(int(target[2:]), p or "true", nxt if p else None)
                elif p is None:
                    self.emit(f"br label {target}")
                else:
                    self.emit(f"br i1 {p}, label {target}, label {nxt}")
                continue
            skip = f"%L{self.calls[i].after + 1}" if i in self.calls else nxt
            if instr.guard is not None and instr.op not in ("shfl", "vote", "redux"):
                # a warp instruction takes its guard itself: predicated-off
                # lanes still take part (:mod:`.warps`)
                p = self.guard(instr.guard)
                self.emit(f"br i1 {p}, label %G{i}, label {skip}")
                self.lines.append(f"G{i}:")
            if i in self.calls:
                self.call_entry(self.calls[i])
                self.emit(f"br label {nxt}")
                continue
            if i in self.printfs:
                self.printf_call(i)
                self.emit(f"br label {nxt}")
                continue
            if i in self.ret_to:  # a return of an inlined callee
                self.emit(f"br label %L{self.ret_to[i]}")
                continue
            if instr.op in ("ret", "exit"):
                self.emit("br label %done")
                continue
            self.instruction(instr)
            self.emit(f"br label {nxt}")
        self.instr = None
        self.index = n
        self.lines.append(f"L{n}:")
        self.emit("%cend = load i64, ptr %cnt\n  %cendn = add i64 %cend, 1\n"
                  "  store i64 %cendn, ptr %cnt\n  br label %done")
        return self.assemble([instr for instr, _ in flat])

    def assemble(self, flat: list[nodes.Instruction]) -> str:
        """``@thread``: the entry switch on the resume point, the body with each
        barrier's save of the registers live after it, and its restore."""
        live = live_at(flat, self.live_points, self.uses, self.defs,
                       lambda i: self.successors(flat, i))
        saved = sorted({slot for regs in live for slot in regs}, key=lambda x: int(x[2:]))
        self.frame_slots = len(saved)
        place = {slot: k for k, slot in enumerate(saved)}
        # a register live at a suspension lives in the thread's frame: nothing
        # to save or restore there, and LLVM keeps it in a machine register
        # between suspensions (the frame is noalias); zeroed at a fresh start
        # as the other registers are (the frame holds an earlier block's;
        # only those a thread may read before it writes them)
        read_first = live_at(flat, [0], self.uses, self.defs,
                             lambda i: self.successors(flat, i))[0] if place else set()
        allocas, fresh = [], ["fresh:"]
        for line in self.allocas:
            slot = line.split(" = ", 1)[0].strip()
            if slot in place:
                allocas.append(f"  {slot} = getelementptr i64, ptr %frame, i64 {place[slot]}")
                if slot in read_first:
                    fresh.append(f"  store i{self.widths[slot]} 0, ptr {slot}")
            else:
                allocas.append(line)
        fresh.append("  br label %L0")
        body = "\n".join(self.lines)
        cases = [f"i32 {k + 1}, label %{label}" for k, label in enumerate(self.resume_labels)]
        restores = ["\n".join(fresh)]
        # the launch's bookkeeping (not memory the kernel can reach) is noalias:
        # a store to device memory no longer makes LLVM reload a register the
        # barrier restored, nor store it back unchanged (see docs/decisions.md)
        head = ("define internal i32 @thread(ptr noalias %params, ptr noalias %ctx, "
                "ptr noalias %count, "
                + ", ".join(f"i32 %sr{k}" for k in range(12))
                + ", ptr noalias %frame, i32 %resume, ptr nonnull %shared, i64 %sstride, "
                  "ptr nonnull %local, "
                  "i64 %lstride, ptr noalias %syms, i32 %lin, i32 %tpb, ptr noalias %pub, "
                  "ptr noalias %snap, ptr noalias %sstate) {\nentry:\n"
                + "  %cnt = alloca i64\n  store i64 0, ptr %cnt\n"
                + "  %spin = alloca i32\n  store i32 0, ptr %spin\n"
                + "\n".join(allocas)
                + f"\n  switch i32 %resume, label %fresh [{' '.join(cases)}]\n")
        tail = ("done:\n  %cd = load i64, ptr %cnt\n  %co = load i64, ptr %count\n"
                "  %cs = add i64 %co, %cd\n  store i64 %cs, ptr %count\n  ret i32 0\n"
                "fault:\n  %cf = load i64, ptr %cnt\n  %cfo = load i64, ptr %count\n"
                "  %cfs = add i64 %cfo, %cf\n  store i64 %cfs, ptr %count\n  ret i32 1\n}\n")
        return head + body + "\n" + "\n".join(restores) + "\n" + tail

    def successors(self, flat: list[nodes.Instruction], i: int) -> list[int]:
        """Where control may go after flat instruction ``i`` (``len(flat)``: the
        implicit return)."""
        instr = flat[i]
        guarded = instr.guard is not None
        if i in self.calls:
            return [i + 1, self.calls[i].after + 1] if guarded else [i + 1]
        if i in self.ret_to:
            return [self.ret_to[i], i + 1] if guarded else [self.ret_to[i]]
        if i in self.returns:  # a call's results coming back, then the caller goes on
            return [i + 1]
        if instr.op == "bra":
            self.scopes = self.flat_scopes[i]
            target = int(self.target(instr)[2:])
            return [target, i + 1] if guarded else [target]
        if instr.op == "brx":
            self.scopes = self.flat_scopes[i]
            targets = self.branch_table(instr)
            return [*targets, i + 1] if guarded else targets
        if instr.op in ("ret", "exit"):
            return [i + 1] if guarded else []
        return [i + 1]

    def target(self, instr: nodes.Instruction) -> str:
        ops = instr.operands
        if len(ops) == 1 and isinstance(ops[0], nodes.Symbol):
            for scope in reversed(self.scopes):
                index = scope.get(("label", ops[0].name))
                if index is not None:
                    return f"%L{index}"
        raise self.fail("branch target")

    def branch_table(self, instr: nodes.Instruction) -> list[int]:
        """The flat indices a ``brx.idx`` may jump to, in its table's order."""
        ops = instr.operands
        if len(ops) != 2 or not isinstance(ops[1], nodes.Symbol) \
                or [m for m in instr.modifiers if m != "uni"] != ["idx"]:
            raise self.fail("brx.idx needs an index and a .branchtargets label")
        names = self.scoped(("targets", ops[1].name))
        if names is None:
            raise self.fail(f"{ops[1].name} is not a .branchtargets list")
        out = []
        for name in names:
            index = self.scoped(("label", name))
            if index is None:
                raise self.fail(f"branch target {name}")
            out.append(index)
        return out

    def scoped(self, key: tuple) -> object:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def branch_indexed(self, instr: nodes.Instruction, i: int, nxt: str) -> None:
        """``brx.idx``: a switch over the table; an index past it stops the
        launch with the interpreter's trap (reported through the access
        callback, ``TRAP_BRX``)."""
        targets = self.branch_table(instr)
        if instr.guard is not None:
            p = self.guard(instr.guard)
            self.emit(f"br i1 {p}, label %X{i}, label {nxt}")
            self.lines.append(f"X{i}:")
        idx = self.read(instr.operands[0], "u32")
        cases = " ".join(f"i32 {k}, label %X{i}_{k}" for k in range(len(targets)))
        self.emit(f"switch i32 {idx}, label %X{i}_bad [{cases}]")
        self.lines.append(f"X{i}_bad:")
        self.emit(f"%X{i}_fpp = getelementptr i64, ptr %ctx, i64 4\n"
                  f"  %X{i}_fp = load ptr, ptr %X{i}_fpp\n"
                  f"  %X{i}_idx = zext i32 {idx} to i64\n"
                  f"  call ptr %X{i}_fp(i64 %X{i}_idx, i64 {len(targets)}, i32 {TRAP_BRX}, "
                  f"i32 {instr.line})\n  br label %fault")
        for k, target in enumerate(targets):
            self.lines.append(f"X{i}_{k}:")
            if (i, target) in self.back:
                self.backward(target, "true", None)
            else:
                self.emit(f"br label %L{target}")

    def guard(self, guard: nodes.Guard) -> str:
        v = self.read(nodes.Register(guard.register), "pred")
        if guard.negated:
            out = self.new()
            self.emit(f"{out} = xor i1 {v}, true")
            return out
        return v

    # -- instructions ---------------------------------------------------------

    def op_membar(self, instr: nodes.Instruction) -> None:
        """A fence (the interpreter's threads share one memory; the JIT's
        blocks on several OS threads must not see writes out of order)."""
        self.emit("fence seq_cst")

    op_fence = op_membar

    def instruction(self, instr: nodes.Instruction) -> None:
        if instr.op in ("ld", "st") and "param" in instr.modifiers and self.param_access(instr):
            return
        handler = self.half_handler(instr) or getattr(self, "op_" + instr.op, None)
        if handler is None:
            raise self.fail("not in the JIT's first slice")
        handler(instr)


_SHARED_SPACES = frozenset({"shared", "shared::cta"})
"""An atomic on these is the block's own (:meth:`.access.MemoryLowering._atomic`)."""

_FMA_DECLS = ("declare float @llvm.fma.f32(float, float, float)\n"
              "declare double @llvm.fma.f64(double, double, double)\n")


@dataclass(frozen=True)
class Lowered:
    """A kernel's IR and what a launch must supply to run it."""

    ir: str  # ``@thread`` (needs ``@resolve`` and the block loop from the engine)
    sites: int  # global/generic access sites: one segment hint each
    frame_slots: int  # 8-byte slots per thread saved across barriers
    shared_keys: tuple  # shared variables whose offsets ``%syms`` holds, in order
    local_size: int  # bytes of the kernel's .local variables
    barriers: int
    atomics: int = 0  # atom/red instructions after inlining: each must be an LLVM atomic
    call_depth: int = 0  # deepest nesting of inlined calls


def lower_kernel(function: nodes.Function, functions: dict | None = None,
                 module_globals: frozenset = frozenset()) -> Lowered:
    """The LLVM IR of ``@thread`` for ``function`` and what running it needs;
    ``functions`` (the module's, by name) are the callees it may inline,
    ``module_globals`` the module's variables other than ``.shared`` (refused).
    Raises :class:`Unsupported` for anything outside the slice."""
    def lowered(lazy: frozenset) -> tuple[_Lowerer, str]:
        lowerer = _Lowerer(function)
        lowerer.init_calls(functions or {})
        lowerer.module_globals = module_globals
        lowerer.lazy = lazy
        return lowerer, lowerer.lower()

    lowerer, body = lowered(frozenset())
    lazy = lowerer.lazy_slots()
    if lazy:  # again, with those f32 results canonicalised where read (Values.lazy_slots)
        lowerer, body = lowered(lazy)
    ir = _FMA_DECLS + "\n".join(sorted(lowerer.intrinsics)) + "\n" + body
    return Lowered(ir, lowerer.sites, lowerer.frame_slots, tuple(lowerer.shared_keys),
                   lowerer.local_size, len(lowerer.barriers), lowerer.atomics,
                   lowerer.stack_depth)
