"""Memory instructions of the JIT's lowering: ``ld.param`` of kernel
parameters by name, ``ld``/``st`` global, shared, local and generic (scalars
and vectors), ``atom``/``red``.  A global access calls ``@resolve``, a shared
or local one ``@shared_ptr``/``@local_ptr`` (the block's shared window, the
thread's frame), a generic one ``@generic_ptr``, which picks one of them by
the interpreter's address windows (:mod:`.blocks`); each gives the bytes or
stops the launch with the interpreter's error."""

from __future__ import annotations

from gpusafe_instrument import nodes

from .runs import RunChecks
from .values import (
    ACCESS_ATOMIC,
    ACCESS_READ,
    ACCESS_WRITE,
    BITS,
    GENERIC,
    GLOBAL,
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
        """One thread's atomic, an LLVM ``atomicrmw``/``cmpxchg`` (relaxed,
        PTX's default order) where LLVM has the operation, so that blocks on
        several OS threads (:mod:`.cores`) lose no update; ``inc``/``dec`` are
        LLVM's ``uinc_wrap``/``udec_wrap`` (a tally of the instrumented kernel
        counts with ``atom.inc`` below sm_90).  A ``.shared`` atomic is
        always the plain update: a block's window belongs to the one OS
        thread running its threads one after another (the bench's histogram,
        one ``atom.shared`` per input byte: 5.0 ms locked, 3.5 ms plain).
        The update is the interpreter's (:func:`gpusafe.cpu.atomics.update_fn`);
        the final memory and the old values are the interpreter's whenever its lane order is the JIT's
        thread order for that address (each thread's atomics on an address
        in one instruction between barriers), and a float sum may round
        otherwise."""
        lt = llvm_type(t)
        vals = [self.read(x, t) for x in srcs]
        ptr = self.address(a, BITS[t] // 8, space, ACCESS_ATOMIC)
        old = self.new()
        v = vals[-1]
        signed = t.startswith("s")
        align = BITS[t] // 8
        rmw = {"add": "fadd" if t in ("f32", "f64") else "add", "and": "and", "or": "or",
               "xor": "xor", "exch": "xchg",
               "min": "min" if signed else "umin", "max": "max" if signed else "umax",
               # PTX's atom.inc/dec.u32 to the letter: old >= b ? 0 : old + 1, and
               # old == 0 || old > b ? b : old - 1 (LLVM's wrapping increments)
               "inc": "uinc_wrap", "dec": "udec_wrap"}
        if space == SHARED:  # the block's own window: its threads run one after another
            self._atomic_update(old, ptr, op, lt, vals, signed)
        elif op in rmw and not (op in ("min", "max") and t in ("f32", "f64")):
            self.emit(f"{old} = atomicrmw {rmw[op]} ptr {ptr}, {lt} {v} monotonic, "
                      f"align {align}")
        elif op == "cas" and t not in ("f32", "f64"):
            pair = self.new()
            self.emit(f"{pair} = cmpxchg ptr {ptr}, {lt} {vals[0]}, {lt} {v} monotonic "
                      f"monotonic, align {align}")
            self.emit(f"{old} = extractvalue {{ {lt}, i1 }} {pair}, 0")
        else:
            self._atomic_update(old, ptr, op, lt, vals, signed)
        if dest is not None:
            self.write(dest, t, old)

    def _atomic_update(self, old: str, ptr: str, op: str, lt: str, vals: list[str],
                       signed: bool) -> None:
        """The update as a plain load, operation and store."""
        v = vals[-1]
        self.emit(f"{old} = load {lt}, ptr {ptr}, align 1")
        new = self.new()
        if op == "add":
            self.emit(f"{new} = {'fadd' if lt in ('float', 'double') else 'add'} {lt} {old}, {v}")
        elif op in ("and", "or", "xor"):
            self.emit(f"{new} = {op} {lt} {old}, {v}")
        elif op in ("min", "max"):
            fn = f"llvm.{'s' if signed else 'u'}{op}.{lt}"
            self.intrinsics.add(f"declare {lt} @{fn}({lt}, {lt})")
            self.emit(f"{new} = call {lt} @{fn}({lt} {old}, {lt} {v})")
        elif op == "exch":
            new = v
        elif op == "cas":
            eq = self.new()
            self.emit(f"{eq} = icmp eq {lt} {old}, {vals[0]}")
            self.emit(f"{new} = select i1 {eq}, {lt} {v}, {lt} {old}")
        elif op == "inc":  # old >= limit ? 0 : old + 1, unsigned
            top, plus = self.new(), self.new()
            self.emit(f"{top} = icmp uge {lt} {old}, {v}\n  {plus} = add {lt} {old}, 1")
            self.emit(f"{new} = select i1 {top}, {lt} 0, {lt} {plus}")
        else:  # dec: old == 0 or old > limit ? limit : old - 1, unsigned
            zero, above, wrap, minus = self.new(), self.new(), self.new(), self.new()
            self.emit(f"{zero} = icmp eq {lt} {old}, 0\n  {above} = icmp ugt {lt} {old}, {v}\n"
                      f"  {wrap} = or i1 {zero}, {above}\n  {minus} = sub {lt} {old}, 1")
            self.emit(f"{new} = select i1 {wrap}, {lt} {v}, {lt} {minus}")
        self.emit(f"store {lt} {new}, ptr {ptr}, align 1")

    def _atomic_form(self, instr: nodes.Instruction) -> tuple[str, str, int]:
        """(operation, type, space) of an ``atom``/``red``; refuses the rest.
        Memory-order and scope qualifiers change nothing when threads run one
        after another; a thread spinning on an atomic for another thread's
        write would never end (the interpreter yields to it): such a kernel
        needs the interpreter, and a launch with a timeout gets it."""
        mods, t = split_type(instr)
        space = GENERIC
        ops = []
        for m in mods:
            if m == "global":
                space = GLOBAL
            elif m in ("shared", "shared::cta"):
                space = SHARED
            elif m in _ATOMIC_OPS:
                ops.append(m)
            elif m not in _ATOMIC_QUALIFIERS:
                raise self.fail(f"modifier .{m}")
        if len(ops) != 1:
            raise self.fail(f"atomic operation {ops}")
        op = ops[0]
        floats = t in ("f32", "f64")
        if t == "pred" or BITS[t] < 32 or (floats and op != "add") \
                or (op in ("inc", "dec") and t != "u32"):
            raise self.fail(f".{op}.{t}")
        return op, t, space

    def op_atom(self, instr: nodes.Instruction) -> None:
        op, t, space = self._atomic_form(instr)
        want = 4 if op == "cas" else 3
        if len(instr.operands) != want:
            raise self.fail("form")
        d, a, *srcs = instr.operands
        self._atomic(instr, d, a, srcs, op, t, space)

    def op_red(self, instr: nodes.Instruction) -> None:
        op, t, space = self._atomic_form(instr)
        if op == "cas" or len(instr.operands) != 2:
            raise self.fail("form")
        a, b = instr.operands
        self._atomic(instr, None, a, [b], op, t, space)



_ATOMIC_OPS = {"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"}
_ATOMIC_QUALIFIERS = {"relaxed", "acquire", "release", "acq_rel", "sys", "gpu", "cta",
                      "cluster", "noftz"}
