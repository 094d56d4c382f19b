"""The CPU device's ALU (gpusafe.cpu.alu): every op against hand-computed
values or independent Python references (exact rationals, Python ints)."""

from __future__ import annotations

import math
import re
import zlib
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpusafe.cpu.alu import (
    AluOp,
    UnsupportedOpcode,
    alu_op,
    dtype_of,
    is_alu_opcode,
    pack,
    unpack,
)

pytestmark = pytest.mark.filterwarnings("error")  # fns must never warn

SETTINGS = settings(max_examples=80, deadline=None)

U8, U16, U32, U64 = np.uint8, np.uint16, np.uint32, np.uint64
I8, I16, I32, I64 = np.int8, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64


def run(opcode: str, *srcs, n: int | None = None, carry: bool = False):
    """Build opcode for len(srcs)+1 operands, cast the sources to src_types, run."""
    if n is None:  # the carry flag is a hidden extra source, not an operand
        n = len(srcs) + 1 - int(carry and opcode.startswith(("addc", "subc", "madc")))
    op = alu_op(opcode, n, carry=carry)
    assert isinstance(op, AluOp)
    assert len(op.src_types) == len(srcs), (op.src_types, len(srcs))
    arrs = [np.atleast_1d(_cast(s, dtype_of(t))) for t, s in zip(op.src_types, srcs, strict=True)]
    out = op.fn(*arrs)
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(op.dst_types)
    for t, o in zip(op.dst_types, outs, strict=True):
        assert o.dtype == dtype_of(t), (opcode, t, o.dtype)
    return out


def _cast(s, dt: np.dtype) -> np.ndarray:
    if isinstance(s, list | tuple) and dt.kind in "iu":
        w = dt.itemsize * 8
        return np.array([int(x) & ((1 << w) - 1) for x in s], dtype=f"u{dt.itemsize}").view(dt)
    a = np.asarray(s)
    if a.dtype == dt:
        return a
    if dt.kind in "iu" and a.dtype.kind in "iu":
        return _cast(a.tolist(), dt)
    return a.astype(dt)


def bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view({1: U8, 2: U16, 4: U32, 8: U64}[x.itemsize])


def f32b(v) -> int:
    return int(np.array(v, F32).view(U32))


def f16b(v) -> int:
    return int(np.array(v, F16).view(U16))


def bf16(v: float) -> int:
    """bf16 bits of a value exactly representable in bf16."""
    b = f32b(v)
    assert b & 0xFFFF == 0, v
    return b >> 16


# --------------------------------------------------------------------------
# independent rounding reference: binary search over the encodings

_FMT = {
    # name: (total bits, largest finite magnitude bits, decode(bits) -> Fraction)
    "f64": (64, 0x7FEFFFFFFFFFFFFF, lambda b: Fraction(float(np.array(b, U64).view(F64)))),
    "f32": (32, 0x7F7FFFFF, lambda b: Fraction(float(np.array(b, U32).view(F32)))),
    "f16": (16, 0x7BFF, lambda b: Fraction(float(np.array(b, U16).view(F16)))),
    "bf16": (16, 0x7F7F, lambda b: Fraction(float(np.array(b << 16, U32).view(F32)))),
}


def ref_round(cmp, negative: bool, fmt: str, mode: str) -> int:
    """Bits of the correctly rounded value. ``cmp(x)`` (x a nonnegative Fraction)
    returns the sign of x - |exact|; ``negative`` is the sign of the exact value."""
    nbits, maxb, dec = _FMT[fmt]
    lo, hi = 0, maxb
    if cmp(dec(maxb)) <= 0:
        lo = maxb
    else:
        while lo < hi:  # largest encoding with value <= |exact|
            mid = (lo + hi + 1) // 2
            if cmp(dec(mid)) <= 0:
                lo = mid
            else:
                hi = mid - 1
    if cmp(dec(lo)) == 0:
        r = lo
    else:
        up = lo + 1
        vup = dec(up) if up <= maxb else dec(maxb) + (dec(maxb) - dec(maxb - 1))
        if mode == "rz":
            r = lo
        elif mode == "rn":
            c = cmp((dec(lo) + vup) / 2)
            r = up if c < 0 or (c == 0 and lo & 1) else lo
        elif mode == "rp":
            r = lo if negative else up
        elif mode == "rm":
            r = up if negative else lo
        else:
            raise ValueError(mode)
    return r | ((1 << (nbits - 1)) if negative else 0)


def ref_exact(v: Fraction, fmt: str, mode: str) -> int:
    """Bits of a nonzero exact rational rounded to fmt."""
    assert v != 0
    av = abs(v)
    return ref_round(lambda x: (x > av) - (x < av), v < 0, fmt, mode)


def ref_sqrt(a: Fraction, fmt: str, mode: str) -> int:
    return ref_round(lambda x: (x * x > a) - (x * x < a), False, fmt, mode)


def frac(x) -> Fraction:
    return Fraction(float(x))


f32s = st.floats(width=32, allow_nan=False, allow_infinity=False)
f64s = st.floats(allow_nan=False, allow_infinity=False)
f16s = st.integers(0, 0xFFFF).filter(lambda b: (b & 0x7C00) != 0x7C00).map(
    lambda b: float(np.array(b, U16).view(F16)))
bf16_bits = st.integers(0, 0xFFFF).filter(lambda b: (b & 0x7F80) != 0x7F80)
MODES = ["rn", "rz", "rm", "rp"]


# --------------------------------------------------------------------------
# the API


def test_api_shapes_and_types():
    op = alu_op("mad.wide.s32", 4)
    assert op.opcode == "mad.wide.s32"
    assert op.dst_types == ("s64",) and op.src_types == ("s32", "s32", "s64")
    op = alu_op("setp.lt.and.f32", 4)
    assert op.dst_types == ("pred", "pred") and op.src_types == ("f32", "f32", "pred")
    assert alu_op("cvt.rn.f16x2.f32", 3).src_types == ("f32", "f32")
    assert alu_op("shl.b64", 3).src_types == ("b64", "u32")
    assert alu_op("clz.b64", 2).dst_types == ("u32",)
    assert alu_op("bfi.b32", 5).src_types == ("b32", "b32", "u32", "u32")
    assert alu_op("dp4a.u32.s32", 4).src_types == ("u32", "s32", "s32")
    assert alu_op("slct.f32.s32", 4).src_types == ("f32", "f32", "s32")
    assert dtype_of("bf16") == np.uint16 and dtype_of("f16x2") == np.uint32
    assert dtype_of("pred") == np.bool_ and dtype_of("f16") == np.float16


def test_empty_lanes():
    for opcode, n, t in [("add.s32", 3, I32), ("fma.rn.f64", 4, F64), ("lop3.b32", 5, U32),
                         ("fma.rn.f32", 4, F32), ("cvt.rn.bf16.f32", 2, F32)]:
        op = alu_op(opcode, n)
        srcs = [np.zeros(0, dtype_of(s)) for s in op.src_types]
        out = op.fn(*srcs)
        assert out.shape == (0,) and t is not None


def test_is_alu_opcode():
    for o in ["add.s32", "cvt.rn.f32.s32", "setp.lt.f32", "mov.u64", "prmt.b32", "lop3.b32",
              "vabsdiff4.u32.u32.u32", "addc.u32"]:
        assert is_alu_opcode(o), o
    for o in ["ld.global.f32", "st.shared.u32", "bra", "bar.sync", "atom.add.u32", "ret",
              "shfl.sync.bfly.b32", "vote.sync.ballot.b32", "cvta.to.global.u64", "call.uni",
              "exit", "activemask.b32", "isspacep.global"]:
        assert not is_alu_opcode(o), o


@pytest.mark.parametrize("opcode,n", [
    ("ld.global.f32", 2), ("add.s32", 2), ("add.s32", 4), ("add.wat.f32", 3),
    ("add.sat.u64", 3), ("fma.f32", 4), ("cvt.rn.s32.f32", 2), ("cvt.rni.f32.s32", 2),
    ("setp.lt.f32", 4), ("setp.lt.and.f32", 3), ("setp.lo.f32", 3), ("setp.lt.b32", 3),
    ("sin.f32", 2), ("sin.approx.f64", 2), ("rcp.approx.rn.f32", 2), ("mul.wide.u64", 3),
    ("min.relu.u32", 3), ("cvt.rs.f16x2.f32", 4), ("foo.b32", 3), ("add..s32", 3),
    ("mad.hi.sat.u32", 4), ("abs.u32", 2), ("testp.bogus.f32", 2),
])
def test_unsupported_raises_with_opcode(opcode, n):
    with pytest.raises(UnsupportedOpcode) as ei:
        alu_op(opcode, n)
    assert ei.value.opcode == opcode
    assert opcode in str(ei.value)


@pytest.mark.parametrize("opcode,n", [("add.cc.u32", 3), ("addc.u32", 3), ("addc.cc.u32", 3),
                                      ("sub.cc.u32", 3), ("subc.u32", 3), ("mad.lo.cc.u32", 4),
                                      ("madc.hi.u32", 4), ("madc.lo.cc.u32", 4)])
def test_carry_chains_are_opt_in(opcode, n):
    with pytest.raises(UnsupportedOpcode, match="carry"):
        alu_op(opcode, n)
    op = alu_op(opcode, n, carry=True)
    assert ("cc" in op.src_types) == opcode.startswith(("addc", "subc", "madc"))
    assert ("cc" in op.dst_types) == (".cc" in opcode)


def test_pack_unpack():
    lo = np.array([0x11223344, 0xFFFFFFFF], U32)
    hi = np.array([0x55667788, 0], U32)
    w = pack([lo, hi], "b32", "b64")
    assert w.dtype == U64 and list(w) == [0x5566778811223344, 0x00000000FFFFFFFF]
    p = unpack(w, "b64", "b32", 2)
    assert list(p[0]) == list(lo) and list(p[1]) == list(hi)
    h = unpack(np.array([0x3C00C000], U32), "b32", "f16", 2)
    assert h[0].dtype == F16 and float(h[0][0]) == -2.0 and float(h[1][0]) == 1.0
    assert int(pack(h, "f16", "f16x2")[0]) == 0x3C00C000
    d = pack([np.array([1.5], F32), np.array([-1.0], F32)], "f32", "f64")
    assert int(d.view(U64)[0]) == (f32b(-1.0) << 32) | f32b(1.5)
    parts = unpack(np.array([0x0102030405060708], U64), "b64", "b16", 4)
    assert [int(x[0]) for x in parts] == [0x0708, 0x0506, 0x0304, 0x0102]
    s = unpack(np.array([-2], I64), "s64", "s32", 2)
    assert int(s[0][0]) == -2 and int(s[1][0]) == -1
    with pytest.raises(ValueError):
        pack([lo], "b32", "b64")


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=20))
@SETTINGS
def test_pack_unpack_roundtrip(vals):
    w = np.array(vals, U64)
    for part, n in (("b32", 2), ("b16", 4), ("b8", 8)):
        assert list(pack(unpack(w, "b64", part, n), part, "b64")) == vals


def test_mov_is_identity():
    for t, v in [("u32", np.array([1, 2], U32)), ("f64", np.array([np.nan, -0.0])),
                 ("pred", np.array([True, False])), ("b16", np.array([7], U16)),
                 ("f16", np.array([1.5], F16))]:
        out = run(f"mov.{t}", v)
        assert bits(out).tolist() == bits(v).tolist() if v.dtype != np.bool_ else \
            out.tolist() == v.tolist()


# --------------------------------------------------------------------------
# integer arithmetic

INT_T = {"u16": (16, False), "s16": (16, True), "u32": (32, False), "s32": (32, True),
         "u64": (64, False), "s64": (64, True), "u8": (8, False), "s8": (8, True),
         "b16": (16, False), "b32": (32, False), "b64": (64, False), "b8": (8, False)}


def wrap(v: int, t: str) -> int:
    w, signed = INT_T[t]
    v &= (1 << w) - 1
    if signed and v >= 1 << (w - 1):
        v -= 1 << w
    return v


def ints(t: str):
    w, signed = INT_T[t]
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
    edge = [lo, hi, 0, 1, -1 if signed else hi - 1, lo + 1]
    return st.one_of(st.sampled_from(edge), st.integers(lo, hi))


def vals(out) -> list[int]:
    return [int(x) for x in np.asarray(out).tolist()]


@pytest.mark.parametrize("t", ["u16", "s16", "u32", "s32", "u64", "s64"])
@given(data=st.data())
@SETTINGS
def test_add_sub_mul_wrap(t, data):
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    b = data.draw(st.lists(ints(t), min_size=len(a), max_size=len(a)))
    assert vals(run(f"add.{t}", a, b)) == [wrap(x + y, t) for x, y in zip(a, b, strict=True)]
    assert vals(run(f"sub.{t}", a, b)) == [wrap(x - y, t) for x, y in zip(a, b, strict=True)]
    assert vals(run(f"mul.lo.{t}", a, b)) == [wrap(x * y, t) for x, y in zip(a, b, strict=True)]
    w = INT_T[t][0]
    hi = [wrap((x * y) >> w, t) for x, y in zip(a, b, strict=True)]
    assert vals(run(f"mul.hi.{t}", a, b)) == hi
    if w < 64:
        wt = t[0] + str(2 * w)
        assert vals(run(f"mul.wide.{t}", a, b)) == [x * y for x, y in zip(a, b, strict=True)]
        c = data.draw(st.lists(ints(wt), min_size=len(a), max_size=len(a)))
        assert vals(run(f"mad.wide.{t}", a, b, c)) == [
            wrap(x * y + z, wt) for x, y, z in zip(a, b, c, strict=True)]
    c = data.draw(st.lists(ints(t), min_size=len(a), max_size=len(a)))
    assert vals(run(f"mad.lo.{t}", a, b, c)) == [
        wrap(x * y + z, t) for x, y, z in zip(a, b, c, strict=True)]
    assert vals(run(f"mad.hi.{t}", a, b, c)) == [
        wrap(((x * y) >> w) + z, t) for x, y, z in zip(a, b, c, strict=True)]
    assert vals(run(f"sad.{t}", a, b, c)) == [
        wrap(abs(x - y) + z, t) for x, y, z in zip(a, b, c, strict=True)]


