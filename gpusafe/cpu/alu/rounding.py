"""Floating-point numerics of the ALU: exact error terms, rounding, formats.

How results are made correctly rounded, vectorised over lanes:

* Narrow formats (f32, f16, bf16, tf32, fp8) are computed in float64. A sum,
  product, quotient or square root of two narrow values rounded once to
  float64 and then to a format with p <= 26 bits is correctly rounded to
  nearest (Figueroa: 53 >= 2p + 2), so ``add/sub/mul/div/sqrt.rn`` need nothing
  more. ``fma`` and every directed rounding (``.rz/.rm/.rp``) instead use the
  exact float64 error term of the operation (TwoSum, Dekker's TwoProduct, the
  remainder of a division or square root) to turn the float64 result into its
  *round-to-odd* value, which any later rounding to p <= 51 bits rounds exactly
  as it would round the exact value (Boldo & Melquiond). There is no double
  rounding anywhere.
* float64 results: ``.rn`` add/sub/mul/div/sqrt are numpy's own (IEEE). The
  directed modes take the numpy result and step it by one ulp when the sign of
  the exact error term says it went the wrong way. ``fma.f64`` is the
  Boldo-Melquiond emulation (TwoProduct, TwoSum, a round-to-odd sum, one final
  rounding), exact for operands whose product lies in [2^-960, 2^1000]; lanes
  outside that range (and outside the split range of TwoProduct) fall back to
  exact rational arithmetic (``fractions``) one lane at a time. Such lanes need
  products near the ends of the double range; ordinary code never has them.
* Exact zero sums follow IEEE 754: +0 except in round-toward-minus, where an
  exact zero sum of non-(+0) addends is -0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

F64 = np.float64
ROUNDINGS = ("rn", "rz", "rm", "rp")
INT_ROUNDINGS = {"rni": "rn", "rzi": "rz", "rmi": "rm", "rpi": "rp"}


def quiet():
    """numpy error state for every fn: no warnings, ever."""
    return np.errstate(all="ignore")


@dataclass(frozen=True)
class Fmt:
    """A binary floating-point format: precision (hidden bit included), smallest
    normal exponent, largest finite value, and whether it has infinities."""

    name: str
    p: int
    emin: int
    maxval: float
    has_inf: bool = True

    @property
    def tiny(self) -> float:
        return math.ldexp(1.0, self.emin)


FMT_F64 = Fmt("f64", 53, -1022, float(np.finfo(np.float64).max))
FMT_F32 = Fmt("f32", 24, -126, float(np.finfo(np.float32).max))
FMT_F16 = Fmt("f16", 11, -14, 65504.0)
FMT_BF16 = Fmt("bf16", 8, -126, float.fromhex("0x1.fep127"))
FMT_TF32 = Fmt("tf32", 11, -126, float.fromhex("0x1.ffcp127"))
FMT_E4M3 = Fmt("e4m3", 4, -6, 448.0, has_inf=False)
FMT_E5M2 = Fmt("e5m2", 3, -14, 57344.0)
FORMATS = {f.name: f for f in (FMT_F64, FMT_F32, FMT_F16, FMT_BF16, FMT_TF32, FMT_E4M3, FMT_E5M2)}

_INF = np.inf
_P2 = {k: math.ldexp(1.0, k) for k in (-1000, -960, 995, 1000, 1020)}


# --------------------------------------------------------------------------
# storage <-> float64


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def load(x: np.ndarray, t: str) -> np.ndarray:
    """Exact float64 values of an array of PTX float type ``t``."""
    if t == "bf16":
        return bf16_to_f32(x).astype(F64)
    return x.astype(F64, copy=False) if t == "f64" else x.astype(F64)


def store(y: np.ndarray, t: str) -> np.ndarray:
    """Array of PTX type ``t`` holding ``y`` (float64 values representable in ``t``)."""
    with quiet():
        if t == "f64":
            return y
        if t == "f32":
            return y.astype(np.float32)
        if t == "f16":
            return y.astype(np.float16)
        if t == "bf16":
            return (y.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    raise KeyError(t)


def bf16_rn_from_f64(x: np.ndarray) -> np.ndarray:
    """bf16 bits of float64 x (exact or round-to-odd) rounded to nearest even: via
    the round-to-odd float32 value (24 >= 8 + 2 bits) and the usual bit trick."""
    with quiet():
        c = x.astype(np.float32)
        r = x - c.astype(F64)
        inexact = (r > 0) | (r < 0)
        if inexact.any():
            fix = inexact & ((c.view(np.uint32) & np.uint32(1)) == 0)
            if fix.any():
                c = c.copy()
                c[fix] = np.nextafter(c[fix], np.copysign(np.float32(np.inf), r[fix]).astype(
                    np.float32))
        b = c.view(np.uint32)
        out = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))
               >> np.uint32(16)).astype(np.uint16)
        nan = np.isnan(c)
        if nan.any():
            out[nan] = np.uint16(0x7FFF)
        return out


_CANON = {"f32": (np.uint32, 0x7FFFFFFF), "f16": (np.uint16, 0x7FFF), "bf16": (np.uint16, 0x7FFF)}


def canonical_nan(x: np.ndarray, t: str) -> np.ndarray:
    """Replace NaNs by the GPU's canonical NaN of type ``t`` (f32 0x7fffffff,
    f16/bf16 0x7fff). float64 NaNs are left as numpy makes them. Never modifies
    ``x``: a copy is made when there is a NaN to replace."""
    if t == "f64":
        return x
    ut, canon = _CANON[t]
    if t == "bf16":
        nan = (x & np.uint16(0x7FFF)) > np.uint16(0x7F80)
        if nan.any():
            x = np.where(nan, np.uint16(canon), x)
        return x
    nan = np.isnan(x)
    if nan.any():
        x = x.copy()
        x.view(ut)[nan] = canon
    return x


def is_nan_t(x: np.ndarray, t: str) -> np.ndarray:
    if t == "bf16":
        return (x & np.uint16(0x7FFF)) > np.uint16(0x7F80)
    return np.isnan(x)


def flush(x: np.ndarray, tiny: float) -> np.ndarray:
    """Flush subnormals (|x| < tiny, x != 0) to zero of the same sign (``.ftz``)."""
    with quiet():
        sub = np.abs(x) < x.dtype.type(tiny)
        if not sub.any():
            return x
        return np.where(sub, np.copysign(x.dtype.type(0), x), x)


def flush_t(x: np.ndarray, t: str) -> np.ndarray:
    """``.ftz`` on a storage array of type t (f32, f16, f64; bf16 raw bits)."""
    if t == "bf16":
        sub = ((x & np.uint16(0x7F80)) == 0) & ((x & np.uint16(0x7F)) != 0)
        return np.where(sub, x & np.uint16(0x8000), x) if sub.any() else x
    return flush(x, FORMATS[t].tiny)


def saturate(x: np.ndarray) -> np.ndarray:
    """``.sat``: clamp to [0.0, 1.0]; NaN and -0.0 become +0.0."""
    with quiet():
        one = x.dtype.type(1)
        return np.where(x > 0, np.minimum(x, one), x.dtype.type(0))


# --------------------------------------------------------------------------
# exact error terms (float64)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = RN(a + b) and the exact error e = a + b - s (Knuth), no overflow assumed."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


_SPLITTER = 134217729.0  # 2^27 + 1


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = _SPLITTER * a
    hi = t - (t - a)
    return hi, a - hi


def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p = RN(a * b) and the exact error (Dekker); exact for |a|,|b| < 2^995 and
    |a*b| >= 2^-960."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def round_to_odd(s: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The round-to-odd value of ``s + (something with the sign of r)``.

    ``s`` is RN of an exact value v and ``r`` has the sign of v - s (0 or NaN:
    s is exact). Where s is inexact and its last bit is even, step one ulp
    toward v: the result is the neighbour of v with an odd last bit.
    """
    inexact = (r > 0) | (r < 0)
    fix = inexact & ((s.view(np.uint64) & np.uint64(1)) == 0)
    if not fix.any():
        return s
    out = s.copy()
    out[fix] = np.nextafter(s[fix], np.copysign(_INF, r[fix]))
    return out


