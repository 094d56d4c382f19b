"""PTX kernel -> LLVM IR (text), one thread per call of ``@thread``.

Registers are ``alloca`` slots holding their bits as integers (predicates as
``i1``); LLVM's optimizer promotes them.  Every PTX instruction becomes its own
basic block, so labels and guards need no analysis.  Global and generic
accesses go through ``@resolve`` (engine-provided IR: a binary search of the
arena's segment table, a Python callback for everything else).  Whatever this
slice does not cover raises :class:`Unsupported` with the PTX line, and the
launch runs on the interpreter.
"""

from __future__ import annotations

from gpusafe_instrument import nodes
from gpusafe_instrument.query import param_layout

_BITS = {"pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16,
         "b32": 32, "u32": 32, "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64}
_QUALIFIERS = {"weak", "volatile", "relaxed", "nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt",
               "gpu", "sys", "cta", "uni"}
_SPECIAL = {"%tid": 0, "%ntid": 3, "%ctaid": 6, "%nctaid": 9}
_AXES = {"x": 0, "y": 1, "z": 2}
_ICMP = {"eq": "eq", "ne": "ne", "lo": "ult", "ls": "ule", "hi": "ugt", "hs": "uge"}
_ICMP_ORDER = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_FCMP = {"eq": "oeq", "ne": "one", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge",
         "equ": "ueq", "neu": "une", "ltu": "ult", "leu": "ule", "gtu": "ugt", "geu": "uge",
         "num": "ord", "nan": "uno"}
CANONICAL_NAN_F32 = 0x7FFFFFFF

ACCESS_READ, ACCESS_WRITE, ACCESS_ATOMIC = 0, 1, 2
GENERIC, GLOBAL = 0, 1


class Unsupported(Exception):
    """A kernel the JIT does not compile: why, and the PTX line of the cause."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason, line)
        self.reason = reason
        self.line = line

    def __str__(self) -> str:
        return f"{self.reason} (PTX line {self.line})" if self.line else self.reason


def _ty(t: str) -> str:
    if t == "f32":
        return "float"
    if t == "f64":
        return "double"
    return f"i{_BITS[t]}"


def _itype(t: str) -> str:
    return f"i{_BITS[t]}"


def _split(instr: nodes.Instruction) -> tuple[list[str], str]:
    """Modifiers without the type ones, and the last type modifier."""
    mods = list(instr.modifiers)
    types = [m for m in mods if m in _BITS]
    if not types:
        raise Unsupported(f"{instr.opcode}: no type this slice knows", instr.line)
    return [m for m in mods if m not in _BITS], types[-1]


class _Lowerer:
    def __init__(self, function: nodes.Function) -> None:
        self.function = function
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.tmp = 0
        self.scopes: list[dict[str, tuple[str, int]]] = [{}]
        self.labels: dict[str, int] = {}
        layout, _ = param_layout(function.params)
        self.kparams = {slot.name: slot.offset for slot in layout}
        self.instr: nodes.Instruction | None = None
        self.intrinsics: set[str] = set()

    # -- helpers --------------------------------------------------------------

    def fail(self, why: str) -> Unsupported:
        line = self.instr.line if self.instr is not None else self.function.line
        return Unsupported(f"{self.instr.opcode if self.instr else 'kernel'}: {why}", line)

    def new(self) -> str:
        self.tmp += 1
        return f"%t{self.tmp}"

    def emit(self, text: str) -> None:
        self.lines.append("  " + text)

    def declare(self, name: str, t: str) -> None:
        if t not in _BITS:
            raise Unsupported(f"registers of type .{t}", self.function.line)
        slot = f"%v{len(self.allocas)}"
        width = _BITS[t]
        self.allocas.append(f"  {slot} = alloca i{width}\n  store i{width} 0, ptr {slot}")
        self.scopes[-1][name] = (slot, width)

    def register(self, name: str) -> tuple[str, int]:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.fail(f"register {name}")

    def adapt(self, value: str, have: int, want: int, signed: bool) -> str:
        if have == want:
            return value
        out = self.new()
        if have > want:
            self.emit(f"{out} = trunc i{have} {value} to i{want}")
        else:
            self.emit(f"{out} = {'sext' if signed else 'zext'} i{have} {value} to i{want}")
        return out

    def to_type(self, bits_value: str, t: str) -> str:
        if t in ("f32", "f64"):
            out = self.new()
            self.emit(f"{out} = bitcast {_itype(t)} {bits_value} to {_ty(t)}")
            return out
        return bits_value

    def read(self, operand: nodes.Operand, t: str) -> str:
        """``operand`` as an LLVM value of PTX type ``t``."""
        width = _BITS[t]
        if isinstance(operand, nodes.Negated):
            v = self.read(operand.operand, "pred")
            out = self.new()
            self.emit(f"{out} = xor i1 {v}, true")
            return out
        if isinstance(operand, nodes.Immediate):
            return self.immediate(operand, t)
        if not isinstance(operand, nodes.Register):
            raise self.fail(f"operand {operand}")
        name = operand.name
        head, _, axis = name.partition(".")
        if head in _SPECIAL and axis in _AXES:
            if t == "pred":
                raise self.fail("special register as predicate")
            v = self.adapt(f"%sr{_SPECIAL[head] + _AXES[axis]}", 32, width, False)
            return self.to_type(v, t)
        slot, have = self.register(name)
        if (have == 1) != (t == "pred"):
            raise self.fail(f"register {name} used as .{t}")
        v = self.new()
        self.emit(f"{v} = load i{have}, ptr {slot}")
        v = self.adapt(v, have, width, t.startswith("s"))
        return self.to_type(v, t)

    def immediate(self, imm: nodes.Immediate, t: str) -> str:
        text = imm.text
        neg = text.startswith("-")
        body = text[1:] if neg else text
        if t in ("f32", "f64"):
            if body[:2] in ("0f", "0F") and t == "f32":
                bits = int(body[2:], 16) ^ (0x8000_0000 if neg else 0)
            elif body[:2] in ("0d", "0D") and t == "f64":
                bits = int(body[2:], 16) ^ (1 << 63 if neg else 0)
            else:
                raise self.fail(f"immediate {text} for .{t}")
            out = self.new()
            self.emit(f"{out} = bitcast {_itype(t)} {self._signed(bits, _BITS[t])} to {_ty(t)}")
            return out
        value = imm.value
        if isinstance(value, float):
            raise self.fail(f"float immediate {text} for .{t}")
        width = _BITS[t]
        if t == "pred":
            return "true" if value else "false"
        return str(self._signed(value & ((1 << width) - 1), width))

    @staticmethod
    def _signed(value: int, width: int) -> int:
        value &= (1 << width) - 1
        return value - (1 << width) if value >> (width - 1) else value

    def write(self, operand: nodes.Operand, t: str, value: str) -> None:
        if isinstance(operand, nodes.Sink):
            return
        if not isinstance(operand, nodes.Register):
            raise self.fail(f"destination {operand}")
        slot, have = self.register(operand.name)
        if (have == 1) != (t == "pred"):
            raise self.fail(f"register {operand.name} written as .{t}")
        if t in ("f32", "f64"):
            bits = self.new()
            self.emit(f"{bits} = bitcast {_ty(t)} {value} to {_itype(t)}")
            value = bits
        value = self.adapt(value, _BITS[t], have, t.startswith("s"))
        self.emit(f"store i{have} {value}, ptr {slot}")

    def canon(self, value: str, t: str) -> str:
        """The GPU's canonical NaN for f32 results, as the interpreter gives."""
        if t != "f32":
            return value
        isnan = self.new()
        self.emit(f"{isnan} = fcmp uno float {value}, 0.0")
        nan = self.new()
        self.emit(f"{nan} = bitcast i32 {CANONICAL_NAN_F32} to float")
        out = self.new()
        self.emit(f"{out} = select i1 {isnan}, float {nan}, float {value}")
        return out

    # -- structure ------------------------------------------------------------

    def flatten(self, statements: list, out: list) -> None:
        for s in statements:
            if isinstance(s, nodes.Instruction):
                out.append(s)
            elif isinstance(s, nodes.Label):
                self.labels[s.name] = len(out)
            elif isinstance(s, nodes.RegisterDecl):
                if s.vector:
                    raise Unsupported("vector registers", s.line)
                for name in s.registers():
                    self.declare(name, s.type.lstrip("."))
            elif isinstance(s, nodes.Block):
                raise Unsupported("nested { } scopes (call sequences)", s.statements[0].line
                                  if s.statements else None)
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
            if p.type.lstrip(".") not in _BITS and p.type.lstrip(".") != "b8":
                raise Unsupported(f"kernel parameter type {p.type}", f.line)
        flat: list[nodes.Instruction] = []
        self.flatten(f.body or [], flat)
        n = len(flat)
        for i, instr in enumerate(flat):
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
        if len(ops) != 1 or not isinstance(ops[0], nodes.Symbol) or ops[0].name not in self.labels:
            raise self.fail("branch target")
        return f"%L{self.labels[ops[0].name]}"

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

    def op_mov(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if mods or len(instr.operands) != 2:
            raise self.fail("form")
        d, s = instr.operands
        self.write(d, t, self.read(s, t))

    def op_cvta(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if mods not in (["to", "global"], ["global"]) or t not in ("u64", "b64", "s64"):
            raise self.fail("only cvta(.to).global.u64")
        d, s = instr.operands
        self.write(d, t, self.read(s, t))

    def _arith_int(self, instr: nodes.Instruction, op: str, mods: list[str], t: str) -> None:
        if mods:
            raise self.fail(f"modifiers {mods}")
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        out = self.new()
        self.emit(f"{out} = {op} {_ty(t)} {va}, {vb}")
        self.write(d, t, out)

    def _arith_float(self, instr: nodes.Instruction, op: str, mods: list[str], t: str) -> None:
        if mods not in ([], ["rn"]):
            raise self.fail(f"float modifiers {mods}")
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        out = self.new()
        self.emit(f"{out} = {op} {_ty(t)} {va}, {vb}")
        self.write(d, t, self.canon(out, t))

    def op_add(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if t in ("f32", "f64"):
            self._arith_float(instr, "fadd", mods, t)
        else:
            self._arith_int(instr, "add", mods, t)

    def op_sub(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if t in ("f32", "f64"):
            self._arith_float(instr, "fsub", mods, t)
        else:
            self._arith_int(instr, "sub", mods, t)

    def _wide(self, instr: nodes.Instruction, t: str, mode: str, a: str, b: str) -> tuple[str, str]:
        """The product of ``a`` and ``b`` for mul/mad ``.mode`` and its PTX type."""
        w = _BITS[t]
        signed = t.startswith("s")
        if mode == "lo":
            out = self.new()
            self.emit(f"{out} = mul i{w} {a}, {b}")
            return out, t
        ea = self.adapt(a, w, 2 * w, signed)
        eb = self.adapt(b, w, 2 * w, signed)
        prod = self.new()
        self.emit(f"{prod} = mul i{2 * w} {ea}, {eb}")
        wide_t = f"{t[0]}{2 * w}"
        if mode == "wide":
            if wide_t not in _BITS:
                raise self.fail("wide of a 64-bit type")
            return prod, wide_t
        hi = self.new()
        self.emit(f"{hi} = lshr i{2 * w} {prod}, {w}")
        return self.adapt(hi, 2 * w, w, False), t

    def op_mul(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if t in ("f32", "f64"):
            self._arith_float(instr, "fmul", mods, t)
            return
        if len(mods) != 1 or mods[0] not in ("lo", "hi", "wide"):
            raise self.fail(f"modifiers {mods}")
        d, a, b = instr.operands
        prod, pt = self._wide(instr, t, mods[0], self.read(a, t), self.read(b, t))
        self.write(d, pt, prod)

    def _fma(self, instr: nodes.Instruction, t: str) -> None:
        d, a, b, c = instr.operands
        va, vb, vc = (self.read(x, t) for x in (a, b, c))
        out = self.new()
        self.emit(f"{out} = call {_ty(t)} @llvm.fma.{t}({_ty(t)} {va}, {_ty(t)} {vb}, "
                  f"{_ty(t)} {vc})")
        self.write(d, t, self.canon(out, t))

    def op_fma(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if mods != ["rn"] or t not in ("f32", "f64"):
            raise self.fail(f"modifiers {mods}")
        self._fma(instr, t)

    def op_mad(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if t in ("f32", "f64"):
            if mods not in ([], ["rn"]):
                raise self.fail(f"modifiers {mods}")
            self._fma(instr, t)
            return
        if len(mods) != 1 or mods[0] not in ("lo", "hi", "wide"):
            raise self.fail(f"modifiers {mods}")
        d, a, b, c = instr.operands
        prod, pt = self._wide(instr, t, mods[0], self.read(a, t), self.read(b, t))
        vc = self.read(c, pt)
        out = self.new()
        self.emit(f"{out} = add {_ty(pt)} {prod}, {vc}")
        self.write(d, pt, out)

    def _logic(self, instr: nodes.Instruction, op: str) -> None:
        mods, t = _split(instr)
        if mods or t.startswith("f"):
            raise self.fail("form")
        self._arith_int(instr, op, [], t)

    def op_and(self, instr: nodes.Instruction) -> None:
        self._logic(instr, "and")

    def op_or(self, instr: nodes.Instruction) -> None:
        self._logic(instr, "or")

    def op_xor(self, instr: nodes.Instruction) -> None:
        self._logic(instr, "xor")

    def op_not(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if mods or t.startswith("f"):
            raise self.fail("form")
        d, a = instr.operands
        out = self.new()
        self.emit(f"{out} = xor {_ty(t)} {self.read(a, t)}, -1" if t != "pred"
                  else f"{out} = xor i1 {self.read(a, t)}, true")
        self.write(d, t, out)

    def _shift(self, instr: nodes.Instruction, op: str) -> None:
        mods, t = _split(instr)
        if mods or t.startswith("f") or t == "pred":
            raise self.fail("form")
        d, a, b = instr.operands
        w = _BITS[t]
        va = self.read(a, t)
        amount = self.adapt(self.read(b, "u32"), 32, w, False) if w != 32 else self.read(b, "u32")
        if w < 32:
            raise self.fail("shift of a sub-32-bit type")
        big = self.new()
        self.emit(f"{big} = icmp uge i{w} {amount}, {w}")
        out = self.new()
        if op == "ashr":
            clamped = self.new()
            self.emit(f"{clamped} = select i1 {big}, i{w} {w - 1}, i{w} {amount}")
            self.emit(f"{out} = ashr i{w} {va}, {clamped}")
        else:
            raw = self.new()
            self.emit(f"{raw} = {op} i{w} {va}, {amount}")
            self.emit(f"{out} = select i1 {big}, i{w} 0, i{w} {raw}")
        self.write(d, t, out)

    def op_shl(self, instr: nodes.Instruction) -> None:
        self._shift(instr, "shl")

    def op_shr(self, instr: nodes.Instruction) -> None:
        _, t = _split(instr)
        self._shift(instr, "ashr" if t.startswith("s") else "lshr")

    def op_neg(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if mods or not t.startswith("s"):
            raise self.fail("only integer neg")
        d, a = instr.operands
        out = self.new()
        self.emit(f"{out} = sub {_ty(t)} 0, {self.read(a, t)}")
        self.write(d, t, out)

    def _minmax(self, instr: nodes.Instruction, pick: str) -> None:
        mods, t = _split(instr)
        if mods or t[0] not in "su" or t == "pred":
            raise self.fail("only integer min/max")
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        c = self.new()
        self.emit(f"{c} = icmp {t[0]}{pick} {_ty(t)} {va}, {vb}")
        out = self.new()
        self.emit(f"{out} = select i1 {c}, {_ty(t)} {va}, {_ty(t)} {vb}")
        self.write(d, t, out)

    def op_min(self, instr: nodes.Instruction) -> None:
        self._minmax(instr, "lt")

    def op_max(self, instr: nodes.Instruction) -> None:
        self._minmax(instr, "gt")

    def op_setp(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if len(mods) != 1 or len(instr.operands) != 3:
            raise self.fail(f"form {mods}")
        cmp = mods[0]
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        out = self.new()
        if t in ("f32", "f64"):
            if cmp not in _FCMP:
                raise self.fail(f"compare {cmp}")
            self.emit(f"{out} = fcmp {_FCMP[cmp]} {_ty(t)} {va}, {vb}")
        elif cmp in _ICMP:
            self.emit(f"{out} = icmp {_ICMP[cmp]} {_ty(t)} {va}, {vb}")
        elif cmp in _ICMP_ORDER and t[0] in "su":
            self.emit(f"{out} = icmp {t[0]}{_ICMP_ORDER[cmp]} {_ty(t)} {va}, {vb}")
        else:
            raise self.fail(f"compare {cmp}.{t}")
        self.write(d, "pred", out)

    def op_selp(self, instr: nodes.Instruction) -> None:
        mods, t = _split(instr)
        if mods:
            raise self.fail("form")
        d, a, b, c = instr.operands
        va, vb, vc = self.read(a, t), self.read(b, t), self.read(c, "pred")
        out = self.new()
        self.emit(f"{out} = select i1 {vc}, {_ty(t)} {va}, {_ty(t)} {vb}")
        self.write(d, t, out)

    def op_cvt(self, instr: nodes.Instruction) -> None:
        mods = list(instr.modifiers)
        types = [m for m in mods if m in _BITS]
        rest = [m for m in mods if m not in _BITS]
        if len(types) != 2:
            raise self.fail("form")
        dt, st = types
        d, s = instr.operands
        v = self.read(s, st)
        df, sf = dt in ("f32", "f64"), st in ("f32", "f64")
        out = self.new()
        if not df and not sf:
            if rest:
                raise self.fail(f"modifiers {rest}")
            w_s, w_d = _BITS[st], _BITS[dt]
            self.write(d, dt, self.adapt(v, w_s, w_d, st.startswith("s")))
            return
        if df and not sf:
            if rest != ["rn"]:
                raise self.fail(f"modifiers {rest}")
            op = "sitofp" if st.startswith("s") else "uitofp"
            self.emit(f"{out} = {op} {_ty(st)} {v} to {_ty(dt)}")
        elif sf and not df:
            if rest != ["rzi"]:
                raise self.fail(f"modifiers {rest}")
            sign = "si" if dt.startswith("s") else "ui"
            self.emit(f"{out} = call {_ty(dt)} @llvm.fpto{sign}.sat.{_ty(dt)}.{_ty(st)}"
                      f"({_ty(st)} {v})")
            self.intrinsics.add(f"declare {_ty(dt)} @llvm.fpto{sign}.sat.{_ty(dt)}.{_ty(st)}"
                                f"({_ty(st)})")
        elif dt == "f64" and st == "f32" and not rest:
            self.emit(f"{out} = fpext float {v} to double")
        elif dt == "f32" and st == "f64" and rest == ["rn"]:
            self.emit(f"{out} = fptrunc double {v} to float")
            out = self.canon(out, "f32")
        else:
            raise self.fail(f"conversion {rest}")
        self.write(d, dt, out)

    # -- memory ---------------------------------------------------------------

    def _memory(self, instr: nodes.Instruction) -> tuple[int, int, str, list[str]]:
        """(space, vector length, element type, remaining modifiers)."""
        mods, t = _split(instr)
        space = GENERIC
        count = 1
        rest = []
        for m in mods:
            if m == "global":
                space = GLOBAL
            elif m in ("v2", "v4"):
                count = int(m[1])
            elif m in _QUALIFIERS or m.startswith("L1::") or m.startswith("L2::"):
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
        self.emit(f"{ptr} = call ptr @resolve(ptr %ctx, i64 {addr}, i64 {width}, "
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
            _, t = _split(instr)
            rest = [m for m in mods if m not in _BITS and m != "param"]
            if rest or not isinstance(a, nodes.Address) or not isinstance(a.base, nodes.Symbol) \
                    or a.base.name not in self.kparams:
                raise self.fail("only scalar loads of kernel parameters by name")
            p = self.new()
            self.emit(f"{p} = getelementptr i8, ptr %params, i64 "
                      f"{self.kparams[a.base.name] + a.offset}")
            v = self.new()
            self.emit(f"{v} = load {_ty(t)}, ptr {p}, align 1")
            self.write(d, t, v)
            return
        space, count, t, rest = self._memory(instr)
        if rest or t == "pred":
            raise self.fail(f"modifiers {rest}")
        size = _BITS[t] // 8
        ptr = self.address(a, size * count, space, ACCESS_READ)
        dests = d.items if isinstance(d, nodes.Vector) else (d,)
        if len(dests) != count:
            raise self.fail("vector length")
        for k, dst in enumerate(dests):
            v = self.new()
            self.emit(f"{v} = load {_ty(t)}, ptr {self.element(ptr, k, size)}, align 1")
            self.write(dst, t, v)

    def op_st(self, instr: nodes.Instruction) -> None:
        space, count, t, rest = self._memory(instr)
        if rest or t == "pred":
            raise self.fail(f"modifiers {rest}")
        a, s = instr.operands
        size = _BITS[t] // 8
        srcs = s.items if isinstance(s, nodes.Vector) else (s,)
        if len(srcs) != count:
            raise self.fail("vector length")
        values = [self.read(x, t) for x in srcs]
        ptr = self.address(a, size * count, space, ACCESS_WRITE)
        for k, v in enumerate(values):
            self.emit(f"store {_ty(t)} {v}, ptr {self.element(ptr, k, size)}, align 1")

    def op_atom(self, instr: nodes.Instruction) -> None:
        """``atom.add`` on integers: threads run one after another, so a plain
        load, add and store is the sequential result the interpreter gives."""
        space, count, t, rest = self._memory(instr)
        if rest != ["add"] or count != 1 or t not in ("u32", "s32", "u64"):
            raise self.fail(f"only integer atom.add ({rest})")
        d, a, b = instr.operands
        vb = self.read(b, t)
        ptr = self.address(a, _BITS[t] // 8, space, ACCESS_ATOMIC)
        old = self.new()
        self.emit(f"{old} = load {_ty(t)}, ptr {ptr}, align 1")
        new = self.new()
        self.emit(f"{new} = add {_ty(t)} {old}, {vb}")
        self.emit(f"store {_ty(t)} {new}, ptr {ptr}, align 1")
        self.write(d, t, old)


_FMA_DECLS = ("declare float @llvm.fma.f32(float, float, float)\n"
              "declare double @llvm.fma.f64(double, double, double)\n")


def lower_kernel(function: nodes.Function) -> str:
    """The LLVM IR of ``@thread`` for ``function`` (needs ``@resolve`` from the
    engine).  Raises :class:`Unsupported` for anything outside the slice."""
    lowerer = _Lowerer(function)
    body = lowerer.lower()
    return _FMA_DECLS + "\n".join(sorted(lowerer.intrinsics)) + "\n" + body

