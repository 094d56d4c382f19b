"""The ALU of the CPU device: per-lane semantics of every non-memory,
non-control PTX instruction, vectorised over lanes with numpy.

Contract (docs/cpu-device.md, "ALU contract")::

    op = alu_op("mad.wide.s32", 4)   # AluOp(opcode, dst_types, src_types, fn)
    d = op.fn(a, b, c)               # 1-D arrays, one element per active lane

``alu_op`` does all decoding once (the executor caches its result per
instruction); ``fn`` only computes. ``fn`` never warns or raises on any input
value and returns what the GPU returns.

Conventions beyond the contract text:

* ``setp`` always returns two arrays ``(p, q)`` and has ``dst_types ==
  ("pred", "pred")``: q is the complement result (``!cmp BoolOp c``), or the
  upper halves' result for ``.f16x2``/``.bf16x2``. The executor stores q only
  when the destination is a ``p|q`` pair.
* A negated predicate source (``!%p``) reaches ``fn`` already negated.
* Carry chains (``add.cc``, ``addc``, ``sub.cc``, ``subc``, ``mad.lo.cc``,
  ``madc``): the condition-code flag CC.CF is per-thread state, so these are
  opt-in: ``alu_op(opcode, n)`` raises :class:`UnsupportedOpcode` for them, and
  ``alu_op(opcode, n, carry=True)`` returns ops whose ``src_types`` end with
  ``"cc"`` when they read the flag and whose ``dst_types`` end with ``"cc"``
  when they write it (a uint32 array of 0/1, one per lane; dtype_of("cc")).
  The executor passes the thread's CC.CF as that extra last source and stores
  the extra last result back into it. (The CUDA math library's double-precision
  sin/cos/tan argument reduction uses such chains in inline assembly.)
* ``mov`` returns its source; vector moves (``mov.b64 %rd, {%r1, %r2}``) are
  the executor's, with :func:`pack` and :func:`unpack`.
* ``is_alu_opcode`` says whether an opcode belongs to the ALU (by its base
  name); ``alu_op`` may still raise UnsupportedOpcode for a form it does not
  implement, naming what is missing.

Numerics (details in :mod:`gpusafe.cpu.alu_fp`): every rounding mode of
add/sub/mul/fma/div/sqrt/rcp and of cvt is correctly rounded, for f32, f64
(fma.f64 emulated exactly), f16 and bf16; ``.approx`` functions are computed
accurately (within the PTX error bounds, not bit-equal to the GPU's
approximations); f32/f16/bf16 NaN results are the canonical NaN.
"""

from __future__ import annotations

from collections.abc import Callable

from . import alu_compare, alu_convert, alu_float, alu_int
from .alu_common import (
    DTYPES,
    FLOATS,
    HALF_PAIRS,
    AluOp,
    Decoded,
    UnsupportedOpcode,
    decode,
    dtype_of,
    pack,
    unpack,
    width_of,
)

__all__ = [
    "AluOp", "UnsupportedOpcode", "alu_op", "is_alu_opcode", "pack", "unpack", "dtype_of",
    "width_of", "DTYPES", "ALU_BASES",
]

Builder = Callable[[Decoded, int, bool], AluOp]
_FLOATY = FLOATS | HALF_PAIRS


def _is_float(d: Decoded) -> bool:
    return bool(d.types) and d.types[-1] in _FLOATY


def _by_type(int_builder: Builder, float_builder: Builder) -> Builder:
    def build(d: Decoded, n: int, carry: bool) -> AluOp:
        return (float_builder if _is_float(d) else int_builder)(d, n, carry)
    return build


def _float_only(builder: Builder) -> Builder:
    def build(d: Decoded, n: int, carry: bool) -> AluOp:
        if not _is_float(d):
            raise d.fail("floating-point instruction needs a float type")
        return builder(d, n, carry)
    return build


def _int_only(builder: Builder) -> Builder:
    def build(d: Decoded, n: int, carry: bool) -> AluOp:
        if _is_float(d):
            raise d.fail("integer instruction with a float type")
        return builder(d, n, carry)
    return build


def _div(d: Decoded, n: int, carry: bool) -> AluOp:
    if _is_float(d):
        return alu_float.build_float_div(d, n, carry)
    return alu_int.build_int_div(d, n, carry)


