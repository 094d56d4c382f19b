"""The one definition of every record the instrumented kernel and the host share.

Like AddressSanitizer's shadow layout, this is the small, versioned interface
where the pass (``gpusafe_instrument/checks/``), the device runtime
(``runtime_cu/gpusafe_runtime.cu``) and the host side (``gpusafe_instrument/host.py``,
later ``gpusafe run``) meet.  Everything below is produced from the tables in
this module:

* Python: :attr:`Record.format` (``struct``), :attr:`Record.dtype` (numpy),
  :meth:`Record.offset`, :attr:`Record.size`;
* CUDA: :func:`c_header` writes ``runtime_cu/gpusafe_layout.h`` (structs with
  ``static_assert``-ed sizes and offsets, and every constant below), which
  ``scripts/build_runtime.py`` regenerates; a test proves it is current.

All records are little-endian with natural alignment and no implicit padding
(every padding field is spelled out), so the byte layout is the same in C,
``struct`` and numpy.

Memory picture of one launch (all in device global memory)::

    hidden kernel param (.u64) ──▶ LaunchContext
                                     ├─ violations ──▶ ViolationBuffer header
                                     │                 + ViolationRecord[capacity]
                                     │                 (SiteTally[tally_count] below the
                                     │                  header: tally t at tally_offset(t))
                                     ├─ table ──▶ AllocationEntry[table_len] (sorted by base)
                                     ├─ heap ──▶ HeapHeader + HeapEntry[capacity] + u64 ring[]
                                     │           (the context's in-kernel malloc blocks, kept
                                     │            across launches; 0 before the first one)
                                     ├─ RootBounds[root_count]   (one per pointer root)
                                     └─ u64 limits[limit_count]  (one per check slot)

A *root* is a pointer-valued kernel parameter, or an 8-byte pointer at a byte
offset inside a by-value struct parameter, that the pass found used as the
base of memory accesses.  Its :data:`ROOT_BOUNDS` record holds the allocation
the host resolved the pointer to (``tag == 0``: none found; the device then
looks the address up in the table).

A *check slot* is what the fast path compares against: a set of roots, an end
offset ``k`` and an alignment ``a``.  Its limit is the number of valid start
offsets ``off`` (relative to the pointer value ``p`` of each root) of an
access ending at most ``k`` bytes after ``off``::

    limit = min over roots r of max(0, high_r - p_r - k + 1)

and 0 (every access goes to the precise slow path) when a root is unresolved,
freed, or ``p_r`` is not aligned to ``a``.  The kernel checks ``off < limit``
with one unsigned compare: a negative offset wraps to a huge value and fails,
so the slow path (the runtime, which knows the true bounds) decides.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .kinds import ViolationKind
from .nodes import SCALAR_SIZES

LAYOUT_VERSION = 4
"""Bumped whenever a record below changes; written into the C header."""

_UNSIGNED_BY_SIZE = {
    1: ("unsigned char", "B"),
    2: ("unsigned short", "H"),
    4: ("unsigned int", "I"),
    8: ("unsigned long long", "Q"),
}
"""How C and ``struct`` spell an unsigned integer of each byte size."""


def _c_type(ptx_type: str) -> str:
    return _UNSIGNED_BY_SIZE[SCALAR_SIZES[ptx_type]][0]


def _struct_code(ptx_type: str) -> str:
    return _UNSIGNED_BY_SIZE[SCALAR_SIZES[ptx_type]][1]


def _numpy_type(ptx_type: str) -> np.dtype:
    return np.dtype(f"<u{SCALAR_SIZES[ptx_type]}")


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # an unsigned PTX type without the dot: u8, u16, u32, u64 (sizes: nodes.SCALAR_SIZES)
    count: int = 1
    doc: str = ""

    @property
    def size(self) -> int:
        return SCALAR_SIZES[self.type] * self.count


@dataclass(frozen=True)
class Record:
    """A C struct with a fixed byte layout.  Its size, offsets and ``struct``
    format are computed once (cached properties): the host packs and reads
    records on every launch."""

    name: str  # the C struct name
    fields: tuple[Field, ...]
    doc: str = ""

    @cached_property
    def size(self) -> int:
        return sum(f.size for f in self.fields)

    @cached_property
    def _offsets(self) -> dict[str, int]:
        out, off = {}, 0
        for f in self.fields:
            out[f.name] = off
            off += f.size
        return out

    def offset(self, field_name: str) -> int:
        try:
            return self._offsets[field_name]
        except KeyError:
            raise KeyError(f"{self.name} has no field {field_name!r}") from None

    @cached_property
    def format(self) -> str:
        """The ``struct`` format (little-endian, no implicit padding)."""
        out = "<"
        for f in self.fields:
            code = _struct_code(f.type)
            out += f"{f.count}{code}" if f.count > 1 else code
        return out

    @cached_property
    def dtype(self) -> np.dtype:
        """A numpy structured dtype with the same layout."""
        parts = []
        for f in self.fields:
            base = _numpy_type(f.type)
            parts.append((f.name, base, (f.count,)) if f.count > 1 else (f.name, base))
        dt = np.dtype(parts, align=False)
        assert dt.itemsize == self.size
        return dt

    def pack(self, **values: int | tuple[int, ...]) -> bytes:
        flat: list[int] = []
        for f in self.fields:
            v = values.get(f.name, 0)
            if f.count > 1:
                seq = tuple(v) if not isinstance(v, int) else (v,) * f.count
                if len(seq) != f.count:
                    raise ValueError(f"{self.name}.{f.name} takes {f.count} values")
                flat.extend(int(x) for x in seq)
            else:
                flat.append(int(v))  # type: ignore[arg-type]
        return struct.pack(self.format, *flat)

    def unpack(self, data: bytes, offset: int = 0) -> dict[str, int | tuple[int, ...]]:
        values = struct.unpack_from(self.format, data, offset)
        out: dict[str, int | tuple[int, ...]] = {}
        i = 0
        for f in self.fields:
            if f.count > 1:
                out[f.name] = tuple(values[i:i + f.count])
                i += f.count
            else:
                out[f.name] = values[i]
                i += 1
        return out

    def c_definition(self) -> str:
        lines = []
        if self.doc:
            lines.append(f"/* {self.doc} */")
        lines.append(f"typedef struct {self.name} {{")
        for f in self.fields:
            arr = f"[{f.count}]" if f.count > 1 else ""
            doc = f"  /* {f.doc} */" if f.doc else ""
            lines.append(f"    {_c_type(f.type)} {f.name}{arr};{doc}")
        lines.append(f"}} {self.name};")
        # The size equals the sum of the field sizes: no padding anywhere, so
        # every offset is the running sum that Record.offset computes.
        lines.append(
            f'static_assert(sizeof({self.name}) == {self.size}, "layout of {self.name}");'
        )
        return "\n".join(lines)


# --------------------------------------------------------------------------
# The records

LAUNCH_CONTEXT = Record(
    "gpusafe_launch_context",
    (
        Field("violations", "u64", doc="-> gpusafe_violation_buffer"),
        Field("table", "u64", doc="-> gpusafe_allocation_entry[table_len], sorted by base"),
        Field("table_len", "u32"),
        Field("dynamic_shared_size", "u32", doc="bytes of dynamic shared memory of the launch"),
        Field("root_count", "u32", doc="gpusafe_root_bounds records that follow this header"),
        Field("limit_count", "u32", doc="u64 check-slot limits that follow the roots"),
        Field("heap", "u64", doc="-> gpusafe_heap_header: the device heap's blocks"),
        Field("origin", "u32", doc="the host's number for this launch's kernel and site table"),
        Field("reserved", "u32"),
    ),
    "Launch context: the hidden kernel parameter points here. Followed by "
    "gpusafe_root_bounds[root_count] and unsigned long long limits[limit_count].",
)

ROOT_BOUNDS = Record(
    "gpusafe_root_bounds",
    (
        Field("low", "u64", doc="first byte of the allocation the root points into"),
        Field("high", "u64", doc="one past its last byte"),
        Field("tag", "u32", doc="its allocation tag; 0: unresolved (look the address up)"),
        Field("state", "u32", doc="ALLOC_LIVE or ALLOC_FREED"),
    ),
    "Bounds of one pointer root (kernel pointer parameter) for this launch.",
)

ALLOCATION_ENTRY = Record(
    "gpusafe_allocation_entry",
    (
        Field("base", "u64"),
        Field("size", "u64"),
        Field("tag", "u32"),
        Field("state", "u32", doc="ALLOC_LIVE or ALLOC_FREED"),
    ),
    "One allocation of the device allocation table (sorted by base, non-overlapping).",
)

VIOLATION_BUFFER = Record(
    "gpusafe_violation_buffer",
    (
        Field("count", "u32", doc="records claimed (atomic); may exceed capacity"),
        Field("capacity", "u32", doc="records the buffer holds"),
        Field("dropped", "u32", doc="records lost because the buffer was full"),
        Field("reserved", "u32"),
    ),
    "Violation buffer header; gpusafe_violation_record[capacity] follow it.",
)

VIOLATION_RECORD = Record(
    "gpusafe_violation_record",
    (
        Field("kind", "u32", doc="ViolationKind code"),
        Field("site", "u32", doc="site id (index into the site table)"),
        Field("address", "u64"),
        Field("width", "u32", doc="bytes of the access"),
        Field("tag", "u32", doc="allocation tag involved, 0 if none"),
        Field("thread", "u32", 3, doc="threadIdx x, y, z"),
        Field("block", "u32", 3, doc="blockIdx x, y, z"),
    ),
    "One violation, as written by the device runtime.",
)

SITE_TALLY = Record(
    "gpusafe_site_tally",
    (
        Field("count", "u32", doc="failed accesses at the site this launch (atomic), exact"),
        Field("reserved", "u32"),
    ),
    "One tally of an inline check site (issue 14, design B): the count, then "
    "gpusafe_offender[TALLY_OFFENDERS], the first offenders in the order they counted. "
    "Tally t lies (t + 1) tallies below the violation buffer's header.",
)

OFFENDER = Record(
    "gpusafe_offender",
    (
        Field("address", "u64"),
        Field("thread", "u32", doc="tid.x | tid.y << 10 | tid.z << 20"),
        Field("block_x", "u32", doc="ctaid.x"),
        Field("block_yz", "u32", doc="ctaid.y | ctaid.z << 16"),
        Field("descriptor", "u32", doc="an argument site's window descriptor; else 0"),
    ),
    "One offender of a site tally: the kind and the allocation are classified on the host "
    "(for an access through a decided parameter, from the window descriptor its caller "
    "passed: a root's bounds offset in the launch context, or a variable's kind).",
)

CHECK_RESULT = Record(
    "gpusafe_check_result",
    (
        Field("low", "u64", doc="window of the allocation found (unknown-provenance cache)"),
        Field("high", "u64"),
        Field("status", "u32", doc="0: perform the access; else the ViolationKind code recorded"),
        Field("reserved", "u32"),
    ),
    "What __gpusafe_check returns to the instrumented code.",
)

HEAP_HEADER = Record(
    "gpusafe_heap_header",
    (
        Field("count", "u32", doc="entries claimed (atomic); may exceed capacity"),
        Field("capacity", "u32", doc="gpusafe_heap_entry records that follow this header"),
        Field("unrecorded", "u32", doc="blocks malloc returned that found no free entry"),
        Field("ring_head", "u32", doc="frees so far (atomic): the next quarantine slot"),
        Field("ring_size", "u32", doc="u64 quarantine slots that follow the entries"),
        Field("reserved", "u32"),
    ),
    "The device heap table, one per context, kept across launches: "
    "gpusafe_heap_entry[capacity] then unsigned long long ring[ring_size] follow it.",
)

HEAP_ENTRY = Record(
    "gpusafe_heap_entry",
    (
        Field("base", "u64", doc="what malloc returned to the program"),
        Field("size", "u64", doc="bytes the program asked for (a red zone follows)"),
        Field("tag", "u32", doc="HEAP_TAG_BASE + the entry's index"),
        Field("state", "u32", doc="0 while being written, then ALLOC_LIVE or ALLOC_FREED"),
        Field("alloc_site", "u32", doc="site id of the malloc call"),
        Field("alloc_origin", "u32", doc="launch context origin of the malloc call"),
        Field("free_site", "u32", doc="site id of the free call"),
        Field("free_origin", "u32", doc="launch context origin of the free call"),
    ),
    "One block of the device heap (in-kernel malloc), in the order they were made.",
)

RECORDS: tuple[Record, ...] = (
    LAUNCH_CONTEXT, ROOT_BOUNDS, ALLOCATION_ENTRY, VIOLATION_BUFFER, VIOLATION_RECORD,
    SITE_TALLY, OFFENDER, CHECK_RESULT, HEAP_HEADER, HEAP_ENTRY,
)

# --------------------------------------------------------------------------
# Constants shared by both sides

ALLOC_LIVE = 1
ALLOC_FREED = 2

NULL_PAGE = 4096

TALLY_OFFENDERS = 4
"""Offenders a site tally keeps (the first ones to count): priced over the
corpus as cheap as one when each has a store block of its own."""

HEAP_TAG_BASE = 0x8000_0000
"""Tags of device-heap blocks: this plus the block's heap table index (the
registry's tags count up from 1 and never get there)."""
HEAP_RED_ZONE = 64
"""Bytes the device runtime adds to every in-kernel malloc: an overflow lands
in them, not in the next block."""
HEAP_CAPACITY = 1 << 16
"""Entries of a context's heap table: in-kernel mallocs recorded."""
HEAP_RING = 4096
"""Device-freed blocks kept from reuse (the quarantine): the oldest is given
back to the device heap when a free needs its slot."""
"""Addresses below this are the null page: an access there is ``null-pointer``."""

