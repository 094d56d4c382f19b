"""Host stacks: which frames a call site keeps, which one it names, and how
every output shows them (issue 12)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusafe.engine import callsite
from gpusafe.engine.callsite import CallSite, program_site
from gpusafe.report import AllocationInfo, Frame, Report, ReportBuilder, SourceLocation
from gpusafe.report.sarif import to_sarif
from gpusafe.report.terminal import render_text
from gpusafe_instrument.kinds import ViolationKind

HERE = Path(__file__).name


@pytest.fixture(autouse=True)
def default_depth() -> Iterator[None]:
    callsite.configure(callsite.DEFAULT_STACK_DEPTH)
    yield
    callsite.configure(callsite.DEFAULT_STACK_DEPTH)


def _line() -> int:
    return sys._getframe(1).f_lineno


# What a door does: the wrapped API function asks for the site of its caller.
def api_call() -> CallSite | None:
    return program_site(2)


def alloc() -> CallSite | None:
    return api_call()


def alloc_with_docstring() -> CallSite | None:
    """A documented one-statement helper is still a helper."""
    return api_call()


def alloc_and_log() -> CallSite | None:
    site = api_call()
    return site


def hidden_helper() -> CallSite | None:
    __tracebackhide__ = True
    site = api_call()
    return site


def alloc_f32() -> CallSite | None:
    return alloc()


def test_a_direct_call_is_named_at_its_line() -> None:
    site = api_call(); line = _line()  # noqa: E702 - the call and its line number together
    assert str(site) == f"{Path(__file__).relative_to(Path.cwd())}:{line}" \
        or str(site).endswith(f"{HERE}:{line}")
    assert site.frames[0].function == "test_a_direct_call_is_named_at_its_line"


@pytest.mark.parametrize("helper", [alloc, alloc_with_docstring, hidden_helper, alloc_f32])
def test_a_call_through_a_helper_is_named_at_the_callers_line(helper) -> None:
    site = helper(); line = _line()  # noqa: E702
    assert site.frame.line == line and site.frame.function.startswith("test_a_call_through")
    # the stack still holds the helper's own frames, innermost first
    helpers = [f.function for f in site.frames[:site.top]]
    assert helpers == (["alloc", "alloc_f32"] if helper is alloc_f32 else [helper.__name__])
    assert site.stack[site.top] == site.frame


def test_a_function_that_does_more_than_forward_is_named_itself() -> None:
    site = alloc_and_log(); line = _line()  # noqa: E702
    assert site.frame.function == "alloc_and_log" and site.top == 0
    assert site.frames[1].line == line


def deep(n: int) -> CallSite | None:
    if n == 0:
        return alloc()
    site = deep(n - 1)
    return site


def test_the_depth_bounds_the_frames_but_never_drops_the_named_one() -> None:
    callsite.configure(3)
    site = deep(5)
    assert [f.function for f in site.frames] == ["alloc", "deep", "deep"] and site.top == 1
    callsite.configure(1)
    assert [f.function for f in deep(5).frames] == ["alloc", "deep"]
    callsite.configure(32)
    # what called the test depends on the runner (pytest-xdist's workers run
    # from ``<string>``, which is a program's own code): stop at the test
    assert [f.function for f in deep(5).frames][:8] == ["alloc"] + ["deep"] * 6 + [
        "test_the_depth_bounds_the_frames_but_never_drops_the_named_one"]


def test_depth_zero_keeps_only_the_named_line() -> None:
    callsite.configure(0)
    site = alloc(); line = _line()  # noqa: E702
    assert site.frame.line == line and site.stack is None and len(site.frames) == 1


def test_installed_packages_and_the_standard_library_are_folded(tmp_path: Path) -> None:
    lib = tmp_path / "lib" / "python3" / "site-packages" / "somelib.py"
    source = "def allocate(f):\n    x = 1\n    return f()\n"
    namespace: dict = {}
    exec(compile(source, str(lib), "exec"), namespace)  # noqa: S102 - a library's frame
    site = namespace["allocate"](api_call); line = _line()  # noqa: E702
    assert all("site-packages" not in f.file for f in site.frames)
    assert site.frame.line == line
    # only a library on the stack: its frame rather than nothing
    only = namespace["allocate"](lambda: program_site(1))
    assert only is not None


# --------------------------------------------------------------------------
# the report


ALLOC = (Frame("app.py", 5, "alloc"), Frame("app.py", 31, "main"), Frame("app.py", 40, "<module>"))
FREE = (Frame("app.py", 9, "release"), Frame("app.py", 35, "main"))
AGAIN = (Frame("app.py", 11, "release_again"), Frame("app.py", 38, "main"))


def report_with_stacks() -> Report:
    b = ReportBuilder(["python", "app.py"], "cpu")
    alloc = AllocationInfo(tag=1, base=0x7F0000001000, size=64, offset=0,
                           allocated_at="app.py:31", freed_at="app.py:35",
                           allocated_stack=ALLOC, freed_stack=FREE)
    b.add_host_violation(ViolationKind.DOUBLE_FREE, location=SourceLocation("app.py", 38),
                         address=0x7F0000001000, allocation=alloc, stack=AGAIN)
    b.add_device_violation(ViolationKind.USE_AFTER_FREE, access="read", size=4,
                           address=0x7F0000001008, kernel="k", ptx_line=20,
                           instruction="ld.global.f32 %f1, [%rd4];", block=(0, 0, 0),
                           thread=(2, 0, 0), location=SourceLocation("k.cu", 4, 5),
                           allocation=alloc, argument=0, stack=ALLOC[1:])
    return b.build(exit_code=0)


def test_stacks_round_trip_through_json() -> None:
    report = report_with_stacks()
    text = report.to_json()
    doc = json.loads(text)
    assert doc["violations"][0]["stack"][1] == {"file": "app.py", "line": 38, "function": "main"}
    assert doc["violations"][0]["allocation"]["allocated_at"] == "app.py:31"
    assert doc["violations"][1]["argument"] == 0
    assert Report.from_json(text) == report and Report.from_json(text).to_json() == text


def test_a_report_without_stacks_is_written_as_before() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_host_violation(ViolationKind.DOUBLE_FREE, location=SourceLocation("app.py", 38))
    doc = b.build(exit_code=0).to_dict()
    assert "stack" not in doc["violations"][0] and "argument" not in doc["violations"][0]


def test_the_terminal_numbers_the_frames_as_asan_does() -> None:
    text = render_text(report_with_stacks())
    assert "    called here:\n      #0 release_again app.py:11\n      #1 main app.py:38\n" in text
    assert ("    allocated here:\n      #0 alloc app.py:5\n      #1 main app.py:31\n"
            "      #2 <module> app.py:40\n") in text
    assert "    freed here:\n      #0 release app.py:9\n      #1 main app.py:35\n" in text
    assert "    launched here:\n      #0 main app.py:31\n" in text
    assert "through argument 0 of the launch" in text


def test_sarif_names_the_user_frame_and_relates_the_stack() -> None:
    results = to_sarif(report_with_stacks())["runs"][0]["results"]
    double = results[0]
    region = double["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == 38
    related = [(r["physicalLocation"]["region"]["startLine"], r["message"]["text"])
               for r in double["relatedLocations"]]
    assert related[0] == (11, "call: frame #0 in release_again")
    assert (31, "64-byte allocation (tag 1) allocated here") in related
    assert (5, "64-byte allocation (tag 1) allocated here: frame #0 in alloc") in related
    assert (35, "64-byte allocation (tag 1) freed here") in related


# --------------------------------------------------------------------------
# one bug, one entry: a freed launch argument


def _freed_argument_findings(read_through_it: bool) -> Report:
    from gpusafe.engine.findings import Findings, FreedArgument
    from gpusafe.engine.registry import Registry
    from gpusafe_instrument.host import DeviceViolation
    from gpusafe_instrument.sites import Site

    registry = Registry()
    freed = registry.allocated(0x7F0000001000, 64, "cuMemAlloc", alloc())
    other = registry.allocated(0x7F0000002000, 64, "cuMemAlloc", alloc())
    registry.free(freed.base, "cuMemFree", alloc())
    launch = alloc()
    verdict = registry.check_argument(freed.base, "cuLaunchKernel", launch)
    findings = Findings(ReportBuilder(["python", "app.py"], "cpu"))
    tag = freed.tag if read_through_it else other.tag
    site = Site(1, "k", 20, "k.cu", 4, 5, "ld.global.f32 %f1, [%rd4];", "read", 4, "global",
                "root", "in")
    record = DeviceViolation(ViolationKind.USE_AFTER_FREE if read_through_it
                             else ViolationKind.GLOBAL_OUT_OF_BOUNDS,
                             site, 0x7F0000001000 if read_through_it else 0x7F0000002040, 4,
                             tag, (0, 0, 0), (0, 0, 0))
    findings.device_records("k", [record], 0, registry, launch, [FreedArgument(1, verdict)])
    return findings.report.build(exit_code=0)


def test_a_freed_argument_the_kernel_reads_is_one_entry_noting_the_argument() -> None:
    (v,) = _freed_argument_findings(read_through_it=True).violations
    assert v.on_device and v.kind is ViolationKind.USE_AFTER_FREE and v.argument == 1
    assert v.stack is not None and v.stack[0].function == "alloc"  # the launch's stack


def test_a_freed_argument_no_access_confirms_is_reported_at_the_launch() -> None:
    device, host = _freed_argument_findings(read_through_it=False).violations
    assert device.kind is ViolationKind.GLOBAL_OUT_OF_BOUNDS and device.argument is None
    assert host.kind is ViolationKind.USE_AFTER_FREE and not host.on_device
    assert host.kernel == "k" and host.location.file.endswith(HERE)


def test_a_suppression_matches_any_frame_of_the_stacks() -> None:
    from gpusafe.report import suppressions

    report = report_with_stacks()
    kept, unused = suppressions.apply(report, suppressions.parse(
        "site:app.py:11\nkind:leak site:app.py:9\n", "s"))
    assert [v.kind for v in kept.violations] == [ViolationKind.USE_AFTER_FREE]
    assert [u.source for u in unused] == ["s:2"]
