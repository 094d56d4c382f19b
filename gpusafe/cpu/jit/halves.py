"""16-bit floats in the JIT's lowering: ``f16``, ``bf16`` and the packed
``f16x2``/``bf16x2``, with the interpreter's bits
(:mod:`gpusafe.cpu.alu.floating`, :mod:`gpusafe.cpu.alu.convert`).

Registers hold their bits (``i16``, ``i32`` for a pair); LLVM's ``half`` and
``bfloat`` types are not used, since converting them is a library call on a
CPU without F16C and another rounding to trust.  A value is widened to f32
exactly (integer code), computed in f64 as the interpreter computes it, and
rounded back by :meth:`HalfLowering.round_f32` (integer code, every mode):

- ``add/sub`` give the f64 sum rounded to nearest, ``mul`` the exact product,
  ``fma`` the round-to-odd f64 value of ``a*b + c`` (the product is exact,
  TwoSum gives the sum's error): the interpreter's ``narrow_add`` and
  ``narrow_fma``;
- that f64 value is rounded to odd at f32 (``fptrunc``, then one unit toward
  the f64 value when inexact and even), then to the 16-bit format.  Rounding
  to odd at 24 >= 11 + 2 bits keeps every later rounding to 11 (f16) or 8
  (bf16) bits exact (Boldo & Melquiond): the same value as numpy's direct
  f64 -> f16 cast, and the interpreter's own route for bf16
  (``bf16_rn_from_f64``);
- ``.ftz`` flushes subnormal operands and results, ``.sat`` clamps to [0, 1]
  (a NaN gives +0), ``.relu`` clamps negatives to +0 (a NaN stays), a NaN
  result is the canonical 0x7fff; ``neg``/``abs`` flip or clear the sign bit
  and keep a NaN's payload.

Conversions to or from f64 and integers stay on the interpreter (named): a
quiet f64 NaN built through an f32 would not keep a signalling f16's payload
as numpy's cast does.
"""

from __future__ import annotations

from gpusafe_instrument import nodes

from .values import FCMP, HALVES, Values

_FORMATS = {"f16": (10, -14, 0x7C00), "bf16": (7, -126, 0x7F80)}
"""Mantissa bits, smallest normal exponent and the infinity's bits of each format."""

_ROUNDINGS = ("rn", "rz", "rm", "rp")
_CANONICAL = 0x7FFF
_ONE_F16 = 0x3C00


def half_type(instr: nodes.Instruction) -> str | None:
    """The 16-bit float type an instruction names, if any."""
    found = [m for m in instr.modifiers if m in HALVES]
    return found[-1] if found else None


