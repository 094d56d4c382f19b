"""``cp.async.bulk`` (sm_90, the non-tensor forms): ``size`` bytes copied from
global to shared memory, from shared to global memory, or between two shared
windows, done at once as ``cp.async`` is.  A copy into shared memory then
completes ``size`` bytes of its mbarrier's transaction count, which is what
the threads waiting on that mbarrier wait for.

What a copy reads and writes is the query layer's answer
(:func:`gpusafe_instrument.query.instruction_accesses`), the one the
instrumenter checks; both addresses must be 16-byte aligned.  The group forms
(``commit_group``, ``wait_group``) and the L2 prefetch order or hint at
copies that are already complete, so they do nothing here.  The tensor-map
and multicast forms are refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusafe_instrument import nodes
from gpusafe_instrument.query import BULK_ALIGN, Unsupported, instruction_accesses

from . import mbarrier
from .access import load, store
from .decoded import DecodeError, Op
from .decoder import DecodeContext, guard_simple
from .frames import Frame, lanes_by_size
from .operands import const_reader

_U8 = np.dtype(np.uint8)


def _nothing(fr: Frame, act: Any, nact: int) -> None:
    pass


def build_cp_async_bulk(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    try:
        accesses = instruction_accesses(instr, None, None)
    except Unsupported as e:
        raise DecodeError(f"{e} on the CPU device") from None
    if not accesses:  # commit_group, wait_group, prefetch
        return Op(True, _nothing, instr)
    dst_access, src_access = accesses
    dst = ctx.address(dst_access.address, generic=False)
    src = ctx.address(src_access.address, generic=False)
    size = (ctx.reader(dst_access.size, "u32") if dst_access.size is not None
            else const_reader(np.array(dst_access.width, dtype=np.uint32)))
    completes = any(m.startswith("mbarrier::complete_tx") for m in instr.modifiers)
    barrier = ctx.address(instr.operands[3], generic=False) if completes else None
    update = mbarrier.complete_tx()

    def run(fr: Frame, act: Any, nact: int) -> None:
        s = src(fr, act, nact)
        d = dst(fr, act, nact)
        n = np.broadcast_to(size(fr, act, nact), (nact,)).astype(np.int64)
        for v, lanes, sub in lanes_by_size(n, act):
            data = load(fr, instr, sub, len(lanes), src_access.space, s[lanes], _U8, v,
                        BULK_ALIGN).reshape(len(lanes), v)
            store(fr, instr, sub, len(lanes), dst_access.space, d[lanes], _U8, data,
                  BULK_ALIGN)
        if barrier is not None:
            mbarrier.apply(fr, instr, act, nact, "shared", barrier(fr, act, nact), update,
                           [n.astype(np.uint64)])

    return guard_simple(ctx, instr, Op(True, run, instr))
