"""Decoding: a PTX function becomes a list of compiled closures, once per module.

Everything that can be resolved without running is resolved here: register
slots and their types (with ``{ }`` scoping), the ALU operation of each
instruction, immediates, symbol addresses, label targets, the layout of the
function's ``.local`` frame and of its per-lane ``.param`` area.  The result,
:class:`FunctionCode`, is shared by every launch of the module.

An instruction the CPU device cannot execute does not stop decoding: the
error is recorded (:attr:`FunctionCode.errors`) and raised when a kernel that
can reach the function is launched, so the other kernels of the module run.

What each opcode becomes is the instruction builders' business
(:mod:`gpusafe.cpu.instructions` dispatches); the decoder hands them a
:class:`DecodeContext` and collects the :class:`~gpusafe.cpu.decoded.Op` each
returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpusafe_instrument import nodes
from gpusafe_instrument.query import param_layout

from .decoded import (
    FRAME_PARAM_FLAG,
    Binding,
    DecodeError,
    FunctionCode,
    ModuleSymbols,
    Op,
    align_up,
)
from .errors import UnsupportedInstruction
from .frames import ALL, DONE, EXIT, Frame
from .memory import LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW
from .operands import (
    Reader,
    Writer,
    const_reader,
    immediate_bits,
    negate,
    register_reader,
    register_writer,
    sink_writer,
    value_reader,
)
from .ptx_types import DTYPES, UNSIGNED, dtype_of
from .special_registers import is_special, special_reader

Builder = Callable[["DecodeContext", nodes.Instruction], Op]
"""Decodes one instruction (:mod:`gpusafe.cpu.instructions` dispatches by opcode)."""


class DecodeContext:
    """Name resolution and operand factories for one instruction at a time."""

    def __init__(self, symbols: ModuleSymbols, code: FunctionCode) -> None:
        self.symbols = symbols
        self.code = code
        self.scopes: list[dict[str, Binding]] = [{}]
        self.instr: nodes.Instruction | None = None

    # -- names ----------------------------------------------------------------

    def declare(self, name: str, binding: Binding) -> None:
        self.scopes[-1][name] = binding

    def lookup(self, name: str) -> Binding:
        for scope in reversed(self.scopes):
            b = scope.get(name)
            if b is not None:
                return b
        b = self.symbols.module_binding(name)
        if b is not None:
            return b
        raise DecodeError(f"unknown name {name}")

    def new_register(self, name: str, ptx_type: str) -> Binding:
        t = ptx_type.lstrip(".")
        if t not in _REGISTER_TYPES:
            raise DecodeError(f"registers of type .{t}")
        slot = len(self.code.reg_dtypes)
        dt = dtype_of(t)
        self.code.reg_dtypes.append(dt)
        self.code.reg_names.append(name)
        b = Binding("reg", name, slot=slot, dtype=dt)
        self.declare(name, b)
        return b

    def new_param(self, name: str, size: int, align: int) -> Binding:
        offset = align_up(self.code.param_size, max(align, 1))
        self.code.param_size = offset + size
        b = Binding("param", name, offset=offset, size=size)
        self.declare(name, b)
        return b

    def new_local(self, var: nodes.Variable) -> Binding:
        size = var.size or 0
        align = var.align or var.element_size
        offset = align_up(self.code.local_size, align)
        self.code.local_size = offset + size
        b = Binding("local", var.name, offset=offset, size=size)
        self.declare(var.name, b)
        return b

    # -- operands -------------------------------------------------------------

    def reader(self, operand: nodes.Operand, want: str) -> Reader:
        want = want.lstrip(".")
        if isinstance(operand, nodes.Register):
            name = operand.name
            try:
                b = self.lookup(name)
            except DecodeError:
                if is_special(name):
                    return special_reader(name, want)
                raise
            if b.kind != "reg":
                raise DecodeError(f"{name} is not a register")
            return register_reader(b.slot, b.dtype, want)
        if isinstance(operand, nodes.Immediate):
            return const_reader(immediate_bits(operand.text, operand.value, want))
        if isinstance(operand, nodes.Negated):
            return negate(self.reader(operand.operand, want))
        if isinstance(operand, nodes.Symbol):
            b = self.lookup(operand.name)
            if b.kind == "reg":  # inline-asm registers are named without '%'
                return register_reader(b.slot, b.dtype, want)
            return self.symbol_value(operand.name, 0, want)
        if isinstance(operand, nodes.SymbolOffset):
            return self.symbol_value(operand.name, operand.offset, want)
        raise DecodeError(f"operand {operand} cannot be read as .{want}")

    def writer(self, operand: nodes.Operand, value_type: str) -> Writer:
        if isinstance(operand, nodes.Sink):
            return sink_writer
        if isinstance(operand, (nodes.Register, nodes.Symbol)):
            b = self.lookup(operand.name)
            if b.kind != "reg":
                raise DecodeError(f"{operand.name} is not a register")
            return register_writer(b.slot, b.dtype, value_type.lstrip("."))
        raise DecodeError(f"operand {operand} cannot be written")

    def symbol_address(self, name: str, generic: bool) -> Callable[[Frame], int]:
        """The address of a named variable or function, in its own state space or
        as a generic address; a function of the frame (shared and local
        addresses depend on the launch and the frame)."""
        b = self.lookup(name)
        kind = b.kind
        if kind == "global":
            address = b.address
            return lambda fr: address
        if kind == "func":
            self.code.callees.add(b.name)
            address = b.address
            return lambda fr: address
        if kind == "shared":
            key = b.key
            base = SHARED_WINDOW if generic else 0
            return lambda fr: base + fr.launch.shared_offsets[key]
        if kind == "local":
            offset = b.offset
            base = LOCAL_WINDOW if generic else 0
            return lambda fr: base + fr.local_base + offset
        if kind == "kparam":
            offset = b.offset
            base = PARAM_WINDOW if generic else 0
            return lambda fr: base + offset
        if kind == "extern":
            raise DecodeError(f"{name} is declared .extern and not defined in this module")
        if kind == "tex":
            raise DecodeError(f"texture, sampler and surface references ({name})")
        if kind == "param":
            if generic:
                raise DecodeError(f"generic address of the call parameter {name}")
            offset = b.offset | FRAME_PARAM_FLAG
            return lambda fr: offset
        raise DecodeError(f"{name} has no address")

    def symbol_value(self, name: str, offset: int, want: str) -> Reader:
        get = self.symbol_address(name, generic=False)
        if not offset:
            return value_reader(get, want)
        return value_reader(lambda fr: get(fr) + offset, want)

    def address(self, operand: nodes.Operand, generic: bool) -> Reader:
        """A reader of the uint64 addresses of a memory operand ``[base+off]``."""
        if not isinstance(operand, nodes.Address):
            raise DecodeError(f"expected a memory operand, found {operand}")
        offset = np.uint64(operand.offset & 0xFFFF_FFFF_FFFF_FFFF)
        base = operand.base
        if base is None:
            value = np.array(offset, dtype=np.uint64)
            return const_reader(value)
        if isinstance(base, nodes.Symbol) and self.lookup(base.name).kind == "reg":
            base = nodes.Register(base.name)
        if isinstance(base, nodes.Register):
            read = self.reader(base, "u64")
            if not offset:
                return read

            def read_offset(fr: Frame, act: Any, nact: int) -> np.ndarray:
                return read(fr, act, nact) + offset

            return read_offset
        get = self.symbol_address(base.name, generic)
        off = int(operand.offset)
        return value_reader(lambda fr: get(fr) + off, "u64")

    def label(self, name: str) -> int:
        """The instruction index of a label (labels are scoped like names)."""
        b = self.lookup(name)
        if b.kind != "label":
            raise DecodeError(f"{name} is not a label")
        return b.offset

    def branch_table(self, name: str) -> tuple[str, ...]:
        """The labels of a ``.branchtargets`` list."""
        b = self.lookup(name)
        if b.kind != "label" or b.node is None:
            raise DecodeError(f"{name} is not a .branchtargets list")
        return b.node


_REGISTER_TYPES = frozenset(DTYPES) - {"u16x2", "s16x2"}
"""Types a ``.reg`` may be declared with (the packed integer pairs live in ``.b32``)."""


# ---------------------------------------------------------------------------
# the walk over a function body


def decode_function(symbols: ModuleSymbols, function: nodes.Function,
                    build: Builder) -> FunctionCode:
    """Decode ``function``; ``build`` decodes each instruction."""
    code = FunctionCode(function.name, function)
    ctx = DecodeContext(symbols, code)
    fn_name = function.name
    if function.is_kernel:
        layout, _ = param_layout(function.params)
        for p, lay in zip(function.params, layout, strict=True):
            ctx.declare(p.name, Binding("kparam", p.name, offset=lay.offset, size=lay.size))
    else:
        for group, out in ((function.returns or [], code.returns), (function.params, code.params)):
            for p in group:
                if p.space == ".reg":
                    out.append(ctx.new_register(p.name, p.type))
                else:
                    out.append(ctx.new_param(p.name, p.size, p.alignment))

    # pass 1: flatten, scoping declarations, recording labels
    flat: list[tuple[nodes.Instruction, list[dict[str, Binding]]]] = []
    pending_label: list[Binding] = []

    def walk(statements: list[nodes.Statement]) -> None:
        for s in statements:
            if isinstance(s, nodes.Instruction):
                flat.append((s, list(ctx.scopes)))
                pending_label.clear()
            elif isinstance(s, nodes.Label):
                label = Binding("label", s.name, offset=len(flat))
                ctx.declare(s.name, label)
                pending_label[:] = [label]
            elif isinstance(s, nodes.RegisterDecl):
                for name in s.registers():
                    if s.vector:
                        code.errors.append((s.line, ".reg", "vector registers"))
                        continue
                    try:
                        ctx.new_register(name, s.type)
                    except DecodeError as e:
                        code.errors.append((s.line, ".reg", e.reason))
            elif isinstance(s, nodes.Variable):
                declare_variable(s)
            elif isinstance(s, nodes.Block):
                ctx.scopes.append({})
                walk(s.statements)
                ctx.scopes.pop()
            elif isinstance(s, nodes.Targets):
                if s.kind == ".branchtargets":
                    for label in pending_label:
                        label.node = s.names
            elif isinstance(s, nodes.Prototype):
                ctx.declare(s.name, Binding("proto", s.name, node=s))
            # Loc, Pragma: nothing to run

    def declare_variable(var: nodes.Variable) -> None:
        space = var.space
        if space == ".local":
            if var.size is None:
                code.errors.append((var.line, ".local", f"unsized local variable {var.name}"))
                return
            ctx.new_local(var)
        elif space == ".param":
            ctx.new_param(var.name, var.size or 0, var.align or var.element_size)
        elif space in (".shared", ".global", ".const"):
            ctx.declare(var.name, symbols.function_variable(fn_name, var))
        else:
            code.errors.append((var.line, space, f"variables in {space}"))

    for statement in function.body or []:
        code.op_of_statement.append(len(flat))
        walk([statement])
    code.op_of_statement.append(len(flat))
    code.local_size = align_up(code.local_size, 16)

    # pass 2: build the ops
    for instr, scopes in flat:
        ctx.scopes = scopes
        ctx.instr = instr
        try:
            op = build(ctx, instr)
        except DecodeError as e:
            code.errors.append((instr.line, instr.opcode, e.reason))
            op = _raising_op(instr, e.reason)
        except UnsupportedInstruction as e:
            code.errors.append((instr.line, instr.opcode, e.reason))
            op = _raising_op(instr, e.reason)
        code.ops.append(op)
    ctx.instr = None
    code.ops.append(implicit_return(function))
    return code


def implicit_return(function: nodes.Function) -> Op:
    """The return at the end of every function body (falling off the end)."""
    state = EXIT if function.is_kernel else DONE

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        fr.state[act] = state
        return None, 0, 0

    return Op(False, run, None, falls=False)


def _raising_op(instr: nodes.Instruction, reason: str) -> Op:
    def run(fr: Frame, act: Any, nact: int) -> None:
        raise UnsupportedInstruction(fr.launch.kernel, instr.line, instr.opcode, reason)

    return Op(True, run, instr)


def guard_simple(ctx: DecodeContext, instr: nodes.Instruction, op: Op) -> Op:
    """Wrap a simple op so that it only runs for the lanes its guard selects."""
    if instr.guard is None or not op.simple:
        return op
    pred = ctx.reader(nodes.Register(instr.guard.register), "pred")
    negated = instr.guard.negated
    inner = op.run

    def run(fr: Frame, act: Any, nact: int) -> None:
        p = pred(fr, act, nact)
        if negated:
            p = ~p
        count = int(np.count_nonzero(p))
        if count == nact:
            inner(fr, act, nact)
        elif count:
            sub = np.flatnonzero(p) if act is ALL else act[p]
            inner(fr, sub, count)

    return Op(True, run, instr)


def pack_reader(ctx: DecodeContext, vector: nodes.Vector, whole: str) -> Reader:
    """``{%r1, %r2}`` read as one value of type ``whole`` (element 0 lowest)."""
    dt = dtype_of(whole)
    k = len(vector.items)
    if dt.itemsize % k:
        raise DecodeError(f"cannot pack {k} elements into .{whole}")
    elem = UNSIGNED[dt.itemsize // k]
    elem_type = "b" + str(8 * elem.itemsize)
    readers = [ctx.reader(item, elem_type) for item in vector.items]

    def read(fr: Frame, act: Any, nact: int) -> np.ndarray:
        out = np.empty((nact, k), dtype=elem)
        for i, r in enumerate(readers):
            out[:, i] = r(fr, act, nact)
        return out.view(dt).reshape(nact)

    return read


def unpack_writer(ctx: DecodeContext, vector: nodes.Vector, whole: str) -> Writer:
    dt = dtype_of(whole)
    k = len(vector.items)
    if dt.itemsize % k:
        raise DecodeError(f"cannot unpack .{whole} into {k} elements")
    elem = UNSIGNED[dt.itemsize // k]
    elem_type = "b" + str(8 * elem.itemsize)
    writers = [ctx.writer(item, elem_type) for item in vector.items]

    def write(fr: Frame, act: Any, values: np.ndarray) -> None:
        parts = np.ascontiguousarray(values, dtype=dt).view(elem).reshape(-1, k)
        for i, w in enumerate(writers):
            w(fr, act, parts[:, i])

    return write
