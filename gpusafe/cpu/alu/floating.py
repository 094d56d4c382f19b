"""Floating-point instructions of the ALU: arithmetic with every rounding mode,
``.ftz``/``.sat``/``.relu``, min/max, abs/neg, copysign, testp and the
approximate functions, for f32, f64, f16, bf16 and the packed f16x2/bf16x2.

Narrow types compute in float64 and round once (see :mod:`gpusafe.cpu.alu.rounding`); packed
pairs run the scalar op on both 16-bit halves at once (the uint32 array viewed
as twice as many halves). NaN results of f32/f16/bf16 operations are the GPU's
canonical NaN (0x7fffffff / 0x7fff).
"""

from __future__ import annotations

import numpy as np

from . import rounding as fp
from .opcodes import FLOATS, HALF_PAIRS, AluOp, Decoded, expect_operands, make

F64 = np.float64
U16, U32 = np.uint16, np.uint32
_ELEM = {"f16x2": "f16", "bf16x2": "bf16"}
_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _elem(t: str) -> str:
    return _ELEM.get(t, t)


def packed(t: str, core):
    """Lift ``core`` (on element arrays, returning element arrays) to type t:
    for f16x2/bf16x2 the uint32 lanes are viewed as pairs of 16-bit halves."""
    if t not in HALF_PAIRS:
        return core
    view = np.float16 if t == "f16x2" else U16

    def fn(*xs):
        halves = [np.ascontiguousarray(x).view(view) for x in xs]
        r = core(*halves)
        if isinstance(r, tuple):
            return tuple(np.ascontiguousarray(v).view(U32) for v in r)
        return np.ascontiguousarray(r).view(U32)

    return fn


def _relu(y: np.ndarray) -> np.ndarray:
    """``.relu``: negative results (and -0) become +0; NaN stays NaN."""
    with fp.quiet():
        return np.where((y <= 0) & ~np.isnan(y), y.dtype.type(0), y)


def finish(x64: np.ndarray, et: str, mode: str, ftz: bool = False, sat: bool = False,
           relu: bool = False) -> np.ndarray:
    """Round a float64 result (exact, or round-to-odd at 53 bits) to element type
    ``et`` in ``mode`` and apply .ftz, .sat, .relu and the canonical NaN."""
    with fp.quiet():
        if et == "f64":
            out = x64
        elif mode == "rn" and et in ("f32", "f16"):
            out = x64.astype(_NP[et])
        elif mode == "rn" and et == "bf16":
            out = fp.bf16_rn_from_f64(x64)
        else:
            out = fp.store(fp.round_to_format(x64, fp.FORMATS[et], mode), et)
        return post(out, et, ftz, sat, relu)


def post(out: np.ndarray, et: str, ftz: bool = False, sat: bool = False,
         relu: bool = False) -> np.ndarray:
    """.ftz, .sat, .relu and the canonical NaN on a rounded result of type et."""
    with fp.quiet():
        if ftz:
            out = fp.flush_t(out, et)
        if sat or relu:
            if et == "bf16":
                f = fp.bf16_to_f32(out)
                f = fp.saturate(f) if sat else _relu(f)
                out = np.where(np.isnan(f), out,
                               (f.view(U32) >> U32(16)).astype(U16))
            else:
                out = fp.saturate(out) if sat else _relu(out)
        return fp.canonical_nan(out, et)


class FSpec:
    """Modifiers of a floating-point instruction."""

    def __init__(self, d: Decoded, allowed_extra=(), rounding=True, default_mode="rn",
                 f64_ftz: bool = False):
        allowed = {"ftz", "sat", "relu"} | set(allowed_extra)
        if rounding:
            allowed |= set(fp.ROUNDINGS)
        d.check(allowed)
        self.t = d.single_type(FLOATS | HALF_PAIRS)
        self.et = _elem(self.t)
        self.mode = d.one_of(fp.ROUNDINGS, default_mode) if rounding else "rn"
        self.ftz = d.has("ftz")
        self.sat = d.has("sat")
        self.relu = d.has("relu")
        if self.et == "f64" and ((self.ftz and not f64_ftz) or self.sat or self.relu):
            raise d.fail(".ftz/.sat/.relu do not apply to .f64 here")
        if self.relu and self.et not in ("f16", "bf16"):
            raise d.fail(".relu applies to f16/bf16 types only")

    def flush_in(self, x: np.ndarray) -> np.ndarray:
        return fp.flush_t(x, self.et) if self.ftz else x

    def finish(self, x64: np.ndarray) -> np.ndarray:
        return finish(x64, self.et, self.mode, self.ftz, self.sat, self.relu)

    def post(self, out: np.ndarray) -> np.ndarray:
        return post(out, self.et, self.ftz, self.sat, self.relu)


