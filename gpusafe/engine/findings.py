"""Findings: device records and host verdicts become report entries.

Everything gpusafe learns in a checked process arrives here: a host check's
verdict (:class:`~gpusafe.engine.registry.HostViolation`), a launch's device
records (joined with their site and the allocation they hit), a kernel that
ran unchecked, a failure of gpusafe itself.  ``on_change`` is called when
something new was found, so the process can write its findings out before
it may die.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpusafe_instrument.host import DeviceViolation, is_heap_tag
from gpusafe_instrument.kinds import ViolationKind

from ..report import AllocationInfo, ReportBuilder, SourceLocation, Stack
from .callsite import CallSite
from .launches import DeviceMemoryError, LaunchPipeline
from .registry import Allocation, HostViolation, Registry
from .sources import KernelSources

HeapLookup = Callable[[int], AllocationInfo | None]
"""A device-heap tag to the block it names (offset not set), if known."""


def allocation_info(alloc: Allocation | None, address: int | None) -> AllocationInfo | None:
    if alloc is None:
        return None
    return AllocationInfo(
        tag=alloc.tag, base=alloc.base, size=alloc.size,
        offset=None if address is None else address - alloc.base,
        allocated_at=_at(alloc.allocated_at), freed_at=_at(alloc.freed_at),
        allocated_stack=_stack(alloc.allocated_at), freed_stack=_stack(alloc.freed_at),
    )


def _at(site: CallSite | None) -> str | None:
    return None if site is None else str(site)


def _stack(site: CallSite | None) -> Stack | None:
    return site.stack if isinstance(site, CallSite) else None


def _location(site: CallSite | None) -> SourceLocation | None:
    if isinstance(site, CallSite):
        return SourceLocation(site.frame.file, site.frame.line)
    return SourceLocation.parse(site)


@dataclass(frozen=True)
class FreedArgument:
    """A launch argument that points into freed memory (a host verdict), and
    which of the kernel's parameters holds it.  It becomes an entry of its own
    only when no device access through it confirms it."""

    index: int
    verdict: HostViolation


def heap_allocation(pipeline: LaunchPipeline, heap: int, tag: int) -> AllocationInfo | None:
    """The device-heap block of ``tag`` as the report describes it: the
    kernel launched when it was malloc'd, the source lines of its malloc and
    free (null where the PTX has no line info)."""
    try:
        block = pipeline.heap_block(heap, tag)
    except DeviceMemoryError:  # the heap table went with a context a fault killed
        block = None
    if block is None:
        return None
    made = pipeline.heap_site(block.alloc_origin, block.alloc_site)
    freed = None if block.live else pipeline.heap_site(block.free_origin, block.free_site)

    def line(where: tuple | None) -> str | None:
        site = where[1] if where is not None else None
        return f"{site.file}:{site.line}" if site is not None and site.file and site.line \
            else None

    return AllocationInfo(
        tag=block.tag, base=block.base, size=block.size,
        allocated_at=line(made), freed_at=line(freed),
        allocated_by_kernel=made[0] if made is not None else "(unknown)",
    )


class Findings:
    """The report of one checked process, as it grows."""

    def __init__(self, report: ReportBuilder,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.report = report
        self.problems: list[str] = []  # gpusafe's own failures: never a clean pass
        self.sources = KernelSources()  # kernel sources the program compiled from strings
        self._on_change = on_change

    def forked(self) -> None:
        """In a forked child: the parent reports what it found before the
        fork; the child starts an empty report of its own."""
        old = self.report
        self.report = ReportBuilder(old.command, old.device, max_threads=old.max_threads,
                                    tool=old.tool)
        self.problems = []

    def changed(self) -> None:
        self._on_change()

    def problem(self, message: str) -> None:
        self.problems.append(message)
        self.changed()

    def unimplemented(self, name: str, site: str | None, reason: str) -> None:
        """The program called ``name`` at ``site`` and the backend could not
        serve it: the run cannot pass, whatever the program does next."""
        self.report.record_unimplemented(name, site, reason)
        self.changed()  # the program may well die of it next

    def host_violation(self, v: HostViolation, kernel: str | None = None) -> None:
        self.report.add_host_violation(
            v.kind, location=_location(v.location), address=v.address,
            size=v.size or None, allocation=allocation_info(v.allocation, v.address),
            kernel=kernel, stack=_stack(v.location),
        )
        self.changed()  # rare, and a crash must not lose it

    def device_records(self, kernel: str, records: list[DeviceViolation], dropped: int,
                       registry: Registry, launch_site: CallSite | None = None,
                       freed_arguments: Sequence[FreedArgument] = (),
                       heap: HeapLookup | None = None) -> None:
        """One launch's records, each joined with the allocation it hit: the
        one its pointer was derived from (the tag; a device-heap block through
        ``heap``), or for an access through an unknown pointer, the allocation
        whose memory or red zone holds it.  A record of a malloc/free call
        site (a bad device free) has no access kind or width.

        A freed launch argument that a device access went through is that
        access's entry (which notes the argument), not one of its own: one
        bug, one entry.  One that no access confirmed is reported at the
        launch."""
        if dropped:
            self.report.record_dropped(dropped)
        freed = {a.verdict.allocation.tag: a for a in freed_arguments
                 if a.verdict.allocation is not None}
        confirmed: set[int] = set()
        heap_blocks: dict[int, AllocationInfo | None] = {}
        for r in records:
            s = r.site
            info: AllocationInfo | None
            argument = None
            if is_heap_tag(r.tag):
                if r.tag not in heap_blocks:
                    heap_blocks[r.tag] = heap(r.tag) if heap is not None else None
                block = heap_blocks[r.tag]
                info = None if block is None else replace(block, offset=r.address - block.base)
            else:
                alloc = registry.by_tag.get(r.tag) if r.tag else None
                if alloc is None and s.space in ("global", "generic"):
                    alloc = registry.find(r.address) or registry.nearest(r.address)
                if alloc is not None and r.kind is ViolationKind.USE_AFTER_FREE \
                        and alloc.tag in freed:
                    argument = freed[alloc.tag].index
                    confirmed.add(alloc.tag)
                info = allocation_info(alloc, r.address)
            call = s.check == "heap"
            location, source = None, None
            if s.file and s.line:
                location, source = self.sources.locate(SourceLocation(s.file, s.line, s.column))
            self.report.add_device_violation(
                r.kind, access=None if call else s.access, size=None if call else r.width,
                address=r.address, kernel=kernel, ptx_line=s.ptx_line,
                instruction=s.instruction, block=r.block, thread=r.thread, location=location,
                allocation=info, stack=_stack(launch_site), argument=argument, source=source,
                count=r.count,
            )
        self.freed_arguments(kernel, [a for a in freed_arguments
                                      if a.verdict.allocation is None
                                      or a.verdict.allocation.tag not in confirmed])

    def freed_arguments(self, kernel: str, freed: Sequence[FreedArgument]) -> None:
        """Freed launch arguments no device access confirmed: each is a
        use-after-free at the launch."""
        for a in freed:
            self.host_violation(a.verdict, kernel=kernel)
