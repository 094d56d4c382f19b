"""Integer arithmetic of the ALU: add/sub (packed, saturating, carry chains),
mul/mad (``.lo``/``.hi``/``.wide``, 24-bit), sad, div/rem, abs/neg, min/max,
the dot products ``dp4a``/``dp2a`` and the SIMD video instructions (bit
instructions are :mod:`gpusafe.cpu.alu.bitwise`).

All arithmetic wraps modulo 2^width like the GPU's; ``fn``s work on whole
lane arrays and never warn. Signed values are handled as their unsigned bits
wherever wrap-around matters (numpy's array arithmetic wraps silently, but
division and shifts get explicit care).
"""

from __future__ import annotations

import numpy as np

from .opcodes import (
    BITS,
    SIGNED,
    AluOp,
    Decoded,
    as_unsigned,
    dtype_of,
    expect_operands,
    make,
    sint_dtype,
    uint_dtype,
    width_of,
)

U32, U64 = np.uint32, np.uint64
I64 = np.int64
M32 = U64(0xFFFFFFFF)
_INT_ARITH = frozenset({"u16", "u32", "u64", "s16", "s32", "s64"})


def _quiet():
    return np.errstate(all="ignore")


def _ones(w: int):
    return uint_dtype(w).type((1 << w) - 1)


# --------------------------------------------------------------------------
# add / sub (incl. packed 16x2, saturation and the carry chains)


def _carry_flags(d: Decoded, carry: bool) -> tuple[bool, bool]:
    cin = d.base in ("addc", "subc", "madc")
    cout = "cc" in d.mods
    if (cin or cout) and not carry:
        raise d.fail("condition-code (carry) chain: the executor must opt in with "
                     "alu_op(..., carry=True) and keep a per-thread CC.CF register")
    return cin, cout


def _add_with_carry(a, b, cin, sub: bool):
    """Unsigned-bits a +/- b +/- cin with carry (borrow) out; arrays of one uint dtype."""
    ut = a.dtype
    w = ut.itemsize * 8
    if w < 64:
        wide = a.astype(I64) + (-b.astype(I64) if sub else b.astype(I64))
        if cin is not None:
            wide = wide - cin.astype(I64) if sub else wide + cin.astype(I64)
        out = (wide & I64((1 << w) - 1)).astype(ut)
        co = ((wide < 0) if sub else (wide >> I64(w)) != 0).astype(U32)
        return out, co
    if sub:
        s = a - b
        co = a < b
        if cin is not None:
            ci = cin.astype(U64)
            co = co | (s < ci)
            s = s - ci
    else:
        s = a + b
        co = s < a
        if cin is not None:
            s2 = s + cin.astype(U64)
            co = co | (s2 < s)
            s = s2
    return s, co.astype(U32)


def build_int_add(d: Decoded, n: int, carry: bool, sub: bool = False) -> AluOp:
    expect_operands(d, n, 3)
    cin, cout = _carry_flags(d, carry)
    if cin or cout:
        d.check({"cc"})
        t = d.single_type({"u32", "s32", "u64", "s64"})
        dst = (t, "cc") if cout else (t,)
        src = (t, t, "cc") if cin else (t, t)

        def fn(a, b, c=None):
            with _quiet():
                out, co = _add_with_carry(as_unsigned(a), as_unsigned(b), c, sub)
            out = out.view(a.dtype)
            return (out, co) if cout else out

        return make(d, dst, src, fn)
    d.check({"sat"})
    t = d.single_type(_INT_ARITH | {"u16x2", "s16x2"} | BITS)
    sat = d.has("sat")
    if sat and t not in ("s32", "s16x2", "u16x2"):
        raise d.fail(".sat applies to .s32 and 16x2 types only")
    if t in ("u16x2", "s16x2"):
        lane = np.int16 if t == "s16x2" else np.uint16
        lo, hi = (-32768, 32767) if t == "s16x2" else (0, 65535)

        def fn(a, b):
            av = np.ascontiguousarray(a).view(lane)
            bv = np.ascontiguousarray(b).view(lane)
            with _quiet():
                if sat:
                    r = av.astype(I64) - bv.astype(I64) if sub else av.astype(I64) + bv.astype(I64)
                    r = np.clip(r, lo, hi).astype(lane)
                else:
                    r = av - bv if sub else av + bv
            return np.ascontiguousarray(r).view(U32)

        return make(d, (t,), (t, t), fn)
    if sat:
        def fn(a, b):
            r = a.astype(I64) - b.astype(I64) if sub else a.astype(I64) + b.astype(I64)
            return np.clip(r, -(1 << 31), (1 << 31) - 1).astype(np.int32)
    elif sub:
        def fn(a, b):
            with _quiet():
                return a - b
    else:
        def fn(a, b):
            with _quiet():
                return a + b
    return make(d, (t,), (t, t), fn)