EMPTY_WINDOW = (2**64 - 1, 2**63)
"""(low, high) of the unknown-provenance cache window that contains nothing."""

# How __gpusafe_check judges an access: bits 0..2 of ``how``.
MODE_ROOT = 1  # bounds of root number (how >> 8) in the launch context
MODE_WINDOW = 2  # the [lo, hi) given by the caller (a variable's extent)
MODE_UNKNOWN = 3  # look the address up (allocation table / shared window)
MODE_ARGUMENT = 4  # a local address against the [lo, hi) the caller passed; else as UNKNOWN

HOW_GENERIC = 8
"""Bit 3 of ``how``: the address is a generic address."""

# Bits 4..7 of ``how``: the state space judged against (MODE_WINDOW: the
# variable's space; MODE_UNKNOWN: the access's space; MODE_ROOT: global).
SPACE_GLOBAL = 1
SPACE_SHARED = 2
SPACE_LOCAL = 3
SPACE_GENERIC = 4

SPACE_CODES = {"global": SPACE_GLOBAL, "shared": SPACE_SHARED, "local": SPACE_LOCAL,
               "generic": SPACE_GENERIC}


def how(mode: int, space: str, generic: bool, index: int = 0) -> int:
    """The ``how`` argument of ``__gpusafe_check``."""
    return mode | (HOW_GENERIC if generic else 0) | (SPACE_CODES[space] << 4) | (index << 8)