_BUILDERS: dict[str, Builder] = {
    # integer / float arithmetic
    "add": _by_type(alu_int.build_int_add, alu_float.build_float_arith),
    "sub": _by_type(alu_int.build_int_sub, alu_float.build_float_arith),
    "mul": _by_type(alu_int.build_int_mul, alu_float.build_float_arith),
    "mad": _by_type(alu_int.build_int_mad, alu_float.build_float_arith),
    "fma": _float_only(alu_float.build_float_arith),
    "div": _div,
    "rem": _int_only(alu_int.build_int_div),
    "abs": _by_type(alu_int.build_int_abs, alu_float.build_float_absneg),
    "neg": _by_type(alu_int.build_int_neg, alu_float.build_float_absneg),
    "min": _by_type(alu_int.build_int_minmax, alu_float.build_float_minmax),
    "max": _by_type(alu_int.build_int_minmax, alu_float.build_float_minmax),
    # carry chains (opt-in, see module doc)
    "addc": _int_only(alu_int.build_int_add),
    "subc": _int_only(alu_int.build_int_sub),
    "madc": _int_only(alu_int.build_int_mad),
    # integer only
    "mul24": alu_int.build_mul24,
    "mad24": alu_int.build_mul24,
    "sad": alu_int.build_sad,
    "popc": alu_int.build_popc_clz,
    "clz": alu_int.build_popc_clz,
    "bfind": alu_int.build_bfind,
    "brev": alu_int.build_brev,
    "bfe": alu_int.build_bfe,
    "bfi": alu_int.build_bfi,
    "bmsk": alu_int.build_bmsk,
    "szext": alu_int.build_szext,
    "fns": alu_int.build_fns,
    "and": alu_int.build_logic,
    "or": alu_int.build_logic,
    "xor": alu_int.build_logic,
    "not": alu_int.build_logic,
    "cnot": alu_int.build_logic,
    "lop3": alu_int.build_lop3,
    "shl": alu_int.build_shift,
    "shr": alu_int.build_shift,
    "shf": alu_int.build_shf,
    "prmt": alu_int.build_prmt,
    "dp4a": alu_int.build_dp,
    "dp2a": alu_int.build_dp,
    # floating point only
    "rcp": _float_only(alu_float.build_float_unary),
    "sqrt": _float_only(alu_float.build_float_unary),
    "rsqrt": _float_only(alu_float.build_float_unary),
    "sin": _float_only(alu_float.build_float_unary),
    "cos": _float_only(alu_float.build_float_unary),
    "lg2": _float_only(alu_float.build_float_unary),
    "ex2": _float_only(alu_float.build_float_unary),
    "tanh": _float_only(alu_float.build_float_unary),
    "copysign": alu_float.build_copysign,
    "testp": alu_float.build_testp,
    # comparison and selection
    "setp": alu_compare.build_setp,
    "set": alu_compare.build_set,
    "selp": alu_compare.build_selp,
    "slct": alu_compare.build_slct,
    # conversion and moves
    "cvt": alu_convert.build_cvt,
    "mov": alu_convert.build_mov,
}
for _v in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax", "vset"):
    for _k in ("2", "4"):
        _BUILDERS[_v + _k] = alu_int.build_video

#: base opcodes the ALU handles
ALU_BASES = frozenset(_BUILDERS)


def is_alu_opcode(opcode: str) -> bool:
    """True when ``opcode`` (full dotted name) is an ALU instruction."""
    return opcode.split(".", 1)[0] in ALU_BASES


def alu_op(opcode: str, n_operands: int, *, carry: bool = False) -> AluOp:
    """Decode ``opcode`` with ``n_operands`` operands (destinations + sources,
    a ``p|q`` pair counting as one) into an :class:`AluOp`.

    Raises :class:`UnsupportedOpcode` for a non-ALU opcode, a form the ALU does
    not implement, a wrong operand count, or (unless ``carry=True``) a carry chain.
    """
    d = decode(opcode)
    builder = _BUILDERS.get(d.base)
    if builder is None:
        raise UnsupportedOpcode(opcode, "not an ALU instruction")
    return builder(d, n_operands, carry)