def fix_directed(c: np.ndarray, r: np.ndarray, mode: str) -> np.ndarray:
    """Turn RN result ``c`` into the ``mode`` result, given r with the sign of
    (exact - c) (0 or NaN where c is exact). Works for any float dtype."""
    if mode == "rn":
        return c
    with quiet():
        if mode == "rz":
            move = ((r < 0) & (c > 0)) | ((r > 0) & (c < 0))
            target = 0.0
        elif mode == "rm":
            move = r < 0
            target = -_INF
        elif mode == "rp":
            move = r > 0
            target = _INF
        else:
            raise ValueError(mode)
        if not move.any():
            return c
        out = c.copy()
        out[move] = np.nextafter(c[move], c.dtype.type(target))
        return out


def round_to_format(x: np.ndarray, fmt: Fmt, mode: str) -> np.ndarray:
    """Round float64 ``x`` (exact, or round-to-odd at 53 bits) to ``fmt`` in ``mode``
    (rn, rz, rm, rp, rna); returns float64 values representable in fmt.

    Overflow gives inf or the largest finite value as the mode says (NaN for a
    format without infinities); NaN, inf and zeros pass through.
    """
    with quiet():
        ax = np.abs(x)
        fin = np.isfinite(x) & (ax != 0)
        _m, e = np.frexp(ax)
        q = np.maximum(e - 1, fmt.emin) - (fmt.p - 1)
        s = np.ldexp(ax, -q)
        neg = np.signbit(x)
        if mode == "rn":
            r = np.rint(s)
        elif mode == "rz":
            r = np.floor(s)
        elif mode == "rna":
            r = np.floor(s + 0.5)
        elif mode == "rp":
            r = np.where(neg, np.floor(s), np.ceil(s))
        elif mode == "rm":
            r = np.where(neg, np.ceil(s), np.floor(s))
        else:
            raise ValueError(mode)
        y = np.ldexp(r, q)
        over = fin & (y > fmt.maxval)
        if over.any():
            if mode in ("rn", "rna"):
                away = over
            elif mode == "rp":
                away = over & ~neg
            elif mode == "rm":
                away = over & neg
            else:
                away = np.zeros_like(over)
            big = _INF if fmt.has_inf else np.nan
            y = np.where(over, np.where(away, big, fmt.maxval), y)
        y = np.copysign(y, x)
        return np.where(fin, y, x)


