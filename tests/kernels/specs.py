"""Launch specifications and numpy references for every kernel in tests/kernels.

Pure data: nothing here compiles or runs a kernel. A runner (the CPU device, a
real GPU) takes a :class:`KernelSpec`, allocates every :class:`Buffer` (the
kernel parameters and the ``hidden`` allocations reached only through pointers
stored in memory), patches the pointer relocations (:class:`Reloc`), packs the
parameters in order, launches ``grid`` x ``block`` with ``shared_bytes`` of
dynamic shared memory, copies the output buffers back and compares them with
``spec.expected()``.

Conventions
-----------
* Every array in a spec is read-only (``flags.writeable = False``); copy it
  before uploading or mutating.
* ``Buffer.data`` is the initial content of the allocation; its dtype is the
  element type. 16-bit bfloat16 data is stored as ``uint16`` bit patterns.
* ``Scalar.value`` is a numpy scalar whose dtype is the C parameter type
  (``np.int32`` for ``int``, ``np.float32`` for ``float``, ...).
* ``Struct.value`` is a 0-d numpy structured array (C layout, see ``align``);
  ``Struct.data`` gives its bytes.
* ``reference(values)`` receives a dict ``{name: copy of initial value}`` for
  every argument and hidden buffer, and returns ``{name: expected array}`` for
  every buffer whose ``output`` is true (the full final contents).
* Integer outputs compare exactly; float outputs with
  ``numpy.allclose(actual, expected, rtol=spec.rtol, atol=spec.atol)``
  (``rtol == atol == 0`` means exactly equal values; the sign of a zero is
  not compared). ``KernelSpec.check`` implements this. Many kernels choose inputs (small
  multiples of a power of two) that make float results exact whatever order
  or fma contraction the compiler picks; those are exact.
* ``stdout``: what the kernel prints with printf (``stdout_unordered``: the
  lines may come in any order).
* ``min_sm``: lowest sm the kernel is meant for (all are 75 here: kernels with
  sm_80+ instructions, see ``notes``, have a fallback for older targets).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

import numpy as np

# ---------------------------------------------------------------------------
# spec data types
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reloc:
    """Store the device address of ``target`` (+ ``target_offset`` bytes) as a
    64-bit pointer at byte ``offset`` of the buffer that holds this reloc."""

    offset: int
    target: str
    target_offset: int = 0


@dataclass(frozen=True)
class Buffer:
    """A device allocation. As a kernel argument it is passed as a pointer."""

    name: str
    data: np.ndarray
    output: bool = False
    relocs: tuple[Reloc, ...] = ()

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


@dataclass(frozen=True)
class Scalar:
    """A scalar parameter passed by value."""

    name: str
    value: np.generic


@dataclass(frozen=True)
class Struct:
    """A struct (or vector type) passed by value: a 0-d structured array."""

    name: str
    value: np.ndarray
    align: int

    @property
    def data(self) -> bytes:
        return self.value.tobytes()

    @property
    def size(self) -> int:
        return self.value.dtype.itemsize


Arg = Union[Buffer, Scalar, Struct]


@dataclass(frozen=True)
class KernelSpec:
    file: str  # the .cu file in tests/kernels
    kernel: str  # the .entry name (mangled for templates)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Arg, ...]  # kernel parameters, in order
    reference: Callable[[dict[str, Any]], dict[str, np.ndarray]]
    shared_bytes: int = 0  # dynamic shared memory
    hidden: tuple[Buffer, ...] = ()  # allocations only reachable through relocs
    rtol: float = 0.0
    atol: float = 0.0
    min_sm: int = 75
    stdout: str | None = None
    stdout_unordered: bool = False
    name_expression: str | None = None  # C++ name for nvrtcAddNameExpression (templates)
    notes: str = ""

    # -- helpers for runners ------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.file}:{self.kernel}"

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return tuple(a for a in self.args if isinstance(a, Buffer)) + self.hidden

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.buffers if b.output)

    @property
    def threads(self) -> int:
        return math.prod(self.grid) * math.prod(self.block)

    def initial_values(self) -> dict[str, Any]:
        """Fresh, writable copies of every argument and hidden buffer value."""
        vals: dict[str, Any] = {}
        for a in (*self.args, *self.hidden):
            if isinstance(a, Buffer):
                vals[a.name] = a.data.copy()
            elif isinstance(a, Scalar):
                vals[a.name] = a.value
            else:
                vals[a.name] = a.value.copy()
        return vals

    def expected(self) -> dict[str, np.ndarray]:
        return self.reference(self.initial_values())

    def check(self, actual: Mapping[str, np.ndarray]) -> list[str]:
        """Compare outputs with the reference; returns a list of mismatch messages."""
        errors = []
        for name, exp in self.expected().items():
            got = np.asarray(actual[name])
            if got.dtype != exp.dtype:
                got = got.view(exp.dtype) if got.dtype.itemsize == exp.dtype.itemsize else got.astype(exp.dtype)
            got = got.reshape(exp.shape)
            if exp.dtype.names or exp.dtype.kind in "iub":
                ok = np.array_equal(got, exp)
            elif self.rtol == 0 and self.atol == 0:
                ok = np.array_equal(got, exp, equal_nan=True)  # exact values; +0.0 == -0.0
            else:
                ok = np.allclose(got, exp, rtol=self.rtol, atol=self.atol)
            if not ok:
                errors.append(f"{self.name}: output {name!r} differs from the reference")
        return errors


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

SPECS: list[KernelSpec] = []


def _ro(a) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def buf(name: str, data, output: bool = False, relocs=()) -> Buffer:
    return Buffer(name, _ro(np.ascontiguousarray(data)), output, tuple(relocs))


def out(name: str, data) -> Buffer:
    return buf(name, data, output=True)


def i32(v) -> np.int32:
    return np.int32(v)


def u32(v) -> np.uint32:
    return np.uint32(v)


def f32(v) -> np.float32:
    return np.float32(v)


def f64(v) -> np.float64:
    return np.float64(v)


def _struct(name: str, dtype: np.dtype, align: int, **fields) -> Struct:
    v = np.zeros((), dtype=dtype)
    for k, x in fields.items():
        v[k] = x
    return Struct(name, _ro(v), align)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def grid1(n: int, block: int) -> tuple[int, int, int]:
    return ((n + block - 1) // block, 1, 1)


def spec(**kw) -> KernelSpec:
    for k in ("grid", "block"):
        v = tuple(kw[k])
        kw[k] = v + (1,) * (3 - len(v))
    s = KernelSpec(**kw)
    SPECS.append(s)
    return s


def exact_grid(rg: np.random.Generator, n: int, lo: int, hi: int, denom: int, dtype) -> np.ndarray:
    """n random multiples of 1/denom in [lo/denom, hi/denom]: exact in any float type."""
    return (rg.integers(lo, hi + 1, n) / denom).astype(dtype)


_INFO = {
    np.int8: (8, True), np.uint8: (8, False), np.int16: (16, True), np.uint16: (16, False),
    np.int32: (32, True), np.uint32: (32, False), np.int64: (64, True), np.uint64: (64, False),
}


def wrap(x: int, dtype) -> int:
    bits, signed = _INFO[np.dtype(dtype).type]
    x &= (1 << bits) - 1
    if signed and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def to_array(ints, dtype) -> np.ndarray:
    return np.array([wrap(int(v), dtype) for v in ints], dtype=dtype)


def c_div(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def c_rem(a: int, b: int) -> int:
    return a - c_div(a, b) * b


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even (no NaNs)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bias = 0x7FFF + ((bits >> 16) & 1)
    return ((bits + bias) >> 16).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def toward_zero(rounded: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Turn a round-to-nearest result into round-toward-zero, given the exact value."""
    r = rounded.copy()
    fix = np.abs(r.astype(np.float64)) > np.abs(np.asarray(exact, dtype=np.float64))
    r[fix] = np.nextafter(r[fix], np.zeros_like(r[fix]))
    return r


def f32_from_exact(vals) -> np.ndarray:
    """Correctly rounded float32 of exact rationals/ints (via Fraction)."""
    outv = []
    for v in vals:
        fr = Fraction(v)
        f = np.float32(float(fr))  # may double-round: fix up below
        # pick the nearest of f and its neighbours, ties to even
        cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
        best = min(cands, key=lambda c: (abs(Fraction(float(c)) - fr),
                                         int(np.float32(c).view(np.uint32)) & 1))
        outv.append(best)
    return np.array(outv, dtype=np.float32)


# ---------------------------------------------------------------------------
# basics.cu
# ---------------------------------------------------------------------------

_r = rng(1)
_n = 1 << 16
spec(file="basics.cu", kernel="vector_add", grid=grid1(_n, 256), block=(256,),
     args=(out("c", np.zeros(_n, np.float32)),
           buf("a", _r.standard_normal(_n).astype(np.float32)),
           buf("b", _r.standard_normal(_n).astype(np.float32)),
           Scalar("n", i32(_n))),
     reference=lambda v: {"c": v["a"] + v["b"]})

_n = 5000
spec(file="basics.cu", kernel="saxpy_grid_stride", grid=(4,), block=(128,),
     args=(Scalar("n", i32(_n)), Scalar("a", f32(1.5)),
           buf("x", exact_grid(_r, _n, -1024, 1024, 16, np.float32)),
           buf("y", exact_grid(_r, _n, -1024, 1024, 16, np.float32), output=True)),
     reference=lambda v: {"y": (v["a"] * v["x"] + v["y"]).astype(np.float32)},
     notes="grid (512 threads) smaller than n: each thread loops")


# ---------------------------------------------------------------------------
# arith_types.cu
# ---------------------------------------------------------------------------


def _int_arith_ref(dt):
    def ref(v):
        res = []
        for x, y, z in zip(v["a"].tolist(), v["b"].tolist(), v["c"].tolist(), strict=True):
            res += [x * y + z, x - y, (x ^ y) | (z >> 1),
                    (z if z > y else y) if x < y else (x & ~z),
                    (x & 0x3F) << 2]
        return {"out": to_array(res, dt)}
    return ref


