"""The atomics both lowerings compile: their forms, and each operation's update.

The per-thread lowering (:mod:`.access`) and the lanes lowering
(:mod:`.lanes_mem`, one lane after another in lane order) take the same
``atom``/``red`` forms and apply the same operation: an LLVM
``atomicrmw``/``cmpxchg`` on global memory where LLVM has the operation (so
that blocks on several OS threads lose no update), else the plain load,
operation and store of :func:`update_lines`, the interpreter's update
(:func:`gpusafe.cpu.atomics.update_fn`) written in scalar IR.
"""

from __future__ import annotations

from collections.abc import Callable

from gpusafe_instrument import nodes

from .values import BITS, GENERIC, GLOBAL, SHARED, Unsupported, split_type

OPS = {"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"}
QUALIFIERS = {"relaxed", "acquire", "release", "acq_rel", "sys", "gpu", "cta", "cluster",
              "noftz"}


def atomic_form(instr: nodes.Instruction,
                fail: Callable[[str], Unsupported]) -> tuple[str, str, int]:
    """(operation, type, space) of an ``atom``/``red``; refuses the rest.
    Memory-order and scope qualifiers change nothing when threads run one
    after another; a thread spinning on an atomic for another thread's
    write would never end (the interpreter yields to it): such a kernel
    needs the interpreter, and a launch with a timeout gets it."""
    mods, t = split_type(instr)
    space = GENERIC
    ops = []
    for m in mods:
        if m == "global":
            space = GLOBAL
        elif m in ("shared", "shared::cta"):
            space = SHARED
        elif m in OPS:
            ops.append(m)
        elif m not in QUALIFIERS:
            raise fail(f"modifier .{m}")
    if len(ops) != 1:
        raise fail(f"atomic operation {ops}")
    op = ops[0]
    floats = t in ("f32", "f64")
    if t == "pred" or BITS[t] < 32 or (floats and op != "add") \
            or (op in ("inc", "dec") and t != "u32"):
        raise fail(f".{op}.{t}")
    return op, t, space


def rmw(op: str, t: str) -> str | None:
    """LLVM's ``atomicrmw`` operation for ``op`` on ``t``, or None (``cas``
    is a ``cmpxchg``).  ``inc``/``dec`` are LLVM's ``uinc_wrap``/``udec_wrap``:
    PTX's ``old >= b ? 0 : old + 1`` and ``old == 0 || old > b ? b : old - 1``
    to the letter (a tally of the instrumented kernel counts with
    ``atom.inc`` below sm_90)."""
    signed = t.startswith("s")
    return {"add": "fadd" if t in ("f32", "f64") else "add", "and": "and", "or": "or",
            "xor": "xor", "exch": "xchg", "min": "min" if signed else "umin",
            "max": "max" if signed else "umax", "inc": "uinc_wrap",
            "dec": "udec_wrap"}.get(op)


def update_lines(old: str, ptr: str, op: str, lt: str, vals: list[str], signed: bool,
                 new_name: Callable[[], str]) -> tuple[str, set[str]]:
    """The update as a plain load, operation and store (scalar IR lines, and
    the intrinsic declarations they need); ``vals`` are the operation's
    operands (``cas``: the compared value, then the new one)."""
    v = vals[-1]
    lines = [f"{old} = load {lt}, ptr {ptr}, align 1"]
    intrinsics: set[str] = set()
    new = new_name()
    if op == "add":
        lines.append(f"{new} = {'fadd' if lt in ('float', 'double') else 'add'} {lt} {old}, {v}")
    elif op in ("and", "or", "xor"):
        lines.append(f"{new} = {op} {lt} {old}, {v}")
    elif op in ("min", "max"):
        fn = f"llvm.{'s' if signed else 'u'}{op}.{lt}"
        intrinsics.add(f"declare {lt} @{fn}({lt}, {lt})")
        lines.append(f"{new} = call {lt} @{fn}({lt} {old}, {lt} {v})")
    elif op == "exch":
        new = v
    elif op == "cas":
        eq = new_name()
        lines += [f"{eq} = icmp eq {lt} {old}, {vals[0]}",
                  f"{new} = select i1 {eq}, {lt} {v}, {lt} {old}"]
    elif op == "inc":  # old >= limit ? 0 : old + 1, unsigned
        top, plus = new_name(), new_name()
        lines += [f"{top} = icmp uge {lt} {old}, {v}", f"{plus} = add {lt} {old}, 1",
                  f"{new} = select i1 {top}, {lt} 0, {lt} {plus}"]
    else:  # dec: old == 0 or old > limit ? limit : old - 1, unsigned
        zero, above, wrap, minus = new_name(), new_name(), new_name(), new_name()
        lines += [f"{zero} = icmp eq {lt} {old}, 0", f"{above} = icmp ugt {lt} {old}, {v}",
                  f"{wrap} = or i1 {zero}, {above}", f"{minus} = sub {lt} {old}, 1",
                  f"{new} = select i1 {wrap}, {lt} {v}, {lt} {minus}"]
    lines.append(f"store {lt} {new}, ptr {ptr}, align 1")
    return "\n  ".join(lines), intrinsics


def compiled_atomic(old: str, ptr: str, op: str, t: str, lt: str, vals: list[str],
                    space: int, new_name: Callable[[], str]) -> tuple[str, set[str]]:
    """One thread's (or lane's) atomic as scalar IR: ``atomicrmw``/``cmpxchg``
    (relaxed, PTX's default order) on global memory where LLVM has the
    operation, the plain update on a block's ``.shared`` window (its threads
    run one after another on one OS thread: the bench's histogram, one
    ``atom.shared`` per input byte, 5.0 ms locked, 3.5 ms plain) and for the
    rest (float ``min``/``max``...)."""
    align = BITS[t] // 8
    op_rmw = rmw(op, t)
    if space != SHARED and op_rmw is not None and not (op in ("min", "max")
                                                      and t in ("f32", "f64")):
        return f"{old} = atomicrmw {op_rmw} ptr {ptr}, {lt} {vals[-1]} monotonic, " \
               f"align {align}", set()
    if space != SHARED and op == "cas" and t not in ("f32", "f64"):
        pair = new_name()
        return (f"{pair} = cmpxchg ptr {ptr}, {lt} {vals[0]}, {lt} {vals[-1]} monotonic "
                f"monotonic, align {align}\n  {old} = extractvalue {{ {lt}, i1 }} {pair}, 0"),\
            set()
    return update_lines(old, ptr, op, lt, vals, t.startswith("s"), new_name)
