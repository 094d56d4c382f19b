"""Special registers (``%tid.x``, ``%laneid``, ``%clock64``, ...).

Per-lane values are computed once per chunk of blocks
(:class:`~gpusafe.cpu.frames.Chunk`) and gathered once per frame; uniform
values are scalars.  ``%clock``,
``%clock64`` and ``%globaltimer`` are read fresh every time (they only have
to be monotonic).  ``%envreg1:%envreg2`` is the grid workspace of a
cooperative launch (the driver ABI of ``cooperative_groups::this_grid()``),
0 otherwise; the other environment registers read 0.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .frames import Chunk, Frame, Launch
from .operands import Reader, convert_bits
from .ptx_types import dtype_of, is_signed

NSMID = 80
"""Number of SMs the CPU device pretends to have (``%nsmid``)."""
NWARPID = 64
"""``%nwarpid``: warp slots per SM."""

_PER_LANE = {
    "%tid.x", "%tid.y", "%tid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z", "%laneid", "%warpid",
    "%smid", "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge", "%lanemask_gt",
    "%clusterid.x", "%clusterid.y", "%clusterid.z",
}
_DYNAMIC = {"%clock", "%clock_hi", "%clock64", "%globaltimer", "%globaltimer_lo",
            "%globaltimer_hi"}
_UNIFORM = {
    "%ntid.x", "%ntid.y", "%ntid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z", "%nwarpid",
    "%nsmid", "%gridid", "%dynamic_smem_size", "%total_smem_size", "%aggr_smem_size",
    "%is_explicit_cluster", "%nclusterid.x", "%nclusterid.y", "%nclusterid.z",
    "%cluster_ctaid.x", "%cluster_ctaid.y", "%cluster_ctaid.z", "%cluster_nctaid.x",
    "%cluster_nctaid.y", "%cluster_nctaid.z", "%cluster_ctarank", "%cluster_nctarank",
    "%reserved_smem_offset_begin", "%reserved_smem_offset_end", "%reserved_smem_offset_cap",
    "%reserved_smem_offset_0", "%reserved_smem_offset_1",
    "%current_graph_exec",
}
_U64 = {"%clock64", "%globaltimer", "%gridid", "%current_graph_exec"}
_ENV = {f"%envreg{i}" for i in range(32)}
_PM = {f"%pm{i}" for i in range(8)} | {f"%pm{i}_64" for i in range(8)}

_ALIASES = {"%tid": "%tid.x", "%ntid": "%ntid.x", "%ctaid": "%ctaid.x", "%nctaid": "%nctaid.x"}


def is_special(name: str) -> bool:
    name = _ALIASES.get(name, name)
    return name in _PER_LANE or name in _DYNAMIC or name in _UNIFORM or name in _ENV or name in _PM


def natural_dtype(name: str) -> np.dtype:
    name = _ALIASES.get(name, name)
    if name in _U64 or name.endswith("_64"):
        return np.dtype(np.uint64)
    if name == "%is_explicit_cluster":
        return np.dtype(np.bool_)
    return np.dtype(np.uint32)


def chunk_value(name: str, chunk: Chunk) -> np.ndarray:
    """A per-lane special register over the lanes of a chunk (uint32)."""
    if name.startswith("%tid."):
        bx, by, _ = chunk.launch.block
        t = chunk.tid_lin
        return (t % bx, (t // bx) % by, t // (bx * by))["xyz".index(name[-1])].astype(np.uint32)
    if name.startswith("%ctaid.") or name.startswith("%clusterid."):
        gx, gy, _ = chunk.launch.grid
        b = chunk.block_row + chunk.first_block
        return (b % gx, (b // gx) % gy, b // (gx * gy))["xyz".index(name[-1])].astype(np.uint32)
    if name == "%laneid":
        return chunk.laneid
    if name == "%warpid":
        return chunk.warp_in_block.astype(np.uint32)
    if name == "%smid":
        return ((chunk.block_row + chunk.first_block) % NSMID).astype(np.uint32)
    one = np.uint64(1)
    eq = np.left_shift(one, chunk.laneid.astype(np.uint64))
    if name == "%lanemask_eq":
        return eq.astype(np.uint32)
    if name == "%lanemask_lt":
        return (eq - one).astype(np.uint32)
    if name == "%lanemask_le":
        return ((eq << one) - one).astype(np.uint32)
    if name == "%lanemask_ge":
        return (~(eq - one)).astype(np.uint32)
    if name == "%lanemask_gt":
        return (~((eq << one) - one)).astype(np.uint32)
    raise KeyError(name)


def lane_values(fr: Frame, name: str) -> np.ndarray:
    """A per-lane special register over the lanes of a frame: computed once per
    chunk, gathered once per frame."""
    v = fr.cache.get(name)
    if v is None:
        chunk = fr.chunk
        v = chunk.specials.get(name)
        if v is None:
            v = chunk_value(name, chunk)
            chunk.specials[name] = v
        if fr.lanes is not None:
            v = v[fr.lanes]
        fr.cache[name] = v
    return v


def uniform_value(name: str, launch: Launch) -> int:
    if name.startswith("%ntid."):
        return launch.block["xyz".index(name[-1])]
    if name.startswith("%nctaid.") or name.startswith("%nclusterid."):
        return launch.grid["xyz".index(name[-1])]
    if name.startswith("%cluster_nctaid."):
        return 1
    if name in ("%cluster_nctarank",):
        return 1
    if name.startswith("%cluster_ctaid.") or name == "%cluster_ctarank":
        return 0
    if name == "%nwarpid":
        return NWARPID
    if name == "%nsmid":
        return NSMID
    if name == "%gridid":
        return launch.grid_id
    if name == "%dynamic_smem_size":
        return launch.dynamic_shared
    if name in ("%total_smem_size", "%aggr_smem_size"):
        return launch.shared_window
    if name == "%is_explicit_cluster":
        return 0
    if name.startswith("%reserved_smem_offset"):
        reserved = launch.reserved_shared
        return {"begin": 0, "end": reserved, "cap": reserved, "0": 0,
                "1": reserved // 2}[name.rsplit("_", 1)[1]]
    if name == "%current_graph_exec":
        return 0
    if name in ("%envreg1", "%envreg2"):
        # the grid workspace cooperative groups read: high word, low word
        return launch.workspace >> 32 if name == "%envreg1" else launch.workspace & 0xFFFF_FFFF
    if name in _ENV or name in _PM:
        return 0
    raise KeyError(name)


def dynamic_value(name: str, launch: Launch) -> int:
    if name.startswith("%clock"):
        ticks = (time.perf_counter_ns() - launch.start_ns) * 3 // 2 + launch.clock_bias()
        if name == "%clock":
            return ticks & 0xFFFF_FFFF
        if name == "%clock_hi":
            return (ticks >> 32) & 0xFFFF_FFFF
        return ticks
    now = time.time_ns()
    if name == "%globaltimer_lo":
        return now & 0xFFFF_FFFF
    if name == "%globaltimer_hi":
        return now >> 32
    return now


def special_reader(name: str, want: str) -> Reader:
    """A reader of special register ``name`` as PTX type ``want``."""
    name = _ALIASES.get(name, name)
    want_dt = dtype_of(want)
    natural = natural_dtype(name)
    signed = is_signed(want)
    if name in _PER_LANE:
        def read_lane(fr: Frame, act: Any, nact: int) -> np.ndarray:
            return convert_bits(lane_values(fr, name)[act], want_dt, signed)
        return read_lane
    if name in _DYNAMIC:
        def read_dynamic(fr: Frame, act: Any, nact: int) -> np.ndarray:
            v = np.array(dynamic_value(name, fr.launch), dtype=natural)
            return np.broadcast_to(convert_bits(v, want_dt, signed), (nact,))
        return read_dynamic

    def read_uniform(fr: Frame, act: Any, nact: int) -> np.ndarray:
        v = np.array(uniform_value(name, fr.launch), dtype=natural)
        return np.broadcast_to(convert_bits(v, want_dt, signed), (nact,))

    return read_uniform
