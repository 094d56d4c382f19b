"""``cvt`` (every int/float direction, rounding, .sat/.ftz/.relu/.satfinite,
packed f16x2/bf16x2, tf32, fp8 e4m3/e5m2) and ``mov``."""

from __future__ import annotations

import numpy as np

from . import rounding as fp
from .floating import finish
from .opcodes import (
    BITS,
    DTYPES,
    FLOATS,
    SIGNED,
    UNSIGNED,
    AluOp,
    Decoded,
    expect_operands,
    make,
    width_of,
)

F64 = np.float64
U16, U32, U64, I64 = np.uint16, np.uint32, np.uint64, np.int64
_INTS = UNSIGNED | SIGNED | BITS
_FP8 = {"e4m3x2": fp.FMT_E4M3, "e5m2x2": fp.FMT_E5M2}
_IRND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
_MODS = set(fp.ROUNDINGS) | set(_IRND) | {"rna", "ftz", "sat", "relu", "satfinite"}


def _int_range(t: str) -> tuple[int, int]:
    w = width_of(t)
    if t in SIGNED:
        return -(1 << (w - 1)), (1 << (w - 1)) - 1
    return 0, (1 << w) - 1


# --------------------------------------------------------------------------
# pieces


def int_to_int(a: np.ndarray, st: str, dt: str, sat: bool) -> np.ndarray:
    ddt = DTYPES[dt]
    if not sat:
        return a.astype(ddt)  # truncates; extends by the source's signedness
    lo, hi = _int_range(dt)
    if st == "u64" or (st in BITS and width_of(st) == 64):
        return np.minimum(a, U64(hi)).astype(ddt)
    if st == "s64":
        if dt in ("u64", "b64"):
            return np.where(a < 0, I64(0), a).astype(ddt)
        return np.clip(a, max(lo, -(1 << 63)), min(hi, (1 << 63) - 1)).astype(ddt)
    wide = a.astype(I64)
    return np.clip(wide, max(lo, -(1 << 63)), min(hi, (1 << 63) - 1)).astype(ddt)