def test_add_sat_s32_and_mad_hi_sat():
    mx, mn = 2**31 - 1, -(2**31)
    assert vals(run("add.sat.s32", [mx, mn, 5, mx], [1, -1, -7, mn])) == [mx, mn, -2, -1]
    assert vals(run("sub.sat.s32", [mn, mx], [1, -1])) == [mn, mx]
    # hi(a*b) + c saturated: hi(2^30 * 2^30 * 2) = 2^29; + max -> saturates
    assert vals(run("mad.hi.sat.s32", [2**30, mn, 3], [8, mn, 4], [mx, mx, -5])) == [
        mx, mx, -5]


def test_packed_16x2():
    a = (0x7FFF << 16) | 0xFFFF
    b = (0x0001 << 16) | 0x0002
    assert vals(run("add.u16x2", [a], [b])) == [(0x8000 << 16) | 0x0001]
    assert vals(run("add.s16x2", [a], [b])) == [(0x8000 << 16) | 0x0001]
    assert vals(run("add.sat.s16x2", [a], [b])) == [(0x7FFF << 16) | 0x0001]
    assert vals(run("sub.u16x2", [b], [a])) == [((1 - 0x7FFF) & 0xFFFF) << 16 | 3]
    assert vals(run("min.u16x2", [a], [b])) == [(1 << 16) | 2]
    assert vals(run("min.s16x2", [a], [b])) == [(1 << 16) | 0xFFFF]
    assert vals(run("max.s16x2", [a], [b])) == [(0x7FFF << 16) | 2]
    assert vals(run("max.relu.s16x2", [0xFFFF8000], [0xFFFE0001])) == [1]
    assert vals(run("min.relu.s32", [-5, 3], [2, 7])) == [0, 3]


def test_carry_chain_128bit_add_and_sub():
    x, y = (2**128 - 3), (2**96 + 5)
    limbs = lambda v: [(v >> (32 * i)) & 0xFFFFFFFF for i in range(4)]  # noqa: E731
    xa, ya = limbs(x), limbs(y)
    r0, c = run("add.cc.u32", [xa[0]], [ya[0]], carry=True)
    r1, c = run("addc.cc.u32", [xa[1]], [ya[1]], c, carry=True)
    r2, c = run("addc.cc.u32", [xa[2]], [ya[2]], c, carry=True)
    r3 = run("addc.u32", [xa[3]], [ya[3]], c, carry=True)
    got = sum(int(r[0]) << (32 * i) for i, r in enumerate([r0, r1, r2, r3]))
    assert got == (x + y) % 2**128
    r0, c = run("sub.cc.u32", [ya[0]], [xa[0]], carry=True)
    r1, c = run("subc.cc.u32", [ya[1]], [xa[1]], c, carry=True)
    r2, c = run("subc.cc.u32", [ya[2]], [xa[2]], c, carry=True)
    r3, c = run("subc.cc.u32", [ya[3]], [xa[3]], c, carry=True)
    got = sum(int(r[0]) << (32 * i) for i, r in enumerate([r0, r1, r2, r3]))
    assert got == (y - x) % 2**128 and int(c[0]) == 1  # borrow out of the top


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
@SETTINGS
def test_carry_chain_64x64_multiply(a, b):
    """The madc example of the PTX ISA: [r3,r2,r1,r0] = [r5,r4] * [r7,r6]."""
    r4, r5, r6, r7 = a & 0xFFFFFFFF, a >> 32, b & 0xFFFFFFFF, b >> 32
    r0 = run("mul.lo.u32", [r4], [r6])
    r1 = run("mul.hi.u32", [r4], [r6])
    r1, c = run("mad.lo.cc.u32", [r5], [r6], r1, carry=True)
    r2 = run("madc.hi.u32", [r5], [r6], [0], c, carry=True)
    r1, c = run("mad.lo.cc.u32", [r4], [r7], r1, carry=True)
    r2, c = run("madc.hi.cc.u32", [r4], [r7], r2, c, carry=True)
    r3 = run("addc.u32", [0], [0], c, carry=True)
    r2, c = run("mad.lo.cc.u32", [r5], [r7], r2, carry=True)
    r3 = run("madc.hi.u32", [r5], [r7], r3, c, carry=True)
    got = sum(int(r[0]) << (32 * i) for i, r in enumerate([r0, r1, r2, r3]))
    assert got == a * b


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=6), st.data())
@SETTINGS
def test_carry_u64(a, data):
    b = data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=len(a), max_size=len(a)))
    cin = data.draw(st.lists(st.integers(0, 1), min_size=len(a), max_size=len(a)))
    r, c = run("addc.cc.u64", a, b, np.array(cin, U32), carry=True)
    assert vals(r) == [(x + y + z) % 2**64 for x, y, z in zip(a, b, cin, strict=True)]
    assert vals(c) == [(x + y + z) >> 64 for x, y, z in zip(a, b, cin, strict=True)]
    r, c = run("subc.cc.u64", a, b, np.array(cin, U32), carry=True)
    assert vals(r) == [(x - y - z) % 2**64 for x, y, z in zip(a, b, cin, strict=True)]
    assert vals(c) == [int(x - y - z < 0) for x, y, z in zip(a, b, cin, strict=True)]


def _mul24(x, y, t, hi):
    def s24(v):
        v &= 0xFFFFFF
        return v - (1 << 24) if t == "s32" and v >= 1 << 23 else v
    p = s24(x) * s24(y)
    return wrap(p >> 16 if hi else p, t)


@pytest.mark.parametrize("t", ["u32", "s32"])
@given(data=st.data())
@SETTINGS
def test_mul24_mad24(t, data):
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    b = data.draw(st.lists(ints(t), min_size=len(a), max_size=len(a)))
    c = data.draw(st.lists(ints(t), min_size=len(a), max_size=len(a)))
    for mode in ("lo", "hi"):
        exp = [_mul24(x, y, t, mode == "hi") for x, y in zip(a, b, strict=True)]
        assert vals(run(f"mul24.{mode}.{t}", a, b)) == exp
        exp = [wrap(_mul24(x, y, t, mode == "hi") + z, t) for x, y, z in zip(a, b, c, strict=True)]
        assert vals(run(f"mad24.{mode}.{t}", a, b, c)) == exp


def _tdiv(x, y):
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


@pytest.mark.parametrize("t", ["u16", "s16", "u32", "s32", "u64", "s64"])
@given(data=st.data())
@SETTINGS
def test_div_rem(t, data):
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    b = data.draw(st.lists(ints(t), min_size=len(a), max_size=len(a)))
    ones = wrap(-1, t)
    q = [ones if y == 0 else wrap(_tdiv(x, y), t) for x, y in zip(a, b, strict=True)]
    r = [ones if y == 0 else wrap(x - _tdiv(x, y) * y, t) for x, y in zip(a, b, strict=True)]
    assert vals(run(f"div.{t}", a, b)) == q
    assert vals(run(f"rem.{t}", a, b)) == r


def test_div_edge_cases():
    mn = -(2**31)
    assert vals(run("div.s32", [mn, 7, -7, 0], [-1, 0, 0, 0])) == [mn, -1, -1, -1]
    assert vals(run("rem.s32", [mn, 7, -7], [-1, 0, 0])) == [0, -1, -1]
    assert vals(run("div.u32", [5], [0])) == [0xFFFFFFFF]
    assert vals(run("rem.u64", [5], [0])) == [2**64 - 1]
    assert vals(run("div.s64", [-(2**63)], [-1])) == [-(2**63)]
    assert vals(run("rem.s32", [-7, 7], [2, -2])) == [-1, 1]


def test_abs_neg_minmax_int():
    mn = -(2**31)
    assert vals(run("abs.s32", [mn, -5, 5, 0])) == [mn, 5, 5, 0]
    assert vals(run("neg.s32", [mn, -5, 0])) == [mn, 5, 0]
    assert vals(run("abs.s16", [-32768, -3])) == [-32768, 3]
    assert vals(run("neg.s64", [-(2**63), 1])) == [-(2**63), -1]
    assert vals(run("min.s32", [-1, 5], [1, 3])) == [-1, 3]
    assert vals(run("min.u32", [0xFFFFFFFF, 5], [1, 3])) == [1, 3]
    assert vals(run("max.u64", [2**64 - 1, 0], [1, 3])) == [2**64 - 1, 3]
    assert vals(run("max.s64", [-(2**63), 0], [1, -3])) == [1, 0]
    assert vals(run("max.s16", [-2], [-3])) == [-2]
    assert vals(run("min.u32", [9, 1], [4, 8], [6, 0], n=4)) == [4, 0]


# --------------------------------------------------------------------------
# bit operations


@pytest.mark.parametrize("t", ["b32", "b64"])
@given(data=st.data())
@SETTINGS
def test_popc_clz_brev_bfind(t, data):
    w = INT_T[t][0]
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    assert vals(run(f"popc.{t}", a)) == [bin(x).count("1") for x in a]
    assert vals(run(f"clz.{t}", a)) == [w - x.bit_length() for x in a]
    assert vals(run(f"brev.{t}", a)) == [int(format(x, f"0{w}b")[::-1], 2) for x in a]
    ut, st_ = "u" + t[1:], "s" + t[1:]
    assert vals(run(f"bfind.{ut}", a)) == [x.bit_length() - 1 if x else 0xFFFFFFFF for x in a]
    assert vals(run(f"bfind.shiftamt.{ut}", a)) == [w - x.bit_length() if x else 0xFFFFFFFF
                                                   for x in a]
    sa = [wrap(x, st_) for x in a]
    nonsign = [(~x if x < 0 else x) for x in sa]
    assert vals(run(f"bfind.{st_}", sa)) == [v.bit_length() - 1 if v else 0xFFFFFFFF
                                             for v in nonsign]


def test_bit_counts_edges():
    assert vals(run("clz.b32", [0, 1, 0x80000000])) == [32, 31, 0]
    assert vals(run("bfind.s32", [0, -1, -2, 1, -(2**31)])) == [0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 30]
    assert vals(run("bfind.shiftamt.u32", [1, 0x80000000])) == [31, 0]
    assert vals(run("brev.b32", [1])) == [0x80000000]


def _bfe_ref(a: int, pos: int, ln: int, t: str) -> int:
    w, signed = INT_T[t]
    msb = w - 1
    pos &= 0xFF
    ln &= 0xFF
    ua = a & ((1 << w) - 1)
    sbit = 0 if (not signed or ln == 0) else (ua >> min(pos + ln - 1, msb)) & 1
    d = 0
    for i in range(w):
        bit = (ua >> (pos + i)) & 1 if (i < ln and pos + i <= msb) else sbit
        d |= bit << i
    return wrap(d, t)


@pytest.mark.parametrize("t", ["u32", "s32", "u64", "s64"])
@given(data=st.data())
@SETTINGS
def test_bfe(t, data):
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    sel = st.one_of(st.integers(0, 70), st.integers(0, 2**32 - 1))
    pos = data.draw(st.lists(sel, min_size=len(a), max_size=len(a)))
    ln = data.draw(st.lists(sel, min_size=len(a), max_size=len(a)))
    exp = [_bfe_ref(x, p, n, t) for x, p, n in zip(a, pos, ln, strict=True)]
    assert vals(run(f"bfe.{t}", a, pos, ln)) == exp


def test_bfe_edges():
    assert vals(run("bfe.u32", [0xABCD1234] * 4, [4, 0, 40, 28], [8, 0, 8, 8])) == [
        0x23, 0, 0, 0xA]
    assert vals(run("bfe.s32", [0xABCD1234 - 2**32] * 3, [28, 40, 4], [8, 8, 0])) == [-6, -1, 0]
    assert vals(run("bfe.s32", [0x80], [4], [0x104])) == [-8]  # len 0x104 & 0xff == 4


def _bfi_ref(a, b, pos, ln, w):
    pos &= 0xFF
    ln &= 0xFF
    f = b
    for i in range(ln):
        if pos + i < w:
            f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
    return f


@pytest.mark.parametrize("t", ["b32", "b64"])
@given(data=st.data())
@SETTINGS
def test_bfi(t, data):
    w = INT_T[t][0]
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    b = data.draw(st.lists(ints(t), min_size=len(a), max_size=len(a)))
    sel = st.one_of(st.integers(0, 70), st.integers(0, 2**32 - 1))
    pos = data.draw(st.lists(sel, min_size=len(a), max_size=len(a)))
    ln = data.draw(st.lists(sel, min_size=len(a), max_size=len(a)))
    exp = [_bfi_ref(x, y, p, n, w) for x, y, p, n in zip(a, b, pos, ln, strict=True)]
    assert vals(run(f"bfi.{t}", a, b, pos, ln)) == exp
    assert vals(run("bfi.b64", [0x11111111], [0xFFFFFFFF22222222], [32], [32])) == [
        0x1111111122222222]


def _bmsk_ref(a, b, mode):
    a1, b1 = a & 31, b & 31
    mask0 = (0xFFFFFFFF << a1) & 0xFFFFFFFF
    s = a1 + b1
    mask1 = (0xFFFFFFFF << s) & 0xFFFFFFFF if s < 32 else 0
    kill = s >= 32
    if mode == "clamp":
        if a >= 32:
            kill = True
            mask0 = 0
        if b >= 32:
            kill = True
    if kill:
        mask1 = 0
    elif b1 == 0:
        mask1 = 0xFFFFFFFF
    return mask0 & ~mask1 & 0xFFFFFFFF


def _szext_ref(a, b, mode, t):
    b1 = b & 31
    too_large = b >= 32 and mode == "clamp"
    mask = 0 if too_large else (0xFFFFFFFF << b1) & 0xFFFFFFFF
    sbit = 0 if (b1 == 0 or too_large or t != "s32") else (a >> ((b1 - 1) & 31)) & 1
    return wrap((a & ~mask) | (mask if sbit else 0), t)


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.one_of(st.integers(0, 40),
                                                                 st.integers(0, 2**32 - 1))),
                min_size=1, max_size=10))