_INT_RANGES = {  # (a/b range, c range): no signed overflow in C after promotion
    np.int8: ((-128, 127), (-128, 127)),
    np.uint8: ((0, 255), (0, 255)),
    np.int16: ((-32768, 32767), (-32768, 32767)),
    np.uint16: ((0, 39999), (0, 65535)),  # x*y is computed in (signed) int
    np.int32: ((-30000, 30000), (-10**8, 10**8)),
    np.uint32: ((0, 2**32 - 1), (0, 2**32 - 1)),
    np.int64: ((-2**30, 2**30), (-2**60, 2**60)),
    np.uint64: ((0, 2**64 - 1), (0, 2**64 - 1)),
}
for _k, (_dt, ((_lo, _hi), (_clo, _chi))) in enumerate(_INT_RANGES.items()):
    _r = rng(100 + _k)
    _n = 1000
    _name = {np.int8: "i8", np.uint8: "u8", np.int16: "i16", np.uint16: "u16", np.int32: "i32",
             np.uint32: "u32", np.int64: "i64", np.uint64: "u64"}[_dt]
    _a = _r.integers(_lo, _hi, _n, dtype=_dt, endpoint=True)
    _b = _r.integers(_lo, _hi, _n, dtype=_dt, endpoint=True)
    _c = _r.integers(_clo, _chi, _n, dtype=_dt, endpoint=True)
    spec(file="arith_types.cu", kernel=f"arith_{_name}", grid=grid1(1024, 128), block=(128,),
         args=(out("out", np.zeros(5 * _n, _dt)), buf("a", _a), buf("b", _b), buf("c", _c),
               Scalar("n", i32(_n))),
         reference=_int_arith_ref(_dt), notes="1024 threads for n=1000: the tail is masked")


def _float_arith_ref(dt):
    def ref(v):
        x, y, z = v["a"], v["b"], v["c"]
        o = np.zeros((len(x), 5), dt)
        o[:, 0] = x * y + z
        o[:, 1] = x - y * dt(2)
        o[:, 2] = x / (np.abs(y) + dt(1))
        o[:, 3] = np.sqrt(np.abs(z))
        o[:, 4] = np.where(x < y, -z, np.where(z > 0, x, y))
        return {"out": o.ravel()}
    return ref


for _k, (_dt, _name) in enumerate(((np.float32, "f32"), (np.float64, "f64"))):
    _r = rng(120 + _k)
    _n = 1000
    spec(file="arith_types.cu", kernel=f"arith_{_name}", grid=grid1(1024, 128), block=(128,),
         args=(out("out", np.zeros(5 * _n, _dt)),
               buf("a", exact_grid(_r, _n, -1000, 1000, 16, _dt)),
               buf("b", exact_grid(_r, _n, -1000, 1000, 16, _dt)),
               buf("c", exact_grid(_r, _n, -1000, 1000, 16, _dt)),
               Scalar("n", i32(_n))),
         reference=_float_arith_ref(_dt),
         notes="exact: products/sums of multiples of 1/16; division and sqrt are correctly rounded")


# ---------------------------------------------------------------------------
# half_types.cu
# ---------------------------------------------------------------------------

_r = rng(200)
_n = 512
_ha = exact_grid(_r, _n, -512, 512, 64, np.float16)
_hb = exact_grid(_r, _n, -512, 512, 64, np.float16)
_hc = exact_grid(_r, _n, -512, 512, 64, np.float16)


def _half_ops_ref(v):
    x, y, z = (v[k].astype(np.float64) for k in "abc")
    o = np.zeros((len(x), 4), np.float16)
    o[:, 0] = (x + y).astype(np.float16)
    o[:, 1] = (x * y).astype(np.float16)
    o[:, 2] = (x * y + z).astype(np.float16)  # exact in float64, rounded once
    o[:, 3] = np.where(x < y, -z, x - y).astype(np.float16)
    of = v["a"].astype(np.float32) + np.float32(2) * v["b"].astype(np.float32)
    return {"out": o.ravel(), "out_f": of}


spec(file="half_types.cu", kernel="half_ops", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(4 * _n, np.float16)), out("out_f", np.zeros(_n, np.float32)),
           buf("a", _ha), buf("b", _hb), buf("c", _hc), Scalar("n", i32(_n))),
     reference=_half_ops_ref)

_n2 = 256


def _half2_ref(v):
    a = v["a"].astype(np.float64).reshape(-1, 2)
    b = v["b"].astype(np.float64).reshape(-1, 2)
    o = np.zeros((len(a), 3, 2), np.float16)
    o[:, 0] = (a + b).astype(np.float16)
    o[:, 1] = (a * b).astype(np.float16)
    o[:, 2] = (a - b)[:, ::-1].astype(np.float16)  # __lowhigh2highlow swaps the halves
    return {"out": o.ravel()}


spec(file="half_types.cu", kernel="half2_ops", grid=grid1(_n2, 64), block=(64,),
     args=(out("out", np.zeros(6 * _n2, np.float16)),
           buf("a", exact_grid(_r, 2 * _n2, -512, 512, 64, np.float16)),
           buf("b", exact_grid(_r, 2 * _n2, -512, 512, 64, np.float16)),
           Scalar("n2", i32(_n2))),
     reference=_half2_ref, notes="__half2 buffers are float16 arrays of (low, high) pairs")


def _bf16_ref(v):
    x, y, z = (bf16_to_f32(v[k]) for k in "abc")
    o = np.zeros((len(x), 4), np.uint16)
    o[:, 0] = bf16_round(x + y)
    o[:, 1] = bf16_round(x * y)
    o[:, 2] = bf16_round((x.astype(np.float64) * y + z).astype(np.float32))  # exact in f32
    o[:, 3] = bf16_round(x * np.float32(0.3))
    return {"out": o.ravel()}


_n = 512
spec(file="half_types.cu", kernel="bf16_ops", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(4 * _n, np.uint16)),
           *(buf(k, bf16_round(exact_grid(_r, _n, -128, 127, 16, np.float32))) for k in "abc"),
           Scalar("n", i32(_n))),
     reference=_bf16_ref,
     notes="__nv_bfloat16 as uint16 bits. fma.rn.bf16 only on sm_80+ (fmaf fallback below)")

_vals = np.concatenate([
    _r.standard_normal(200) * 100,
    _r.standard_normal(100) * 1e-5,  # half subnormals
    _r.uniform(-60000, 60000, 100),
    np.array([0.0, -0.0, 1.0, 2049.0, 2051.0, 1.00048828125, 65504.0, -3.0e-8]),
])
_vals = np.concatenate([_vals, _r.standard_normal(512 - len(_vals))]).astype(np.float32)


def _half_convert_ref(v):
    x = v["in"]
    o = np.zeros((len(x), 3), np.float32)
    h = x.astype(np.float16)
    o[:, 0] = h.astype(np.float32)
    o[:, 1] = bf16_to_f32(bf16_round(x))
    o[:, 2] = toward_zero(h, x).astype(np.float32)
    return {"out": o.ravel()}


spec(file="half_types.cu", kernel="half_convert", grid=grid1(512, 128), block=(128,),
     args=(out("out", np.zeros(3 * 512, np.float32)), buf("in", _vals), Scalar("n", i32(512))),
     reference=_half_convert_ref)


# ---------------------------------------------------------------------------
# matmul.cu
# ---------------------------------------------------------------------------

_r = rng(300)
_M, _N, _K = 40, 48, 36
spec(file="matmul.cu", kernel="matmul_tiled16", grid=(3, 3), block=(16, 16),
     args=(out("C", np.zeros(_M * _N, np.float32)),
           buf("A", exact_grid(_r, _M * _K, -4, 4, 4, np.float32)),
           buf("B", exact_grid(_r, _K * _N, -4, 4, 4, np.float32)),
           Scalar("M", i32(_M)), Scalar("N", i32(_N)), Scalar("K", i32(_K))),
     reference=lambda v: {"C": (v["A"].reshape(int(v["M"]), int(v["K"])).astype(np.float64)
                                @ v["B"].reshape(int(v["K"]), int(v["N"]))).astype(np.float32).ravel()},
     notes="16x16 tiles in static shared memory; M, K not multiples of 16")

_rows, _cols = 70, 45
spec(file="matmul.cu", kernel="transpose_tiled", grid=(2, 3), block=(32, 8),
     args=(out("out", np.zeros(_rows * _cols)), buf("in", _r.standard_normal(_rows * _cols)),
           Scalar("rows", i32(_rows)), Scalar("cols", i32(_cols))),
     reference=lambda v: {"out": v["in"].reshape(int(v["rows"]), int(v["cols"])).T.ravel().copy()})


# ---------------------------------------------------------------------------
# dynamic_shared.cu
# ---------------------------------------------------------------------------

_r = rng(400)
_n = 1000


