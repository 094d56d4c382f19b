"""The access pipeline every memory instruction goes through.

:func:`plan` resolves generic addresses to their state space by window, tells
the observers (one :class:`~gpusafe.cpu.events.MemoryEvent` per space; they
may suppress lanes), checks alignment and finds the bytes: a segment of the
global arena, the block's shared window, the thread's local stack, the kernel
parameters.  :func:`load` and :func:`store` move values through it.  A
suppressed load yields zero, a suppressed store or atomic does nothing (an
atomic returns zero).  Without an observer that suppresses it, a misaligned
access raises :class:`MisalignedAddress` and an access outside device memory
raises :class:`IllegalAddress`, as a GPU would fail the launch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusafe_instrument import nodes
from gpusafe_instrument.kinds import AccessKind

from .errors import IllegalAddress, MisalignedAddress
from .events import MemoryEvent
from .frames import Frame, as_index
from .memory import LOCAL_STACK_BASE, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE


def fail(fr: Frame, instr: nodes.Instruction, exc: type, what: str) -> None:
    """Fail the launch with ``exc``, naming the kernel and the PTX line."""
    raise exc(f"kernel {fr.launch.kernel}: PTX line {instr.line}: {what}")


def _split_generic(addrs: np.ndarray) -> list[tuple[str, np.ndarray | None, np.ndarray]]:
    """Split generic addresses by window: (space, positions or None, space addresses)."""
    lo = int(addrs.min())
    hi = int(addrs.max())
    for base, space in ((SHARED_WINDOW, "shared"), (LOCAL_WINDOW, "local"),
                        (PARAM_WINDOW, "param")):
        if base <= lo and hi < base + WINDOW_SIZE:
            return [(space, None, addrs - np.uint64(base))]
    if hi < SHARED_WINDOW or lo >= PARAM_WINDOW + WINDOW_SIZE:
        return [("global", None, addrs)]
    out = []
    rest = np.ones(len(addrs), dtype=bool)
    for base, space in ((SHARED_WINDOW, "shared"), (LOCAL_WINDOW, "local"),
                        (PARAM_WINDOW, "param")):
        inside = (addrs - np.uint64(base)) < np.uint64(WINDOW_SIZE)
        if inside.any():
            pos = np.flatnonzero(inside)
            out.append((space, pos, addrs[pos] - np.uint64(base)))
            rest &= ~inside
    if rest.any():
        pos = np.flatnonzero(rest)
        out.append(("global", pos, addrs[pos]))
    return out


class Part:
    """One group of lanes of an access: a buffer, byte offsets, and where the
    lanes sit in the instruction's active set (None: all of them)."""

    __slots__ = ("buffer", "offsets", "pos")

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray, pos: np.ndarray | None) -> None:
        self.buffer = buffer
        self.offsets = offsets
        self.pos = pos


def _compose(outer: np.ndarray | None, inner: np.ndarray | None) -> np.ndarray | None:
    if outer is None:
        return inner
    if inner is None:
        return outer
    return outer[inner]


def plan(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, space: str,
         addrs: np.ndarray, width: int, access: AccessKind, align: int = 0) -> list[Part]:
    """Resolve, report, check and locate an access of ``width`` bytes per lane,
    at addresses aligned to ``align`` (0: the width)."""
    align = align or width
    launch = fr.launch
    groups = _split_generic(addrs) if space == "generic" else [(space, None, addrs)]
    generic = space == "generic"
    parts: list[Part] = []
    for real, pos, saddr in groups:
        sub_act = act if pos is None else as_index(act, fr.n)[pos]
        if launch.watchers and real != "param":
            window = (launch.shared_window if real == "shared"
                      else fr.local_top if real == "local" else 0)
            event = MemoryEvent(
                space=real, access=access, width=width, addresses=saddr,
                lanes=fr.global_ids(sub_act), instruction=instr, kernel=launch.kernel,
                generic=(addrs if pos is None else addrs[pos]) if generic else None,
                window=window, window_base=LOCAL_STACK_BASE if real == "local" else 0,
                align=0 if align == width else align,
            )
            suppress = None
            for w in launch.watchers:
                m = w.memory_access(event)
                if m is not None:
                    suppress = m if suppress is None else (suppress | m)
            if suppress is not None and suppress.any():
                keep = np.flatnonzero(~suppress)
                if len(keep) == 0:
                    continue
                pos = keep if pos is None else pos[keep]
                saddr = saddr[keep]
                sub_act = as_index(act, fr.n)[pos]
        if align & (align - 1) == 0:
            misaligned = np.bitwise_and(saddr, np.uint64(align - 1)) if align > 1 else None
        else:
            misaligned = saddr % np.uint64(align)
        if misaligned is not None and misaligned.any():
            bad = int(saddr[np.flatnonzero(misaligned)[0]])
            fail(fr, instr, MisalignedAddress,
                 f"{access} of {width} bytes at misaligned {real} address {bad:#x}"
                 + (f" (it needs {align}-byte alignment)" if align != width else ""))
        parts.extend(locate(fr, instr, real, saddr, width, sub_act, pos, access))
    return parts


