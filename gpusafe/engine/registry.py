"""The allocation registry: every device allocation's tag, bounds and history.

The interposer tells the registry about each allocation and free; the
registry holds the policy: never-reused tags, red zones after each
allocation, a quarantine that keeps freed memory out of the driver's hands so
a stale pointer meets a ``freed`` record instead of someone else's buffer, and
the host-side verdicts (double free, invalid free, a copy that leaves its
allocation, a freed pointer passed to a kernel).  It knows nothing of drivers
or reports: it returns plain results and the engine acts on them.

Allocations belong to a *context* (the driver's context handle as an int; 0
where the caller cannot tell).  Destroying a context takes its memory with it
in the driver: :meth:`Registry.context_destroyed` drops every record of that
context, quarantined ones included, and returns its live allocations (leaks,
when the user asked for leak checking).  An address the driver hands out
again after that is a new allocation.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from gpusafe_instrument.kinds import ViolationKind

from .callsite import CallSite

DEFAULT_PADDING = 256
"""Red-zone bytes after each allocation; a multiple of the driver's 256-byte
alignment so user-visible bases stay aligned as the driver promises."""

DEFAULT_QUARANTINE = 256 << 20
"""Freed bytes held back from the driver before the oldest is really freed:
large enough that ordinary programs never see a freed address reused."""


class State(str, Enum):
    LIVE = "live"
    FREED = "freed"

    def __str__(self) -> str:
        return self.value


@dataclass
class Allocation:
    tag: int
    base: int
    size: int
    reserved: int  # bytes obtained from the driver: size plus the red zone
    api: str
    allocated_at: CallSite | None
    state: State = State.LIVE
    freed_at: CallSite | None = None
    owned: bool = True  # False: memory the program cannot free (a module's global variable)
    context: int = 0  # the driver context the allocation belongs to
    inherited: bool = False  # made by the parent of a forked process: its leak, not ours

    @property
    def end(self) -> int:
        return self.base + self.size

    def contains(self, address: int) -> bool:
        return self.base <= address < self.base + max(self.size, 1)


@dataclass(frozen=True)
class HostViolation:
    """A verdict of a host-side check, before it becomes a report entry."""

    kind: ViolationKind
    address: int
    size: int
    allocation: Allocation | None
    api: str
    location: CallSite | None


@dataclass
class FreeResult:
    violation: HostViolation | None = None
    release: list[int] = field(default_factory=list)  # bases the driver may now really free


class Registry:
    """Allocation records by tag and by address."""

    def __init__(self, padding: int = DEFAULT_PADDING,
                 quarantine: int = DEFAULT_QUARANTINE) -> None:
        if padding < 0 or quarantine < 0:
            raise ValueError("padding and quarantine must not be negative")
        self.padding = padding
        self.quarantine_limit = quarantine
        self.by_tag: dict[int, Allocation] = {}
        self._bases: list[int] = []  # sorted bases of allocations still holding memory
        self._at: dict[int, Allocation] = {}  # base -> allocation holding that memory
        self._quarantine: deque[Allocation] = deque()
        self._quarantined_bytes = 0
        self._gone: list[Allocation] = []  # unmapped records: their memory is the driver's again
        self._next_tag = 1
        self.version = 0  # bumped on every change the device table must see

    # -- allocation and free ----------------------------------------------

    def reserve_size(self, size: int) -> int:
        """Bytes to ask the driver for, red zone included."""
        return size + self.padding

    def allocated(self, base: int, size: int, api: str, site: CallSite | None,
                  context: int = 0) -> Allocation:
        """Record an allocation the driver returned at ``base``.

        The driver owns its address space: if it hands out an address the
        registry still holds (memory released behind gpusafe's back, such as
        by a library freeing what it allocated through a path gpusafe does not
        see), the driver is right and the old record is dropped."""
        stale = self._at.get(base)
        if stale is not None:
            self._drop(stale)
        return self._insert(base, size, self.reserve_size(size), api, site, owned=True,
                            context=context)

    def _insert(self, base: int, size: int, reserved: int, api: str, site: CallSite | None,
                owned: bool, context: int = 0) -> Allocation:
        for old in [a for a in self._gone if a.base < base + max(size, 1) and base < a.end]:
            self._drop(old)  # the driver reused memory it took back: the old record goes
        alloc = Allocation(self._next_tag, base, size, reserved, api, site, owned=owned,
                           context=context)
        self._next_tag += 1
        self.by_tag[alloc.tag] = alloc
        self._at[base] = alloc
        bisect.insort(self._bases, base)
        self.version += 1
        return alloc

    def mapped(self, base: int, size: int, api: str, site: CallSite | None,
               context: int = 0) -> Allocation:
        """Memory a kernel may reach that ``cuMemFree`` must not free: a
        module's ``.global`` variable whose address the program took
        (``cuModuleGetGlobal``), pinned host memory (``cuMemAllocHost``).
        Not a leak when still there at exit."""
        known = self._at.get(base)
        if known is not None and known.state is State.LIVE:
            return known
        if known is not None:  # the driver hands the address out again
            self._drop(known)
        return self._insert(base, size, size, api, site, owned=False, context=context)

    def unmapped(self, bases: list[int], site: str | None = None) -> None:
        """The memory is gone (``cuMemFreeHost``, an unregistration, a module
        unloaded): its record stays, freed, so a stale pointer into it is a
        use after free, until the address is handed out again."""
        for base in bases:
            alloc = self._at.get(base)
            if alloc is not None and not alloc.owned and alloc.state is State.LIVE:
                alloc.state = State.FREED
                alloc.freed_at = site
                self._gone.append(alloc)
                self.version += 1

    def free(self, address: int, api: str, site: CallSite | None) -> FreeResult:
        """Judge a free; on success the allocation enters the quarantine."""
        alloc = self._at.get(address)
        if alloc is not None and not alloc.owned:
            return FreeResult(HostViolation(ViolationKind.INVALID_FREE, address, 0, alloc, api,
                                            site))
        if alloc is None or alloc.state is State.FREED:
            kind = ViolationKind.DOUBLE_FREE if alloc is not None else ViolationKind.INVALID_FREE
            if alloc is None:
                alloc = self.find(address)
            return FreeResult(HostViolation(kind, address, 0, alloc, api, site))
        alloc.state = State.FREED
        alloc.freed_at = site
        self._quarantine.append(alloc)
        self._quarantined_bytes += alloc.reserved
        self.version += 1
        release = []
        while self._quarantined_bytes > self.quarantine_limit and self._quarantine:
            old = self._quarantine.popleft()
            self._quarantined_bytes -= old.reserved
            self._forget(old)
            release.append(old.base)
        return FreeResult(None, release)

    def context_destroyed(self, context: int) -> list[Allocation]:
        """Forget every record of ``context``, whose memory the driver has
        reclaimed (its quarantine included: nothing is left to free).  Returns
        the allocations the program had not freed, oldest first."""
        gone = [a for a in self.by_tag.values() if a.context == context]
        if not gone:
            return []
        self._quarantine = deque(a for a in self._quarantine if a.context != context)
        self._quarantined_bytes = sum(a.reserved for a in self._quarantine)
        self._gone = [a for a in self._gone if a.context != context]
        for alloc in gone:
            self._forget(alloc)
            del self.by_tag[alloc.tag]
        self.version += 1
        return [a for a in gone if a.state is State.LIVE and a.owned]

    def _drop(self, alloc: Allocation) -> None:
        """Forget a record the driver has silently taken back."""
        if alloc in self._gone:
            self._gone.remove(alloc)
        self._forget(alloc)
        del self.by_tag[alloc.tag]
        if alloc.state is State.FREED and alloc in self._quarantine:
            self._quarantine.remove(alloc)
            self._quarantined_bytes -= alloc.reserved
        self.version += 1

    def _forget(self, alloc: Allocation) -> None:
        i = bisect.bisect_left(self._bases, alloc.base)
        if i < len(self._bases) and self._bases[i] == alloc.base:
            del self._bases[i]
        self._at.pop(alloc.base, None)

    # -- queries ----------------------------------------------------------

    def find(self, address: int) -> Allocation | None:
        """The allocation (live or quarantined) whose bytes contain ``address``."""
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0:
            return None
        alloc = self._at[self._bases[i]]
        return alloc if alloc.contains(address) else None

    def nearest(self, address: int) -> Allocation | None:
        """The allocation whose memory, red zone included, holds ``address``:
        what an overflow through an unknown pointer most likely overran."""
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0:
            return None
        alloc = self._at[self._bases[i]]
        return alloc if address < alloc.base + alloc.reserved else None

    def live(self) -> list[Allocation]:
        return [a for a in self.by_tag.values()
                if a.state is State.LIVE and a.owned and not a.inherited]

    def inherit(self) -> None:
        """In a forked child: everything allocated so far is the parent's."""
        for alloc in self.by_tag.values():
            alloc.inherited = True

    def table(self) -> list[Allocation]:
        """Allocations holding memory, sorted by base: what the device searches."""
        return [self._at[b] for b in self._bases]

    # -- host-side checks -------------------------------------------------

    def check_range(self, address: int, size: int, api: str,
                    site: CallSite | None) -> HostViolation | None:
        """A device range given to a copy or memset: inside one live allocation?"""
        if size == 0:
            return None
        alloc = self.find(address)
        if alloc is None:
            alloc = self.nearest(address)
            return HostViolation(ViolationKind.API_OUT_OF_BOUNDS, address, size, alloc, api, site)
        if alloc.state is State.FREED:
            return HostViolation(ViolationKind.USE_AFTER_FREE, address, size, alloc, api, site)
        if address + size > alloc.end:
            return HostViolation(ViolationKind.API_OUT_OF_BOUNDS, address, size, alloc, api, site)
        return None

    def check_argument(self, value: int, api: str, site: CallSite | None) -> HostViolation | None:
        """A kernel argument that points into a freed allocation."""
        alloc = self.find(value)
        if alloc is not None and alloc.state is State.FREED:
            return HostViolation(ViolationKind.USE_AFTER_FREE, value, 0, alloc, api, site)
        return None

    def leaks(self) -> list[HostViolation]:
        """One ``leak`` per allocation still live, located at its allocation site."""
        return leak_verdicts(self.live())


def leak_verdicts(allocations: list[Allocation]) -> list[HostViolation]:
    """One ``leak`` per allocation, located at its allocation site, oldest first."""
    return [
        HostViolation(ViolationKind.LEAK, a.base, a.size, a, a.api, a.allocated_at)
        for a in sorted(allocations, key=lambda a: a.tag)
    ]