def _reverse_dyn_ref(v):
    src, n = v["in"], int(v["n"])
    res = np.full(n, -1, np.int32)
    for i in range(n):
        j = (i // 128) * 128 + 127 - i % 128
        res[i] = src[j] if j < n else -1
    return {"out": res}


spec(file="dynamic_shared.cu", kernel="reverse_dynamic", grid=grid1(_n, 128), block=(128,),
     shared_bytes=128 * 4,
     args=(out("out", np.zeros(_n, np.int32)),
           buf("in", _r.integers(0, 10**6, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=_reverse_dyn_ref)

_n = 300


def _dyn_split_ref(v):
    n = int(v["n"])
    pad = -n % 64
    vals = np.concatenate([v["vals"], np.zeros(pad)])
    ids = np.concatenate([v["ids"], np.zeros(pad, np.int32)])
    res = np.zeros(n)
    for i in range(n):
        b, t = divmod(i, 64)
        res[i] = vals[b * 64:(b + 1) * 64].sum() + ids[b * 64 + (t + 1) % 64]
    return {"out": res}


spec(file="dynamic_shared.cu", kernel="dynamic_shared_split", grid=grid1(_n, 64), block=(64,),
     shared_bytes=64 * (8 + 4),
     args=(out("out", np.zeros(_n)), buf("vals", exact_grid(_r, _n, -800, 800, 8, np.float64)),
           buf("ids", _r.integers(-50, 50, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=_dyn_split_ref, notes="one dynamic allocation split into double[64] + int[64]")


# ---------------------------------------------------------------------------
# atomics.cu
# ---------------------------------------------------------------------------

_r = rng(500)
_n, _nb = 2000, 10
_v = _r.integers(0, 1000, _n, dtype=np.int32)


def _atomic_add_int_ref(v):
    nb = int(v["nbins"])
    c = np.bincount(v["vals"] % nb, minlength=nb).astype(np.int32)
    return {"counters": np.append(c, np.int32(-v["vals"].sum())).astype(np.int32),
            "total64": np.array([v["vals"].sum()], np.uint64)}


spec(file="atomics.cu", kernel="atomic_add_int", grid=grid1(_n, 256), block=(256,),
     args=(out("counters", np.zeros(_nb + 1, np.int32)), out("total64", np.zeros(1, np.uint64)),
           buf("vals", _v), Scalar("n", i32(_n)), Scalar("nbins", i32(_nb))),
     reference=_atomic_add_int_ref)

_n = 2048
spec(file="atomics.cu", kernel="atomic_add_float", grid=grid1(_n, 256), block=(256,),
     args=(out("sums", np.zeros(4, np.float32)),
           buf("vals", exact_grid(_r, _n, -256, 256, 4, np.float32)), Scalar("n", i32(_n))),
     reference=lambda v: {"sums": v["vals"].astype(np.float64).reshape(-1, 4).sum(0).astype(np.float32)},
     notes="values are multiples of 1/4: the sums are exact in any order")

_n = 1500
spec(file="atomics.cu", kernel="atomic_add_double", grid=grid1(_n, 128), block=(128,),
     args=(out("sums", np.full(5, 0.5)),
           buf("vals", exact_grid(_r, _n, -10**6, 10**6, 1024, np.float64)), Scalar("n", i32(_n))),
     reference=lambda v: {"sums": v["sums"] + np.array([v["vals"][k::5].sum() for k in range(5)])})

_n = 1000
_v = _r.integers(-2**31, 2**31 - 1, _n, dtype=np.int32)


def _minmax_ref(v):
    x = v["vals"]
    bins = [x[b::8] for b in range(8)]
    return {
        "imin": np.array([b.min() for b in bins], np.int32),
        "imax": np.array([b.max() for b in bins], np.int32),
        "umin": np.array([b.view(np.uint32).min() for b in bins], np.uint32),
        "umax": np.array([b.view(np.uint32).max() for b in bins], np.uint32),
        "llmin": np.array([min(v["llmin"][0], (x.astype(np.int64) * 1000003).min())], np.int64),
        "ullmax": np.array([(x.view(np.uint32).astype(np.uint64) * 7).max()], np.uint64),
    }


spec(file="atomics.cu", kernel="atomic_minmax", grid=grid1(_n, 128), block=(128,),
     args=(out("imin", np.full(8, 2**31 - 1, np.int32)), out("imax", np.full(8, -2**31, np.int32)),
           out("umin", np.full(8, 2**32 - 1, np.uint32)), out("umax", np.zeros(8, np.uint32)),
           out("llmin", np.full(1, 2**63 - 1, np.int64)), out("ullmax", np.zeros(1, np.uint64)),
           buf("vals", _v), Scalar("n", i32(_n))),
     reference=_minmax_ref)

_n = 700
spec(file="atomics.cu", kernel="atomic_cas_loops", grid=grid1(_n, 64), block=(64,),
     args=(out("acc", np.array([5], np.int32)), out("acc64", np.zeros(1, np.uint64)),
           buf("vals", _r.integers(-1000, 1000, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=lambda v: {
         "acc": np.array([5 + int(v["vals"].sum())], np.int32),
         "acc64": np.array([sum(int(x) & 0xFF for x in v["vals"]) * 0x100000001], np.uint64)},
     notes="lock-free CAS retry loops; contended within every warp")

_n = 500


def _exch_ref(v):
    i = np.arange(int(v["n"]))
    t = i % 128
    return {"slots": (2 * i + 1).astype(np.int32),
            "old_out": (v["slots"] + ((t + 1) & 127) * 3).astype(np.int32),
            "fslots": (i * np.float32(0.5)).astype(np.float32),
            "fold_out": v["fslots"].copy()}


spec(file="atomics.cu", kernel="atomic_exch", grid=grid1(_n, 128), block=(128,),
     args=(out("slots", _r.integers(-10**6, 10**6, _n, dtype=np.int32)),
           out("old_out", np.zeros(_n, np.int32)),
           out("fslots", _r.standard_normal(_n).astype(np.float32)),
           out("fold_out", np.zeros(_n, np.float32)), Scalar("n", i32(_n))),
     reference=_exch_ref, notes="blockDim.x must be 128 (static shared int[128])")

_n = 1003


def _incdec_ref(v):
    c = [int(x) for x in v["ctr"]]
    for i in range(int(v["n"])):
        c[0] = 0 if c[0] >= 9 else c[0] + 1
        c[1] = 0 if c[1] >= 0xFFFFFFFF else c[1] + 1
        c[2] = 6 if (c[2] == 0 or c[2] > 6) else c[2] - 1
        if i & 1:
            c[3] = 100 if (c[3] == 0 or c[3] > 100) else c[3] - 1
    return {"ctr": np.array(c, np.uint32)}


spec(file="atomics.cu", kernel="atomic_inc_dec", grid=grid1(_n, 128), block=(128,),
     args=(out("ctr", np.array([0, 7, 3, 50], np.uint32)), Scalar("n", i32(_n))),
     reference=_incdec_ref, notes="wrap-around counters: the final value is order independent")

_n = 600
_v = _r.integers(0, 2**32, _n, dtype=np.uint64).astype(np.uint32) | np.uint32(0x00010001)


def _bitwise_ref(v):
    x = [int(a) for a in v["vals"]]
    g_and, g_or, g_xor, g64 = int(v["gand"][0]), int(v["gor"][0]), int(v["gxor"][0]), int(v["gor64"][0])
    for i, a in enumerate(x):
        g_and &= a | 0x0F0F0000
        g_or |= a & 0x00FF00FF
        g_xor ^= a
        g64 |= a << (i & 31)
    return {"gand": np.array([g_and], np.uint32), "gor": np.array([g_or], np.uint32),
            "gxor": np.array([g_xor], np.uint32), "gor64": np.array([g64], np.uint64)}


spec(file="atomics.cu", kernel="atomic_bitwise", grid=grid1(_n, 128), block=(128,),
     args=(out("gand", np.array([0xFFFFFFFF], np.uint32)), out("gor", np.zeros(1, np.uint32)),
           out("gxor", np.array([0x12345678], np.uint32)), out("gor64", np.zeros(1, np.uint64)),
           buf("vals", _v), Scalar("n", i32(_n))),
     reference=_bitwise_ref)

_n = 1000


def _shared_mixed_ref(v):
    x = v["vals"]
    blocks = [x[b * 256:(b + 1) * 256] for b in range(4)]
    return {"block_min": np.array([b.min() for b in blocks], np.int32),
            "block_max": np.array([b.max() for b in blocks], np.int32),
            "block_sum": np.array([b.sum() for b in blocks], np.float32)}


spec(file="atomics.cu", kernel="atomic_shared_mixed", grid=(4,), block=(256,),
     args=(out("block_min", np.zeros(4, np.int32)), out("block_max", np.zeros(4, np.int32)),
           out("block_sum", np.zeros(4, np.float32)),
           buf("vals", _r.integers(-30000, 30000, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=_shared_mixed_ref)


# ---------------------------------------------------------------------------
# warp.cu
# ---------------------------------------------------------------------------

_r = rng(600)


def _per_warp(x: np.ndarray, warp: int = 32):
    return [x[k:k + warp] for k in range(0, len(x), warp)]


def _shuffles_ref(v):
    res = []
    for w in _per_warp(v["in"].astype(np.int64)):
        s = int(w.sum())
        for lane in range(32):
            res += [w[3], w[lane - 1] if lane >= 1 else w[lane], w[lane + 2] if lane + 2 < 32 else w[lane],
                    w[lane ^ 5], s]
    return {"out": to_array(res, np.int32)}


_N = 256
spec(file="warp.cu", kernel="warp_shuffles", grid=(2,), block=(128,),
     args=(out("out", np.zeros(5 * _N, np.int32)),
           buf("in", _r.integers(-1000, 1000, _N, dtype=np.int32))),
     reference=_shuffles_ref, notes="no bounds check: exactly grid*block elements")


def _shuffles_fp_ref(v):
    f, d = v["inf"], v["ind"]
    of = np.zeros((len(f), 2), np.float32)
    od = np.zeros((len(d), 2))
    for i in range(len(f)):
        lane = i % 32
        base = i - lane
        of[i, 0] = f[i - (lane % 8) + 1]
        of[i, 1] = f[i + 3] if lane % 8 + 3 < 8 else f[i]
        od[i, 0] = d[i - 4] if lane >= 4 else d[i]
        od[i, 1] = d[base + (lane ^ 31)]
    return {"outf": of.ravel(), "outd": od.ravel()}


_N = 128
spec(file="warp.cu", kernel="warp_shuffles_fp", grid=(2,), block=(64,),
     args=(out("outf", np.zeros(2 * _N, np.float32)), out("outd", np.zeros(2 * _N)),
           buf("inf", _r.standard_normal(_N).astype(np.float32)), buf("ind", _r.standard_normal(_N))),
     reference=_shuffles_fp_ref, notes="width-8 segments for the float shuffles")

# 3 blocks of 48 threads: warp 0 full, warp 1 has 16 lanes
_vin = _r.integers(-50, 150, 144, dtype=np.int32)
_vin[:48] = np.where(_vin[:48] > 100, 7, _vin[:48])  # block 0: no value > 100
_vin[50] = -1500  # block 1, warp 0: not all > -1000
_vin[96 + 40] = -2000  # block 2, warp 1 (partial): not all > -1000


def _votes_ref(v):
    x = v["in"]
    res = []
    for blk in range(3):
        for wbase, wlen in ((0, 32), (32, 16)):
            w = x[blk * 48 + wbase: blk * 48 + wbase + wlen]
            active = (1 << wlen) - 1
            ballot = sum(1 << lane for lane in range(wlen) if w[lane] > 0)
            anyv = int(any(w > 100))
            allv = int(all(w > -1000))
            for lane in range(wlen):
                lt = (1 << lane) - 1
                res += [active, ballot, anyv, allv, bin(ballot & lt).count("1")]
    return {"out": np.array(res, np.uint32)}


spec(file="warp.cu", kernel="warp_votes", grid=(3,), block=(48,),
     args=(out("out", np.zeros(5 * 144, np.uint32)), buf("in", _vin)),
     reference=_votes_ref,
     notes="partial warps: __activemask() of the 16-lane warp is 0xffff; "
           "__any_sync/__all_sync results are stored as returned (0 or 1)")

_keys = _r.integers(0, 8, 128, dtype=np.int32)
_keys[32:64] = _r.integers(0, 16, 32)
_keys[32], _keys[33] = 3, 12  # warp 1: keys >> 3 differ
_keys[96:128] = _r.integers(0, 4, 32) * 5  # 0, 5, 10, 15: differ >> 3


def _match_ref(v):
    res = []
    for w in _per_warp(v["keys"]):
        allsame = len({int(k) >> 3 for k in w}) == 1
        for lane in range(32):
            m = sum(1 << j for j in range(32) if w[j] == w[lane])
            res += [m, 0xFFFFFFFF if allsame else 0, int(allsame)]
    return {"out": np.array(res, np.uint32)}


spec(file="warp.cu", kernel="warp_match", grid=(2,), block=(64,),
     args=(out("out", np.zeros(3 * 128, np.uint32)), buf("keys", _keys)),
     reference=_match_ref)


def _warp_reduce_ref(v):
    res = []
    for w in _per_warp(v["in"]):
        ints = [int(a) for a in w]
        x = 0
        for a in ints:
            x ^= a
        res += [sum(ints) & 0xFFFFFFFF, min(ints), max(ints), x] * 32
    return {"out": np.array(res, np.uint32)}


spec(file="warp.cu", kernel="warp_reduce", grid=(2,), block=(64,),
     args=(out("out", np.zeros(4 * 128, np.uint32)),
           buf("in", _r.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32))),
     reference=_warp_reduce_ref,
     notes="redux.sync (__reduce_*_sync) only in compute_80+ PTX; shuffles on compute_75")


# ---------------------------------------------------------------------------
# coop_groups.cu
# ---------------------------------------------------------------------------

_r = rng(700)
_n = 1000
spec(file="coop_groups.cu", kernel="cg_block_reduce", grid=(4,), block=(256,),
     args=(out("block_sums", np.zeros(4, np.int32)),
           buf("in", _r.integers(-1000, 1000, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=lambda v: {"block_sums": np.array(
         [v["in"][b * 256:(b + 1) * 256].sum() for b in range(4)], np.int32)})


def _tiles8_ref(v):
    x = v["in"]
    res = []
    for i in range(len(x)):
        t = i % 64
        base = i - (t % 8)
        tile = x[base:base + 8]
        res += [int(tile.sum()), int(tile.max()), int((tile < 0).any()),
                int((tile < 50).all()) + (t % 8) * 10 + (t // 8) * 100]
    return {"out": np.array(res, np.int32)}


_v = _r.integers(-10, 60, 128, dtype=np.int32)
_v[8:16] = np.abs(_v[8:16]) % 50  # a tile that is all small and non-negative
spec(file="coop_groups.cu", kernel="cg_tiles8", grid=(2,), block=(64,),
     args=(out("out", np.zeros(4 * 128, np.int32)), buf("in", _v)),
     reference=_tiles8_ref)


# ---------------------------------------------------------------------------
# templates.cu (mangled names: see name_expression)
# ---------------------------------------------------------------------------

_r = rng(800)
_n = 1000
for _dt, _cty, _mangled in ((np.float32, "float", "_Z9scale_addIfEvPT_PKS0_S3_S0_i"),
                            (np.float64, "double", "_Z9scale_addIdEvPT_PKS0_S3_S0_i"),
                            (np.int32, "int", "_Z9scale_addIiEvPT_PKS0_S3_S0_i")):
    if _dt is np.int32:
        _x = _r.integers(-10**4, 10**4, _n, dtype=np.int32)
        _y = _r.integers(-10**4, 10**4, _n, dtype=np.int32)
        _alpha = np.int32(-3)
    else:
        _x = exact_grid(_r, _n, -1000, 1000, 16, _dt)
        _y = exact_grid(_r, _n, -1000, 1000, 16, _dt)
        _alpha = _dt(2.5)
    spec(file="templates.cu", kernel=_mangled, name_expression=f"scale_add<{_cty}>",
         grid=grid1(_n, 128), block=(128,),
         args=(out("out", np.zeros(_n, _dt)), buf("x", _x), buf("y", _y),
               Scalar("alpha", _alpha), Scalar("n", i32(_n))),
         reference=lambda v: {"out": (v["alpha"] * v["x"] + v["y"]).astype(v["x"].dtype)})

for _blk, _mangled in ((64, "_Z9block_sumILi64EEvPxPKii"), (128, "_Z9block_sumILi128EEvPxPKii")):
    _n = _blk * 8 - 13
    spec(file="templates.cu", kernel=_mangled, name_expression=f"block_sum<{_blk}>",
         grid=(8,), block=(_blk,),
         args=(out("out", np.zeros(8, np.int64)),
               buf("in", _r.integers(-2**31, 2**31 - 1, _n, dtype=np.int32)), Scalar("n", i32(_n))),
         reference=(lambda blk: lambda v: {"out": np.array(
             [v["in"][b * blk:(b + 1) * blk].astype(np.int64).sum() for b in range(8)], np.int64)})(_blk),
         notes="blockDim.x must equal the template argument")

_empty = np.dtype([("pad", "u1")])
_n = 700
spec(file="templates.cu", kernel="_Z10map_kernelI6SquareEvPfPKfiT_",
     name_expression="map_kernel<Square>", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(_n, np.float32)),
           buf("in", _r.standard_normal(_n).astype(np.float32)), Scalar("n", i32(_n)),
           _struct("f", _empty, 1)),
     reference=lambda v: {"out": v["in"] * v["in"]},
     notes="the functor is an empty struct passed by value: a 1-byte .param")
spec(file="templates.cu", kernel="_Z10map_kernelI7Clamp01EvPfPKfiT_",
     name_expression="map_kernel<Clamp01>", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(_n, np.float32)),
           buf("in", _r.standard_normal(_n).astype(np.float32)), Scalar("n", i32(_n)),
           _struct("f", _empty, 1)),
     reference=lambda v: {"out": np.clip(v["in"], np.float32(0), np.float32(1))})


# ---------------------------------------------------------------------------
# calls.cu
# ---------------------------------------------------------------------------

_r = rng(900)
spec(file="calls.cu", kernel="recursive_factorial", grid=(2,), block=(32,),
     args=(out("out", np.zeros(64, np.uint64)),
           buf("in", _r.integers(0, 20, 64, dtype=np.uint32, endpoint=True)), Scalar("n", i32(64))),
     reference=lambda v: {"out": np.array([math.factorial(int(k)) for k in v["in"]], np.uint64)},
     notes="__noinline__ recursion: needs a call stack")


def _fib(k: int) -> int:
    a, b = 0, 1
    for _ in range(k):
        a, b = b, a + b
    return a


spec(file="calls.cu", kernel="recursive_fib", grid=(1,), block=(64,),
     args=(out("out", np.zeros(64, np.int32)),
           buf("in", _r.integers(0, 15, 64, dtype=np.int32, endpoint=True)), Scalar("n", i32(64))),
     reference=lambda v: {"out": np.array([_fib(int(k)) for k in v["in"]], np.int32)},
     notes="doubly recursive, depth <= 15")

_n = 200


def _noinline_ref(v):
    x = v["in"].reshape(-1, 3)
    o = np.zeros((len(x), 3), np.float32)
    o[:, 0] = x.min(1)
    o[:, 1] = x.max(1)
    o[:, 2] = (x[:, 0] + x[:, 1]) + x[:, 2]
    a, b, c = x[:, 0], x[:, 1], x[:, 2]
    am = np.where((a >= b) & (a >= c), 0, np.where(b >= c, 1, 2)).astype(np.int32)
    return {"out": o.ravel(), "arg_out": am}


spec(file="calls.cu", kernel="noinline_calls", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(3 * _n, np.float32)), out("arg_out", np.zeros(_n, np.int32)),
           buf("in", exact_grid(_r, 3 * _n, -6, 6, 2, np.float32)), Scalar("n", i32(_n))),
     reference=_noinline_ref, notes="struct return and a pointer into the caller's local frame")


# ---------------------------------------------------------------------------
# local_mem.cu
# ---------------------------------------------------------------------------

_r = rng(1000)
_n = 500


def _local_idx_ref(v):
    x = v["in"].astype(np.int64)
    j = v["idx"]
    a = (j & 15).astype(np.int64)
    b = ((j >> 4) & 15).astype(np.int64)
    return {"out": (x * a + (a ^ 5) + x * b + (b ^ 5)).astype(np.int32)}


spec(file="local_mem.cu", kernel="local_array_dynamic_index", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(_n, np.int32)),
           buf("in", _r.integers(-1000, 1000, _n, dtype=np.int32)),
           buf("idx", _r.integers(-2**31, 2**31 - 1, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=_local_idx_ref)

_rows = 200
spec(file="local_mem.cu", kernel="local_sort8", grid=grid1(_rows, 64), block=(64,),
     args=(out("out", np.zeros(8 * _rows, np.float32)),
           buf("in", np.round(_r.standard_normal(8 * _rows) * 8 + 0.5).astype(np.float32) + 0.25),
           Scalar("rows", i32(_rows))),
     reference=lambda v: {"out": np.sort(v["in"].reshape(-1, 8), axis=1).ravel()},
     notes="rows contain duplicates; no zeros (so no -0.0/+0.0 ordering question)")

_n = 300


def _buckets_ref(v):
    k = v["keys"].reshape(-1, 6) & 3
    x = v["vals"].reshape(-1, 6)
    res = np.zeros((len(k), 4))
    for b in range(4):
        res[:, b] = np.where(k == b, x, 0.0).sum(1) + 1000.0 * (k == b).sum(1)
    return {"out": res.ravel()}


spec(file="local_mem.cu", kernel="local_buckets", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(4 * _n)), buf("keys", _r.integers(-100, 100, 6 * _n, dtype=np.int32)),
           buf("vals", exact_grid(_r, 6 * _n, -800, 800, 8, np.float64)), Scalar("n", i32(_n))),
     reference=_buckets_ref)


# ---------------------------------------------------------------------------
# structs.cu
# ---------------------------------------------------------------------------

PARAMS_DTYPE = np.dtype({"names": ["scale", "offset", "bias", "flag", "tag", "mask", "coeffs"],
                         "formats": ["<f4", "<i4", "<f8", "i1", "<i2", "<u8", ("<f4", (3,))]},
                        align=True)
assert PARAMS_DTYPE.itemsize == 48 and PARAMS_DTYPE.fields["coeffs"][1] == 32

_r = rng(1100)
_n = 200
_params = _struct("p", PARAMS_DTYPE, 8, scale=1.5, offset=-7, bias=0.25, flag=1, tag=300,
                  mask=0xF0F0_1234_8001_FFFF, coeffs=[0.5, -1.0, 2.25])


def _struct_ref(v):
    p = v["p"]
    x = v["in"]
    i = np.arange(int(v["n"]))
    f = (np.float32(p["scale"]) * x + p["coeffs"][i % 3]).astype(np.float32)
    r = f.astype(np.float64) + float(p["bias"]) + float(int(p["offset"]) + int(p["tag"]))
    if int(p["flag"]):
        r = -r
    bits = np.array([(int(p["mask"]) >> (int(k) & 63)) & 1 for k in i], np.float64)
    return {"out": r + bits}


spec(file="structs.cu", kernel="struct_by_value", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(_n)), buf("in", exact_grid(_r, _n, -100, 100, 8, np.float32)),
           _params, Scalar("n", i32(_n))),
     reference=_struct_ref, notes="48-byte .param .align 8 struct; the kernel indexes its array field")

PARTICLE_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("vx", "<f4"), ("vy", "<f4"),
                           ("vz", "<f4"), ("alive", "<i4")])
STEP_DTYPE = np.dtype([("dt", "<f4"), ("gravity", "<f4")])
_n = 300
_ps = np.zeros(_n, PARTICLE_DTYPE)
for _f in ("x", "y", "z", "vx", "vy", "vz"):
    _ps[_f] = exact_grid(_r, _n, -160, 160, 16, np.float32)
_ps["y"] = np.abs(_ps["y"]) * 0.25
_ps["alive"] = _r.integers(0, 2, _n)


def _particles_ref(v):
    p = v["ps"].copy()
    s = v["s"]
    dt, g = np.float32(s["dt"]), np.float32(s["gravity"])
    alive = p["alive"] != 0
    vy = np.where(alive, p["vy"] - g * dt, p["vy"]).astype(np.float32)
    p["vy"] = vy
    for c, vc in (("x", "vx"), ("y", "vy"), ("z", "vz")):
        p[c] = np.where(alive, p[c] + p[vc] * dt, p[c])
    p["alive"] = np.where(alive & (p["y"] < 0), 0, p["alive"])
    return {"ps": p}


spec(file="structs.cu", kernel="particles_step", grid=grid1(_n, 128), block=(128,),
     args=(buf("ps", _ps, output=True), _struct("s", STEP_DTYPE, 4, dt=0.125, gravity=9.75),
           Scalar("n", i32(_n))),
     reference=_particles_ref, notes="array of 28-byte structs read and written whole")

INT2_DTYPE = np.dtype([("x", "<i4"), ("y", "<i4")])
_n = 256


def _vector_types_ref(v):
    a = v["in"].reshape(-1, 4)
    sx, sy = np.float32(v["shift"]["x"]), np.float32(v["shift"]["y"])
    r = np.stack([a[:, 1] + sx, a[:, 2] * np.float32(2), a[:, 3] - sy, a[:, 0]], axis=1)
    return {"out": r.astype(np.float32).ravel()}


spec(file="structs.cu", kernel="vector_types", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(4 * _n, np.float32)),
           buf("in", exact_grid(_r, 4 * _n, -500, 500, 4, np.float32)),
           _struct("shift", INT2_DTYPE, 8, x=3, y=-11), Scalar("n", i32(_n))),
     reference=_vector_types_ref, notes="float4 buffers as float32[4n]; int2 is .align 8")


# ---------------------------------------------------------------------------
# printf.cu
# ---------------------------------------------------------------------------

_pv = np.array([42, 7, 255], np.int32)
_pf = np.float32(3.14159)
_pd = 2.718281828
_stdout = (
    "hello from the device\n"
    f"int {_pv[0]} unsigned {_pv[1]} hex {_pv[2]:x}\n"
    f"long {int(_pv[0]) * 1000000000} char Z string ok\n"
    # Python's format mini-language agrees with C printf for these conversions
    f"float {float(_pf):.3f} double {_pd:.5f} sci {_pd * 1e10:e}\n"
    f"padded [{int(_pv[1]):5d}] [{int(_pv[2]):<4d}] [{float(_pf):05.1f}]\n"
)
spec(file="printf.cu", kernel="printf_basic", grid=(1,), block=(32,),
     args=(buf("vals", _pv), Scalar("f", _pf), Scalar("d", f64(_pd))),
     reference=lambda v: {}, stdout=_stdout)

_pv4 = np.array([5, -3, 100, 0], np.int32)
spec(file="printf.cu", kernel="printf_threads", grid=(1,), block=(32,),
     args=(buf("vals", _pv4),),
     reference=lambda v: {},
     stdout="".join(f"thread {t} value {int(_pv4[t]) * 2}\n" for t in range(4)),
     stdout_unordered=True)


# ---------------------------------------------------------------------------
# inline_asm.cu
# ---------------------------------------------------------------------------

_r = rng(1300)
_n = 100
spec(file="inline_asm.cu", kernel="asm_add", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(2 * _n, np.int32)),
           buf("a", _r.integers(-2**31, 2**31 - 1, _n, dtype=np.int32)),
           buf("b", _r.integers(-2**31, 2**31 - 1, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=lambda v: {"out": np.stack([
         to_array([int(a) + int(b) for a, b in zip(v["a"], v["b"], strict=True)], np.int32),
         (np.arange(int(v["n"])) % 32).astype(np.int32)], axis=1).ravel()})


def _asm_block_ref(v):
    res = []
    for a, b in zip(v["a"].tolist(), v["b"].tolist(), strict=True):
        t = (a * 3) & 0xFFFFFFFF
        res += [a * b, t if t > b else b]
    return {"out": np.array(res, np.uint64)}


spec(file="inline_asm.cu", kernel="asm_block", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(2 * _n, np.uint64)),
           buf("a", _r.integers(0, 2**32, _n, dtype=np.uint64).astype(np.uint32)),
           buf("b", _r.integers(0, 2**32, _n, dtype=np.uint64).astype(np.uint32)),
           Scalar("n", i32(_n))),
     reference=_asm_block_ref, notes="asm { .reg ...; } scope with a predicate")

spec(file="inline_asm.cu", kernel="asm_load_store", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(_n, np.float32)),
           buf("in", _r.standard_normal(_n).astype(np.float32)), Scalar("n", i32(_n))),
     reference=lambda v: {"out": v["in"] * np.float32(2)},
     notes="ld.global/st.global on generic pointers (identity-mapped global window)")


# ---------------------------------------------------------------------------
# math.cu
# ---------------------------------------------------------------------------

_r = rng(1400)
_n = 256
_mx = _r.uniform(-3, 3, _n).astype(np.float32)
_my = _r.uniform(0.1, 4, _n).astype(np.float32)
_erf = np.vectorize(math.erf)


def _roundf(x):
    return np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5)).astype(np.float32)


