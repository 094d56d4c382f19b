"""ALU instructions of the JIT's lowering: integer and float arithmetic,
logic, shifts, comparisons, selects and conversions, with the interpreter's
results (IEEE round-to-nearest, fma as one rounding, the GPU's canonical f32
NaN, PTX's clamped shift amounts, saturating float-to-int conversions)."""

from __future__ import annotations

from gpusafe_instrument import nodes

from ..memory import LOCAL_WINDOW, SHARED_WINDOW
from .values import (
    BITS,
    FCMP,
    ICMP,
    ICMP_ORDER,
    INT_ROUNDING,
    Values,
    llvm_type,
    split_type,
)

_SAME_TYPE = {"f32": {"ftz", "sat", *INT_ROUNDING}, "f64": {"sat", *INT_ROUNDING}}
"""Modifiers of a float-to-float ``cvt`` to its own type the JIT covers."""

_WINDOWS = {"global": 0, "shared": SHARED_WINDOW, "shared::cta": SHARED_WINDOW,
            "local": LOCAL_WINDOW, "const": 0}


class AluLowering(Values):
    """``op_<opcode>`` for each ALU instruction the slice covers."""

    def op_mov(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if mods or len(instr.operands) != 2:
            raise self.fail("form")
        d, s = instr.operands
        if isinstance(d, nodes.Vector) or isinstance(s, nodes.Vector):
            self.mov_vector(instr, t)  # :mod:`.bits`
            return
        self.write(d, t, self.read(s, t))

    def op_cvta(self, instr: nodes.Instruction) -> None:
        """Adds (``cvta``) or takes off (``cvta.to``) the interpreter's generic
        window of the state space, truncated to the destination's size."""
        mods, t = split_type(instr)
        to = "to" in mods
        spaces = [m for m in mods if m != "to"]
        if len(spaces) != 1 or spaces[0] not in _WINDOWS or BITS.get(t) not in (32, 64) \
                or t.startswith("f"):
            raise self.fail(f"cvta modifiers {mods}")
        d, s = instr.operands
        v = self.read(s, "u64")
        window = _WINDOWS[spaces[0]]
        if window:
            out = self.new()
            self.emit(f"{out} = {'sub' if to else 'add'} i64 {v}, {window}")
            v = out
        self.write(d, f"u{BITS[t]}", self.adapt(v, 64, BITS[t], False))

    def _arith_int(self, instr: nodes.Instruction, op: str, mods: list[str], t: str) -> None:
        if mods:
            raise self.fail(f"modifiers {mods}")
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        out = self.new()
        self.emit(f"{out} = {op} {llvm_type(t)} {va}, {vb}")
        self.write(d, t, out)

    def _arith_float(self, instr: nodes.Instruction, op: str, mods: list[str], t: str) -> None:
        if t == "f32" and (mods in (["rz"], ["rm"], ["rp"]) or "ftz" in mods):
            self.float_flushed(instr, op[1:], mods)  # :mod:`.floats`
            return
        if mods not in ([], ["rn"]):
            raise self.fail(f"float modifiers {mods}")
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        out = self.new()
        self.emit(f"{out} = {op} {llvm_type(t)} {va}, {vb}")
        self.write(d, t, self.canon(out, t))

    def op_add(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if t in ("f32", "f64"):
            self._arith_float(instr, "fadd", mods, t)
        else:
            self._arith_int(instr, "add", mods, t)

    def op_sub(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if t in ("f32", "f64"):
            self._arith_float(instr, "fsub", mods, t)
        else:
            self._arith_int(instr, "sub", mods, t)

    def _wide(self, instr: nodes.Instruction, t: str, mode: str, a: str, b: str) -> tuple[str, str]:
        """The product of ``a`` and ``b`` for mul/mad ``.mode`` and its PTX type."""
        w = BITS[t]
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
            if wide_t not in BITS:
                raise self.fail("wide of a 64-bit type")
            return prod, wide_t
        hi = self.new()
        self.emit(f"{hi} = lshr i{2 * w} {prod}, {w}")
        return self.adapt(hi, 2 * w, w, False), t

    def op_mul(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
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
        self.emit(f"{out} = call {llvm_type(t)} @llvm.fma.{t}({llvm_type(t)} {va}, {llvm_type(t)} {vb}, "
                  f"{llvm_type(t)} {vc})")
        self.write(d, t, self.canon(out, t))

    def op_fma(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if t == "f32" and (mods in (["rz"], ["rm"], ["rp"]) or "ftz" in mods):
            self.float_flushed(instr, "fma", mods)  # :mod:`.floats`
            return
        if mods != ["rn"] or t not in ("f32", "f64"):
            raise self.fail(f"modifiers {mods}")
        self._fma(instr, t)

    def op_mad(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if t == "f32" and "ftz" in mods:
            self.float_flushed(instr, "fma", mods)
            return
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
        self.emit(f"{out} = add {llvm_type(pt)} {prod}, {vc}")
        self.write(d, pt, out)

    def _logic(self, instr: nodes.Instruction, op: str) -> None:
        mods, t = split_type(instr)
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
        mods, t = split_type(instr)
        if mods or t.startswith("f"):
            raise self.fail("form")
        d, a = instr.operands
        out = self.new()
        self.emit(f"{out} = xor {llvm_type(t)} {self.read(a, t)}, -1" if t != "pred"
                  else f"{out} = xor i1 {self.read(a, t)}, true")
        self.write(d, t, out)

    def _shift(self, instr: nodes.Instruction, op: str) -> None:
        """The amount is a u32 compared with the width before it is narrowed
        (``shr.u16 r, a, 65536`` gives 0, as in the interpreter): amounts of
        the width or more give 0, or the sign fill for ``shr.s``."""
        mods, t = split_type(instr)
        if mods or t.startswith("f") or t == "pred" or BITS[t] < 16:
            raise self.fail("form")
        d, a, b = instr.operands
        w = BITS[t]
        va = self.read(a, t)
        amount32 = self.read(b, "u32")
        big = self.new()
        self.emit(f"{big} = icmp uge i32 {amount32}, {w}")
        clamped = self.new()
        self.emit(f"{clamped} = select i1 {big}, i32 {w - 1}, i32 {amount32}")
        amount = self.adapt(clamped, 32, w, False) if w != 32 else clamped
        out = self.new()
        if op == "ashr":
            self.emit(f"{out} = ashr i{w} {va}, {amount}")
        else:
            raw = self.new()
            self.emit(f"{raw} = {op} i{w} {va}, {amount}")
            self.emit(f"{out} = select i1 {big}, i{w} 0, i{w} {raw}")
        self.write(d, t, out)

    def op_shl(self, instr: nodes.Instruction) -> None:
        self._shift(instr, "shl")

    def op_shr(self, instr: nodes.Instruction) -> None:
        _, t = split_type(instr)
        self._shift(instr, "ashr" if t.startswith("s") else "lshr")

    def _minmax(self, instr: nodes.Instruction, pick: str) -> None:
        mods, t = split_type(instr)
        if t.startswith("f"):
            self.float_minmax(instr, pick == "lt")  # :mod:`.floats`
            return
        if mods or t[0] not in "su" or t == "pred":
            raise self.fail("only integer min/max")
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        c = self.new()
        self.emit(f"{c} = icmp {t[0]}{pick} {llvm_type(t)} {va}, {vb}")
        out = self.new()
        self.emit(f"{out} = select i1 {c}, {llvm_type(t)} {va}, {llvm_type(t)} {vb}")
        self.write(d, t, out)

    def op_min(self, instr: nodes.Instruction) -> None:
        self._minmax(instr, "lt")

    def op_max(self, instr: nodes.Instruction) -> None:
        self._minmax(instr, "gt")

    def op_setp(self, instr: nodes.Instruction) -> None:
        """``setp.cmp[.bop].t p[|q], a, b[, {!}c]``: p = t bop c, q = !t bop c
        (without bop: p = t, q = !t)."""
        half = self.half_compare(instr)  # f16/bf16 operands as f32: :mod:`.halves`
        if half is not None:
            va, vb, mods = half
            t, ftz = "f32", False
        else:
            mods, t = split_type(instr)
            ftz = "ftz" in mods and t == "f32"  # the operands flushed, as the interpreter's
            mods = [m for m in mods if m != "ftz"] if ftz else mods
        bop = mods[1] if len(mods) == 2 else None
        if len(mods) not in (1, 2) or bop not in (None, "and", "or", "xor") \
                or len(instr.operands) != (4 if bop else 3):
            raise self.fail(f"form {mods}")
        cmp = mods[0]
        d = instr.operands[0]
        if half is None:
            va, vb = self.read(instr.operands[1], t), self.read(instr.operands[2], t)
        if ftz:
            va, vb = self.flush_f32(va), self.flush_f32(vb)
        out = self.new()
        if t in ("f32", "f64"):
            if cmp not in FCMP:
                raise self.fail(f"compare {cmp}")
            self.emit(f"{out} = fcmp {FCMP[cmp]} {llvm_type(t)} {va}, {vb}")
        elif cmp in ICMP:
            self.emit(f"{out} = icmp {ICMP[cmp]} {llvm_type(t)} {va}, {vb}")
        elif cmp in ICMP_ORDER and t[0] in "su":
            self.emit(f"{out} = icmp {t[0]}{ICMP_ORDER[cmp]} {llvm_type(t)} {va}, {vb}")
        else:
            raise self.fail(f"compare {cmp}.{t}")
        inverse = self.new()
        self.emit(f"{inverse} = xor i1 {out}, true")
        results = [out, inverse]
        if bop:
            c = self.read(instr.operands[3], "pred")
            for k, v in enumerate(results):
                combined = self.new()
                self.emit(f"{combined} = {bop} i1 {v}, {c}")
                results[k] = combined
        if isinstance(d, nodes.PredicatePair):
            self.write(d.first, "pred", results[0])
            self.write(d.second, "pred", results[1])
        else:
            self.write(d, "pred", results[0])

    def op_selp(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if mods:
            raise self.fail("form")
        d, a, b, c = instr.operands
        va, vb, vc = self.read(a, t), self.read(b, t), self.read(c, "pred")
        out = self.new()
        self.emit(f"{out} = select i1 {vc}, {llvm_type(t)} {va}, {llvm_type(t)} {vb}")
        self.write(d, t, out)

    def op_cvt(self, instr: nodes.Instruction) -> None:
        mods = list(instr.modifiers)
        types = [m for m in mods if m in BITS]
        rest = [m for m in mods if m not in BITS]
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
            w_s, w_d = BITS[st], BITS[dt]
            self.write(d, dt, self.adapt(v, w_s, w_d, st.startswith("s")))
            return
        if df and not sf:
            if len(rest) == 1 and rest[0] in ("rz", "rm", "rp"):
                self.write(d, dt, self.int_to_float_directed(v, st, dt, rest[0]))  # .floats
                return
            if rest != ["rn"]:
                raise self.fail(f"modifiers {rest}")
            op = "sitofp" if st.startswith("s") else "uitofp"
            self.emit(f"{out} = {op} {llvm_type(st)} {v} to {llvm_type(dt)}")
        elif sf and not df:
            if len(rest) != 1 or rest[0] not in INT_ROUNDING:
                raise self.fail(f"modifiers {rest}")
            if rest[0] != "rzi":  # rounded in the source type: exact, then converted
                fn = f"llvm.{INT_ROUNDING[rest[0]]}.{llvm_type(st)}"
                rounded = self.new()
                self.emit(f"{rounded} = call {llvm_type(st)} @{fn}({llvm_type(st)} {v})")
                self.intrinsics.add(f"declare {llvm_type(st)} @{fn}({llvm_type(st)})")
                v = rounded
            sign = "si" if dt.startswith("s") else "ui"
            self.emit(f"{out} = call {llvm_type(dt)} @llvm.fpto{sign}.sat.{llvm_type(dt)}.{llvm_type(st)}"
                      f"({llvm_type(st)} {v})")
            self.intrinsics.add(f"declare {llvm_type(dt)} @llvm.fpto{sign}.sat.{llvm_type(dt)}.{llvm_type(st)}"
                                f"({llvm_type(st)})")
        elif dt == st and rest and set(rest) <= _SAME_TYPE[dt] \
                and sum(m in INT_ROUNDING for m in rest) <= 1:
            out = self.float_to_float(v, dt, rest)  # :mod:`.floats`
        elif dt == "f64" and st == "f32" and not rest:
            self.emit(f"{out} = fpext float {v} to double")
        elif dt == "f32" and st == "f64" and rest == ["rn"]:
            self.emit(f"{out} = fptrunc double {v} to float")
            out = self.canon(out, "f32")
        else:
            raise self.fail(f"conversion {rest}")
        self.write(d, dt, out)

    def _divide(self, instr: nodes.Instruction, rem: bool) -> None:
        """Integer div/rem as the interpreter has them: on magnitudes, truncating
        (so INT_MIN / -1 is INT_MIN, with no LLVM poison), all ones for a zero
        divisor."""
        mods, t = split_type(instr)
        if not rem and t == "f32" and ("approx" in mods or "ftz" in mods):
            self.float_divide(instr, mods)  # :mod:`.floats`
            return
        if not rem and t in ("f32", "f64") and mods in (["rn"], ["full"] if t == "f32" else []):
            # correctly rounded (the interpreter computes div.full so too)
            self._arith_float(instr, "fdiv", [], t)
            return
        if mods or t[0] not in "su":
            raise self.fail("only integer div/rem, float div.rn and div.full.f32")
        d, a, b = instr.operands
        ty = llvm_type(t)
        va, vb = self.read(a, t), self.read(b, t)
        zero = self.new()
        self.emit(f"{zero} = icmp eq {ty} {vb}, 0")
        na = nb = None
        if t[0] == "s":
            mags = []
            for v in (va, vb):
                neg, flipped, mag = self.new(), self.new(), self.new()
                self.emit(f"{neg} = icmp slt {ty} {v}, 0")
                self.emit(f"{flipped} = sub {ty} 0, {v}")
                self.emit(f"{mag} = select i1 {neg}, {ty} {flipped}, {ty} {v}")
                mags.append((neg, mag))
            (na, va), (nb, vb) = mags
        safe = self.new()
        self.emit(f"{safe} = select i1 {zero}, {ty} 1, {ty} {vb}")
        r = self.new()
        self.emit(f"{r} = {'urem' if rem else 'udiv'} {ty} {va}, {safe}")
        if na is not None:
            neg = na
            if not rem:
                neg = self.new()
                self.emit(f"{neg} = xor i1 {na}, {nb}")
            flipped, signed = self.new(), self.new()
            self.emit(f"{flipped} = sub {ty} 0, {r}")
            self.emit(f"{signed} = select i1 {neg}, {ty} {flipped}, {ty} {r}")
            r = signed
        out = self.new()
        self.emit(f"{out} = select i1 {zero}, {ty} -1, {ty} {r}")
        self.write(d, t, out)

    def op_div(self, instr: nodes.Instruction) -> None:
        self._divide(instr, rem=False)

    def op_rem(self, instr: nodes.Instruction) -> None:
        self._divide(instr, rem=True)

    def op_shf(self, instr: nodes.Instruction) -> None:
        """Funnel shift of ``b:a`` by ``c`` (``.wrap``: mod 32, ``.clamp``: at most
        32), the interpreter's 64-bit formulation."""
        mods, t = split_type(instr)
        direction = [m for m in mods if m in ("l", "r")]
        mode = [m for m in mods if m in ("wrap", "clamp")]
        if t != "b32" or len(direction) != 1 or len(mode) != 1 or len(mods) != 2:
            raise self.fail(f"modifiers {mods}")
        d, a, b, c = instr.operands
        va, vb, vc = self.read(a, "b32"), self.read(b, "b32"), self.read(c, "u32")
        lo, hi, v, n = (self.new() for _ in range(4))
        self.emit(f"{lo} = zext i32 {va} to i64\n  {hi} = zext i32 {vb} to i64")
        hs = self.new()
        self.emit(f"{hs} = shl i64 {hi}, 32\n  {v} = or i64 {hs}, {lo}")
        if mode[0] == "clamp":
            self.intrinsics.add("declare i32 @llvm.umin.i32(i32, i32)")
            self.emit(f"{n} = call i32 @llvm.umin.i32(i32 {vc}, i32 32)")
        else:
            self.emit(f"{n} = and i32 {vc}, 31")
        sh, out = self.new(), self.new()
        self.emit(f"{sh} = zext i32 {n} to i64")
        if direction[0] == "l":
            moved = self.new()
            self.emit(f"{moved} = shl i64 {v}, {sh}\n  {out} = lshr i64 {moved}, 32")
        else:
            self.emit(f"{out} = lshr i64 {v}, {sh}")
        self.write(d, "b32", self.adapt(out, 64, 32, False))