# --------------------------------------------------------------------------
# add, sub, mul, fma/mad, div


_NATIVE_F32 = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def _narrow_core(s: FSpec, kind: str):
    mode = s.mode
    if s.et == "f32" and mode == "rn" and kind in _NATIVE_F32:
        # numpy's float32 + - * / are IEEE round-to-nearest (subnormals included)
        native = _NATIVE_F32[kind]

        def fast(a, b):
            with fp.quiet():
                return s.post(native(s.flush_in(a), s.flush_in(b)))

        return fast

    def core(*xs):
        vals = [fp.load(s.flush_in(x), s.et) for x in xs]
        with fp.quiet():
            if kind == "add":
                x64 = fp.narrow_add(vals[0], vals[1], mode)
            elif kind == "sub":
                x64 = fp.narrow_add(vals[0], -vals[1], mode)
            elif kind == "mul":
                x64 = vals[0] * vals[1]
            elif kind == "fma":
                x64 = fp.narrow_fma(vals[0], vals[1], vals[2], mode)
            elif kind == "div":
                x64 = fp.narrow_div(vals[0], vals[1], mode)
            else:
                raise AssertionError(kind)
        return s.finish(x64)

    return core


def _f64_core(mode: str, kind: str):
    if kind == "add":
        return lambda a, b: fp.f64_add(a, b, mode)
    if kind == "sub":
        return lambda a, b: fp.f64_add(a, -b, mode)
    if kind == "mul":
        return lambda a, b: fp.f64_mul(a, b, mode)
    if kind == "fma":
        return lambda a, b, c: fp.f64_fma(a, b, c, mode)
    if kind == "div":
        return lambda a, b: fp.f64_div(a, b, mode)
    raise AssertionError(kind)


def build_float_arith(d: Decoded, n: int, carry: bool) -> AluOp:
    kind = {"add": "add", "sub": "sub", "mul": "mul", "fma": "fma", "mad": "fma"}[d.base]
    nsrc = 3 if kind == "fma" else 2
    expect_operands(d, n, nsrc + 1)
    s = FSpec(d)
    if kind == "fma" and d.base == "fma" and not d.has(*fp.ROUNDINGS) and s.et in ("f32", "f64"):
        raise d.fail("fma.f32/.f64 needs a rounding modifier")
    if s.et == "f64":
        core = _f64_core(s.mode, kind)
    else:
        core = _narrow_core(s, kind)
    return make(d, (s.t,), (s.t,) * nsrc, packed(s.t, core))


def build_float_div(d: Decoded, n: int, carry: bool) -> AluOp:
    """div.rnd (correctly rounded), div.full.f32 and div.approx.f32.

    ``div.full`` (2 ulp on the GPU) is computed correctly rounded. ``div.approx``
    is a * (1/b): correctly rounded too, except that, as on the GPU, a divisor
    with 2^126 < |b| < 2^128 gives a (signed) zero, or NaN for an infinite a.
    """
    expect_operands(d, n, 3)
    approx = d.one_of(("approx", "full"))
    s = FSpec(d, allowed_extra={"approx", "full"})
    if approx and (s.et != "f32" or d.has(*fp.ROUNDINGS)):
        raise d.fail(".approx/.full is for .f32 without a rounding modifier")
    if s.et == "f64":
        return make(d, (s.t,), (s.t, s.t), _f64_core(s.mode, "div"))
    core = _narrow_core(s, "div")
    if approx == "approx":
        big = np.float32(2.0 ** 126)

        def fn(a, b):
            r = core(a, b)
            huge = (np.abs(b) > big) & np.isfinite(b)
            if huge.any():
                with fp.quiet():
                    z = fp.flush_t(a, "f32") if s.ftz else a
                    r = np.where(huge, z * np.copysign(np.float32(0), b), r)
                r = fp.canonical_nan(r.astype(np.float32), "f32")
            return r

        return make(d, (s.t,), (s.t, s.t), fn)
    return make(d, (s.t,), (s.t, s.t), packed(s.t, core))