def _math_f32_ref(v):
    a32, b32 = v["x"], v["y"]
    a, b = a32.astype(np.float64), b32.astype(np.float64)
    o = np.zeros((len(a), 12), np.float32)
    o[:, 0] = np.sin(a)
    o[:, 1] = np.cos(a)
    o[:, 2] = np.exp(a)
    o[:, 3] = np.log(b)
    o[:, 4] = _erf(a)
    o[:, 5] = b ** a
    o[:, 6] = np.tanh(a)
    o[:, 7] = np.sqrt(b32)
    o[:, 8] = np.arctan2(a, b)
    o[:, 9] = (np.floor(a32 * np.float32(3)) + np.ceil(b32) + np.trunc(a32)
               + _roundf(b32 * np.float32(2)))
    o[:, 10] = np.fmod(a32 * np.float32(10), b32)
    o[:, 11] = 1 / np.sqrt(b) + 2.0 ** a + np.log2(b) + np.cbrt(a)
    return {"out": o.ravel()}


spec(file="math.cu", kernel="math_f32", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(12 * _n, np.float32)), buf("x", _mx), buf("y", _my),
           Scalar("n", i32(_n))),
     reference=_math_f32_ref, rtol=4e-6, atol=4e-6,
     notes="libdevice float functions are within a few ulp of the exact value")

