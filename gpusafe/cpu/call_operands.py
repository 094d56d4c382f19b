"""Call operands: how a call's arguments and return values are held by the
caller (a ``.param`` variable, a register, an immediate) and how their bytes
move into the callee's frame and back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from .decoded import Binding, DecodeError
from .decoder import DecodeContext
from .frames import Frame


class CallOperand:
    """How one call argument / return value is held by the caller."""

    __slots__ = ("kind", "offset", "size", "slot", "dtype", "reader")

    def __init__(self, kind: str, offset: int = 0, size: int = 0, slot: int = -1,
                 dtype: Any = None, reader: Any = None) -> None:
        self.kind = kind
        self.offset = offset
        self.size = size
        self.slot = slot
        self.dtype = dtype
        self.reader = reader


def call_operand(ctx: DecodeContext, operand: nodes.Operand) -> CallOperand:
    if isinstance(operand, nodes.Symbol):
        b = ctx.lookup(operand.name)
        if b.kind == "param":
            return CallOperand("param", offset=b.offset, size=b.size)
        if b.kind == "reg":
            return CallOperand("reg", slot=b.slot, dtype=b.dtype, size=b.dtype.itemsize)
        raise DecodeError(f"call operand {operand.name} is not a .param variable")
    if isinstance(operand, nodes.Register):
        b = ctx.lookup(operand.name)
        if b.kind == "reg":
            return CallOperand("reg", slot=b.slot, dtype=b.dtype, size=b.dtype.itemsize)
    if isinstance(operand, nodes.Immediate):
        return CallOperand("imm", reader=operand)
    raise DecodeError(f"unsupported call operand {operand}")


def arg_bytes(fr: Frame, idx: np.ndarray, move: CallOperand, size: int) -> np.ndarray:
    """The caller's bytes of one argument for lanes ``idx``: (len(idx), size) uint8."""
    if move.kind == "param":
        return fr.params[idx, move.offset: move.offset + min(size, move.size)]
    if move.kind == "reg":
        v = np.ascontiguousarray(fr.regs[move.slot][idx])
        return v.view(np.uint8).reshape(len(idx), -1)[:, :size]
    value = move.reader.value
    raw = int(value) if not isinstance(value, float) else 0
    b = (raw & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return np.broadcast_to(np.frombuffer(b, np.uint8), (len(idx), size))


def copy_in(fr: Frame, sub: np.ndarray, move: CallOperand, callee: Frame, dst: Binding) -> None:
    """Copy one argument of caller lanes ``sub`` into the callee's parameter ``dst``."""
    if dst.kind == "param":
        data = arg_bytes(fr, sub, move, dst.size)
        callee.params[:, dst.offset: dst.offset + data.shape[1]] = data
    else:  # a .reg parameter
        data = arg_bytes(fr, sub, move, dst.dtype.itemsize)
        raw = np.ascontiguousarray(data).view(dst.dtype).reshape(-1)
        callee.regs[dst.slot][:] = raw


def copy_out(callee: Frame, keep: np.ndarray, src: Binding, fr: Frame, dst_lanes: np.ndarray,
             move: CallOperand) -> None:
    """Copy the callee's return value ``src`` of its lanes ``keep`` back to the caller."""
    if src.kind == "param":
        data = callee.params[keep, src.offset: src.offset + src.size]
    else:
        regs = np.ascontiguousarray(callee.regs[src.slot][keep])
        data = regs.view(np.uint8).reshape(len(keep), -1)
    if move.kind == "param":
        width = min(move.size, data.shape[1])
        fr.params[dst_lanes, move.offset: move.offset + width] = data[:, :width]
    elif move.kind == "reg":
        width = move.dtype.itemsize
        padded = np.zeros((len(keep), max(width, data.shape[1])), dtype=np.uint8)
        padded[:, : data.shape[1]] = data
        values = np.ascontiguousarray(padded[:, :width]).view(move.dtype).reshape(-1)
        fr.regs[move.slot][dst_lanes] = values
    else:
        raise DecodeError("a call cannot return into an immediate")
