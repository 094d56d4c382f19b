"""The inline lookup of an access of unknown provenance (a pointer loaded
from memory) in a kernel that makes no call: the device runtime's
``__gpusafe_check`` verdicts, in its order, as inline PTX.  A generic
address is classified by its space; a global one is searched in the
allocation table, then in the device heap's blocks, and judged against the
allocation found; the verdicts set the record's kind and tag on the way to
it.  The slow path (:mod:`.slow_path`) branches here when a kernel's filter
fails for such an access; what it does for a skipped access it passes in
(``not_performed``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

from .. import layout, ptx
from ..kinds import ViolationKind
from ..nodes import (
    Address,
    Register,
    Statement,
)
from ..runtime import DYNAMIC_SHARED
from . import records
from .emission import Emitter, I, target_sm
from .planning import Access


class _Verdicts:
    """The labels a lookup branches to with a verdict: each sets the kind
    (and, where no allocation was found, the tag 0) right before the
    record, so that no kind register is live while the lookup searches and
    judges (issue 14: a lookup's temporaries count in the kernel's registers
    where they are live beside the program's, and a kind set first was live
    through all of it)."""

    def __init__(self, em: Emitter, record: str) -> None:
        self.em, self.record = em, record
        self.kind, self.tag = em.reg("kind", ".b32"), em.reg("tag", ".b32")
        self.labels: dict[tuple[ViolationKind, bool], str] = {}

    def __call__(self, kind: ViolationKind, *, tagged: bool) -> str:
        """The label of verdict ``kind``; ``tagged``: the tag register holds
        the allocation's tag (else the record's tag is 0)."""
        key = (kind, tagged)
        if key not in self.labels:
            self.labels[key] = self.em.label("vk")
        return self.labels[key]

    def code(self) -> list[Statement]:
        """The verdicts' blocks, then ``record`` (the last one falls into it)."""
        out: list[Statement] = []
        for n, ((kind, tagged), label) in enumerate(self.labels.items(), 1):
            out.append(ptx.Label(label))
            if not tagged:
                out.append(I("mov.u32", self.tag, 0))
            out.append(I("mov.u32", self.kind, kind.code))
            if n < len(self.labels):
                out.append(I("bra.uni", self.record))
        out.append(ptx.Label(self.record))
        return out


