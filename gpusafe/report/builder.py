"""Folding a session's violation occurrences into deduplicated entries: the
:class:`ReportBuilder` the run machinery feeds as things happen, which builds
the :class:`~gpusafe.report.model.Report` at the end."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from gpusafe_instrument.kinds import AccessKind, ViolationKind

from .model import (
    DEFAULT_MAX_THREADS,
    AllocationInfo,
    CheckedKernel,
    DeviceFault,
    Dim3,
    Report,
    SourceLocation,
    Summary,
    ThreadId,
    ToolInfo,
    UncheckedKernel,
    UnimplementedCall,
    Violation,
)
from .stacks import Stack


class ReportBuilder:
    """Folds a session's violation occurrences into deduplicated entries.

    The run machinery feeds it as things happen::

        b = ReportBuilder(["python", "app.py"], device="cpu")
        b.record_launch("oob_write")                       # each checked launch
        b.add_device_violation(ViolationKind.GLOBAL_OUT_OF_BOUNDS, access="write",
                               size=4, address=0x7f0000001040, kernel="oob_write",
                               ptx_line=41, instruction="st.global.f32 [%rd8], %f2;",
                               location=SourceLocation("oob.cu", 5, 5),
                               block=(0, 0, 0), thread=(16, 0, 0), allocation=alloc)
        b.add_host_violation(ViolationKind.DOUBLE_FREE,
                             location=SourceLocation("app.py", 40),
                             address=alloc.base, allocation=alloc)
        report = b.build(exit_code=0)

    Entries keep the facts of the first occurrence of their key (address,
    allocation offset), a count of all of them, and the first
    ``max_threads`` distinct offending threads.
    """

    def __init__(
        self,
        command: Sequence[str],
        device: str,
        *,
        max_threads: int = DEFAULT_MAX_THREADS,
        tool: ToolInfo | None = None,
    ) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self.command = tuple(command)
        self.device = device
        self.max_threads = max_threads
        self.tool = tool or ToolInfo()
        self._entries: dict[tuple, _Entry] = {}
        self._launches: dict[str, int] = {}
        self._unchecked: dict[str, UncheckedKernel] = {}
        self._unimplemented: dict[tuple[str, str | None, str], int] = {}
        self._faults: list[DeviceFault] = []
        self._notes: list[str] = []
        self._dropped = 0
        self._suppressed: int | None = None
        # Records are drained at synchronisation points, which a program may
        # reach from several threads at once.
        self._lock = threading.RLock()

    # -- violations ----------------------------------------------------------

    def add(self, violation: Violation) -> None:
        """Fold one entry (``count`` occurrences, its ``threads``) into the report."""
        if violation.count < 1:
            raise ValueError("a violation entry counts at least one occurrence")
        key = violation.dedup_key
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(violation)
            entry.count += violation.count
            if violation.threads is not None:
                for t in violation.threads:
                    if len(entry.threads) >= self.max_threads:
                        break
                    if t not in entry.threads:
                        entry.threads.append(t)

    def add_device_violation(
        self,
        kind: ViolationKind | str,
        *,
        access: AccessKind | str | None,
        size: int | None,
        address: int,
        kernel: str,
        ptx_line: int | None,
        instruction: str | None,
        block: Sequence[int],
        thread: Sequence[int],
        location: SourceLocation | None = None,
        allocation: AllocationInfo | None = None,
        count: int = 1,
        stack: Stack | None = None,
        argument: int | None = None,
        source: tuple[tuple[int, str], ...] | None = None,
    ) -> None:
        """One access a kernel attempted and the check refused (one drained
        device record, mapped through the site table)."""
        self.add(Violation(
            kind=ViolationKind(kind),
            access=None if access is None else AccessKind(access),
            size=size,
            address=address,
            kernel=kernel,
            location=location,
            ptx_line=ptx_line,
            instruction=instruction,
            count=count,
            threads=(ThreadId(_as_dim3(block), _as_dim3(thread)),),
            allocation=allocation,
            stack=stack,
            argument=argument,
            source=source,
        ))

    def add_host_violation(
        self,
        kind: ViolationKind | str,
        *,
        location: SourceLocation | None = None,
        address: int | None = None,
        size: int | None = None,
        allocation: AllocationInfo | None = None,
        kernel: str | None = None,
        stack: Stack | None = None,
    ) -> None:
        """A violation found on the host: a bad free or copy (``location`` is
        the program's call site), a freed pointer passed to a launch
        (``kernel`` names the kernel), or a leak (``location`` is the
        allocation site, taken from ``allocation.allocated_at`` when not given)."""
        kind = ViolationKind(kind)
        if location is None and kind is ViolationKind.LEAK and allocation is not None:
            location = SourceLocation.parse(allocation.allocated_at)
        self.add(Violation(
            kind=kind,
            size=size,
            address=address,
            kernel=kernel,
            location=location,
            allocation=allocation,
            stack=stack,
        ))

    # -- launches --------------------------------------------------------------

    def record_launch(self, kernel: str) -> None:
        """A launch of a kernel that ran with checking on."""
        with self._lock:
            self._launches[kernel] = self._launches.get(kernel, 0) + 1

    @property
    def launch_total(self) -> int:
        """Checked and unchecked launches so far: what a flush must keep
        current so that a killed program's report still counts them."""
        with self._lock:
            return sum(self._launches.values()) + sum(
                u.launches or 0 for u in self._unchecked.values())

    def record_unchecked(self, kernel: str, reason: str, launches: int | None = 1,
                         requested: bool = False) -> None:
        """``launches`` launches of a kernel that ran without checking (None:
        not counted); the first reason given is kept, and the kernel counts
        as requested only while every reason given was a request."""
        with self._lock:
            old = self._unchecked.get(kernel)
            if old is not None:
                n = None if old.launches is None and launches is None else \
                    (old.launches or 0) + (launches or 0)
                self._unchecked[kernel] = replace(old, launches=n,
                                                  requested=old.requested and requested)
            else:
                self._unchecked[kernel] = UncheckedKernel(kernel, reason, launches, requested)

    def record_unimplemented(self, name: str, site: str | None, reason: str,
                             count: int = 1) -> None:
        """A call the backend could not serve, at the program's ``site``."""
        with self._lock:
            key = (name, site, reason)
            self._unimplemented[key] = self._unimplemented.get(key, 0) + count

    @property
    def unimplemented_count(self) -> int:
        with self._lock:
            return sum(self._unimplemented.values())

    def record_fault(self, kernel: str, error: str, detail: str) -> None:
        """A launch that ended in a device fault."""
        with self._lock:
            self._faults.append(DeviceFault(kernel, error, detail))

    def record_dropped(self, records: int) -> None:
        """Device records lost because the violation buffer was full."""
        with self._lock:
            self._dropped += records

    def add_notes(self, notes: Sequence[str]) -> None:
        """Notes on how the run was carried out, each kept once, in order."""
        with self._lock:
            self._notes.extend(n for n in dict.fromkeys(notes) if n not in self._notes)

    def merge(self, report: Report) -> None:
        """Fold another report (a child process's) into this one."""
        with self._lock:
            for v in report.violations:
                self.add(v)
            for k in report.checked_kernels or ():
                self._launches[k.name] = self._launches.get(k.name, 0) + k.launches
            for u in report.unchecked_kernels or ():
                self.record_unchecked(u.name, u.reason, u.launches, u.requested)
            for c in report.unimplemented_calls:
                self.record_unimplemented(c.name, c.site, c.reason, c.count)
            self._faults.extend(report.faults)
            self.add_notes(report.notes)
            self._dropped += report.summary.dropped
            if report.summary.suppressed is not None:
                self._suppressed = (self._suppressed or 0) + report.summary.suppressed

    # -- result ----------------------------------------------------------------

    @property
    def occurrences(self) -> int:
        with self._lock:
            return sum(e.count for e in self._entries.values())

    def violations(self) -> tuple[Violation, ...]:
        with self._lock:
            return tuple(e.freeze() for e in self._entries.values())

    def build(self, exit_code: int | None) -> Report:
        """The report so far (the builder stays usable: build again later)."""
        with self._lock:
            violations = self.violations()
            checked = tuple(CheckedKernel(n, c) for n, c in self._launches.items())
            unchecked = tuple(self._unchecked.values())
            unimplemented = tuple(UnimplementedCall(n, s, r, c)
                                  for (n, s, r), c in self._unimplemented.items())
            faults = tuple(self._faults)
            notes = tuple(self._notes)
            dropped = self._dropped
            suppressed = self._suppressed
        return Report(
            command=self.command,
            device=self.device,
            exit_code=exit_code,
            violations=violations,
            summary=Summary(
                violations=len(violations),
                occurrences=sum(v.count for v in violations),
                kernels_checked=len(checked),
                launches=sum(k.launches for k in checked),
                dropped=dropped,
                suppressed=suppressed,
                unchecked_launches=sum(k.launches or 0 for k in unchecked),
                unimplemented_calls=sum(c.count for c in unimplemented),
            ),
            tool=self.tool,
            checked_kernels=checked,
            unchecked_kernels=unchecked,
            faults=faults,
            unimplemented_calls=unimplemented,
            notes=notes,
        )


class _Entry:
    __slots__ = ("first", "count", "threads")

    def __init__(self, first: Violation) -> None:
        self.first = first
        self.count = 0
        self.threads: list[ThreadId] = []

    def freeze(self) -> Violation:
        threads = tuple(self.threads) if self.first.threads is not None else None
        return replace(self.first, count=self.count, threads=threads)


def _as_dim3(v: Sequence[int]) -> Dim3:
    t = tuple(int(x) for x in v)
    if len(t) != 3:
        raise ValueError(f"expected three coordinates (x, y, z), got {tuple(v)!r}")
    return t  # type: ignore[return-value]


