"""numpy dtypes of PTX types, derived from the toolkit's one type table.

``gpusafe_instrument.nodes.SCALAR_SIZES`` says what PTX types exist and how many bytes
each holds; the CPU device only adds how a register of each type is held in
numpy (docs/cpu-device.md, "ALU contract"): integers by signedness and size,
``f16``/``f32``/``f64`` as numpy floats, every other type as its raw bits
(``bf16``, ``tf32``, the fp8 pairs, the packed pairs), ``pred`` as bool.
``.b128`` is no register type of the CPU device and has no dtype.
"""

from __future__ import annotations

import numpy as np

from gpusafe_instrument.nodes import SCALAR_SIZES

PACKED_INTEGER_SIZES: dict[str, int] = {"u16x2": 4, "s16x2": 4}
"""Packed pairs of 16-bit integers (the SIMD forms of ``min``/``max``/``add``
...), which the toolkit's table does not list: they never size a memory access."""

SIZES: dict[str, int] = {**SCALAR_SIZES, **PACKED_INTEGER_SIZES}
"""Byte size of every PTX type the CPU device knows, keyed without the dot."""

UNSIGNED: dict[int, np.dtype] = {
    1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
SIGNED: dict[int, np.dtype] = {
    1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}
_FLOATS = {"f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}


def _register_dtype(name: str, size: int) -> np.dtype:
    if name == "pred":
        return np.dtype(np.bool_)
    if name in _FLOATS:
        return _FLOATS[name]
    if name.startswith("s") and not name.endswith("x2"):
        return SIGNED[size]
    return UNSIGNED[size]


DTYPES: dict[str, np.dtype] = {
    name: _register_dtype(name, size) for name, size in SIZES.items() if size <= 8
}
"""numpy dtype of a register of each PTX type."""


def dtype_of(ptx_type: str) -> np.dtype:
    """numpy dtype of a PTX type written with or without its dot (KeyError if none)."""
    return DTYPES[ptx_type.lstrip(".")]


def is_signed(ptx_type: str) -> bool:
    return ptx_type.lstrip(".")[0] == "s"
