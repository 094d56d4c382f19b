"""The PTX syntax tree: what the parser builds, the printer prints and passes rewrite.

Two kinds of equality matter and are kept apart:

* *Structure* (opcodes, operands, declarations) is what ``==`` compares, so
  ``parse(emit(m)) == m`` holds and passes can compare instructions.
* *Layout* (the exact text a node was parsed from, the whitespace and comments
  before it) is kept in fields that ``==`` ignores.  The printer reuses a node's
  source text while the node is the one the parser made; any node a pass builds
  (``dataclasses.replace`` included, since ``raw`` is not an init field) is
  printed in a canonical form.  That is what makes ``emit(parse(text)) == text``
  exact for compiler output while a modified tree still prints as valid PTX.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from typing import Union

# --------------------------------------------------------------------------
# Types


SCALAR_SIZES: dict[str, int] = {
    "b8": 1, "u8": 1, "s8": 1,
    "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8,
    "b128": 16,
    "pred": 1,
    "e4m3x2": 2, "e5m2x2": 2,
}
"""Byte size of each PTX fundamental type, keyed without the leading dot."""

VECTOR_WIDTHS: dict[str, int] = {"v2": 2, "v4": 4, "v8": 8}


def type_size(type_: str) -> int:
    """Byte size of a type such as ``.f32`` or ``f32``; raises KeyError if unknown."""
    return SCALAR_SIZES[type_.lstrip(".")]


# --------------------------------------------------------------------------
# Operands


@dataclass(frozen=True, slots=True)
class Register:
    """A register or special register operand: ``%r1``, ``%tid.x``, ``%SP``."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Symbol:
    """A name used as an operand: a variable, a function, a label, a prototype."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Immediate:
    """A numeric literal, kept as written (``0fBF800000``, ``-1``, ``0xFFU``)."""

    text: str

    @property
    def value(self) -> int | float:
        return literal_value(self.text)

    @classmethod
    def integer(cls, value: int) -> Immediate:
        return cls(str(value))

    @classmethod
    def f32(cls, value: float) -> Immediate:
        return cls("0f" + struct.pack(">f", value).hex().upper())

    @classmethod
    def f64(cls, value: float) -> Immediate:
        return cls("0d" + struct.pack(">d", value).hex().upper())

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Sink:
    """The ``_`` operand: a result that is thrown away."""

    def __str__(self) -> str:
        return "_"


@dataclass(frozen=True, slots=True)
class Vector:
    """A brace-enclosed operand list: ``{%f1, %f2, %f3, %f4}``."""

    items: tuple[Operand, ...]

    def __str__(self) -> str:
        return "{" + ", ".join(str(i) for i in self.items) + "}"


@dataclass(frozen=True, slots=True)
class Address:
    """A memory operand ``[base+offset]``; ``base`` is None for ``[imm]``."""

    base: Register | Symbol | None
    offset: int = 0

    def __str__(self) -> str:
        if self.base is None:
            return f"[{self.offset}]"
        if self.offset == 0:
            return f"[{self.base}]"
        return f"[{self.base}+{self.offset}]"


@dataclass(frozen=True, slots=True)
class SymbolOffset:
    """``name+imm`` used as a value operand (``mov.u64 %rd1, table+8``)."""

    name: str
    offset: int

    def __str__(self) -> str:
        return f"{self.name}+{self.offset}" if self.offset >= 0 else f"{self.name}{self.offset}"


@dataclass(frozen=True, slots=True)
class Negated:
    """A complemented predicate operand: ``!%p1``."""

    operand: Register

    def __str__(self) -> str:
        return f"!{self.operand}"


@dataclass(frozen=True, slots=True)
class PredicatePair:
    """Two destinations, the second a predicate: ``setp``'s ``%p1|%p2``
    (inline asm may name its registers without ``%``: ``r0|p``, which parse
    as :class:`Symbol`), a texture fetch's ``{%f1, %f2, %f3, %f4}|%p``."""

    first: Register | Symbol | Sink | Vector
    second: Register | Symbol | Sink

    def __str__(self) -> str:
        return f"{self.first}|{self.second}"


