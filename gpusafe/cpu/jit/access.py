"""Memory instructions of the JIT's lowering: ``ld.param`` of kernel
parameters by name, ``ld``/``st`` global, shared, local and generic (scalars
and vectors), ``atom``/``red``.  A global access calls ``@resolve``, a shared
or local one ``@shared_ptr``/``@local_ptr`` (the block's shared window, the
thread's frame), a generic one ``@generic_ptr``, which picks one of them by
the interpreter's address windows (:mod:`.blocks`); each gives the bytes or
stops the launch with the interpreter's error."""

from __future__ import annotations

from gpusafe_instrument import nodes

from .atomics import atomic_form, compiled_atomic
from .runs import RunChecks
from .values import (
    ACCESS_ATOMIC,
    ACCESS_READ,
    ACCESS_WRITE,
    BITS,
    GENERIC,
    LOCAL,
    SHARED,
    llvm_type,
    split_type,
)


class MemoryLowering(RunChecks):
    """``op_ld``, ``op_st``, ``op_atom``."""

    def address(self, operand: nodes.Operand, width: int, space: int, access: int) -> str:
        if not isinstance(operand, nodes.Address):
            raise self.fail("address operand")
        if isinstance(operand.base, nodes.Register) or (
                isinstance(operand.base, nodes.Symbol) and self.is_register(operand.base.name)):
            base = self.read(nodes.Register(operand.base.name), "u64")
        elif isinstance(operand.base, nodes.Symbol):
            base = self.symbol_address(operand.base.name, 0)
            window = self.generic_window(operand.base.name)
            if space == GENERIC and window:  # its generic address, as the decoder gives it
                out = self.new()
                self.emit(f"{out} = add i64 {base}, {window}")
                base = out
        elif operand.base is None:
            base = "0"
        else:
            raise self.fail(f"address of {operand.base}")
        addr = self.new()
        self.emit(f"{addr} = add i64 {base}, {operand.offset}")
        ptr = self.new()
        tail = (f"i64 {addr}, i64 {width}, i32 {space * 4 + access}, "
                f"i32 {self.instr.line if self.instr else 0}")
        if space in (SHARED, LOCAL) and access != ACCESS_ATOMIC:
            if self.index in self.prechecked:
                return self._window_pointer(space, addr)
            self._precheck_run(space)
            if self.index in self.prechecked:
                return self._window_pointer(space, addr)
        if space == SHARED:
            self.emit(f"{ptr} = call ptr @shared_ptr(ptr %ctx, ptr %shared, i64 %sstride, {tail})")
        elif space == LOCAL:
            self.emit(f"{ptr} = call ptr @local_ptr(ptr %ctx, ptr %local, i64 %lstride, {tail})")
        else:
            self.sites += 1
            call = "generic_ptr" if space == GENERIC else "resolve"  # global, const
            extra = (", ptr %shared, i64 %sstride, ptr %local, i64 %lstride"
                     if space == GENERIC else "")
            self.emit(f"{ptr} = call ptr @{call}(ptr %ctx, i64 {self.sites - 1}, {tail}{extra})")
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
            rest = [m for m in mods if m not in BITS and m not in ("param", "v2", "v4")]
            dests = d.items if isinstance(d, nodes.Vector) else (d,)
            count = 4 if "v4" in mods else 2 if "v2" in mods else 1
            if rest or not isinstance(a, nodes.Address) or not isinstance(a.base, nodes.Symbol) \
                    or a.base.name not in self.kparams or len(dests) != count or t == "pred":
                raise self.fail("only loads of kernel parameters by name")
            for k, dst in enumerate(dests):
                p, v = self.new(), self.new()
                self.emit(f"{p} = getelementptr i8, ptr %params, i64 "
                          f"{self.kparams[a.base.name] + a.offset + k * BITS[t] // 8}")
                self.emit(f"{v} = load {llvm_type(t)}, ptr {p}, align 1")
                self.write(dst, t, v)
            return
        space, count, t, rest = self._memory(instr)
        volatile = self.volatile(instr, space, rest)
        if rest or t == "pred":
            raise self.fail(f"modifiers {rest}")
        size = BITS[t] // 8
        ptr = self.address(a, size * count, space, ACCESS_READ)
        dests = d.items if isinstance(d, nodes.Vector) else (d,)
        if len(dests) != count:
            raise self.fail("vector length")
        for k, dst in enumerate(dests):
            v = self.new()
            self.emit(f"{v} = load {volatile}{llvm_type(t)}, ptr {self.element(ptr, k, size)}, "
                      "align 1")
            self.write(dst, t, v)

    def op_st(self, instr: nodes.Instruction) -> None:
        space, count, t, rest = self._memory(instr)
        volatile = self.volatile(instr, space, rest)
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
            self.emit(f"store {volatile}{llvm_type(t)} {v}, ptr {self.element(ptr, k, size)}, "
                      "align 1")

    def _atomic(self, instr: nodes.Instruction, dest: nodes.Operand | None,
                a: nodes.Operand, srcs: list[nodes.Operand], op: str, t: str,
                space: int) -> None:
        """One thread's atomic (:func:`.atomics.compiled_atomic`).  The final
        memory and the old values are the interpreter's whenever its lane
        order is the JIT's thread order for that address (each thread's
        atomics on an address in one instruction between barriers), and a
        float sum may round otherwise."""
        lt = llvm_type(t)
        vals = [self.read(x, t) for x in srcs]
        ptr = self.address(a, BITS[t] // 8, space, ACCESS_ATOMIC)
        old = self.new()
        text, intrinsics = compiled_atomic(old, ptr, op, t, lt, vals, space, self.new)
        self.intrinsics.update(intrinsics)
        self.emit(text)
        if dest is not None:
            self.write(dest, t, old)

    def op_atom(self, instr: nodes.Instruction) -> None:
        op, t, space = atomic_form(instr, self.fail)
        want = 4 if op == "cas" else 3
        if len(instr.operands) != want:
            raise self.fail("form")
        d, a, *srcs = instr.operands
        self._atomic(instr, d, a, srcs, op, t, space)

    def op_red(self, instr: nodes.Instruction) -> None:
        op, t, space = atomic_form(instr, self.fail)
        if op == "cas" or len(instr.operands) != 2:
            raise self.fail("form")
        a, b = instr.operands
        self._atomic(instr, None, a, [b], op, t, space)


