"""Which builder decodes which ALU opcode: the table from base opcode to
builder, and :func:`alu_op`, the ALU's one entry point.
"""

from __future__ import annotations

from collections.abc import Callable

from . import bitwise, compare, convert, floating, integer
from .opcodes import FLOATS, HALF_PAIRS, AluOp, Decoded, UnsupportedOpcode, decode

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
        return floating.build_float_div(d, n, carry)
    return integer.build_int_div(d, n, carry)


_BUILDERS: dict[str, Builder] = {
    # integer / float arithmetic
    "add": _by_type(integer.build_int_add, floating.build_float_arith),
    "sub": _by_type(integer.build_int_sub, floating.build_float_arith),
    "mul": _by_type(integer.build_int_mul, floating.build_float_arith),
    "mad": _by_type(integer.build_int_mad, floating.build_float_arith),
    "fma": _float_only(floating.build_float_arith),
    "div": _div,
    "rem": _int_only(integer.build_int_div),
    "abs": _by_type(integer.build_int_abs, floating.build_float_absneg),
    "neg": _by_type(integer.build_int_neg, floating.build_float_absneg),
    "min": _by_type(integer.build_int_minmax, floating.build_float_minmax),
    "max": _by_type(integer.build_int_minmax, floating.build_float_minmax),
    # carry chains (opt-in, see module doc)
    "addc": _int_only(integer.build_int_add),
    "subc": _int_only(integer.build_int_sub),
    "madc": _int_only(integer.build_int_mad),
    # integer only
    "mul24": integer.build_mul24,
    "mad24": integer.build_mul24,
    "sad": integer.build_sad,
    "popc": bitwise.build_popc_clz,
    "clz": bitwise.build_popc_clz,
    "bfind": bitwise.build_bfind,
    "brev": bitwise.build_brev,
    "bfe": bitwise.build_bfe,
    "bfi": bitwise.build_bfi,
    "bmsk": bitwise.build_bmsk,
    "szext": bitwise.build_szext,
    "fns": bitwise.build_fns,
    "and": bitwise.build_logic,
    "or": bitwise.build_logic,
    "xor": bitwise.build_logic,
    "not": bitwise.build_logic,
    "cnot": bitwise.build_logic,
    "lop3": bitwise.build_lop3,
    "shl": bitwise.build_shift,
    "shr": bitwise.build_shift,
    "shf": bitwise.build_shf,
    "prmt": bitwise.build_prmt,
    "dp4a": integer.build_dp,
    "dp2a": integer.build_dp,
    # floating point only
    "rcp": _float_only(floating.build_float_unary),
    "sqrt": _float_only(floating.build_float_unary),
    "rsqrt": _float_only(floating.build_float_unary),
    "sin": _float_only(floating.build_float_unary),
    "cos": _float_only(floating.build_float_unary),
    "lg2": _float_only(floating.build_float_unary),
    "ex2": _float_only(floating.build_float_unary),
    "tanh": _float_only(floating.build_float_unary),
    "copysign": floating.build_copysign,
    "testp": floating.build_testp,
    # comparison and selection
    "setp": compare.build_setp,
    "set": compare.build_set,
    "selp": compare.build_selp,
    "slct": compare.build_slct,
    # conversion and moves
    "cvt": convert.build_cvt,
    "mov": convert.build_mov,
}
for _v in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax", "vset"):
    for _k in ("2", "4"):
        _BUILDERS[_v + _k] = integer.build_video

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