def build_int_sub(d: Decoded, n: int, carry: bool) -> AluOp:
    return build_int_add(d, n, carry, sub=True)


# --------------------------------------------------------------------------
# multiplication


def mulhi_u64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """High 64 bits of the 128-bit product of uint64 arrays (32-bit limbs)."""
    a_lo, a_hi = a & M32, a >> U64(32)
    b_lo, b_hi = b & M32, b >> U64(32)
    ll = a_lo * b_lo
    lh = a_lo * b_hi
    hl = a_hi * b_lo
    hh = a_hi * b_hi
    mid = (ll >> U64(32)) + (lh & M32) + (hl & M32)
    return hh + (lh >> U64(32)) + (hl >> U64(32)) + (mid >> U64(32))


def mulhi_s64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ua, ub = as_unsigned(a), as_unsigned(b)
    hi = mulhi_u64(ua, ub)
    hi = hi - np.where(a < 0, ub, U64(0)) - np.where(b < 0, ua, U64(0))
    return hi.view(I64)


def _mul_parts(t: str, mode: str):
    """fn(a, b) -> the .lo/.hi/.wide product of two ``t`` arrays."""
    w = width_of(t)
    signed = t in SIGNED
    if mode == "lo":
        return lambda a, b: a * b
    if mode == "wide":
        wt = (sint_dtype if signed else uint_dtype)(2 * w)
        return lambda a, b: a.astype(wt) * b.astype(wt)
    # hi
    if w == 64:
        return mulhi_s64 if signed else mulhi_u64
    st = sint_dtype(w) if signed else uint_dtype(w)
    if signed:
        return lambda a, b: ((a.astype(I64) * b.astype(I64)) >> I64(w)).astype(st)
    return lambda a, b: ((a.astype(U64) * b.astype(U64)) >> U64(w)).astype(st)


def build_int_mul(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 3)
    d.check({"lo", "hi", "wide"})
    t = d.single_type(_INT_ARITH)
    mode = d.one_of(("lo", "hi", "wide"), "lo")
    if mode == "wide" and width_of(t) == 64:
        raise d.fail("mul.wide has no 64-bit form")
    f = _mul_parts(t, mode)
    dt = t if mode != "wide" else t[0] + str(2 * width_of(t))

    def fn(a, b):
        with _quiet():
            return f(a, b)

    return make(d, (dt,), (t, t), fn)


def build_int_mad(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 4)
    cin, cout = _carry_flags(d, carry)
    d.check({"lo", "hi", "wide", "sat", "cc"})
    t = d.single_type(_INT_ARITH)
    mode = d.one_of(("lo", "hi", "wide"), "lo" if d.base == "mad" else None)
    if mode is None:
        raise d.fail("madc needs .lo or .hi")
    sat = d.has("sat")
    if sat and not (t == "s32" and mode == "hi"):
        raise d.fail(".sat applies only to mad.hi.s32")
    if mode == "wide" and (width_of(t) == 64 or cin or cout):
        raise d.fail("no such mad.wide form")
    f = _mul_parts(t, mode)
    ct = t if mode != "wide" else t[0] + str(2 * width_of(t))
    if cin or cout:
        dst = (t, "cc") if cout else (t,)
        src = (t, t, t, "cc") if cin else (t, t, t)

        def fn(a, b, c, cc=None):
            with _quiet():
                prod = f(a, b)
                out, co = _add_with_carry(as_unsigned(prod), as_unsigned(c), cc, False)
            out = out.view(a.dtype)
            return (out, co) if cout else out

        return make(d, dst, src, fn)
    if sat:
        def fn(a, b, c):
            r = ((a.astype(I64) * b.astype(I64)) >> I64(32)) + c.astype(I64)
            return np.clip(r, -(1 << 31), (1 << 31) - 1).astype(np.int32)
    else:
        def fn(a, b, c):
            with _quiet():
                return f(a, b) + c
    return make(d, (ct,), (t, t, ct), fn)


