"""Memory instructions: ld, ldu, st, atom, red, cvta, isspacep, cp.async.

What a load, store or atomic accesses (state space, access kind, bytes per
lane, address operand) is :func:`gpusafe_instrument.query.memory_access`'s answer,
the same the instrumenter checks; this module adds only what executing needs
(the element type and vector length that make up the width, the atomic
operation, a cache-policy operand) and refuses any modifier whose meaning it
does not know.  Every access then goes through the access pipeline
(:mod:`gpusafe.cpu.access`); ``.param`` accesses of the frame's own
parameters are served directly and produce no events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpusafe_instrument import nodes
from gpusafe_instrument.kinds import AccessKind
from gpusafe_instrument.query import (
    STATE_SPACES,
    MemoryAccess,
    Unsupported,
    instruction_accesses,
    memory_access,
)

from .access import fail, load, plan, store
from .atomics import ATOMIC_OPS, atomic_update, update_fn
from .decoded import FRAME_PARAM_FLAG, DecodeError, Op
from .decoder import DecodeContext, guard_simple
from .errors import IllegalAddress
from .frames import Frame, as_index, lanes_by_size
from .memory import LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .ptx_types import UNSIGNED, dtype_of

_QUALIFIERS = {
    "weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "seq_cst", "mmio", "sys",
    "gpu", "cta", "cluster", "nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "unified",
    "noftz", "sync", "aligned",
}
"""Modifiers that order or cache an access without changing what it moves."""


def _space_of(modifier: str) -> str | None:
    """The state space a modifier names (``shared::cta`` is shared), else None."""
    base = modifier.split("::", 1)[0]
    return base if base in STATE_SPACES and base != "generic" else None


@dataclass(frozen=True)
class _Anatomy:
    """A load, store or atomic as executing it needs it."""

    access: MemoryAccess  # space, access kind, width, address operand
    type: str  # element type
    count: int  # elements per lane (vector length)
    op: str | None  # atomic operation
    hint: bool  # a trailing cache-policy operand (.L2::cache_hint)

    @property
    def space(self) -> str:
        return self.access.space


def _anatomy(instr: nodes.Instruction, atomic_ops: frozenset[str] = frozenset()) -> _Anatomy:
    access = memory_access(instr)
    if access is None:
        raise DecodeError("not a load, store or atomic the CPU device knows")
    type_ = None
    op = None
    hint = False
    for m in instr.modifiers:
        if m in nodes.SCALAR_SIZES and m != "pred":
            type_ = m
        elif m in atomic_ops:
            op = m
        elif m == "L2::cache_hint":
            hint = True
        elif (m in nodes.VECTOR_WIDTHS or _space_of(m) is not None or m in _QUALIFIERS
              or m.startswith(("L1::", "L2::", "level::"))):
            continue
        else:
            raise DecodeError(f"modifier .{m}")
    if type_ is None:
        raise DecodeError("no type")
    if type_ == "b128":
        raise DecodeError(".b128 accesses")
    return _Anatomy(access, type_, access.width // nodes.SCALAR_SIZES[type_], op, hint)


# ---------------------------------------------------------------------------
# ld / st


def _value_readers(ctx: DecodeContext, operand: nodes.Operand, type_: str, vec: int) -> Any:
    if vec == 1:
        if isinstance(operand, nodes.Vector):
            raise DecodeError("vector operand for a scalar access")
        return ctx.reader(operand, type_)
    if not isinstance(operand, nodes.Vector) or len(operand.items) != vec:
        raise DecodeError(f"expected a {vec}-element vector operand")
    return [ctx.reader(item, type_) for item in operand.items]


def _value_writers(ctx: DecodeContext, operand: nodes.Operand, type_: str, vec: int) -> Any:
    if vec == 1:
        if isinstance(operand, nodes.Vector):
            raise DecodeError("vector operand for a scalar access")
        return ctx.writer(operand, type_)
    if not isinstance(operand, nodes.Vector) or len(operand.items) != vec:
        raise DecodeError(f"expected a {vec}-element vector operand")
    return [ctx.writer(item, type_) for item in operand.items]


def _param_binding(ctx: DecodeContext, address: nodes.Address) -> Any:
    if isinstance(address.base, nodes.Symbol):
        b = ctx.lookup(address.base.name)
        if b.kind in ("kparam", "param"):
            return b
    return None


def build_ld(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    a = _anatomy(instr)
    space, type_, count, address = a.space, a.type, a.count, a.access.address
    ops = instr.operands
    if len(ops) != 2 + a.hint:
        raise DecodeError("ld takes a destination and an address")
    dtype = dtype_of(type_)
    write = _value_writers(ctx, ops[0], type_, count)

    def deliver(fr: Frame, act: Any, values: np.ndarray) -> None:
        if count == 1:
            write(fr, act, values)
        else:
            for i, w in enumerate(write):
                w(fr, act, values[:, i])

    if space == "param":
        b = _param_binding(ctx, address)
        offset = address.offset
        if b is not None and b.kind == "kparam":
            start = b.offset + offset

            def ld_kparam(fr: Frame, act: Any, nact: int) -> None:
                v = np.frombuffer(fr.launch.kparams, dtype=dtype, count=count, offset=start)
                if count == 1:
                    deliver(fr, act, np.broadcast_to(v[0], (nact,)))
                else:
                    deliver(fr, act, np.broadcast_to(v, (nact, count)))

            return guard_simple(ctx, instr, Op(True, ld_kparam, instr))
        if b is not None:
            start = b.offset + offset
            width = dtype.itemsize * count

            def ld_param(fr: Frame, act: Any, nact: int) -> None:
                raw = np.ascontiguousarray(fr.params[act, start:start + width])
                v = raw.view(dtype)
                deliver(fr, act, v.reshape(nact) if count == 1 else v.reshape(nact, count))

            return guard_simple(ctx, instr, Op(True, ld_param, instr))
        addr = ctx.address(address, generic=False)

        def ld_param_any(fr: Frame, act: Any, nact: int) -> None:
            deliver(fr, act, _param_read(fr, instr, act, nact, addr(fr, act, nact), dtype, count))

        return guard_simple(ctx, instr, Op(True, ld_param_any, instr))

    addr = ctx.address(address, generic=space == "generic")

    def ld(fr: Frame, act: Any, nact: int) -> None:
        deliver(fr, act, load(fr, instr, act, nact, space, addr(fr, act, nact), dtype, count))

    return guard_simple(ctx, instr, Op(True, ld, instr))


def _param_read(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, addrs: np.ndarray,
                dtype: np.dtype, count: int) -> np.ndarray:
    flag = np.uint64(FRAME_PARAM_FLAG)
    own = (addrs & flag) != 0
    width = dtype.itemsize * count
    out = np.zeros((nact, width), dtype=np.uint8)
    idx = as_index(act, fr.n)
    cols = np.arange(width)
    if own.any():
        offs = (addrs[own] & ~flag).astype(np.int64)
        if fr.params is None or (offs + width > fr.params.shape[1]).any():
            fail(fr, instr, IllegalAddress, "read outside the frame's parameters")
        out[own] = fr.params[idx[own][:, None], offs[:, None] + cols]
    if (~own).any():
        offs = addrs[~own].astype(np.int64)
        kp = fr.launch.kparams
        if (offs + width > len(kp)).any():
            fail(fr, instr, IllegalAddress, "read outside the kernel parameters")
        out[~own] = kp[offs[:, None] + cols]
    v = out.view(dtype)
    return v.reshape(nact) if count == 1 else v.reshape(nact, count)


def build_st(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    a = _anatomy(instr)
    space, type_, count, address = a.space, a.type, a.count, a.access.address
    ops = instr.operands
    if len(ops) != 2 + a.hint:
        raise DecodeError("st takes an address and a value")
    dtype = dtype_of(type_)
    read = _value_readers(ctx, ops[1], type_, count)

    def values(fr: Frame, act: Any, nact: int) -> np.ndarray:
        if count == 1:
            return np.asarray(read(fr, act, nact), dtype=dtype)
        out = np.empty((nact, count), dtype=dtype)
        for i, r in enumerate(read):
            out[:, i] = r(fr, act, nact)
        return out

    if space == "param":
        b = _param_binding(ctx, address)
        if b is None or b.kind != "param":
            raise DecodeError("st.param to something other than a call parameter")
        start = b.offset + address.offset
        width = dtype.itemsize * count

        def st_param(fr: Frame, act: Any, nact: int) -> None:
            v = np.ascontiguousarray(values(fr, act, nact), dtype=dtype)
            fr.params[act, start:start + width] = v.view(np.uint8).reshape(nact, width)

        return guard_simple(ctx, instr, Op(True, st_param, instr))

    addr = ctx.address(address, generic=space == "generic")

    def st(fr: Frame, act: Any, nact: int) -> None:
        store(fr, instr, act, nact, space, addr(fr, act, nact), dtype, values(fr, act, nact))

    return guard_simple(ctx, instr, Op(True, st, instr))


# ---------------------------------------------------------------------------
# atomics


def build_atom(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    is_red = instr.op == "red"
    a = _anatomy(instr, ATOMIC_OPS)
    space, type_, op, hint = a.space, a.type, a.op, a.hint
    if op is None:
        raise DecodeError("no atomic operation")
    if a.count != 1:
        raise DecodeError("vector atomics")
    if space not in ("generic", "global", "shared"):
        raise DecodeError(f"atomics on .{space}")
    ops = list(instr.operands)
    if hint:
        ops = ops[:-1]
    nsrc = 2 if op == "cas" else 1
    expect = (1 if not is_red else 0) + 1 + nsrc
    if len(ops) != expect:
        raise DecodeError(f"expected {expect} operands")
    write = None
    if not is_red:
        write = ctx.writer(ops[0], type_)
        ops = ops[1:]
    addr = ctx.address(a.access.address, generic=space == "generic")
    srcs = [ctx.reader(o, type_) for o in ops[1:]]
    dtype = dtype_of(type_)
    update, accumulate = update_fn(op, type_)

    def run(fr: Frame, act: Any, nact: int) -> None:
        addrs = addr(fr, act, nact)
        args = [np.ascontiguousarray(r(fr, act, nact), dtype=dtype) for r in srcs]
        parts = plan(fr, instr, act, nact, space, addrs, dtype.itemsize, AccessKind.ATOMIC)
        old = np.zeros(nact, dtype=dtype)
        for p in parts:
            view = p.buffer.view(dtype)
            idx = p.offsets // dtype.itemsize
            sub_args = args if p.pos is None else [a[p.pos] for a in args]
            o = atomic_update(view, idx, sub_args, update, accumulate)
            if p.pos is None:
                old = o
            else:
                old[p.pos] = o
        if write is not None:
            write(fr, act, old)

    return guard_simple(ctx, instr, Op(True, run, instr))


# ---------------------------------------------------------------------------
# address conversion


_WINDOWS = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "param": PARAM_WINDOW,
            "global": 0, "const": 0}


def build_cvta(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    to = "to" in mods
    space = next((_space_of(m) for m in mods if _space_of(m) is not None), None)
    size = next((m for m in mods if m in ("u32", "u64", "b32", "b64")), None)
    if space is None or size is None or len(instr.operands) != 2:
        raise DecodeError("cvta needs a state space, a size and two operands")
    base = np.uint64(_WINDOWS[space])
    dst_type = "u" + size[1:]
    src = ctx.reader(instr.operands[1], "u64")
    write = ctx.writer(instr.operands[0], dst_type)
    mask = np.uint64((1 << (8 * dtype_of(dst_type).itemsize)) - 1)
    out_dtype = UNSIGNED[dtype_of(dst_type).itemsize]

    def run(fr: Frame, act: Any, nact: int) -> None:
        a = src(fr, act, nact)
        r = a - base if to else a + base
        write(fr, act, (r & mask).astype(out_dtype))

    return guard_simple(ctx, instr, Op(True, run, instr))


def build_isspacep(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    space = next((_space_of(m) for m in mods if _space_of(m) is not None), None)
    if space is None or len(instr.operands) != 2:
        raise DecodeError("isspacep needs a state space and two operands")
    src = ctx.reader(instr.operands[1], "u64")
    write = ctx.writer(instr.operands[0], "pred")
    win = np.uint64(WINDOW_SIZE)

    def inside(a: np.ndarray, base: int) -> np.ndarray:
        return (a - np.uint64(base)) < win

    def run(fr: Frame, act: Any, nact: int) -> None:
        a = src(fr, act, nact)
        if space == "const":
            r = np.zeros(nact, dtype=bool)
        elif space == "global":
            r = ~(inside(a, SHARED_WINDOW) | inside(a, LOCAL_WINDOW) | inside(a, PARAM_WINDOW))
        else:
            r = inside(a, _WINDOWS[space])
        write(fr, act, r)

    return guard_simple(ctx, instr, Op(True, run, instr))


def build_cp_async(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """``cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size |
    ignore-src}``: done at once (``cp.async.mbarrier.arrive`` is
    :mod:`gpusafe.cpu.mbarrier`'s).  What it reads is the query layer's answer
    (:func:`gpusafe_instrument.query.instruction_accesses`), the one the instrumenter
    checks: with a src-size only that many bytes are read, none with the
    ignore-src predicate true; the rest of the cp-size destination is zeros."""
    mods = instr.modifiers  # ("async", ...)
    if len(mods) > 1 and mods[1] in ("commit_group", "wait_group", "wait_all"):
        def nothing(fr: Frame, act: Any, nact: int) -> None:
            pass

        return Op(True, nothing, instr)
    try:
        accesses = instruction_accesses(instr, None, _predicate_types(ctx, instr))
    except Unsupported as e:
        raise DecodeError(str(e)) from None
    dst_access, src_access = accesses[0], (accesses[1] if len(accesses) > 1 else None)
    cp_size = dst_access.width
    dst = ctx.address(dst_access.address, generic=False)
    count = cp_size // 4
    elem = np.dtype(np.uint32)
    u8 = np.dtype(np.uint8)
    if src_access is None:  # src-size 0: nothing is read
        def zeros(fr: Frame, act: Any, nact: int) -> None:
            store(fr, instr, act, nact, "shared", dst(fr, act, nact), elem,
                  np.zeros((nact, count), dtype=elem))

        return guard_simple(ctx, instr, Op(True, zeros, instr))
    src = ctx.address(src_access.address, generic=False)
    width = src_access.width
    size = ctx.reader(src_access.size, "u32") if src_access.size is not None else None
    ignored = (ctx.reader(src_access.ignored_when, "pred")
               if src_access.ignored_when is not None else None)

    def run(fr: Frame, act: Any, nact: int) -> None:
        s = src(fr, act, nact)
        d = dst(fr, act, nact)
        if size is None and ignored is None:
            if width % 4 == 0:
                words = load(fr, instr, act, nact, "global", s, elem, width // 4, cp_size)
                data = np.ascontiguousarray(words).view(u8).reshape(nact, width)
            else:
                data = load(fr, instr, act, nact, "global", s, u8, width, cp_size)
                data = data.reshape(nact, width)
        else:
            n = np.full(nact, width, dtype=np.int64)
            if size is not None:
                n = np.minimum(size(fr, act, nact).astype(np.int64), cp_size)
            if ignored is not None:
                n[ignored(fr, act, nact)] = 0
            data = np.zeros((nact, width), dtype=u8)
            for v, lanes, sub_act in lanes_by_size(n, act):
                got = load(fr, instr, sub_act, len(lanes), "global", s[lanes], u8, v, cp_size)
                data[lanes, :v] = got.reshape(len(lanes), v)
        if width < cp_size:
            data = np.concatenate([data, np.zeros((nact, cp_size - width), u8)], axis=1)
        store(fr, instr, act, nact, "shared", d, elem,
              np.ascontiguousarray(data).view(elem).reshape(nact, count))

    return guard_simple(ctx, instr, Op(True, run, instr))


def _predicate_types(ctx: DecodeContext, instr: nodes.Instruction) -> dict[str, str]:
    """The ``.pred`` registers among ``instr``'s operands: what tells cp.async's
    ignore-src predicate from a src-size register."""
    out = {}
    for operand in instr.operands:
        reg = operand.operand if isinstance(operand, nodes.Negated) else operand
        if isinstance(reg, nodes.Register):
            try:
                b = ctx.lookup(reg.name)
            except DecodeError:
                continue
            if b.kind == "reg" and b.dtype == np.bool_:
                out[reg.name] = ".pred"
    return out
