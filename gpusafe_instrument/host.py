"""The host side of an instrumented launch: pure Python and numpy.

What a launcher (the tests, ``bench/overhead.py``, later ``gpusafe run``) does
around one launch of an instrumented kernel:

1. :func:`allocation_table` packs the allocation records, sorted by base;
2. :func:`context_bytes` resolves each pointer root of the kernel (from the
   packed kernel parameters) to its allocation and computes every check
   slot's limit (``gpusafe_instrument/layout.py``), giving the launch context;
3. :func:`violation_buffer` gives an empty violation buffer;
4. :func:`kernel_params` appends the hidden parameter to the packed
   parameters: the context's address (one trailing ``.u64``);
5. after the launch, :func:`decode_violations` turns the buffer back into
   :class:`DeviceViolation` records (kinds, sites, threads), and
   :func:`decode_tallies` the site tallies below it (issue 14, design B: an
   inline check counts its failing accesses per site and keeps the first
   offenders' addresses and threads; their kinds and allocations are
   classified here, in the order the runtime judges them).

A context whose kernels call the device heap (in-kernel ``malloc``/``free``)
also gets an empty heap table (:func:`heap_table`), which the device runtime
fills and keeps across launches; a record whose tag is a heap tag
(:func:`is_heap_tag`) names the entry :func:`decode_heap_entry` reads.

The launch pipeline (``gpusafe/engine/launches.py``) does all five, for
``gpusafe run`` and for the tests alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from . import launch_bounds, layout
from .kinds import ViolationKind
from .sites import KernelInfo, Site, SiteTable


@dataclass(frozen=True)
class AllocationRecord:
    tag: int
    base: int
    size: int
    live: bool = True


@dataclass(frozen=True)
class ResolvedRoot:
    value: int  # the pointer held by the parameter
    low: int
    high: int
    tag: int  # 0: no allocation found
    live: bool


@dataclass(frozen=True)
class DeviceViolation:
    """One record from the violation buffer, joined with its site."""

    kind: ViolationKind
    site: Site
    address: int
    width: int
    tag: int
    thread: tuple[int, int, int]
    block: tuple[int, int, int]
    count: int = 1
    """Occurrences it stands for: a site tally keeps its first offenders and
    counts the rest, which the last offender kept stands for."""


@dataclass(frozen=True)
class HeapBlock:
    """One entry of a context's device heap table (a block of in-kernel
    ``malloc``): where it is, and the site and launch origin of its malloc
    and, once freed, of its free (``layout.HEAP_ENTRY``)."""

    tag: int
    base: int
    size: int
    live: bool
    alloc_site: int
    alloc_origin: int
    free_site: int
    free_origin: int


def is_heap_tag(tag: int) -> bool:
    return tag >= layout.HEAP_TAG_BASE


def heap_entry_offset(tag: int) -> int:
    """Byte offset of the entry of heap tag ``tag`` in the heap table."""
    return layout.HEAP_HEADER.size + (tag - layout.HEAP_TAG_BASE) * layout.HEAP_ENTRY.size


def heap_table(capacity: int = layout.HEAP_CAPACITY, ring: int = layout.HEAP_RING) -> bytes:
    """An empty heap table: no block, an empty quarantine ring."""
    head = layout.HEAP_HEADER.pack(count=0, capacity=capacity, unrecorded=0, ring_head=0,
                                   ring_size=ring)
    return head + bytes(layout.heap_table_size(capacity, ring) - len(head))


def decode_heap_entry(data: bytes) -> HeapBlock | None:
    """The block an entry describes; None for an entry not (yet) published."""
    e = layout.HEAP_ENTRY.unpack(data)
    if not e["state"]:
        return None
    return HeapBlock(
        tag=int(e["tag"]), base=int(e["base"]), size=int(e["size"]),  # type: ignore[arg-type]
        live=e["state"] == layout.ALLOC_LIVE,
        alloc_site=int(e["alloc_site"]), alloc_origin=int(e["alloc_origin"]),  # type: ignore[arg-type]
        free_site=int(e["free_site"]), free_origin=int(e["free_origin"]),  # type: ignore[arg-type]
    )


def _sorted(allocations: Iterable[AllocationRecord]) -> list[AllocationRecord]:
    return sorted(allocations, key=lambda a: a.base)


def allocation_table(allocations: Iterable[AllocationRecord]) -> bytes:
    """The device allocation table: entries sorted by base."""
    out = bytearray()
    for a in _sorted(allocations):
        out += layout.ALLOCATION_ENTRY.pack(
            base=a.base, size=a.size, tag=a.tag,
            state=layout.ALLOC_LIVE if a.live else layout.ALLOC_FREED)
    return bytes(out)


def resolve(value: int, allocations: Sequence[AllocationRecord],
            heap_blocks: Sequence[HeapBlock] = ()) -> ResolvedRoot:
    """The allocation a pointer parameter points into: the one containing it,
    else the one it points one past the end of; live ones first.  Failing
    that, the device-heap block (of an earlier launch) holding it or ending
    at it, newest first as the device runtime looks blocks up.  Tag 0: none;
    the kernel then judges every access through the root against an empty
    window (out of bounds, or the null page)."""
    inside = [a for a in allocations if a.base <= value < a.base + a.size]
    past_end = [a for a in allocations if value == a.base + a.size]
    for group in (inside, past_end):
        if group:
            best = sorted(group, key=lambda a: (not a.live, a.base))[0]
            return ResolvedRoot(value, best.base, best.base + best.size, best.tag, best.live)
    for b in sorted(heap_blocks, key=lambda b: b.tag, reverse=True):
        if b.base <= value <= b.base + b.size:
            return ResolvedRoot(value, b.base, b.base + b.size, b.tag, b.live)
    return ResolvedRoot(value, 0, 0, 0, False)


def decode_heap_table(data: bytes) -> list[HeapBlock]:
    """The published blocks of a heap table read back from the device (its
    header and the entries its count claims, at most its capacity)."""
    head = layout.HEAP_HEADER.unpack(data)
    count = min(int(head["count"]), int(head["capacity"]))  # type: ignore[arg-type]
    size = layout.HEAP_ENTRY.size
    out = []
    for i in range(count):
        at = layout.HEAP_HEADER.size + i * size
        block = decode_heap_entry(data[at:at + size])
        if block is not None:
            out.append(block)
    return out


def root_values(kernel: KernelInfo, params: bytes) -> list[int]:
    """The pointer value of each root, read from the packed kernel parameters."""
    out = []
    for r in kernel.roots:
        off = r.param_offset + r.offset
        out.append(int.from_bytes(params[off:off + 8], "little"))
    return out


def slot_limit(slot_roots: Sequence[ResolvedRoot], end: int, align: int) -> int:
    limit = None
    for r in slot_roots:
        if r.tag == 0 or not r.live or r.value % align != 0 or r.value < r.low:
            return 0
        valid = max(0, r.high - r.value - end + 1)
        limit = valid if limit is None else min(limit, valid)
    return limit or 0


def context_bytes(kernel: KernelInfo, params: bytes, allocations: Sequence[AllocationRecord], *,
                  violations: int, table: int, table_len: int,
                  dynamic_shared: int = 0, heap: int = 0, origin: int = 0,
                  heap_blocks: Sequence[HeapBlock] = ()) -> bytes:
    """The launch context of one launch of ``kernel`` with packed ``params``:
    the header, each root's bounds, then each check slot's limit.
    ``heap_blocks``: the device heap's blocks, for roots in no allocation."""
    values = root_values(kernel, params)
    resolved = [resolve(v, allocations, heap_blocks) for v in values]
    out = bytearray(layout.LAUNCH_CONTEXT.pack(
        violations=violations, table=table, table_len=table_len,
        dynamic_shared_size=dynamic_shared, root_count=len(kernel.roots),
        limit_count=len(kernel.slots), heap=heap, origin=origin))
    for r in resolved:
        out += layout.ROOT_BOUNDS.pack(
            low=r.low, high=r.high, tag=r.tag,
            state=layout.ALLOC_LIVE if r.live else layout.ALLOC_FREED)
    for s in kernel.slots:
        out += slot_limit([resolved[i] for i in s.roots], s.end, s.align).to_bytes(8, "little")
    assert len(out) == layout.context_size(len(kernel.roots), len(kernel.slots))
    return bytes(out)