# --------------------------------------------------------------------------
# unary: rcp, sqrt, rsqrt and the approximate transcendental functions

_UNARY_F64 = {
    "sin": np.sin, "cos": np.cos, "lg2": np.log2, "ex2": np.exp2, "tanh": np.tanh,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
}


def build_float_unary(d: Decoded, n: int, carry: bool) -> AluOp:
    """rcp/sqrt (.approx or a rounding mode), rsqrt/sin/cos/lg2/ex2/tanh (.approx).

    Approximate forms are computed accurately (float64, rounded once to the
    result type): within every error bound the PTX ISA states for them.
    """
    expect_operands(d, n, 2)
    op = d.base
    approx = d.has("approx")
    s = FSpec(d, allowed_extra={"approx"}, f64_ftz=True)
    if op in ("rcp", "sqrt"):
        if approx == d.has(*fp.ROUNDINGS):
            raise d.fail("needs exactly one of .approx and a rounding modifier")
        if approx and s.et == "f64" and op == "sqrt":
            raise d.fail("sqrt.approx has no .f64 form")
    elif not approx:
        raise d.fail(f"{op} needs .approx")
    elif d.has(*fp.ROUNDINGS):
        raise d.fail("rounding modifier not allowed with .approx")
    mode = s.mode

    if s.et == "f64":
        if op not in ("rcp", "sqrt", "rsqrt"):
            raise d.fail(f"{op} has no .f64 form")
        # rcp.approx.ftz.f64 / rsqrt.approx{.ftz}.f64 flush double subnormals
        ftz = d.has("ftz")
        if ftz and not (approx and op in ("rcp", "rsqrt")):
            raise d.fail(".ftz with .f64 only on rcp/rsqrt.approx")
        if d.has("sat", "relu"):
            raise d.fail(".sat/.relu do not apply to .f64")

        def f64fn(a):
            if ftz:
                a = fp.flush(a, fp.FMT_F64.tiny)
            with fp.quiet():
                if op == "rcp":
                    r = fp.f64_div(np.ones_like(a), a, mode)
                elif op == "sqrt":
                    r = fp.f64_sqrt(a, mode)
                else:
                    r = _UNARY_F64[op](a)
            return fp.flush(r, fp.FMT_F64.tiny) if ftz else r

        return make(d, ("f64",), ("f64",), f64fn)

    if s.et != "f32" and op not in ("ex2", "tanh"):
        raise d.fail(f"{op} has no .{s.t} form")

    def core(a):
        x = fp.load(s.flush_in(a), s.et)
        with fp.quiet():
            if op == "rcp":
                x64 = fp.narrow_div(np.ones_like(x), x, mode)
            elif op == "sqrt":
                x64 = fp.narrow_sqrt(x, mode)
            else:
                x64 = _UNARY_F64[op](x)
        return s.finish(x64)

    return make(d, (s.t,), (s.t,), packed(s.t, core))


# --------------------------------------------------------------------------
# min / max, abs / neg, copysign, testp


