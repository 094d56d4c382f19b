"""Comparison and selection: setp, set, selp, slct."""

from __future__ import annotations

import numpy as np

from . import rounding as fp
from .opcodes import (
    BITS,
    FLOATS,
    HALF_PAIRS,
    SIGNED,
    UNSIGNED,
    AluOp,
    Decoded,
    as_unsigned,
    dtype_of,
    expect_operands,
    make,
    uint_dtype,
)

ORDERED = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}
UNORDERED = {"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}
UNSIGNED_CMP = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
CMP_OPS = tuple(ORDERED) + tuple(UNORDERED) + tuple(UNSIGNED_CMP) + ("num", "nan")
BOOL_OPS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}
_INT_TYPES = UNSIGNED | SIGNED | BITS


def comparator(d: Decoded, t: str, cmp: str, ftz: bool):
    """fn(a, b) -> bool array for PTX type t (element type for packed halves)."""
    if t in _INT_TYPES:
        if cmp in UNORDERED or cmp in ("num", "nan"):
            raise d.fail(f".{cmp} is a floating-point comparison")
        if ftz:
            raise d.fail(".ftz on an integer comparison")
        if t in BITS and cmp not in ("eq", "ne"):
            raise d.fail(f".{cmp} on a bit type (only eq/ne)")
        if cmp in UNSIGNED_CMP:
            f = ORDERED[UNSIGNED_CMP[cmp]]
            return lambda a, b: f(as_unsigned(a), as_unsigned(b))
        return ORDERED[cmp]
    if cmp in UNSIGNED_CMP:
        raise d.fail(f".{cmp} is an unsigned-integer comparison")

    def prep(x):
        if ftz and t != "f64":
            x = fp.flush_t(x, t)
        return fp.bf16_to_f32(x) if t == "bf16" else x

    if cmp == "num":
        return lambda a, b: ~np.isnan(prep(a)) & ~np.isnan(prep(b))
    if cmp == "nan":
        return lambda a, b: np.isnan(prep(a)) | np.isnan(prep(b))
    if cmp == "ne":  # ordered: false when either is NaN (numpy's != says true)
        def ne(a, b):
            a, b = prep(a), prep(b)
            return (a != b) & ~np.isnan(a) & ~np.isnan(b)
        return ne
    if cmp in ORDERED:
        f = ORDERED[cmp]
        return lambda a, b: f(prep(a), prep(b))
    f = ORDERED[UNORDERED[cmp]]

    def unordered(a, b):
        a, b = prep(a), prep(b)
        return f(a, b) | np.isnan(a) | np.isnan(b)

    return unordered


def _decode_cmp(d: Decoded, n: int):
    expect_operands(d, n, 3, 4)
    d.check(set(CMP_OPS) | set(BOOL_OPS) | {"ftz"})
    cmp = d.one_of(CMP_OPS)
    if cmp is None:
        raise d.fail("needs a comparison operator")
    bop = d.one_of(tuple(BOOL_OPS))
    if (n == 4) != (bop is not None):
        raise d.fail("a boolean operator goes with exactly one extra predicate source")
    return cmp, bop, d.has("ftz")


def build_setp(d: Decoded, n: int, carry: bool) -> AluOp:
    """setp: always returns (p, q). For scalar types q = !cmp BoolOp c; for
    f16x2/bf16x2 p is the lower halves' result and q the upper halves'. The
    executor stores q only when the destination is a ``p|q`` pair."""
    cmp, bop, ftz = _decode_cmp(d, n)
    t = d.single_type(_INT_TYPES | FLOATS | HALF_PAIRS)
    combine = BOOL_OPS[bop] if bop else None
    if t in HALF_PAIRS:
        et = "f16" if t == "f16x2" else "bf16"
        f = comparator(d, et, cmp, ftz)
        view = np.float16 if t == "f16x2" else np.uint16

        def pair(a, b, c=None):
            r = f(np.ascontiguousarray(a).view(view), np.ascontiguousarray(b).view(view))
            lo, hi = np.ascontiguousarray(r[0::2]), np.ascontiguousarray(r[1::2])
            if combine is not None:
                return combine(lo, c), combine(hi, c)
            return lo, hi

        return make(d, ("pred", "pred"), (t, t) + (("pred",) if bop else ()), pair)
    f = comparator(d, t, cmp, ftz)

    def fn(a, b, c=None):
        r = f(a, b)
        if combine is not None:
            return combine(r, c), combine(~r, c)
        return r, ~r

    return make(d, ("pred", "pred"), (t, t) + (("pred",) if bop else ()), fn)