def locate(fr: Frame, instr: nodes.Instruction, space: str, saddr: np.ndarray, width: int,
           sub_act: Any, pos: np.ndarray | None, access: AccessKind) -> list[Part]:
    chunk = fr.chunk
    if space in ("global", "const"):
        try:
            segs = fr.launch.memory.segments(saddr, width)
        except IllegalAddress as e:
            bad = e.args[0] if e.args and isinstance(e.args[0], int) else 0
            why = e.args[1] if len(e.args) > 1 else "not device memory"
            fail(fr, instr, IllegalAddress, f"{access} of {width} bytes at {bad:#x}: {why}")
        return [Part(buf, offs, _compose(pos, lanes)) for buf, offs, lanes in segs]
    if space == "shared":
        stride = chunk.shared_stride
        over = saddr > np.uint64(stride - width)
        if over.any():
            bad = int(saddr[np.flatnonzero(over)[0]])
            fail(fr, instr, IllegalAddress,
                 f"{access} of {width} bytes at shared offset {bad:#x}: outside the block's "
                  f"shared memory ({fr.launch.shared_window} bytes)")
        rows = fr.per_lane("@block_row", chunk.block_row)[sub_act]
        return [Part(chunk.shared, rows * stride + saddr.view(np.int64), pos)]
    if space == "local":
        stride = chunk.local_stride
        saddr = saddr - np.uint64(LOCAL_STACK_BASE)  # wraps below the stack: caught next
        over = saddr > np.uint64(stride - width)
        if over.any():
            bad = int(saddr[np.flatnonzero(over)[0]])
            fail(fr, instr, IllegalAddress,
                 f"{access} of {width} bytes at local address "
                  f"{(bad + LOCAL_STACK_BASE) & 0xFFFF_FFFF_FFFF_FFFF:#x}: outside the thread's "
                  f"local memory")
        lanes = fr.chunk_lanes(sub_act)
        return [Part(chunk.local, lanes * stride + saddr.view(np.int64), pos)]
    # kernel parameters through a generic pointer (cvta.param): read-only
    if access != AccessKind.READ:
        fail(fr, instr, IllegalAddress, f"{access} to kernel parameter memory")
    kp = fr.launch.kparams
    over = saddr > np.uint64(len(kp) - width)
    if over.any():
        fail(fr, instr, IllegalAddress,
             f"read of {width} bytes past the kernel parameters at offset {int(saddr.max())}")
    return [Part(kp, saddr.view(np.int64), pos)]


_SHIFT = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}


def _gather(buf: np.ndarray, offsets: np.ndarray, dtype: np.dtype, count: int) -> np.ndarray:
    size = dtype.itemsize
    if len(buf) % size:
        buf = buf[: len(buf) - len(buf) % size]
    view = buf.view(dtype)
    idx = offsets >> _SHIFT[size] if size > 1 else offsets
    if count == 1:
        return view[idx]
    return view[idx[:, None] + np.arange(count)]


def _scatter(buf: np.ndarray, offsets: np.ndarray, dtype: np.dtype, values: np.ndarray) -> None:
    size = dtype.itemsize
    view = buf.view(dtype)
    idx = offsets >> _SHIFT[size] if size > 1 else offsets
    if values.ndim == 1:
        view[idx] = values
    else:
        view[idx[:, None] + np.arange(values.shape[1])] = values


def load(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, space: str,
         addrs: np.ndarray, dtype: np.dtype, count: int, align: int = 0) -> np.ndarray:
    parts = plan(fr, instr, act, nact, space, addrs, dtype.itemsize * count, AccessKind.READ,
                 align)
    if len(parts) == 1 and parts[0].pos is None:
        p = parts[0]
        return _gather(p.buffer, p.offsets, dtype, count)
    out = np.zeros((nact,) if count == 1 else (nact, count), dtype=dtype)
    for p in parts:
        out[p.pos] = _gather(p.buffer, p.offsets, dtype, count)
    return out


def store(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, space: str,
          addrs: np.ndarray, dtype: np.dtype, values: np.ndarray, align: int = 0) -> None:
    count = 1 if values.ndim == 1 else values.shape[1]
    parts = plan(fr, instr, act, nact, space, addrs, dtype.itemsize * count, AccessKind.WRITE,
                 align)
    for p in parts:
        v = values if p.pos is None else values[p.pos]
        _scatter(p.buffer, p.offsets, dtype, v)
