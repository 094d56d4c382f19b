"""SARIF 2.1.0 output, validated against the official OASIS schema
(tests/data/sarif-2.1.0.schema.json; provenance in tests/data/README.md)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from jsonschema import Draft4Validator
from report_samples import OOB_LINE, buggy_report, clean_report

from gpusafe.report import ReportBuilder, SourceLocation
from gpusafe.report.sarif import SARIF_SCHEMA_URI, file_uri, render, to_sarif
from gpusafe_instrument.kinds import ViolationKind

SCHEMA_FILE = Path(__file__).parent / "data" / "sarif-2.1.0.schema.json"
SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"


@pytest.fixture(scope="module")
def validator() -> Draft4Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft4Validator.check_schema(schema)
    return Draft4Validator(schema)


def _errors(validator: Draft4Validator, log: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(log)]


def test_schema_file_is_the_official_errata01_schema_unchanged() -> None:
    data = SCHEMA_FILE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SCHEMA_SHA256
    schema = json.loads(data)
    assert schema["id"] == SARIF_SCHEMA_URI
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"


def test_buggy_report_sarif_validates(validator) -> None:
    assert _errors(validator, to_sarif(buggy_report())) == []


def test_clean_report_sarif_validates_with_no_results(validator) -> None:
    log = to_sarif(clean_report())
    assert _errors(validator, log) == []
    assert log["runs"][0]["results"] == []


def test_rendered_text_is_the_same_log() -> None:
    assert json.loads(render(buggy_report())) == to_sarif(buggy_report())


def test_one_rule_per_violation_kind_with_descriptions() -> None:
    rules = to_sarif(buggy_report())["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [k.value for k in ViolationKind]
    for r in rules:
        assert r["shortDescription"]["text"] and r["fullDescription"]["text"]
        assert r["help"]["text"]
        assert r["defaultConfiguration"]["level"] == "error"


def test_each_result_is_an_error_pointing_at_its_rule() -> None:
    run = to_sarif(buggy_report())["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    kinds = [v.kind.value for v in buggy_report().violations]
    assert [r["ruleId"] for r in run["results"]] == kinds
    for r in run["results"]:
        assert r["level"] == "error"
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["message"]["text"].startswith(r["ruleId"])


def test_out_of_bounds_result_locates_source_line_and_allocation_site() -> None:
    oob = to_sarif(buggy_report())["runs"][0]["results"][0]
    (loc,) = oob["locations"]
    assert loc["physicalLocation"] == {
        "artifactLocation": {"uri": "oob.cu"},
        "region": {"startLine": OOB_LINE, "startColumn": 9},
    }
    assert loc["logicalLocations"] == [{"name": "oob_write", "kind": "function"}]
    (alloc,) = oob["relatedLocations"]
    assert alloc["physicalLocation"]["artifactLocation"]["uri"] == "app.py"
    assert alloc["physicalLocation"]["region"]["startLine"] == 31
    assert "allocated here" in alloc["message"]["text"]
    assert "4 bytes past the end of a 256-byte allocation (tag 3)" in oob["message"]["text"]


def test_occurrences_and_threads_travel_in_properties() -> None:
    oob = to_sarif(buggy_report())["runs"][0]["results"][0]
    props = oob["properties"]
    assert props["count"] == 32
    assert len(props["threads"]) == 8
    assert props["threads"][0] == {"block": [0, 0, 0], "thread": [32, 0, 0]}
    assert props["address"] == "0x7f0000001104" and props["ptxLine"] == 41


def test_use_after_free_relates_allocation_and_free_sites() -> None:
    uaf = to_sarif(buggy_report())["runs"][0]["results"][2]
    assert uaf["ruleId"] == "use-after-free"
    sites = [(r["physicalLocation"]["region"]["startLine"], r["message"]["text"])
             for r in uaf["relatedLocations"]]
    assert [line for line, _ in sites] == [10, 12]
    assert "freed here" in sites[1][1]
    assert [r["id"] for r in uaf["relatedLocations"]] == [1, 2]


def test_host_double_free_is_located_at_the_call_site() -> None:
    df = to_sarif(buggy_report())["runs"][0]["results"][3]
    assert df["ruleId"] == "double-free"
    assert df["locations"][0]["physicalLocation"]["region"] == {"startLine": 40}
    assert "logicalLocations" not in df["locations"][0]
    assert "threads" not in df["properties"]


def test_device_violation_without_line_info_names_the_kernel(validator) -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_device_violation("misaligned-access", access="read", size=8, address=0x7F0000000004,
                           kernel="no_lineinfo", ptx_line=12,
                           instruction="ld.global.f64 %fd1, [%rd3];",
                           block=(0, 0, 0), thread=(1, 0, 0))
    log = to_sarif(b.build(exit_code=0))
    assert _errors(validator, log) == []
    (result,) = log["runs"][0]["results"]
    assert result["locations"] == [
        {"logicalLocations": [{"name": "no_lineinfo", "kind": "function"}]}]
    assert "relatedLocations" not in result


def test_unchecked_kernels_and_dropped_records_become_notifications(validator) -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.record_unchecked("cublas_sgemm", "cubin only")
    b.record_dropped(7)
    log = to_sarif(b.build(exit_code=1))
    assert _errors(validator, log) == []
    inv = log["runs"][0]["invocations"][0]
    assert inv["exitCode"] == 1
    texts = [n["message"]["text"] for n in inv["toolExecutionNotifications"]]
    assert any("cublas_sgemm" in t and "cubin only" in t for t in texts)
    assert any("7 violation records were dropped" in t for t in texts)


@pytest.mark.parametrize(("path", "uri"), [
    ("oob.cu", "oob.cu"),
    ("src/kernels/oob.cu", "src/kernels/oob.cu"),
    ("my kernels/oob 1.cu", "my%20kernels/oob%201.cu"),
    ("/home/me/app.py", "file:///home/me/app.py"),
    ("C:\\work\\app.py", "file:///C:/work/app.py"),
    ("weird:name.cu", "weird%3Aname.cu"),
])
def test_file_paths_become_uri_references(path: str, uri: str) -> None:
    assert file_uri(path) == uri


def test_odd_paths_still_validate(validator) -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    for f in ("my kernels/oob 1.cu", "/abs/path/k.cu", "C:\\x\\y.cu", "ünï/k.cu"):
        b.add_host_violation("invalid-free", location=SourceLocation(f, 3))
    assert _errors(validator, to_sarif(b.build(exit_code=0))) == []


def test_the_schema_check_can_fail(validator) -> None:
    log = to_sarif(buggy_report())
    log["runs"][0]["results"][0]["level"] = "fatal"
    del log["runs"][0]["results"][1]["message"]
    log["runs"][0]["results"][2]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    errors = _errors(validator, log)
    assert len(errors) == 3, errors
