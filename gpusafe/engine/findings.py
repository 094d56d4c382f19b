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
from dataclasses import dataclass

from gpusafe_instrument.host import DeviceViolation
from gpusafe_instrument.kinds import ViolationKind

from ..report import AllocationInfo, ReportBuilder, SourceLocation, Stack
from .callsite import CallSite
from .registry import Allocation, HostViolation, Registry
from .sources import KernelSources


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

    def host_violation(self, v: HostViolation, kernel: str | None = None) -> None:
        self.report.add_host_violation(
            v.kind, location=_location(v.location), address=v.address,
            size=v.size or None, allocation=allocation_info(v.allocation, v.address),
            kernel=kernel, stack=_stack(v.location),
        )
        self.changed()  # rare, and a crash must not lose it

    def device_records(self, kernel: str, records: list[DeviceViolation], dropped: int,
                       registry: Registry, launch_site: CallSite | None = None,
                       freed_arguments: Sequence[FreedArgument] = ()) -> None:
        """One launch's records, each joined with the allocation it hit: the
        one its pointer was derived from (the tag), or for an access through
        an unknown pointer, the allocation whose memory or red zone holds it.

        A freed launch argument that a device access went through is that
        access's entry (which notes the argument), not one of its own: one
        bug, one entry.  One that no access confirmed is reported at the
        launch."""
        if dropped:
            self.report.record_dropped(dropped)
        freed = {a.verdict.allocation.tag: a for a in freed_arguments
                 if a.verdict.allocation is not None}
        confirmed: set[int] = set()
        for r in records:
            alloc = registry.by_tag.get(r.tag) if r.tag else None
            if alloc is None and r.site.space in ("global", "generic"):
                alloc = registry.find(r.address) or registry.nearest(r.address)
            argument = None
            if alloc is not None and r.kind is ViolationKind.USE_AFTER_FREE \
                    and alloc.tag in freed:
                argument = freed[alloc.tag].index
                confirmed.add(alloc.tag)
            s = r.site
            location, source = None, None
            if s.file and s.line:
                location, source = self.sources.locate(SourceLocation(s.file, s.line, s.column))
            self.report.add_device_violation(
                r.kind, access=s.access, size=r.width, address=r.address,
                kernel=kernel, ptx_line=s.ptx_line, instruction=s.instruction,
                block=r.block, thread=r.thread, location=location,
                allocation=allocation_info(alloc, r.address),
                stack=_stack(launch_site), argument=argument, source=source,
            )
        self.freed_arguments(kernel, [a for a in freed_arguments
                                      if a.verdict.allocation is None
                                      or a.verdict.allocation.tag not in confirmed])

    def freed_arguments(self, kernel: str, freed: Sequence[FreedArgument]) -> None:
        """Freed launch arguments no device access confirmed: each is a
        use-after-free at the launch."""
        for a in freed:
            self.host_violation(a.verdict, kernel=kernel)
