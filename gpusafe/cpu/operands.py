"""Operands of decoded instructions: the closures that read and write
registers, immediates and symbol addresses.

A *reader* is ``reader(frame, act, nact) -> ndarray`` giving one value per
active lane, of exactly the numpy dtype of the PTX type it was built for
(:mod:`gpusafe.cpu.ptx_types`); a *writer* is ``writer(frame, act, values)``.
``act`` selects the active lanes of the frame (:mod:`gpusafe.cpu.frames`).

Register storage is one array per register of the register's declared type.
Reading a register as another type follows the PTX rules for operand sizes:
same size reinterprets the bits, a wider register is truncated, a narrower one
is zero- or sign-extended by the instruction type; writing a value into a
wider register zero- or sign-extends it by the instruction type.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .frames import Frame
from .ptx_types import DTYPES, SIGNED, UNSIGNED, dtype_of, is_signed

Reader = Callable[[Frame, Any, int], np.ndarray]
Writer = Callable[[Frame, Any, np.ndarray], None]


def convert_bits(values: np.ndarray, to: np.dtype, signed: bool) -> np.ndarray:
    """Reinterpret, truncate or extend ``values`` to dtype ``to`` by their bits."""
    src = values.dtype
    if src == to:
        return values
    if src == np.bool_ or to == np.bool_:
        return values.astype(to)
    if src.itemsize == to.itemsize:
        return values.view(to)
    if src.itemsize > to.itemsize:
        return values.view(UNSIGNED[src.itemsize]).astype(UNSIGNED[to.itemsize]).view(to)
    if signed:
        return values.view(SIGNED[src.itemsize]).astype(SIGNED[to.itemsize]).view(to)
    return values.view(UNSIGNED[src.itemsize]).astype(UNSIGNED[to.itemsize]).view(to)


def immediate_bits(text: str, value: int | float, ptx_type: str) -> np.ndarray:
    """A 0-d array holding an immediate read as ``ptx_type``.

    Integer types take the literal modulo 2**bits; a float literal (``0f...``,
    ``0d...``) given for an integer or bit type stands for its bit pattern;
    float types convert the value.
    """
    t = ptx_type.lstrip(".")
    dt = DTYPES[t]
    if dt == np.bool_:
        return np.array(bool(value))
    body = text.lstrip("-")
    if t == "bf16" and isinstance(value, float):  # the value rounded to bfloat16
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return np.array(bits & 0xFFFF, dtype=np.uint16)
    if dt.kind in "ui":
        if isinstance(value, float):
            if body[:2] in ("0f", "0F"):
                bits = struct.unpack("<I", struct.pack("<f", value))[0]
            else:
                bits = struct.unpack("<Q", struct.pack("<d", value))[0]
            bits &= (1 << (8 * dt.itemsize)) - 1
            return np.array(bits, dtype=UNSIGNED[dt.itemsize]).view(dt)
        mask = (1 << (8 * dt.itemsize)) - 1
        return np.array(int(value) & mask, dtype=UNSIGNED[dt.itemsize]).view(dt)
    with np.errstate(over="ignore"):
        return np.array(value, dtype=dt)


def const_reader(value: np.ndarray) -> Reader:
    """Broadcast a 0-d value to every active lane (read-only view, no copy)."""
    scalar = np.asarray(value)

    def read(fr: Frame, act: Any, nact: int) -> np.ndarray:
        return np.broadcast_to(scalar, (nact,))

    return read


def register_reader(slot: int, reg_dtype: np.dtype, want: str) -> Reader:
    want_dt = dtype_of(want)
    if reg_dtype == want_dt:
        def read(fr: Frame, act: Any, nact: int) -> np.ndarray:
            return fr.regs[slot][act]
        return read
    if reg_dtype.itemsize == want_dt.itemsize and np.bool_ not in (reg_dtype, want_dt):
        def read_view(fr: Frame, act: Any, nact: int) -> np.ndarray:
            return fr.regs[slot].view(want_dt)[act]
        return read_view
    signed = is_signed(want)

    def read_convert(fr: Frame, act: Any, nact: int) -> np.ndarray:
        return convert_bits(fr.regs[slot][act], want_dt, signed)

    return read_convert


def register_writer(slot: int, reg_dtype: np.dtype, value_type: str) -> Writer:
    val_dt = dtype_of(value_type)
    if reg_dtype == val_dt:
        def write(fr: Frame, act: Any, values: np.ndarray) -> None:
            fr.regs[slot][act] = values
        return write
    if reg_dtype.itemsize == val_dt.itemsize and np.bool_ not in (reg_dtype, val_dt):
        def write_view(fr: Frame, act: Any, values: np.ndarray) -> None:
            fr.regs[slot].view(val_dt)[act] = values
        return write_view
    signed = is_signed(value_type)

    def write_convert(fr: Frame, act: Any, values: np.ndarray) -> None:
        fr.regs[slot][act] = convert_bits(np.asarray(values, dtype=val_dt), reg_dtype, signed)

    return write_convert


def sink_writer(fr: Frame, act: Any, values: np.ndarray) -> None:
    """The ``_`` destination: results are dropped."""


def negate(reader: Reader) -> Reader:
    def read(fr: Frame, act: Any, nact: int) -> np.ndarray:
        return ~reader(fr, act, nact)

    return read


def value_reader(get: Callable[[Frame], int], want: str) -> Reader:
    """A per-frame uniform value (an address) broadcast as ``want``."""
    dt = dtype_of(want)
    mask = (1 << (8 * dt.itemsize)) - 1

    def read(fr: Frame, act: Any, nact: int) -> np.ndarray:
        v = np.array(get(fr) & mask, dtype=UNSIGNED[dt.itemsize]).view(dt)
        return np.broadcast_to(v, (nact,))

    return read
