"""What every ALU builder shares: the op record (``AluOp``), opcode decoding
(``Decoded``) and the ALU's view of PTX types.

The types are the CPU device's one table (:mod:`gpusafe.cpu.ptx_types`,
itself derived from ``gpusafe_instrument.nodes``); the ALU only says which of them
are ALU register types and adds ``cc``, the carry flag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import ptx_types

# --------------------------------------------------------------------------
# errors and the op record


class UnsupportedOpcode(Exception):
    """An opcode the ALU does not implement (or that is not an ALU opcode).

    ``opcode`` is the full dotted opcode; ``reason`` says what is missing.
    """

    def __init__(self, opcode: str, reason: str = ""):
        self.opcode = opcode
        self.reason = reason
        msg = f"unsupported ALU opcode {opcode!r}"
        if reason:
            msg += f": {reason}"
        super().__init__(msg)


@dataclass(frozen=True)
class AluOp:
    """One decoded ALU instruction (see docs/cpu-device.md, "ALU contract").

    ``fn(*sources)`` takes one 1-D array per entry of ``src_types`` (dtype as
    :func:`dtype_of` says) and returns one array, or a tuple of arrays when
    ``dst_types`` has more than one entry. ``fn`` never mutates its inputs, but
    may return one of them unchanged (``mov``, ``selp`` of one lane set, ...),
    so a caller must not mutate a result in place and expect the source to
    stay put.
    """

    opcode: str
    dst_types: tuple[str, ...]
    src_types: tuple[str, ...]
    fn: Callable[..., np.ndarray | tuple[np.ndarray, ...]]


# --------------------------------------------------------------------------
# PTX types

#: numpy dtype of a register of each PTX type the ALU computes with. ``cc`` is
#: not a PTX type: it is the carry flag of the ``.cc`` / ``addc`` / ``subc`` /
#: ``madc`` chains, an extension of the contract an executor opts into (see
#: ``alu_op(carry=True)``).
DTYPES: dict[str, np.dtype] = {
    **{t: ptx_types.DTYPES[t] for t in (
        "pred", "b8", "u8", "s8", "b16", "u16", "s16", "b32", "u32", "s32", "b64", "u64", "s64",
        "f16", "f32", "f64", "bf16", "f16x2", "bf16x2", "u16x2", "s16x2")},
    "cc": np.dtype(np.uint32),
}

#: every token that names a type in an opcode (some are not ALU register types:
#: ``b128``, and ``tf32`` and the fp8 pairs, results of ``cvt`` held in
#: ``b32``/``b16``).
TYPE_TOKENS = frozenset(ptx_types.SIZES)

UNSIGNED = frozenset({"u8", "u16", "u32", "u64"})
SIGNED = frozenset({"s8", "s16", "s32", "s64"})
BITS = frozenset({"b8", "b16", "b32", "b64"})
INTS = UNSIGNED | SIGNED | BITS
FLOATS = frozenset({"f16", "bf16", "f32", "f64"})
HALVES = frozenset({"f16", "bf16"})
HALF_PAIRS = frozenset({"f16x2", "bf16x2"})

_UINT_OF_WIDTH = {8 * size: dt for size, dt in ptx_types.UNSIGNED.items()}
_SINT_OF_WIDTH = {8 * size: dt for size, dt in ptx_types.SIGNED.items()}


def dtype_of(ptx_type: str) -> np.dtype:
    """numpy dtype of a PTX type name (without the dot); KeyError if not an ALU type."""
    return DTYPES[ptx_type]


def width_of(ptx_type: str) -> int:
    """Width in bits of a PTX type (a predicate is one bit)."""
    return 1 if ptx_type == "pred" else 8 * ptx_types.SIZES[ptx_type]


def uint_dtype(bits: int) -> np.dtype:
    return _UINT_OF_WIDTH[bits]


def sint_dtype(bits: int) -> np.dtype:
    return _SINT_OF_WIDTH[bits]


def as_unsigned(x: np.ndarray) -> np.ndarray:
    """The same bits viewed as the unsigned integer of the same width."""
    return x.view(_UINT_OF_WIDTH[x.dtype.itemsize * 8])


def as_signed(x: np.ndarray) -> np.ndarray:
    return x.view(_SINT_OF_WIDTH[x.dtype.itemsize * 8])


# --------------------------------------------------------------------------
# opcode decoding


@dataclass(frozen=True)
class Decoded:
    """An opcode split into its base, its modifiers and its types (in order)."""

    opcode: str
    base: str
    mods: tuple[str, ...]
    types: tuple[str, ...]

    def has(self, *mods: str) -> bool:
        return any(m in self.mods for m in mods)

    def one_of(self, group: Sequence[str], default: str | None = None) -> str | None:
        """The single modifier of ``group`` present, else ``default``; two is an error."""
        found = [m for m in self.mods if m in group]
        if len(found) > 1:
            raise UnsupportedOpcode(self.opcode, f"conflicting modifiers {found}")
        return found[0] if found else default

    def check(self, allowed: Sequence[str] | frozenset[str] | set[str]) -> None:
        """Raise for any modifier outside ``allowed`` (never ignore semantics silently)."""
        bad = [m for m in self.mods if m not in allowed]
        if bad:
            raise UnsupportedOpcode(self.opcode, f"modifier(s) {', '.join('.' + b for b in bad)}"
                                                 " not supported here")
        if len(set(self.mods)) != len(self.mods):
            raise UnsupportedOpcode(self.opcode, "repeated modifier")

    def single_type(self, allowed: Sequence[str] | frozenset[str] | set[str]) -> str:
        if len(self.types) != 1:
            raise UnsupportedOpcode(self.opcode, f"expected one type, found {len(self.types)}")
        t = self.types[0]
        if t not in allowed:
            raise UnsupportedOpcode(self.opcode, f"type .{t} not supported here")
        return t

    def fail(self, reason: str) -> UnsupportedOpcode:
        return UnsupportedOpcode(self.opcode, reason)


def decode(opcode: str) -> Decoded:
    parts = opcode.split(".")
    if not parts[0] or any(not p for p in parts):
        raise UnsupportedOpcode(opcode, "malformed opcode")
    mods: list[str] = []
    types: list[str] = []
    for p in parts[1:]:
        (types if p in TYPE_TOKENS else mods).append(p)
    return Decoded(opcode, parts[0], tuple(mods), tuple(types))


def expect_operands(d: Decoded, n: int, *allowed: int) -> None:
    if n not in allowed:
        want = " or ".join(str(a) for a in allowed)
        raise UnsupportedOpcode(d.opcode, f"{n} operands given, {want} expected")


def make(d: Decoded, dst: Sequence[str], src: Sequence[str], fn) -> AluOp:
    """The AluOp; ``fn`` runs with every numpy floating-point warning off (a
    signalling NaN, an overflow or 0/0 is a value on the GPU, not an error)."""

    def quiet_fn(*srcs):
        with np.errstate(all="ignore"):
            return fn(*srcs)

    quiet_fn.__name__ = f"alu[{d.opcode}]"
    quiet_fn.__wrapped__ = fn
    return AluOp(d.opcode, tuple(dst), tuple(src), quiet_fn)