def round_f64_to(x: np.ndarray, t: str, mode: str) -> np.ndarray:
    """``round_to_format`` to PTX float type t, with numpy's cast as the fast path
    for round-to-nearest to f32/f16; returns float64."""
    if t == "f64":
        return x
    if mode == "rn" and t in ("f32", "f16"):
        with quiet():
            return x.astype(np.float32 if t == "f32" else np.float16).astype(F64)
    return round_to_format(x, FORMATS[t], mode)


# --------------------------------------------------------------------------
# exact rational fallback (one lane at a time, rare lanes only)


def round_fraction(v: Fraction, fmt: Fmt, mode: str) -> float:
    """Correctly rounded float of an exact rational (0 gives +0.0)."""
    if v == 0:
        return 0.0
    neg = v < 0
    av = -v if neg else v
    n, d = av.numerator, av.denominator
    e = n.bit_length() - d.bit_length()
    if (n << max(-e, 0)) < (d << max(e, 0)):
        e -= 1
    q = max(e, fmt.emin) - (fmt.p - 1)
    num, den = (n, d << q) if q >= 0 else (n << -q, d)
    m, rem = divmod(num, den)
    if rem:
        if mode == "rn":
            up = 2 * rem > den or (2 * rem == den and m & 1)
        elif mode == "rna":
            up = 2 * rem >= den
        elif mode == "rz":
            up = False
        elif mode == "rp":
            up = not neg
        elif mode == "rm":
            up = neg
        else:
            raise ValueError(mode)
        m += int(up)
    if Fraction(m) * Fraction(2) ** q > Fraction(fmt.maxval):
        away = mode in ("rn", "rna") or (mode == "rp" and not neg) or (mode == "rm" and neg)
        val = (math.inf if fmt.has_inf else math.nan) if away else fmt.maxval
    else:
        val = math.ldexp(float(m), q)
    return -val if neg else val