def inline_lookup(em: Emitter, acc: Access, addr: str, do: str, skip: str,
                  not_performed: Callable[[], list[Statement]]) -> list[Statement]:
    """``__gpusafe_check`` of an access of unknown provenance in a kernel
    that makes no call, inline: the runtime's verdicts in its order.  A
    generic address is classified by its space (``isspacep``); a shared one
    is judged against the block's shared window; a global one is looked up
    in the allocation table (binary search), then in the device heap's
    blocks (newest first), and a good access keeps the allocation's window
    in the lookup cache (``uclo``/``uchi``).  No call: a kernel that looks
    pointers up is not charged the runtime's registers.  The kind and the
    tag of a record are set on the way to it (:class:`_Verdicts`).

    Every way out of the lookup sets the cache: the allocation's window
    after a good access to one of at least 16 bytes, the empty window after
    any other (a smaller allocation, a shared or local address, a refused
    access), as ``__gpusafe_check``'s result does.  So the cache the
    lookup was entered with is dead through the search, the heap scan and
    the record: its 4 registers are not live beside them (issue 14:
    ``linked_list_walk`` 29 -> 25 registers at sm_75, 28 -> 24 at sm_80,
    28 -> 23 at sm_90, -G 30 -> 26; a kernel keeping the old window there
    paid for it at its peak).  What the next access loses is a cached
    window it would otherwise have kept: it looks its pointer up again."""
    a = acc.access
    space = a.space
    generic = space == "generic"
    ctx = em.ctx()
    bad = em.reg("bad", ".pred")
    size = em.reg("hi", ".b64")
    verdict = _Verdicts(em, em.label("rec"))
    forget = em.label("edo")  # the empty cache, then on to ``do``
    out: list[Statement] = []
    if space in ("global", "generic"):
        out.append(I("setp.lt.u64", bad, addr, layout.NULL_PAGE))
        out.append(I("bra", verdict(ViolationKind.NULL_POINTER, tagged=False),
                     guard=ptx.Guard(bad)))
    local, shared = em.label("local"), em.label("shared")
    if generic:
        out.append(I("isspacep.shared", bad, addr))
        out.append(I("bra", shared, guard=ptx.Guard(bad)))
        out.append(I("isspacep.local", bad, addr))
        out.append(I("bra", local, guard=ptx.Guard(bad)))
    if space in ("global", "generic"):
        judge, freed = em.label("judge"), em.reg("freed", ".pred")
        out.extend(_global_lookup(em, addr, freed, verdict, judge))
        out.append(ptx.Label(judge))
        out.extend(_judge(em, acc, addr, em.reg("span", ".b64"), size, freed,
                          ViolationKind.GLOBAL_OUT_OF_BOUNDS, verdict, do, cache=16,
                          uncached=forget))
    if space in ("shared", "generic"):
        out.append(ptx.Label(shared))
        # the block's shared window: [0, end of the dynamic shared memory)
        out.append(em.load_ctx())
        d32 = em.reg("ld32", ".b32")
        out.append(I("ld.global.u32", d32, Address(Register(ctx),
                     layout.LAUNCH_CONTEXT.offset("dynamic_shared_size"))))
        out.append(I("cvt.u64.u32", size, d32))
        end = em.reg("shend", ".b64")
        out.append(I("mov.u64", end, DYNAMIC_SHARED))
        out.append(I("add.u64", size, size, end))
        sa = addr
        if generic:
            sa = em.reg("sa", ".b64")
            out.append(I("cvta.to.shared.u64", sa, addr))
        out.extend(_judge(em, acc, sa, sa, size, None, ViolationKind.SHARED_OUT_OF_BOUNDS,
                          verdict, forget))
    if space in ("local", "generic"):
        out.append(ptx.Label(local))
        if a.alignment > 1:
            out.extend(_misaligned(em.reg("span", ".b64"), addr, a.alignment, bad,
                                   verdict(ViolationKind.MISALIGNED_ACCESS, tagged=False)))
        out.append(I("bra.uni", forget))
    out.extend(verdict.code())
    out.extend(records.record(em, acc, addr, verdict.kind, verdict.tag))
    out.extend(not_performed())
    out.extend(_empty_cache(em))
    out.append(I("bra.uni", skip))
    out.append(ptx.Label(forget))
    out.extend(_empty_cache(em))
    out.append(I("bra.uni", do))
    return out


def _misaligned(scratch: str, addr: str, alignment: int, bad: str,
                misaligned: str) -> list[Statement]:
    """Branch to ``misaligned`` when ``addr`` is not a multiple of ``alignment``."""
    return [I("and.b64", scratch, addr, alignment - 1),
            I("setp.ne.u64", bad, scratch, 0),
            I("bra", misaligned, guard=ptx.Guard(bad))]


def _empty_cache(em: Emitter) -> list[Statement]:
    """The lookup cache set to the empty window (no address passes its filter)."""
    return [I("mov.u64", em.reg("uclo", ".b64"), layout.EMPTY_WINDOW[0]),
            I("mov.u64", em.reg("uchi", ".b64"), layout.EMPTY_WINDOW[1])]


class _Search(NamedTuple):
    """The registers of a search of the allocation table."""

    tp: str  # the table
    n: str
    first: str
    mid: str
    ep: str  # the entry found
    lo: str  # its base
    size: str
    bad: str


