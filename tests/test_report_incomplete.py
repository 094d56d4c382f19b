"""Never a silent pass (issue 10): a call the backend could not serve, a kernel
that ran unchecked and a run that checked no launch are in every report
(JSON, terminal, JUnit, SARIF) with their counts, and decide the exit status
as DESIGN.md says.  In process: the report model and renderers, and the
door's pieces against the CPU device.  ``tests/test_run_incomplete.py`` runs
the same cases through ``gpusafe run``."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from jsonschema import Draft4Validator, Draft202012Validator

from gpusafe.backends.cpu import CpuBackend
from gpusafe.doors.wrappers import NOT_IMPLEMENTED, backend_functions, unsupported_watch
from gpusafe.engine.findings import Findings
from gpusafe.report import SCHEMA_PATH, Report, ReportBuilder, ReportFormatError
from gpusafe.report import SourceLocation as Loc
from gpusafe.report.junit import render as junit
from gpusafe.report.sarif import to_sarif
from gpusafe.report.terminal import render_text
from gpusafe_testkit.corpus import nvrtc_compile

SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0.schema.json"


def summary_rows(text: str) -> dict[str, str]:
    """The terminal summary table: row name -> its first number."""
    return {m.group(1).strip(): m.group(2).split("|")[0].strip()
            for m in re.finditer(r"^\|([^|]+)\|(.*)\|$", text, re.M)}


def builder() -> ReportBuilder:
    return ReportBuilder(["python", "app.py"], device="cpu")


def with_unimplemented() -> Report:
    b = builder()
    b.record_launch("saxpy")
    b.record_unimplemented("cudaGraphCreate", "app.py:12", NOT_IMPLEMENTED)
    b.record_unimplemented("cudaGraphCreate", "app.py:12", NOT_IMPLEMENTED)
    b.record_unimplemented("cuModuleLoadData", "app.py:20", "the module image is an ELF cubin")
    return b.build(exit_code=0)


def with_unchecked(requested: bool) -> Report:
    b = builder()
    b.record_launch("saxpy")
    b.record_unchecked("braces", "memory access inside inline-asm braces", requested=requested)
    b.record_unchecked("braces", "memory access inside inline-asm braces", requested=requested)
    return b.build(exit_code=0)


def zero_launches() -> Report:
    return builder().build(exit_code=0)


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


# -- the JSON report ---------------------------------------------------------------------


def test_unimplemented_calls_are_listed_by_name_site_and_reason_with_counts(validator) -> None:
    doc = json.loads(with_unimplemented().to_json())
    validator.validate(doc)
    assert doc["unimplemented_calls"] == [
        {"name": "cudaGraphCreate", "site": "app.py:12", "reason": NOT_IMPLEMENTED, "count": 2},
        {"name": "cuModuleLoadData", "site": "app.py:20",
         "reason": "the module image is an ELF cubin", "count": 1},
    ]
    assert doc["summary"]["unimplemented_calls"] == 3


def test_unchecked_launches_are_counted_per_kernel_and_in_the_summary(validator) -> None:
    doc = json.loads(with_unchecked(requested=False).to_json())
    validator.validate(doc)
    assert doc["unchecked_kernels"] == [
        {"name": "braces", "reason": "memory access inside inline-asm braces", "launches": 2}]
    assert (doc["summary"]["launches"], doc["summary"]["unchecked_launches"]) == (1, 2)
    doc = json.loads(with_unchecked(requested=True).to_json())
    assert doc["unchecked_kernels"][0]["requested"] is True


def test_a_run_with_no_launch_says_so_in_its_counts(validator) -> None:
    doc = json.loads(zero_launches().to_json())
    validator.validate(doc)
    s = doc["summary"]
    assert (s["kernels_checked"], s["launches"], s["unchecked_launches"]) == (0, 0, 0)


@pytest.mark.parametrize("report", [with_unimplemented(), with_unchecked(True),
                                    with_unchecked(False), zero_launches()])
def test_the_new_fields_read_back_to_the_same_report(report: Report) -> None:
    text = report.to_json()
    assert Report.from_json(text) == report
    assert Report.from_json(text).to_json() == text


def test_a_report_without_the_new_fields_still_reads() -> None:
    """Reports written before issue 10 (no counts, no ``unimplemented_calls``)."""
    doc = json.loads(with_unchecked(False).to_json())
    for key in ("unchecked_launches", "unimplemented_calls"):
        del doc["summary"][key]
    del doc["unchecked_kernels"][0]["launches"]
    report = Report.from_dict(doc)
    assert report.summary.unchecked_launches == 0 and report.unimplemented_calls == ()
    assert report.unchecked_kernels[0].launches is None


@pytest.mark.parametrize(("path", "value", "where"), [
    (["unimplemented_calls", 0, "count"], 0, "unimplemented_calls[0].count"),
    (["unimplemented_calls", 0, "site"], 12, "unimplemented_calls[0].site"),
    (["unchecked_kernels", 0, "requested"], "yes", "unchecked_kernels[0].requested"),
])
def test_reader_and_schema_refuse_malformed_entries(validator, path, value, where) -> None:
    b = builder()
    b.record_unchecked("k", "why")
    b.record_unimplemented("cuFoo", "app.py:1", "why")
    doc = json.loads(b.build(exit_code=0).to_json())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert not validator.is_valid(doc)
    with pytest.raises(ReportFormatError) as e:
        Report.from_dict(doc)
    assert e.value.path == where


def test_merging_process_reports_adds_their_counts() -> None:
    b = builder()
    for report in (with_unimplemented(), with_unimplemented(), with_unchecked(False)):
        b.merge(Report.from_json(report.to_json()))
    merged = b.build(exit_code=0)
    assert merged.summary.unimplemented_calls == 6
    assert merged.unimplemented_calls[0].count == 4
    assert merged.summary.unchecked_launches == 2


def test_a_kernel_counts_as_requested_only_while_every_reason_was_a_request() -> None:
    b = builder()
    b.record_unchecked("k", "excluded by --kernel-filter 'x'", requested=True)
    b.record_unchecked("k", "an internal error of gpusafe")
    (k,) = b.build(exit_code=0).unchecked_kernels
    assert (k.launches, k.requested) == (2, False)


# -- the exit status ---------------------------------------------------------------------


def test_an_unimplemented_call_exits_2_even_with_allow_unchecked() -> None:
    report = with_unimplemented()
    assert report.exit_status() == 2
    assert report.exit_status(allow_unchecked=True) == 2


def test_an_unchecked_kernel_exits_2_unless_allowed() -> None:
    report = with_unchecked(requested=False)
    assert report.exit_status() == 2
    assert report.exit_status(allow_unchecked=True) == 0


def test_a_kernel_left_unchecked_by_request_keeps_the_programs_status() -> None:
    assert with_unchecked(requested=True).exit_status() == 0


def test_a_run_with_no_launch_keeps_the_programs_status() -> None:
    b = builder()
    assert b.build(exit_code=3).exit_status() == 3


def test_a_violation_outranks_an_incomplete_run() -> None:
    b = builder()
    b.record_unimplemented("cudaGraphCreate", "app.py:12", NOT_IMPLEMENTED)
    b.add_host_violation("double-free", location=Loc("app.py", 9), address=0x1000)
    assert b.build(exit_code=0).exit_status(86) == 86


# -- the renderers -----------------------------------------------------------------------


def test_terminal_names_each_call_and_does_not_call_the_run_clean() -> None:
    text = render_text(with_unimplemented())
    assert "not implemented: cudaGraphCreate at app.py:12 (2 calls): not implemented by " \
           "gpusafe's CPU device" in text
    assert "not implemented: cuModuleLoadData at app.py:20: the module image is an ELF " \
           "cubin" in text
    assert summary_rows(text)["calls not implemented"] == "3"
    assert "this is no clean pass" in text.splitlines()[-1]


def test_terminal_counts_unchecked_launches() -> None:
    text = render_text(with_unchecked(False))
    assert summary_rows(text)["unchecked launches"] == "2"
    assert "not checked: kernel braces: memory access inside inline-asm braces (2 launches)" \
        in text


def test_terminal_warns_when_no_launch_was_checked() -> None:
    text = render_text(zero_launches())
    assert "warning: no kernel launch was checked (0 checked launches)" in text
    assert "this is no clean pass" in text.splitlines()[-1]


def test_junit_makes_each_unimplemented_call_an_error() -> None:
    root = ET.fromstring(junit(with_unimplemented()).split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite.get("errors") == "2" and root.get("errors") == "2"
    case = suite.find("testcase[@name='call cudaGraphCreate']")
    error = case.find("error")
    assert error.get("message") == f"cudaGraphCreate could not be served: {NOT_IMPLEMENTED}"
    assert "called 2 times at app.py:12" in error.text
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert (props["checked_launches"], props["unchecked_launches"]) == ("1", "0")


def test_sarif_reports_unimplemented_calls_as_error_notifications() -> None:
    log = to_sarif(with_unimplemented())
    Draft4Validator(json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))).validate(log)
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    errors = [n for n in invocation["toolExecutionNotifications"] if n["level"] == "error"]
    assert [n["properties"]["call"] for n in errors] == ["cudaGraphCreate", "cuModuleLoadData"]
    region = errors[0]["locations"][0]["physicalLocation"]
    assert (region["artifactLocation"]["uri"], region["region"]["startLine"]) == ("app.py", 12)
    assert log["runs"][0]["properties"]["summary"]["unimplementedCalls"] == 3


def test_sarif_warns_when_no_launch_was_checked() -> None:
    log = to_sarif(zero_launches())
    notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert {"level": "warning", "message": {"text": "no kernel launch was checked"}} in notes


# -- the door against the CPU device ------------------------------------------------------


class _Module:
    """A stand-in for a cuda.bindings module: two functions."""

    @staticmethod
    def cudaHas() -> tuple:
        return (0,)

    @staticmethod
    def cudaLacks() -> tuple:
        return (0,)


def _findings() -> Findings:
    return Findings(builder())


def test_a_function_the_backend_lacks_is_reported_and_raises_a_runtime_error() -> None:
    findings = _findings()
    backend = type("Backend", (), {"cudaHas": staticmethod(lambda: ("has",))})()
    functions = backend_functions(_Module, "cuda", backend, findings.unimplemented)
    assert functions["cudaHas"]() == ("has",)
    with pytest.raises(RuntimeError, match="cudaLacks is not implemented by gpusafe's CPU"):
        functions["cudaLacks"]()  # NotImplementedError is a RuntimeError
    (call,) = findings.report.build(exit_code=0).unimplemented_calls
    assert (call.name, call.reason, call.count) == ("cudaLacks", NOT_IMPLEMENTED, 1)
    assert call.site is not None and call.site.startswith("tests/test_report_incomplete.py:")


def test_a_feature_the_cpu_device_lacks_is_reported_with_its_reason() -> None:
    """The program gets the CPU device's answer unchanged (the result code a
    GPU's driver gives for what it cannot do); the report gets the reason."""
    backend = CpuBackend()
    findings = _findings()
    watch = unsupported_watch(backend.unsupported_results, backend.unsupported_reason,
                              findings.unimplemented)
    d = backend.driver
    assert d.cuInit(0)[0].name == "CUDA_SUCCESS"
    _, dev = d.cuDeviceGet(0)
    assert d.cuCtxCreate(None, 0, dev)[0].name == "CUDA_SUCCESS"
    load = watch("cuModuleLoadData", d.cuModuleLoadData)
    err, module = load(b"\x7fELF" + bytes(60))
    assert err.name == "CUDA_ERROR_NOT_SUPPORTED" and module is None
    (call,) = findings.report.build(exit_code=0).unimplemented_calls
    assert call.name == "cuModuleLoadData"
    assert call.reason.startswith("the module image is an ELF cubin; the CPU device runs PTX")
    alloc = watch("cuMemAlloc", d.cuMemAlloc)
    assert alloc(64)[0].name == "CUDA_SUCCESS"
    assert findings.report.build(exit_code=0).summary.unimplemented_calls == 1