def int_to_f64(a: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 RN of integers and the sign of (exact - result) (None: all exact)."""
    with fp.quiet():
        c = a.astype(F64)
        if a.dtype.itemsize < 8:
            return c, None
        big = np.abs(c) >= 2.0 ** 53
        if not big.any():
            return c, None
        lim = 2.0 ** 63 if a.dtype == np.int64 else 2.0 ** 64
        top = c >= lim  # the value rounded up past the type's range
        back = np.where(top, F64(0), c).astype(a.dtype)
        r = np.where(a > back, 1.0, np.where(a < back, -1.0, 0.0))
        r = np.where(top, -1.0, r)
        return c, r


def float_to_int(v: np.ndarray, dt: str, irnd: str) -> np.ndarray:
    """Integer-rounded, saturated conversion of float64 values; NaN -> 0."""
    with fp.quiet():
        r = _IRND[irnd](v)
        nan = np.isnan(r)
        lo, hi = _int_range(dt)
        ddt = DTYPES[dt]
        if width_of(dt) < 64:
            return np.where(nan, 0.0, np.clip(r, lo, hi)).astype(ddt)
        lim = float(hi) + 1.0  # 2^63 or 2^64, exact
        safe_hi = np.nextafter(lim, 0.0)
        out = np.where(nan, 0.0, np.clip(r, float(lo), safe_hi)).astype(ddt)
        return np.where(r >= lim, ddt.type(hi), out)


def encode_small(y: np.ndarray, fmt: fp.Fmt) -> np.ndarray:
    """Bits (uint16, low byte used) of float64 values representable in an fp8 format."""
    mbits = fmt.p - 1
    ebits = 7 - mbits
    bias = 1 - fmt.emin
    with fp.quiet():
        ay = np.abs(y)
        _m, e = np.frexp(ay)
        normal = ay >= fmt.tiny
        exp_field = np.where(normal, e - 1 + bias, 0)
        scaled = np.where(normal, np.ldexp(ay, -(e - 1)) - 1.0, np.ldexp(ay, -fmt.emin))
        mant = scaled * (1 << mbits)
        mant = np.where(np.isfinite(mant), mant, 0).astype(np.int64)
        bits = (exp_field.astype(np.int64) << mbits) | mant
        if fmt.has_inf:
            bits = np.where(np.isinf(y), ((1 << ebits) - 1) << mbits, bits)
        bits = np.where(np.isnan(y), 0x7F, bits)
        bits = bits | (np.signbit(y).astype(np.int64) << 7)
        return bits.astype(U16)


def decode_small(b: np.ndarray, fmt: fp.Fmt) -> np.ndarray:
    """float64 values of fp8 bits (uint, low byte)."""
    mbits = fmt.p - 1
    ebits = 7 - mbits
    bias = 1 - fmt.emin
    b = b.astype(np.int64) & 0xFF
    sign = np.where(b & 0x80, -1.0, 1.0)
    ex = (b >> mbits) & ((1 << ebits) - 1)
    mant = (b & ((1 << mbits) - 1)).astype(F64)
    val = np.where(ex == 0, np.ldexp(mant, fmt.emin - mbits),
                   np.ldexp(1.0 + mant / (1 << mbits), ex - bias))
    emax_field = (1 << ebits) - 1
    if fmt.has_inf:
        val = np.where(ex == emax_field, np.where(mant == 0, np.inf, np.nan), val)
    else:
        val = np.where((ex == emax_field) & (mant == (1 << mbits) - 1), np.nan, val)
    return sign * val


def _satfinite(y: np.ndarray, maxval: float) -> np.ndarray:
    return np.where(np.isinf(y), np.copysign(maxval, y), y)


# --------------------------------------------------------------------------
# cvt


def build_cvt(d: Decoded, n: int, carry: bool) -> AluOp:
    d.check(_MODS)
    if len(d.types) != 2:
        raise d.fail("needs .dtype.atype")
    dt, at = d.types
    frnd = d.one_of(tuple(fp.ROUNDINGS) + ("rna",))
    irnd = d.one_of(tuple(_IRND))
    if frnd and irnd:
        raise d.fail("two rounding modifiers")
    ftz, sat = d.has("ftz"), d.has("sat")
    relu, satfinite = d.has("relu"), d.has("satfinite")
    if frnd == "rna" and dt != "tf32":
        raise d.fail(".rna is for .tf32 only")
    if (relu or satfinite) and dt not in ("f16", "bf16", "f16x2", "bf16x2", "tf32",
                                          "e4m3x2", "e5m2x2"):
        raise d.fail(".relu/.satfinite need a f16/bf16/tf32/fp8 destination")

    # packed and special destinations --------------------------------------
    if dt in ("f16x2", "bf16x2") and at == "f32":
        expect_operands(d, n, 3)
        et = "f16" if dt == "f16x2" else "bf16"
        mode = frnd or "rn"
        if irnd or mode not in ("rn", "rz"):
            raise d.fail("packed conversion takes .rn or .rz")

        def half(x):
            y = fp.round_to_format(x.astype(F64), fp.FORMATS[et], mode)
            if satfinite:
                y = _satfinite(y, fp.FORMATS[et].maxval)
            return finish(y, et, "rn", relu=relu)

        def pack2(a, b):
            hi = half(a).view(U16).astype(U32)
            lo = half(b).view(U16).astype(U32)
            return (hi << U32(16)) | lo

        return make(d, (dt,), ("f32", "f32"), pack2)

    if dt in _FP8:
        fmt = _FP8[dt]
        if not satfinite or (frnd or "rn") != "rn":
            raise d.fail("fp8 conversions are .rn.satfinite")

        def f8(x64):
            with fp.quiet():
                y = fp.round_to_format(x64, fmt, "rn")
                y = np.where(np.isnan(y) | np.isinf(y), np.copysign(fmt.maxval, x64), y)
                y = np.where(np.isnan(x64), np.nan, y)
            if relu:
                y = np.where((y <= 0) & ~np.isnan(y), 0.0, y)
            return encode_small(y, fmt)

        if at == "f32":
            expect_operands(d, n, 3)
            return make(d, ("b16",), ("f32", "f32"),
                        lambda a, b: (f8(a.astype(F64)) << U16(8)) | f8(b.astype(F64)))
        if at == "f16x2":
            expect_operands(d, n, 2)

            def from_h2(a):
                h = np.ascontiguousarray(a).view(np.float16).astype(F64)
                return (f8(h[1::2]) << U16(8)) | f8(h[0::2])

            return make(d, ("b16",), ("f16x2",), from_h2)
        raise d.fail(f"no conversion from .{at} to .{dt}")

    if at in _FP8:
        if dt != "f16x2":
            raise d.fail(f"no conversion from .{at} to .{dt}")
        expect_operands(d, n, 2)
        fmt = _FP8[at]

        def to_h2(a):
            lo = decode_small(a & U16(0xFF), fmt)
            hi = decode_small(a >> U16(8), fmt)
            if relu:
                lo = np.where(lo < 0, 0.0, lo)
                hi = np.where(hi < 0, 0.0, hi)
            hb = fp.canonical_nan(hi.astype(np.float16), "f16").view(U16).astype(U32)
            lb = fp.canonical_nan(lo.astype(np.float16), "f16").view(U16).astype(U32)
            return (hb << U32(16)) | lb

        return make(d, ("f16x2",), ("b16",), to_h2)

    if dt == "tf32":
        expect_operands(d, n, 2)
        if at != "f32":
            raise d.fail("tf32 conversions are from .f32")
        mode = frnd or "rna"

        def tf32(a):
            y = fp.round_to_format(a.astype(F64), fp.FMT_TF32, mode)
            if satfinite:
                y = _satfinite(y, fp.FMT_TF32.maxval)
            out = finish(y, "f32", "rn", relu=relu)
            if relu:
                out = np.where((out <= 0) & ~np.isnan(out), np.float32(0), out)
            return out.view(U32)

        return make(d, ("b32",), ("f32",), tf32)

    expect_operands(d, n, 2)
    if dt not in _INTS | FLOATS or at not in _INTS | FLOATS:
        raise d.fail(f"no conversion from .{at} to .{dt}")
    if ftz and "f32" not in (at, dt):
        raise d.fail(".ftz needs an .f32 source or destination")
    dst_ftz = ftz and dt == "f32"

    def load_src(a):
        if ftz and at == "f32":
            a = fp.flush(a, fp.FMT_F32.tiny)
        return fp.load(a, at)

    # integer -> integer ------------------------------------------------------
    if at in _INTS and dt in _INTS:
        if frnd or irnd or ftz:
            raise d.fail("rounding/.ftz on an integer-to-integer conversion")
        return make(d, (dt,), (at,), lambda a: int_to_int(a, at, dt, sat))

    # float -> integer --------------------------------------------------------
    if dt in _INTS:
        if frnd:
            raise d.fail("float-to-integer conversion takes .rni/.rzi/.rmi/.rpi")
        rnd = irnd or "rzi"
        return make(d, (dt,), (at,), lambda a: float_to_int(load_src(a), dt, rnd))

    # integer -> float --------------------------------------------------------
    if at in _INTS:
        if irnd:
            raise d.fail("integer-to-float conversion takes .rn/.rz/.rm/.rp")
        mode = frnd or "rn"

        def i2f(a):
            c, r = int_to_f64(a)
            if dt == "f64":
                y = c if r is None else fp.fix_directed(c, r, mode)
                return fp.saturate(y) if sat else y
            x = c if r is None else fp.round_to_odd(c, r)
            y = finish(x, dt, mode, dst_ftz, sat, relu)
            return _satfinite_t(y, dt) if satfinite else y

        return make(d, (dt,), (at,), i2f)

    # float -> float ----------------------------------------------------------
    mode = frnd or "rn"
    rint = _IRND[irnd] if irnd else None

    def f2f(a):
        v = load_src(a)
        if rint is not None:
            with fp.quiet():
                v = rint(v)
        if dt == "f64":
            return fp.saturate(v) if sat else v
        y = finish(v, dt, mode, dst_ftz, sat, relu)
        return _satfinite_t(y, dt) if satfinite else y

    return make(d, (dt,), (at,), f2f)


def _satfinite_t(y: np.ndarray, t: str) -> np.ndarray:
    if t == "bf16":
        inf = (y & U16(0x7FFF)) == U16(0x7F80)
        return np.where(inf, (y & U16(0x8000)) | U16(0x7F7F), y)
    return _satfinite(y, fp.FORMATS[t].maxval).astype(y.dtype)


# --------------------------------------------------------------------------
# mov


def build_mov(d: Decoded, n: int, carry: bool) -> AluOp:
    """mov.type d, a: a copy (the result is the source array itself). Vector
    operands ({a, b}) are the executor's: see pack/unpack."""
    expect_operands(d, n, 2)
    d.check(())
    t = d.single_type(set(DTYPES) - {"cc"})
    return make(d, (t,), (t,), lambda a: a)