def _table_search(em: Emitter, key: str, r: _Search, loop: str, found: str,
                  none: str) -> list[Statement]:
    """Binary search of the launch's allocation table (sorted by base) for
    the last entry whose base is at or below ``key``: its address in
    ``r.ep``, base and size in ``r.lo``, ``r.size``; on to ``none`` when
    every base is above it."""
    entry = layout.ALLOCATION_ENTRY
    ctxf = layout.LAUNCH_CONTEXT.offset
    ctx = em.ctx()
    return [
        em.load_ctx(),
        I("ld.global.u64", r.tp, Address(Register(ctx), ctxf("table"))),
        I("ld.global.u32", r.n, Address(Register(ctx), ctxf("table_len"))),
        I("mov.u32", r.first, 0),
        ptx.Label(loop),  # the first entry with base > key in [first, n)
        I("setp.ge.u32", r.bad, r.first, r.n),
        I("bra", found, guard=ptx.Guard(r.bad)),
        I("add.u32", r.mid, r.first, r.n),
        I("shr.u32", r.mid, r.mid, 1),
        I("mad.wide.u32", r.ep, r.mid, entry.size, r.tp),
        I("ld.global.u64", r.lo, Address(Register(r.ep), entry.offset("base"))),
        I("setp.le.u64", r.bad, r.lo, key),
        I("add.u32", r.first, r.mid, 1, guard=ptx.Guard(r.bad)),
        I("mov.u32", r.n, r.mid, guard=ptx.Guard(r.bad, True)),
        I("bra.uni", loop),
        ptx.Label(found),
        I("setp.eq.u32", r.bad, r.first, 0),
        I("bra", none, guard=ptx.Guard(r.bad)),
        I("sub.u32", r.first, r.first, 1),
        I("mad.wide.u32", r.ep, r.first, entry.size, r.tp),
        I("ld.global.u64", r.lo, Address(Register(r.ep), entry.offset("base"))),
        I("ld.global.u64", r.size, Address(Register(r.ep), entry.offset("size"))),
    ]


def _global_lookup(em: Emitter, addr: str, freed: str, verdict: _Verdicts,
                   judge: str) -> list[Statement]:
    """The allocation holding ``addr`` (``lo``, ``hi`` = its size, the
    verdict's tag, ``freed``: not live), on to ``judge``; or out of bounds
    of none, on to that verdict: the allocation table's entry (binary
    search: the last base at or below the address), else the newest
    published device-heap block whose extent and red zone hold it.  The
    context is loaded again for the heap, the state is a predicate as soon
    as it is read: neither is live through the search."""
    ctx = em.ctx()
    lo, size = em.reg("lo", ".b64"), em.reg("hi", ".b64")
    tag, state = verdict.tag, em.reg("state", ".b32")
    bad = em.reg("bad", ".pred")
    tp, ep, t = em.reg("tp", ".b64"), em.reg("ep", ".b64"), em.reg("span", ".b64")
    first, n, mid = em.reg("bl", ".b32"), em.reg("bn", ".b32"), em.reg("bm", ".b32")
    loop, found_none, heap, heap_loop = (em.label("bs"), em.label("bsd"), em.label("heap"),
                                         em.label("hs"))
    none = verdict(ViolationKind.GLOBAL_OUT_OF_BOUNDS, tagged=False)
    entry = layout.ALLOCATION_ENTRY
    block = functools.partial(_heap_field, ep)
    out: list[Statement] = [
        *_table_search(em, addr, _Search(tp, n, first, mid, ep, lo, size, bad),
                       loop, found_none, heap),
        I("sub.u64", t, addr, lo),
        I("setp.ge.u64", bad, t, size),
        I("bra", heap, guard=ptx.Guard(bad)),
        I("ld.global.u32", tag, Address(Register(ep), entry.offset("tag"))),
        I("ld.global.u32", state, Address(Register(ep), entry.offset("state"))),
        I("setp.ne.u32", freed, state, layout.ALLOC_LIVE),
        I("bra.uni", judge),
        # the device heap's blocks, newest first (__gpusafe_heap_find)
        ptx.Label(heap),
        em.load_ctx(),
        I("ld.global.u64", tp, Address(Register(ctx), layout.LAUNCH_CONTEXT.offset("heap"))),
        I("setp.eq.u64", bad, tp, 0),
        I("bra", none, guard=ptx.Guard(bad)),
        I("ld.volatile.global.u32", n, Address(Register(tp), layout.HEAP_HEADER.offset("count"))),
        I("ld.global.u32", mid, Address(Register(tp), layout.HEAP_HEADER.offset("capacity"))),
        I("min.u32", n, n, mid),
        ptx.Label(heap_loop),
        I("setp.eq.u32", bad, n, 0),
        I("bra", none, guard=ptx.Guard(bad)),
        I("sub.u32", n, n, 1),
        # the heap's address read again at each block from the context (it
        # does not change in a launch): not live through the scan beside the
        # kernel's values (issue 14: linked_list_walk 25 -> 24 at sm_75,
        # pointer_table 23 -> 21; the same for the allocation table's
        # search costs linked_list_walk -G one more)
        em.load_ctx(),
        I("ld.global.u64", ep, Address(Register(ctx), layout.LAUNCH_CONTEXT.offset("heap"))),
        I("mad.wide.u32", ep, n, layout.HEAP_ENTRY.size, ep),
        I("ld.volatile.global.u32", state, block("state")),
        I("setp.eq.u32", bad, state, 0),
        I("bra", heap_loop, guard=ptx.Guard(bad)),
        I("setp.ne.u32", freed, state, layout.ALLOC_LIVE),
        I("ld.volatile.global.u64", lo, block("base")),
        I("sub.u64", t, addr, lo),
        # a block's size does not change once it is published: read again
        # on a match, so that the size and its sum with the red zone are
        # not live at once
        I("ld.volatile.global.u64", size, block("size")),
        I("add.u64", size, size, layout.HEAP_RED_ZONE),
        I("setp.ge.u64", bad, t, size),
        I("bra", heap_loop, guard=ptx.Guard(bad)),
        I("ld.volatile.global.u64", size, block("size")),
        I("ld.volatile.global.u32", tag, block("tag")),
        I("bra.uni", judge),
    ]
    return out