_dx = _r.uniform(-3, 3, _n)
_dy = _r.uniform(0.1, 4, _n)


def _math_f64_ref(v):
    a, b = v["x"], v["y"]
    o = np.zeros((len(a), 8))
    o[:, 0] = np.sqrt(b)
    o[:, 1] = np.sin(a)
    o[:, 2] = np.exp(a)
    o[:, 3] = np.log(b)
    o[:, 4] = b ** a
    o[:, 5] = np.tanh(a)
    o[:, 6] = [float(Fraction(p) * Fraction(q) - 1) for p, q in zip(a, b, strict=True)]
    o[:, 7] = np.abs(a) / b
    return {"out": o.ravel()}


spec(file="math.cu", kernel="math_f64", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(8 * _n)), buf("x", _dx), buf("y", _dy), Scalar("n", i32(_n))),
     reference=_math_f64_ref, rtol=1e-14, atol=1e-14)

_ix = _r.uniform(-3, 3, _n).astype(np.float32)
_iy = _r.uniform(0.5, 2, _n).astype(np.float32)


def _intrinsics_ref(v):
    a32, b32 = v["x"], v["y"]
    a, b = a32.astype(np.float64), b32.astype(np.float64)
    o = np.zeros((len(a), 8), np.float32)
    o[:, 0] = np.sin(a)
    o[:, 1] = np.cos(a)
    o[:, 2] = np.exp(a)
    o[:, 3] = np.log(b)
    o[:, 4] = a / b
    o[:, 5] = f32_from_exact(Fraction(float(p)) * Fraction(float(q)) + 1 for p, q in zip(a32, b32, strict=True))
    o[:, 6] = toward_zero((a + b).astype(np.float32), a + b)
    o[:, 7] = np.sqrt(b32) + (np.float32(1) / b32)
    return {"out": o.ravel()}


