"""The query layer: the one place that answers "is this a memory access, and of what?".

Like AddressSanitizer's ``isInterestingMemoryAccess``, every later decision
(what check to emit, whether a check can be dropped, what ``gpusafe inspect``
counts) is built on :func:`instruction_accesses`'s answer (one access for a
load, store or atomic, two for a copy, none for a hint; :class:`Unsupported`
for what it cannot describe), so the rules for reading an opcode's state
space, access kind and width live here and nowhere else.  So do the other
questions a pass asks about instructions: the callee of a call
(:func:`call_target`), the ``.loc`` in effect (:func:`located_instructions`),
the parameter layout (:func:`param_layout`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .kinds import AccessKind
from .nodes import (
    SCALAR_SIZES,
    VECTOR_WIDTHS,
    Address,
    Block,
    Function,
    Immediate,
    Instruction,
    Loc,
    Module,
    Negated,
    Operand,
    Param,
    Register,
    RegisterDecl,
    Statement,
    Symbol,
    TextureOperand,
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
    space: str  # one of STATE_SPACES, or "surface" (suld, sust, sured)
    kind: AccessKind
    width: int  # bytes moved per thread (vector width included); see ``size``
    address: Address | TextureOperand  # a surface access: [surface, coordinates]
    location: SourceLocation | None
    align: int = 0
    """The alignment the address needs; 0: the width (a load's or a store's)."""
    size: Register | None = None
    """The register holding the byte count when only the running kernel knows
    it (cp.async's src-size, cp.async.bulk's size): ``width`` is then its upper
    bound, 0 when there is none."""
    ignored_when: Register | Negated | None = None
    """A predicate that, when true, makes the instruction skip this access
    (cp.async's ignore-src)."""

    @property
    def ptx_line(self) -> int:
        return self.instruction.line

    @property
    def alignment(self) -> int:
        return self.align or self.width


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


def vector_count(mods: tuple[str, ...]) -> int:
    """Elements of a vector access (``.v2``/``.v4``/``.v8``), 1 for a scalar one."""
    count = 1
    for m in mods:
        if m in VECTOR_WIDTHS:
            count = VECTOR_WIDTHS[m]
    return count


def memory_access(
    instr: Instruction, location: SourceLocation | None = None
) -> MemoryAccess | None:
    """Describe ``instr`` if it is a load, store or atomic; None otherwise
    (:func:`instruction_accesses` answers for every instruction)."""
    kind = _ACCESS_KIND.get(instr.op)
    if kind is None:
        return None
    mods = instr.modifiers
    if instr.op in ("ld", "st", "red") and "async" in mods:
        return None  # the asynchronous forms complete on an mbarrier: not a plain access
    address = next((o for o in instr.operands if isinstance(o, Address)), None)
    if address is None:
        return None
    return MemoryAccess(instr, _space(mods), kind, _width(mods), address, location)


# --------------------------------------------------------------------------
# asynchronous copies and hints

class Unsupported(Exception):
    """An instruction reaches memory in a way this layer cannot describe; the
    message says why."""


_HINTS = frozenset({"prefetch", "prefetchu"})
"""Instructions that name memory only as a hint: they move no data and cannot
fault, so they need no check (an out-of-range prefetch is not reported)."""

_TEXTURE_UNIT = frozenset({"tex", "tld4", "txq", "suq", "istypep"})
"""Texture fetches and texture/surface queries: they go through the texture
unit, which bounds every coordinate by the texture's own addressing mode, and
cannot fault on the program's memory: no access to check."""

_SURFACE = {"suld": AccessKind.READ, "sust": AccessKind.WRITE, "sured": AccessKind.ATOMIC}
"""Surface loads, stores and reductions: accesses (space ``surface``) that the
pass does not check and counts as not checked.  A surface is a CUDA array,
outside the allocation table; every surface instruction names what happens
to a coordinate outside it (``.trap``: the kernel faults; ``.clamp``: the
nearest element; ``.zero``: nothing is written, zero is read), so the
hardware keeps it inside the array whatever the coordinate."""

_SYNC_OBJECTS = frozenset({"mbarrier"})
"""Instructions on a synchronisation object (an mbarrier's 8 bytes of shared
memory) rather than on the program's data: like ``cp.async.mbarrier.arrive``,
not checked (skipping one would hang the threads waiting on it)."""


CP_ASYNC_SIZES = (4, 8, 16)
BULK_ALIGN = 16
"""cp.async.bulk: both addresses and the size are multiples of 16 bytes."""

_NO_MEMORY = frozenset({"commit_group", "wait_group", "wait_all"})
"""cp.async / cp.async.bulk forms that only order earlier copies."""


def _is_predicate(op: Operand, types: Mapping[str, str] | None) -> bool:
    if isinstance(op, Negated):
        return True
    return isinstance(op, Register) and types is not None and types.get(op.name) == ".pred"


def _cp_async(instr: Instruction, location: SourceLocation | None,
              types: Mapping[str, str] | None) -> tuple[MemoryAccess, ...]:
    """``cp.async.{ca,cg}.shared{::cta}.global [dst], [src], cp-size{, src-size |
    ignore-src}{, cache-policy}``: the destination write of cp-size bytes, and
    the source read of cp-size bytes (src-size when an immediate says so; at
    most cp-size, known at run time, when a register does; none when the
    ignore-src predicate is true)."""
    ops = instr.operands
    mods = instr.modifiers
    if "L2::cache_hint" in mods:
        ops = ops[:-1]
    if len(ops) not in (3, 4) or not isinstance(ops[0], Address) \
            or not isinstance(ops[1], Address) or not isinstance(ops[2], Immediate):
        raise Unsupported("expected [dst], [src], cp-size{, src-size | ignore-src}")
    cp_size = ops[2].value
    if not isinstance(cp_size, int) or cp_size not in CP_ASYNC_SIZES:
        raise Unsupported(f"cp-size {cp_size} is not 4, 8 or 16")
    dst = MemoryAccess(instr, "shared", AccessKind.WRITE, cp_size, ops[0], location)
    src_width = cp_size
    size: Register | None = None
    ignore: Register | Negated | None = None
    if len(ops) == 4:
        extra = ops[3]
        if _is_predicate(extra, types):
            assert isinstance(extra, (Register, Negated))
            ignore = extra
        elif isinstance(extra, Immediate) and isinstance(extra.value, int):
            src_width = min(extra.value, cp_size)
        elif isinstance(extra, Register):
            size = extra
        else:
            raise Unsupported(f"cannot tell whether {extra} is src-size or ignore-src")
    if src_width <= 0:
        return (dst,)  # src-size 0: nothing is read, the destination is zero-filled
    src = MemoryAccess(instr, "global", AccessKind.READ, src_width, ops[1], location,
                       align=cp_size, size=size, ignored_when=ignore)
    return dst, src


def _bulk_spaces(mods: tuple[str, ...]) -> tuple[str, str]:
    spaces = [m.split("::", 1)[0] for m in mods if m.split("::", 1)[0] in ("shared", "global")]
    if len(spaces) < 2:
        raise Unsupported("cannot tell the destination and source state spaces")
    return spaces[0], spaces[1]


def _cp_async_bulk(instr: Instruction,
                   location: SourceLocation | None) -> tuple[MemoryAccess, ...]:
    """The non-tensor ``cp.async.bulk`` forms (global -> shared::cluster/cta with
    an mbarrier, shared::cta -> global, shared::cta -> shared::cluster): the
    destination write and the source read of ``size`` bytes each."""
    mods = instr.modifiers
    dst_space, src_space = _bulk_spaces(mods[2:])
    ops = instr.operands
    if len(ops) < 3 or not isinstance(ops[0], Address) or not isinstance(ops[1], Address):
        raise Unsupported("expected [dst], [src], size, ...")
    n = ops[2]
    if isinstance(n, Immediate) and isinstance(n.value, int):
        width, size = n.value, None
    elif isinstance(n, Register):
        width, size = 0, n
    else:
        raise Unsupported(f"cannot read the size {n}")
    return (
        MemoryAccess(instr, dst_space, AccessKind.WRITE, width, ops[0], location,
                     align=BULK_ALIGN, size=size),
        MemoryAccess(instr, src_space, AccessKind.READ, width, ops[1], location,
                     align=BULK_ALIGN, size=size),
    )


def _copy_accesses(instr: Instruction, location: SourceLocation | None,
                   types: Mapping[str, str] | None) -> tuple[MemoryAccess, ...]:
    mods = instr.modifiers
    if mods[:1] != ("async",):
        raise Unsupported("only cp.async and cp.async.bulk copies are supported")
    if len(mods) > 1 and (mods[1] in _NO_MEMORY or mods[1] == "mbarrier"):
        return ()  # ordering and completion tracking: no data moves
    if mods[1:2] != ("bulk",):
        return _cp_async(instr, location, types)
    rest = mods[2:]
    if rest[:1] == ("prefetch",):
        return ()  # an L2 prefetch: a hint, no data moves
    if rest[:1] and rest[0] in _NO_MEMORY:
        return ()
    if "tensor" in rest:
        raise Unsupported("cp.async.bulk.tensor copies through a tensor map are not supported")
    if "multicast::cluster" in rest:
        raise Unsupported("a multicast bulk copy writes the shared memory (and completes the "
                          "mbarrier) of several blocks: not supported")
    return _cp_async_bulk(instr, location)


def _surface_access(instr: Instruction,
                    location: SourceLocation | None) -> tuple[MemoryAccess, ...]:
    surface = next((o for o in instr.operands if isinstance(o, TextureOperand)), None)
    if surface is None:
        raise Unsupported(f"'{instr.op}' without a [surface, coordinates] operand")
    mods = instr.modifiers
    return (MemoryAccess(instr, "surface", _SURFACE[instr.op], _width(mods), surface,
                         location),)


def instruction_accesses(instr: Instruction, location: SourceLocation | None = None,
                         types: Mapping[str, str] | None = None) -> tuple[MemoryAccess, ...]:
    """Every memory access ``instr`` makes, in operand order: one for a load,
    store or atomic (of a surface too: space ``surface``), the destination
    write then the source read for a copy (``cp.async``, ``cp.async.bulk``),
    none for an instruction that reaches no memory or only hints at it
    (``prefetch``, ``prefetchu``, the L2 prefetch of ``cp.async.bulk``, group
    and mbarrier bookkeeping) or that goes through the texture unit (``tex``,
    ``tld4``, ``txq``, ``suq``).

    ``types``: the function's register types (:func:`register_types`); they
    tell cp.async's ignore-src predicate from its src-size register.
    ``mbarrier`` instructions and the mbarrier operand of a copy are not
    accesses here: they act on a synchronisation object, not on data.
    Raises :class:`Unsupported` for an instruction that reaches memory in a
    way this layer cannot describe (see :func:`unsupported`)."""
    op = instr.op
    if op in _HINTS or op in _SYNC_OBJECTS or op in _TEXTURE_UNIT:
        return ()
    if op in _SURFACE:
        return _surface_access(instr, location)
    if op == "cp":
        return _copy_accesses(instr, location, types)
    access = memory_access(instr, location)
    if access is not None:
        return (access,)
    if op == "wgmma" and "mma_async" in instr.modifiers:
        raise Unsupported("wgmma reads shared memory through matrix descriptors")
    if any(isinstance(o, Address) for o in instr.operands):
        raise Unsupported(f"'{op}' reaches memory through an address operand")
    return ()


def unsupported(instr: Instruction, types: Mapping[str, str] | None = None) -> str | None:
    """Why the memory ``instr`` reaches cannot be described (``ldmatrix``,
    ``st.async``, ``cp.async.bulk.tensor`` ...), or None when
    :func:`instruction_accesses` describes all of it."""
    try:
        instruction_accesses(instr, None, types)
    except Unsupported as e:
        return str(e)
    return None


def call_target(instr: Instruction) -> str | None:
    """The function a ``call`` calls directly; None for an indirect call (a
    register target; the symbol after it is the prototype, not a callee)."""
    for o in instr.operands:
        if isinstance(o, Symbol):
            return o.name
        if isinstance(o, Register):
            return None
    return None


def register_types(fn: Function) -> dict[str, str]:
    """Declared type (``.b64``, ``.f32`` ...) of every register of ``fn``."""
    out: dict[str, str] = {}
    for s in walk(fn.body or []):
        if type(s) is RegisterDecl:
            for r in s.registers():
                out[r] = s.type
    return out


StatementPath = tuple[int, ...]
"""Where a statement sits: its index in the function body, then its index in
each nested ``{ }`` block around it."""


def located_instructions(
    module: Module, fn: Function, files: Mapping[int, str] | None = None
) -> Iterator[tuple[StatementPath, Instruction, SourceLocation | None]]:
    """Every instruction of ``fn`` in source order, nested blocks included,
    with its path and the ``.loc`` in effect there: the one place that tracks
    ``.loc``.  ``files``: ``module.files``, when the caller asks about many
    functions of one module (it is read once, not once per function)."""
    if files is None:
        files = module.files
    loc: SourceLocation | None = None

    def visit(stmts: list[Statement], path: StatementPath):
        nonlocal loc
        for i, s in enumerate(stmts):
            t = type(s)
            if t is Loc:
                loc = SourceLocation(files.get(s.file), s.line_no, s.column)
            elif t is Instruction:
                yield path + (i,), s, loc
            elif t is Block:
                yield from visit(s.statements, path + (i,))

    yield from visit(fn.body or [], ())


def memory_accesses(module: Module, fn: Function,
                    files: Mapping[int, str] | None = None) -> Iterator[MemoryAccess]:
    """The memory accesses of ``fn`` with the ``.loc`` in effect at each
    (instructions whose memory :func:`unsupported` cannot describe are left
    out); ``files`` as for :func:`located_instructions`."""
    types = register_types(fn)
    for _, instr, loc in located_instructions(module, fn, files):
        try:
            yield from instruction_accesses(instr, loc, types)
        except Unsupported:
            continue