def violation_buffer(capacity: int) -> bytes:
    """An empty violation buffer holding up to ``capacity`` records."""
    head = layout.VIOLATION_BUFFER.pack(count=0, capacity=capacity, dropped=0)
    return head + bytes(capacity * layout.VIOLATION_RECORD.size)


def kernel_params(kernel: KernelInfo, params: bytes, context_address: int,
                  context: bytes = b"") -> bytes:
    """The instrumented kernel's parameter buffer: the original one, padded to
    the hidden parameter, then the hidden parameter: the context's address;
    then, for a kernel taking them (``limit_params``), the check slots'
    limits, copied from the end of ``context`` (the launch context's bytes)."""
    buf = bytearray(params[:kernel.context_param_offset])
    buf += bytes(kernel.context_param_offset - len(buf))
    buf += context_address.to_bytes(8, "little")
    if kernel.limit_params and kernel.slots:
        limits = context[len(context) - 8 * len(kernel.slots):]
        assert len(limits) == 8 * len(kernel.slots)
        buf += limits
    return bytes(buf)


def proven(kernel: KernelInfo, params: bytes, allocations: Sequence[AllocationRecord],
           grid: Sequence[int], block: Sequence[int],
           heap_blocks: Sequence[HeapBlock] = ()) -> bool:
    """Whether this launch of ``kernel`` (packed ``params``, the grid and
    block dimensions) keeps every access in bounds by the kernel's launch
    proof: its proven entry (``checks.launch_proof.proven_entry``), which
    has no checks, may then run instead, with the same parameters."""
    if kernel.proof is None:
        return False
    roots = [resolve(v, allocations, heap_blocks) for v in root_values(kernel, params)]
    return launch_bounds.launch_proven(kernel, params, roots, grid, block, is_heap_tag)