def _sext24(x: np.ndarray, signed: bool) -> np.ndarray:
    x = as_unsigned(x).astype(I64) & I64(0xFFFFFF)
    if signed:
        x = np.where(x >= I64(0x800000), x - I64(0x1000000), x)
    return x


def build_mul24(d: Decoded, n: int, carry: bool) -> AluOp:
    """mul24/mad24: the low 24 bits of each 32-bit operand (sign-extended for
    .s32) are multiplied; .lo keeps bits 31..0 of the 48-bit product, .hi bits 47..16."""
    mad = d.base == "mad24"
    expect_operands(d, n, 4 if mad else 3)
    d.check({"lo", "hi", "sat"})
    t = d.single_type({"u32", "s32"})
    mode = d.one_of(("lo", "hi"))
    if mode is None:
        raise d.fail("needs .lo or .hi")
    sat = d.has("sat")
    if sat and not (mad and t == "s32" and mode == "hi"):
        raise d.fail(".sat applies only to mad24.hi.s32")
    signed = t == "s32"
    dt = dtype_of(t)

    def prod(a, b):
        p = _sext24(a, signed) * _sext24(b, signed)
        return p >> I64(16) if mode == "hi" else p

    if mad:
        def fn(a, b, c):
            r = prod(a, b)
            if sat:
                return np.clip(r + c.astype(I64), -(1 << 31), (1 << 31) - 1).astype(np.int32)
            return ((r + c.astype(I64)) & I64(0xFFFFFFFF)).astype(U32).view(dt)
        return make(d, (t,), (t, t, t), fn)

    def fn(a, b):
        return (prod(a, b) & I64(0xFFFFFFFF)).astype(U32).view(dt)

    return make(d, (t,), (t, t), fn)


def build_sad(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 4)
    d.check(())
    t = d.single_type(_INT_ARITH)

    def fn(a, b, c):
        with _quiet():
            ua, ub = as_unsigned(a), as_unsigned(b)
            diff = np.where(a > b, ua - ub, ub - ua)
            return (diff + as_unsigned(c)).view(a.dtype)

    return make(d, (t,), (t, t, t), fn)


# --------------------------------------------------------------------------
# division


def build_int_div(d: Decoded, n: int, carry: bool) -> AluOp:
    """div/rem: truncating; INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0; a zero
    divisor gives all ones for both (what ptxas's sequences produce on the GPU)."""
    expect_operands(d, n, 3)
    d.check(())
    t = d.single_type(_INT_ARITH)
    rem = d.base == "rem"
    signed = t in SIGNED
    ones = _ones(width_of(t))

    def fn(a, b):
        with _quiet():
            ua, ub = as_unsigned(a), as_unsigned(b)
            zero = ub == 0
            if signed:
                na, nb = a < 0, b < 0
                ua = np.where(na, -ua, ua)
                ub = np.where(nb, -ub, ub)
            safe = np.where(zero, ua.dtype.type(1), ub)
            if rem:
                r = ua % safe
                if signed:
                    r = np.where(na, -r, r)
            else:
                r = ua // safe
                if signed:
                    r = np.where(na != nb, -r, r)
            r = np.where(zero, ones, r)
            return r.view(a.dtype)

    return make(d, (t,), (t, t), fn)


# --------------------------------------------------------------------------
# abs, neg, min, max


def build_int_abs(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 2)
    d.check(())
    t = d.single_type({"s16", "s32", "s64"})

    def fn(a):
        with _quiet():
            return np.where(a < 0, -a, a)

    return make(d, (t,), (t,), fn)


def build_int_neg(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 2)
    d.check(())
    t = d.single_type({"s16", "s32", "s64"})

    def fn(a):
        with _quiet():
            return -a

    return make(d, (t,), (t,), fn)


def build_int_minmax(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 3, 4)
    d.check({"relu"})
    t = d.single_type(_INT_ARITH | {"u16x2", "s16x2"})
    relu = d.has("relu")
    if relu and t not in ("s32", "s16x2"):
        raise d.fail(".relu applies to .s32 and .s16x2 only")
    op = np.minimum if d.base == "min" else np.maximum
    lane = {"u16x2": np.uint16, "s16x2": np.int16}.get(t)

    def fn(*xs):
        if lane is not None:
            xs = [np.ascontiguousarray(x).view(lane) for x in xs]
        r = op(xs[0], xs[1])
        if len(xs) == 3:
            r = op(r, xs[2])
        if relu:
            r = np.maximum(r, r.dtype.type(0))
        if lane is not None:
            r = np.ascontiguousarray(r).view(U32)
        return r

    return make(d, (t,), (t,) * (n - 1), fn)


