"""Scalar IR of the per-thread ALU lowering, rewritten for a warp of 32 lanes.

The lanes lowering (:mod:`.lanes`) reuses every ALU instruction of the
per-thread lowering (:mod:`.alu`, :mod:`.unary`, :mod:`.bits`, :mod:`.floats`)
instead of writing each a second time: their IR lines are elementwise
operations on scalars, and an elementwise operation on ``<32 x T>`` vectors is
the same operation in every lane, bit for bit (LLVM's vector ``fadd``,
``llvm.fma.v32f32``, ``fcmp`` and casts are defined lane by lane).  So each
line an ALU method emits is rewritten here: every scalar type becomes its
vector, every constant operand a splat, every intrinsic its vector overload.
A line of any other form (a load, a store, a branch, a ``phi``, a call of
something that is not an intrinsic) raises :class:`~.values.Unsupported`: the
kernel then keeps the per-thread lowering, never a guessed translation.
"""

from __future__ import annotations

import re

from .values import Unsupported

LANES = 32
_TY = r"(?:i1|i8|i16|i32|i64|i128|float|double)"
_BINOPS = {"add", "sub", "mul", "and", "or", "xor", "shl", "lshr", "ashr", "udiv", "urem",
           "sdiv", "srem", "fadd", "fsub", "fmul", "fdiv", "frem", "icmp", "fcmp"}
_CASTS = {"zext", "sext", "trunc", "bitcast", "sitofp", "uitofp", "fptosi", "fptoui",
          "fptrunc", "fpext"}
_CONST = re.compile(r"-?\d+|true|false|-?0x[0-9A-Fa-f]+|-?\d+\.\d*(?:e[-+]?\d+)?|"
                    r"[-+]?inf|nan|poison|undef")
_LINE = re.compile(r"(\s*)(%[\w.]+) = (.*)")
_BINARY = re.compile(rf"(\w+(?: (?!{_TY}\b)\w+)*) ({_TY}) ([^,]+), (.+)")
_CAST = re.compile(rf"(\w+) ({_TY}) (\S+) to ({_TY})")
_CALL = re.compile(rf"call (?:(fast|nnan|ninf) )?({_TY}) @(llvm\.[\w.]+)\((.*)\)")
_UNARY = re.compile(rf"(fneg|freeze) ({_TY}) (\S+)")
_SUFFIX = re.compile(r"\.(i1|i8|i16|i32|i64|f32|f64)(?=\.|$)")


def vec_type(ty: str) -> str:
    return f"<{LANES} x {ty}>"


def splat(ty: str, value: str) -> str:
    """A constant vector of ``value`` in every lane (LLVM >= 19's ``splat``)."""
    return f"splat ({ty} {value})"


def is_constant(value: str) -> bool:
    return _CONST.fullmatch(value.strip()) is not None


def _operand(ty: str, value: str) -> str:
    value = value.strip()
    return splat(ty, value) if is_constant(value) else value


def _typed_list(text: str, immarg: bool = False) -> str:
    """``T a, T b, ...`` (a call's or select's operands) with vector types;
    ``immarg``: an ``i1`` constant stays scalar (the flag of ``llvm.ctlz``)."""
    out = []
    for part in _split(text):
        m = re.fullmatch(rf"({_TY}) (.+)", part.strip())
        if m is None:
            raise Unsupported(f"lanes: operand {part!r} has no scalar type")
        if immarg and m[1] == "i1" and is_constant(m[2]):
            out.append(part.strip())
            continue
        out.append(f"{vec_type(m[1])} {_operand(m[1], m[2])}")
    return ", ".join(out)


def _split(text: str) -> list[str]:
    """Split on the commas outside parentheses (a splat's ``(T c)`` stays whole)."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


def vector_intrinsic(name: str) -> str:
    """``llvm.fma.f32`` -> ``llvm.fma.v32f32`` (every type suffix)."""
    return _SUFFIX.sub(lambda m: f".v{LANES}{m[1]}", name)


def _immarg(fn: str) -> bool:
    return fn.split(".")[1] in ("ctlz", "cttz", "abs")


def vectorize_line(line: str) -> str:
    m = _LINE.fullmatch(line)
    if m is None:
        raise Unsupported(f"lanes: IR line {line.strip()!r} is not an SSA operation")
    indent, name, rhs = m.groups()
    op = rhs.split(" ", 1)[0]
    if op in _BINOPS:
        b = _BINARY.fullmatch(rhs)
        if b is None:
            raise Unsupported(f"lanes: IR line {line.strip()!r}")
        head, ty, x, y = b.groups()
        return f"{indent}{name} = {head} {vec_type(ty)} {_operand(ty, x)}, {_operand(ty, y)}"
    if op in _CASTS:
        c = _CAST.fullmatch(rhs)
        if c is None:
            raise Unsupported(f"lanes: IR line {line.strip()!r}")
        cop, ty, v, to = c.groups()
        return f"{indent}{name} = {cop} {vec_type(ty)} {_operand(ty, v)} to {vec_type(to)}"
    if op == "select":
        return f"{indent}{name} = select {_typed_list(rhs[len('select '):])}"
    if op == "call":
        c = _CALL.fullmatch(rhs)
        if c is None:
            raise Unsupported(f"lanes: IR line {line.strip()!r} (only intrinsic calls)")
        flags, ty, fn, args = c.groups()
        flag = f"{flags} " if flags else ""
        return (f"{indent}{name} = call {flag}{vec_type(ty)} @{vector_intrinsic(fn)}"
                f"({_typed_list(args, _immarg(fn)) if args.strip() else ''})")
    u = _UNARY.fullmatch(rhs)
    if u is not None:
        return f"{indent}{name} = {u[1]} {vec_type(u[2])} {_operand(u[2], u[3])}"
    raise Unsupported(f"lanes: IR line {line.strip()!r}")


def vectorize(text: str) -> str:
    """Every line of ``text`` (one or more ``\\n``-separated SSA operations)."""
    return "\n".join(vectorize_line(line) for line in text.split("\n"))


_DECLARE = re.compile(rf"declare ({_TY}) @(llvm\.[\w.]+)\((.*)\)")


def vectorize_declaration(decl: str) -> str:
    """An intrinsic's declaration for its vector overload."""
    m = _DECLARE.fullmatch(decl.strip())
    if m is None:
        raise Unsupported(f"lanes: declaration {decl!r}")
    ret, fn, args = m.groups()
    types = [a.strip() for a in args.split(",") if a.strip()]
    if any(re.fullmatch(_TY, t) is None for t in types):
        raise Unsupported(f"lanes: declaration {decl!r}")
    keep = _immarg(fn)
    return (f"declare {vec_type(ret)} @{vector_intrinsic(fn)}"
            f"({', '.join(t if keep and t == 'i1' else vec_type(t) for t in types)})")
