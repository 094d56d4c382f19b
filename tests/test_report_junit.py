"""JUnit XML output: one test case per checked kernel, a ``host`` case for the
host-side checks, failures carrying the violations, unchecked kernels skipped
with their reason."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from report_samples import buggy_report, clean_report

from gpusafe.report import ReportBuilder, SourceLocation
from gpusafe.report.junit import classname, render


def _parse(report) -> ET.Element:
    return ET.fromstring(render(report).encode("utf-8"))


def _cases(root: ET.Element) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in root.iter("testcase")}


def test_output_is_xml_with_one_suite() -> None:
    root = _parse(buggy_report())
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "gpusafe python app.py --n 64"


def test_one_testcase_per_checked_kernel_then_host_then_unchecked() -> None:
    root = _parse(buggy_report())
    assert [c.get("name") for c in root.iter("testcase")] == [
        "oob_write", "stencil", "uaf_read", "host", "cublas_sgemm"]


def test_classname_comes_from_device_and_command() -> None:
    root = _parse(buggy_report())
    names = {c.get("classname") for c in root.iter("testcase")}
    assert names == {"gpusafe.cpu.python_app_py_n_64"}
    assert classname(clean_report()) == "gpusafe.NVIDIA_H200.python_saxpy_py"


def test_kernel_failure_carries_its_violation() -> None:
    oob = _cases(_parse(buggy_report()))["oob_write"]
    (failure,) = oob.findall("failure")
    assert failure.get("type") == "global-out-of-bounds"
    assert failure.get("message") == "1 violation (32 occurrences): global-out-of-bounds"
    assert "oob.cu:5:9" in failure.text
    assert "4 bytes past the end of a 256-byte allocation (tag 3) allocated at app.py:31" \
        in failure.text
    assert "st.global.f32 [%rd8], %f2;" in failure.text


def test_host_case_carries_the_double_free_and_the_leak() -> None:
    host = _cases(_parse(buggy_report()))["host"]
    (failure,) = host.findall("failure")
    assert failure.get("message") == "2 violations (2 occurrences): double-free, leak"
    assert "double-free" in failure.text and "at app.py:40" in failure.text
    assert "leak" in failure.text and "never freed" in failure.text


def test_kernels_without_violations_pass() -> None:
    stencil_ok = ReportBuilder(["python", "app.py"], "cpu")
    stencil_ok.record_launch("stencil")
    cases = _cases(_parse(stencil_ok.build(exit_code=0)))
    assert list(cases) == ["stencil", "host"]
    assert all(len(c) == 0 for c in cases.values())


def test_unchecked_kernel_is_skipped_with_the_reason() -> None:
    skipped = _cases(_parse(buggy_report()))["cublas_sgemm"]
    (s,) = skipped.findall("skipped")
    assert s.get("message") == "not checked: module loaded from a cubin: no PTX to instrument"


def test_counts_on_suite_and_root_agree_with_cases() -> None:
    root = _parse(buggy_report())
    suite = root.find("testsuite")
    cases = list(root.iter("testcase"))
    failing = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    assert (len(cases), failing, skipped) == (5, 4, 1)
    for el in (root, suite):
        assert (el.get("tests"), el.get("failures"), el.get("errors"), el.get("skipped")) == \
            ("5", "4", "0", "1")


def test_clean_report_has_no_failures() -> None:
    root = _parse(clean_report())
    assert root.get("failures") == "0"
    assert [c.get("name") for c in root.iter("testcase")] == ["saxpy", "host"]
    assert root.find(".//failure") is None


def test_kernel_seen_only_in_a_violation_still_gets_a_case() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_host_violation("use-after-free", kernel="late", location=SourceLocation("app.py", 9))
    report = b.build(exit_code=0)
    cases = _cases(_parse(report))
    assert list(cases) == ["late", "host"]
    assert cases["late"].find("failure") is not None
    assert cases["host"].find("failure") is None


def test_control_characters_do_not_break_the_xml() -> None:
    b = ReportBuilder(["python", "app\x01.py"], "cpu")
    b.add_device_violation("global-out-of-bounds", access="read", size=1, address=0x10,
                           kernel="k\x02", ptx_line=3, instruction="ld.global.u8 %rs1, [%rd1];\x00",
                           block=(0, 0, 0), thread=(0, 0, 0))
    root = _parse(b.build(exit_code=0))
    assert root.find(".//failure") is not None
