"""Integer, logic and bit-manipulation instructions of the ALU.

All arithmetic wraps modulo 2^width like the GPU's; ``fn``s work on whole
lane arrays and never warn. Signed values are handled as their unsigned bits
wherever wrap-around matters (numpy's array arithmetic wraps silently, but
division and shifts get explicit care).
"""

from __future__ import annotations

import numpy as np

from .alu_common import (
    BITS,
    SIGNED,
    UNSIGNED,
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

U8, U16, U32, U64 = np.uint8, np.uint16, np.uint32, np.uint64
I64 = np.int64
M32 = U64(0xFFFFFFFF)
_INT_ARITH = frozenset({"u16", "u32", "u64", "s16", "s32", "s64"})
_INTS_ALL = UNSIGNED | SIGNED | BITS


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
# bit counting and manipulation


def popcount(x: np.ndarray) -> np.ndarray:
    """Number of set bits of an unsigned array, as uint32."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(U32)
    x = x.astype(U64)
    x = x - ((x >> U64(1)) & U64(0x5555555555555555))
    x = (x & U64(0x3333333333333333)) + ((x >> U64(2)) & U64(0x3333333333333333))
    x = (x + (x >> U64(4))) & U64(0x0F0F0F0F0F0F0F0F)
    return ((x * U64(0x0101010101010101)) >> U64(56)).astype(U32)


def clz(x: np.ndarray, w: int) -> np.ndarray:
    """Leading zeros of an unsigned w-bit array, as uint32."""
    x = x.copy()
    s = 1
    while s < w:
        x |= x >> x.dtype.type(s)
        s *= 2
    return (U32(w) - popcount(x)).astype(U32)


def build_popc_clz(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 2)
    d.check(())
    t = d.single_type({"b32", "b64"})
    w = width_of(t)
    if d.base == "popc":
        return make(d, ("u32",), (t,), popcount)
    return make(d, ("u32",), (t,), lambda a: clz(a, w))


def build_bfind(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 2)
    d.check({"shiftamt"})
    t = d.single_type({"u32", "u64", "s32", "s64"})
    w = width_of(t)
    signed = t in SIGNED
    shiftamt = d.has("shiftamt")

    def fn(a):
        u = as_unsigned(a)
        if signed:
            u = np.where(a < 0, ~u, u)
        lz = clz(u, w)
        found = u != 0
        r = lz if shiftamt else U32(w - 1) - lz
        return np.where(found, r, U32(0xFFFFFFFF)).astype(U32)

    return make(d, ("u32",), (t,), fn)


_REV_MASKS = [(1, 0x5555555555555555), (2, 0x3333333333333333), (4, 0x0F0F0F0F0F0F0F0F),
              (8, 0x00FF00FF00FF00FF), (16, 0x0000FFFF0000FFFF), (32, 0x00000000FFFFFFFF)]


def bit_reverse(x: np.ndarray, w: int) -> np.ndarray:
    ut = x.dtype.type
    for s, m in _REV_MASKS:
        if s >= w:
            break
        mm = ut(m & ((1 << w) - 1))
        x = ((x >> ut(s)) & mm) | ((x & mm) << ut(s))
    return x


def build_brev(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 2)
    d.check(())
    t = d.single_type({"b32", "b64"})
    w = width_of(t)
    return make(d, (t,), (t,), lambda a: bit_reverse(a, w))


def _low_mask(length: np.ndarray, w: int) -> np.ndarray:
    """(1 << length) - 1 for 0 <= length <= w, as the w-bit unsigned type."""
    ut = uint_dtype(w).type
    length = np.minimum(length, w)
    m = (ut(1) << np.minimum(length, w - 1).astype(uint_dtype(w))) - ut(1)
    return np.where(length >= w, ut((1 << w) - 1), m)


def build_bfe(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 4)
    d.check(())
    t = d.single_type({"u32", "u64", "s32", "s64"})
    w = width_of(t)
    ut = uint_dtype(w)
    signed = t in SIGNED

    def fn(a, b, c):
        u = as_unsigned(a)
        pos = (b & U32(0xFF)).astype(I64)
        ln = (c & U32(0xFF)).astype(I64)
        inside = pos < w
        avail = np.where(inside, np.minimum(ln, w - pos), 0)
        field = (u >> np.minimum(pos, w - 1).astype(ut)) & _low_mask(avail, w)
        field = np.where(inside, field, ut.type(0))
        if signed:
            sb = np.minimum(pos + ln - 1, w - 1)
            sbit = ((u >> np.maximum(sb, 0).astype(ut)) & ut.type(1)).astype(bool) & (ln > 0)
            field = np.where(sbit, field | ~_low_mask(avail, w), field)
        return field.view(a.dtype)

    return make(d, (t,), (t, "u32", "u32"), fn)


def build_bfi(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 5)
    d.check(())
    t = d.single_type({"b32", "b64"})
    w = width_of(t)
    ut = uint_dtype(w)

    def fn(a, b, c, e):
        pos = (c & U32(0xFF)).astype(I64)
        ln = (e & U32(0xFF)).astype(I64)
        inside = pos < w
        sh = np.minimum(pos, w - 1).astype(ut)
        mask = np.where(inside, _low_mask(np.where(inside, np.minimum(ln, w - pos), 0), w) << sh,
                        ut.type(0))
        return (b & ~mask) | ((a << sh) & mask)

    return make(d, (t,), (t, t, "u32", "u32"), fn)


def build_bmsk(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 3)
    d.check({"clamp", "wrap"})
    d.single_type({"b32"})
    mode = d.one_of(("clamp", "wrap"))
    if mode is None:
        raise d.fail("needs .clamp or .wrap")

    def fn(a, b):
        a1 = (a & U32(31)).astype(I64)
        b1 = (b & U32(31)).astype(I64)
        ones = I64(0xFFFFFFFF)
        mask0 = (ones << a1) & ones
        s = a1 + b1
        kill1 = s >= 32
        if mode == "clamp":
            mask0 = np.where(a >= 32, I64(0), mask0)
            kill1 = kill1 | (a >= 32) | (b >= 32)
        mask1 = np.where(kill1, I64(0), np.where(b1 == 0, ones, (ones << np.minimum(s, 32)) & ones))
        return (mask0 & ~mask1 & ones).astype(U32)

    return make(d, ("b32",), ("b32", "u32"), fn)


def build_szext(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 3)
    d.check({"clamp", "wrap"})
    t = d.single_type({"u32", "s32"})
    mode = d.one_of(("clamp", "wrap"))
    if mode is None:
        raise d.fail("needs .clamp or .wrap")

    def fn(a, b):
        u = as_unsigned(a).astype(I64)
        b1 = (b & U32(31)).astype(I64)
        too_large = (b >= 32) if mode == "clamp" else np.zeros(b.shape, bool)
        ones = I64(0xFFFFFFFF)
        mask = np.where(too_large, I64(0), (ones << b1) & ones)
        if t == "s32":
            sbit = ((u >> ((b1 - 1) & 31)) & 1).astype(bool) & (b1 != 0) & ~too_large
        else:
            sbit = np.zeros(u.shape, bool)
        r = (u & ~mask & ones) | np.where(sbit, mask, I64(0))
        return r.astype(U32).view(dtype_of(t))

    return make(d, (t,), (t, "u32"), fn)


def build_fns(d: Decoded, n: int, carry: bool) -> AluOp:
    """fns.b32 d, mask, base, offset: a 32-step vectorised scan."""
    expect_operands(d, n, 4)
    d.check(())
    d.single_type({"b32"})

    def fn(mask, base, offset):
        m = mask.astype(I64)
        pos = as_unsigned(base).astype(I64)
        off = offset.astype(I64)
        out = np.full(m.shape, 0xFFFFFFFF, dtype=I64)
        zero = off == 0
        bit0 = (pos < 32) & (((m >> np.minimum(pos, 31)) & 1) == 1)
        out = np.where(zero & bit0, pos, out)
        count = np.abs(off) - 1
        inc = np.where(off > 0, 1, -1)
        live = ~zero & (pos < 32)
        for _ in range(33):
            inr = live & (pos >= 0) & (pos < 32)
            if not inr.any():
                break
            bit = inr & (((m >> np.clip(pos, 0, 31)) & 1) == 1)
            hit = bit & (count == 0)
            out = np.where(hit, pos, out)
            live = live & ~hit & inr
            count = np.where(bit & ~hit, count - 1, count)
            pos = pos + inc
        return out.astype(U32)

    return make(d, ("b32",), ("b32", "u32", "s32"), fn)


# --------------------------------------------------------------------------
# logic


def build_logic(d: Decoded, n: int, carry: bool) -> AluOp:
    d.check(())
    t = d.single_type({"pred", "b16", "b32", "b64"} | {"b8"})
    if d.base == "not":
        expect_operands(d, n, 2)
        return make(d, (t,), (t,), np.logical_not if t == "pred" else np.invert)
    if d.base == "cnot":
        expect_operands(d, n, 2)
        if t == "pred":
            return make(d, (t,), (t,), np.logical_not)
        one = dtype_of(t).type(1)
        return make(d, (t,), (t,), lambda a: (a == 0).astype(a.dtype) * one)
    expect_operands(d, n, 3)
    op = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[d.base]
    return make(d, (t,), (t, t), op)


def lop3_value(a: np.ndarray, b: np.ndarray, c: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """Three-input logic on uint32 arrays; bit i of lut is the output for
    (a,b,c) bits with index (a<<2)|(b<<1)|c, i.e. F(0xF0, 0xCC, 0xAA) == lut."""
    lut = lut.astype(U32) & U32(0xFF)
    uniform = lut.size > 0 and bool((lut == lut[0]).all())
    na, nb, nc = ~a, ~b, ~c
    out = np.zeros(a.shape, dtype=U32)
    for k in range(8):
        term = (a if k & 4 else na) & (b if k & 2 else nb) & (c if k & 1 else nc)
        if uniform:
            if (int(lut[0]) >> k) & 1:
                out |= term
        else:
            out |= term & (U32(0) - ((lut >> U32(k)) & U32(1)))
    return out


def build_lop3(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 5)
    d.check(())
    d.single_type({"b32"})
    return make(d, ("b32",), ("b32", "b32", "b32", "b32"), lop3_value)


# --------------------------------------------------------------------------
# shifts, funnel shifts, byte permute


def build_shift(d: Decoded, n: int, carry: bool) -> AluOp:
    """shl/shr: the amount is unsigned; amounts >= width give 0 (shr.s: the sign fill)."""
    expect_operands(d, n, 3)
    d.check(())
    if d.base == "shl":
        t = d.single_type({"b16", "b32", "b64"})
    else:
        t = d.single_type({"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"})
    w = width_of(t)
    arith = t in SIGNED

    def fn(a, b):
        big = b >= U32(w)
        sh = np.minimum(b, U32(w - 1)).astype(a.dtype)
        if d.base == "shl":
            return np.where(big, a.dtype.type(0), a << sh)
        r = a >> sh  # for signed types this already is the sign fill at w-1
        return r if arith else np.where(big, a.dtype.type(0), r)

    return make(d, (t,), (t, "u32"), fn)


def build_shf(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 4)
    d.check({"l", "r", "wrap", "clamp"})
    d.single_type({"b32"})
    direction = d.one_of(("l", "r"))
    mode = d.one_of(("wrap", "clamp"))
    if direction is None or mode is None:
        raise d.fail("needs .l/.r and .wrap/.clamp")

    def fn(a, b, c):
        nsh = np.minimum(c, U32(32)) if mode == "clamp" else c & U32(31)
        v = (b.astype(U64) << U64(32)) | a.astype(U64)
        sh = nsh.astype(U64)
        if direction == "l":
            return ((v << sh) >> U64(32)).astype(U32)
        return ((v >> sh) & M32).astype(U32)

    return make(d, ("b32",), ("b32", "b32", "u32"), fn)


_PRMT_MODES = {
    "f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
    "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
    "rc8": [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
    "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
    "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
    "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]],
}
"""Source byte (0..7 of {b, a}) for result bytes 0..3, per mode and c[1:0]."""


def _prmt_uniform(a: np.ndarray, b: np.ndarray, ctl: int, mode: str | None) -> np.ndarray:
    """prmt with one selector for every lane (the usual immediate): whole-byte moves."""
    if mode is None:
        sels = [(ctl >> (4 * k)) & 0xF for k in range(4)]
    else:
        sels = _PRMT_MODES[mode][ctl & 3]
    out = np.zeros(a.shape, dtype=U32)
    for k, sel in enumerate(sels):
        src = a if (sel & 7) < 4 else b
        byte = (src >> U32(8 * (sel & 3))) & U32(0xFF)
        if mode is None and sel & 8:
            byte = np.where(byte & U32(0x80), U32(0xFF), U32(0))
        out |= byte << U32(8 * k)
    return out


def prmt_value(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str | None) -> np.ndarray:
    if c.size and bool((c == c[0]).all()):
        return _prmt_uniform(a, b, int(c[0]), mode)
    out = np.zeros(a.shape, dtype=U32)
    table = None if mode is None else np.array(_PRMT_MODES[mode], dtype=U32)
    ctl = None if mode is None else (c & U32(3)).astype(np.intp)
    for k in range(4):
        sel = ((c >> U32(4 * k)) & U32(0xF)) if table is None else table[ctl, k]
        src = np.where((sel & U32(4)) != 0, b, a)
        byte = (src >> ((sel & U32(3)) * U32(8))) & U32(0xFF)
        if table is None:
            byte = np.where((sel & U32(8)) != 0,
                            np.where((byte & U32(0x80)) != 0, U32(0xFF), U32(0)), byte)
        out |= byte << U32(8 * k)
    return out


def build_prmt(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 4)
    d.check(set(_PRMT_MODES))
    d.single_type({"b32"})
    mode = d.one_of(tuple(_PRMT_MODES))
    return make(d, ("b32",), ("b32", "b32", "b32"), lambda a, b, c: prmt_value(a, b, c, mode))


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