def build_set(d: Decoded, n: int, carry: bool) -> AluOp:
    """set.CmpOp{.BoolOp}{.ftz}.dtype.stype: true is 1.0 for a float dtype and
    all ones for an integer one (per 16-bit half for packed sources)."""
    cmp, bop, ftz = _decode_cmp(d, n)
    if len(d.types) != 2:
        raise d.fail("needs .dtype.stype")
    dt, st = d.types
    combine = BOOL_OPS[bop] if bop else None
    src = (st, st) + (("pred",) if bop else ())
    if st in HALF_PAIRS:
        if dt not in ("u32", "s32", "f16x2", "bf16x2"):
            raise d.fail(f"destination .{dt} not supported for .{st}")
        et = "f16" if st == "f16x2" else "bf16"
        f = comparator(d, et, cmp, ftz)
        view = np.float16 if st == "f16x2" else np.uint16
        true = {"f16x2": 0x3C00, "bf16x2": 0x3F80}.get(dt, 0xFFFF)

        def pair(a, b, c=None):
            r = f(np.ascontiguousarray(a).view(view), np.ascontiguousarray(b).view(view))
            if combine is not None:
                r = combine(r, np.repeat(c, 2))
            halves = np.where(r, np.uint16(true), np.uint16(0))
            return np.ascontiguousarray(halves).view(np.uint32).view(dtype_of(dt))

        return make(d, (dt,), src, pair)
    if st not in _INT_TYPES | FLOATS:
        raise d.fail(f"source type .{st} not supported")
    if dt not in ("u32", "s32", "f32", "u16", "s16", "f16", "bf16"):
        raise d.fail(f"destination type .{dt} not supported")
    f = comparator(d, st, cmp, ftz)
    ddt = dtype_of(dt)
    if dt in ("f32", "f16"):
        true = ddt.type(1.0)
    elif dt == "bf16":
        true = np.uint16(0x3F80)
    else:
        true = uint_dtype(8 * ddt.itemsize).type(-1 & ((1 << (8 * ddt.itemsize)) - 1)).view(ddt)
    false = ddt.type(0)

    def fn(a, b, c=None):
        r = f(a, b)
        if combine is not None:
            r = combine(r, c)
        return np.where(r, true, false)

    return make(d, (dt,), src, fn)


def build_selp(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 4)
    d.check(())
    t = d.single_type(_INT_TYPES | FLOATS | HALF_PAIRS | {"pred"})
    return make(d, (t,), (t, t, "pred"), lambda a, b, c: np.where(c, a, b))


def build_slct(d: Decoded, n: int, carry: bool) -> AluOp:
    """slct.dtype.s32 / slct{.ftz}.dtype.f32 d, a, b, c: c >= 0 ? a : b
    (-0.0 counts as >= 0; a NaN c selects b)."""
    expect_operands(d, n, 4)
    d.check({"ftz"})
    if len(d.types) != 2:
        raise d.fail("needs .dtype and the selector type")
    dt, ct = d.types
    if ct not in ("s32", "f32"):
        raise d.fail("selector type must be .s32 or .f32")
    if dt not in _INT_TYPES | FLOATS:
        raise d.fail(f"type .{dt} not supported")
    ftz = d.has("ftz")
    if ftz and ct != "f32":
        raise d.fail(".ftz needs an .f32 selector")

    def fn(a, b, c):
        if ftz:
            c = fp.flush(c, fp.FMT_F32.tiny)
        with fp.quiet():
            return np.where(c >= 0, a, b)

    return make(d, (dt,), (dt, dt, ct), fn)