@SETTINGS
def test_bmsk_szext(pairs):
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    for mode in ("clamp", "wrap"):
        assert vals(run(f"bmsk.{mode}.b32", b, a)) == [
            _bmsk_ref(y, x, mode) for x, y in zip(a, b, strict=True)]
        for t in ("u32", "s32"):
            exp = [_szext_ref(x, y, mode, t) for x, y in zip(a, b, strict=True)]
            assert vals(run(f"szext.{mode}.{t}", a, b)) == exp
    assert vals(run("bmsk.wrap.b32", [1], [2])) == [6]
    assert vals(run("szext.wrap.u32", [0xFFFFFFFF], [0])) == [0]


def _fns_ref(mask, base, offset):
    if offset == 0:
        return base if base < 32 and (mask >> base) & 1 else 0xFFFFFFFF
    pos, count, inc = base, abs(offset) - 1, 1 if offset > 0 else -1
    while 0 <= pos < 32:
        if (mask >> pos) & 1:
            if count == 0:
                return pos
            count -= 1
        pos += inc
    return 0xFFFFFFFF


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 31),
                          st.integers(-40, 40)), min_size=1, max_size=10))
@SETTINGS
def test_fns(cases):
    m, b, o = zip(*cases, strict=True)
    assert vals(run("fns.b32", list(m), list(b), list(o))) == [
        _fns_ref(*c) for c in cases]
    assert vals(run("fns.b32", [0xAAAAAAAA] * 4, [3, 3, 2, 2], [1, -1, 1, -1])) == [3, 3, 3, 1]


def test_logic():
    assert vals(run("and.b32", [0xF0F0], [0xFF00])) == [0xF000]
    assert vals(run("or.b16", [0xF0F0], [0x0F00])) == [0xFFF0]
    assert vals(run("xor.b64", [2**64 - 1], [1])) == [2**64 - 2]
    assert vals(run("not.b32", [0])) == [0xFFFFFFFF]
    assert vals(run("cnot.b32", [0, 7])) == [1, 0]
    assert vals(run("cnot.b16", [0, 7])) == [1, 0]
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert run("and.pred", p, q).tolist() == [True, False, False, False]
    assert run("or.pred", p, q).tolist() == [True, True, True, False]
    assert run("xor.pred", p, q).tolist() == [False, True, True, False]
    assert run("not.pred", p).tolist() == [False, False, True, True]


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                          st.integers(0, 2**32 - 1), st.integers(0, 255)),
                min_size=1, max_size=10), st.booleans())
@SETTINGS
def test_lop3_truth_table(cases, uniform):
    if uniform:
        cases = [(a, b, c, cases[0][3]) for a, b, c, _ in cases]
    a, b, c, lut = (list(x) for x in zip(*cases, strict=True))

    def ref(x, y, z, t):
        out = 0
        for i in range(32):
            idx = (((x >> i) & 1) << 2) | (((y >> i) & 1) << 1) | ((z >> i) & 1)
            out |= ((t >> idx) & 1) << i
        return out

    assert vals(run("lop3.b32", a, b, c, lut)) == [ref(*k) for k in cases]


def test_lop3_classic_luts():
    a, b, c = 0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA
    assert vals(run("lop3.b32", [a], [b], [c], [0xF0])) == [a]
    assert vals(run("lop3.b32", [a], [b], [c], [0x96])) == [a ^ b ^ c]
    assert vals(run("lop3.b32", [a], [b], [c], [0xE8])) == [(a & b) | (a & c) | (b & c)]


@pytest.mark.parametrize("t", ["b16", "b32", "b64", "u32", "s32", "s64", "s16", "u16"])
@given(data=st.data())
@SETTINGS
def test_shifts(t, data):
    w, signed = INT_T[t]
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    sh = data.draw(st.lists(st.one_of(st.integers(0, w + 3), st.integers(0, 2**32 - 1)),
                            min_size=len(a), max_size=len(a)))
    if t.startswith("b"):
        assert vals(run(f"shl.{t}", a, sh)) == [wrap(x << min(s, w), t) for x, s in
                                               zip(a, sh, strict=True)]
    ua = [x & ((1 << w) - 1) for x in a]
    exp = [wrap(x >> min(s, w), t) if signed else (u >> min(s, w))
           for x, u, s in zip(a, ua, sh, strict=True)]
    assert vals(run(f"shr.{t}", a, sh)) == exp


def test_shift_edges():
    assert vals(run("shr.s32", [-8, -8, 8], [1, 200, 200])) == [-4, -1, 0]
    assert vals(run("shl.b32", [1, 1], [31, 32])) == [0x80000000, 0]
    assert vals(run("shr.u64", [2**63], [63])) == [1]


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                          st.one_of(st.integers(0, 40), st.integers(0, 2**32 - 1))),
                min_size=1, max_size=10))
@SETTINGS
def test_shf(cases):
    a, b, c = (list(x) for x in zip(*cases, strict=True))
    for mode in ("wrap", "clamp"):
        ns = [min(x, 32) if mode == "clamp" else x & 31 for x in c]
        v = [(y << 32) | x for x, y in zip(a, b, strict=True)]
        assert vals(run(f"shf.l.{mode}.b32", a, b, c)) == [
            ((x << n) >> 32) & 0xFFFFFFFF for x, n in zip(v, ns, strict=True)]
        assert vals(run(f"shf.r.{mode}.b32", a, b, c)) == [
            (x >> n) & 0xFFFFFFFF for x, n in zip(v, ns, strict=True)]


def test_prmt_default_mode():
    a, b = 0x33221100, 0x77665544
    assert vals(run("prmt.b32", [a], [b], [0x3210])) == [a]
    assert vals(run("prmt.b32", [a], [b], [0x7654])) == [b]
    assert vals(run("prmt.b32", [a], [b], [0x0123])) == [0x00112233]
    assert vals(run("prmt.b32", [a], [b], [0x4051])) == [0x44005511]
    # msb of a selector nibble replicates the byte's sign bit
    assert vals(run("prmt.b32", [0x80007F00], [0], [0x8B89])) == [0x00FF0000]
    assert vals(run("prmt.b32", [0x0000807F], [0], [0x9898])) == [0xFF00FF00]


def _prmt_mode_ref(a, b, c, mode):
    v = (b << 32) | a
    byte = lambda i: (v >> (8 * i)) & 0xFF  # noqa: E731
    s = c & 3
    idx = {
        "f4e": [s, s + 1, s + 2, s + 3],
        "b4e": [(s - i) % 8 for i in range(4)],
        "rc8": [s] * 4,
        "ecl": [max(s, i) for i in range(4)],
        "ecr": [min(s, i) for i in range(4)],
        "rc16": [2 * (s & 1), 2 * (s & 1) + 1] * 2,
    }[mode]
    return sum(byte(i) << (8 * k) for k, i in enumerate(idx))


@pytest.mark.parametrize("mode", ["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
def test_prmt_modes(mode):
    a, b = 0x33221100, 0x77665544
    got = vals(run(f"prmt.b32.{mode}", [a] * 8, [b] * 8, list(range(8))))
    assert got == [_prmt_mode_ref(a, b, c, mode) for c in range(8)]


def _prmt_ref(a, b, c, mode):
    if mode:
        return _prmt_mode_ref(a, b, c, mode)
    v = (b << 32) | a
    out = 0
    for k in range(4):
        sel = (c >> (4 * k)) & 0xF
        byte = (v >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * k)
    return out


@pytest.mark.parametrize("mode", [None, "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                          st.integers(0, 2**32 - 1)), min_size=1, max_size=8), st.booleans())
@SETTINGS
def test_prmt_random(mode, cases, uniform):
    if uniform:  # one selector for every lane, like an immediate
        cases = [(a, b, cases[0][2]) for a, b, _ in cases]
    a, b, c = (list(x) for x in zip(*cases, strict=True))
    op = "prmt.b32" + (f".{mode}" if mode else "")
    assert vals(run(op, a, b, c)) == [_prmt_ref(*k, mode) for k in cases]


def test_prmt_mode_tables_from_the_isa():
    a, b = 0x33221100, 0x77665544
    # rows of the PTX ISA table, written d.b3 d.b2 d.b1 d.b0 as source byte numbers
    table = {("f4e", 1): (4, 3, 2, 1), ("b4e", 0): (5, 6, 7, 0), ("b4e", 2): (7, 0, 1, 2),
             ("rc8", 2): (2, 2, 2, 2), ("ecl", 1): (3, 2, 1, 1), ("ecr", 2): (2, 2, 1, 0),
             ("rc16", 1): (3, 2, 3, 2), ("rc16", 2): (1, 0, 1, 0)}
    v = (b << 32) | a
    for (mode, c), order in table.items():
        exp = sum(((v >> (8 * src)) & 0xFF) << (8 * (3 - k)) for k, src in enumerate(order))
        assert vals(run(f"prmt.b32.{mode}", [a], [b], [c])) == [exp], (mode, c)


def _lanes_ref(x, bits, signed):
    out = []
    for i in range(32 // bits):
        v = (x >> (i * bits)) & ((1 << bits) - 1)
        if signed and v >= 1 << (bits - 1):
            v -= 1 << bits
        out.append(v)
    return out


@pytest.mark.parametrize("ta,tb", [("u32", "u32"), ("s32", "s32"), ("u32", "s32"),
                                   ("s32", "u32")])
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                          st.integers(0, 2**32 - 1)), min_size=1, max_size=8))
@SETTINGS
def test_dp4a_dp2a(ta, tb, cases):
    ct = "u32" if ta == tb == "u32" else "s32"
    a, b, c = (list(x) for x in zip(*cases, strict=True))
    exp = []
    for x, y, z in cases:
        va, vb = _lanes_ref(x, 8, ta == "s32"), _lanes_ref(y, 8, tb == "s32")
        exp.append(wrap(wrap(z, ct) + sum(p * q for p, q in zip(va, vb, strict=True)), ct))
    assert vals(run(f"dp4a.{ta}.{tb}", a, b, c)) == exp
    for half, first in (("lo", 0), ("hi", 2)):
        exp = []
        for x, y, z in cases:
            va, vb = _lanes_ref(x, 16, ta == "s32"), _lanes_ref(y, 8, tb == "s32")
            exp.append(wrap(wrap(z, ct) + va[0] * vb[first] + va[1] * vb[first + 1], ct))
        assert vals(run(f"dp2a.{half}.{ta}.{tb}", a, b, c)) == exp


def test_dp4a_hand():
    # (1,2,3,4) . (-1,-1,-1,-1) + 100
    assert vals(run("dp4a.u32.s32", [0x04030201], [0xFFFFFFFF], [100])) == [90]
    assert vals(run("dp4a.u32.u32", [0x04030201], [0xFFFFFFFF], [0])) == [10 * 255]


@pytest.mark.parametrize("op", ["vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax"])
@pytest.mark.parametrize("k", [2, 4])
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                          st.integers(0, 2**32 - 1)), min_size=1, max_size=5),
       st.sampled_from(["u32", "s32"]), st.sampled_from(["", ".sat", ".add"]))
@settings(max_examples=25, deadline=None)
def test_video_simd(op, k, cases, t, variant):
    bits_ = 32 // k
    f = {"vadd": lambda x, y: x + y, "vsub": lambda x, y: x - y,
         "vavrg": lambda x, y: (x + y + 1) >> 1 if x + y >= 0 else (x + y) >> 1,
         "vabsdiff": lambda x, y: abs(x - y), "vmin": min, "vmax": max}[op]
    signed = t == "s32"
    lo, hi = (-(1 << (bits_ - 1)), (1 << (bits_ - 1)) - 1) if signed else (0, (1 << bits_) - 1)
    exp = []
    for x, y, z in cases:
        rs = [f(p, q) for p, q in zip(_lanes_ref(x, bits_, signed), _lanes_ref(y, bits_, signed),
                                      strict=True)]
        if variant == ".add":
            exp.append(wrap(wrap(z, t) + sum(rs), t))
            continue
        if variant == ".sat":
            rs = [min(max(r, lo), hi) for r in rs]
        exp.append(wrap(sum((r & ((1 << bits_) - 1)) << (i * bits_) for i, r in enumerate(rs)), t))
    a, b, c = (list(x) for x in zip(*cases, strict=True))
    assert vals(run(f"{op}{k}.{t}.{t}.{t}{variant}", a, b, c)) == exp


def test_vset():
    assert vals(run("vset4.u32.u32.lt", [0x01020304], [0x04030201], [0])) == [0x01010000]
    assert vals(run("vset2.s32.s32.ge.add", [0xFFFF0001], [0x00010001], [10])) == [11]


# --------------------------------------------------------------------------
# floating point: correctly rounded arithmetic in every mode

_SIGNBIT = {"f64": 1 << 63, "f32": 1 << 31, "f16": 1 << 15, "bf16": 1 << 15}


def _zero_sum_sign(signs: list[bool], all_zero: bool, mode: str) -> bool:
    """Sign of an exact zero sum (IEEE 754): addends all zero -> and/or of their
    signs; cancellation of nonzero addends -> +0 except in round-down."""
    if all_zero:
        return any(signs) if mode == "rm" else all(signs)
    return mode == "rm"


def ref_arith(kind: str, xs: list[float], fmt: str, mode: str) -> int:
    """Bits of the correctly rounded result of a finite-operand op."""
    fr = [Fraction(x) for x in xs]
    sg = [math.copysign(1.0, x) < 0 for x in xs]
    if kind == "add":
        exact = fr[0] + fr[1]
        zsign = _zero_sum_sign(sg, fr[0] == 0 and fr[1] == 0, mode)
    elif kind == "sub":
        exact = fr[0] - fr[1]
        zsign = _zero_sum_sign([sg[0], not sg[1]], fr[0] == 0 and fr[1] == 0, mode)
    elif kind == "mul":
        exact = fr[0] * fr[1]
        zsign = sg[0] != sg[1]
    elif kind == "div":
        exact = fr[0] / fr[1]
        zsign = sg[0] != sg[1]
    elif kind == "fma":
        prod = fr[0] * fr[1]
        exact = prod + fr[2]
        zsign = _zero_sum_sign([sg[0] != sg[1], sg[2]], prod == 0 and fr[2] == 0, mode)
    else:
        raise ValueError(kind)
    if exact == 0:
        return _SIGNBIT[fmt] if zsign else 0
    return ref_exact(exact, fmt, mode)


