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
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..backends import Backend, open_backend
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
    every_offender: bool = False  # keep every failing access, not each site's first few
    kernel_timeout: float | None = None  # seconds a kernel may run on the CPU device
    stack_depth: int = DEFAULT_STACK_DEPTH  # program frames kept per call site
    cpu_devices: int = 1  # devices of the CPU device backend (--cpu-devices)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> RunOptions:
        return cls(**json.loads(text))


# How stale the launch counts on disk may get while nothing else changes.
_LAUNCH_FLUSH_INTERVAL_S = 1.0


class Session:
    def __init__(self, options: RunOptions, directory: Path | None) -> None:
        self.options = options
        self.directory = directory
        command = list(getattr(sys, "orig_argv", sys.argv))
        self.findings = Findings(ReportBuilder(command, options.device_name), self.flush_if_new)
        self.engine: Engine | None = None
        self.backend: Backend | None = None
        self._lock = threading.Lock()
        self._finished = False
        self._flushed_state = (0, 0, 0)
        self._flushed_launches = 0
        self._flushed_at = time.monotonic()

    @property
    def report(self) -> ReportBuilder:
        return self.findings.report

    def install(self) -> None:
        """Open the backend and put the Python door in front of it."""
        self.backend = backend = open_backend(self.options.device, pads=self.options.check,
                                              kernel_timeout=self.options.kernel_timeout,
                                              cpu_devices=self.options.cpu_devices)
        callsite.configure(self.options.stack_depth)
        if self.options.check:
            o = self.options
            self.engine = Engine(backend, self.findings,
                                 Policy(o.padding, o.quarantine, o.leak_check, o.kernel_filter,
                                        o.every_offender))
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
        self._flushed_launches = 0

    def flush(self, wait: bool = True) -> None:
        """Write this process's findings so far where ``gpusafe run`` reads
        them.  ``wait=False`` (from a signal handler, which may have
        interrupted a flush of this thread): skip when a flush is under way,
        whose predecessor is on disk whole."""
        if self.directory is None or not self._lock.acquire(blocking=wait):
            return
        try:
            if self.backend is not None:
                self.report.add_notes(self.backend.notes())
            text = self.report.build(exit_code=None).to_json()
            path = self.directory / f"{os.getpid()}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            if self.findings.problems:
                (self.directory / f"{os.getpid()}.failed").write_text(
                    "\n".join(self.findings.problems))
        finally:
            self._lock.release()

    def flush_if_new(self) -> None:
        """Flush at a drain point when something was found since the last
        flush, or when launches were counted and the last flush is a second
        old: a program killed later keeps its findings and (but for its last
        second) its launch counts, and a clean program with many launches
        does not rewrite its report after each one."""
        if self._finished:
            return
        state = (self.report.occurrences, len(self.findings.problems),
                 self.report.unimplemented_count)
        launches = self.report.launch_total
        now = time.monotonic()
        if state != self._flushed_state or (
                launches != self._flushed_launches
                and now - self._flushed_at >= _LAUNCH_FLUSH_INTERVAL_S):
            self._flushed_state = state
            self._flushed_launches = launches
            self._flushed_at = now
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
    _finish_on_termination(session)
    return session


def _finish_on_termination(session: Session) -> None:
    """SIGTERM and SIGHUP (a CI timeout, a closed terminal, gpusafe passing
    on its own) end a process without running ``atexit``: the report would
    lose everything since the last flush, launch counts included.  Where
    the program keeps the default action, gpusafe's handler writes the
    report, then dies of the same signal.  Only where Python installed its
    own signal handlers at start-up, i.e. in a Python program: an
    interpreter embedded in a native program has none, and a Python-level
    handler there would run only at the next driver call, leaving the
    program deaf to the signal.  (Not told by SIGINT's handler: a Python
    program started with SIGINT ignored, as a background job of a script is,
    has no ``default_int_handler`` either.)"""
    if threading.current_thread() is not threading.main_thread() or callsite.native_program():
        return

    def finish_and_die(signum: int, frame: object) -> None:
        # Not session.finish(): the leak check of a killed program would
        # name every allocation it had no chance to free.
        session.flush(wait=False)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, finish_and_die)
