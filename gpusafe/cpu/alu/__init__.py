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

Numerics (details in :mod:`gpusafe.cpu.alu.rounding`): every rounding mode of
add/sub/mul/fma/div/sqrt/rcp and of cvt is correctly rounded, for f32, f64
(fma.f64 emulated exactly), f16 and bf16; ``.approx`` functions are computed
accurately (within the PTX error bounds, not bit-equal to the GPU's
approximations); f32/f16/bf16 NaN results are the canonical NaN.

Modules: :mod:`~gpusafe.cpu.alu.dispatch` (opcode -> builder, ``alu_op``),
:mod:`~gpusafe.cpu.alu.opcodes` (``AluOp``, opcode decoding, ALU types),
:mod:`~gpusafe.cpu.alu.integer` and :mod:`~gpusafe.cpu.alu.bitwise` (integer
and bit instructions), :mod:`~gpusafe.cpu.alu.floating` (float instructions)
over :mod:`~gpusafe.cpu.alu.rounding` (correctly rounded arithmetic and
formats), :mod:`~gpusafe.cpu.alu.compare` (setp/set/selp/slct),
:mod:`~gpusafe.cpu.alu.convert` (cvt, mov), :mod:`~gpusafe.cpu.alu.packing`
(vector moves).
"""

from __future__ import annotations

from .dispatch import ALU_BASES, alu_op, is_alu_opcode
from .opcodes import DTYPES, AluOp, UnsupportedOpcode, dtype_of, width_of
from .packing import pack, unpack

__all__ = [
    "AluOp", "UnsupportedOpcode", "alu_op", "is_alu_opcode", "pack", "unpack", "dtype_of",
    "width_of", "DTYPES", "ALU_BASES",
]