def build_float_minmax(d: Decoded, n: int, carry: bool) -> AluOp:
    """min/max: a NaN operand is ignored (NaN only if all are NaN) unless .NaN;
    -0.0 < +0.0; .xorsign.abs takes |a|,|b| and gives the result the sign
    sign(a) ^ sign(b). A NaN result is the canonical NaN."""
    expect_operands(d, n, 3, 4)
    s = FSpec(d, allowed_extra={"NaN", "xorsign", "abs"}, rounding=False)
    if s.sat or s.relu:
        raise d.fail(".sat/.relu do not apply to min/max")
    if d.has("xorsign") != d.has("abs"):
        raise d.fail(".xorsign and .abs go together")
    nan_prop = d.has("NaN")
    xorsign = d.has("xorsign")
    if s.et == "f64" and (nan_prop or xorsign):
        raise d.fail(".NaN/.xorsign do not apply to .f64")
    is_min = d.base == "min"
    et = s.et

    ut = {"f16": U16, "f32": U32, "f64": np.uint64}.get(et)

    def fast(a, b):
        a, b = s.flush_in(a), s.flush_in(b)
        if is_min:
            r = np.minimum(a, b) if nan_prop else np.fmin(a, b)
        else:
            r = np.maximum(a, b) if nan_prop else np.fmax(a, b)
        z = (a == 0) & (b == 0)  # -0.0 < +0.0
        if z.any():
            za, zb = a.view(ut), b.view(ut)
            r = np.where(z, (za | zb) if is_min else (za & zb), r.view(ut)).view(a.dtype)
        return fp.canonical_nan(r, et)

    def core(*xs):
        if len(xs) == 2 and not xorsign and et != "bf16":
            return fast(*xs)
        xs = [s.flush_in(x) for x in xs]
        vals = [fp.bf16_to_f32(x) for x in xs] if et == "bf16" else list(xs)
        sign = None
        if xorsign:
            sign = np.signbit(vals[0])
            for v in vals[1:]:
                sign = sign ^ np.signbit(v)
            vals = [np.abs(v) for v in vals]
        idx = np.zeros(vals[0].shape, dtype=np.intp)
        best = vals[0]
        anynan = np.isnan(best)
        for k, v in enumerate(vals[1:], start=1):
            vn = np.isnan(v)
            bn = np.isnan(best)
            with fp.quiet():
                if is_min:
                    better = (v < best) | ((v == best) & np.signbit(v) & ~np.signbit(best))
                else:
                    better = (v > best) | ((v == best) & ~np.signbit(v) & np.signbit(best))
            take = (better | bn) & ~vn
            idx = np.where(take, k, idx)
            best = np.where(take, v, best)
            anynan = anynan | vn
        out = np.choose(idx, xs) if len(xs) > 1 else xs[0]
        res_nan = np.isnan(best) | (anynan if nan_prop else False)
        if xorsign:
            ut = np.uint32 if et == "f32" else np.uint16
            sbit = ut(1 << (8 * np.dtype(ut).itemsize - 1))
            bits = out.view(ut) if out.dtype != ut else out
            bits = (bits & ~sbit) | np.where(sign, sbit, ut(0))
            out = bits.view(out.dtype)
        if np.any(res_nan):
            out = out.copy()
            if et == "bf16":
                out[res_nan] = U16(0x7FFF)
            elif et == "f64":
                out[res_nan] = np.nan
            else:
                out = fp.canonical_nan(np.where(res_nan, out.dtype.type(np.nan), out), et)
        return out

    return make(d, (s.t,), (s.t,) * (n - 1), packed(s.t, core))


_SIGN_BIT = {"f32": (np.uint32, 0x80000000), "f64": (np.uint64, 0x8000000000000000),
             "f16": (np.uint16, 0x8000), "bf16": (np.uint16, 0x8000)}


def build_float_absneg(d: Decoded, n: int, carry: bool) -> AluOp:
    """abs/neg: clear/flip the sign bit (NaN payloads kept); .ftz flushes first."""
    expect_operands(d, n, 2)
    s = FSpec(d, rounding=False)
    if s.sat or s.relu:
        raise d.fail(".sat/.relu do not apply")
    ut, bit = _SIGN_BIT[s.et]
    neg = d.base == "neg"

    def core(a):
        a = s.flush_in(a)
        bits = a.view(ut)
        bits = bits ^ ut(bit) if neg else bits & ut(~bit & ((1 << (8 * np.dtype(ut).itemsize)) - 1))
        return bits.view(a.dtype)

    return make(d, (s.t,), (s.t,), packed(s.t, core))


def build_copysign(d: Decoded, n: int, carry: bool) -> AluOp:
    """copysign.type d, a, b: b with the sign of a."""
    expect_operands(d, n, 3)
    d.check(())
    t = d.single_type({"f32", "f64"})
    return make(d, (t,), (t, t), lambda a, b: np.copysign(b, a))


def build_testp(d: Decoded, n: int, carry: bool) -> AluOp:
    expect_operands(d, n, 2)
    ops = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")
    d.check(set(ops))
    t = d.single_type({"f32", "f64"})
    op = d.one_of(ops)
    if op is None:
        raise d.fail("needs a test")
    tiny = fp.FORMATS[t].tiny

    def fn(a):
        with fp.quiet():
            if op == "finite":
                return np.isfinite(a)
            if op == "infinite":
                return np.isinf(a)
            if op == "number":
                return ~np.isnan(a)
            if op == "notanumber":
                return np.isnan(a)
            aa = np.abs(a)
            if op == "normal":
                return np.isfinite(a) & (aa >= tiny)
            return (aa < tiny) & (aa != 0)

    return make(d, ("pred",), (t,), fn)
