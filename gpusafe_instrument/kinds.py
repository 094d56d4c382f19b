"""The closed set of violation kinds (DESIGN.md), shared by every layer.

Each kind is declared once, below, with everything gpusafe knows about it: the
numeric code a device-side record carries (part of the device ABI: the
runtime's PTX is built with these numbers, so a code is written out by hand and
never changes), the words every report uses, the SARIF level, and where the
kind is found. The string value is what every report (terminal, JSON, SARIF
rule ids, JUnit) shows. Adding a kind is one member here, a sample program
under ``samples/``, and the kind in the JSON schema's enum (a test names it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Literal

SarifLevel = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class KindFacts:
    """What one violation kind is, for every output that names it."""

    code: int
    """The device ABI code (1-based, unique, fixed forever once released)."""
    title: str
    """A short title (terminal headings, SARIF rule short descriptions)."""
    meaning: str
    """What the kind means, in a sentence or two (SARIF rule full descriptions)."""
    remedy: str
    """How to fix it (SARIF rule help, after the meaning)."""
    on_device: bool
    """A kernel's access can be this kind (the instrumentation reports it)."""
    on_host: bool
    """A host API call can be this kind (the interposer reports it)."""
    freed_allocation: bool = False
    """The allocation involved has been freed, whatever its record says."""
    sarif_level: SarifLevel = "error"
    """The SARIF level of its rule and of each result."""


class ViolationKind(str, Enum):
    """A violation kind; ``kind.facts`` holds what is known about it."""

    facts: KindFacts

    def __new__(cls, value: str, facts: KindFacts) -> ViolationKind:
        member = str.__new__(cls, value)
        member._value_ = value
        member.facts = facts
        return member

    GLOBAL_OUT_OF_BOUNDS = "global-out-of-bounds", KindFacts(
        code=1,
        title="Out-of-bounds access to global memory",
        meaning="A kernel accessed global memory outside the allocation its pointer was derived "
                "from, or outside every allocation. Overflows into a neighbouring live buffer "
                "are reported too.",
        remedy="Check the index computation and the guard that bounds it (often `i < n` "
               "written as `i <= n`), and that the buffer was allocated with the size the "
               "kernel assumes.",
        on_device=True, on_host=False,
    )
    SHARED_OUT_OF_BOUNDS = "shared-out-of-bounds", KindFacts(
        code=2,
        title="Out-of-bounds access to shared memory",
        meaning="A kernel accessed shared memory outside the .shared variable its pointer was "
                "derived from, or outside the block's shared window.",
        remedy="Check the shared-array index against the array's declared size, and the "
               "dynamic shared memory size given at launch.",
        on_device=True, on_host=False,
    )
    LOCAL_OUT_OF_BOUNDS = "local-out-of-bounds", KindFacts(
        code=3,
        title="Out-of-bounds access to local memory",
        meaning="A kernel accessed a thread's local (stack) memory outside the .local variable "
                "its pointer was derived from.",
        remedy="Check the index into the thread-local array against its declared size.",
        on_device=True, on_host=False,
    )
    USE_AFTER_FREE = "use-after-free", KindFacts(
        code=4,
        title="Use of freed device memory",
        meaning="A kernel accessed, or was passed as an argument, a pointer into an allocation "
                "the program had already freed.",
        remedy="Free the buffer only after the last kernel and copy that use it have "
               "completed, and do not keep stale pointers to it.",
        on_device=True, on_host=True, freed_allocation=True,
    )
    MISALIGNED_ACCESS = "misaligned-access", KindFacts(
        code=5,
        title="Misaligned memory access",
        meaning="A kernel accessed an address that is not aligned to the size of the access.",
        remedy="Make sure pointers cast to wider types (float4, double, structs) are aligned "
               "to that type's size.",
        on_device=True, on_host=False,
    )
    DOUBLE_FREE = "double-free", KindFacts(
        code=6,
        title="Double free of device memory",
        meaning="The program (or a kernel, with in-kernel free) freed an allocation that it "
                "had already freed.",
        remedy="Free each allocation exactly once; clear the pointer after freeing it.",
        on_device=True, on_host=True, freed_allocation=True,
    )
    INVALID_FREE = "invalid-free", KindFacts(
        code=7,
        title="Free of a pointer that is not a live allocation",
        meaning="The program (or a kernel, with in-kernel free) freed a pointer that is not "
                "the base of a live allocation.",
        remedy="Pass the free call the exact pointer the allocation call returned.",
        on_device=True, on_host=True,
    )
    API_OUT_OF_BOUNDS = "api-out-of-bounds", KindFacts(
        code=8,
        title="Host API call with a device range outside its allocation",
        meaning="A host API call (memcpy, memset, ...) was given a device range that leaves "
                "its allocation.",
        remedy="Check the byte count and the offsets passed to the copy or set call against "
               "the size of the allocation.",
        on_device=False, on_host=True,
    )
    LEAK = "leak", KindFacts(
        code=9,
        title="Device memory leak",
        meaning="An allocation was still live when its context was destroyed or the program "
                "exited.",
        remedy="Free the allocation when it is no longer needed.",
        on_device=False, on_host=True,
    )
    NULL_POINTER = "null-pointer", KindFacts(
        code=10,
        title="Access through a null pointer",
        meaning="A kernel accessed memory through a null or near-null pointer.",
        remedy="Check that the pointer argument was set (allocated, not left at 0) before the "
               "launch.",
        on_device=True, on_host=False,
    )

    @property
    def code(self) -> int:
        """The small integer a device-side violation record stores (1-based)."""
        return self.facts.code

    @classmethod
    def from_code(cls, code: int) -> ViolationKind:
        """The kind a device-side record's code names; ValueError for a code
        no kind has (a corrupt record or a runtime built from other codes)."""
        try:
            return _BY_CODE[code]
        except KeyError:
            raise ValueError(f"no violation kind has code {code}") from None

    def __str__(self) -> str:
        return self.value


def index_codes(kinds: Iterable[ViolationKind]) -> dict[int, ViolationKind]:
    """Each kind by its code, the codes checked: a clash would make two kinds
    one on the device, and a code outside 1..2**32-1 does not fit a record's
    u32 (0 means no violation)."""
    by_code: dict[int, ViolationKind] = {}
    for kind in kinds:
        code = kind.facts.code
        if not 0 < code < 1 << 32:
            raise ValueError(f"{kind.name}: code {code} does not fit a record's u32 (0 is none)")
        if code in by_code:
            raise ValueError(f"{kind.name} and {by_code[code].name} share code {code}")
        by_code[code] = kind
    return by_code


_BY_CODE = index_codes(ViolationKind)


class AccessKind(str, Enum):
    READ = "read"
    WRITE = "write"
    ATOMIC = "atomic"

    def __str__(self) -> str:
        return self.value