def _cols(cases):
    return [list(c) for c in zip(*cases, strict=True)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div"])
@given(st.lists(st.tuples(f32s, f32s), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_f32_arith_rounding(kind, mode, cases):
    if kind == "div":
        cases = [(a, b) for a, b in cases if b != 0]
        assume(cases)
    a, b = _cols(cases)
    out = run(f"{kind}.{mode}.f32", np.array(a, F32), np.array(b, F32))
    exp = [ref_arith(kind, [x, y], "f32", mode) for x, y in cases]
    assert bits(out).tolist() == exp


@pytest.mark.parametrize("mode", MODES)
@given(st.lists(st.tuples(f32s, f32s, f32s), min_size=1, max_size=6))
@settings(max_examples=80, deadline=None)
def test_f32_fma_rounding(mode, cases):
    a, b, c = (np.array(x, F32) for x in _cols(cases))
    exp = [ref_arith("fma", list(k), "f32", mode) for k in cases]
    assert bits(run(f"fma.{mode}.f32", a, b, c)).tolist() == exp
    assert bits(run(f"mad.{mode}.f32", a, b, c)).tolist() == exp


@pytest.mark.parametrize("mode", MODES)
@given(st.lists(st.tuples(f32s, st.integers(-30, 30), st.integers(-3, 3)), min_size=1,
                max_size=6))
@settings(max_examples=80, deadline=None)
def test_f32_fma_cancellation(mode, cases):
    """c close to -a*b: results far below the operands, exact zeros, tiny residues."""
    rows = []
    for a, e, k in cases:
        assume(abs(a) < 1e28)
        b = np.float32(math.ldexp(1.0, e) * 1.5)
        c = -np.float32(float(np.float32(a)) * float(b))
        for _ in range(abs(k)):
            c = np.nextafter(c, np.float32(math.copysign(np.inf, k)))
        rows.append((float(np.float32(a)), float(b), float(c)))
    a, b, c = (np.array(x, F32) for x in _cols(rows))
    exp = [ref_arith("fma", list(r), "f32", mode) for r in rows]
    assert bits(run(f"fma.{mode}.f32", a, b, c)).tolist() == exp


def test_f32_fma_no_double_rounding():
    # exact = 1 + 2^-23 + 2^-24 - 9*2^-70: just below the midpoint of two floats;
    # rounding to double first lands on the midpoint, which ties to the wrong one.
    a = np.array([(2**23 + 3) * 2.0**-35], F32)
    b = np.array([(2**23 - 3) * 2.0**-35], F32)
    c = np.array([1 + 2.0**-23], F32)
    assert float(a[0]) * float(b[0]) + float(c[0]) == 1 + 2.0**-23 + 2.0**-24
    assert f32b(run("fma.rn.f32", a, b, c)[0]) == f32b(1 + 2.0**-23)
    assert f32b(run("fma.rp.f32", a, b, c)[0]) == f32b(1 + 2.0**-22)
    assert f32b(run("fma.rz.f32", a, b, c)[0]) == f32b(1 + 2.0**-23)


@pytest.mark.parametrize("mode", MODES)
@given(st.lists(f32s.filter(lambda x: x >= 0), min_size=1, max_size=6))
@settings(max_examples=80, deadline=None)
def test_f32_sqrt_rcp_rounding(mode, xs):
    out = run(f"sqrt.{mode}.f32", np.array(xs, F32))
    exp = [ref_sqrt(Fraction(x), "f32", mode) if x else f32b(x) for x in xs]
    assert bits(out).tolist() == exp
    nz = [x for x in xs if x != 0]
    if nz:
        out = run(f"rcp.{mode}.f32", np.array(nz, F32))
        assert bits(out).tolist() == [ref_exact(1 / Fraction(x), "f32", mode) for x in nz]


def test_f32_specials():
    inf = np.inf
    a = np.array([inf, inf, 0.0, -0.0, 1.0, -0.0, 3.0], F32)
    b = np.array([-inf, inf, inf, 0.0, 0.0, -0.0, -3.0], F32)
    add = run("add.f32", a, b)
    assert bits(add).tolist()[0] == 0x7FFFFFFF  # inf - inf: the canonical NaN
    assert add.tolist()[1:] == [inf, inf, 0.0, 1.0, -0.0, 0.0]
    assert math.copysign(1, add[3]) == 1 and math.copysign(1, add[5]) == -1
    mul = run("mul.rn.f32", a, b)
    assert bits(mul)[2] == 0x7FFFFFFF and mul[0] == -inf and mul[4] == 0
    div = run("div.rn.f32", np.array([1, -1, 0, inf, 1], F32), np.array([0, 0, 0, inf, -inf], F32))
    assert div[0] == inf and div[1] == -inf and bits(div)[2] == 0x7FFFFFFF
    assert bits(div)[3] == 0x7FFFFFFF and bits(div)[4] == f32b(-0.0)
    # an input NaN payload is not propagated either
    qnan = np.array([0x7FC12345], U32).view(F32)
    assert bits(run("add.f32", qnan, np.array([1], F32))).tolist() == [0x7FFFFFFF]
    assert bits(run("sqrt.rn.f32", np.array([-1, -0.0, inf], F32))).tolist() == [
        0x7FFFFFFF, f32b(-0.0), f32b(inf)]


def test_f32_overflow_directed():
    big = np.array([3e38, -3e38], F32)
    assert run("add.rn.f32", big, big).tolist() == [np.inf, -np.inf]
    assert run("add.rz.f32", big, big).tolist() == [3.4028234663852886e38, -3.4028234663852886e38]
    assert run("add.rm.f32", big, big).tolist() == [3.4028234663852886e38, -np.inf]
    assert run("add.rp.f32", big, big).tolist() == [np.inf, -3.4028234663852886e38]
    assert run("mul.rz.f32", big, big).tolist() == [3.4028234663852886e38] * 2


def test_exact_zero_sum_sign():
    one = np.array([1.0, -0.0, -0.0], F32)
    neg = np.array([-1.0, 0.0, -0.0], F32)
    for mode in ("rn", "rz", "rp"):
        assert np.signbit(run(f"add.{mode}.f32", one, neg)).tolist() == [False, False, True]
    assert np.signbit(run("add.rm.f32", one, neg)).tolist() == [True, True, True]
    assert np.signbit(run("sub.rm.f64", np.array([2.0]), np.array([2.0]))).tolist() == [True]
    assert np.signbit(run("fma.rm.f64", np.array([2.0]), np.array([3.0]),
                          np.array([-6.0]))).tolist() == [True]
    assert np.signbit(run("fma.rn.f32", np.array([2.0], F32), np.array([3.0], F32),
                          np.array([-6.0], F32))).tolist() == [False]


def test_ftz_and_sat_f32():
    sub = np.float32(1e-40)
    a = np.array([sub, -sub, 1.0, 2.0, -1.0, np.nan, -0.0], F32)
    z = np.zeros(7, F32)
    r = run("mul.ftz.f32", a, np.ones(7, F32))
    assert bits(r).tolist()[:2] == [0, 0x80000000]
    assert bits(run("add.ftz.f32", a, z)).tolist()[:2] == [0, 0]  # -0 + +0 = +0
    r = run("add.f32", a, z)
    assert r[0] == sub
    r = run("add.sat.f32", a, z)
    assert r.tolist()[2:] == [1.0, 1.0, 0.0, 0.0, 0.0] and not np.signbit(r[6])
    # a subnormal *result* is flushed too, keeping its sign
    tiny = np.array([1e-20, -1e-20], F32)
    small = np.full(2, 1e-19, F32)
    assert bits(run("mul.rn.ftz.f32", tiny, small)).tolist() == [0, 0x80000000]
    assert run("mul.rn.f32", tiny, small)[0] != 0
    r = run("fma.rn.ftz.sat.f32", np.array([0.5], F32), np.array([4], F32), np.array([0], F32))
    assert r.tolist() == [1.0]


# -- float64


f64_wide = st.one_of(
    f64s,
    st.builds(lambda m, e: math.ldexp(m, e), st.floats(-1, 1, exclude_min=True, exclude_max=True),
              st.integers(-1100, 1024)),
)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div"])
@given(st.lists(st.tuples(f64_wide, f64_wide), min_size=1, max_size=5))
@settings(max_examples=60, deadline=None)
def test_f64_arith_rounding(kind, mode, cases):
    if kind == "div":
        cases = [(a, b) for a, b in cases if b != 0]
        assume(cases)
    a, b = _cols(cases)
    out = run(f"{kind}.{mode}.f64", np.array(a), np.array(b))
    assert bits(out).tolist() == [ref_arith(kind, [x, y], "f64", mode) for x, y in cases]


@pytest.mark.parametrize("mode", MODES)
@given(st.lists(st.tuples(f64_wide, f64_wide, f64_wide), min_size=1, max_size=5))
@settings(max_examples=100, deadline=None)
def test_f64_fma_rounding(mode, cases):
    a, b, c = (np.array(x) for x in _cols(cases))
    exp = [ref_arith("fma", list(k), "f64", mode) for k in cases]
    assert bits(run(f"fma.{mode}.f64", a, b, c)).tolist() == exp


@pytest.mark.parametrize("mode", MODES)
@given(st.lists(st.tuples(f64s, f64s, st.integers(-4, 4), st.integers(-60, 0)),
                min_size=1, max_size=5))
@settings(max_examples=100, deadline=None)
def test_f64_fma_near_cancellation(mode, cases):
    rows = []
    for a, b, k, e in cases:
        p = a * b
        assume(math.isfinite(p))
        c = -p + k * math.ldexp(abs(p), e - 52) if p else float(k)
        assume(math.isfinite(c))
        rows.append((a, b, c))
    a, b, c = (np.array(x) for x in _cols(rows))
    exp = [ref_arith("fma", list(r), "f64", mode) for r in rows]
    assert bits(run(f"fma.{mode}.f64", a, b, c)).tolist() == exp


def test_f64_fma_hard_cases():
    # (1 + 2^-52)(1 - 2^-53) - 1 = 2^-53 - 2^-105: lost entirely without fusing
    r = run("fma.rn.f64", np.array([1 + 2.0**-52]), np.array([1 - 2.0**-53]), np.array([-1.0]))
    assert r[0] == 2.0**-53 - 2.0**-105
    # product overflows, the sum does not
    r = run("fma.rn.f64", np.array([1e308, 1e300]), np.array([2.0, 3e8]),
            np.array([-1e308, -1.7e308]))
    assert r.tolist() == [1e308, float(Fraction(1e300) * Fraction(3e8) - Fraction(1.7e308))]
    # subnormal result of a subnormal product plus a tiny addend
    a, b, c = 2.0**-600, 2.0**-480 * 3, 2.0**-1074
    exp = ref_arith("fma", [a, b, c], "f64", "rn")
    assert bits(run("fma.rn.f64", np.array([a]), np.array([b]), np.array([c]))).tolist() == [exp]
    inf, nan = np.inf, np.nan
    r = run("fma.rn.f64", np.array([inf, 0, 1e300, 2.0, nan]), np.array([0, inf, 1e300, 3.0, 1]),
            np.array([1, 1, -inf, inf, 1]))
    assert np.isnan(r[0]) and np.isnan(r[1]) and r[2] == -inf and r[3] == inf and np.isnan(r[4])


@pytest.mark.parametrize("mode", MODES)
@given(st.lists(f64_wide.filter(lambda x: x > 0), min_size=1, max_size=5))
@settings(max_examples=80, deadline=None)
def test_f64_sqrt_rcp_rounding(mode, xs):
    out = run(f"sqrt.{mode}.f64", np.array(xs))
    assert bits(out).tolist() == [ref_sqrt(Fraction(x), "f64", mode) for x in xs]
    out = run(f"rcp.{mode}.f64", np.array(xs))
    assert bits(out).tolist() == [ref_exact(1 / Fraction(x), "f64", mode) for x in xs]


def test_f64_directed_overflow_underflow():
    m = np.finfo(F64).max
    assert run("mul.rz.f64", np.array([m]), np.array([2.0])).tolist() == [m]
    assert run("mul.rp.f64", np.array([m]), np.array([2.0])).tolist() == [np.inf]
    assert run("div.rm.f64", np.array([-m]), np.array([0.5])).tolist() == [-np.inf]
    assert run("div.rz.f64", np.array([-m]), np.array([0.5])).tolist() == [-m]
    t = 5e-324
    assert run("mul.rp.f64", np.array([t]), np.array([0.5])).tolist() == [t]
    assert run("mul.rn.f64", np.array([t]), np.array([0.5])).tolist() == [0.0]
    assert run("div.rm.f64", np.array([-t]), np.array([4.0])).tolist() == [-t]
    assert run("add.rp.f64", np.array([1.0]), np.array([t])).tolist() == [1 + 2.0**-52]


# -- f16 / bf16 and the packed pairs


def _h(xs) -> np.ndarray:
    return np.array(xs, F16)


def _bf(bits_list) -> np.ndarray:
    return np.array(bits_list, U16)


def _bf_val(b: int) -> float:
    return float(np.array(b << 16, U32).view(F32))


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "fma"])
@given(st.lists(st.tuples(f16s, f16s, f16s), min_size=1, max_size=6))
@settings(max_examples=80, deadline=None)
def test_f16_arith(kind, cases):
    n = 3 if kind == "fma" else 2
    cols = [_h(c) for c in _cols(cases)][:n]
    op = f"{kind}.rn.f16"
    exp = [ref_arith(kind, [float(F16(x)) for x in k[:n]], "f16", "rn") for k in cases]
    assert bits(run(op, *cols)).tolist() == exp
    # the same through the packed f16x2 form: lanes (lo, hi) = (x, reversed x)
    packed = [pack([c, c[::-1]], "f16", "f16x2") for c in cols]
    lo, hi = unpack(run(f"{kind}.rn.f16x2", *packed), "f16x2", "f16", 2)
    assert bits(lo).tolist() == exp and bits(hi).tolist() == exp[::-1]


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "fma"])
@given(st.lists(st.tuples(bf16_bits, bf16_bits, bf16_bits), min_size=1, max_size=6))
@settings(max_examples=80, deadline=None)
def test_bf16_arith(kind, cases):
    n = 3 if kind == "fma" else 2
    cols = [_bf(c) for c in _cols(cases)][:n]
    exp = [ref_arith(kind, [_bf_val(x) for x in k[:n]], "bf16", "rn") for k in cases]
    assert run(f"{kind}.rn.bf16", *cols).tolist() == exp
    packed = [pack([c, c[::-1]], "bf16", "bf16x2") for c in cols]
    lo, hi = unpack(run(f"{kind}.rn.bf16x2", *packed), "bf16x2", "bf16", 2)
    assert lo.tolist() == exp and hi.tolist() == exp[::-1]