def _heap_field(ep: str, field: str) -> Address:
    """Field ``field`` of the heap entry that ``ep`` addresses less the heap's header."""
    return Address(Register(ep), layout.HEAP_HEADER.size + layout.HEAP_ENTRY.offset(field))


def _judge(em: Emitter, acc: Access, addr: str, t: str, size: str, freed: str | None,
           oob: ViolationKind, verdict: _Verdicts, do: str, *,
           cache: int | None = None, uncached: str | None = None) -> list[Statement]:
    """The verdict on ``addr``, at offset ``t`` into the extent of ``size``
    bytes found for it (an address below the extent: an offset past any
    size, as the subtraction wraps), with ``freed`` (a predicate: the
    allocation is not live; None: a variable's window, always live and
    without a tag; ``oob``: the out-of-bounds kind): freed where the access
    starts, out of the extent, misaligned.  A good access goes on to ``do``,
    keeping the extent as the lookup cache when ``cache`` is not None and
    the extent has at least that many bytes (its low end: ``addr - t``;
    a smaller one goes on to ``uncached`` instead).
    Only the offset and the size are live: not the extent's low end."""
    a = acc.access
    tagged = freed is not None
    bad = em.reg("bad", ".pred")
    out: list[Statement] = []
    if freed is not None:
        uaf = em.reg("uaf", ".pred")
        out += [
            I("setp.lt.u64", uaf, t, size),
            I("and.pred", uaf, uaf, freed),
            I("bra", verdict(ViolationKind.USE_AFTER_FREE, tagged=True), guard=ptx.Guard(uaf)),
        ]
    width: object = a.width
    if a.size is not None:
        width = em.reg("w64", ".b64")
        out.append(I("cvt.u64.u32", width, a.size.name))
    out += [
        I("setp.lt.u64", bad, size, width),
        I("bra", verdict(oob, tagged=tagged), guard=ptx.Guard(bad)),
        I("sub.u64", size, size, width),
        I("setp.gt.u64", bad, t, size),
        I("bra", verdict(oob, tagged=tagged), guard=ptx.Guard(bad)),
        I("add.u64", size, size, width),
    ]
    if a.alignment > 1:
        out.extend(_misaligned(em.reg("al", ".b64"), addr, a.alignment, bad,
                               verdict(ViolationKind.MISALIGNED_ACCESS, tagged=tagged)))
    if cache is not None:
        if cache:
            out.append(I("setp.lt.u64", bad, size, cache))
            out.append(I("bra", uncached or do, guard=ptx.Guard(bad)))
        uclo = em.reg("uclo", ".b64")
        out.append(I("sub.u64", uclo, addr, t))
        out.append(I("add.u64", em.reg("uchi", ".b64"), uclo, size))
    out.append(I("bra.uni", do))
    return out


