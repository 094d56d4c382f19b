"""Memory instructions of the JIT's lowering: ``ld.param`` of kernel
parameters by name, ``ld``/``st`` global, shared, local and generic (scalars
and vectors), ``atom``/``red``.  A global access calls ``@resolve``, a shared
or local one ``@shared_ptr``/``@local_ptr`` (the block's shared window, the
thread's frame), a generic one ``@generic_ptr``, which picks one of them by
the interpreter's address windows (:mod:`.blocks`); each gives the bytes or
stops the launch with the interpreter's error."""

from __future__ import annotations

from gpusafe_instrument import nodes

from ..memory import LOCAL_STACK_BASE, LOCAL_WINDOW, SHARED_WINDOW
from .values import (
    ACCESS_ATOMIC,
    ACCESS_READ,
    ACCESS_WRITE,
    BITS,
    GENERIC,
    GLOBAL,
    LOCAL,
    QUALIFIERS,
    SHARED,
    Values,
    llvm_type,
    split_type,
)


class MemoryLowering(Values):
    """``op_ld``, ``op_st``, ``op_atom``."""

    def __init__(self, function: nodes.Function) -> None:
        super().__init__(function)
        self.flat: list[nodes.Instruction] = []  # the kernel's flat instructions (lower)
        self.prechecked: set[int] = set()  # accesses a run's first access checked
        self.entries: set[int] | None = None  # where control may jump to

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
            elif m in ("shared", "shared::cta"):
                space = SHARED
            elif m == "local":
                space = LOCAL
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
        if isinstance(operand.base, nodes.Register) or (
                isinstance(operand.base, nodes.Symbol) and self.is_register(operand.base.name)):
            base = self.read(nodes.Register(operand.base.name), "u64")
        elif isinstance(operand.base, nodes.Symbol):
            base = self.symbol_address(operand.base.name, 0)
            if space == GENERIC:  # the variable's generic address, as the decoder gives it
                window = LOCAL_WINDOW if self.is_local(operand.base.name) else SHARED_WINDOW
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
            call = "resolve" if space == GLOBAL else "generic_ptr"
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

    # -- a run's shared/local accesses checked once -----------------------------

    def _window_pointer(self, space: int, addr: str) -> str:
        """The bytes of a shared or local access proven in bounds at its run's start."""
        base, bias = ("%shared", 0) if space == SHARED else ("%local", LOCAL_STACK_BASE)
        off, ptr = self.new(), self.new()
        self.emit(f"{off} = sub i64 {addr}, {bias}\n"
                  f"  {ptr} = getelementptr inbounds i8, ptr {base}, i64 {off}")
        return ptr

    def _run_accesses(self, start: int) -> list[tuple[int, nodes.Address, int, int, int]]:
        """The shared and local ``ld``/``st`` of the straight-line run from flat
        instruction ``start`` (an unguarded one of them), as (index, address,
        width, space, access): the run goes on while control can enter only
        at its start (no label, call or return inside), no instruction is
        guarded, and every instruction is arithmetic (cannot fault, suspend or
        touch memory) or such an access whose address registers no earlier
        instruction of the run writes."""
        flat, out, written = self.flat, [], set()
        entries = self._entry_points()
        for m in range(start, len(flat)):
            instr = flat[m]
            if m > start and (m in entries or instr.guard is not None):
                break
            if m in self.calls or m in self.returns or m in self.ret_to:
                break
            scopes = self.flat_scopes[m]
            if instr.op in ("ld", "st") and "param" not in instr.modifiers:
                space, count, t, rest = self._memory(instr)
                a = instr.operands[1 if instr.op == "ld" else 0]
                if space not in (SHARED, LOCAL) or rest or t == "pred" \
                        or not isinstance(a, nodes.Address):
                    break
                key = self._base_slot(a, scopes)
                if key is None or key in written:
                    break
                out.append((m, a, BITS[t] // 8 * count, space,
                            ACCESS_READ if instr.op == "ld" else ACCESS_WRITE))
                if instr.op == "ld":
                    written |= self._names_slots(instr.operands[0], scopes)
            elif instr.op in _ARITHMETIC and instr.guard is None:
                written |= self._names_slots(instr.operands[0], scopes) if instr.operands \
                    else set()
            else:
                break
        return out

    def _entry_points(self) -> set[int]:
        """Flat indices control may reach other than from the instruction before."""
        if self.entries is None:
            found: set[int] = set(self.ret_to.values())
            found.update(site.after + 1 for site in self.calls.values())
            for scopes in self.flat_scopes:
                for scope in scopes:
                    found.update(v for k, v in scope.items()
                                 if isinstance(k, tuple) and k[0] == "label")
            self.entries = found
        return self.entries

    def _base_slot(self, a: nodes.Address, scopes: list) -> str | None:
        """What an address's base is read from: a register slot, a variable
        (an offset the launch fixes), none; None when it is something else."""
        base = a.base
        if base is None:
            return "0"
        for scope in reversed(scopes):
            if base.name in scope:
                return scope[base.name][0]
        if isinstance(base, nodes.Symbol):
            return f"@{base.name}"
        return None

    def _names_slots(self, operand: object, scopes: list) -> set[str]:
        """The register slots an operand names (a destination: what it may write)."""
        if isinstance(operand, (nodes.Register, nodes.Symbol)):
            for scope in reversed(scopes):
                if operand.name in scope:
                    return {scope[operand.name][0]}
            return set()
        found: set[str] = set()
        for item in getattr(operand, "items", ()) or ():
            found |= self._names_slots(item, scopes)
        for name in ("first", "second", "operand"):
            if hasattr(operand, name):
                found |= self._names_slots(getattr(operand, name), scopes)
        return found

    def _precheck_run(self, space: int) -> None:
        """At the first shared or local access of a straight-line run, check
        every access of the run at once (per base register and width, the
        lowest and highest offset when all are congruent modulo the width:
        the window is contiguous) and mark the later ones checked.

        Why: the matmul's tile step is 32 ``ld.shared`` from two base
        registers; each was a rotate, a compare and a branch to its own fault
        path, which LLVM cannot merge.  Exact: a failed check takes a cold
        path that checks the accesses in program order and reports the first
        bad one, with the instruction count up to it (the run's instructions
        in between cannot fault and write nothing a failed launch shows: shared
        and local memory and registers die with it)."""
        if self.instr is None or self.instr.guard is not None:
            return
        run = self._run_accesses(self.index)
        if len(run) < 2:
            return
        start, scopes = self.index, self.scopes
        addrs = []
        for m, a, *_ in run:
            self.scopes = self.flat_scopes[m]
            base = self._base_slot(a, self.scopes)
            if base == "0":
                value = "0"
            elif base.startswith("@"):
                value = self.symbol_address(a.base.name, 0)
            else:
                value = self.read(nodes.Register(a.base.name), "u64")
            addr = self.new()
            self.emit(f"{addr} = add i64 {value}, {a.offset}")
            addrs.append(addr)
        self.scopes = scopes
        groups: dict[tuple, list[int]] = {}
        for k, (_, a, width, sp, _) in enumerate(run):
            groups.setdefault((self._base_slot(a, self.flat_scopes[run[k][0]]), width, sp),
                              []).append(k)
        fails = []
        for (_, width, sp), members in groups.items():
            offsets = [run[k][1].offset for k in members]
            if all((o - offsets[0]) % width == 0 for o in offsets):
                lo = members[offsets.index(min(offsets))]
                hi = members[offsets.index(max(offsets))]
                chosen = [lo] if lo == hi else [lo, hi]
            else:
                chosen = members
            fails += [self._outside(addrs[k], width, sp) for k in chosen]
        bad = fails[0]
        for f in fails[1:]:
            out = self.new()
            self.emit(f"{out} = or i1 {bad}, {f}")
            bad = out
        self.tmp += 1
        n = self.tmp
        self.emit(f"br i1 {bad}, label %RF{n}, label %RO{n}, "
                  f"!prof !{{!\"branch_weights\", i32 1, i32 1000000}}")
        cold = [f"RF{n}:"]
        for k, (m, _, width, sp, access) in enumerate(run):
            fn, buf, stride = (("shared_ptr", "%shared", "%sstride") if sp == SHARED
                               else ("local_ptr", "%local", "%lstride"))
            p, b = f"%rf{n}_{k}", f"%rfb{n}_{k}"
            cold += [f"  {p} = call ptr @{fn}(ptr %ctx, ptr {buf}, i64 {stride}, "
                     f"i64 {addrs[k]}, i64 {width}, i32 {sp * 4 + access}, "
                     f"i32 {self.flat[m].line})",
                     f"  {b} = icmp eq ptr {p}, null",
                     f"  br i1 {b}, label %RX{n}_{k}, label %RF{n}_{k + 1}",
                     f"RX{n}_{k}:",
                     f"  %rc{n}_{k} = load i64, ptr %cnt",
                     f"  %rd{n}_{k} = add i64 %rc{n}_{k}, {m - start}",
                     f"  store i64 %rd{n}_{k}, ptr %cnt",
                     "  br label %fault",
                     f"RF{n}_{k + 1}:"]
        cold.append("  unreachable")  # a failed group check fails one of its accesses
        self.lines.extend(cold)
        self.lines.append(f"RO{n}:")
        self.prechecked.update(m for m, *_ in run)

    def _outside(self, addr: str, width: int, space: int) -> str:
        """Whether an access is outside its window or misaligned, as
        ``@shared_ptr``/``@local_ptr`` decide (:mod:`.blocks`)."""
        bias = 0 if space == SHARED else LOCAL_STACK_BASE
        stride = "%sstride" if space == SHARED else "%lstride"
        off, lim, rot, bad = self.new(), self.new(), self.new(), self.new()
        shift = width.bit_length() - 1
        self.emit(f"{off} = sub i64 {addr}, {bias}\n  {lim} = sub i64 {stride}, {width}\n"
                  f"  {rot} = call i64 @llvm.fshr.i64(i64 {off}, i64 {off}, i64 {shift})")
        slim = self.new()
        self.emit(f"{slim} = lshr i64 {lim}, {shift}\n  {bad} = icmp ugt i64 {rot}, {slim}")
        return bad

    def is_local(self, name: str) -> bool:
        return any(("local", name) in scope for scope in self.scopes)

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

    def _atomic(self, instr: nodes.Instruction, dest: nodes.Operand | None,
                a: nodes.Operand, srcs: list[nodes.Operand], op: str, t: str,
                space: int) -> None:
        """One thread's atomic, an LLVM ``atomicrmw``/``cmpxchg`` (relaxed,
        PTX's default order) where LLVM has the operation, so that blocks on
        several OS threads (:mod:`.cores`) lose no update; ``inc``/``dec`` are
        a plain load, update and store, exact while threads run one after
        another (such a kernel stays on one thread).  The update is the interpreter's
        (:func:`gpusafe.cpu.atomics.update_fn`); the final memory and the old
        values are the interpreter's whenever its lane order is the JIT's
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
               "min": "min" if signed else "umin", "max": "max" if signed else "umax"}
        if op in rmw and not (op in ("min", "max") and t in ("f32", "f64")):
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


_ARITHMETIC = {"mov", "add", "sub", "mul", "mad", "fma", "and", "or", "xor", "not", "shl",
               "shr", "setp", "selp", "cvt", "neg", "abs", "min", "max", "cvta"}
"""Instructions a run of checked accesses may hold besides them: they cannot
fault, suspend or touch memory (:meth:`MemoryLowering._run_accesses`)."""

_ATOMIC_OPS = {"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"}
_ATOMIC_QUALIFIERS = {"relaxed", "acquire", "release", "acq_rel", "sys", "gpu", "cta",
                      "cluster", "noftz"}