def _sign(x: Fraction) -> float:
    return float((x > 0) - (x < 0))


# --------------------------------------------------------------------------
# float64 arithmetic with every rounding mode


def _rm_zero_sign(y: np.ndarray, exact_zero: np.ndarray, both_pos_zero: np.ndarray) -> np.ndarray:
    """In round-toward-minus an exact zero sum is -0 unless both addends are +0."""
    neg0 = exact_zero & ~both_pos_zero
    if neg0.any():
        y = np.where(neg0, -0.0, y).astype(y.dtype, copy=False)
    return y


def _is_pos_zero(x: np.ndarray) -> np.ndarray:
    return (x == 0) & ~np.signbit(x)


def f64_add(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    with quiet():
        if mode == "rn":
            return a + b
        s, e = two_sum(a, b)
        ovf = np.isinf(s) & np.isfinite(a) & np.isfinite(b)
        if ovf.any():
            e = np.where(ovf, -s, e)
        y = fix_directed(s, e, mode)
        if mode == "rm":
            y = _rm_zero_sign(y, s == 0, _is_pos_zero(a) & _is_pos_zero(b))
        return y


def _extreme_lanes(r: np.ndarray, hard: np.ndarray, exact_sign) -> np.ndarray:
    idx = np.nonzero(hard)[0]
    if idx.size:
        r = r.copy()
        for i in idx:
            r[i] = exact_sign(int(i))
    return r


def f64_mul(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    with quiet():
        if mode == "rn":
            return a * b
        p, e = two_prod(a, b)
        ap = np.abs(p)
        safe = ((np.abs(a) < _P2[995]) & (np.abs(b) < _P2[995]) & (ap >= _P2[-960])
                & (ap <= _P2[1020]))
        if not safe.all():
            trivial = (a == 0) | (b == 0) | ~np.isfinite(a) | ~np.isfinite(b)
            ovf = np.isinf(p) & ~trivial
            e = np.where(safe, e, np.where(ovf, -p, 0.0))
            hard = ~safe & ~trivial & ~ovf
            e = _extreme_lanes(e, hard, lambda i: _sign(Fraction(a[i]) * Fraction(b[i])
                                                         - Fraction(p[i])))
        return fix_directed(p, e, mode)


def f64_div(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    with quiet():
        q = a / b
        if mode == "rn":
            return q
        p, pe = two_prod(q, b)
        r = np.sign((a - p) - pe) * np.sign(b)
        aq = np.abs(q)
        aa = np.abs(a)
        safe = ((aq < _P2[995]) & (np.abs(b) < _P2[995]) & (aq >= _P2[-1000])
                & (aa >= _P2[-960]) & (aa <= _P2[1020]))
        if not safe.all():
            trivial = (a == 0) | (b == 0) | ~np.isfinite(a) | ~np.isfinite(b)
            ovf = np.isinf(q) & ~trivial
            unf = (q == 0) & ~trivial
            r = np.where(safe, r, np.where(ovf, -q, np.where(unf, np.sign(a) * np.sign(b), 0.0)))
            hard = ~safe & ~trivial & ~ovf & ~unf
            r = _extreme_lanes(r, hard, lambda i: _sign(Fraction(a[i]) / Fraction(b[i])
                                                         - Fraction(q[i])))
        return fix_directed(q, r, mode)


def f64_sqrt(a: np.ndarray, mode: str) -> np.ndarray:
    with quiet():
        q = np.sqrt(a)
        if mode == "rn":
            return q
        p, pe = two_prod(q, q)
        r = (a - p) - pe
        safe = (a >= _P2[-960]) & (a <= _P2[1000])
        if not safe.all():
            hard = ~safe & (a > 0) & np.isfinite(a)
            r = np.where(safe, r, 0.0)
            r = _extreme_lanes(r, hard, lambda i: _sign(Fraction(a[i]) - Fraction(q[i]) ** 2))
        return fix_directed(q, r, mode)


def _ro_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """v = round-to-odd(x + y) and the sign of (x + y - v)."""
    s, e = two_sum(x, y)
    v = round_to_odd(s, e)
    moved = v != s
    r = np.where(moved, -e, e)  # v stepped past the exact value: opposite sign
    return v, r


def f64_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str) -> np.ndarray:
    """Correctly rounded a*b + c in float64 (Boldo-Melquiond, exact fallback)."""
    with quiet():
        uh, ul = two_prod(a, b)
        th, tl = two_sum(c, uh)
        v, rv = _ro_sum(tl, ul)
        s, e2 = two_sum(th, v)
        y = s
        if mode != "rn":
            y = fix_directed(s, np.where(e2 != 0, e2, rv), mode)
            if mode == "rm":
                y = _rm_zero_sign(y, s == 0, np.zeros(s.shape, bool))
        auh = np.abs(uh)
        safe = ((np.abs(a) < _P2[995]) & (np.abs(b) < _P2[995]) & (auh >= _P2[-960])
                & (auh <= _P2[1000]) & (np.abs(c) <= _P2[1000]))
        if safe.all():
            return y
        y = y.copy()
        trivial = ~safe & ((a == 0) | (b == 0) | ~np.isfinite(a) | ~np.isfinite(b)
                           | ~np.isfinite(c))
        idx = np.nonzero(trivial)[0]
        if idx.size:
            ta, tb, tc = a[idx], b[idx], c[idx]
            prod = ta * tb
            res = prod + tc
            res = np.where(np.isinf(tc) & np.isfinite(ta) & np.isfinite(tb), tc, res)
            zz = (prod == 0) & (tc == 0)
            if mode == "rm":
                res = np.where(zz, np.where(_is_pos_zero(prod) & _is_pos_zero(tc), 0.0, -0.0),
                               res)
            y[idx] = res
        hard = ~safe & ~trivial
        for i in np.nonzero(hard)[0]:
            exact = Fraction(a[i]) * Fraction(b[i]) + Fraction(c[i])
            val = round_fraction(exact, FMT_F64, mode)
            if exact == 0 and mode == "rm":
                val = -0.0
            y[i] = val
        return y


# --------------------------------------------------------------------------
# narrow-format arithmetic in float64 (inputs exact float64 values of narrow
# floats: at most 24 significant bits, exponents within [-149, 127])


def narrow_add(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    """float64 value to round to a narrow format (RN; round-to-odd if directed)."""
    with quiet():
        if mode == "rn":
            return a + b
        s, e = two_sum(a, b)
        x = round_to_odd(s, e)
        if mode == "rm":
            x = _rm_zero_sign(x, s == 0, _is_pos_zero(a) & _is_pos_zero(b))
        return x


def narrow_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str) -> np.ndarray:
    with quiet():
        p = a * b  # exact: two <= 24-bit significands
        s, e = two_sum(p, c)
        x = round_to_odd(s, e)
        if mode == "rm":
            x = _rm_zero_sign(x, s == 0, _is_pos_zero(p) & _is_pos_zero(c))
        return x


def narrow_div(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    with quiet():
        q = a / b
        if mode == "rn":
            return q
        p, pe = two_prod(q, b)
        r = np.sign((a - p) - pe) * np.sign(b)
        return round_to_odd(q, r)


def narrow_sqrt(a: np.ndarray, mode: str) -> np.ndarray:
    with quiet():
        q = np.sqrt(a)
        if mode == "rn":
            return q
        p, pe = two_prod(q, q)
        return round_to_odd(q, (a - p) - pe)
