"""PTX kernel -> LLVM IR (text), one thread per call of ``@thread``.

Every PTX instruction becomes its own basic block (LLVM merges them), so
labels and guards need no analysis; each counts one executed instruction, as
the interpreter counts.  Operands are :mod:`.values`' business, instructions
:mod:`.alu`'s and :mod:`.access`'s.  Whatever this slice does not cover
raises :class:`~.values.Unsupported` with the PTX line, and the launch runs
on the interpreter.
"""

from __future__ import annotations

from gpusafe_instrument import nodes

from .access import MemoryLowering
from .alu import AluLowering
from .values import BITS, Unsupported

__all__ = ["Unsupported", "lower_kernel"]


class _Lowerer(AluLowering, MemoryLowering):
    """The kernel's structure: declarations, labels, guards, branches, returns."""

    # -- structure ------------------------------------------------------------

    def flatten(self, statements: list, out: list) -> None:
        for s in statements:
            if isinstance(s, nodes.Instruction):
                out.append((s, list(self.scopes)))
            elif isinstance(s, nodes.Label):
                self.scopes[-1][("label", s.name)] = len(out)  # { } scopes labels too
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
                raise Unsupported(f"{s.space} variable {s.name}", s.line)
            elif isinstance(s, (nodes.Loc, nodes.Pragma)):
                continue
            else:
                raise Unsupported(f"statement {type(s).__name__}", getattr(s, "line", None))

    def lower(self) -> str:
        f = self.function
        if not f.is_kernel:
            raise Unsupported("not a kernel", f.line)
        for p in f.params:
            if p.type.lstrip(".") not in BITS and p.type.lstrip(".") != "b8":
                raise Unsupported(f"kernel parameter type {p.type}", f.line)
        flat: list[tuple[nodes.Instruction, list]] = []
        self.flatten(f.body or [], flat)
        n = len(flat)
        for i, (instr, scopes) in enumerate(flat):
            self.scopes = scopes
            self.instr = instr
            self.lines.append(f"L{i}:")
            self.emit(f"%c{i} = load i64, ptr %cnt\n  %c{i}n = add i64 %c{i}, 1\n"
                      f"  store i64 %c{i}n, ptr %cnt")
            nxt = f"%L{i + 1}"
            if instr.op == "bra":
                target = self.target(instr)
                if instr.guard is None:
                    self.emit(f"br label {target}")
                else:
                    p = self.guard(instr.guard)
                    self.emit(f"br i1 {p}, label {target}, label {nxt}")
                continue
            if instr.guard is not None:
                p = self.guard(instr.guard)
                self.emit(f"br i1 {p}, label %G{i}, label {nxt}")
                self.lines.append(f"G{i}:")
            if instr.op in ("ret", "exit"):
                self.emit("br label %done")
                continue
            self.instruction(instr)
            self.emit(f"br label {nxt}")
        self.instr = None
        self.lines.append(f"L{n}:")
        self.emit("%cend = load i64, ptr %cnt\n  %cendn = add i64 %cend, 1\n"
                  "  store i64 %cendn, ptr %cnt\n  br label %done")
        head = ("define internal i32 @thread(ptr %params, ptr %ctx, ptr %count, "
                + ", ".join(f"i32 %sr{k}" for k in range(12)) + ") {\nentry:\n"
                + "  %cnt = alloca i64\n  store i64 0, ptr %cnt\n"
                + "\n".join(self.allocas) + "\n  br label %L0\n")
        tail = ("done:\n  %cd = load i64, ptr %cnt\n  %co = load i64, ptr %count\n"
                "  %cs = add i64 %co, %cd\n  store i64 %cs, ptr %count\n  ret i32 0\n"
                "fault:\n  %cf = load i64, ptr %cnt\n  %cfo = load i64, ptr %count\n"
                "  %cfs = add i64 %cfo, %cf\n  store i64 %cfs, ptr %count\n  ret i32 1\n}\n")
        return head + "\n".join(self.lines) + "\n" + tail

    def target(self, instr: nodes.Instruction) -> str:
        ops = instr.operands
        if len(ops) == 1 and isinstance(ops[0], nodes.Symbol):
            for scope in reversed(self.scopes):
                index = scope.get(("label", ops[0].name))
                if index is not None:
                    return f"%L{index}"
        raise self.fail("branch target")

    def guard(self, guard: nodes.Guard) -> str:
        v = self.read(nodes.Register(guard.register), "pred")
        if guard.negated:
            out = self.new()
            self.emit(f"{out} = xor i1 {v}, true")
            return out
        return v

    # -- instructions ---------------------------------------------------------

    def instruction(self, instr: nodes.Instruction) -> None:
        handler = getattr(self, "op_" + instr.op, None)
        if handler is None:
            raise self.fail("not in the JIT's first slice")
        handler(instr)

_FMA_DECLS = ("declare float @llvm.fma.f32(float, float, float)\n"
              "declare double @llvm.fma.f64(double, double, double)\n")


def lower_kernel(function: nodes.Function) -> tuple[str, int]:
    """The LLVM IR of ``@thread`` for ``function`` (needs ``@resolve`` from the
    engine) and how many access sites it has (one segment hint each).  Raises
    :class:`Unsupported` for anything outside the slice."""
    lowerer = _Lowerer(function)
    body = lowerer.lower()
    return _FMA_DECLS + "\n".join(sorted(lowerer.intrinsics)) + "\n" + body, lowerer.sites