spec(file="math.cu", kernel="math_intrinsics", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(8 * _n, np.float32)), buf("x", _ix), buf("y", _iy),
           Scalar("n", i32(_n))),
     reference=_intrinsics_ref, rtol=4e-6, atol=4e-6,
     notes="approximate instructions (sin/cos/ex2/lg2/rcp .approx): compare with tolerance")


# ---------------------------------------------------------------------------
# reduction.cu
# ---------------------------------------------------------------------------

_r = rng(1500)
_n = 3000
spec(file="reduction.cu", kernel="block_reduce_sum", grid=(6,), block=(256,),
     args=(out("block_sums", np.zeros(6, np.float32)),
           buf("in", exact_grid(_r, _n, -800, 800, 8, np.float32)), Scalar("n", i32(_n))),
     reference=lambda v: {"block_sums": np.array(
         [v["in"][b * 512:(b + 1) * 512].astype(np.float64).sum() for b in range(6)], np.float32)},
     notes="each block reduces 512 elements; blockDim.x must be 256")

_n = 1000
spec(file="reduction.cu", kernel="threadfence_reduce", grid=(8,), block=(128,),
     args=(out("partials", np.zeros(8, np.int32)), out("total", np.zeros(1, np.int64)),
           buf("in", _r.integers(-10**6, 10**6, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=lambda v: {
         "partials": np.array([v["in"][b * 128:(b + 1) * 128].sum() for b in range(8)], np.int32),
         "total": np.array([v["in"].astype(np.int64).sum()], np.int64)},
     notes="last-block pattern with __threadfence and atomicInc on a __device__ counter "
           "(which wraps back to 0, so the kernel can be launched again)")


# ---------------------------------------------------------------------------
# histogram.cu
# ---------------------------------------------------------------------------

_r = rng(1600)
_n = 5000
spec(file="histogram.cu", kernel="histogram_shared", grid=(8,), block=(128,),
     args=(out("hist", np.zeros(64, np.uint32)),
           buf("data", _r.integers(0, 256, _n, dtype=np.uint8)), Scalar("n", i32(_n))),
     reference=lambda v: {"hist": np.bincount(v["data"] % 64, minlength=64).astype(np.uint32)},
     notes="grid-stride loop over the data")

_n, _nb = 1000, 40
spec(file="histogram.cu", kernel="histogram_weighted", grid=grid1(_n, 128), block=(128,),
     shared_bytes=_nb * 4,
     args=(out("hist", np.zeros(_nb, np.float32)),
           buf("keys", _r.integers(0, 10**6, _n, dtype=np.int32)),
           buf("w", exact_grid(_r, _n, -40, 40, 4, np.float32)),
           Scalar("n", i32(_n)), Scalar("nbins", i32(_nb))),
     reference=lambda v: {"hist": np.bincount(v["keys"] % int(v["nbins"]), weights=v["w"].astype(np.float64),
                                              minlength=int(v["nbins"])).astype(np.float32)})


# ---------------------------------------------------------------------------
# stencil.cu
# ---------------------------------------------------------------------------

_r = rng(1700)
_n = 1000
_W1 = np.array([1, -2, 3, 4, 3, -2, 1], np.float64)


def _stencil1d_ref(v):
    x = v["in"].astype(np.float64)
    n = int(v["n"])
    idx = np.arange(n)
    s = sum(_W1[k + 3] * x[np.clip(idx + k, 0, n - 1)] for k in range(-3, 4))
    return {"out": s.astype(np.float32)}


spec(file="stencil.cu", kernel="stencil_1d", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(_n, np.float32)),
           buf("in", _r.integers(-100, 100, _n).astype(np.float32)), Scalar("n", i32(_n))),
     reference=_stencil1d_ref, notes="weights in a __constant__ array; clamped halo")

_W, _H = 40, 35


def _stencil2d_ref(v):
    a = v["in"].reshape(int(v["H"]), int(v["W"]))
    o = a.copy()
    o[1:-1, 1:-1] = 0.25 * (a[1:-1, :-2] + a[1:-1, 2:] + a[:-2, 1:-1] + a[2:, 1:-1])
    return {"out": o.ravel()}


spec(file="stencil.cu", kernel="stencil_2d_5pt", grid=(3, 3), block=(16, 16),
     args=(out("out", np.zeros(_W * _H)), buf("in", exact_grid(_r, _W * _H, -400, 400, 4, np.float64)),
           Scalar("W", i32(_W)), Scalar("H", i32(_H))),
     reference=_stencil2d_ref)


# ---------------------------------------------------------------------------
# gather.cu
# ---------------------------------------------------------------------------

_r = rng(1800)
_n, _src_n = 2000, 777
spec(file="gather.cu", kernel="gather_index", grid=grid1(_n, 256), block=(256,),
     args=(out("out", np.zeros(_n, np.float32)), buf("src", _r.standard_normal(_src_n).astype(np.float32)),
           buf("idx", _r.integers(0, _src_n, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=lambda v: {"out": v["src"][v["idx"]]})

_n = 1000


def _scatter_ref(v):
    d = v["dst"].copy()
    d[v["perm"]] = v["src"]
    return {"dst": d}


spec(file="gather.cu", kernel="scatter_perm", grid=grid1(_n, 128), block=(128,),
     args=(out("dst", np.zeros(_n, np.int32)), buf("src", _r.integers(-10**6, 10**6, _n, dtype=np.int32)),
           buf("perm", _r.permutation(_n).astype(np.int32)), Scalar("n", i32(_n))),
     reference=_scatter_ref)

_n, _hops = 512, 20


def _chase_ref(v):
    nxt, val = v["next"], v["value"]
    res = []
    for i in range(int(v["n"])):
        cur, s = i, 0
        for _ in range(int(v["hops"])):
            s += int(val[cur])
            cur = int(nxt[cur])
        res.append(s + cur)
    return {"out": np.array(res, np.int64)}


spec(file="gather.cu", kernel="pointer_chase", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(_n, np.int64)), buf("next", _r.integers(0, _n, _n, dtype=np.int32)),
           buf("value", _r.integers(-1000, 1000, _n, dtype=np.int32)),
           Scalar("n", i32(_n)), Scalar("hops", i32(_hops))),
     reference=_chase_ref)

_nrows, _ncols = 6, 100
_rows_even = _r.standard_normal(3 * _ncols).astype(np.float32)  # rows 0, 2, 4 back to back
_row_bufs = [buf(f"row{k}", _r.standard_normal(_ncols + 7).astype(np.float32)) for k in (1, 3, 5)]
_relocs = []
for _k in range(_nrows):
    if _k % 2 == 0:
        _relocs.append(Reloc(8 * _k, "rows_even", (_k // 2) * _ncols * 4))
    else:
        _relocs.append(Reloc(8 * _k, f"row{_k}", 7 * 4))  # rows start 7 floats into their buffers


def _ptr_table_ref(v):
    nrows, cols = int(v["nrows"]), int(v["cols"])
    o = np.zeros((nrows, cols), np.float32)
    for k in range(nrows):
        row = v["rows_even"][(k // 2) * cols:(k // 2 + 1) * cols] if k % 2 == 0 else v[f"row{k}"][7:]
        o[k] = row * v["scale"][k]
    return {"out": o.ravel()}


spec(file="gather.cu", kernel="pointer_table", grid=(2, _nrows), block=(64,),
     args=(out("out", np.zeros(_nrows * _ncols, np.float32)),
           buf("rows", np.zeros(_nrows, np.uint64), relocs=_relocs),
           buf("scale", _r.standard_normal(_nrows).astype(np.float32)),
           Scalar("nrows", i32(_nrows)), Scalar("cols", i32(_ncols))),
     hidden=(buf("rows_even", _rows_even), *_row_bufs),
     reference=_ptr_table_ref,
     notes="float** table in device memory: pointers loaded from memory (unknown provenance), "
           "some pointing into the middle of their allocation")

NODE_DTYPE = np.dtype([("key", "<i4"), ("pad", "<i4"), ("next", "<u8")])
_nnodes, _nheads, _maxlen = 50, 40, 30
_nodes = np.zeros(_nnodes, NODE_DTYPE)
_nodes["key"] = _r.integers(-100, 100, _nnodes)
_succ = [int(s) if _r.random() < 0.9 else -1 for s in _r.integers(0, _nnodes, _nnodes)]
_node_relocs = [Reloc(16 * k + 8, "nodes", 16 * s) for k, s in enumerate(_succ) if s >= 0]
_heads = [int(h) for h in _r.integers(0, _nnodes, _nheads)]


def _list_ref(v, heads=tuple(_heads), succ=tuple(_succ)):
    keys = v["nodes"]["key"]
    res = []
    for h in heads:
        s, p = 0, h
        for _ in range(int(v["maxlen"])):
            if p < 0:
                break
            s += int(keys[p])
            p = succ[p]
        res.append(s)
    return {"out": np.array(res, np.int32)}


spec(file="gather.cu", kernel="linked_list_walk", grid=(2,), block=(32,),
     args=(out("out", np.zeros(_nheads, np.int32)),
           buf("heads", np.zeros(_nheads, np.uint64),
               relocs=[Reloc(8 * k, "nodes", 16 * h) for k, h in enumerate(_heads)]),
           Scalar("nheads", i32(_nheads)), Scalar("maxlen", i32(_maxlen))),
     hidden=(buf("nodes", _nodes, relocs=_node_relocs),),
     reference=_list_ref,
     notes="16-byte nodes whose next pointers point into the same allocation (or are null)")


# ---------------------------------------------------------------------------
# sync.cu
# ---------------------------------------------------------------------------

_r = rng(1900)
_n = 600
_v = _r.integers(-40, 90, _n, dtype=np.int32)
_v[130] = -60  # block 1: __syncthreads_and false
_v[300] = 95  # block 2: __syncthreads_or true
_v[520] = 99  # block 4 (partial): true


def _sync_votes_ref(v):
    x = np.concatenate([v["in"], np.zeros(-int(v["n"]) % 128, np.int32)])
    res = []
    for b in range(5):
        blk = x[b * 128:(b + 1) * 128]
        res += [int((blk > 0).sum()), int((blk > -50).all()), int((blk > 90).any())]
    return {"out": np.array(res, np.int32)}


spec(file="sync.cu", kernel="syncthreads_votes", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(15, np.int32)), buf("in", _v), Scalar("n", i32(_n))),
     reference=_sync_votes_ref, notes="bar.red.popc / .and / .or; results stored as 0/1")


def _syncwarp_ref(v):
    x = v["in"]
    res = np.zeros_like(x)
    for i in range(len(x)):
        lane = i % 32
        res[i] = 2 * x[i - lane + (lane + 4) % 32]
    return {"out": res}


spec(file="sync.cu", kernel="syncwarp_exchange", grid=(2,), block=(64,),
     args=(out("out", np.zeros(128, np.int32)), buf("in", _r.integers(-10**5, 10**5, 128, dtype=np.int32))),
     reference=_syncwarp_ref)


# ---------------------------------------------------------------------------
# bits.cu
# ---------------------------------------------------------------------------

_r = rng(2000)
_n = 300
_ba = _r.integers(0, 2**32, _n, dtype=np.uint64).astype(np.uint32)
_bb = _r.integers(0, 2**32, _n, dtype=np.uint64).astype(np.uint32)
_ba[:6] = [0, 1, 0xFFFFFFFF, 0x80000000, 0x00010000, 0x7FFFFFFF]
_bb[:6] = [0, 31, 32, 33, 0xFFFFFFFF, 64]


def _clz(x: int, bits: int) -> int:
    return bits - x.bit_length()


def _brev(x: int, bits: int) -> int:
    return int(format(x, f"0{bits}b")[::-1], 2)


def _ffs(x: int) -> int:
    return (x & -x).bit_length()


def _byte_perm(x: int, y: int, s: int) -> int:
    src = x | (y << 32)
    r = 0
    for k in range(4):
        sel = (s >> (4 * k)) & 7
        r |= ((src >> (8 * sel)) & 0xFF) << (8 * k)
    return r


def _s32(x: int) -> int:
    return wrap(x, np.int32)


def _bits32_ref(v):
    res = []
    for x, y in zip(v["a"].tolist(), v["b"].tolist(), strict=True):
        s = y & 63
        wide = (y << 32) | x
        fl = ((wide << (s & 31)) >> 32) & 0xFFFFFFFF
        fr = (wide >> (s & 31)) & 0xFFFFFFFF
        flc = ((wide << min(s, 32)) >> 32) & 0xFFFFFFFF
        frc = (wide >> min(s, 32)) & 0xFFFFFFFF
        umulhi = (x * y) >> 32
        mulhi = ((_s32(x) * _s32(y)) >> 32) & 0xFFFFFFFF
        res += [_clz(x, 32), bin(x).count("1"), _brev(x, 32), _ffs(x),
                _byte_perm(x, y, 0x5140), _byte_perm(x, y, y & 0x7777), fl, fr, flc,
                frc ^ umulhi ^ mulhi]
    return {"out": np.array(res, np.uint32)}


spec(file="bits.cu", kernel="bit_ops32", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(10 * _n, np.uint32)), buf("a", _ba), buf("b", _bb), Scalar("n", i32(_n))),
     reference=_bits32_ref,
     notes="__funnelshift_l/r take the shift mod 32, the *c variants clamp it to 32")

_b64 = _r.integers(0, 2**64, _n, dtype=np.uint64, endpoint=False)
_b64[:4] = [0, 1, 2**63, 2**64 - 1]
M64 = (1 << 64) - 1


def _bits64_ref(v):
    res = []
    for x in v["a"].tolist():
        s = x & 63
        rot = ((x << s) | (x >> ((64 - s) % 64))) & M64
        res += [_clz(x, 64), bin(x).count("1"), _brev(x, 64), _ffs(x),
                (x * (x ^ 0x9E3779B97F4A7C15)) >> 64, rot]
    return {"out": np.array(res, np.uint64)}


spec(file="bits.cu", kernel="bit_ops64", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(6 * _n, np.uint64)), buf("a", _b64), Scalar("n", i32(_n))),
     reference=_bits64_ref)


def _bit_misc_ref(v):
    res = []
    for x, y in zip(v["a"].tolist(), v["b"].tolist(), strict=True):
        ux, uy = x & 0xFFFFFFFF, y & 0xFFFFFFFF
        res += [abs(x - y) + 7, (x + y) >> 1, (x + y + 1) >> 1, abs(x) + max(x, y) - min(x, y),
                abs(ux - uy) + 1, (x & 0x7FFFFF) * (y & 0xFFF)]
    return {"out": to_array(res, np.int32)}


spec(file="bits.cu", kernel="bit_misc", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(6 * _n, np.int32)),
           buf("a", _r.integers(-2**28, 2**28, _n, dtype=np.int32)),
           buf("b", _r.integers(-2**28, 2**28, _n, dtype=np.int32)), Scalar("n", i32(_n))),
     reference=_bit_misc_ref, notes="__sad/__usad, signed __hadd/__rhadd, __mul24")