def test_f16_fma_no_double_rounding():
    # a*b + c = 1 + 2^-10 + 2^-11 - 9*2^-31: just below the midpoint of two halves;
    # its float32 rounding is the midpoint, which would tie to the wrong half
    a = _h([(2**10 + 3) * 2.0**-15])
    b = _h([(2**10 - 3) * 2.0**-16])
    c = _h([1 + 2.0**-10])
    exact = Fraction(float(a[0])) * Fraction(float(b[0])) + Fraction(float(c[0]))
    assert float(F32(float(exact))) == 1 + 2.0**-10 + 2.0**-11
    assert bits(run("fma.rn.f16", a, b, c)).tolist() == [ref_exact(exact, "f16", "rn")]
    assert bits(run("fma.rn.f16", a, b, c)).tolist() == [f16b(1 + 2.0**-10)]


def test_half_modifiers():
    x = _h([0.75, -0.5, 2.0, np.nan, 7e-5, 3e-8])
    y = _h([0.5, 0.25, 1.0, 1.0, 0.0, 0.0])
    assert run("add.sat.f16", x, y).tolist()[:4] == [1.0, 0.0, 1.0, 0.0]
    r = run("add.ftz.f16", x, y)
    assert float(r[4]) == float(F16(7e-5)) and bits(r)[5] == 0  # 7e-5 is normal in f16
    assert bits(run("add.f16", x, y))[5] != 0
    r = run("fma.rn.relu.f16", x, _h([1] * 6), _h([0] * 6))
    assert bits(r).tolist()[:4] == [f16b(0.75), 0, f16b(2.0), 0x7FFF]
    r = run("fma.rn.relu.bf16", _bf([bf16(-2.0), bf16(3.0)]), _bf([bf16(1.0)] * 2),
            _bf([0, 0]))
    assert r.tolist() == [0, bf16(3.0)]
    assert bits(run("mul.f16", _h([np.inf]), _h([0]))).tolist() == [0x7FFF]
    assert run("add.bf16", _bf([0x7F80]), _bf([0xFF80])).tolist() == [0x7FFF]
    assert run("add.rn.bf16", _bf([bf16(1.0)]), _bf([bf16(2.0**-8)])).tolist() == [bf16(1.0)]
    h2 = pack([_h([1e-6]), _h([-1e-6])], "f16", "f16x2")
    lo, hi = unpack(run("mul.ftz.f16x2", h2, pack([_h([1])] * 2, "f16", "f16x2")), "f16x2",
                    "f16", 2)
    assert bits(lo).tolist() == [0] and bits(hi).tolist() == [0x8000]


# --------------------------------------------------------------------------
# min / max, abs / neg, copysign, testp


def test_float_min_max():
    nan, inf = np.nan, np.inf
    a = np.array([nan, 1.0, nan, 0.0, -0.0, -inf, 2.0], F32)
    b = np.array([1.0, nan, nan, -0.0, 0.0, 3.0, -2.0], F32)
    mn = run("min.f32", a, b)
    assert mn.tolist()[:2] == [1.0, 1.0] and bits(mn)[2] == 0x7FFFFFFF
    assert np.signbit(mn[3]) and np.signbit(mn[4]) and mn.tolist()[5:] == [-inf, -2.0]
    mx = run("max.f32", a, b)
    assert mx.tolist()[:2] == [1.0, 1.0] and bits(mx)[2] == 0x7FFFFFFF
    assert not np.signbit(mx[3]) and not np.signbit(mx[4]) and mx.tolist()[5:] == [3.0, 2.0]
    mn = run("min.NaN.f32", a, b)
    assert bits(mn).tolist()[:3] == [0x7FFFFFFF] * 3 and mn.tolist()[5:] == [-inf, -2.0]
    d = run("max.f64", np.array([nan, 1.0]), np.array([5.0, nan]))
    assert d.tolist() == [5.0, 1.0]
    r = run("min.f32", np.array([3, nan], F32), np.array([1, nan], F32),
            np.array([2, 7], F32), n=4)
    assert r.tolist() == [1.0, 7.0]
    r = run("min.ftz.f32", np.array([-1e-40], F32), np.array([0.0], F32))
    assert bits(r).tolist() == [0x80000000]
    # .xorsign.abs: min(|a|, |b|) with sign(a) ^ sign(b)
    r = run("max.xorsign.abs.f32", np.array([-3, 2, -1], F32), np.array([2, -5, -0.5], F32))
    assert r.tolist() == [-3.0, -5.0, 1.0]
    r = run("min.xorsign.abs.f16", _h([-3]), _h([2]))
    assert r.tolist() == [-2.0]


@pytest.mark.parametrize("t,dt", [("f32", F32), ("f64", F64), ("f16", F16)])
@pytest.mark.parametrize("op", ["min", "max", "min.NaN", "max.NaN"])
def test_float_min_max_table(t, dt, op):
    if t == "f64" and "NaN" in op:
        return
    pairs = [(x, y) for x in _FEDGE for y in _FEDGE]
    a = np.array([p[0] for p in pairs], dt)
    b = np.array([p[1] for p in pairs], dt)
    nan_prop = "NaN" in op
    for args in ((a, b), (a, b, b)):
        got = run(f"{op}.{t}", *args, n=len(args) + 1)
        for g, x, y in zip(got, a, b, strict=True):
            x, y = float(x), float(y)
            if math.isnan(x) and math.isnan(y) or nan_prop and (math.isnan(x) or math.isnan(y)):
                assert math.isnan(g)
                continue
            if math.isnan(x) or math.isnan(y):
                e = y if math.isnan(x) else x
            elif x == y == 0:
                neg = (math.copysign(1, x) < 0, math.copysign(1, y) < 0)
                e = -0.0 if (any(neg) if op.startswith("min") else all(neg)) else 0.0
            else:
                e = min(x, y) if op.startswith("min") else max(x, y)
            assert float(g) == e and math.copysign(1, g) == math.copysign(1, e), (x, y, g)
        if t != "f64":
            nanbits = bits(got)[np.isnan(got)]
            assert (nanbits == {"f32": 0x7FFFFFFF, "f16": 0x7FFF}[t]).all()


def test_half_min_max():
    a, b = _h([np.nan, 2.0, -1.0]), _h([1.0, np.nan, -2.0])
    assert run("min.f16", a, b).tolist() == [1.0, 2.0, -2.0]
    assert bits(run("max.NaN.f16", a, b)).tolist()[:2] == [0x7FFF, 0x7FFF]
    ab = _bf([0x7FC0, bf16(2.0), bf16(-1.0)])
    bb = _bf([bf16(1.0), bf16(3.0), bf16(-2.0)])
    assert run("max.bf16", ab, bb).tolist() == [bf16(1.0), bf16(3.0), bf16(-1.0)]
    assert run("min.NaN.bf16", ab, bb).tolist()[0] == 0x7FFF
    h2a = pack([_h([1.0]), _h([-4.0])], "f16", "f16x2")
    h2b = pack([_h([3.0]), _h([-5.0])], "f16", "f16x2")
    lo, hi = unpack(run("max.f16x2", h2a, h2b), "f16x2", "f16", 2)
    assert lo.tolist() == [3.0] and hi.tolist() == [-4.0]


def test_abs_neg_float():
    a = np.array([-1.5, 0.0, -0.0, np.inf, -1e-40], F32)
    assert bits(run("abs.f32", a)).tolist() == [f32b(1.5), 0, 0, f32b(np.inf), f32b(1e-40)]
    assert bits(run("neg.f32", a)).tolist() == [f32b(1.5), 0x80000000, 0, f32b(-np.inf),
                                                f32b(1e-40)]
    assert bits(run("abs.ftz.f32", a))[4] == 0 and bits(run("neg.ftz.f32", a))[4] == 0
    nan = np.array([0xFFC01234], U32).view(F32)
    assert bits(run("abs.f32", nan)).tolist() == [0x7FC01234]  # a sign-bit operation
    assert run("neg.f64", np.array([2.0, -0.0])).tolist() == [-2.0, 0.0]
    assert run("abs.bf16", _bf([0xBF80])).tolist() == [0x3F80]
    assert run("neg.f16", _h([2.0])).tolist() == [-2.0]
    h2 = pack([_h([1.0]), _h([-4.0])], "f16", "f16x2")
    lo, hi = unpack(run("neg.f16x2", h2), "f16x2", "f16", 2)
    assert lo.tolist() == [-1.0] and hi.tolist() == [4.0]
    lo, hi = unpack(run("abs.bf16x2", np.array([0xBF80C000], U32)), "bf16x2", "bf16", 2)
    assert lo.tolist() == [0x4000] and hi.tolist() == [0x3F80]


def test_copysign():
    # copysign.type d, a, b: b's magnitude with a's sign
    r = run("copysign.f32", np.array([-1.0, 1.0, -0.0], F32), np.array([2.0, -3.0, 5.0], F32))
    assert r.tolist() == [-2.0, 3.0, -5.0]
    r = run("copysign.f64", np.array([-1.0]), np.array([np.nan]))
    assert np.isnan(r[0]) and np.signbit(r[0])


def test_testp():
    x = np.array([1.0, 0.0, -0.0, 1e-40, np.inf, -np.inf, np.nan, -3e38], F32)
    exp = {
        "finite": [1, 1, 1, 1, 0, 0, 0, 1], "infinite": [0, 0, 0, 0, 1, 1, 0, 0],
        "number": [1, 1, 1, 1, 1, 1, 0, 1], "notanumber": [0, 0, 0, 0, 0, 0, 1, 0],
        "normal": [1, 0, 0, 0, 0, 0, 0, 1], "subnormal": [0, 0, 0, 1, 0, 0, 0, 0],
    }
    for op, e in exp.items():
        assert run(f"testp.{op}.f32", x).tolist() == [bool(v) for v in e], op
    assert run("testp.subnormal.f64", np.array([1e-310, 1e-300])).tolist() == [True, False]


# --------------------------------------------------------------------------
# approximate functions and the rest of the float unary ops


def _ulps32(got, exact: float) -> float:
    g = float(got)
    if g == exact:
        return 0.0
    return abs(g - exact) / float(np.spacing(np.float32(abs(exact))))


@given(st.lists(st.floats(-100, 100, width=32), min_size=1, max_size=10))
@SETTINGS
def test_approx_transcendentals_f32(xs):
    x = np.array(xs, F32)
    for op, f, bound in [("sin", math.sin, 2.0**-20.9), ("cos", math.cos, 2.0**-20.9)]:
        r = run(f"{op}.approx.f32", x)
        assert all(abs(float(g) - f(float(v))) <= bound for g, v in zip(r, x, strict=True))
    r = run("ex2.approx.ftz.f32", x)
    assert all(_ulps32(g, 2.0 ** float(v)) <= 2 for g, v in zip(r, x, strict=True))
    pos = np.abs(x) + np.float32(1e-3)
    r = run("lg2.approx.f32", pos)
    assert all(abs(float(g) - math.log2(float(v))) <= 2.0**-22 * max(1, abs(math.log2(float(v))))
               for g, v in zip(r, pos, strict=True))
    r = run("rsqrt.approx.f32", pos)
    assert all(_ulps32(g, 1 / math.sqrt(float(v))) <= 2 for g, v in zip(r, pos, strict=True))
    r = run("tanh.approx.f32", x)
    assert all(abs(float(g) - math.tanh(float(v))) <= 2.0**-10.987 * max(1, abs(math.tanh(v)))
               for g, v in zip(r, x, strict=True))
    r = run("rcp.approx.ftz.f32", pos)
    assert all(_ulps32(g, 1 / float(v)) <= 1 for g, v in zip(r, pos, strict=True))
    r = run("sqrt.approx.f32", pos)
    assert all(_ulps32(g, math.sqrt(float(v))) <= 1 for g, v in zip(r, pos, strict=True))


def test_approx_special_values():
    inf, nan = np.inf, np.nan
    x = np.array([0.0, -0.0, inf, -inf, nan, -1.0], F32)
    assert np.isnan(run("sin.approx.f32", x)[2:5]).all()
    assert run("lg2.approx.f32", x).tolist()[:3] == [-inf, -inf, inf]
    assert np.isnan(run("lg2.approx.f32", x)[5])
    assert run("ex2.approx.f32", x).tolist()[:4] == [1.0, 1.0, inf, 0.0]
    assert run("rsqrt.approx.f32", x).tolist()[:3] == [inf, -inf, 0.0]
    assert run("rcp.approx.f32", x).tolist()[:4] == [inf, -inf, 0.0, -0.0]
    assert run("tanh.approx.f32", x).tolist()[2:4] == [1.0, -1.0]
    r = run("rcp.approx.ftz.f64", np.array([4.0, 1e-310, 0.0]))
    assert r.tolist() == [0.25, inf, inf]
    r = run("rsqrt.approx.f64", np.array([4.0, 0.0]))
    assert r.tolist() == [0.5, inf]
    assert bits(run("ex2.approx.f32", np.array([nan], F32))).tolist() == [0x7FFFFFFF]
    r = run("ex2.approx.f16", _h([1.0, -1.0, 10.0]))
    assert r.tolist() == [2.0, 0.5, 1024.0]
    lo, hi = unpack(run("ex2.approx.f16x2", pack([_h([3.0]), _h([0.0])], "f16", "f16x2")),
                    "f16x2", "f16", 2)
    assert lo.tolist() == [8.0] and hi.tolist() == [1.0]
    assert run("ex2.approx.ftz.bf16", _bf([bf16(2.0)])).tolist() == [bf16(4.0)]
    assert run("tanh.approx.bf16", _bf([0])).tolist() == [0]