# --------------------------------------------------------------------------
# dot products and SIMD video instructions


def _lanes(x: np.ndarray, bits: int, signed: bool) -> list[np.ndarray]:
    """The 32/bits lanes of a 32-bit array as int64, sign- or zero-extended."""
    u = as_unsigned(x).astype(I64)
    out = []
    for i in range(32 // bits):
        v = (u >> I64(i * bits)) & I64((1 << bits) - 1)
        if signed:
            v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
        out.append(v)
    return out


def build_dp(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 4)
    two = d.base == "dp2a"
    d.check({"lo", "hi"} if two else ())
    if len(d.types) != 2 or any(t not in ("u32", "s32") for t in d.types):
        raise d.fail("needs .atype.btype from {.u32, .s32}")
    ta, tb = d.types
    ct = "u32" if ta == tb == "u32" else "s32"
    half = d.one_of(("lo", "hi"))
    if two and half is None:
        raise d.fail("dp2a needs .lo or .hi")
    first = 2 if half == "hi" else 0

    def fn(a, b, c):
        va = _lanes(a, 16 if two else 8, ta == "s32")
        vb = _lanes(b, 8, tb == "s32")
        acc = c.astype(I64)
        if two:
            acc = acc + va[0] * vb[first] + va[1] * vb[first + 1]
        else:
            for i in range(4):
                acc = acc + va[i] * vb[i]
        return (acc & I64(0xFFFFFFFF)).astype(U32).view(dtype_of(ct))

    return make(d, (ct,), (ta, tb, ct), fn)


_VIDEO_OPS = {
    "vadd": lambda x, y: x + y,
    "vsub": lambda x, y: x - y,
    "vavrg": lambda x, y: np.where(x + y >= 0, (x + y + 1) >> 1, (x + y) >> 1),
    "vabsdiff": lambda x, y: np.abs(x - y),
    "vmin": np.minimum,
    "vmax": np.maximum,
}
_CMP_INT = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}


def build_video(d: Decoded, n: int, carry: bool) -> AluOp:
    """SIMD video instructions vop2/vop4 (vadd, vsub, vavrg, vabsdiff, vmin,
    vmax, vset) with the default byte/half selectors and mask; ``.sat`` and the
    ``.add`` accumulate form. Explicit selectors/masks are operand suffixes the
    parser would have to carry; they are not supported."""
    expect_operands(d, n, 4)
    base, k = d.base[:-1], int(d.base[-1])
    bits = 32 // k
    is_set = base == "vset"
    if is_set:
        d.check(set(_CMP_INT) | {"add"})
        if len(d.types) != 2:
            raise d.fail("needs .atype.btype")
        ta, tb = d.types
        dt = "u32"
        cmp = d.one_of(tuple(_CMP_INT))
        if cmp is None:
            raise d.fail("needs a comparison")
    else:
        d.check({"sat", "add"})
        if len(d.types) != 3:
            raise d.fail("needs .dtype.atype.btype")
        dt, ta, tb = d.types
    if any(t not in ("u32", "s32") for t in (dt, ta, tb)):
        raise d.fail("types must be .u32 or .s32")
    add, sat = d.has("add"), d.has("sat")
    if add and sat:
        raise d.fail(".sat cannot be used with .add")
    dsigned = dt == "s32"
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dsigned else (0, (1 << bits) - 1)

    def fn(a, b, c):
        va = _lanes(a, bits, ta == "s32")
        vb = _lanes(b, bits, tb == "s32")
        if is_set:
            res = [_CMP_INT[cmp](x, y).astype(I64) for x, y in zip(va, vb, strict=True)]
        else:
            res = [_VIDEO_OPS[base](x, y) for x, y in zip(va, vb, strict=True)]
            if sat:
                res = [np.clip(r, lo, hi) for r in res]
        if add:
            acc = c.astype(I64)
            for r in res:
                acc = acc + r
            return (acc & I64(0xFFFFFFFF)).astype(U32).view(dtype_of(dt))
        out = np.zeros(a.shape, dtype=I64)
        for i, r in enumerate(res):
            out |= (r & I64((1 << bits) - 1)) << I64(i * bits)
        return out.astype(U32).view(dtype_of(dt))

    return make(d, (dt,), (ta, tb, dt), fn)
