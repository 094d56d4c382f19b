"""Atomic updates in lane order: many lanes hitting one address see the values
a sequential execution gives (the old value each lane saw, the final value).

:func:`update_fn` gives the per-lane update of an atomic operation and, when
one exists, the numpy ufunc that accumulates a run of it in one call;
:func:`atomic_update` applies updates to a view of device memory.  Used by
``atom``/``red`` (:mod:`gpusafe.cpu.memory_ops`) and ``mbarrier``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .decoded import DecodeError

ATOMIC_OPS = frozenset({"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"})
_ROUNDS = 32
"""Lanes on one address above which their updates are applied as one sequence
(:func:`_sequential`) instead of round by round."""


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


def update_fn(op: str, type_: str) -> tuple[Any, Any]:
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


def _sequential(cur: Any, args: list[np.ndarray], update: Any,
                accumulate: Any) -> tuple[np.ndarray, Any]:
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
