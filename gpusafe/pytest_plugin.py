"""``pytest --gpusafe``: a test suite run with memory checking on.

The plugin starts gpusafe inside the pytest process itself (the session
``gpusafe run`` starts in each checked process: backend, engine, Python
door), before the test modules are imported.  After each phase of each test
(setup, call, teardown) it drains the launches in flight and attributes what
was found since the phase began to that test: a test whose code made a bad
access fails, its failure showing the report of what it did, stacks and
pictures included.  What was found outside any test (at import, in a
session fixture's teardown, leaks at exit) fails the run and is listed in
the summary.  At the end the whole session's report is written where
``--gpusafe-sarif``, ``--gpusafe-junit`` and ``--gpusafe-json`` say.

``--gpusafe-device cpu`` runs every kernel on gpusafe's CPU device, so a CI
runner without a GPU checks the suite's GPU code.  A failure of gpusafe itself
(a kernel it could not check, a report file it could not write) is never a
clean pass: it is listed, and the run's exit status is 2 when it would
otherwise have been 0.

Installed, the plugin is found through the ``pytest11`` entry point and
does nothing unless ``--gpusafe`` is given; without the entry point, load it
with ``-p gpusafe.pytest_plugin``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from .cpu.driver_profile import MAX_DEVICES
from .engine.callsite import DEFAULT_STACK_DEPTH
from .exitcodes import EXIT_TOOL_ERROR
from .process import session as sessions
from .process.start import LaunchError, choose_device
from .report import Report, Violation, formats, suppressions
from .report.terminal import render_entries


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpusafe", "GPU memory-safety checking (gpusafe)")
    group.addoption("--gpusafe", action="store_true",
                    help="check every CUDA call and kernel the tests make; a test that makes "
                         "a bad access fails with gpusafe's report")
    group.addoption("--gpusafe-device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where kernels run: the GPU (cuda), gpusafe's CPU device (cpu), or "
                         "the GPU when one works and the CPU device otherwise (auto)")
    for name in ("sarif", "junit", "json"):
        group.addoption(f"--gpusafe-{name}", metavar="FILE",
                        help=f"write the whole session's report as {name.upper()} to FILE")
    group.addoption("--gpusafe-suppressions", action="append", default=[], metavar="FILE",
                    help="do not fail on the violations a suppressions file matches "
                         "(repeatable; the format of gpusafe run --suppressions)")
    group.addoption("--gpusafe-leak-check", action="store_true",
                    help="report allocations still live when the session ends")
    group.addoption("--gpusafe-stack-depth", type=int, default=DEFAULT_STACK_DEPTH, metavar="N",
                    help=f"frames kept per call site (default {DEFAULT_STACK_DEPTH})")
    group.addoption("--gpusafe-cpu-devices", type=int, default=1, metavar="N",
                    help=f"devices of the CPU device (1-{MAX_DEVICES}, default 1), as "
                         "gpusafe run --cpu-devices")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("gpusafe"):
        config.pluginmanager.register(GpusafePlugin(config), "gpusafe-checking")


class GpusafePlugin:
    """One checked pytest session: what each test found, and the report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        try:
            self.suppress = suppressions.load(config.getoption("gpusafe_suppressions"))
            device, name, self.note = choose_device(config.getoption("gpusafe_device"))
        except (suppressions.SuppressionError, LaunchError) as e:
            raise pytest.UsageError(f"gpusafe: {e}") from None
        depth = config.getoption("gpusafe_stack_depth")
        if depth < 0:
            raise pytest.UsageError("gpusafe: --gpusafe-stack-depth must not be negative")
        cpu_devices = config.getoption("gpusafe_cpu_devices")
        if not 1 <= cpu_devices <= MAX_DEVICES:
            raise pytest.UsageError(f"gpusafe: --gpusafe-cpu-devices must be 1-{MAX_DEVICES}")
        running = sessions.current()
        if running is not None:  # under `gpusafe run pytest --gpusafe`: its session checks
            self.session = running
        else:
            options = sessions.RunOptions(device=device, device_name=name,
                                          leak_check=config.getoption("gpusafe_leak_check"),
                                          stack_depth=depth, cpu_devices=cpu_devices)
            self.session = sessions.Session(options, None)
            self.session.install()
        self._seen: dict[tuple, int] = {}
        self.outside: list[Violation] = []  # found outside every test
        self.failed_tests = 0

    # -- attribution -------------------------------------------------------

    def _new(self) -> list[Violation]:
        """Entries (with the occurrences) found since the last call."""
        if self.session.engine is not None:
            self.session.engine.drain()
        new = []
        for v in self.session.report.violations():
            before = self._seen.get(v.dedup_key, 0)
            if v.count > before:
                new.append(replace(v, count=v.count - before))
            self._seen[v.dedup_key] = v.count
        return self._unsuppressed(new)

    def _unsuppressed(self, violations: list[Violation]) -> list[Violation]:
        if not self.suppress or not violations:
            return violations
        return [v for v in violations if not any(s.matches(v) for s in self.suppress)]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.outside += self._new()  # between tests: nobody's

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        found = self._new()
        if not found:
            return
        text = (f"gpusafe found {len(found)} violation{'s' if len(found) != 1 else ''} "
                f"in {call.when} of {item.nodeid}:\n\n"
                + render_entries(found, search_dirs=[Path(str(item.path)).parent,
                                                     Path.cwd()]))
        if report.outcome == "failed":  # failed on its own: the report goes with it
            report.sections.append(("gpusafe", text))
        else:
            report.outcome = "failed"
            report.longrepr = text
        self.failed_tests += 1

    # -- the end -----------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.session is not sessions.current():
            self.session.finish()  # the last launches, and leaks when asked for
        elif self.session.engine is not None:
            self.session.engine.drain()
        self.outside += self._new()
        report = self.session.report.build(exit_code=int(exitstatus))
        self.unused: Sequence[str] = ()
        if self.suppress:
            report, unmatched = suppressions.apply(report, self.suppress)
            self.unused = [str(s) for s in unmatched]
        self.problems = list(self.session.findings.problems) + self._write(report)
        self.report = report
        if self.outside and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.problems and session.exitstatus == 0:
            session.exitstatus = EXIT_TOOL_ERROR

    def _write(self, report: Report) -> list[str]:
        """Write the report files asked for; one line per file that could not be."""
        unwritten = []
        for name in ("sarif", "junit", "json"):
            path = self.config.getoption(f"gpusafe_{name}")
            if path is None:
                continue
            try:
                Path(path).write_text(formats.render(report, name))
            except OSError as e:
                unwritten.append(f"cannot write {path} (--gpusafe-{name}): "
                                 f"{e.strerror or e}")
        return unwritten

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        report: Report | None = getattr(self, "report", None)
        if report is None:
            return
        tr.section("gpusafe")
        tr.write_line(f"gpusafe: {self.note}")
        s = report.summary
        tr.write_line(f"gpusafe: {s.violations} violation{'s' if s.violations != 1 else ''} "
                      f"({s.occurrences} occurrences), {s.launches} checked launches of "
                      f"{s.kernels_checked} kernels, {self.failed_tests} test phase(s) failed by "
                      "gpusafe" + (f", {s.suppressed} suppressed" if s.suppressed else ""))
        if self.outside:
            tr.write_line("gpusafe: found outside every test:", red=True)
            tr.write(render_entries(self.outside, search_dirs=[Path.cwd()]))
        for k in report.unchecked_kernels or ():
            tr.write_line(f"gpusafe: kernel NOT checked: {k.name}: {k.reason}", yellow=True)
        for f in report.faults:
            tr.write_line(f"gpusafe: device fault: kernel {f.kernel}: {f.error} {f.detail}",
                          yellow=True)
        for line in self.unused:
            tr.write_line(f"gpusafe: suppression matched nothing: {line}", yellow=True)
        for problem in self.problems:
            tr.write_line(f"gpusafe: error: {problem}", red=True)
        if self.problems:
            print(f"gpusafe: {len(self.problems)} failure(s) of gpusafe itself: the run is not "
                  "a clean pass", file=sys.stderr)