def test_div_variants_f32():
    a = np.array([1.0, 3.0, 1.0, np.inf, 7.0], F32)
    b = np.array([3.0, 1e38 * 3, 2.0**127, 2.0**127, 0.0], F32)
    full = run("div.full.f32", a, b)
    exp = [ref_arith("div", [float(x), float(y)], "f32", "rn") for x, y in zip(a[:3], b[:3],
                                                                              strict=True)]
    assert bits(full).tolist()[:3] == exp and full.tolist()[3:] == [np.inf, np.inf]
    ap = run("div.approx.f32", a, b)
    assert float(ap[0]) == float(F32(1 / 3)) and ap[1] == 0.0 and ap[2] == 0.0
    assert np.isnan(ap[3]) and ap[4] == np.inf
    neg = run("div.approx.ftz.f32", np.array([-2.0], F32), np.array([2.0**127], F32))
    assert bits(neg).tolist() == [0x80000000]
    assert run("div.rn.f64", np.array([1.0]), np.array([3.0])).tolist() == [1 / 3]


# --------------------------------------------------------------------------
# setp / set / selp / slct

_PYCMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
          "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def _fcmp_ref(cmp: str, a: float, b: float) -> bool:
    un = math.isnan(a) or math.isnan(b)
    if cmp == "num":
        return not un
    if cmp == "nan":
        return un
    if cmp.endswith("u") and cmp[:-1] in _PYCMP:
        return un or _PYCMP[cmp[:-1]](a, b)
    return not un and _PYCMP[cmp](a, b)


FCMPS = ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num",
         "nan"]
_FEDGE = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40]


@pytest.mark.parametrize("t,dt", [("f32", F32), ("f64", F64), ("f16", F16)])
@pytest.mark.parametrize("cmp", FCMPS)
def test_setp_float_all_comparisons(t, dt, cmp):
    pairs = [(x, y) for x in _FEDGE for y in _FEDGE]
    a = np.array([p[0] for p in pairs], dt)
    b = np.array([p[1] for p in pairs], dt)
    p, q = run(f"setp.{cmp}.{t}", a, b)
    exp = [_fcmp_ref(cmp, float(x), float(y)) for x, y in zip(a, b, strict=True)]
    assert p.tolist() == exp and q.tolist() == [not e for e in exp]


@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"])
@pytest.mark.parametrize("t", ["s32", "u32", "s64", "u64", "s16", "u16"])
@given(data=st.data())
@settings(max_examples=15, deadline=None)
def test_setp_int(cmp, t, data):
    a = data.draw(st.lists(ints(t), min_size=1, max_size=8))
    b = data.draw(st.lists(ints(t), min_size=len(a), max_size=len(a)))
    w = INT_T[t][0]
    if cmp in ("lo", "ls", "hi", "hs"):
        f = _PYCMP[{"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}[cmp]]
        exp = [f(x % 2**w, y % 2**w) for x, y in zip(a, b, strict=True)]
    else:
        exp = [_PYCMP[cmp](x, y) for x, y in zip(a, b, strict=True)]
    p, q = run(f"setp.{cmp}.{t}", a, b)
    assert p.tolist() == exp and q.tolist() == [not e for e in exp]


def test_setp_bool_combine_and_bits():
    a, b = [1, 3, 1, 3], [2, 2, 2, 2]
    c = np.array([True, True, False, False])
    for bop, f in [("and", lambda x, y: x and y), ("or", lambda x, y: x or y),
                   ("xor", lambda x, y: x != y)]:
        p, q = run(f"setp.lt.{bop}.s32", a, b, c)
        t = [x < y for x, y in zip(a, b, strict=True)]
        assert p.tolist() == [f(x, y) for x, y in zip(t, c, strict=True)]
        assert q.tolist() == [f(not x, y) for x, y in zip(t, c, strict=True)]
    p, _ = run("setp.ne.b32", [5, 0], [5, 1])
    assert p.tolist() == [False, True]
    p, _ = run("setp.eq.ftz.f32", np.array([1e-40, 1e-40], F32), np.array([0.0, -0.0], F32))
    assert p.tolist() == [True, True]
    p, _ = run("setp.eq.f32", np.array([1e-40], F32), np.array([0.0], F32))
    assert p.tolist() == [False]


def test_setp_half_pairs():
    a = pack([_h([1.0, np.nan]), _h([3.0, 2.0])], "f16", "f16x2")
    b = pack([_h([2.0, 1.0]), _h([1.0, np.nan])], "f16", "f16x2")
    p, q = run("setp.lt.f16x2", a, b)
    assert p.tolist() == [True, False] and q.tolist() == [False, False]
    p, q = run("setp.ltu.f16x2", a, b)
    assert p.tolist() == [True, True] and q.tolist() == [False, True]
    p, q = run("setp.gt.or.f16x2", a, b, np.array([False, True]))
    assert p.tolist() == [False, True] and q.tolist() == [True, True]
    bb = pack([_bf([bf16(1.0)]), _bf([bf16(-2.0)])], "bf16", "bf16x2")
    p, q = run("setp.lt.bf16x2", bb, np.array([0], U32))
    assert p.tolist() == [False] and q.tolist() == [True]
    p, _ = run("setp.lt.bf16", _bf([bf16(-2.0), 0x7FC0]), _bf([bf16(1.0), bf16(1.0)]))
    assert p.tolist() == [True, False]


def test_set():
    a, b = [1, 3], [2, 2]
    assert vals(run("set.lt.u32.s32", a, b)) == [0xFFFFFFFF, 0]
    assert vals(run("set.lt.s32.s32", a, b)) == [-1, 0]
    assert run("set.lt.f32.s32", a, b).tolist() == [1.0, 0.0]
    assert run("set.gt.and.f32.f32", np.array([3, 3], F32), np.array([2, 2], F32),
               np.array([True, False])).tolist() == [1.0, 0.0]
    assert vals(run("set.nan.u32.f64", np.array([np.nan, 1.0]), np.array([1.0, 1.0]))) == [
        0xFFFFFFFF, 0]
    assert run("set.eq.f16.f16", _h([1, 2]), _h([1, 3])).tolist() == [1.0, 0.0]
    assert run("set.eq.bf16.f32", np.array([1, 2], F32), np.array([1, 3], F32)).tolist() == [
        0x3F80, 0]
    h = pack([_h([1.0]), _h([2.0])], "f16", "f16x2")
    g = pack([_h([1.0]), _h([5.0])], "f16", "f16x2")
    assert vals(run("set.eq.f16x2.f16x2", h, g)) == [0x00003C00]
    assert vals(run("set.lt.u32.f16x2", h, g)) == [0xFFFF0000]


def test_selp_slct():
    c = np.array([True, False])
    assert vals(run("selp.b32", [1, 1], [2, 2], c)) == [1, 2]
    assert run("selp.f64", np.array([1.0, 1.0]), np.array([2.0, 2.0]), c).tolist() == [1.0, 2.0]
    assert vals(run("selp.u16", [7, 7], [9, 9], c)) == [7, 9]
    assert vals(run("slct.u32.s32", [1, 1, 1], [2, 2, 2], [0, -1, 5])) == [1, 2, 1]
    sel = np.array([-0.0, -1e-40, np.nan, 1.0], F32)
    assert run("slct.f32.f32", np.ones(4, F32), np.zeros(4, F32), sel).tolist() == [1, 0, 0, 1]
    assert run("slct.ftz.f32.f32", np.ones(4, F32), np.zeros(4, F32), sel).tolist() == [
        1, 1, 0, 1]


# --------------------------------------------------------------------------
# cvt

ALL_INTS = ["u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64"]


def _range(t):
    w, signed = INT_T[t]
    return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)


@pytest.mark.parametrize("at", ALL_INTS)
@pytest.mark.parametrize("dt", ALL_INTS)
@given(data=st.data())
@settings(max_examples=10, deadline=None)
def test_cvt_int_int(at, dt, data):
    a = data.draw(st.lists(ints(at), min_size=1, max_size=8))
    assert vals(run(f"cvt.{dt}.{at}", a)) == [wrap(x, dt) for x in a]
    lo, hi = _range(dt)
    assert vals(run(f"cvt.sat.{dt}.{at}", a)) == [min(max(x, lo), hi) for x in a]


def test_cvt_int_int_hand():
    assert vals(run("cvt.s64.s32", [-1])) == [-1]
    assert vals(run("cvt.u64.s32", [-1])) == [2**64 - 1]  # sign-extended by the source
    assert vals(run("cvt.u32.u16", [0xFFFF])) == [0xFFFF]
    assert vals(run("cvt.s32.s8", [0x80])) == [-128]
    assert vals(run("cvt.u16.u32", [0x12345678])) == [0x5678]
    assert vals(run("cvt.sat.u8.s32", [-5, 300, 7])) == [0, 255, 7]
    assert vals(run("cvt.sat.s32.u64", [2**63])) == [2**31 - 1]


_IRND_REF = {"rni": lambda f: round(f), "rzi": math.trunc, "rmi": math.floor, "rpi": math.ceil}


def _f2i_ref(x: float, dt: str, irnd: str) -> int:
    if math.isnan(x):
        return 0
    lo, hi = _range(dt)
    if math.isinf(x):
        return hi if x > 0 else lo
    return min(max(_IRND_REF[irnd](Fraction(x)), lo), hi)


@pytest.mark.parametrize("dt", ALL_INTS)
@pytest.mark.parametrize("irnd", ["rni", "rzi", "rmi", "rpi"])
@given(st.lists(st.one_of(st.floats(width=32), st.floats(-300, 300, width=32),
                          st.sampled_from([0.5, -0.5, 1.5, 2.5, -2.5, 2**31, -2**31 - 1.0,
                                           2**63, 2**64, -2**63, 4294967295.5])),
                min_size=1, max_size=8))
@settings(max_examples=30, deadline=None)
def test_cvt_float_int(dt, irnd, xs):
    a = np.array(xs, F32)
    exp = [_f2i_ref(float(x), dt, irnd) for x in a]
    assert vals(run(f"cvt.{irnd}.{dt}.f32", a)) == exp
    assert vals(run(f"cvt.{irnd}.{dt}.f64", a.astype(F64))) == exp
    with np.errstate(over="ignore"):
        h = a.astype(F16)
    assert vals(run(f"cvt.{irnd}.{dt}.f16", h)) == [_f2i_ref(float(x), dt, irnd) for x in h]


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8))
@SETTINGS
def test_cvt_rzi_matches_trunc(xs):
    a = np.array(xs)
    exp = [min(max(math.trunc(x), -(2**63)), 2**63 - 1) for x in xs]
    assert vals(run("cvt.rzi.s64.f64", a)) == exp


def test_cvt_float_int_edges():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -0.7, 1e-40], F32)
    assert vals(run("cvt.rzi.s32.f32", x)) == [0, 2**31 - 1, -(2**31), 2**31 - 1, 0, 0]
    assert vals(run("cvt.rzi.u32.f32", x)) == [0, 2**32 - 1, 0, 3000000000, 0, 0]
    assert vals(run("cvt.rpi.s32.f32", x))[5] == 1
    assert vals(run("cvt.rpi.ftz.s32.f32", x))[5] == 0  # the subnormal is flushed first
    assert vals(run("cvt.rni.s32.f64", np.array([0.5, 1.5, 2.5, -0.5]))) == [0, 2, 2, 0]
    assert vals(run("cvt.rzi.u64.f64", np.array([2.0**64, 2.0**64 - 2048]))) == [
        2**64 - 1, 2**64 - 2048]
    assert vals(run("cvt.rzi.s64.f64", np.array([2.0**63, -(2.0**63)]))) == [2**63 - 1, -(2**63)]
    assert vals(run("cvt.s32.f32", np.array([-2.7], F32))) == [-2]  # no rounding given: .rzi


@pytest.mark.parametrize("at", ["s32", "u32", "s64", "u64", "s16", "u8"])
@pytest.mark.parametrize("dt", ["f64", "f32", "f16", "bf16"])
@pytest.mark.parametrize("mode", MODES)
@given(data=st.data())
@settings(max_examples=12, deadline=None)
def test_cvt_int_float(at, dt, mode, data):
    a = data.draw(st.lists(ints(at), min_size=1, max_size=8))
    exp = [ref_exact(Fraction(x), dt, mode) if x else 0 for x in a]
    assert bits(run(f"cvt.{mode}.{dt}.{at}", a)).tolist() == exp


def test_cvt_int_float_hand():
    assert run("cvt.rn.f32.u64", [2**64 - 1]).tolist() == [2.0**64]
    assert run("cvt.rz.f32.u64", [2**64 - 1]).tolist() == [float(F32(2**64 - 2**40))]
    assert run("cvt.rn.f64.s64", [2**63 - 1]).tolist() == [2.0**63]
    assert run("cvt.rz.f64.s64", [2**63 - 1]).tolist() == [2.0**63 - 1024]
    assert run("cvt.rn.f32.s32", [16777217]).tolist() == [16777216.0]
    assert run("cvt.rp.f32.s32", [16777217]).tolist() == [16777218.0]
    assert run("cvt.rn.f16.s32", [70000, -70000]).tolist() == [np.inf, -np.inf]
    assert run("cvt.rz.f16.s32", [70000]).tolist() == [65504.0]


_NARROW = [("f64", "f32"), ("f64", "f16"), ("f64", "bf16"), ("f32", "f16"), ("f32", "bf16"),
           ("f16", "bf16"), ("bf16", "f16")]


def _src_vals(at, xs):
    if at == "bf16":
        return _bf([f32b(np.float32(x)) >> 16 for x in xs])
    return np.array(xs, {"f64": F64, "f32": F32, "f16": F16}[at])


def _as_float(arr, t):
    return [_bf_val(int(b)) for b in arr] if t == "bf16" else [float(v) for v in arr]


@pytest.mark.parametrize("at,dt", _NARROW)
@pytest.mark.parametrize("mode", MODES)
@given(st.lists(st.one_of(f64s, st.floats(-1e6, 1e6), st.floats(-1e-4, 1e-4)), min_size=1,
                max_size=8))
