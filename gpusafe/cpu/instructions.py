"""Which builder decodes which instruction: the CPU device's instruction set.

ALU instructions (arithmetic, logic, conversions, comparisons, ``mov``) get
their per-lane semantics from :mod:`gpusafe.cpu.alu`; memory, control,
barrier, call and warp-level instructions have builders of their own, each in
the module of its job.  :func:`build` is the :data:`~gpusafe.cpu.decoder.Builder`
the loader hands the decoder, so the decoder itself knows no opcode.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from . import (
    alu,
    barriers,
    bulk_copy,
    calls,
    control_ops,
    mbarrier,
    memory_ops,
    texture_ops,
    warp_ops,
)
from .decoded import DecodeError, Op
from .decoder import Builder, DecodeContext, guard_simple, pack_reader, unpack_writer
from .frames import Frame
from .operands import sink_writer

_noop = control_ops.build_noop


def _barrier(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """``bar.warp.sync`` is warp-level; every other ``bar``/``barrier`` is block-wide."""
    if "warp" in instr.modifiers:
        return warp_ops.build_warp_sync(ctx, instr)
    return barriers.build_barrier(ctx, instr)


def _cp(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    if mods[:1] != ("async",):
        raise DecodeError("only cp.async is supported")
    if mods[1:2] == ("mbarrier",):
        return mbarrier.build_cp_async_mbarrier_arrive(ctx, instr)
    if mods[1:2] == ("bulk",):
        return bulk_copy.build_cp_async_bulk(ctx, instr)
    return memory_ops.build_cp_async(ctx, instr)


def _createpolicy(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """A cache policy is only a hint: every policy is 0."""
    write = ctx.writer(instr.operands[0], "b64")

    def run(fr: Frame, act: Any, nact: int) -> None:
        write(fr, act, np.zeros(nact, dtype=np.uint64))

    return guard_simple(ctx, instr, Op(True, run, instr))


_BUILDERS: dict[str, Builder] = {
    "bra": control_ops.build_bra,
    "brx": control_ops.build_brx,
    "call": calls.build_call,
    "ret": control_ops.build_ret,
    "exit": control_ops.build_exit,
    "trap": control_ops.build_trap,
    "bar": _barrier,
    "barrier": _barrier,
    "membar": _noop,
    "fence": _noop,
    "nanosleep": _noop,
    "pmevent": _noop,
    "prefetch": _noop,
    "prefetchu": _noop,
    "discard": _noop,
    "applypriority": _noop,
    "griddepcontrol": _noop,
    "brkpt": _noop,
    "createpolicy": _createpolicy,
    "ld": memory_ops.build_ld,
    "ldu": memory_ops.build_ld,
    "st": memory_ops.build_st,
    "atom": memory_ops.build_atom,
    "red": memory_ops.build_atom,
    "cp": _cp,
    "cvta": memory_ops.build_cvta,
    "isspacep": memory_ops.build_isspacep,
    "shfl": warp_ops.build_shfl,
    "vote": warp_ops.build_vote,
    "match": warp_ops.build_match,
    "redux": warp_ops.build_redux,
    "activemask": warp_ops.build_activemask,
    "elect": warp_ops.build_elect,
    "mbarrier": mbarrier.build_mbarrier,
    "setmaxnreg": _noop,
    "tex": texture_ops.build_tex,
    "tld4": texture_ops.build_tld4,
    "txq": texture_ops.build_query,
    "suq": texture_ops.build_query,
    "suld": texture_ops.build_suld,
    "sust": texture_ops.build_sust,
}


def build(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    op = instr.op
    builder = _BUILDERS.get(op)
    if builder is not None:
        return builder(ctx, instr)
    if op == "mov" and any(isinstance(o, nodes.Vector) for o in instr.operands):
        return _build_mov_vector(ctx, instr)
    return _build_alu(ctx, instr)


def _build_mov_vector(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    if len(instr.operands) != 2:
        raise DecodeError("mov expects two operands")
    whole = instr.modifiers[-1]
    dst, src = instr.operands
    if isinstance(dst, nodes.Vector) and not isinstance(src, nodes.Vector):
        read = ctx.reader(src, whole)
        write = unpack_writer(ctx, dst, whole)
    elif isinstance(src, nodes.Vector) and not isinstance(dst, nodes.Vector):
        read = pack_reader(ctx, src, whole)
        write = ctx.writer(dst, whole)
    else:
        raise DecodeError("mov between two vectors")

    def run(fr: Frame, act: Any, nact: int) -> None:
        write(fr, act, read(fr, act, nact))

    return guard_simple(ctx, instr, Op(True, run, instr))


_CARRY_BASES = {"addc", "subc", "madc"}


def _cc_read(fr: Frame, act: Any, nact: int) -> Any:
    return fr.carry()[act]


def _cc_write(fr: Frame, act: Any, values: Any) -> None:
    fr.carry()[act] = values


@functools.lru_cache(maxsize=8192)
def _alu_op(opcode: str, n_operands: int, carry: bool) -> Any:
    """The ALU's decoding of an opcode, once per distinct spelling."""
    try:
        return alu.alu_op(opcode, n_operands, carry=carry)
    except alu.UnsupportedOpcode as e:
        return DecodeError(e.reason or str(e))