@dataclass(frozen=True, slots=True)
class ArgumentList:
    """A parenthesised list in ``call``: ``(retval0)``, ``(param0, param1)``."""

    items: tuple[Operand, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(str(i) for i in self.items) + ")"


@dataclass(frozen=True, slots=True)
class TextureOperand:
    """The bracketed operand of a texture or surface instruction: the texture
    or surface (a ``.texref``/``.surfref`` name or a 64-bit object in a
    register), a sampler in independent mode, then the coordinates:
    ``[%rd2, {%f4, %f2}]``, ``[tex, smp, {%f1}]``, ``[%rd1, {%r1, %r2}]``."""

    items: tuple[Operand, ...]

    def __str__(self) -> str:
        return "[" + ", ".join(str(i) for i in self.items) + "]"


Operand = Union[
    Register, Symbol, Immediate, Sink, Vector, Address, SymbolOffset, Negated,
    PredicatePair, ArgumentList, TextureOperand,
]


def literal_value(text: str) -> int | float:
    """The value of a PTX numeric literal."""
    t = text
    neg = t.startswith("-")
    if neg:
        t = t[1:]
    if t[:2] in ("0f", "0F"):
        v: int | float = struct.unpack(">f", bytes.fromhex(t[2:]))[0]
    elif t[:2] in ("0d", "0D"):
        v = struct.unpack(">d", bytes.fromhex(t[2:]))[0]
    else:
        if t.endswith("U"):
            t = t[:-1]
        if t[:2] in ("0x", "0X"):
            v = int(t[2:], 16)
        elif t[:2] in ("0b", "0B"):
            v = int(t[2:], 2)
        elif "." in t or "e" in t or "E" in t:
            v = float(t)
        elif len(t) > 1 and t[0] == "0":
            v = int(t[1:], 8)
        else:
            v = int(t)
    if neg:
        v = -v
    if isinstance(v, float) and math.isnan(v) and neg:
        v = -v
    return v


# --------------------------------------------------------------------------
# Statements in function bodies

DEFAULT_LEAD = "\n\t"

_BASE_OPCODE: dict[str, str] = {}
"""Full opcode -> base opcode: one string for all the ``ld`` of a module."""


@dataclass(frozen=True, slots=True)
class Guard:
    """``@%p`` or ``@!%p`` in front of an instruction."""

    register: str
    negated: bool = False

    def __str__(self) -> str:
        return f"@{'!' if self.negated else ''}{self.register}"


@dataclass(frozen=True, slots=True)
class Instruction:
    """One PTX instruction.  ``opcode`` is the full dotted name (``ld.global.v4.f32``)."""

    opcode: str
    operands: tuple[Operand, ...] = ()
    guard: Guard | None = None
    line: int = field(default=0, compare=False)
    lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)
    op: str = field(default="", init=False, compare=False, repr=False)
    """The base opcode: ``ld`` for ``ld.global.v4.f32`` (asked for every
    instruction by every pass: computed once)."""

    def __post_init__(self) -> None:
        op = _BASE_OPCODE.get(self.opcode)
        if op is None:
            if len(_BASE_OPCODE) > 1 << 14:
                _BASE_OPCODE.clear()
            op = _BASE_OPCODE[self.opcode] = self.opcode.partition(".")[0]
        object.__setattr__(self, "op", op)

    @property
    def modifiers(self) -> tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])

    def canonical(self) -> str:
        head = f"{self.guard} {self.opcode}" if self.guard else self.opcode
        if not self.operands:
            return head + ";"
        return head + " \t" + ", ".join(str(o) for o in self.operands) + ";"