@settings(max_examples=40, deadline=None)
def test_cvt_float_narrowing(at, dt, mode, xs):
    with np.errstate(over="ignore"):
        src = _src_vals(at, xs)
    finite = [math.isfinite(v) for v in _as_float(src, at)]
    # values that overflow the source type are tested by the specials test
    src = src[np.array(finite, dtype=bool)]
    assume(len(src) > 0)
    sv = _as_float(src, at)
    exp = [ref_exact(Fraction(v), dt, mode) if v else (_SIGNBIT[dt] if math.copysign(1, v) < 0
                                                        else 0) for v in sv]
    assert bits(run(f"cvt.{mode}.{dt}.{at}", src)).tolist() == exp


def test_cvt_float_float_specials_and_modifiers():
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, 70000.0, -3.5, 0.25], F32)
    r = run("cvt.rn.f16.f32", x)
    assert bits(r).tolist()[:5] == [0x7FFF, 0x7C00, 0xFC00, 0x8000, 0]
    assert r[5] == np.inf
    assert bits(run("cvt.rn.satfinite.f16.f32", x)).tolist()[:3] == [0x7FFF, 0x7BFF, 0xFBFF]
    assert run("cvt.rn.relu.f16.f32", x).tolist()[6:] == [0.0, 0.25]
    assert run("cvt.rn.bf16.f32", x).tolist()[:4] == [0x7FFF, 0x7F80, 0xFF80, 0x8000]
    assert run("cvt.rn.satfinite.bf16.f32", np.array([3.4e38, np.inf], F32)).tolist() == [
        0x7F7F, 0x7F7F]
    r = run("cvt.ftz.f64.f32", x)
    assert r[4] == 0 and run("cvt.f64.f32", x)[4] == float(F32(1e-40))
    r = run("cvt.ftz.sat.f32.f32", x)
    assert bits(r).tolist() == [0, f32b(1.0), 0, 0, 0, f32b(1.0), 0, f32b(0.25)]
    assert run("cvt.sat.f32.f32", np.array([1e-40], F32))[0] == F32(1e-40)
    r = run("cvt.rn.ftz.f32.f64", np.array([1e-40, -1e-40, 1e-30]))
    assert bits(r).tolist() == [0, 0x80000000, f32b(1e-30)]
    assert run("cvt.f32.f16", _h([1.5, -np.inf])).tolist() == [1.5, -np.inf]
    assert run("cvt.f32.bf16", _bf([0x3FC0])).tolist() == [1.5]
    assert bits(run("cvt.f32.f16", np.array([0x7E01], U16).view(F16))).tolist() == [0x7FFFFFFF]


@pytest.mark.parametrize("t", ["f32", "f64", "f16", "bf16"])
def test_cvt_integer_rounding_same_type(t):
    xs = [2.5, -2.5, 0.5, -0.5, 1.75, -1.25, 3.0]
    src = _src_vals(t, xs)
    exp = {"rni": [2, -2, 0, -0.0, 2, -1, 3], "rzi": [2, -2, 0, -0.0, 1, -1, 3],
           "rmi": [2, -3, 0, -1, 1, -2, 3], "rpi": [3, -2, 1, -0.0, 2, -1, 3]}
    for irnd, e in exp.items():
        got = _as_float(run(f"cvt.{irnd}.{t}.{t}", src), t)
        assert got == e, irnd
        assert [math.copysign(1, g) for g in got] == [math.copysign(1, v) for v in e], irnd
    if t == "f32":
        assert run("cvt.rpi.ftz.f32.f32", np.array([1e-40], F32)).tolist() == [0.0]
        assert run("cvt.rpi.f32.f32", np.array([1e-40], F32)).tolist() == [1.0]


def test_cvt_packed_pairs():
    r = run("cvt.rn.f16x2.f32", np.array([1.0], F32), np.array([-2.0], F32))
    assert vals(r) == [(f16b(1.0) << 16) | f16b(-2.0)]  # a goes to the upper half
    r = run("cvt.rz.f16x2.f32", np.array([1 + 2**-11 + 2**-12], F32), np.array([1e9], F32))
    assert vals(r) == [(f16b(1.0) << 16) | 0x7BFF]
    r = run("cvt.rn.bf16x2.f32", np.array([1.0], F32), np.array([1.00390625 + 2**-20], F32))
    assert vals(r) == [(0x3F80 << 16) | 0x3F81]
    r = run("cvt.rn.relu.bf16x2.f32", np.array([-1.0], F32), np.array([np.nan], F32))
    assert vals(r) == [0x7FFF]
    r = run("cvt.rn.satfinite.f16x2.f32", np.array([1e9], F32), np.array([-np.inf], F32))
    assert vals(r) == [(0x7BFF << 16) | 0xFBFF]


def test_cvt_tf32_and_fp8():
    x = np.array([1 + 2**-11, 1 + 2**-11 + 2**-13, 1 + 3 * 2**-11, np.nan, -1 - 2**-11], F32)
    r = run("cvt.rna.tf32.f32", x)
    assert vals(r) == [f32b(1 + 2**-10), f32b(1 + 2**-10), f32b(1 + 2**-9), 0x7FFFFFFF,
                       f32b(-1 - 2**-10)]
    r = run("cvt.rn.tf32.f32", x)
    assert vals(r)[0] == f32b(1.0) and vals(r)[2] == f32b(1 + 2**-9)
    r = run("cvt.rn.satfinite.e4m3x2.f32", np.array([1.0, 448.0, 1e6, np.nan], F32),
            np.array([-2.0, 2**-9, -1e6, 0.0], F32))
    assert vals(r) == [0x38C0, 0x7E01, 0x7EFE, 0x7F00]
    r = run("cvt.rn.satfinite.e5m2x2.f32", np.array([1.0, np.inf], F32),
            np.array([57344.0, 2**-16], F32))
    assert vals(r) == [0x3C7B, 0x7B01]
    r = run("cvt.rn.f16x2.e4m3x2", [0x38C0, 0x7F01])
    assert unpack(r, "f16x2", "f16", 2)[0].tolist() == [-2.0, 2**-9]
    assert unpack(r, "f16x2", "f16", 2)[1].tolist()[0] == 1.0
    assert bits(unpack(r, "f16x2", "f16", 2)[1]).tolist()[1] == 0x7FFF
    r = run("cvt.rn.f16x2.e5m2x2", [0x7C01])
    assert unpack(r, "f16x2", "f16", 2)[1].tolist() == [np.inf]
    h = pack([_h([0.5]), _h([-448.0])], "f16", "f16x2")
    assert vals(run("cvt.rn.satfinite.e4m3x2.f16x2", h)) == [0xFE30]


@given(st.lists(st.integers(0, 255), min_size=1, max_size=20))
@SETTINGS
def test_fp8_roundtrip(bs):
    """Every e4m3/e5m2 value converts to f16 exactly and back to the same bits."""
    for fmt in ("e4m3x2", "e5m2x2"):
        packed_ = [(b << 8) | b for b in bs]
        h = run(f"cvt.rn.f16x2.{fmt}", packed_)
        lo, hi = unpack(h, "f16x2", "f16", 2)
        assert bits(lo).tolist() == bits(hi).tolist()
        ok = [i for i, b in enumerate(bs) if not np.isnan(lo[i]) and not np.isinf(lo[i])]
        back = run(f"cvt.rn.satfinite.{fmt}.f16x2", h[ok])
        assert vals(back) == [packed_[i] for i in ok]


# --------------------------------------------------------------------------
# every ALU opcode real compilers emit is accepted

NON_ALU = {
    "ld", "ldu", "st", "atom", "red", "bar", "barrier", "bra", "brx", "call", "ret", "exit",
    "trap", "brkpt", "shfl", "vote", "match", "redux", "activemask", "cvta", "isspacep",
    "membar", "fence", "nanosleep", "prefetch", "prefetchu", "cp", "mma", "wmma", "ldmatrix",
    "stmatrix", "tex", "tld4", "suld", "sust", "sured", "suq", "txq", "istypep", "mapa",
    "getctarank", "elect", "griddepcontrol", "mbarrier", "alloca", "stacksave", "stackrestore",
    "pmevent", "discard", "applypriority", "createpolicy", "setmaxnreg", "multimem", "wgmma",
    "tensormap", "cp.async", "clusterlaunchcontrol", "movmatrix", "tcgen05", "cvt.pack",
}

_STMT_HEAD = re.compile(r"^(?:@!?%?[\w$]+\s+)?([a-z][\w.]*)(?:\s+(.*))?$", re.S)


def ptx_instructions(ptx: str):
    """(opcode, operand count) of every instruction, inline assembly included; an
    operand in braces ({a, b}) or a p|q pair counts as one."""
    ptx = re.sub(r"//[^\n]*", "", ptx)
    ptx = re.sub(r"/\*.*?\*/", "", ptx, flags=re.S)
    ptx = re.sub(r'"[^"\n]*"', '""', ptx)
    for raw in ptx.split(";"):
        s = raw.strip()
        while True:
            s = s.lstrip("{} \t\r\n")
            m = re.match(r"^[$\w]+:", s)
            if not m:
                break
            s = s[m.end():]
        if not s or s.startswith((".", "(", ")")) or s.startswith("@@"):
            continue
        m = _STMT_HEAD.match(s)
        if not m:
            continue
        text = (m.group(2) or "").strip()
        depth, n = 0, (1 if text else 0)
        for ch in text:
            if ch in "{[(":
                depth += 1
            elif ch in "}])":
                depth -= 1
            elif ch == "," and depth == 0:
                n += 1
        yield m.group(1), n


def check_ptx_supported(ptx: str, seen: set) -> list[str]:
    problems = []
    for opcode, n in ptx_instructions(ptx):
        base = opcode.split(".")[0]
        if not is_alu_opcode(opcode):
            if base not in NON_ALU:
                problems.append(f"{opcode}: neither an ALU opcode nor a known non-ALU one")
            continue
        if (opcode, n) in seen:
            continue
        seen.add((opcode, n))
        try:
            alu_op(opcode, n, carry=True)
        except UnsupportedOpcode as e:
            problems.append(str(e))
    return problems


ALU_SNIPPETS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef unsigned long long u64; typedef long long i64; typedef unsigned int u32;

extern "C" __global__ void fmath(float* o, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
  float x = a[i], y = b[i]; int k = 0; float ip, s, c;
  o[0] = sinf(x) + cosf(y) + tanf(x) + expf(x) + exp2f(y) + exp10f(x) + logf(y) + log2f(x)
       + log10f(y) + log1pf(x) + expm1f(y) + powf(x, y) + sqrtf(x) + rsqrtf(y) + cbrtf(x);
  o[1] = erff(y) + erfcf(x) + tgammaf(x) + lgammaf(y) + atan2f(x, y) + asinf(x) + acosf(y)
       + atanf(x) + sinhf(y) + coshf(x) + tanhf(y) + fmodf(x, y) + remainderf(x, y);
  o[2] = frexpf(x, &k) + ldexpf(y, k) + ilogbf(x) + fmaf(x, y, x) + fminf(x, y) + fmaxf(x, y)
       + floorf(x) + ceilf(y) + truncf(x) + roundf(y) + rintf(x) + copysignf(x, y) + fdimf(x, y)
       + hypotf(x, y) + (isnan(x) ? 1.f : 0.f) + (isinf(y) ? 2.f : 0.f) + (signbit(y) ? 4.f : 0.f)
       + nextafterf(x, y) + modff(x, &ip) + ip + scalbnf(x, 3);
  sincosf(x, &s, &c);
  o[3] = s + c + sinpif(x) + cospif(y) + normcdff(x) + erfinvf(y) + asinhf(x) + logbf(y)
       + __sinf(x) + __cosf(y) + __expf(x) + __logf(y) + __powf(x, y) + __fdividef(x, y)
       + __frcp_rn(x) + __fsqrt_rz(y) + __fadd_rd(x, y) + __fmul_ru(x, y) + __fmaf_rz(x, y, x)
       + __fsub_ru(x, y) + __fdiv_rz(x, y) + __frcp_rd(x) + __fsqrt_ru(x) + __frsqrt_rn(x)
       + __saturatef(x) + __tanf(y) + __log2f(y);
  o[4] = (float)__float2int_rd(x) + (float)__float2uint_ru(y) + (float)__float2ll_rn(x)
       + (float)__float2ull_rz(y) + __int2float_rz(k) + __uint2float_rd(k) + __ll2float_ru((i64)k)
       + __int_as_float(k) + x / y + (float)(short)x + (float)(unsigned char)y;
}

extern "C" __global__ void dmath(double* o, const double* a, const double* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
  double x = a[i], y = b[i]; int k = 0;
  o[0] = sin(x) + cos(y) + tan(x) + exp(x) + exp2(y) + log(y) + log2(x) + log10(y) + log1p(x)
       + pow(x, y) + sqrt(x) + rsqrt(y) + cbrt(x) + erf(y) + tgamma(x) + atan2(x, y) + asin(x);
  o[1] = fmod(x, y) + frexp(x, &k) + ldexp(y, k) + fma(x, y, x) + fmin(x, y) + floor(x)
       + round(y) + rint(x) + copysign(x, y) + hypot(x, y) + nextafter(x, y) + sinpi(x);
  o[2] = __dadd_rz(x, y) + __dmul_rd(x, y) + __ddiv_ru(x, y) + __dsqrt_rd(x) + __drcp_rn(y)
       + __fma_rz(x, y, x) + __dsub_ru(x, y) + __fma_rd(x, y, y) + __fma_ru(x, y, x);
  o[3] = (double)__double2int_rd(x) + (double)__double2uint_ru(y) + (double)__double2ll_rn(x)
       + (double)__double2ull_rz(y) + __double2float_rd(x) + __double2float_ru(y)
       + __int2double_rn(k) + __ll2double_ru((i64)k) + __ull2double_rz((u64)k)
       + __hiloint2double(__double2hiint(x), __double2loint(y)) + (double)(u64)y + x / y;
}

