"""Findings: device records and host verdicts become report entries.

Everything gpusafe learns in a checked process arrives here: a host check's
verdict (:class:`~gpusafe.engine.registry.HostViolation`), a launch's device
records (joined with their site and the allocation they hit), a kernel that
ran unchecked, a failure of gpusafe itself.  ``on_change`` is called when
something new was found, so the process can write its findings out before
it may die.
"""

from __future__ import annotations

from collections.abc import Callable

from gpusafe_instrument.host import DeviceViolation

from ..report import AllocationInfo, ReportBuilder, SourceLocation
from .registry import Allocation, HostViolation, Registry


def allocation_info(alloc: Allocation | None, address: int | None) -> AllocationInfo | None:
    if alloc is None:
        return None
    return AllocationInfo(
        tag=alloc.tag, base=alloc.base, size=alloc.size,
        offset=None if address is None else address - alloc.base,
        allocated_at=alloc.allocated_at, freed_at=alloc.freed_at,
    )


class Findings:
    """The report of one checked process, as it grows."""

    def __init__(self, report: ReportBuilder,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.report = report
        self.problems: list[str] = []  # gpusafe's own failures: never a clean pass
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
            v.kind, location=SourceLocation.parse(v.location), address=v.address,
            size=v.size or None, allocation=allocation_info(v.allocation, v.address),
            kernel=kernel,
        )
        self.changed()  # rare, and a crash must not lose it

    def device_records(self, kernel: str, records: list[DeviceViolation], dropped: int,
                       registry: Registry) -> None:
        """One launch's records, each joined with the allocation it hit: the
        one its pointer was derived from (the tag), or for an access through
        an unknown pointer, the allocation whose memory or red zone holds it."""
        if dropped:
            self.report.record_dropped(dropped)
        for r in records:
            alloc = registry.by_tag.get(r.tag) if r.tag else None
            if alloc is None and r.site.space in ("global", "generic"):
                alloc = registry.find(r.address) or registry.nearest(r.address)
            s = r.site
            location = SourceLocation(s.file, s.line, s.column) if s.file and s.line else None
            self.report.add_device_violation(
                r.kind, access=s.access, size=r.width, address=r.address,
                kernel=kernel, ptx_line=s.ptx_line, instruction=s.instruction,
                block=r.block, thread=r.thread, location=location,
                allocation=allocation_info(alloc, r.address),
            )
