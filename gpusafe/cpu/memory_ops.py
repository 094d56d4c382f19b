"""Memory instructions: ld, ldu, st, atom, red, cvta, isspacep, cp.async.

Every access goes through :func:`_plan`: generic addresses are resolved to
their state space by window, the observers see one
:class:`~gpusafe.cpu.events.MemoryEvent` per space and may suppress lanes,
alignment is checked, and the bytes are found (a segment of the global arena,
the block's shared window, the thread's local stack).  A suppressed load
yields zero, a suppressed store or atomic does nothing (an atomic returns
zero).  Without an observer that suppresses it, a misaligned access raises
:class:`MisalignedAddress` and an access outside device memory raises
:class:`IllegalAddress`, as a GPU would fail the launch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from instrument import nodes
from instrument.kinds import AccessKind

from .decoder import FRAME_PARAM_FLAG, DecodeContext, DecodeError, Op, guard_simple
from .errors import IllegalAddress, MisalignedAddress
from .events import MemoryEvent
from .memory import LOCAL_STACK_BASE, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .operands import ALL, UNSIGNED, as_index, dtype_of

if TYPE_CHECKING:
    from .executor import Frame

_SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared",
           "shared::cluster": "shared", "local": "local", "const": "const", "param": "param",
           "param::entry": "param", "param::func": "param"}
_VECTORS = {"v2": 2, "v4": 4, "v8": 8}
_QUALIFIERS = {
    "weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "seq_cst", "mmio", "sys",
    "gpu", "cta", "cluster", "nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "unified",
    "noftz", "sync", "aligned",
}
_TYPES = {"b8", "u8", "s8", "b16", "u16", "s16", "f16", "bf16", "b32", "u32", "s32", "f32",
          "f16x2", "bf16x2", "b64", "u64", "s64", "f64", "e4m3x2", "e5m2x2", "b128"}


def _parse(instr: nodes.Instruction, ops: set[str] = frozenset()) -> tuple[str, int, str, str | None, bool]:
    """(space, vector length, type, atomic op, has cache-policy operand) of an opcode."""
    space = "generic"
    vec = 1
    type_ = None
    op = None
    hint = False
    for m in instr.modifiers:
        if m in _SPACES:
            space = _SPACES[m]
        elif m in _VECTORS:
            vec = _VECTORS[m]
        elif m in _TYPES:
            type_ = m
        elif m in ops:
            op = m
        elif m == "L2::cache_hint":
            hint = True
        elif m in _QUALIFIERS or m.startswith(("L1::", "L2::", "level::")):
            continue
        else:
            raise DecodeError(f"modifier .{m}")
    if type_ is None:
        raise DecodeError("no type")
    if type_ == "b128":
        raise DecodeError(".b128 accesses")
    return space, vec, type_, op, hint


# ---------------------------------------------------------------------------
# the access pipeline


def _fail(fr: Frame, instr: nodes.Instruction, exc: type, what: str) -> None:
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


class _Part:
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


def _plan(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, space: str,
          addrs: np.ndarray, width: int, access: AccessKind) -> list[_Part]:
    """Resolve, report, check and locate an access of ``width`` bytes per lane."""
    launch = fr.launch
    groups = _split_generic(addrs) if space == "generic" else [(space, None, addrs)]
    generic = space == "generic"
    parts: list[_Part] = []
    for real, pos, saddr in groups:
        sub_act = act if pos is None else as_index(act, fr.n)[pos]
        if launch.watchers and real != "param":
            window = launch.shared_window if real == "shared" else fr.local_top if real == "local" else 0
            event = MemoryEvent(
                space=real, access=access, width=width, addresses=saddr,
                lanes=fr.global_ids(sub_act), instruction=instr, kernel=launch.kernel,
                generic=(addrs if pos is None else addrs[pos]) if generic else None,
                window=window, window_base=LOCAL_STACK_BASE if real == "local" else 0,
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
        if width & (width - 1) == 0:
            misaligned = np.bitwise_and(saddr, np.uint64(width - 1)) if width > 1 else None
        else:
            misaligned = saddr % np.uint64(width)
        if misaligned is not None and misaligned.any():
            bad = int(saddr[np.flatnonzero(misaligned)[0]])
            _fail(fr, instr, MisalignedAddress,
                  f"{access} of {width} bytes at misaligned {real} address {bad:#x}")
        parts.extend(_locate(fr, instr, real, saddr, width, sub_act, pos, access))
    return parts


def _locate(fr: Frame, instr: nodes.Instruction, space: str, saddr: np.ndarray, width: int,
            sub_act: Any, pos: np.ndarray | None, access: AccessKind) -> list[_Part]:
    chunk = fr.chunk
    if space in ("global", "const"):
        try:
            segs = fr.launch.memory.segments(saddr, width)
        except IllegalAddress as e:
            bad = e.args[0] if e.args and isinstance(e.args[0], int) else 0
            _fail(fr, instr, IllegalAddress,
                  f"{access} of {width} bytes at {bad:#x}: not device memory")
        return [_Part(buf, offs, _compose(pos, lanes)) for buf, offs, lanes in segs]
    if space == "shared":
        stride = chunk.shared_stride
        over = saddr > np.uint64(stride - width)
        if over.any():
            bad = int(saddr[np.flatnonzero(over)[0]])
            _fail(fr, instr, IllegalAddress,
                  f"{access} of {width} bytes at shared offset {bad:#x}: outside the block's "
                  f"shared memory ({fr.launch.shared_window} bytes)")
        rows = fr.per_lane("@block_row", chunk.block_row)[sub_act]
        return [_Part(chunk.shared, rows * stride + saddr.view(np.int64), pos)]
    if space == "local":
        stride = chunk.local_stride
        saddr = saddr - np.uint64(LOCAL_STACK_BASE)  # wraps below the stack: caught next
        over = saddr > np.uint64(stride - width)
        if over.any():
            bad = int(saddr[np.flatnonzero(over)[0]])
            _fail(fr, instr, IllegalAddress,
                  f"{access} of {width} bytes at local address "
                  f"{(bad + LOCAL_STACK_BASE) & 0xFFFF_FFFF_FFFF_FFFF:#x}: outside the thread's "
                  f"local memory")
        lanes = fr.chunk_lanes(sub_act)
        return [_Part(chunk.local, lanes * stride + saddr.view(np.int64), pos)]
    # kernel parameters through a generic pointer (cvta.param): read-only
    if access != AccessKind.READ:
        _fail(fr, instr, IllegalAddress, f"{access} to kernel parameter memory")
    kp = fr.launch.kparams
    over = saddr > np.uint64(len(kp) - width)
    if over.any():
        _fail(fr, instr, IllegalAddress,
              f"read of {width} bytes past the kernel parameters at offset {int(saddr.max())}")
    return [_Part(kp, saddr.view(np.int64), pos)]


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
         addrs: np.ndarray, dtype: np.dtype, count: int) -> np.ndarray:
    parts = _plan(fr, instr, act, nact, space, addrs, dtype.itemsize * count, AccessKind.READ)
    if len(parts) == 1 and parts[0].pos is None:
        p = parts[0]
        return _gather(p.buffer, p.offsets, dtype, count)
    out = np.zeros((nact,) if count == 1 else (nact, count), dtype=dtype)
    for p in parts:
        out[p.pos] = _gather(p.buffer, p.offsets, dtype, count)
    return out


def store(fr: Frame, instr: nodes.Instruction, act: Any, nact: int, space: str,
          addrs: np.ndarray, dtype: np.dtype, values: np.ndarray) -> None:
    count = 1 if values.ndim == 1 else values.shape[1]
    parts = _plan(fr, instr, act, nact, space, addrs, dtype.itemsize * count, AccessKind.WRITE)
    for p in parts:
        v = values if p.pos is None else values[p.pos]
        _scatter(p.buffer, p.offsets, dtype, v)


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


def _param_binding(ctx: DecodeContext, address: nodes.Operand) -> Any:
    if isinstance(address, nodes.Address) and isinstance(address.base, nodes.Symbol):
        b = ctx.lookup(address.base.name)
        if b.kind in ("kparam", "param"):
            return b
    return None


def build_ld(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    space, vec, type_, _, hint = _parse(instr)
    ops = instr.operands
    if len(ops) != 2 + hint:
        raise DecodeError("ld takes a destination and an address")
    dtype = dtype_of(type_)
    write = _value_writers(ctx, ops[0], type_, vec)
    count = vec

    def deliver(fr: Frame, act: Any, values: np.ndarray) -> None:
        if count == 1:
            write(fr, act, values)
        else:
            for i, w in enumerate(write):
                w(fr, act, values[:, i])

    if space == "param":
        b = _param_binding(ctx, ops[1])
        offset = ops[1].offset if isinstance(ops[1], nodes.Address) else 0
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
        addr = ctx.address(ops[1], generic=False)

        def ld_param_any(fr: Frame, act: Any, nact: int) -> None:
            deliver(fr, act, _param_read(fr, instr, act, nact, addr(fr, act, nact), dtype, count))

        return guard_simple(ctx, instr, Op(True, ld_param_any, instr))

    addr = ctx.address(ops[1], generic=space == "generic")

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
            _fail(fr, instr, IllegalAddress, "read outside the frame's parameters")
        out[own] = fr.params[idx[own][:, None], offs[:, None] + cols]
    if (~own).any():
        offs = addrs[~own].astype(np.int64)
        kp = fr.launch.kparams
        if (offs + width > len(kp)).any():
            _fail(fr, instr, IllegalAddress, "read outside the kernel parameters")
        out[~own] = kp[offs[:, None] + cols]
    v = out.view(dtype)
    return v.reshape(nact) if count == 1 else v.reshape(nact, count)


def build_st(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    space, vec, type_, _, hint = _parse(instr)
    ops = instr.operands
    if len(ops) != 2 + hint:
        raise DecodeError("st takes an address and a value")
    dtype = dtype_of(type_)
    read = _value_readers(ctx, ops[1], type_, vec)
    count = vec

    def values(fr: Frame, act: Any, nact: int) -> np.ndarray:
        if count == 1:
            return np.asarray(read(fr, act, nact), dtype=dtype)
        out = np.empty((nact, count), dtype=dtype)
        for i, r in enumerate(read):
            out[:, i] = r(fr, act, nact)
        return out

    if space == "param":
        b = _param_binding(ctx, ops[0])
        if b is None or b.kind != "param":
            raise DecodeError("st.param to something other than a call parameter")
        start = b.offset + ops[0].offset
        width = dtype.itemsize * count

        def st_param(fr: Frame, act: Any, nact: int) -> None:
            v = np.ascontiguousarray(values(fr, act, nact), dtype=dtype)
            fr.params[act, start:start + width] = v.view(np.uint8).reshape(nact, width)

        return guard_simple(ctx, instr, Op(True, st_param, instr))

    addr = ctx.address(ops[0], generic=space == "generic")

    def st(fr: Frame, act: Any, nact: int) -> None:
        store(fr, instr, act, nact, space, addr(fr, act, nact), dtype, values(fr, act, nact))

    return guard_simple(ctx, instr, Op(True, st, instr))


# ---------------------------------------------------------------------------
# atomics


_ATOMIC_OPS = {"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"}
_ROUNDS = 32


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _f32_to_bf16(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(values)
    out = rounded.astype(np.uint16)
    if nan.any():
        out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return out


def _update_fn(op: str, type_: str) -> tuple[Any, Any]:
    """(update(old, *args) -> new, accumulate ufunc or None) for an atomic op."""
    if op == "add":
        if type_ == "bf16":
            return (lambda o, v: _f32_to_bf16(_bf16_to_f32(o) + _bf16_to_f32(v))), None
        if type_ in ("f16x2", "bf16x2"):
            def add2(o: np.ndarray, v: np.ndarray) -> np.ndarray:
                oh = np.ascontiguousarray(o).view(np.uint16).reshape(-1, 2)
                vh = np.ascontiguousarray(v).view(np.uint16).reshape(-1, 2)
                if type_ == "f16x2":
                    r = (oh.view(np.float16) + vh.view(np.float16)).view(np.uint16)
                else:
                    r = _f32_to_bf16(_bf16_to_f32(oh) + _bf16_to_f32(vh))
                return np.ascontiguousarray(r).view(np.uint32).reshape(-1)
            return add2, None
        if type_ == "f16":
            return (lambda o, v: o + v), None
        return (lambda o, v: o + v), np.add
    if op == "min":
        return np.minimum, np.minimum
    if op == "max":
        return np.maximum, np.maximum
    if op == "and":
        return np.bitwise_and, np.bitwise_and
    if op == "or":
        return np.bitwise_or, np.bitwise_or
    if op == "xor":
        return np.bitwise_xor, np.bitwise_xor
    if op == "exch":
        return (lambda o, v: v), "exch"
    if op == "cas":
        return (lambda o, c, v: np.where(o == c, v, o)), "cas"
    if op == "inc":
        return (lambda o, v: np.where(o >= v, o.dtype.type(0), o + o.dtype.type(1))), "inc"
    if op == "dec":
        return (lambda o, v: np.where((o == 0) | (o > v), v, o - o.dtype.type(1))), "dec"
    raise DecodeError(f"atomic .{op}")


def _sequential(cur: Any, args: list[np.ndarray], update: Any, accumulate: Any) -> tuple[np.ndarray, Any]:
    """Old values and final value of one address updated by ``args`` in order."""
    vals = args[-1]
    dtype = vals.dtype
    n = len(vals)
    if accumulate == "exch":
        olds = np.concatenate([np.array([cur], dtype=dtype), vals[:-1]])
        return olds, vals[-1]
    if accumulate == "cas":
        # only a success changes the value: jump from success to success
        cmp = args[0]
        olds = np.empty(n, dtype=dtype)
        pos = 0
        value = dtype.type(cur)
        while pos < n:
            hits = np.flatnonzero(cmp[pos:] == value)
            if len(hits) == 0:
                olds[pos:] = value
                break
            k = pos + int(hits[0])
            olds[pos:k + 1] = value
            value = vals[k]
            pos = k + 1
        return olds, value
    if accumulate in ("inc", "dec") and (vals == vals[0]).all():
        # inc counts up and wraps to 0 after the limit; dec counts down and
        # wraps to the limit after 0; a value above the limit resets first
        limit = int(vals[0])
        period = limit + 1
        c = int(cur)
        step = 1 if accumulate == "inc" else -1
        k = np.arange(n, dtype=np.int64)
        if c <= limit:
            seq = (c + step * k) % period
        else:
            start = 0 if accumulate == "inc" else limit
            seq = np.concatenate([[c], (start + step * k[:-1]) % period])
        olds = seq.astype(dtype)
        return olds, update(olds[-1:], vals[-1:])[0]
    if accumulate is not None and not isinstance(accumulate, str):
        acc = accumulate.accumulate(np.concatenate([np.array([cur], dtype=dtype), vals]),
                                    dtype=dtype)
        return acc[:-1], acc[-1]
    olds = np.empty(n, dtype=dtype)
    c = np.array([cur], dtype=dtype)
    for j in range(n):
        olds[j] = c[0]
        c = update(c, *[a[j:j + 1] for a in args])
    return olds, c[0]


def atomic_update(view: np.ndarray, idx: np.ndarray, args: list[np.ndarray], update: Any,
                  accumulate: Any) -> np.ndarray:
    """Apply ``update`` at ``view[idx]`` lane by lane, in lane order; return the
    value each lane saw before its update."""
    n = len(idx)
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(sidx[1:], sidx[:-1], out=first[1:])
    if first.all():
        old = view[idx]
        view[idx] = update(old, *args)
        return old
    sargs = [a[order] for a in args]
    starts = np.flatnonzero(first)
    lengths = np.diff(np.append(starts, n))
    old_sorted = np.empty(n, dtype=view.dtype)
    long_seg = lengths > _ROUNDS
    for s in np.flatnonzero(long_seg):
        a = int(starts[s])
        b = a + int(lengths[s])
        e = sidx[a]
        olds, new = _sequential(view[e], [x[a:b] for x in sargs], update, accumulate)
        old_sorted[a:b] = olds
        view[e] = new
    short = ~np.repeat(long_seg, lengths)
    if short.any():
        seg = np.repeat(np.arange(len(starts)), lengths)
        rank = np.arange(n) - starts[seg]
        positions = np.flatnonzero(short)
        r = rank[positions]
        by_rank = np.argsort(r, kind="stable")
        bounds = np.searchsorted(r[by_rank], np.arange(int(r.max()) + 2))
        for k in range(int(r.max()) + 1):
            pos = positions[by_rank[bounds[k]:bounds[k + 1]]]
            e = sidx[pos]
            o = view[e]
            old_sorted[pos] = o
            view[e] = update(o, *[x[pos] for x in sargs])
    old = np.empty(n, dtype=view.dtype)
    old[order] = old_sorted
    return old


def build_atom(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    is_red = instr.op == "red"
    space, vec, type_, op, hint = _parse(instr, _ATOMIC_OPS)
    if op is None:
        raise DecodeError("no atomic operation")
    if vec != 1:
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
    addr = ctx.address(ops[0], generic=space == "generic")
    srcs = [ctx.reader(o, type_) for o in ops[1:]]
    dtype = dtype_of(type_)
    update, accumulate = _update_fn(op, type_)

    def run(fr: Frame, act: Any, nact: int) -> None:
        addrs = addr(fr, act, nact)
        args = [np.ascontiguousarray(r(fr, act, nact), dtype=dtype) for r in srcs]
        parts = _plan(fr, instr, act, nact, space, addrs, dtype.itemsize, AccessKind.ATOMIC)
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
    space = next((_SPACES[m] for m in mods if m in _SPACES), None)
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
    space = next((_SPACES[m] for m in mods if m in _SPACES), None)
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
    """``cp.async.{ca,cg}.shared.global [dst], [src], size{, src_size}``: done at once."""
    mods = instr.modifiers  # ("async", ...)
    if "bulk" in mods:
        raise DecodeError("cp.async.bulk (tensor memory accelerator)")
    if len(mods) > 1 and mods[1] == "mbarrier":
        from .mbarrier import build_cp_async_mbarrier_arrive

        return build_cp_async_mbarrier_arrive(ctx, instr)
    if len(mods) > 1 and mods[1] in ("commit_group", "wait_group", "wait_all"):
        def nothing(fr: Frame, act: Any, nact: int) -> None:
            pass

        return Op(True, nothing, instr)
    ops = list(instr.operands)
    if "L2::cache_hint" in mods:
        ops = ops[:-1]
    if len(ops) not in (3, 4) or not isinstance(ops[2], nodes.Immediate):
        raise DecodeError("cp.async needs a destination, a source and a size")
    size = int(ops[2].value)
    if size not in (4, 8, 16):
        raise DecodeError(f"cp.async size {size}")
    dst = ctx.address(ops[0], generic=False)
    src = ctx.address(ops[1], generic=False)
    src_size = ctx.reader(ops[3], "u32") if len(ops) == 4 else None
    elem = np.dtype(np.uint32)
    count = size // 4

    def run(fr: Frame, act: Any, nact: int) -> None:
        s = src(fr, act, nact)
        d = dst(fr, act, nact)
        if src_size is not None:
            n = src_size(fr, act, nact).astype(np.int64)
            data = np.zeros((nact, count), dtype=elem)
            some = n > 0
            if some.any():
                sub = np.flatnonzero(some)
                sub_act = sub if act is ALL else act[sub]
                got = load(fr, instr, sub_act, len(sub), "global", s[sub], elem, count)
                data[sub] = got.reshape(len(sub), count)
            raw = data.view(np.uint8).reshape(nact, size)
            raw[np.arange(size)[None, :] >= n[:, None]] = 0
            data = raw.view(elem).reshape(nact, count)
        else:
            data = load(fr, instr, act, nact, "global", s, elem, count).reshape(nact, count)
        store(fr, instr, act, nact, "shared", d, elem, data)

    return guard_simple(ctx, instr, Op(True, run, instr))
