"""Float instructions of the JIT's lowering beyond round-to-nearest
arithmetic: f32 ``min``/``max``, the approximate functions
``sin/cos/ex2/lg2/rsqrt.approx``, integer-to-float ``cvt`` with a directed
rounding (``.rz/.rm/.rp``) and float-to-float ``cvt`` with ``.sat``, an
integer rounding or ``.ftz``; each gives the interpreter's bits
(:mod:`gpusafe.cpu.alu.floating`, :mod:`gpusafe.cpu.alu.convert`).

The interpreter computes an approximate function in f64 with numpy and rounds
once to f32.  The JIT calls the C library's function, which is numpy's own
loop on a CPU without AVX-512: with AVX-512 numpy may take Intel's SVML,
whose last bit can differ, so there the JIT leaves these instructions to the
interpreter (:data:`LIBM_IS_NUMPY`)."""

from __future__ import annotations

from gpusafe_instrument import nodes

from .values import BITS, INT_ROUNDING, Values, llvm_type, split_type


def _numpy_uses_libm() -> bool:
    """Whether numpy's f64 sin/cos/exp2/log2 are the C library's on this CPU:
    numpy dispatches them to SVML only on AVX-512 (SKX and later)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy 1.x
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:
            return False
    return not any(features.get(k) for k in ("AVX512F", "AVX512_SKX", "X86_V4"))


LIBM_IS_NUMPY = _numpy_uses_libm()

_APPROX = {"sin": "llvm.sin.f64", "cos": "llvm.cos.f64", "ex2": "llvm.exp2.f64",
           "lg2": "llvm.log2.f64"}
_F32_EXPONENT = 0x7F800000  # the exponent field (all ones: inf/NaN)
_F32_TWO_126 = 0x7E800000
_F32_SIGN = -0x80000000


class FloatLowering(Values):
    """The instructions above (a mixin of the lowering)."""

    def flush_f32(self, value: str) -> str:
        """``.ftz``: a subnormal f32 becomes a zero of its sign."""
        bits, exp, sub, sign, chosen, out = (self.new() for _ in range(6))
        self.emit(f"{bits} = bitcast float {value} to i32\n"
                  f"  {exp} = and i32 {bits}, {_F32_EXPONENT}\n"
                  f"  {sub} = icmp eq i32 {exp}, 0\n  {sign} = and i32 {bits}, {_F32_SIGN}\n"
                  f"  {chosen} = select i1 {sub}, i32 {sign}, i32 {bits}\n"
                  f"  {out} = bitcast i32 {chosen} to float")
        return out

    def _saturate(self, value: str, t: str) -> str:
        """``.sat``: clamp to [0, 1]; NaN and -0.0 give +0.0."""
        lt = llvm_type(t)
        pos, over, low, out = (self.new() for _ in range(4))
        self.emit(f"{pos} = fcmp ogt {lt} {value}, 0.0\n  {over} = fcmp ogt {lt} {value}, 1.0\n"
                  f"  {low} = select i1 {over}, {lt} 1.0, {lt} {value}\n"
                  f"  {out} = select i1 {pos}, {lt} {low}, {lt} 0.0")
        return out

    # -- min / max -------------------------------------------------------------

    def float_minmax(self, instr: nodes.Instruction, is_min: bool) -> None:
        """f32 ``min``/``max`` (``.ftz`` too): a NaN operand gives the other one,
        -0.0 is below +0.0, a NaN result is the canonical NaN.  f64 is left to
        the interpreter: which NaN it returns when both are NaN depends on how
        many lanes numpy's loop runs at once."""
        mods, t = split_type(instr)
        if t != "f32" or mods not in ([], ["ftz"]) or len(instr.operands) != 3:
            raise self.fail(f"float min/max form {mods}.{t}")
        d, a, b = instr.operands
        va, vb = self.read(a, t), self.read(b, t)
        if mods:
            va, vb = self.flush_f32(va), self.flush_f32(vb)
        first, bnan, take_a, pick, ia, ib, za, zb, zeros, zbits, zf, out = (
            self.new() for _ in range(12))
        self.emit(f"{first} = fcmp {'olt' if is_min else 'ogt'} float {va}, {vb}\n"
                  f"  {bnan} = fcmp uno float {vb}, 0.0\n"
                  f"  {take_a} = or i1 {first}, {bnan}\n"
                  f"  {pick} = select i1 {take_a}, float {va}, float {vb}\n"
                  f"  {ia} = bitcast float {va} to i32\n  {ib} = bitcast float {vb} to i32\n"
                  f"  {za} = fcmp oeq float {va}, 0.0\n  {zb} = fcmp oeq float {vb}, 0.0\n"
                  f"  {zeros} = and i1 {za}, {zb}\n"
                  f"  {zbits} = {'or' if is_min else 'and'} i32 {ia}, {ib}\n"
                  f"  {zf} = bitcast i32 {zbits} to float\n"
                  f"  {out} = select i1 {zeros}, float {zf}, float {pick}")
        self.write(d, t, self.canon(out, t))

    def float_divide(self, instr: nodes.Instruction, mods: list[str]) -> None:
        """``div.approx/.full/.rn`` with ``.ftz`` and ``div.approx`` on f32: the
        correctly rounded quotient (inputs and result flushed with ``.ftz``);
        ``.approx`` with a finite divisor above 2^126 gives ``a * ±0`` (a
        signed zero, NaN for an infinite a), as the interpreter has the GPU."""
        rest = sorted(m for m in mods if m != "ftz")
        if rest not in (["approx"], ["full"], ["rn"]) or len(instr.operands) != 3:
            raise self.fail(f"form {mods}")
        ftz = "ftz" in mods
        d, a, b = instr.operands
        va, vb = self.read(a, "f32"), self.read(b, "f32")
        fa, fb = (self.flush_f32(va), self.flush_f32(vb)) if ftz else (va, vb)
        q = self.new()
        self.emit(f"{q} = fdiv float {fa}, {fb}")
        out = self.flush_f32(q) if ftz else q
        if rest == ["approx"]:
            bits, mag, above, finite, huge, sign, zero, scaled, chosen = (self.new()
                                                                          for _ in range(9))
            self.emit(f"{bits} = bitcast float {vb} to i32\n"
                      f"  {mag} = and i32 {bits}, 2147483647\n"
                      f"  {above} = icmp ugt i32 {mag}, {_F32_TWO_126}\n"
                      f"  {finite} = icmp ult i32 {mag}, {_F32_EXPONENT}\n"
                      f"  {huge} = and i1 {above}, {finite}\n"
                      f"  {sign} = and i32 {bits}, {_F32_SIGN}\n"
                      f"  {zero} = bitcast i32 {sign} to float\n"
                      f"  {scaled} = fmul float {fa}, {zero}\n"
                      f"  {chosen} = select i1 {huge}, float {scaled}, float {out}")
            out = chosen
        self.write(d, "f32", self.canon(out, "f32"))

    # -- directed rounding -------------------------------------------------------

    def float_flushed(self, instr: nodes.Instruction, kind: str, mods: list[str]) -> None:
        """f32 ``add/sub/mul/fma`` with a directed rounding or ``.ftz`` (the
        operands flushed, the operation, the result flushed, as the
        interpreter's)."""
        rest = [m for m in mods if m != "ftz"]
        if rest not in ([], ["rn"], ["rz"], ["rm"], ["rp"]):
            raise self.fail(f"form {mods}")
        self.float_directed(instr, kind, rest[0] if rest else "rn", ftz="ftz" in mods)

    def float_directed(self, instr: nodes.Instruction, kind: str, mode: str,
                       ftz: bool = False) -> None:
        """f32 ``add/sub/mul/fma`` rounded toward zero (``rz``), down (``rm``) or
        up (``rp``), or to nearest when it comes with ``.ftz``.  The exact result is ``s + e`` in f64 (a product of two
        f32 is exact there; a sum's error ``e`` is exact by TwoSum); ``r``, the
        nearest f32 to ``s``, steps one unit toward the mode's side when the
        exact value lies beyond it (the sign of ``(s - r) + e``, whose first
        difference is exact).  In ``rm`` an exact zero sum is -0 unless both
        addends are +0, as the interpreter (and IEEE) has it."""
        d, *ops = instr.operands
        vals = [self.read(x, "f32") for x in ops]
        if ftz:
            vals = [self.flush_f32(v) for v in vals]
        if mode == "rn":
            out = self.new()
            if kind == "fma":
                self.emit(f"{out} = call float @llvm.fma.f32(float {vals[0]}, float {vals[1]}, "
                          f"float {vals[2]})")
            else:
                self.emit(f"{out} = f{kind} float {vals[0]}, {vals[1]}")
            self.write(d, "f32", self.canon(self.flush_f32(out), "f32"))
            return
        wide = []
        for v in vals:
            x = self.new()
            self.emit(f"{x} = fpext float {v} to double")
            wide.append(x)
        if kind == "sub":
            neg = self.new()
            self.emit(f"{neg} = fneg double {wide[1]}")
            wide[1] = neg
        if kind == "mul":
            s = self.new()
            self.emit(f"{s} = fmul double {wide[0]}, {wide[1]}")
            e = "0.0"
            addends = None
        else:
            if kind == "fma":
                p = self.new()
                self.emit(f"{p} = fmul double {wide[0]}, {wide[1]}")
                addends = (p, wide[2])
            else:
                addends = (wide[0], wide[1])
            s, e = self._two_sum(*addends)
        r, r64, diff, t = (self.new() for _ in range(4))
        self.emit(f"{r} = fptrunc double {s} to float\n  {r64} = fpext float {r} to double\n"
                  f"  {diff} = fsub double {s}, {r64}\n  {t} = fadd double {diff}, {e}")
        # inf or NaN operands: s is too, t is NaN, and r stays as it is
        chosen = self._step(r, t, mode)
        if mode == "rm" and addends is not None:
            chosen = self._rm_zero(chosen, s, addends)
        if ftz:
            chosen = self.flush_f32(chosen)
        self.write(d, "f32", self.canon(chosen, "f32"))

    def _two_sum(self, a: str, b: str) -> tuple[str, str]:
        """(s, e): s = a + b rounded, e its exact error (Knuth's TwoSum)."""
        s, bb, ab, da, db, e = (self.new() for _ in range(6))
        self.emit(f"{s} = fadd double {a}, {b}\n  {bb} = fsub double {s}, {a}\n"
                  f"  {ab} = fsub double {s}, {bb}\n  {da} = fsub double {a}, {ab}\n"
                  f"  {db} = fsub double {b}, {bb}\n  {e} = fadd double {da}, {db}")
        return s, e

    def _step(self, r: str, t: str, mode: str) -> str:
        """``r`` moved one f32 unit toward the exact value when ``mode`` says so
        (``t``: the exact value minus ``r``)."""
        bits, negative, above, below = (self.new() for _ in range(4))
        self.emit(f"{bits} = bitcast float {r} to i32\n  {negative} = icmp slt i32 {bits}, 0\n"
                  f"  {above} = fcmp ogt double {t}, 0.0\n"
                  f"  {below} = fcmp olt double {t}, 0.0")
        inc, dec = self.new(), self.new()
        self.emit(f"{inc} = add i32 {bits}, 1\n  {dec} = sub i32 {bits}, 1")
        if mode == "rz":  # |r| > |exact|: the magnitude one less
            toward, step = self.new(), self.new()
            self.emit(f"{toward} = select i1 {negative}, i1 {above}, i1 {below}\n"
                      f"  {step} = select i1 {toward}, i32 {dec}, i32 {bits}")
        else:  # rm: down when the exact value is below r; rp: up when above
            move = below if mode == "rm" else above
            # down: a negative magnitude grows, a positive one shrinks; up: the
            # mirror image.  r is never the zero on the wrong side of the exact
            # value (it has the sign of s, which has the exact value's)
            grow, step = self.new(), self.new()
            first, second = (inc, dec) if mode == "rm" else (dec, inc)
            self.emit(f"{grow} = select i1 {negative}, i32 {first}, i32 {second}\n"
                      f"  {step} = select i1 {move}, i32 {grow}, i32 {bits}")
        out = self.new()
        self.emit(f"{out} = bitcast i32 {step} to float")
        return out

    def _rm_zero(self, value: str, s: str, addends: tuple[str, str]) -> str:
        """An exact zero sum in ``rm``: -0 unless both addends are +0."""
        zero, pos, both, neg0, out = (self.new() for _ in range(5))
        checks = []
        for a in addends:
            b, z = self.new(), self.new()
            self.emit(f"{b} = bitcast double {a} to i64\n  {z} = icmp eq i64 {b}, 0")
            checks.append(z)
        self.emit(f"{zero} = fcmp oeq double {s}, 0.0\n"
                  f"  {both} = and i1 {checks[0]}, {checks[1]}\n"
                  f"  {pos} = xor i1 {both}, true\n  {neg0} = and i1 {zero}, {pos}\n"
                  f"  {out} = select i1 {neg0}, float -0.0, float {value}")
        return out

    # -- approximate functions -------------------------------------------------

    def _approx(self, instr: nodes.Instruction, op: str) -> None:
        """``op.approx[.ftz].f32``: the input widened to f64, the C library's
        function, rounded once to f32 (then flushed with ``.ftz``)."""
        mods, t = split_type(instr)
        ftz = "ftz" in mods
        if t != "f32" or sorted(mods) not in (["approx"], ["approx", "ftz"]):
            raise self.fail(f"form {mods}.{t}")
        if op in _APPROX and not LIBM_IS_NUMPY:
            raise self.fail("numpy computes it with SVML on this CPU (AVX-512), the JIT "
                            "would call the C library")
        d, a = instr.operands
        v = self.read(a, t)
        if ftz:
            v = self.flush_f32(v)
        wide, r, out = self.new(), self.new(), self.new()
        self.emit(f"{wide} = fpext float {v} to double")
        if op == "rsqrt":  # 1 / sqrt(x) in f64, as the interpreter has it
            self.intrinsics.add("declare double @llvm.sqrt.f64(double)")
            root = self.new()
            self.emit(f"{root} = call double @llvm.sqrt.f64(double {wide})\n"
                      f"  {r} = fdiv double 1.0, {root}")
        else:
            self.intrinsics.add(f"declare double @{_APPROX[op]}(double)")
            self.emit(f"{r} = call double @{_APPROX[op]}(double {wide})")
        self.emit(f"{out} = fptrunc double {r} to float")
        if ftz:
            out = self.flush_f32(out)
        self.write(d, t, self.canon(out, t))

    def op_sin(self, instr: nodes.Instruction) -> None:
        self._approx(instr, "sin")

    def op_cos(self, instr: nodes.Instruction) -> None:
        self._approx(instr, "cos")

    def op_ex2(self, instr: nodes.Instruction) -> None:
        self._approx(instr, "ex2")

    def op_lg2(self, instr: nodes.Instruction) -> None:
        self._approx(instr, "lg2")

    def op_rsqrt(self, instr: nodes.Instruction) -> None:
        self._approx(instr, "rsqrt")

    # -- conversions -------------------------------------------------------------

    def int_to_float_directed(self, v: str, st: str, dt: str, mode: str) -> str:
        """An integer converted to f32/f64 rounded toward zero (``rz``), down
        (``rm``) or up (``rp``), exactly: the magnitude's bits below the
        format's precision are cleared (rounded away from zero by one unit of
        that place when the mode says so and any were set), then converted
        (exact), then signed."""
        w = BITS[st]
        prec = 24 if dt == "f32" else 53
        lt = llvm_type(dt)
        wide = self.adapt(v, w, 64, st.startswith("s"))
        if st.startswith("s"):
            neg, flipped, mag = self.new(), self.new(), self.new()
            self.emit(f"{neg} = icmp slt i64 {wide}, 0\n  {flipped} = sub i64 0, {wide}\n"
                      f"  {mag} = select i1 {neg}, i64 {flipped}, i64 {wide}")
        else:
            neg, mag = "false", wide
        self.intrinsics.add("declare i64 @llvm.ctlz.i64(i64, i1)")
        lz, nbits, extra, pos, drop, unit, ones, low, kept, inexact = (self.new()
                                                                       for _ in range(10))
        self.emit(f"{lz} = call i64 @llvm.ctlz.i64(i64 {mag}, i1 false)\n"
                  f"  {nbits} = sub i64 64, {lz}\n  {extra} = sub i64 {nbits}, {prec}\n"
                  f"  {pos} = icmp sgt i64 {extra}, 0\n"
                  f"  {drop} = select i1 {pos}, i64 {extra}, i64 0\n"
                  f"  {unit} = shl i64 1, {drop}\n  {ones} = sub i64 {unit}, 1\n"
                  f"  {low} = and i64 {mag}, {ones}\n  {kept} = sub i64 {mag}, {low}\n"
                  f"  {inexact} = icmp ne i64 {low}, 0")
        away = "false"  # rz; rm rounds a negative value away from zero, rp a positive one
        if mode != "rz":
            side, away = self.new(), self.new()
            self.emit(f"{side} = xor i1 {neg}, {'false' if mode == 'rm' else 'true'}\n"
                      f"  {away} = and i1 {side}, {inexact}")
        up, carry, value, fvalue, top, big, negated, out = (self.new() for _ in range(8))
        self.emit(f"{up} = add i64 {kept}, {unit}\n"
                  f"  {value} = select i1 {away}, i64 {up}, i64 {kept}\n"
                  f"  {fvalue} = uitofp i64 {value} to {lt}\n"
                  # a u64 rounded up past its top wraps to 0: the value is 2^64
                  f"  {carry} = icmp eq i64 {up}, 0\n  {top} = and i1 {away}, {carry}\n"
                  f"  {big} = select i1 {top}, {lt} 18446744073709551616.0, {lt} {fvalue}\n"
                  f"  {negated} = fneg {lt} {big}\n"
                  f"  {out} = select i1 {neg}, {lt} {negated}, {lt} {big}")
        return out

    def float_to_float(self, v: str, t: str, rest: list[str]) -> str:
        """``cvt[.rni/rzi/rmi/rpi][.ftz][.sat].t.t``: flushed (``.ftz``, f32),
        rounded to an integer in the type, saturated; the canonical NaN."""
        lt = llvm_type(t)
        ftz = "ftz" in rest
        if ftz:
            v = self.flush_f32(v)
        rounding = [m for m in rest if m in INT_ROUNDING]
        if rounding:
            fn = f"llvm.{INT_ROUNDING[rounding[0]]}.{lt}"
            self.intrinsics.add(f"declare {lt} @{fn}({lt})")
            out = self.new()
            self.emit(f"{out} = call {lt} @{fn}({lt} {v})")
            v = out
        if "sat" in rest:
            v = self._saturate(v, t)
        return self.canon(v, t)