SURFACE = r"""
extern "C" __global__ void surf(cudaSurfaceObject_t s, float* out)
{
    asm volatile("sured.b.add.1d.u32.trap [%0, {%1}], %2;"
                 :: "l"(s), "r"(threadIdx.x * 4), "r"(1u) : "memory");
    out[threadIdx.x] = 1.0f;
}
"""


def test_an_instruction_the_cpu_device_cannot_run_is_named_in_the_report() -> None:
    """A launch the CPU device refuses: the program gets CUDA_ERROR_NOT_SUPPORTED,
    the report the kernel, the PTX line and the instruction.  (Surface
    reductions stand for any instruction the CPU device lacks; when it learns
    them, this test needs another.)"""
    backend = CpuBackend()
    findings = _findings()
    watch = unsupported_watch(backend.unsupported_results, backend.unsupported_reason,
                              findings.unimplemented)
    d = backend.driver
    d.cuInit(0)
    d.cuCtxCreate(None, 0, d.cuDeviceGet(0)[1])
    _, module = d.cuModuleLoadData(nvrtc_compile(SURFACE, "surf.cu").encode() + b"\0")
    _, fn = d.cuModuleGetFunction(module, b"surf")
    _, out = d.cuMemAlloc(128)
    values = [np.array([0], dtype=np.uint64), np.array([int(out)], dtype=np.uint64)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    launch = watch("cuLaunchKernel", d.cuLaunchKernel)
    (err,) = launch(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0)
    assert err.name == "CUDA_ERROR_NOT_SUPPORTED"
    (call,) = findings.report.build(exit_code=0).unimplemented_calls
    assert call.name == "cuLaunchKernel"
    assert "kernel surf: PTX line" in call.reason
    assert "sured.b.add.1d.u32.trap is not supported by the CPU device" in call.reason