@dataclass(frozen=True, slots=True)
class Label:
    name: str
    line: int = field(default=0, compare=False)
    lead: str = field(default="\n", compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        return f"{self.name}:"


@dataclass(frozen=True, slots=True)
class RegisterDecl:
    """``.reg .b32 %r<12>;`` or ``.reg .f32 %f1, %f2;``.

    ``names`` holds ``(name, count)``; ``count`` is the N of a ``<N>`` range
    (registers ``name0 .. name{N-1}``) or None for a single register.
    """

    type: str
    names: tuple[tuple[str, int | None], ...]
    vector: str | None = None
    line: int = field(default=0, compare=False)
    lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def registers(self) -> list[str]:
        out: list[str] = []
        for name, count in self.names:
            if count is None:
                out.append(name)
            else:
                out.extend(f"{name}{i}" for i in range(count))
        return out

    def canonical(self) -> str:
        names = ", ".join(n if c is None else f"{n}<{c}>" for n, c in self.names)
        vec = f"{self.vector} " if self.vector else ""
        return f".reg {vec}{self.type} \t{names};"


Initializer = Union[str, tuple["Initializer", ...]]
"""A variable initializer: a scalar's text (``1``, ``0f3F800000``, ``generic(a)+8``)
or a brace list of initializers."""


@dataclass(frozen=True, slots=True)
class Variable:
    """A variable declaration in any state space, at module or function scope."""

    space: str  # ".global", ".shared", ".const", ".local", ".param", ".tex"
    type: str  # ".f32", ".b8", ".texref", ...
    name: str
    align: int | None = None
    vector: str | None = None
    dims: tuple[int | None, ...] = ()  # None for an unsized [] dimension
    init: Initializer | None = None
    linkage: tuple[str, ...] = ()  # ".visible", ".extern", ".weak", ".common"
    attributes: tuple[str, ...] = ()  # e.g. ".attribute(.managed)", ".ptr"
    line: int = field(default=0, compare=False)
    lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def element_size(self) -> int:
        size = type_size(self.type)
        return size * VECTOR_WIDTHS[self.vector[1:]] if self.vector else size

    @property
    def size(self) -> int | None:
        """Byte size, or None when a dimension is unsized (``extern .shared x[]``)."""
        n = self.element_size
        for d in self.dims:
            if d is None:
                return None
            n *= d
        return n

    def canonical(self) -> str:
        parts = list(self.linkage) + [self.space] + list(self.attributes)
        if self.align is not None:
            parts.append(f".align {self.align}")
        if self.vector:
            parts.append(self.vector)
        parts.append(self.type)
        text = " ".join(parts) + " " + self.name
        text += "".join("[]" if d is None else f"[{d}]" for d in self.dims)
        if self.init is not None:
            text += " = " + format_initializer(self.init)
        return text + ";"


def format_initializer(init: Initializer) -> str:
    if isinstance(init, str):
        return init
    return "{" + ", ".join(format_initializer(i) for i in init) + "}"


@dataclass(frozen=True, slots=True)
class Loc:
    """``.loc file line column[, function_name X, inlined_at f l c]``."""

    file: int
    line_no: int
    column: int
    function_name: str | None = None
    inlined_at: tuple[int, int, int] | None = None
    line: int = field(default=0, compare=False)
    lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        text = f".loc\t{self.file} {self.line_no} {self.column}"
        if self.function_name is not None:
            text += f", function_name {self.function_name}"
        if self.inlined_at is not None:
            text += ", inlined_at {} {} {}".format(*self.inlined_at)
        return text


@dataclass(frozen=True, slots=True)
class Pragma:
    """``.pragma "nounroll";`` (several strings allowed)."""

    strings: tuple[str, ...]
    line: int = field(default=0, compare=False)
    lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        return ".pragma " + ", ".join(self.strings) + ";"


@dataclass(frozen=True, slots=True)
class Targets:
    """``.branchtargets L1, L2;`` or ``.calltargets f, g;`` (follows a label)."""

    kind: str  # ".branchtargets" or ".calltargets"
    names: tuple[str, ...]
    line: int = field(default=0, compare=False)
    lead: str = field(default=" ", compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        return f"{self.kind} " + ", ".join(self.names) + ";"


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter of an ``.entry``/``.func``/prototype: ``.param .align 8 .b8 s[16]``."""

    name: str
    type: str
    space: str = ".param"  # ".param" or ".reg"
    align: int | None = None
    dims: tuple[int, ...] = ()
    ptr: tuple[str, ...] = ()  # pointer attributes: (".ptr", ".global", ".align", "16")
    vector: str | None = None

    @property
    def size(self) -> int:
        n = type_size(self.type)
        if self.vector:
            n *= VECTOR_WIDTHS[self.vector[1:]]
        for d in self.dims:
            n *= d
        return n

    @property
    def alignment(self) -> int:
        """The alignment in bytes: explicit ``.align`` or the element size."""
        if self.align is not None:
            return self.align
        n = type_size(self.type)
        return n * VECTOR_WIDTHS[self.vector[1:]] if self.vector else n

    def canonical(self) -> str:
        parts = [self.space]
        if self.align is not None:
            parts.append(f".align {self.align}")
        if self.vector:
            parts.append(self.vector)
        parts.append(self.type)
        parts.extend(self.ptr)
        return " ".join(parts) + " " + self.name + "".join(f"[{d}]" for d in self.dims)


@dataclass(frozen=True, slots=True)
class Prototype:
    """``proto : .callprototype (.param .b32 _) _ (.param .b64 _);``."""

    name: str
    returns: tuple[Param, ...] | None
    params: tuple[Param, ...]
    attributes: tuple[str, ...] = ()  # e.g. (".noreturn",)
    line: int = field(default=0, compare=False)
    lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        text = f"{self.name} : .callprototype"
        if self.returns is not None:
            text += " (" + ", ".join(p.canonical() for p in self.returns) + ")"
        text += " _ (" + ", ".join(p.canonical() for p in self.params) + ")"
        for a in self.attributes:
            text += " " + a
        return text + ";"


@dataclass(slots=True)
class Block:
    """A nested ``{ ... }`` scope (call sequences, inline asm)."""

    statements: list[Statement]
    line: int = field(default=0, compare=False)
    lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)
    close_lead: str = field(default=DEFAULT_LEAD, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Verbatim:
    """Statements a pass wrote and printed at once, kept as their text.

    The parser never makes one.  The bounds-check pass keeps each
    out-of-line slow path this way: most of the code it adds, which no
    later step looks into, held as one string rather than as a few dozen
    nodes (a module with a million checked accesses would otherwise hold
    tens of millions of them).  ``text`` carries its own line breaks.
    """

    text: str
    line: int = field(default=0, compare=False)
    lead: str = field(default="", compare=False, repr=False)

    @property
    def raw(self) -> str:
        return self.text

    def canonical(self) -> str:
        return self.text


Statement = Union[
    Instruction, Label, RegisterDecl, Variable, Loc, Pragma, Targets, Prototype, Block, Verbatim
]


# --------------------------------------------------------------------------
# Module-level items


@dataclass(frozen=True, slots=True)
class Version:
    text: str  # "8.5"
    line: int = field(default=0, compare=False)
    lead: str = field(default="\n", compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def number(self) -> tuple[int, int]:
        major, minor = self.text.split(".")
        return int(major), int(minor)

    def canonical(self) -> str:
        return f".version {self.text}"


@dataclass(frozen=True, slots=True)
class Target:
    targets: tuple[str, ...]  # ("sm_90a",) or ("sm_75", "texmode_independent", "debug")
    line: int = field(default=0, compare=False)
    lead: str = field(default="\n", compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        return ".target " + ", ".join(self.targets)


@dataclass(frozen=True, slots=True)
class AddressSize:
    bits: int
    line: int = field(default=0, compare=False)
    lead: str = field(default="\n", compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        return f".address_size {self.bits}"


@dataclass(frozen=True, slots=True)
class File:
    """``.file 1 "k.cu"`` with optional ``, timestamp, size``."""

    index: int
    name: str  # without quotes
    extra: tuple[int, ...] = ()
    line: int = field(default=0, compare=False)
    lead: str = field(default="\n", compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    def canonical(self) -> str:
        text = f'.file\t{self.index} "{self.name}"'
        return text + "".join(f", {x}" for x in self.extra)


@dataclass(frozen=True, slots=True)
class SectionEntry:
    """One line of a ``.section`` body: a label, or a ``.bN`` data list.

    Data values are kept as text: numbers, labels and label differences
    (``$L__info_end0-$L__info_start0``).
    """

    label: str | None = None
    type: str | None = None
    values: tuple[str, ...] = ()

    def canonical(self) -> str:
        if self.label is not None:
            return f"{self.label}:"
        return f"{self.type} " + ",".join(self.values)


_SECTION_VALUE = r"(?:-?[0-9][\w]*|\.?[A-Za-z_$][\w$]*(?:[ \t]*[+-][ \t]*\.?[\w$]+)*)"
_SECTION_ENTRY = (
    r"([A-Za-z_$][\w$]*)[ \t]*:(?!:)"
    rf"|(\.b(?:8|16|32|64))[ \t]+({_SECTION_VALUE}(?:[ \t]*,[ \t]*{_SECTION_VALUE})*)[ \t]*;?"
)
_SECTION_TRIVIA = r"(?:[ \t\r\n]+|//[^\n]*)*"
# Without capturing groups: the match cannot fail (everything is optional), so
# the greedy pass never backtracks.
SECTION_BODY = re.compile(
    rf"(?:{_SECTION_TRIVIA}(?:{_SECTION_ENTRY.replace('(', '(?:').replace('(?:?', '(?')}))*"
    rf"{_SECTION_TRIVIA}"
)
"""A whole ``.section`` body: labels and data lists separated by trivia."""
_SECTION_ENTRY_RE = re.compile(_SECTION_ENTRY)


@dataclass(frozen=True, slots=True)
class Section:
    """A DWARF ``.section .debug_x { ... }`` block as emitted under ``-G``.

    ``body`` is the exact text between the braces (checked by the parser to
    match :data:`SECTION_BODY`); ``entries`` reads it on demand, since -G
    modules carry tens of thousands of data lines that passes never look at.
    """

    name: str
    body: str
    line: int = field(default=0, compare=False)
    lead: str = field(default="\n", compare=False, repr=False)
    raw: str | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def entries(self) -> tuple[SectionEntry, ...]:
        out = []
        for label, type_, values in _SECTION_ENTRY_RE.findall(self.body):
            if label:
                out.append(SectionEntry(label=label))
            else:
                out.append(SectionEntry(type=type_, values=tuple(
                    v.strip() for v in values.split(","))))
        return tuple(out)

    @classmethod
    def from_entries(cls, name: str, entries: tuple[SectionEntry, ...]) -> Section:
        return cls(name, "".join("\n" + e.canonical() for e in entries) + "\n")

    def canonical(self) -> str:
        return f".section {self.name}\n{{{self.body}}}"


@dataclass(slots=True)
class Function:
    """An ``.entry`` (kernel) or ``.func`` (device function); ``body`` is None
    for a declaration (``.extern .func f(...);``)."""

    kind: str  # ".entry" or ".func"
    name: str
    params: list[Param]
    returns: list[Param] | None = None
    linkage: tuple[str, ...] = ()
    directives: tuple[tuple[str, tuple[int, ...]], ...] = ()  # performance tuning
    body: list[Statement] | None = None
    line: int = field(default=0, compare=False)
    lead: str = field(default="\n", compare=False, repr=False)
    body_lead: str = field(default="\n", compare=False, repr=False)
    close_lead: str = field(default="\n", compare=False, repr=False)
    header_raw: str | None = field(default=None, compare=False, repr=False)
    header_key: tuple | None = field(default=None, compare=False, repr=False)

    @property
    def is_kernel(self) -> bool:
        return self.kind == ".entry"

    def header_state(self) -> tuple:
        """What the header prints from; the printer reuses ``header_raw`` only
        while this still equals the state the parser recorded."""
        return (
            self.kind, self.name, tuple(self.params),
            None if self.returns is None else tuple(self.returns),
            self.linkage, self.directives,
        )

    def canonical_header(self) -> str:
        parts = list(self.linkage) + [self.kind]
        text = " ".join(parts)
        if self.returns is not None:
            text += " (" + ", ".join(p.canonical() for p in self.returns) + ")"
        text += " " + self.name
        if self.params or self.kind == ".entry":
            text += "(\n" + ",\n".join("\t" + p.canonical() for p in self.params) + "\n)"
        for name, values in self.directives:
            text += "\n" + name + (" " + ", ".join(str(v) for v in values) if values else "")
        return text


Item = Union[Version, Target, AddressSize, File, Variable, Function, Section, Pragma]


@dataclass(slots=True)
class Module:
    """A whole PTX module: its items in source order and the text after the last."""

    items: list[Item]
    trailing: str = ""

    def _first(self, cls: type) -> object | None:
        for item in self.items:
            if isinstance(item, cls):
                return item
        return None

    @property
    def version(self) -> Version | None:
        return self._first(Version)  # type: ignore[return-value]

    @property
    def target(self) -> Target | None:
        return self._first(Target)  # type: ignore[return-value]

    @property
    def address_size(self) -> int:
        item = self._first(AddressSize)
        return item.bits if isinstance(item, AddressSize) else 32

    @property
    def functions(self) -> list[Function]:
        return [i for i in self.items if isinstance(i, Function)]

    @property
    def variables(self) -> list[Variable]:
        return [i for i in self.items if isinstance(i, Variable)]

    @property
    def files(self) -> dict[int, str]:
        return {i.index: i.name for i in self.items if isinstance(i, File)}

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name and f.body is not None:
                return f
        raise KeyError(name)