def _build_alu(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    operands = instr.operands
    carry = instr.op in _CARRY_BASES or "cc" in instr.modifiers
    a = _alu_op(instr.opcode, len(operands), carry)
    if isinstance(a, DecodeError):
        raise DecodeError(a.reason)
    src_types = [t for t in a.src_types if t != "cc"]
    dst_types = [t for t in a.dst_types if t != "cc"]
    nd = len(operands) - len(src_types)
    if nd < 1:
        raise DecodeError(f"{len(operands)} operands for {len(src_types)} sources")
    dsts = list(operands[:nd])
    srcs = operands[nd:]
    if nd == 1 and isinstance(dsts[0], nodes.PredicatePair):
        dsts = [dsts[0].first, dsts[0].second]
    if len(dsts) > len(dst_types):
        raise DecodeError(f"{len(dsts)} destinations for {len(dst_types)} results")
    writers = [ctx.writer(dsts[i], t) if i < len(dsts) else sink_writer
               for i, t in enumerate(dst_types)]
    readers = [ctx.reader(s, t) for s, t in zip(srcs, src_types, strict=True)]
    if "cc" in a.src_types:
        readers.append(_cc_read)
    if "cc" in a.dst_types:
        writers.append(_cc_write)
    fn = a.fn
    if len(writers) == 1:
        w0 = writers[0]
        if len(readers) == 1:
            r0 = readers[0]

            def run1(fr: Frame, act: Any, nact: int) -> None:
                w0(fr, act, fn(r0(fr, act, nact)))

            run = run1
        elif len(readers) == 2:
            r0, r1 = readers

            def run2(fr: Frame, act: Any, nact: int) -> None:
                w0(fr, act, fn(r0(fr, act, nact), r1(fr, act, nact)))

            run = run2
        elif len(readers) == 3:
            r0, r1, r2 = readers

            def run3(fr: Frame, act: Any, nact: int) -> None:
                w0(fr, act, fn(r0(fr, act, nact), r1(fr, act, nact), r2(fr, act, nact)))

            run = run3
        else:
            def run_n(fr: Frame, act: Any, nact: int) -> None:
                w0(fr, act, fn(*[r(fr, act, nact) for r in readers]))

            run = run_n
    elif len(writers) == 2 and writers[1] is sink_writer:
        w0 = writers[0]

        def run_first(fr: Frame, act: Any, nact: int) -> None:
            w0(fr, act, fn(*[r(fr, act, nact) for r in readers])[0])

        run = run_first
    else:
        def run_multi(fr: Frame, act: Any, nact: int) -> None:
            results = fn(*[r(fr, act, nact) for r in readers])
            for w, v in zip(writers, results, strict=True):
                w(fr, act, v)

        run = run_multi
    return guard_simple(ctx, instr, Op(True, run, instr))