# ---------------------------------------------------------------------------
# memory_qualifiers.cu
# ---------------------------------------------------------------------------

_r = rng(2100)
_n = 256


def _ldg_ref(v):
    x, n = v["in"], int(v["n"])
    q = x.reshape(-1, 4)
    i = np.arange(n)
    d = q[(i // 4) % (n // 4)]
    return {"out": (((x + x[(i + 1) % n]) + d[:, 0]) - d[:, 3]).astype(np.float32)}


spec(file="memory_qualifiers.cu", kernel="ldg_readonly", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(_n, np.float32)), buf("in", exact_grid(_r, _n, -800, 800, 8, np.float32)),
           Scalar("n", i32(_n))),
     reference=_ldg_ref, notes="ld.global.nc, including a 16-byte vector load")

_n = 300
spec(file="memory_qualifiers.cu", kernel="volatile_rw", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(_n, np.int32)),
           buf("buf", _r.integers(-1000, 1000, _n, dtype=np.int32), output=True), Scalar("n", i32(_n))),
     reference=lambda v: {"out": v["buf"] * 3 + 1, "buf": v["buf"] * 3})

C_LUT = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3])
C_COEF = np.array([0.5, -1.25, 2.0, 0.125], np.float32)
G_TABLE = np.array([1, 2, 4, 8, 16, 32, 64, 128], np.float32)
_n = 256


def _const_ref(v):
    x = v["x"]
    c = C_COEF
    p = (c[0] + x * (c[1] + x * (c[2] + x * c[3]))).astype(np.float32)
    return {"out": 2.5 * C_LUT[v["idx"] & 15] + p.astype(np.float64)}


spec(file="memory_qualifiers.cu", kernel="constant_lookup", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(_n)), buf("idx", _r.integers(-2**31, 2**31 - 1, _n, dtype=np.int32)),
           buf("x", exact_grid(_r, _n, -8, 8, 4, np.float32)), Scalar("n", i32(_n))),
     reference=_const_ref, notes="__constant__ arrays and scalar with initializers")

_n = 200
spec(file="memory_qualifiers.cu", kernel="device_globals", grid=(4,), block=(64,),
     args=(out("out", np.zeros(_n, np.float32)), buf("in", _r.integers(-100, 100, _n, dtype=np.int32)),
           Scalar("n", i32(_n))),
     reference=lambda v: {"out": ((v["in"] + 17).astype(np.float32) * G_TABLE[v["in"] & 7])},
     notes="__device__ int g_bias = 17, float g_table[8] = {1..128}, int g_scratch[256]")

spec(file="memory_qualifiers.cu", kernel="device_global_ptr", grid=(1,), block=(64,),
     args=(out("out", np.zeros(64, np.float32)), Scalar("n", i32(64))),
     reference=lambda v: {"out": np.array([2.0 ** ((i & 7) + 1) - 1 for i in range(64)], np.float32)},
     notes="a __device__ array's address passed to a __noinline__ function")


# ---------------------------------------------------------------------------
# switch.cu
# ---------------------------------------------------------------------------

_r = rng(2200)
_n = 400


def _dispatch(op: int, a: int, b: int) -> int:
    table = {
        0: lambda: a + b, 1: lambda: a - b, 2: lambda: a * b, 3: lambda: a & b, 4: lambda: a | b,
        5: lambda: a ^ b, 6: lambda: a << (b & 15), 7: lambda: a >> (b & 15),
        8: lambda: max(a, b), 9: lambda: min(a, b), 10: lambda: -a, 11: lambda: ~b,
        12: lambda: a * 3 + b, 13: lambda: (a + 7) * (b - 2), 14: lambda: 0 if b == 0 else c_div(a, b),
        15: lambda: int(a == b), 16: lambda: a * a - b, 17: lambda: (a ^ 0x5A5A) + b,
    }
    return table.get(op, lambda: 12345)()


def _inline_switch(op: int, x: int, y: int) -> int:
    table = {
        0: x + 1, 1: x * 2, 2: x - y, 3: y * 5, 4: x ^ 0xFF, 5: x | 0x100, 6: y - 100, 7: x + y + 1,
        8: 42, 9: x * y, 10: -y, 11: x >> 2, 12: y << 3, 13: x & y, 14: x + 1000, 15: y + 2000,
    }
    return table.get(op, -1)


def _switch_ref(v):
    res = []
    for op, a, b in zip(v["ops"].tolist(), v["a"].tolist(), v["b"].tolist(), strict=True):
        res += [_inline_switch(op, a, b), _dispatch(op, a, b)]
    return {"out": to_array(res, np.int32)}


_b = _r.integers(-1000, 1000, _n, dtype=np.int32)
_b[::17] = 0
spec(file="switch.cu", kernel="big_switch", grid=grid1(_n, 128), block=(128,),
     args=(out("out", np.zeros(2 * _n, np.int32)), buf("ops", _r.integers(-2, 20, _n, dtype=np.int32)),
           buf("a", _r.integers(-1000, 1000, _n, dtype=np.int32)), buf("b", _b), Scalar("n", i32(_n))),
     reference=_switch_ref, notes="dense switches (NVVM emits compare trees, not brx.idx)")

