"""The words every output uses for a violation, decided in one place.

Terminal, SARIF and JUnit all describe a violation with these sentences, so a
finding reads the same wherever it is met. What a kind itself is called and
means (its title, meaning and remedy) lives with the kind, in
:mod:`gpusafe_instrument.kinds`.
"""

from __future__ import annotations

from gpusafe_instrument.kinds import ViolationKind

from .model import AllocationInfo, Violation, dim3, hex_address


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
    freed = a.freed_at is not None or v.kind.facts.freed_allocation
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
    heap = a.allocated_by_kernel is not None
    what = "device-heap allocation" if heap else "allocation"
    text = f"a {'freed ' if freed else ''}{a.size}-byte {what} (tag {a.tag})"
    if heap:
        text += f" allocated by malloc in kernel {a.allocated_by_kernel}"
        if a.allocated_at:
            text += f" at {a.allocated_at}"
    elif a.allocated_at:
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