def warp_collectives(module) -> bool:
    """Whether ``module``'s code may use ``activemask``/``match.sync``
    (PTX ISA 6.2 on sm_70 or later)."""
    version = module.version
    return version is not None and version.number >= (6, 2) and target_sm(module) >= 70


def pinned_query(em: Emitter, base: str, limits: dict[int, str]) -> list[Statement]:
    """The query of a pinned base (``optimisation.LoopHoister``), run right
    after ``base`` is defined: the bytes from ``base`` to the end of the live
    allocation of the launch's table holding it (binary search, as
    ``_global_lookup``), 0 when there is none (a freed allocation, a
    device-heap block, no allocation); then for each access end ``e`` its
    limit ``limits[e]``: how many offsets ``X`` keep ``[X, X + e)`` in those
    bytes, 0 when none does.  It records nothing: the accesses it lets
    through are in bounds, and the others take their slow paths, which judge
    and record them as before.

    Where the module may use warp collectives, the lanes that arrive
    together (``activemask``) and hold the same base (``match.any``) query it
    once: the highest of them searches and ``shfl.sync`` gives its answer to
    the others (a warp whose 32 threads follow 4 lists searches 4 times, not
    32).  No lane leaves between the match and the shuffle, so every lane of
    the mask reaches the shuffle."""
    lo, size = em.reg("lo", ".b64"), em.reg("hi", ".b64")
    state, bad = em.reg("state", ".b32"), em.reg("bad", ".pred")
    tp, ep, t = em.reg("tp", ".b64"), em.reg("ep", ".b64"), em.reg("span", ".b64")
    first, n, mid = em.reg("bl", ".b32"), em.reg("bn", ".b32"), em.reg("bm", ".b32")
    loop, found, done = em.label("pq"), em.label("pqd"), em.label("pqe")
    entry = layout.ALLOCATION_ENTRY
    out: list[Statement] = []
    warp = warp_collectives(em.plan.module)
    if warp:
        mask, leader = em.reg("wm", ".b32"), em.reg("wl", ".b32")
        shared = em.label("pqs")
        out += [
            I("activemask.b32", mask),
            I("match.any.sync.b64", mid, base, mask),
            I("bfind.u32", leader, mid),  # the highest peer's lane
            I("mov.u32", n, "%laneid"),
            I("setp.ne.u32", bad, n, leader),
            I("bra", shared, guard=ptx.Guard(bad)),
        ]
    out += [
        I("mov.u64", t, 0),
        *_table_search(em, base, _Search(tp, n, first, mid, ep, lo, size, bad),
                       loop, found, done),
        I("ld.global.u32", state, Address(Register(ep), entry.offset("state"))),
        I("sub.u64", t, base, lo),
        I("setp.ge.u64", bad, t, size),
        I("setp.ne.or.u32", bad, state, layout.ALLOC_LIVE, bad),
        I("sub.u64", t, size, t),
        I("mov.u64", t, 0, guard=ptx.Guard(bad)),
        ptx.Label(done),
    ]
    if warp:
        # one 32-bit shuffle: past 4 GiB from the base the slow path judges
        out += [
            I("min.u64", t, t, 0xFFFFFFFF),
            I("cvt.u32.u64", first, t),
            ptx.Label(shared),
            I("shfl.sync.idx.b32", first, first, leader, 31, mask),
            I("cvt.u64.u32", t, first),
        ]
    for end, lim in limits.items():
        out.append(I("sub.u64", lim, t, max(end, 1) - 1))
        out.append(I("setp.lt.u64", bad, t, max(end, 1)))
        out.append(I("mov.u64", lim, 0, guard=ptx.Guard(bad)))
    return out
