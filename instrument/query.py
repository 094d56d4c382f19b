"""The query layer: the one place that answers "is this a memory access, and of what?".

Like AddressSanitizer's ``isInterestingMemoryAccess``, every later decision
(what check to emit, whether a check can be dropped, what ``gpusafe inspect``
counts) is built on :func:`memory_access`'s answer, so the rules for reading
an opcode's state space, access kind and width live here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .kinds import AccessKind
from .nodes import (
    SCALAR_SIZES,
    VECTOR_WIDTHS,
    Address,
    Block,
    Function,
    Instruction,
    Loc,
    Module,
    Param,
    Statement,
)

STATE_SPACES = ("global", "shared", "local", "param", "const", "generic")

_ACCESS_KIND = {
    "ld": AccessKind.READ,
    "ldu": AccessKind.READ,
    "st": AccessKind.WRITE,
    "atom": AccessKind.ATOMIC,
    "red": AccessKind.ATOMIC,
}

@dataclass(frozen=True)
class ParamSlot:
    """A kernel or function parameter: where it lives in the parameter buffer."""

    name: str
    offset: int
    size: int
    align: int
    type: str


def param_layout(params: list[Param]) -> tuple[list[ParamSlot], int]:
    """Offsets of kernel or function parameters and the total size: the CUDA
    ABI, each parameter aligned to its own alignment.  The instrumenter (where
    the hidden parameter goes), the CPU device (where each argument lands) and
    the launch pipeline (where pointer roots are read) all ask this."""
    out = []
    offset = 0
    for p in params:
        align = max(p.alignment, 1)
        offset = (offset + align - 1) // align * align
        out.append(ParamSlot(p.name, offset, p.size, align, p.type.lstrip(".")))
        offset += p.size
    return out, offset


@dataclass(frozen=True)
class SourceLocation:
    """Where the user should look: a CUDA source line from ``.loc``/``.file``."""

    file: str | None
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file or '?'}:{self.line}:{self.column}"


@dataclass(frozen=True)
class MemoryAccess:
    """One memory instruction, described for checking."""

    instruction: Instruction
    space: str  # one of STATE_SPACES
    kind: AccessKind
    width: int  # bytes moved per thread (vector width included)
    address: Address
    location: SourceLocation | None

    @property
    def ptx_line(self) -> int:
        return self.instruction.line


@dataclass(frozen=True)
class ParamInfo:
    name: str
    type: str
    size: int
    align: int


def param_info(param: Param) -> ParamInfo:
    return ParamInfo(param.name, param.type, param.size, param.alignment)


def kernels(module: Module) -> Iterator[Function]:
    """Kernels (``.entry``) that have a body."""
    for fn in module.functions:
        if fn.is_kernel and fn.body is not None:
            yield fn


def device_functions(module: Module) -> Iterator[Function]:
    """Device functions (``.func``) defined in the module (not mere declarations)."""
    for fn in module.functions:
        if not fn.is_kernel and fn.body is not None:
            yield fn


def walk(statements: list[Statement]) -> Iterator[Statement]:
    """Every statement in source order, descending into nested ``{ }`` blocks."""
    for s in statements:
        if type(s) is Block:
            yield from walk(s.statements)
        else:
            yield s


def instructions(fn: Function) -> Iterator[Instruction]:
    for s in walk(fn.body or []):
        if type(s) is Instruction:
            yield s


def _space(mods: tuple[str, ...]) -> str:
    for m in mods:
        base = m.split("::", 1)[0]
        if base in STATE_SPACES and base != "generic":
            return base
    return "generic"


def _width(mods: tuple[str, ...]) -> int:
    """Bytes per thread: the last type modifier times the vector count."""
    size = 0
    count = 1
    for m in mods:
        if m in VECTOR_WIDTHS:
            count = VECTOR_WIDTHS[m]
        elif m in SCALAR_SIZES and m != "pred":
            size = SCALAR_SIZES[m]
    return size * count


def memory_access(
    instr: Instruction, location: SourceLocation | None = None
) -> MemoryAccess | None:
    """Describe ``instr`` if it is a load, store or atomic; None otherwise."""
    kind = _ACCESS_KIND.get(instr.op)
    if kind is None:
        return None
    mods = instr.modifiers
    if instr.op in ("ld", "st") and any(m in ("async",) for m in mods):
        return None
    address = next((o for o in instr.operands if isinstance(o, Address)), None)
    if address is None:
        return None
    return MemoryAccess(instr, _space(mods), kind, _width(mods), address, location)


def touches_memory_otherwise(instr: Instruction) -> bool:
    """True for an instruction that reaches memory through an address operand
    but is not a plain load, store or atomic (``prefetch``, ``cp.async``,
    ``ldmatrix``, ``st.async`` ...): a pass must check it or refuse it."""
    return memory_access(instr) is None and any(isinstance(o, Address) for o in instr.operands)


def memory_accesses(module: Module, fn: Function) -> Iterator[MemoryAccess]:
    """The memory instructions of ``fn`` with the ``.loc`` in effect at each."""
    files = module.files
    loc: SourceLocation | None = None
    for s in walk(fn.body or []):
        t = type(s)
        if t is Loc:
            loc = SourceLocation(files.get(s.file), s.line_no, s.column)
        elif t is Instruction:
            access = memory_access(s, loc)
            if access is not None:
                yield access
