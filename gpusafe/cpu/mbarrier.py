"""``mbarrier`` objects (sm_80+ split-phase barriers in shared memory), as used
by ``cuda::barrier`` and ``cuda::memcpy_async``, and ``cp.async.mbarrier.arrive``.

The 64-bit object holds the pending arrival count of the current phase, the
expected count, the pending transaction count and the phase parity.  The
layout is the CPU device's own (programs treat the object as opaque):

    bits  0..19  pending arrivals      bits 40..62  pending transaction bytes
    bits 20..39  expected arrivals     bit  63      phase parity

``arrive`` returns the object as it was (the *state token*); ``test_wait`` and
``try_wait`` are true once the phase of the token has completed.  Updates by
many lanes at once apply in lane order, like atomics.  Waiting is the
program's own loop around ``test_wait``; the scheduler's spin yield lets the
lanes it waits for run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusafe_instrument import nodes
from gpusafe_instrument.kinds import AccessKind

from .access import load, plan, store
from .atomics import atomic_update
from .decoded import DecodeError, Op
from .decoder import DecodeContext, guard_simple
from .frames import Frame
from .operands import const_reader

_U = np.uint64
_COUNT = _U((1 << 20) - 1)
_TX = _U((1 << 23) - 1)
_EXPECTED_SHIFT = _U(20)
_TX_SHIFT = _U(40)
_PHASE_SHIFT = _U(63)

_SPACES = {"shared": "shared", "shared::cta": "shared", "shared::cluster": "shared"}
_IGNORED = {"b64", "release", "acquire", "relaxed", "cta", "cluster", "noComplete", "sync",
            "aligned"}


def _fields(state: np.ndarray) -> tuple[np.ndarray, ...]:
    return (state & _COUNT, (state >> _EXPECTED_SHIFT) & _COUNT, (state >> _TX_SHIFT) & _TX,
            state >> _PHASE_SHIFT)


def _pack(pending: np.ndarray, expected: np.ndarray, tx: np.ndarray,
          phase: np.ndarray) -> np.ndarray:
    return ((pending & _COUNT) | ((expected & _COUNT) << _EXPECTED_SHIFT)
            | ((tx & _TX) << _TX_SHIFT) | ((phase & _U(1)) << _PHASE_SHIFT))


def _complete(pending: np.ndarray, expected: np.ndarray, tx: np.ndarray,
              phase: np.ndarray) -> np.ndarray:
    done = (pending == 0) & (tx == 0)
    return _pack(np.where(done, expected, pending), expected, tx,
                 np.where(done, phase ^ _U(1), phase))


def _arrive_update(drop: bool) -> Any:
    def update(old: np.ndarray, count: np.ndarray, tx_add: np.ndarray) -> np.ndarray:
        pending, expected, tx, phase = _fields(old)
        tx = (tx + tx_add) & _TX
        pending = (pending - count) & _COUNT
        if drop:
            expected = (expected - count) & _COUNT
        return _complete(pending, expected, tx, phase)
    return update


def _tx_update(sign: int) -> Any:
    def update(old: np.ndarray, amount: np.ndarray) -> np.ndarray:
        pending, expected, tx, phase = _fields(old)
        tx = (tx + amount) & _TX if sign > 0 else (tx - amount) & _TX
        return _complete(pending, expected, tx, phase)
    return update


def _address(ctx: DecodeContext, instr: nodes.Instruction,
             operand: nodes.Operand) -> tuple[str, Any]:
    space = "generic"
    for m in instr.modifiers[1:]:
        if m in _SPACES:
            space = _SPACES[m]
    return space, ctx.address(operand, generic=space == "generic")


def _rmw(ctx: DecodeContext, instr: nodes.Instruction, space: str, addr: Any, update: Any,
         sources: list, write: Any) -> Op:
    def run(fr: Frame, act: Any, nact: int) -> None:
        args = [s(fr, act, nact) for s in sources]
        old = apply(fr, instr, act, nact, space, addr(fr, act, nact), update, args)
        if write is not None:
            write(fr, act, old)

    return guard_simple(ctx, instr, Op(True, run, instr))


def apply(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, space: str,
          addrs: np.ndarray, update: Any, args: list[np.ndarray]) -> np.ndarray:
    """Update the mbarrier objects at ``addrs`` atomically, in lane order; the
    objects as they were (the state tokens)."""
    dtype = np.dtype(np.uint64)
    args = [np.ascontiguousarray(a, dtype=dtype) for a in args]
    parts = plan(fr, instr, act, nact, space, addrs, 8, AccessKind.ATOMIC)
    old = np.zeros(nact, dtype=dtype)
    for p in parts:
        sub = args if p.pos is None else [a[p.pos] for a in args]
        o = atomic_update(p.buffer.view(dtype), p.offsets >> 3, sub, update, None)
        if p.pos is None:
            old = o
        else:
            old[p.pos] = o
    return old


def complete_tx() -> Any:
    """The update of ``mbarrier.complete_tx``: what a bulk copy does on its end."""
    return _tx_update(-1)


def build_mbarrier(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    if not mods:
        raise DecodeError("mbarrier needs an operation")
    op = mods[0]
    for m in mods[1:]:
        if m not in _SPACES and m not in _IGNORED and m != "parity" and m != "expect_tx":
            raise DecodeError(f"modifier .{m}")
    ops = list(instr.operands)
    zero = const_reader(np.array(0, dtype=np.uint64))
    one = const_reader(np.array(1, dtype=np.uint64))
    if op == "init":
        space, addr = _address(ctx, instr, ops[0])
        count = ctx.reader(ops[1], "u32")

        def init(fr: Frame, act: Any, nact: int) -> None:
            n = count(fr, act, nact).astype(np.uint64)
            state = _pack(n, n, np.zeros(nact, np.uint64), np.zeros(nact, np.uint64))
            _store(fr, instr, act, nact, space, addr(fr, act, nact), state)

        return guard_simple(ctx, instr, Op(True, init, instr))
    if op == "inval":
        space, addr = _address(ctx, instr, ops[0])

        def inval(fr: Frame, act: Any, nact: int) -> None:
            _store(fr, instr, act, nact, space, addr(fr, act, nact), np.zeros(nact, np.uint64))

        return guard_simple(ctx, instr, Op(True, inval, instr))
    if op in ("arrive", "arrive_drop"):
        expect_tx = "expect_tx" in mods
        space, addr = _address(ctx, instr, ops[1])
        write = ctx.writer(ops[0], "b64")
        count = one
        tx = zero
        if expect_tx:
            if len(ops) != 3:
                raise DecodeError("arrive.expect_tx needs a transaction count")
            tx = ctx.reader(ops[2], "u32")
        elif len(ops) == 3:
            count = ctx.reader(ops[2], "u32")
        update = _arrive_update(op == "arrive_drop")
        return _rmw(ctx, instr, space, addr, update, [count, tx], write)
    if op in ("expect_tx", "complete_tx"):
        space, addr = _address(ctx, instr, ops[0])
        amount = ctx.reader(ops[1], "u32")
        return _rmw(ctx, instr, space, addr, _tx_update(1 if op == "expect_tx" else -1),
                    [amount], None)
    if op in ("test_wait", "try_wait"):
        parity = "parity" in mods
        space, addr = _address(ctx, instr, ops[1])
        write = ctx.writer(ops[0], "pred")
        token = ctx.reader(ops[2], "u32" if parity else "b64")

        def wait(fr: Frame, act: Any, nact: int) -> None:
            state = load(fr, instr, act, nact, space, addr(fr, act, nact), np.dtype(np.uint64), 1)
            phase = state >> _PHASE_SHIFT
            t = token(fr, act, nact).astype(np.uint64)
            waited = t & _U(1) if parity else t >> _PHASE_SHIFT
            write(fr, act, phase != waited)

        return guard_simple(ctx, instr, Op(True, wait, instr))
    if op == "pending_count":
        write = ctx.writer(ops[0], "u32")
        token = ctx.reader(ops[1], "b64")

        def pending(fr: Frame, act: Any, nact: int) -> None:
            write(fr, act, (token(fr, act, nact) & _COUNT).astype(np.uint32))

        return guard_simple(ctx, instr, Op(True, pending, instr))
    raise DecodeError(f"mbarrier.{op}")


def build_cp_async_mbarrier_arrive(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """``cp.async.mbarrier.arrive[.noinc]``: our copies are already complete, so
    the arrive is immediate; without ``.noinc`` it is preceded by an increment
    of the pending count, which cancels it."""
    mods = instr.modifiers
    space, addr = _address(ctx, instr, instr.operands[0])
    if "noinc" not in mods:
        def nothing(fr: Frame, act: Any, nact: int) -> None:
            pass

        return guard_simple(ctx, instr, Op(True, nothing, instr))
    one = const_reader(np.array(1, dtype=np.uint64))
    zero = const_reader(np.array(0, dtype=np.uint64))
    return _rmw(ctx, instr, space, addr, _arrive_update(False), [one, zero], None)


def _store(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, space: str,
           addrs: np.ndarray, values: np.ndarray) -> None:
    store(fr, instr, act, nact, space, addrs, np.dtype(np.uint64), values)
