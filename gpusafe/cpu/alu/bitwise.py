"""Bit instructions of the ALU: counting (``popc``, ``clz``, ``bfind``,
``fns``), reversal, bit fields (``bfe``, ``bfi``, ``bmsk``, ``szext``), logic
(``and``/``or``/``xor``/``not``/``cnot``, ``lop3``), shifts (``shl``, ``shr``,
``shf``) and byte permutes (``prmt``).  ``fn``s work on whole lane arrays and
never warn.
"""

from __future__ import annotations

import numpy as np

from .opcodes import (
    SIGNED,
    AluOp,
    Decoded,
    as_unsigned,
    dtype_of,
    expect_operands,
    make,
    uint_dtype,
    width_of,
)

U32, U64 = np.uint32, np.uint64
I64 = np.int64
M32 = U64(0xFFFFFFFF)


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