extern "C" __global__ void imath(u32* o, u64* o64, const int* a, const int* b, const i64* c,
                                 const u64* d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
  int x = a[i], y = b[i]; i64 z = c[i]; u64 w = d[i];
  o[0] = __popc(x) + __popcll(w) + __clz(x) + __clzll(z) + __ffs(x) + __ffsll(z) + __brev(x)
       + (u32)__brevll(w) + __byte_perm(x, y, 0x3210) + __byte_perm(x, y, (u32)w)
       + __funnelshift_l(x, y, (u32)w) + __funnelshift_r(x, y, (u32)z)
       + __funnelshift_lc(x, y, i) + __funnelshift_rc(x, y, i);
  o[1] = __mul24(x, y) + __umul24(x, y) + __mulhi(x, y) + __umulhi(x, y)
       + (u32)__mul64hi(z, (i64)w) + (u32)__umul64hi(w, (u64)z) + __sad(x, y, 3) + __usad(x, y, 4)
       + __dp4a(x, y, 7) + __dp4a((u32)x, (u32)y, 7u) + __dp2a_lo(x, y, 3)
       + __dp2a_hi((u32)x, (u32)y, 5u) + __vabsdiffu4(x, y) + __vadd2(x, y) + __vmaxu2(x, y)
       + __hadd(x, y) + __rhadd(x, y) + __uhadd(x, y) + abs(x) + (u32)llabs(z);
  o[2] = x / y + x % y + (u32)x / (u32)y + (u32)x % (u32)y + (u32)(z / (i64)w)
       + (u32)(z % (i64)w) + (u32)(w / (u64)z) + (u32)(w % (u64)z)
       + (u32)((short)x / (short)y) + (u32)((unsigned char)x % (unsigned char)y)
       + (x >> (y & 31)) + ((u32)x >> (y & 31)) + (u32)(z >> (y & 63)) + (u32)(w << (y & 63));
  o64[0] = (u64)x * (u64)y + (i64)x * (i64)y + z * (i64)w + (u64)(x > y) + (u64)(z <= (i64)w);
}

extern "C" __global__ void hmath(__half* o, __half2* o2, const __half* a, const __half* b,
                                 const float* f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
  __half x = a[i], y = b[i];
  __half2 x2 = __halves2half2(x, y), y2 = __half2half2(y);
  o[0] = __hadd(x, y) + __hsub(x, y) + __hmul(x, y) + __hdiv(x, y) + __hfma(x, y, x)
       + __hfma_sat(x, y, y) + __hmin(x, y) + __hmax(x, y) + __hneg(x) + __habs(y) + hsqrt(x)
       + hexp(y) + hlog(x) + hsin(y) + hcos(x) + hrcp(y) + hrsqrt(x) + hexp2(y) + hlog2(x)
       + hceil(y) + hfloor(x) + htrunc(y) + hrint(x) + __hadd_sat(x, y);
  o[1] = __int2half_rn(i) + __uint2half_rz(i) + __float2half_rd(f[i]) + __float2half_ru(f[i])
       + __double2half((double)f[i]) + __short2half_rn((short)i) + __ll2half_rn((i64)i)
       + __float2half((float)__half2int_rn(x) + (float)__half2uint_rz(y) + (float)__hisnan(x)
       + (float)__hisinf(y) + (float)__hlt(x, y) + (float)__hgeu(x, y) + (float)__hbeq2(x2, y2));
  o2[0] = __hadd2(x2, y2) + __hsub2(x2, y2) + __hmul2(x2, y2) + __h2div(x2, y2)
        + __hfma2(x2, y2, x2) + __hfma2_sat(x2, y2, x2) + __hmin2(x2, y2) + __hmax2(x2, y2)
        + __hneg2(x2) + __habs2(y2) + h2sqrt(x2) + h2exp(y2) + h2log(x2) + h2sin(y2) + h2cos(x2)
        + h2rcp(y2) + __hlt2(x2, y2) + __floats2half2_rn(f[i], 1.f) + __lowhigh2highlow(x2)
        + h2exp2(x2) + h2floor(y2) + __float22half2_rn(make_float2(f[i], 2.f));
}

#if __CUDA_ARCH__ >= 800
extern "C" __global__ void bmath(__nv_bfloat16* o, __nv_bfloat162* o2, const __nv_bfloat16* a,
                                 const __nv_bfloat16* b, const float* f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
  __nv_bfloat16 u = a[i], v = b[i];
  __nv_bfloat162 u2 = __halves2bfloat162(u, v), v2 = __bfloat162bfloat162(v);
  o[0] = __hadd(u, v) + __hsub(u, v) + __hmul(u, v) + __hdiv(u, v) + __hfma(u, v, u)
       + __hfma_relu(u, v, u) + __hmin(u, v) + __hmax(u, v) + __hneg(u) + __habs(v) + hsqrt(u)
       + hexp(v) + hlog(u) + hsin(v) + hcos(u) + hrcp(v) + __hmin_nan(u, v) + hfloor(u)
       + hrint(v) + __hfma_sat(u, v, v) + hexp2(u) + htanh(v) + __hadd_sat(u, v);
  o[1] = __float2bfloat16_rz(f[i]) + __float2bfloat16_rd(f[i]) + __float2bfloat16_ru(f[i])
       + __int2bfloat16_rn(i) + __double2bfloat16((double)f[i])
       + __float2bfloat16((float)__bfloat162int_rn(u) + (float)__bfloat162uint_rz(v)
       + (float)__hlt(u, v) + (float)__hisnan(u));
  o2[0] = __hadd2(u2, v2) + __hsub2(u2, v2) + __hmul2(u2, v2) + __h2div(u2, v2)
        + __hfma2(u2, v2, u2) + __hfma2_relu(u2, v2, v2) + __hmin2(u2, v2) + __hmax2(u2, v2)
        + __hneg2(u2) + __habs2(v2) + h2sqrt(u2) + h2exp(v2) + __hlt2(u2, v2)
        + __floats2bfloat162_rn(f[i], 1.f) + h2floor(v2) + __hmin2_nan(u2, v2);
}
#endif
"""


@pytest.mark.parametrize("arch", ["compute_75", "compute_80", "compute_90"])
def test_nvrtc_alu_opcodes_are_supported(arch):
    from gpusafe_testkit.corpus import nvrtc_compile

    seen: set = set()
    problems: list[str] = []
    for options in [(), ("-G",), ("-use_fast_math",)]:
        ptx = nvrtc_compile(ALU_SNIPPETS, "alu_snippets.cu", arch, options)
        problems += check_ptx_supported(ptx, seen)
    assert not problems, "\n".join(sorted(set(problems)))
    opcodes = {o for o, _ in seen}
    assert len(opcodes) > 150
    for must in ("fma.rn.f64", "cvt.rni.s32.f32", "prmt.b32", "madc.hi.cc.u32", "mul.hi.u64",
                 "div.approx.f32", "ex2.approx.ftz.f32", "rcp.approx.ftz.f64", "fma.rn.f16x2",
                 "setp.ltu.f32", "selp.f32", "dp4a.s32.s32", "shf.l.wrap.b32", "brev.b64",
                 "cvt.rn.f16.f32", "mul.wide.s32", "bfind.shiftamt.u32", "sqrt.rz.f32",
                 "set.eq.f16x2.f16x2", "copysign.f32"):
        assert must in opcodes, must


def test_corpus_alu_opcodes_are_supported():
    """The project's whole PTX corpus (NVRTC, numba-cuda, LLVM), every variant."""
    from gpusafe_testkit.corpus import corpus_modules

    seen: set = set()
    problems: list[str] = []
    for m in corpus_modules():
        problems += [f"{m.name}: {p}" for p in check_ptx_supported(m.ptx, seen)]
    assert not problems, "\n".join(sorted(set(problems)))
    assert len(seen) > 50


def test_ptx_instruction_scanner():
    ptx = """
    .reg .b32 %r<5>;
    $L__BB0_1:
    @%p1 bra $L__BB0_2;
    setp.lt.s32 %p1|%p2, %r1, %r2;
    mov.b64 {%r1, %r2}, %rd1;   // comment, with commas
    { .reg .u32 t; prmt.b32 t, %r1, 0, 0xbb99; }
    call.uni (retval0), f, (param0, param1);
    """
    assert list(ptx_instructions(ptx)) == [("bra", 1), ("setp.lt.s32", 3), ("mov.b64", 2),
                                           ("prmt.b32", 4), ("call.uni", 3)]


# --------------------------------------------------------------------------
# any bit pattern: no warning, no exception, right dtypes, inputs untouched

FUZZ_OPCODES = [
    ("add.s32", 3), ("add.sat.s32", 3), ("sub.u64", 3), ("mul.lo.s16", 3), ("mul.hi.s64", 3),
    ("mul.wide.u32", 3), ("mad.lo.s32", 4), ("mad.wide.s32", 4), ("mad.hi.sat.s32", 4),
    ("mul24.hi.s32", 3), ("mad24.lo.u32", 4), ("sad.s64", 4), ("div.s64", 3), ("rem.s16", 3),
    ("div.u32", 3), ("abs.s64", 2), ("neg.s16", 2), ("min.s64", 3), ("max.u16x2", 3),
    ("add.s16x2", 3), ("popc.b64", 2), ("clz.b32", 2), ("bfind.s64", 2), ("brev.b64", 2),
    ("bfe.s64", 4), ("bfi.b32", 5), ("bmsk.clamp.b32", 3), ("szext.wrap.s32", 3), ("fns.b32", 4),
    ("and.b16", 3), ("not.pred", 2), ("cnot.b32", 2), ("lop3.b32", 5), ("shl.b64", 3),
    ("shr.s16", 3), ("shf.r.clamp.b32", 4), ("prmt.b32", 4), ("prmt.b32.ecl", 4),
    ("dp4a.s32.u32", 4), ("dp2a.hi.s32.s32", 4), ("vabsdiff4.s32.s32.s32.sat", 4),
    ("vavrg2.u32.u32.u32.add", 4), ("addc.cc.u64", 3), ("madc.hi.cc.s32", 4),
    ("add.f32", 3), ("add.rz.ftz.sat.f32", 3), ("sub.rm.f64", 3), ("mul.rp.f32", 3),
    ("fma.rn.f64", 4), ("fma.rz.f64", 4), ("fma.rn.ftz.sat.f32", 4), ("mad.rm.f32", 4),
    ("div.rn.f64", 3), ("div.rz.f32", 3), ("div.approx.ftz.f32", 3), ("div.full.f32", 3),
    ("rcp.rp.f64", 2), ("rcp.approx.ftz.f64", 2), ("sqrt.rm.f32", 2), ("sqrt.rp.f64", 2),
    ("rsqrt.approx.f64", 2), ("sin.approx.f32", 2), ("lg2.approx.ftz.f32", 2),
    ("ex2.approx.f16x2", 2), ("tanh.approx.bf16", 2), ("add.rn.f16", 3), ("fma.rn.sat.f16x2", 4),
    ("fma.rn.relu.bf16x2", 4), ("mul.bf16", 3), ("sub.ftz.f16", 3), ("min.f32", 3),
    ("max.NaN.f16x2", 3), ("min.xorsign.abs.bf16", 3), ("max.f64", 3), ("min.ftz.f32", 4),
    ("abs.f64", 2), ("neg.ftz.f32", 2), ("abs.bf16x2", 2), ("copysign.f64", 3),
    ("testp.normal.f64", 2), ("setp.ltu.ftz.f32", 3), ("setp.ne.and.f64", 4),
    ("setp.hs.u64", 3), ("setp.gt.or.f16x2", 4), ("setp.nan.bf16", 3), ("set.le.u32.f64", 3),
    ("set.ne.xor.f32.s16", 4), ("set.eq.bf16x2.bf16x2", 3), ("selp.f16", 4), ("slct.ftz.s32.f32", 4),
    ("cvt.rn.f32.f64", 2), ("cvt.rzi.s64.f32", 2), ("cvt.rni.u8.f64", 2), ("cvt.rpi.s16.f16", 2),
    ("cvt.rmi.u32.bf16", 2), ("cvt.rm.f16.f64", 2), ("cvt.rp.bf16.f64", 2), ("cvt.rz.f32.u64", 2),
    ("cvt.rn.f64.s64", 2), ("cvt.sat.s8.u64", 2), ("cvt.u16.s64", 2), ("cvt.ftz.sat.f32.f32", 2),
    ("cvt.rni.f64.f64", 2), ("cvt.f32.bf16", 2), ("cvt.rn.relu.satfinite.f16x2.f32", 3),
    ("cvt.rna.tf32.f32", 2), ("cvt.rn.satfinite.e5m2x2.f32", 3), ("cvt.rn.f16x2.e4m3x2", 2),
    ("mov.f64", 2), ("mov.b16", 2),
]


def _random_bits(t: str, n: int, rng) -> np.ndarray:
    dt = dtype_of(t)
    if t == "pred":
        return rng.random(n) < 0.5
    if t == "cc":
        return rng.integers(0, 2, n).astype(dt)
    raw = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) * np.uint64(2) + \
        rng.integers(0, 2, n).astype(np.uint64)
    u = raw.astype({1: U8, 2: U16, 4: U32, 8: U64}[dt.itemsize])
    u[: min(n, 4)] = [0, ~u.dtype.type(0), u.dtype.type(1) << u.dtype.type(8 * dt.itemsize - 1), 1][
        : min(n, 4)]
    return u.view(dt)


@pytest.mark.parametrize("opcode,n", FUZZ_OPCODES)
def test_any_bits_no_warning_no_mutation(opcode, n):
    rng = np.random.default_rng(zlib.crc32(opcode.encode()))
    op = alu_op(opcode, n, carry=True)
    for size in (1, 7, 300):
        srcs = [_random_bits(t, size, rng) for t in op.src_types]
        keep = [s.copy() for s in srcs]
        out = op.fn(*srcs)
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(op.dst_types)
        for t, o in zip(op.dst_types, outs, strict=True):
            assert o.dtype == dtype_of(t) and o.shape == (size,)
        for s, k in zip(srcs, keep, strict=True):
            assert bits(s).tolist() == bits(k).tolist() if s.dtype != np.bool_ else \
                s.tolist() == k.tolist()