def decode_violations(data: bytes, sites: SiteTable) -> tuple[list[DeviceViolation], int]:
    """The records in a violation buffer and the number dropped."""
    head = layout.VIOLATION_BUFFER.unpack(data)
    count = min(int(head["count"]), int(head["capacity"]))  # type: ignore[arg-type]
    out = []
    rec = layout.VIOLATION_RECORD
    for i in range(count):
        r = rec.unpack(data, layout.VIOLATION_BUFFER.size + i * rec.size)
        out.append(DeviceViolation(
            kind=ViolationKind.from_code(int(r["kind"])),  # type: ignore[arg-type]
            site=sites[int(r["site"])],  # type: ignore[arg-type]
            address=int(r["address"]),  # type: ignore[arg-type]
            width=int(r["width"]),  # type: ignore[arg-type]
            tag=int(r["tag"]),  # type: ignore[arg-type]
            thread=tuple(r["thread"]),  # type: ignore[arg-type]
            block=tuple(r["block"]),  # type: ignore[arg-type]
        ))
    return out, int(head["dropped"])  # type: ignore[arg-type]


def tally_area_size(sites: SiteTable) -> int:
    """Bytes of the site tallies that lie below a violation buffer's header."""
    return sites.tally_count * layout.tally_size()


def context_roots(kernel: KernelInfo, context: bytes) -> list[ResolvedRoot]:
    """The roots' bounds as a launch context holds them: what the device
    judged root accesses against (``value`` is not kept: 0)."""
    out = []
    for i in range(len(kernel.roots)):
        b = layout.ROOT_BOUNDS.unpack(context, layout.root_offset(i))
        out.append(ResolvedRoot(0, int(b["low"]), int(b["high"]),  # type: ignore[arg-type]
                                int(b["tag"]), b["state"] == layout.ALLOC_LIVE))  # type: ignore[arg-type]
    return out


class UnclassifiedTally(ValueError):
    """The device counted an access the host finds good: the two sides of
    the ABI disagree (gpusafe's own failure, never a silent pass)."""


_OUT_OF_BOUNDS = {"global": ViolationKind.GLOBAL_OUT_OF_BOUNDS,
                  "const": ViolationKind.GLOBAL_OUT_OF_BOUNDS,
                  "shared": ViolationKind.SHARED_OUT_OF_BOUNDS,
                  "local": ViolationKind.LOCAL_OUT_OF_BOUNDS}


def classify_root(site: Site, address: int, root: ResolvedRoot) -> tuple[ViolationKind, int]:
    """The kind and tag of a failing root access, in the order
    ``checks/slow_path.py`` ``_inline_root`` (and the runtime) judge it:
    the null page, outside the root's allocation, freed, running past its
    end, misaligned."""
    if address < layout.NULL_PAGE:
        return ViolationKind.NULL_POINTER, 0
    past = address > root.high if site.width == 0 else address >= root.high
    if address < root.low or past:
        return ViolationKind.GLOBAL_OUT_OF_BOUNDS, root.tag
    if not root.live:
        return ViolationKind.USE_AFTER_FREE, root.tag
    if root.high - address < site.width:
        return ViolationKind.GLOBAL_OUT_OF_BOUNDS, root.tag
    if site.alignment > 1 and address % site.alignment:
        return ViolationKind.MISALIGNED_ACCESS, root.tag
    raise UnclassifiedTally(f"site {site.id} ({site.instruction}): the device refused "
                            f"{address:#x}, inside root {site.root}'s allocation "
                            f"[{root.low:#x}, {root.high:#x})")


