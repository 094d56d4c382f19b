"""Unary and bit-counting instructions of the JIT's lowering: ``neg``/``abs``,
``popc``/``clz``/``brev``/``bfind``, ``sad``, correctly rounded ``sqrt`` and
``rcp``, ``copysign`` and ``testp``, each with the interpreter's results
(:mod:`gpusafe.cpu.alu`)."""

from __future__ import annotations

from gpusafe_instrument import nodes

from .values import BITS, Values, llvm_type, split_type


class UnaryLowering(Values):
    """``op_<opcode>`` for the instructions above (a mixin of the lowering)."""

    def op_neg(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if t in ("f32", "f64") and mods in ([], ["ftz"] if t == "f32" else []):
            self._sign_bit(instr, t, "xor", bool(mods))
            return
        if mods or not t.startswith("s"):
            raise self.fail("only integer neg and float neg")
        d, a = instr.operands
        out = self.new()
        self.emit(f"{out} = sub {llvm_type(t)} 0, {self.read(a, t)}")
        self.write(d, t, out)

    def _count_bits(self, instr: nodes.Instruction, intrinsic: str) -> None:
        """``popc``/``clz`` of a b32/b64: a u32 (``clz`` of 0 is the width)."""
        mods, t = split_type(instr)
        if mods or t not in ("b32", "b64"):
            raise self.fail("form")
        d, a = instr.operands
        w = BITS[t]
        self.intrinsics.add(f"declare i{w} @llvm.{intrinsic}.i{w}(i{w}, i1)"
                            if intrinsic == "ctlz" else
                            f"declare i{w} @llvm.{intrinsic}.i{w}(i{w})")
        out = self.new()
        flag = ", i1 false" if intrinsic == "ctlz" else ""
        self.emit(f"{out} = call i{w} @llvm.{intrinsic}.i{w}(i{w} {self.read(a, t)}{flag})")
        self.write(d, "u32", self.adapt(out, w, 32, False))

    def op_popc(self, instr: nodes.Instruction) -> None:
        self._count_bits(instr, "ctpop")

    def op_clz(self, instr: nodes.Instruction) -> None:
        self._count_bits(instr, "ctlz")

    def op_brev(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if mods or t not in ("b32", "b64"):
            raise self.fail("form")
        d, a = instr.operands
        w = BITS[t]
        self.intrinsics.add(f"declare i{w} @llvm.bitreverse.i{w}(i{w})")
        out = self.new()
        self.emit(f"{out} = call i{w} @llvm.bitreverse.i{w}(i{w} {self.read(a, t)})")
        self.write(d, t, out)

    def _rounded_unary(self, instr: nodes.Instruction) -> tuple[str, str, bool]:
        """(type, operand, .ftz) of ``sqrt``/``rcp`` in the forms the
        interpreter rounds correctly: ``.rn`` (f32, f64) and ``.approx.f32``
        (computed in f64 and rounded once, which for these two is the
        correctly rounded f32), with ``.ftz`` on f32 (the operand flushed
        here, the result by :meth:`_rounded_result`)."""
        mods, t = split_type(instr)
        ftz = t == "f32" and "ftz" in mods
        rest = [m for m in mods if m != "ftz"] if ftz else mods
        if t not in ("f32", "f64") or rest not in (["rn"], ["approx"] if t == "f32" else []):
            raise self.fail("form")
        v = self.read(instr.operands[1], t)
        return t, self.flush_f32(v) if ftz else v, ftz

    def _rounded_result(self, instr: nodes.Instruction, t: str, out: str, ftz: bool) -> None:
        self.write(instr.operands[0], t, self.canon(self.flush_f32(out) if ftz else out, t))

    def op_sqrt(self, instr: nodes.Instruction) -> None:
        t, v, ftz = self._rounded_unary(instr)
        lt = llvm_type(t)
        self.intrinsics.add(f"declare {lt} @llvm.sqrt.{lt}({lt})")
        out = self.new()
        self.emit(f"{out} = call {lt} @llvm.sqrt.{lt}({lt} {v})")
        self._rounded_result(instr, t, out, ftz)

    def op_rcp(self, instr: nodes.Instruction) -> None:
        t, v, ftz = self._rounded_unary(instr)
        out = self.new()
        self.emit(f"{out} = fdiv {llvm_type(t)} 1.0, {v}")
        self._rounded_result(instr, t, out, ftz)

    def op_bfind(self, instr: nodes.Instruction) -> None:
        """The position of the most significant non-sign bit (from the top with
        ``.shiftamt``), 0xffffffff when there is none, as the interpreter's."""
        mods, t = split_type(instr)
        if mods not in ([], ["shiftamt"]) or t not in ("u32", "u64", "s32", "s64"):
            raise self.fail("form")
        d, a = instr.operands
        w = BITS[t]
        va = self.read(a, t)
        if t.startswith("s"):
            negative, inverted, chosen = self.new(), self.new(), self.new()
            self.emit(f"{negative} = icmp slt i{w} {va}, 0")
            self.emit(f"{inverted} = xor i{w} {va}, -1")
            self.emit(f"{chosen} = select i1 {negative}, i{w} {inverted}, i{w} {va}")
            va = chosen
        self.intrinsics.add(f"declare i{w} @llvm.ctlz.i{w}(i{w}, i1)")
        lz, none, pos, out = self.new(), self.new(), self.new(), self.new()
        self.emit(f"{lz} = call i{w} @llvm.ctlz.i{w}(i{w} {va}, i1 false)")
        lz32 = self.adapt(lz, w, 32, False)
        self.emit(f"{none} = icmp eq i{w} {va}, 0")
        if mods:
            pos = lz32
        else:
            self.emit(f"{pos} = sub i32 {w - 1}, {lz32}")
        self.emit(f"{out} = select i1 {none}, i32 -1, i32 {pos}")
        self.write(d, "u32", out)

    def op_sad(self, instr: nodes.Instruction) -> None:
        """``c + |a - b|``, the difference taken the larger minus the smaller
        (wrapping, as the interpreter's)."""
        mods, t = split_type(instr)
        if mods or t[0] not in "su" or BITS.get(t, 0) < 16:
            raise self.fail("form")
        d, a, b, c = instr.operands
        w = BITS[t]
        va, vb, vc = self.read(a, t), self.read(b, t), self.read(c, t)
        gt, ab, ba, diff, out = (self.new() for _ in range(5))
        self.emit(f"{gt} = icmp {t[0]}gt i{w} {va}, {vb}")
        self.emit(f"{ab} = sub i{w} {va}, {vb}")
        self.emit(f"{ba} = sub i{w} {vb}, {va}")
        self.emit(f"{diff} = select i1 {gt}, i{w} {ab}, i{w} {ba}")
        self.emit(f"{out} = add i{w} {diff}, {vc}")
        self.write(d, t, out)

    def op_abs(self, instr: nodes.Instruction) -> None:
        """Integer ``abs`` (the most negative value stays itself) and float
        ``abs`` without ``.ftz``: the sign bit cleared, a NaN's payload kept,
        as the interpreter does."""
        mods, t = split_type(instr)
        if mods not in ([], ["ftz"] if t == "f32" else []) \
                or t not in ("s16", "s32", "s64", "f32", "f64"):
            raise self.fail("form")
        if t.startswith("f"):
            self._sign_bit(instr, t, "and", bool(mods))
            return
        d, a = instr.operands
        w = BITS[t]
        out = self.new()
        va = self.read(a, t)
        negative, negated = self.new(), self.new()
        self.emit(f"{negative} = icmp slt i{w} {va}, 0")
        self.emit(f"{negated} = sub i{w} 0, {va}")
        self.emit(f"{out} = select i1 {negative}, i{w} {negated}, i{w} {va}")
        self.write(d, t, out)

    def _sign_bit(self, instr: nodes.Instruction, t: str, op: str, ftz: bool = False) -> None:
        """Float ``abs`` (``and``: the sign cleared) and ``neg`` (``xor``: flipped)
        on the bits, a NaN's payload kept, as the interpreter does (``.ftz``
        flushes the operand first)."""
        d, a = instr.operands
        w = BITS[t]
        mask = (1 << (w - 1)) - 1 if op == "and" else -(1 << (w - 1))
        bits, changed, out = self.new(), self.new(), self.new()
        v = self.read(a, t)
        self.emit(f"{bits} = bitcast {llvm_type(t)} {self.flush_f32(v) if ftz else v} to i{w}")
        self.emit(f"{changed} = {op} i{w} {bits}, {mask}")
        self.emit(f"{out} = bitcast i{w} {changed} to {llvm_type(t)}")
        self.write(d, t, out)

    def op_copysign(self, instr: nodes.Instruction) -> None:
        """``copysign d, a, b``: b's bits with a's sign bit (a NaN's payload
        kept, as numpy's ``copysign(b, a)``)."""
        mods, t = split_type(instr)
        if mods or t not in ("f32", "f64") or len(instr.operands) != 3:
            raise self.fail("form")
        d, a, b = instr.operands
        w = BITS[t]
        sign = -(1 << (w - 1))
        ia, ib, sa, mb, bits, out = (self.new() for _ in range(6))
        self.emit(f"{ia} = bitcast {llvm_type(t)} {self.read(a, t)} to i{w}\n"
                  f"  {ib} = bitcast {llvm_type(t)} {self.read(b, t)} to i{w}\n"
                  f"  {sa} = and i{w} {ia}, {sign}\n  {mb} = and i{w} {ib}, {-sign - 1}\n"
                  f"  {bits} = or i{w} {sa}, {mb}\n"
                  f"  {out} = bitcast i{w} {bits} to {llvm_type(t)}")
        self.write(d, t, out)

    def op_testp(self, instr: nodes.Instruction) -> None:
        """``testp.op``: a class of the value, from its exponent and mantissa."""
        mods, t = split_type(instr)
        if t not in ("f32", "f64") or len(mods) != 1 or len(instr.operands) != 2:
            raise self.fail("form")
        d, a = instr.operands
        w = BITS[t]
        top = 0x7F800000 if t == "f32" else 0x7FF0000000000000
        ia, mag = self.new(), self.new()
        self.emit(f"{ia} = bitcast {llvm_type(t)} {self.read(a, t)} to i{w}\n"
                  f"  {mag} = and i{w} {ia}, {(1 << (w - 1)) - 1}")
        min_normal = 0x00800000 if t == "f32" else 0x0010000000000000
        tests = {"finite": f"icmp ult i{w} {mag}, {top}",
                 "infinite": f"icmp eq i{w} {mag}, {top}",
                 "number": f"icmp ule i{w} {mag}, {top}",
                 "notanumber": f"icmp ugt i{w} {mag}, {top}"}
        out = self.new()
        if mods[0] == "normal":
            lo, hi = self.new(), self.new()
            self.emit(f"{lo} = icmp uge i{w} {mag}, {min_normal}\n"
                      f"  {hi} = icmp ult i{w} {mag}, {top}\n  {out} = and i1 {lo}, {hi}")
        elif mods[0] == "subnormal":
            nz, small = self.new(), self.new()
            self.emit(f"{nz} = icmp ne i{w} {mag}, 0\n"
                      f"  {small} = icmp ult i{w} {mag}, {min_normal}\n"
                      f"  {out} = and i1 {nz}, {small}")
        elif mods[0] in tests:
            self.emit(f"{out} = {tests[mods[0]]}")
        else:
            raise self.fail(f"test {mods[0]}")
        self.write(d, "pred", out)