class HalfLowering(Values):
    """The 16-bit float instructions (a mixin of the lowering)."""

    # -- conversions of the bits ---------------------------------------------

    def half_to_f32(self, h: str, et: str) -> str:
        """An ``i16`` of format ``et`` as the f32 of the same value (exact; an
        f16 NaN keeps its payload in the top of the f32's mantissa)."""
        if et == "bf16":
            wide, out = self.new(), self.new()
            self.emit(f"{wide} = zext i16 {h} to i32\n  {out} = shl i32 {wide}, 16")
            return self._as_float(out)
        r = f"%h{self.new()[2:]}_"
        self.emit(
            f"{r}w = zext i16 {h} to i32\n  {r}sign = and i32 {r}w, 32768\n"
            f"  {r}e0 = lshr i32 {r}w, 10\n  {r}e = and i32 {r}e0, 31\n"
            f"  {r}m = and i32 {r}w, 1023\n  {r}norm = icmp ne i32 {r}e, 0\n"
            f"  {r}hid = select i1 {r}norm, i32 1024, i32 0\n  {r}mm = or i32 {r}m, {r}hid\n"
            # (m | hidden) * 2^(max(e, 1) - 25): a product of two exact f32s
            f"  {r}ee = select i1 {r}norm, i32 {r}e, i32 1\n  {r}sb = add i32 {r}ee, 102\n"
            f"  {r}sc = shl i32 {r}sb, 23\n  {r}scale = bitcast i32 {r}sc to float\n"
            f"  {r}fm = uitofp i32 {r}mm to float\n  {r}mag = fmul float {r}fm, {r}scale\n"
            f"  {r}magb = bitcast float {r}mag to i32\n  {r}sg = shl i32 {r}sign, 16\n"
            f"  {r}fin = or i32 {r}magb, {r}sg\n"
            # infinity or NaN: the payload at the top of the f32's mantissa
            f"  {r}special = icmp eq i32 {r}e, 31\n  {r}pl = shl i32 {r}m, 13\n"
            f"  {r}pe = or i32 {r}pl, 2139095040\n  {r}ps = or i32 {r}pe, {r}sg\n"
            f"  {r}bits = select i1 {r}special, i32 {r}ps, i32 {r}fin")
        return self._as_float(f"{r}bits")

    def _as_float(self, bits: str) -> str:
        out = self.new()
        self.emit(f"{out} = bitcast i32 {bits} to float")
        return out

    def round_f32(self, value: str, et: str, mode: str) -> str:
        """The ``i16`` of format ``et`` nearest the f32 ``value`` in ``mode``
        (``rn`` ties to even; ``rz/rm/rp`` toward zero, down, up), subnormals
        included; an overflow gives the infinity or the largest finite value
        as the mode says; a NaN gives the canonical NaN.

        The f32's significand ``m`` (hidden bit included) is shifted right by
        the bits the format drops at its exponent (``max(e, emin)``); the
        result's bits are ``(E - emin) << mantissa + q``, which a rounding
        carry moves to the next exponent, and past the largest exponent to
        the infinity's bits."""
        mbits, emin, inf = _FORMATS[et]
        r = f"%h{self.new()[2:]}_"
        self.emit(
            f"{r}b = bitcast float {value} to i32\n  {r}abs = and i32 {r}b, 2147483647\n"
            f"  {r}neg = icmp slt i32 {r}b, 0\n  {r}e = lshr i32 {r}abs, 23\n"
            f"  {r}norm = icmp ne i32 {r}e, 0\n"
            f"  {r}ee = select i1 {r}norm, i32 {r}e, i32 1\n"
            f"  {r}mant = and i32 {r}abs, 8388607\n"
            f"  {r}hid = select i1 {r}norm, i32 8388608, i32 0\n"
            f"  {r}m = or i32 {r}mant, {r}hid\n"
            f"  {r}ue = sub i32 {r}ee, 127\n  {r}low = icmp slt i32 {r}ue, {emin}\n"
            f"  {r}E = select i1 {r}low, i32 {emin}, i32 {r}ue\n"
            # bits dropped: (E - mbits) - (ee - 150), at most 31 (all of m)
            f"  {r}d0 = sub i32 {r}E, {r}ee\n  {r}d1 = add i32 {r}d0, {150 - mbits}\n"
            f"  {r}big = icmp ugt i32 {r}d1, 31\n"
            f"  {r}sh = select i1 {r}big, i32 31, i32 {r}d1\n"
            f"  {r}q = lshr i32 {r}m, {r}sh\n  {r}unit = shl i32 1, {r}sh\n"
            f"  {r}mask = sub i32 {r}unit, 1\n  {r}rem = and i32 {r}m, {r}mask\n"
            f"  {r}inexact = icmp ne i32 {r}rem, 0")
        self.emit(f"{r}pos = xor i1 {r}neg, true")
        if mode == "rn":
            self.emit(f"{r}half = lshr i32 {r}unit, 1\n"
                      f"  {r}gt = icmp ugt i32 {r}rem, {r}half\n"
                      f"  {r}tie = icmp eq i32 {r}rem, {r}half\n"
                      f"  {r}odd = trunc i32 {r}q to i1\n  {r}te = and i1 {r}tie, {r}odd\n"
                      f"  {r}up = or i1 {r}gt, {r}te")
        elif mode == "rz":
            self.emit(f"{r}up = and i1 false, false")
        else:  # rm: a negative value's magnitude goes up; rp: a positive one's
            side = f"{r}neg" if mode == "rm" else f"{r}pos"
            self.emit(f"{r}up = and i1 {side}, {r}inexact")
        # away from zero past the largest finite value: the infinity, else that value
        away = {"rn": "true", "rz": "false", "rm": f"{r}neg", "rp": f"{r}pos"}[mode]
        self.emit(
            f"{r}inc = zext i1 {r}up to i32\n  {r}qq = add i32 {r}q, {r}inc\n"
            f"  {r}eb = sub i32 {r}E, {emin}\n  {r}es = shl i32 {r}eb, {mbits}\n"
            f"  {r}bits = add i32 {r}es, {r}qq\n  {r}over = icmp uge i32 {r}bits, {inf}\n"
            f"  {r}cap = select i1 {away}, i32 {inf}, i32 {inf - 1}\n"
            f"  {r}fin = select i1 {r}over, i32 {r}cap, i32 {r}bits\n"
            f"  {r}isinf = icmp eq i32 {r}abs, 2139095040\n"
            f"  {r}mag = select i1 {r}isinf, i32 {inf}, i32 {r}fin\n"
            f"  {r}sgn = lshr i32 {r}b, 16\n  {r}sg = and i32 {r}sgn, 32768\n"
            f"  {r}all = or i32 {r}mag, {r}sg\n"
            f"  {r}nan = icmp ugt i32 {r}abs, 2139095040\n"
            f"  {r}out32 = select i1 {r}nan, i32 {_CANONICAL}, i32 {r}all\n"
            f"  {r}out = trunc i32 {r}out32 to i16")
        return f"{r}out"

    def round_f64(self, value: str, et: str) -> str:
        """The f64 ``value`` (exact, or rounded to odd at 53 bits) rounded to
        nearest in format ``et``: rounded to odd at f32, then to the format."""
        r32, back, inexact, bits, low, even, fix, grow, ax, ab, dec, inc, step, chosen, out = (
            self.new() for _ in range(15))
        self.emit(f"{r32} = fptrunc double {value} to float\n"
                  f"  {back} = fpext float {r32} to double\n"
                  f"  {inexact} = fcmp one double {back}, {value}\n"
                  f"  {bits} = bitcast float {r32} to i32\n  {low} = and i32 {bits}, 1\n"
                  f"  {even} = icmp eq i32 {low}, 0\n  {fix} = and i1 {inexact}, {even}\n"
                  f"  {ax} = call double @llvm.fabs.f64(double {value})\n"
                  f"  {ab} = call double @llvm.fabs.f64(double {back})\n"
                  f"  {grow} = fcmp ogt double {ax}, {ab}\n"
                  f"  {inc} = add i32 {bits}, 1\n  {dec} = sub i32 {bits}, 1\n"
                  f"  {step} = select i1 {grow}, i32 {inc}, i32 {dec}\n"
                  f"  {chosen} = select i1 {fix}, i32 {step}, i32 {bits}\n"
                  f"  {out} = bitcast i32 {chosen} to float")
        self.intrinsics.add("declare double @llvm.fabs.f64(double)")
        return self.round_f32(out, et, "rn")

    # -- modifiers on the bits ---------------------------------------------------

    def flush_half(self, h: str, et: str) -> str:
        """``.ftz``: a subnormal becomes the zero of its sign."""
        mbits, _, inf = _FORMATS[et]
        exp, mant, sub, nz, both, sign, out = (self.new() for _ in range(7))
        self.emit(f"{exp} = and i16 {h}, {inf}\n  {mant} = and i16 {h}, {(1 << mbits) - 1}\n"
                  f"  {sub} = icmp eq i16 {exp}, 0\n  {nz} = icmp ne i16 {mant}, 0\n"
                  f"  {both} = and i1 {sub}, {nz}\n  {sign} = and i16 {h}, -32768\n"
                  f"  {out} = select i1 {both}, i16 {sign}, i16 {h}")
        return out

    def _clamp(self, h: str, et: str, sat: bool) -> str:
        """``.sat`` (f16: [0, 1], a NaN and -0 give +0) or ``.relu`` (negatives
        and -0 give +0, a NaN stays) on a rounded result, whose NaN is the
        canonical 0x7fff."""
        _, _, inf = _FORMATS[et]
        mag, nan, low, out = (self.new() for _ in range(4))
        # -0 has the sign bit: a +0 stays itself either way
        self.emit(f"{mag} = and i16 {h}, 32767\n  {nan} = icmp ugt i16 {mag}, {inf}\n"
                  f"  {low} = icmp slt i16 {h}, 0")
        if sat:
            off, above, top = self.new(), self.new(), self.new()
            self.emit(f"{off} = or i1 {low}, {nan}\n"
                      f"  {above} = icmp ugt i16 {h}, {_ONE_F16}\n"
                      f"  {top} = select i1 {above}, i16 {_ONE_F16}, i16 {h}\n"
                      f"  {out} = select i1 {off}, i16 0, i16 {top}")
        else:
            # a NaN here is the canonical one, positive: it stays
            self.emit(f"{out} = select i1 {low}, i16 0, i16 {h}")
        return out

    # -- per half of a pair --------------------------------------------------------

    def _halves(self, operands: list[nodes.Operand], t: str) -> list[list[str]]:
        """Each operand's halves: ``[[a]]`` for a scalar, ``[[a_lo, a_hi]]`` for a pair."""
        if HALVES[t] == 16:
            return [[self.read(x, "b16")] for x in operands]
        out = []
        for x in operands:
            v = self.read(x, "b32")
            lo, sh, hi = self.new(), self.new(), self.new()
            self.emit(f"{lo} = trunc i32 {v} to i16\n  {sh} = lshr i32 {v}, 16\n"
                      f"  {hi} = trunc i32 {sh} to i16")
            out.append([lo, hi])
        return out

    def _write_halves(self, d: nodes.Operand, t: str, parts: list[str]) -> None:
        if len(parts) == 1:
            self.write(d, "b16", parts[0])
            return
        lo, hi, sh, out = self.new(), self.new(), self.new(), self.new()
        self.emit(f"{lo} = zext i16 {parts[0]} to i32\n  {hi} = zext i16 {parts[1]} to i32\n"
                  f"  {sh} = shl i32 {hi}, 16\n  {out} = or i32 {sh}, {lo}")
        self.write(d, "b32", out)

    # -- instructions --------------------------------------------------------------

    def half_handler(self, instr: nodes.Instruction):
        """The lowering of an instruction on a 16-bit float type, if this module
        has one (``setp`` is :meth:`op_setp`'s, with :meth:`half_compare`)."""
        if half_type(instr) is None:
            return None
        if instr.op in ("add", "sub", "mul", "fma", "mad"):
            kind = "fma" if instr.op == "mad" else instr.op
            return lambda i: self.half_arith(i, kind)
        if instr.op in ("neg", "abs"):
            return lambda i: self.half_sign(i, instr.op)
        if instr.op == "cvt":
            return self.half_cvt
        return None

    def half_arith(self, instr: nodes.Instruction, kind: str) -> None:
        """``add/sub/mul/fma/mad`` on a 16-bit float type (``.rn`` only)."""
        t = half_type(instr)
        et = t[:-2] if t.endswith("x2") else t
        mods = [m for m in instr.modifiers if m != t]
        rounding = [m for m in mods if m in _ROUNDINGS]
        flags = set(mods) - set(rounding)
        allowed = {"ftz", "sat", "relu"} if et == "f16" else {"relu"}  # as the interpreter's
        if rounding not in ([], ["rn"]) or not flags <= allowed or len(set(mods)) != len(mods) \
                or {"sat", "relu"} <= flags or (kind == "fma" and instr.op == "fma"
                                                 and not rounding):
            raise self.fail(f"16-bit float form {mods}")
        ftz = "ftz" in flags
        d, *ops = instr.operands
        if len(ops) != (3 if kind == "fma" else 2):
            raise self.fail("operands")
        lanes = zip(*self._halves(ops, t), strict=True)
        results = []
        for lane in lanes:
            vals = []
            for h in lane:
                x = self.half_to_f32(self.flush_half(h, et) if ftz else h, et)
                wide = self.new()
                self.emit(f"{wide} = fpext float {x} to double")
                vals.append(wide)
            x64 = self._wide_op(kind, vals)
            out = self.round_f64(x64, et)
            if ftz:
                out = self.flush_half(out, et)
            if "sat" in flags or "relu" in flags:
                out = self._clamp(out, et, "sat" in flags)
            results.append(out)
        self._write_halves(d, t, results)

    def _wide_op(self, kind: str, vals: list[str]) -> str:
        """The interpreter's f64 value of the operation on exact operands."""
        out = self.new()
        if kind in ("add", "sub"):
            self.emit(f"{out} = f{kind} double {vals[0]}, {vals[1]}")
            return out
        self.emit(f"{out} = fmul double {vals[0]}, {vals[1]}")  # exact
        if kind == "mul":
            return out
        s, e = self._two_sum(out, vals[2])
        bits, low, even, inexact, fix, sb, eb, same, inc, dec, step, chosen, ro = (
            self.new() for _ in range(13))
        self.emit(f"{bits} = bitcast double {s} to i64\n  {low} = and i64 {bits}, 1\n"
                  f"  {even} = icmp eq i64 {low}, 0\n  {inexact} = fcmp one double {e}, 0.0\n"
                  f"  {fix} = and i1 {inexact}, {even}\n"
                  f"  {sb} = icmp slt i64 {bits}, 0\n  {eb} = fcmp olt double {e}, 0.0\n"
                  # toward e's side: the magnitude grows when e has s's sign
                  f"  {same} = icmp eq i1 {sb}, {eb}\n"
                  f"  {inc} = add i64 {bits}, 1\n  {dec} = sub i64 {bits}, 1\n"
                  f"  {step} = select i1 {same}, i64 {inc}, i64 {dec}\n"
                  f"  {chosen} = select i1 {fix}, i64 {step}, i64 {bits}\n"
                  f"  {ro} = bitcast i64 {chosen} to double")
        return ro

    def half_sign(self, instr: nodes.Instruction, op: str) -> None:
        """``neg``/``abs`` (``.ftz`` flushes first): the sign bit flipped or
        cleared, a NaN's payload kept."""
        t = half_type(instr)
        et = t[:-2] if t.endswith("x2") else t
        mods = [m for m in instr.modifiers if m != t]
        if mods not in ([], ["ftz"]) or len(instr.operands) != 2:
            raise self.fail(f"16-bit float form {mods}")
        d, a = instr.operands
        results = []
        for h in self._halves([a], t)[0]:
            v = self.flush_half(h, et) if mods else h
            out = self.new()
            self.emit(f"{out} = {'xor i16 ' + v + ', -32768' if op == 'neg' else 'and i16 ' + v + ', 32767'}")
            results.append(out)
        self._write_halves(d, t, results)

    def half_compare(self, instr: nodes.Instruction) -> tuple[str, str, list[str]] | None:
        """``setp`` on f16/bf16: both operands as f32 (exact, flushed with
        ``.ftz``) and the remaining modifiers, for :meth:`op_setp`."""
        t = half_type(instr)
        if t is None:
            return None
        if t not in ("f16", "bf16"):
            raise self.fail("setp on a 16-bit pair")
        mods = [m for m in instr.modifiers if m != t]
        ftz = "ftz" in mods
        mods = [m for m in mods if m != "ftz"]
        if not mods or mods[0] not in FCMP:
            raise self.fail(f"compare {mods}")
        vals = []
        for h in self._halves(list(instr.operands[1:3]), t):
            vals.append(self.half_to_f32(self.flush_half(h[0], t) if ftz else h[0], t))
        return vals[0], vals[1], mods

    def half_cvt(self, instr: nodes.Instruction) -> None:
        """``cvt`` between f32 and f16/bf16: widening is exact (``.ftz`` flushes
        an f32 result); narrowing rounds in any mode (``.ftz`` flushes the f32
        source), then ``.sat``/``.relu``."""
        types = [m for m in instr.modifiers if m in HALVES or m in ("f32", "f64")]
        rest = [m for m in instr.modifiers if m not in types]
        if len(types) != 2 or len(instr.operands) != 2 or "f64" in types \
                or types[0] == types[1] or any(t.endswith("x2") for t in types):
            raise self.fail(f"16-bit float conversion {'.'.join(instr.modifiers)}")
        dt, st = types
        d, s = instr.operands
        rounding = [m for m in rest if m in _ROUNDINGS]
        flags = set(rest) - set(rounding)
        if len(rounding) > 1 or len(set(rest)) != len(rest):
            raise self.fail(f"modifiers {rest}")
        if dt == "f32":  # widening: exact
            if not flags <= {"ftz"}:
                raise self.fail(f"modifiers {rest}")
            v = self.half_to_f32(self.read(s, "b16"), st)
            if flags:
                v = self.flush_f32(v)
            self.write(d, "f32", self.canon(v, "f32"))
            return
        allowed = {"ftz", "relu"} | ({"sat"} if dt == "f16" else set())
        if not rounding or not flags <= allowed or {"sat", "relu"} <= flags:
            raise self.fail(f"modifiers {rest}")
        v = self.read(s, "f32")
        if "ftz" in flags:
            v = self.flush_f32(v)
        out = self.round_f32(v, dt, rounding[0])
        if "sat" in flags or "relu" in flags:
            out = self._clamp(out, dt, "sat" in flags)
        self.write(d, "b16", out)
