"""The words every output uses for a violation, decided in one place.

Terminal, SARIF and JUnit all describe a violation with these sentences, so a
finding reads the same wherever it is met.
"""

from __future__ import annotations

from instrument.kinds import ViolationKind

from .model import AllocationInfo, Violation, dim3, hex_address

TITLES: dict[ViolationKind, str] = {
    ViolationKind.GLOBAL_OUT_OF_BOUNDS: "Out-of-bounds access to global memory",
    ViolationKind.SHARED_OUT_OF_BOUNDS: "Out-of-bounds access to shared memory",
    ViolationKind.LOCAL_OUT_OF_BOUNDS: "Out-of-bounds access to local memory",
    ViolationKind.USE_AFTER_FREE: "Use of freed device memory",
    ViolationKind.MISALIGNED_ACCESS: "Misaligned memory access",
    ViolationKind.DOUBLE_FREE: "Double free of device memory",
    ViolationKind.INVALID_FREE: "Free of a pointer that is not a live allocation",
    ViolationKind.API_OUT_OF_BOUNDS: "Host API call with a device range outside its allocation",
    ViolationKind.LEAK: "Device memory leak",
    ViolationKind.NULL_POINTER: "Access through a null pointer",
}
"""A short title per kind (terminal headings, SARIF rule short descriptions)."""

MEANINGS: dict[ViolationKind, str] = {
    ViolationKind.GLOBAL_OUT_OF_BOUNDS:
        "A kernel accessed global memory outside the allocation its pointer was derived "
        "from, or outside every allocation. Overflows into a neighbouring live buffer "
        "are reported too.",
    ViolationKind.SHARED_OUT_OF_BOUNDS:
        "A kernel accessed shared memory outside the .shared variable its pointer was "
        "derived from, or outside the block's shared window.",
    ViolationKind.LOCAL_OUT_OF_BOUNDS:
        "A kernel accessed a thread's local (stack) memory outside the .local variable "
        "its pointer was derived from.",
    ViolationKind.USE_AFTER_FREE:
        "A kernel accessed, or was passed as an argument, a pointer into an allocation "
        "the program had already freed.",
    ViolationKind.MISALIGNED_ACCESS:
        "A kernel accessed an address that is not aligned to the size of the access.",
    ViolationKind.DOUBLE_FREE:
        "The program freed an allocation that it had already freed.",
    ViolationKind.INVALID_FREE:
        "The program freed a pointer that is not the base of a live allocation.",
    ViolationKind.API_OUT_OF_BOUNDS:
        "A host API call (memcpy, memset, ...) was given a device range that leaves "
        "its allocation.",
    ViolationKind.LEAK:
        "An allocation was still live when its context was destroyed or the program "
        "exited.",
    ViolationKind.NULL_POINTER:
        "A kernel accessed memory through a null or near-null pointer.",
}
"""What each kind means, in a sentence or two (SARIF rule full descriptions)."""

REMEDIES: dict[ViolationKind, str] = {
    ViolationKind.GLOBAL_OUT_OF_BOUNDS:
        "Check the index computation and the guard that bounds it (often `i < n` "
        "written as `i <= n`), and that the buffer was allocated with the size the "
        "kernel assumes.",
    ViolationKind.SHARED_OUT_OF_BOUNDS:
        "Check the shared-array index against the array's declared size, and the "
        "dynamic shared memory size given at launch.",
    ViolationKind.LOCAL_OUT_OF_BOUNDS:
        "Check the index into the thread-local array against its declared size.",
    ViolationKind.USE_AFTER_FREE:
        "Free the buffer only after the last kernel and copy that use it have "
        "completed, and do not keep stale pointers to it.",
    ViolationKind.MISALIGNED_ACCESS:
        "Make sure pointers cast to wider types (float4, double, structs) are aligned "
        "to that type's size.",
    ViolationKind.DOUBLE_FREE:
        "Free each allocation exactly once; clear the pointer after freeing it.",
    ViolationKind.INVALID_FREE:
        "Pass the free call the exact pointer the allocation call returned.",
    ViolationKind.API_OUT_OF_BOUNDS:
        "Check the byte count and the offsets passed to the copy or set call against "
        "the size of the allocation.",
    ViolationKind.LEAK:
        "Free the allocation when it is no longer needed.",
    ViolationKind.NULL_POINTER:
        "Check that the pointer argument was set (allocated, not left at 0) before the "
        "launch.",
}
"""How to fix each kind (SARIF rule help)."""

_FREED_KINDS = {ViolationKind.USE_AFTER_FREE, ViolationKind.DOUBLE_FREE}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def describe_allocation(v: Violation) -> str | None:
    """Where the faulting address lies relative to the allocation, in words:

    "4 bytes past the end of a 256-byte allocation (tag 3) allocated at app.py:31",
    "12 bytes before the start of ...", "at offset 8 of a freed 64-byte
    allocation (tag 2) allocated at app.py:10, freed at app.py:12".
    """
    a = v.allocation
    if a is None:
        return None
    freed = a.freed_at is not None or v.kind in _FREED_KINDS
    region = _region(a, freed)
    if v.kind is ViolationKind.LEAK:
        return f"{region}, never freed"
    if a.offset is None:
        return region
    if a.offset < 0:
        return f"{_plural(-a.offset, 'byte')} before the start of {region}"
    if a.offset >= a.size:
        return f"{_plural(a.offset - a.size, 'byte')} past the end of {region}"
    return f"at offset {a.offset} of {region}"


def _region(a: AllocationInfo, freed: bool) -> str:
    text = f"a {'freed ' if freed else ''}{a.size}-byte allocation (tag {a.tag})"
    if a.allocated_at:
        text += f" allocated at {a.allocated_at}"
    if a.freed_at:
        text += f", freed at {a.freed_at}"
    return text


def describe_access(v: Violation) -> str:
    """"write of 4 bytes in kernel oob_write" / "free" / "copy of 512 bytes"."""
    parts = []
    if v.access is not None:
        parts.append(f"{v.access.value} of {_plural(v.size, 'byte')}" if v.size is not None
                     else v.access.value)
    elif v.size is not None and v.kind is ViolationKind.API_OUT_OF_BOUNDS:
        parts.append(f"range of {_plural(v.size, 'byte')}")
    if v.kernel is not None:
        parts.append(("in" if v.on_device else "at launch of") + f" kernel {v.kernel}")
    return " ".join(parts)


def describe_threads(v: Violation) -> str | None:
    """"thread (16,0,0) in block (0,0,0)"; several grouped by block,
    "first offending threads (16,0,0), (17,0,0) in block (0,0,0)" when more
    occurrences were folded in than threads kept."""
    if not v.threads:
        return None
    if len(v.threads) == 1:
        return str(v.threads[0])
    by_block: dict[tuple[int, int, int], list[str]] = {}
    for t in v.threads:
        by_block.setdefault(t.block, []).append(dim3(t.thread))
    groups = [
        f"{'threads' if len(ts) > 1 else 'thread'} {', '.join(ts)} in block {dim3(b)}"
        for b, ts in by_block.items()
    ]
    text = "; ".join(groups)
    return f"first offending {text}" if v.count > len(v.threads) else text



def message(v: Violation) -> str:
    """The whole finding as one sentence (SARIF message, JUnit failure message)."""
    head = f"{v.kind.value}"
    access = describe_access(v)
    if access:
        head += f": {access}"
    if v.address is not None:
        head += f" at {hex_address(v.address)}"
    where = describe_allocation(v)
    if where:
        head += f", {where}"
    if v.count > 1:
        head += f" ({v.count} occurrences)"
    return head + "."