_n = 100
spec(file="switch.cu", kernel="asm_jump_table", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(_n, np.int32)),
           buf("sel", _r.integers(0, 2**32, _n, dtype=np.uint64).astype(np.uint32)), Scalar("n", i32(_n))),
     reference=lambda v: {"out": (np.array([100, 201, 302, 403])[v["sel"] & 3] + (v["sel"] & 3)).astype(np.int32)},
     notes="brx.idx with a .branchtargets list, written in inline asm")


# ---------------------------------------------------------------------------
# intdiv.cu
# ---------------------------------------------------------------------------


def _divrem_ref(dt):
    def ref(v):
        q, r = [], []
        for x, y in zip(v["a"].tolist(), v["b"].tolist(), strict=True):
            q += [c_div(x, y), c_div(x, 7)]
            r += [c_rem(x, y), c_rem(x, 16)]
        return {"q": to_array(q, dt), "r": to_array(r, dt)}
    return ref


for _k, (_dt, _name) in enumerate(((np.int8, "i8"), (np.uint8, "u8"), (np.int16, "i16"),
                                   (np.uint16, "u16"), (np.int32, "i32"), (np.uint32, "u32"),
                                   (np.int64, "i64"), (np.uint64, "u64"))):
    _r = rng(2300 + _k)
    _n = 500
    _info = np.iinfo(_dt)
    _lo = _info.min if _info.bits <= 16 else _info.min + 1  # INT_MIN / -1 overflows from 32 bits up
    _a = _r.integers(_lo, _info.max, _n, dtype=_dt, endpoint=True)
    _small = _r.integers(-20 if _info.min < 0 else 1, 20, _n // 2, dtype=_dt, endpoint=True)
    _big = _r.integers(_lo, _info.max, _n - _n // 2, dtype=_dt, endpoint=True)
    _bv = np.concatenate([_small, _big])
    _bv[_bv == 0] = 3
    _a[:4] = [_info.max, _lo, 0, 7]
    _bv[:4] = [-1 if _info.min < 0 else 1, -1 if _info.min < 0 else 2, 5, _info.max]
    spec(file="intdiv.cu", kernel=f"divrem_{_name}", grid=grid1(_n, 128), block=(128,),
         args=(out("q", np.zeros(2 * _n, _dt)), out("r", np.zeros(2 * _n, _dt)),
               buf("a", _a), buf("b", _bv.astype(_dt)), Scalar("n", i32(_n))),
         reference=_divrem_ref(_dt),
         notes="C semantics: truncating division; 8/16-bit operands are promoted to int")


# ---------------------------------------------------------------------------
# conversions.cu
# ---------------------------------------------------------------------------

_r = rng(2400)
_n = 256
_cf = np.concatenate([
    np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 1e6 + 0.5, 3.0, -3.0,
              0.0, 123456.75, -7.25], np.float32),
    (_r.integers(-2000, 2000, 100) / 2).astype(np.float32),
    _r.uniform(-1e6, 1e6, _n - 114).astype(np.float32),
])
_cd = np.concatenate([
    np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1e6 - 0.5, -123.0000001, 4.2e-7, -4.2e-7], np.float64),
    _r.integers(-4000, 4000, 100) / 4,
    _r.uniform(-1e6, 1e6, _n - 109),
])


def _f2i_ref(v):
    x, y = v["f"], v["d"]
    oi = np.stack([np.rint(x), np.trunc(x), np.ceil(x), np.floor(x), np.trunc(x), np.rint(y)], 1)
    ou = np.stack([np.rint(np.abs(x)), np.trunc(np.abs(x))], 1)
    oll = np.stack([np.rint(x * np.float32(1024)).astype(np.float64), np.floor(y * 1e6),
                    np.ceil(np.abs(y) * 1e9)], 1)
    return {"out_i": oi.astype(np.int32).ravel(), "out_u": ou.astype(np.uint32).ravel(),
            "out_ll": oll.astype(np.int64).ravel()}


spec(file="conversions.cu", kernel="float_to_int_rounding", grid=grid1(_n, 128), block=(128,),
     args=(out("out_i", np.zeros(6 * _n, np.int32)), out("out_u", np.zeros(2 * _n, np.uint32)),
           out("out_ll", np.zeros(3 * _n, np.int64)), buf("f", _cf), buf("d", _cd),
           Scalar("n", i32(_n))),
     reference=_f2i_ref, notes="all values in range: no saturation cases")

_ia = _r.integers(-2**31, 2**31 - 1, _n, dtype=np.int32)
_ia[:6] = [0, 1, -1, 2**24 + 1, -(2**24 + 3), 2**31 - 1]
_ib = _r.integers(-2**62, 2**62, _n, dtype=np.int64)
_ib[:4] = [0, 2**53 + 1, -(2**60 + 12345), 2**24 + 1]


def _i2f_ref(v):
    a, b = v["a"], v["b"]
    rn = a.astype(np.float32)
    of = np.stack([rn, toward_zero(rn, a.astype(np.float64)),  # int32 is exact in float64
                   b.astype(np.float32), a.view(np.uint32).astype(np.float32),
                   (b.astype(np.float64) * 0.5).astype(np.float32)], 1)
    od = np.stack([b.astype(np.float64), a.astype(np.float64) / 3.0], 1)
    return {"out_f": of.astype(np.float32).ravel(), "out_d": od.ravel()}


spec(file="conversions.cu", kernel="int_to_float_rounding", grid=grid1(_n, 128), block=(128,),
     args=(out("out_f", np.zeros(5 * _n, np.float32)), out("out_d", np.zeros(2 * _n)),
           buf("a", _ia), buf("b", _ib), Scalar("n", i32(_n))),
     reference=_i2f_ref)

_n = 200
_wv = _r.integers(-2**63, 2**63 - 1, _n, dtype=np.int64)
_wv[:6] = [-1, 127, 128, 255, -129, 2**31]


def _widths_ref(v):
    x = v["in"]
    o = np.stack([x.astype(t).astype(np.int64) for t in
                  (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32)], 1)
    return {"out": o.ravel()}


spec(file="conversions.cu", kernel="int_width_casts", grid=grid1(_n, 64), block=(64,),
     args=(out("out", np.zeros(6 * _n, np.int64)), buf("in", _wv), Scalar("n", i32(_n))),
     reference=_widths_ref)


# ---------------------------------------------------------------------------
# indexing3d.cu
# ---------------------------------------------------------------------------

_r = rng(2500)
_X, _Y, _Z = 20, 10, 6
_bd = (8, 4, 2)
_gd = (3, 3, 3)


def _index3d_ref(v, bd=_bd, gd=_gd):
    X, Y, Z = int(v["X"]), int(v["Y"]), int(v["Z"])
    z, y, x = np.meshgrid(np.arange(Z), np.arange(Y), np.arange(X), indexing="ij")
    o = x + 100 * y + 10000 * z + 2 * v["in"].reshape(Z, Y, X)
    bx, tx = divmod(x, bd[0])
    by, ty = divmod(y, bd[1])
    bz, tz = divmod(z, bd[2])
    fb = (bz * gd[1] + by) * gd[0] + bx
    ft = (tz * bd[1] + ty) * bd[0] + tx
    return {"out": o.astype(np.int32).ravel(), "who": (fb * math.prod(bd) + ft).astype(np.int32).ravel()}


spec(file="indexing3d.cu", kernel="index_3d", grid=_gd, block=_bd,
     args=(out("out", np.zeros(_X * _Y * _Z, np.int32)), out("who", np.zeros(_X * _Y * _Z, np.int32)),
           buf("in", _r.integers(-1000, 1000, _X * _Y * _Z, dtype=np.int32)),
           Scalar("X", i32(_X)), Scalar("Y", i32(_Y)), Scalar("Z", i32(_Z))),
     reference=_index3d_ref, notes="3D grid of 3D blocks; the grid overhangs the volume")

_rows, _cols, _pitch = 50, 70, 80


def _madd_ref(v):
    rows, cols, pitch = int(v["rows"]), int(v["cols"]), int(v["pitch"])
    c = v["c"].reshape(rows, pitch).copy()
    a = v["a"].reshape(rows, pitch)
    b = v["b"].reshape(rows, pitch)
    c[:, :cols] = a[:, :cols] + b[:, :cols]
    return {"c": c.ravel()}


spec(file="indexing3d.cu", kernel="matrix_add_2d", grid=(5, 7), block=(16, 8),
     args=(out("c", np.full(_rows * _pitch, -1.0, np.float32)),
           buf("a", _r.standard_normal(_rows * _pitch).astype(np.float32)),
           buf("b", _r.standard_normal(_rows * _pitch).astype(np.float32)),
           Scalar("rows", i32(_rows)), Scalar("cols", i32(_cols)), Scalar("pitch", i32(_pitch))),
     reference=_madd_ref, notes="pitched rows: the padding columns must stay -1")


# ---------------------------------------------------------------------------
# lookup
# ---------------------------------------------------------------------------

#: Kernels whose PTX differs by architecture (same results everywhere).
ARCH_DEPENDENT = {
    "warp_reduce": "redux.sync on sm_80+ (shuffle tree below)",
    "bf16_ops": "fma.rn.bf16 on sm_80+ (fmaf + cvt below)",
}

SPECS_BY_NAME: dict[str, KernelSpec] = {s.name: s for s in SPECS}
assert len(SPECS_BY_NAME) == len(SPECS), "duplicate spec"


def specs_for_file(filename: str) -> list[KernelSpec]:
    return [s for s in SPECS if s.file == filename]


def get_spec(kernel: str, file: str | None = None) -> KernelSpec:
    """The spec of a kernel by its .entry name (and file, when names repeat)."""
    hits = [s for s in SPECS if s.kernel == kernel and (file is None or s.file == file)]
    if len(hits) != 1:
        raise KeyError(f"{kernel!r}: {len(hits)} specs")
    return hits[0]


__all__ = [
    "ARCH_DEPENDENT", "Buffer", "KernelSpec", "Reloc", "SPECS", "SPECS_BY_NAME", "Scalar", "Struct",
    "get_spec", "specs_for_file",
]