CONSTANTS: dict[str, int] = {
    "GPUSAFE_LAYOUT_VERSION": LAYOUT_VERSION,
    "GPUSAFE_ALLOC_LIVE": ALLOC_LIVE,
    "GPUSAFE_ALLOC_FREED": ALLOC_FREED,
    "GPUSAFE_NULL_PAGE": NULL_PAGE,
    "GPUSAFE_HEAP_TAG_BASE": HEAP_TAG_BASE,
    "GPUSAFE_TALLY_OFFENDERS": TALLY_OFFENDERS,
    "GPUSAFE_HEAP_RED_ZONE": HEAP_RED_ZONE,
    "GPUSAFE_EMPTY_LOW": EMPTY_WINDOW[0],
    "GPUSAFE_EMPTY_HIGH": EMPTY_WINDOW[1],
    "GPUSAFE_MODE_ROOT": MODE_ROOT,
    "GPUSAFE_MODE_WINDOW": MODE_WINDOW,
    "GPUSAFE_MODE_UNKNOWN": MODE_UNKNOWN,
    "GPUSAFE_MODE_ARGUMENT": MODE_ARGUMENT,
    "GPUSAFE_HOW_GENERIC": HOW_GENERIC,
    "GPUSAFE_SPACE_GLOBAL": SPACE_GLOBAL,
    "GPUSAFE_SPACE_SHARED": SPACE_SHARED,
    "GPUSAFE_SPACE_LOCAL": SPACE_LOCAL,
    "GPUSAFE_SPACE_GENERIC": SPACE_GENERIC,
    **{"GPUSAFE_" + k.name: k.code for k in ViolationKind},
}


