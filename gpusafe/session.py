"""gpusafe inside one checked process: options, registry, findings, hand-off.

The bootstrap calls :func:`start` before the program's own code runs.  The
session installs the interposer, collects what the checks find, and writes
this process's report into the session directory at every drain point and at
exit (atomically, so a crash loses at most what happened since the last
drain).  ``gpusafe run`` merges the reports of every process it started.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .registry import DEFAULT_PADDING, DEFAULT_QUARANTINE, HostViolation, Registry
from .report import AllocationInfo, ReportBuilder, SourceLocation


@dataclass(frozen=True)
class RunOptions:
    """What ``gpusafe run`` passes to every process it checks."""

    device: str = "cpu"  # "cpu" or "cuda"
    device_name: str = "cpu"
    padding: int = DEFAULT_PADDING
    quarantine: int = DEFAULT_QUARANTINE
    leak_check: bool = False
    check: bool = True  # False: route driver calls to the device, check nothing
    kernel_filter: str | None = None  # regex: check only the kernels it matches

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> RunOptions:
        return cls(**json.loads(text))


def allocation_info(alloc, address: int | None) -> AllocationInfo | None:
    if alloc is None:
        return None
    return AllocationInfo(
        tag=alloc.tag, base=alloc.base, size=alloc.size,
        offset=None if address is None else address - alloc.base,
        allocated_at=alloc.allocated_at, freed_at=alloc.freed_at,
    )


class Session:
    def __init__(self, options: RunOptions, directory: Path | None) -> None:
        self.options = options
        self.directory = directory
        self.registry = Registry(options.padding, options.quarantine)
        command = list(getattr(sys, "orig_argv", sys.argv))
        self.report = ReportBuilder(command, options.device_name)
        self.problems: list[str] = []  # gpusafe's own failures: never a clean pass
        self._lock = threading.Lock()
        self._finished = False
        self._flushed_state = (0, 0)

    def host_violation(self, v: HostViolation, kernel: str | None = None) -> None:
        self.report.add_host_violation(
            v.kind, location=SourceLocation.parse(v.location), address=v.address,
            size=v.size or None, allocation=allocation_info(v.allocation, v.address),
            kernel=kernel,
        )
        if not self._finished:
            self.flush_if_new()  # rare, and a crash must not lose it

    def flush(self) -> None:
        """Write this process's findings so far where ``gpusafe run`` reads them."""
        if self.directory is None:
            return
        with self._lock:
            text = self.report.build(exit_code=None).to_json()
            path = self.directory / f"{os.getpid()}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            if self.problems:
                (self.directory / f"{os.getpid()}.failed").write_text("\n".join(self.problems))

    def flush_if_new(self) -> None:
        """Flush at a drain point when something was found since the last
        flush: a program killed later keeps its findings, and a clean program
        with many launches does not rewrite its report after each one."""
        state = (self.report.occurrences, len(self.problems))
        if state != self._flushed_state:
            self._flushed_state = state
            self.flush()

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        from . import interposer

        interposer.drain_all(self)
        if self.options.leak_check:
            for leak in self.registry.leaks():
                self.host_violation(leak)
        self.flush()


_SESSION: Session | None = None


def current() -> Session | None:
    return _SESSION


def start() -> Session:
    """Called by the bootstrap: build the session from the environment and
    install the interposer."""
    global _SESSION
    options = RunOptions.from_json(os.environ.get("GPUSAFE_OPTIONS", "{}"))
    directory = Path(os.environ["GPUSAFE_SESSION"]) if os.environ.get("GPUSAFE_SESSION") else None
    session = Session(options, directory)
    _SESSION = session
    from . import interposer

    interposer.install(session)
    session.flush()  # an empty report says "this process started and was checked"
    atexit.register(session.finish)
    return session