def classify_window(site: Site, address: int, tally: int) -> ViolationKind:
    """The kind of a failing window access (tag 0: a variable is no
    allocation), in the order ``_inline_window`` judges it: the null page
    (a global or generic address), outside the variable; the site's second
    tally holds those inside it but misaligned."""
    if tally == site.tally + 1:
        return ViolationKind.MISALIGNED_ACCESS
    if (site.root_space in ("global", "const") or site.space == "generic") \
            and address < layout.NULL_PAGE:
        return ViolationKind.NULL_POINTER
    return _OUT_OF_BOUNDS[site.root_space or "global"]


def classify_argument(site: Site, address: int, tally: int, descriptor: int,
                      roots: Sequence[ResolvedRoot]) -> tuple[ViolationKind, int]:
    """The kind and tag of a failing access through a decided parameter,
    from the window descriptor its caller passed (kept in the offender,
    ``layout.OFFENDER``), in the order ``checks.arguments.decide`` judges:
    a root's (its bounds' offset in the launch context) as a root site's,
    against the bounds the launch's context holds; a variable's (its
    out-of-bounds kind) as a window site's: the null page for a global or
    generic access, the second tally for a misaligned access inside it."""
    context = layout.LAUNCH_CONTEXT.size
    if descriptor >= context:
        index, rest = divmod(descriptor - context, layout.ROOT_BOUNDS.size)
        if rest or index >= len(roots):
            raise UnclassifiedTally(f"site {site.id} ({site.instruction}): descriptor "
                                    f"{descriptor:#x} names no root of the launch")
        return classify_root(site, address, roots[index])
    if tally == site.tally + 1:
        return ViolationKind.MISALIGNED_ACCESS, 0
    if site.space in ("global", "generic") and address < layout.NULL_PAGE:
        return ViolationKind.NULL_POINTER, 0
    try:
        return ViolationKind.from_code(descriptor), 0
    except ValueError:
        raise UnclassifiedTally(f"site {site.id} ({site.instruction}): descriptor "
                                f"{descriptor:#x} is no variable's kind") from None


def decode_tallies(area: bytes, sites: SiteTable,
                   roots: Sequence[ResolvedRoot] = ()) -> list[DeviceViolation]:
    """The site tallies read back from below a violation buffer (``area``,
    :func:`tally_area_size` bytes ending at the header), classified: each
    offender kept is a violation; the occurrences past them count in the
    last one kept (``count`` stays exact, nothing is dropped).  ``roots``:
    the launch's root bounds (:func:`context_roots`)."""
    size = layout.tally_size()
    end = len(area)
    out: list[DeviceViolation] = []
    for site in sites.sites:
        for tally in range(site.tally, site.tally + site.tallies):
            at = end - (tally + 1) * size
            count = int(layout.SITE_TALLY.unpack(area, at)["count"])  # type: ignore[arg-type]
            if not count:
                continue
            kept = []
            for k in range(min(count, layout.TALLY_OFFENDERS)):
                o = layout.OFFENDER.unpack(area, at + layout.SITE_TALLY.size
                                           + k * layout.OFFENDER.size)
                address = int(o["address"])  # type: ignore[arg-type]
                if site.check == "root":
                    kind, tag = classify_root(site, address, roots[site.root_index])
                elif site.check == "argument":
                    kind, tag = classify_argument(site, address, tally, int(o["descriptor"]),  # type: ignore[arg-type]
                                                  roots)
                else:
                    kind, tag = classify_window(site, address, tally), 0
                t, bx, byz = int(o["thread"]), int(o["block_x"]), int(o["block_yz"])  # type: ignore[arg-type]
                kept.append(DeviceViolation(
                    kind=kind, site=site, address=address, width=site.width, tag=tag,
                    thread=(t & 0x3FF, (t >> 10) & 0x3FF, t >> 20),
                    block=(bx, byz & 0xFFFF, byz >> 16)))
            last = kept[-1]
            kept[-1] = DeviceViolation(last.kind, last.site, last.address, last.width, last.tag,
                                       last.thread, last.block, count - len(kept) + 1)
            out.extend(kept)
    return out
