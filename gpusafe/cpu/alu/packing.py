"""Vector moves of the ALU: ``mov.b64 %rd, {%r1, %r2}`` packs parts into one
value, ``mov.b32 {%h1, %h2}, %r1`` unpacks one (first part least significant).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .opcodes import dtype_of, uint_dtype, width_of


def _as_bits(x: np.ndarray, ptx_type: str) -> np.ndarray:
    w = width_of(ptx_type)
    x = np.asarray(x)
    if x.dtype == np.bool_ or x.dtype.itemsize * 8 != w:
        raise ValueError(f"array of dtype {x.dtype} does not hold a .{ptx_type}")
    return x.view(uint_dtype(w))


def pack(parts: Sequence[np.ndarray], part_type: str, whole_type: str) -> np.ndarray:
    """Concatenate the bits of ``parts`` (first = least significant) into one value.

    ``pack([lo, hi], "b32", "b64")`` is ``mov.b64 d, {lo, hi}``. The result has
    the dtype of ``whole_type``; the parts' widths must add up to its width.
    """
    pw, ww = width_of(part_type), width_of(whole_type)
    if pw * len(parts) != ww:
        raise ValueError(f"{len(parts)} x .{part_type} do not make a .{whole_type}")
    ut = uint_dtype(ww)
    out = np.zeros(np.shape(parts[0]), dtype=ut)
    for i, p in enumerate(parts):
        out |= _as_bits(p, part_type).astype(ut) << ut.type(i * pw)
    return out.view(dtype_of(whole_type))


def unpack(whole: np.ndarray, whole_type: str, part_type: str, n: int) -> list[np.ndarray]:
    """Split ``whole`` into ``n`` parts of ``part_type`` (first = least significant).

    ``unpack(rd, "b64", "b32", 2)`` is ``mov.b64 {lo, hi}, rd``.
    """
    pw, ww = width_of(part_type), width_of(whole_type)
    if pw * n != ww:
        raise ValueError(f"{n} x .{part_type} do not make a .{whole_type}")
    ut, pt = uint_dtype(ww), uint_dtype(pw)
    w = _as_bits(whole, whole_type)
    mask = ut.type((1 << pw) - 1)
    out = []
    for i in range(n):
        bits = ((w >> ut.type(i * pw)) & mask).astype(pt)
        out.append(bits.view(dtype_of(part_type)))
    return out
