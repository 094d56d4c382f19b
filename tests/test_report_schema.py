"""The JSON report against its JSON Schema (gpusafe/report/schema/): every report
gpusafe writes validates, and the schema and the reader (Report.from_dict,
which the CLI uses without a schema library) agree on what is a report."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from report_samples import DESIGN_EXAMPLE, buggy_report, clean_report

from gpusafe.report import SCHEMA_PATH, AllocationInfo, Report, ReportBuilder, ReportFormatError
from gpusafe.report import SourceLocation as Loc


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_schema_is_draft_2020_12_and_names_the_format() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema"]["const"] == "gpusafe-report/1"


def test_schema_documents_the_optional_kernel_lists() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    for key in ("checked_kernels", "unchecked_kernels"):
        assert key in schema["properties"] and key not in schema["required"]
        assert "Optional" in schema["properties"][key]["description"]


def test_schema_kinds_are_the_violation_kinds() -> None:
    from gpusafe_instrument.kinds import ViolationKind

    schema = json.loads(SCHEMA_PATH.read_text())
    kinds = schema["$defs"]["violation"]["properties"]["kind"]["enum"]
    assert kinds == [k.value for k in ViolationKind]


@pytest.mark.parametrize("report", [buggy_report(), clean_report()], ids=["buggy", "clean"])
def test_written_reports_validate(validator, report: Report) -> None:
    doc = json.loads(report.to_json())
    assert list(validator.iter_errors(doc)) == []


def test_design_md_example_validates(validator) -> None:
    assert list(validator.iter_errors(json.loads(DESIGN_EXAMPLE))) == []


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(-64, 1 << 20),
                             st.integers(0, 1023), st.integers(1, 400)), max_size=8),
    exit_code=st.one_of(st.none(), st.integers(-128, 255)),
    dropped=st.integers(0, 1000),
)
def test_generated_reports_validate(validator, sizes, exit_code, dropped) -> None:
    b = ReportBuilder(["python", "gen.py"], "NVIDIA H200")
    for i, (size, offset, thread, line) in enumerate(sizes):
        base = 0x7F0000000000 + (i << 24)
        b.record_launch(f"k{i % 3}")
        b.add_device_violation(
            "global-out-of-bounds", access="atomic", size=8, address=base + offset,
            kernel=f"k{i % 3}", ptx_line=line, instruction="atom.global.add.u64 %rd1, [%rd2], 1;",
            location=Loc("gen.cu", line, None), block=(i, 1, 0), thread=(thread, 0, 0),
            allocation=AllocationInfo(i, base, size, offset, "gen.py:3"))
        b.add_host_violation("api-out-of-bounds", location=Loc("gen.py", 9), address=base,
                             size=size + 1, allocation=AllocationInfo(i, base, size, 0))
    b.record_dropped(dropped)
    doc = json.loads(b.build(exit_code=exit_code).to_json())
    assert list(validator.iter_errors(doc)) == []


def _set(path, value):
    def mutate(doc):
        *parents, last = path
        target = doc
        for p in parents:
            target = target[p]
        target[last] = value
    return mutate


def _delete(path):
    def mutate(doc):
        *parents, last = path
        target = doc
        for p in parents:
            target = target[p]
        del target[last]
    return mutate


MUTATIONS = {
    # refused by both
    "wrong schema version": (_set(["schema"], "gpusafe-report/2"), False),
    "extra top-level key": (_set(["extra"], 1), False),
    "missing device": (_delete(["device"]), False),
    "command not strings": (_set(["command"], ["python", 3]), False),
    "unknown kind": (_set(["violations", 0, "kind"], "heap-buffer-overflow"), False),
    "unknown access": (_set(["violations", 0, "access"], "execute"), False),
    "decimal address": (_set(["violations", 0, "address"], "4096"), False),
    "integer address": (_set(["violations", 0, "address"], 4096), False),
    "zero count": (_set(["violations", 0, "count"], 0), False),
    "two coordinates": (_set(["violations", 0, "threads", 0, "thread"], [1, 2]), False),
    "negative coordinate": (_set(["violations", 0, "threads", 0, "block"], [-1, 0, 0]), False),
    "line zero": (_set(["violations", 0, "location", "line"], 0), False),
    "missing column": (_delete(["violations", 0, "location", "column"]), False),
    "missing allocation key": (_delete(["violations", 0, "allocation", "freed_at"]), False),
    "a stack": (_set(["violations", 0, "stack"],
                     [{"file": "app.py", "line": 3, "function": "main"}]), True),
    "a null stack": (_set(["violations", 0, "stack"], None), False),
    "a frame without function": (_set(["violations", 0, "stack"],
                                      [{"file": "app.py", "line": 3}]), False),
    "a frame at line zero": (_set(["violations", 0, "allocation", "allocated_stack"],
                                  [{"file": "a.py", "line": 0, "function": "f"}]), False),
    "a freed stack": (_set(["violations", 0, "allocation", "freed_stack"],
                           [{"file": "a.py", "line": 2, "function": "<module>"}]), True),
    "an argument": (_set(["violations", 0, "argument"], 1), True),
    "a negative argument": (_set(["violations", 0, "argument"], -1), False),
    "captured source": (_set(["violations", 0, "source"], [[4, "  x[i] = 0;"]]), True),
    "captured source without text": (_set(["violations", 0, "source"], [[4]]), False),
    "fractional size": (_set(["violations", 0, "size"], 4.5), False),
    "negative summary": (_set(["summary", "dropped"], -1), False),
    "boolean exit code": (_set(["exit_code"], True), False),
    "null kernel list": (_set(["checked_kernels"], None), False),
    "kernel list without reason": (_delete(["unchecked_kernels", 0, "reason"]), False),
    "address over 64 bits": (_set(["violations", 0, "address"], "0x1" + "0" * 16), False),
    "size over 64 bits": (_set(["violations", 0, "allocation", "size"], 1 << 64), False),
    "offset under -(2^64-1)": (_set(["violations", 0, "allocation", "offset"], -(1 << 64)),
                               False),
    "count over 64 bits": (_set(["violations", 0, "count"], 10 ** 30), False),
    "negative suppressed count": (_set(["summary", "suppressed"], -1), False),
    # accepted by both
    "null exit code": (_set(["exit_code"], None), True),
    "upper-case hex": (_set(["violations", 0, "address"], "0x7F0000001104"), True),
    "negative offset": (_set(["violations", 0, "allocation", "offset"], -12), True),
    "null location": (_set(["violations", 0, "location"], None), True),
    "no kernel lists": (lambda d: (d.pop("checked_kernels"), d.pop("unchecked_kernels")), True),
    "empty command": (_set(["command"], []), True),
    "integral float size": (_set(["violations", 0, "size"], 4.0), True),
    "largest 64-bit address": (_set(["violations", 0, "address"], "0xffffffffffffffff"), True),
    "largest 64-bit count": (_set(["violations", 0, "count"], (1 << 64) - 1), True),
    "suppressed count": (_set(["summary", "suppressed"], 2), True),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_schema_and_reader_agree(validator, name) -> None:
    mutate, valid = MUTATIONS[name]
    doc = json.loads(buggy_report().to_json())
    doc = copy.deepcopy(doc)
    mutate(doc)
    schema_ok = validator.is_valid(doc)
    try:
        Report.from_dict(doc)
        reader_ok = True
    except ReportFormatError:
        reader_ok = False
    assert (schema_ok, reader_ok) == (valid, valid)