def context_size(root_count: int, limit_count: int) -> int:
    return LAUNCH_CONTEXT.size + root_count * ROOT_BOUNDS.size + 8 * limit_count


def root_offset(index: int) -> int:
    """Byte offset of root ``index``'s bounds in the launch context."""
    return LAUNCH_CONTEXT.size + index * ROOT_BOUNDS.size


def limit_offset(root_count: int, slot: int) -> int:
    """Byte offset of check slot ``slot``'s limit in the launch context."""
    return LAUNCH_CONTEXT.size + root_count * ROOT_BOUNDS.size + 8 * slot


def heap_table_size(capacity: int = HEAP_CAPACITY, ring: int = HEAP_RING) -> int:
    return HEAP_HEADER.size + capacity * HEAP_ENTRY.size + 8 * ring


def violation_buffer_size(capacity: int) -> int:
    return VIOLATION_BUFFER.size + capacity * VIOLATION_RECORD.size


def tally_size() -> int:
    """Bytes of one site tally: its count and its offenders."""
    return SITE_TALLY.size + TALLY_OFFENDERS * OFFENDER.size


def tally_offset(tally: int) -> int:
    """Byte offset of tally ``tally`` from the violation buffer's header
    (negative: the tallies lie below it, so that the records and the
    runtime's view of the buffer stay where they were, and the offset is an
    immediate of the instrumented code)."""
    return -(tally + 1) * tally_size()


def offender_offset(tally: int, k: int) -> int:
    """Byte offset of offender ``k`` of tally ``tally`` from the header."""
    return tally_offset(tally) + SITE_TALLY.size + k * OFFENDER.size


def c_header() -> str:
    """The text of ``runtime_cu/gpusafe_layout.h``."""
    out = [
        "/* Generated by scripts/build_runtime.py from gpusafe_instrument/layout.py. Do not edit. */",
        "#ifndef GPUSAFE_LAYOUT_H",
        "#define GPUSAFE_LAYOUT_H",
        "",
    ]
    for name, value in CONSTANTS.items():
        suffix = "ULL" if value >= 2**31 else ""
        out.append(f"#define {name} {value}{suffix}")
    out.append("")
    for rec in RECORDS:
        out.append(rec.c_definition())
        out.append("")
    out.append("#endif /* GPUSAFE_LAYOUT_H */")
    return "\n".join(out) + "\n"
