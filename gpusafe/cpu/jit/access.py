"""Memory instructions of the JIT's lowering: ``ld.param`` of kernel
parameters by name, ``ld``/``st`` global and generic (scalars and vectors),
``atom.add`` on integers.  Each global or generic access calls ``@resolve``
(:mod:`.engine`), which gives the bytes or stops the launch with the
interpreter's error."""

from __future__ import annotations

from gpusafe_instrument import nodes

from .values import (
    ACCESS_ATOMIC,
    ACCESS_READ,
    ACCESS_WRITE,
    BITS,
    GENERIC,
    GLOBAL,
    QUALIFIERS,
    Values,
    llvm_type,
    split_type,
)


class MemoryLowering(Values):
    """``op_ld``, ``op_st``, ``op_atom``."""

    # -- memory ---------------------------------------------------------------

    def _memory(self, instr: nodes.Instruction) -> tuple[int, int, str, list[str]]:
        """(space, vector length, element type, remaining modifiers)."""
        mods, t = split_type(instr)
        space = GENERIC
        count = 1
        rest = []
        for m in mods:
            if m == "global":
                space = GLOBAL
            elif m in ("v2", "v4"):
                count = int(m[1])
            elif m in QUALIFIERS or m.startswith("L1::") or m.startswith("L2::"):
                continue
            else:
                rest.append(m)
        return space, count, t, rest

    def address(self, operand: nodes.Operand, width: int, space: int, access: int) -> str:
        if not isinstance(operand, nodes.Address):
            raise self.fail("address operand")
        if isinstance(operand.base, nodes.Register):
            base = self.read(operand.base, "u64")
        elif operand.base is None:
            base = "0"
        else:
            raise self.fail(f"address of symbol {operand.base}")
        addr = self.new()
        self.emit(f"{addr} = add i64 {base}, {operand.offset}")
        ptr = self.new()
        self.sites += 1
        self.emit(f"{ptr} = call ptr @resolve(ptr %ctx, i64 {self.sites - 1}, i64 {addr}, "
                  f"i64 {width}, "
                  f"i32 {space * 4 + access}, i32 {self.instr.line if self.instr else 0})")
        bad = self.new()
        self.emit(f"{bad} = icmp eq ptr {ptr}, null")
        self.tmp += 1
        ok = f"ok{self.tmp}"
        self.emit(f"br i1 {bad}, label %fault, label %{ok}")
        self.lines.append(f"{ok}:")
        return ptr

    def element(self, ptr: str, k: int, size: int) -> str:
        if k == 0:
            return ptr
        out = self.new()
        self.emit(f"{out} = getelementptr i8, ptr {ptr}, i64 {k * size}")
        return out

    def op_ld(self, instr: nodes.Instruction) -> None:
        mods = instr.modifiers
        d, a = instr.operands
        if "param" in mods:
            _, t = split_type(instr)
            rest = [m for m in mods if m not in BITS and m != "param"]
            if rest or not isinstance(a, nodes.Address) or not isinstance(a.base, nodes.Symbol) \
                    or a.base.name not in self.kparams:
                raise self.fail("only scalar loads of kernel parameters by name")
            p = self.new()
            self.emit(f"{p} = getelementptr i8, ptr %params, i64 "
                      f"{self.kparams[a.base.name] + a.offset}")
            v = self.new()
            self.emit(f"{v} = load {llvm_type(t)}, ptr {p}, align 1")
            self.write(d, t, v)
            return
        space, count, t, rest = self._memory(instr)
        if rest or t == "pred":
            raise self.fail(f"modifiers {rest}")
        size = BITS[t] // 8
        ptr = self.address(a, size * count, space, ACCESS_READ)
        dests = d.items if isinstance(d, nodes.Vector) else (d,)
        if len(dests) != count:
            raise self.fail("vector length")
        for k, dst in enumerate(dests):
            v = self.new()
            self.emit(f"{v} = load {llvm_type(t)}, ptr {self.element(ptr, k, size)}, align 1")
            self.write(dst, t, v)

    def op_st(self, instr: nodes.Instruction) -> None:
        space, count, t, rest = self._memory(instr)
        if rest or t == "pred":
            raise self.fail(f"modifiers {rest}")
        a, s = instr.operands
        size = BITS[t] // 8
        srcs = s.items if isinstance(s, nodes.Vector) else (s,)
        if len(srcs) != count:
            raise self.fail("vector length")
        values = [self.read(x, t) for x in srcs]
        ptr = self.address(a, size * count, space, ACCESS_WRITE)
        for k, v in enumerate(values):
            self.emit(f"store {llvm_type(t)} {v}, ptr {self.element(ptr, k, size)}, align 1")

    def _atomic_add(self, instr: nodes.Instruction, dest: nodes.Operand | None,
                    a: nodes.Operand, b: nodes.Operand) -> None:
        """Integer add as an LLVM ``atomicrmw`` (relaxed, PTX's default
        order): exact when blocks run on several OS threads (:mod:`.cores`).
        The final memory is the interpreter's; the old values returned are
        too unless a thread makes several atomics (the interpreter runs each
        instruction for all lanes, in lane order)."""
        space, count, t, rest = self._memory(instr)
        if rest != ["add"] or count != 1 or t not in ("u32", "s32", "u64"):
            raise self.fail(f"only integer {instr.op}.add ({rest})")
        vb = self.read(b, t)
        ptr = self.address(a, BITS[t] // 8, space, ACCESS_ATOMIC)
        old = self.new()
        self.emit(f"{old} = atomicrmw add ptr {ptr}, {llvm_type(t)} {vb} monotonic, "
                  f"align {BITS[t] // 8}")
        if dest is not None:
            self.write(dest, t, old)

    def op_atom(self, instr: nodes.Instruction) -> None:
        if len(instr.operands) != 3:
            raise self.fail("form")
        d, a, b = instr.operands
        self._atomic_add(instr, d, a, b)

    def op_red(self, instr: nodes.Instruction) -> None:
        if len(instr.operands) != 2:
            raise self.fail("form")
        a, b = instr.operands
        self._atomic_add(instr, None, a, b)
