"""gpusafe inside one checked process: options, backend, engine, hand-off.

The bootstrap calls :func:`start` before the program's own code runs.  The
session opens the backend, builds the engine, installs the Python door,
collects what the engine finds, and writes
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

from ..backends import open_backend
from ..doors.python import install_python_door
from ..engine import callsite
from ..engine.callsite import DEFAULT_STACK_DEPTH
from ..engine.checking import Engine, Policy
from ..engine.findings import Findings
from ..engine.registry import DEFAULT_PADDING, DEFAULT_QUARANTINE
from ..report import ReportBuilder


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
    kernel_timeout: float | None = None  # seconds a kernel may run on the CPU device
    stack_depth: int = DEFAULT_STACK_DEPTH  # program frames kept per call site
    cpu_devices: int = 1  # devices of the CPU device backend (--cpu-devices)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> RunOptions:
        return cls(**json.loads(text))


class Session:
    def __init__(self, options: RunOptions, directory: Path | None) -> None:
        self.options = options
        self.directory = directory
        command = list(getattr(sys, "orig_argv", sys.argv))
        self.findings = Findings(ReportBuilder(command, options.device_name), self.flush_if_new)
        self.engine: Engine | None = None
        self._lock = threading.Lock()
        self._finished = False
        self._flushed_state = (0, 0, 0)

    @property
    def report(self) -> ReportBuilder:
        return self.findings.report

    def install(self) -> None:
        """Open the backend and put the Python door in front of it."""
        backend = open_backend(self.options.device, pads=self.options.check,
                               kernel_timeout=self.options.kernel_timeout,
                               cpu_devices=self.options.cpu_devices)
        callsite.configure(self.options.stack_depth)
        if self.options.check:
            o = self.options
            self.engine = Engine(backend, self.findings,
                                 Policy(o.padding, o.quarantine, o.leak_check, o.kernel_filter))
        install_python_door(backend, self.engine, self.findings)
        if self.options.device == "cpu":
            from ..native.frameworks import install_framework_hooks

            install_framework_hooks(self.findings)  # frameworks that load the driver themselves
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child reports only what it finds after the fork, in a
        findings file of its own."""
        self.findings.forked()
        if self.engine is not None:
            self.engine.forked()
        self._lock = threading.Lock()
        self._flushed_state = (0, 0, 0)

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
            if self.findings.problems:
                (self.directory / f"{os.getpid()}.failed").write_text(
                    "\n".join(self.findings.problems))

    def flush_if_new(self) -> None:
        """Flush at a drain point when something was found since the last
        flush: a program killed later keeps its findings, and a clean program
        with many launches does not rewrite its report after each one."""
        if self._finished:
            return
        state = (self.report.occurrences, len(self.findings.problems),
                 self.report.unimplemented_count)
        if state != self._flushed_state:
            self._flushed_state = state
            self.flush()

    def finish(self) -> None:
        if self._finished:
            return
        if self.engine is not None:
            self.engine.finish()
        self._finished = True
        self.flush()


_SESSION: Session | None = None


def current() -> Session | None:
    return _SESSION


def start() -> Session:
    """Called by the bootstrap: build the session from the environment and
    install the door."""
    global _SESSION
    options = RunOptions.from_json(os.environ.get("GPUSAFE_OPTIONS", "{}"))
    directory = Path(os.environ["GPUSAFE_SESSION"]) if os.environ.get("GPUSAFE_SESSION") else None
    session = Session(options, directory)
    _SESSION = session
    session.install()
    session.flush()  # an empty report says "this process started and was checked"
    atexit.register(session.finish)
    return session
