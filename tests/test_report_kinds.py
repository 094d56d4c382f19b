"""The violation kinds as one table (gpusafe_instrument/kinds.py): explicit device
codes that never move, and the facts every output reads from it."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
from report_samples import buggy_report

from gpusafe.report import SCHEMA_PATH, AllocationInfo, ReportBuilder, SourceLocation
from gpusafe.report.describe import describe_allocation
from gpusafe.report.sarif import to_sarif
from gpusafe.report.terminal import render_text
from gpusafe_instrument.kinds import KindFacts, ViolationKind, index_codes

# The device runtime's PTX is built with these numbers: they are the ABI.
DEVICE_CODES = {
    "GLOBAL_OUT_OF_BOUNDS": 1,
    "SHARED_OUT_OF_BOUNDS": 2,
    "LOCAL_OUT_OF_BOUNDS": 3,
    "USE_AFTER_FREE": 4,
    "MISALIGNED_ACCESS": 5,
    "DOUBLE_FREE": 6,
    "INVALID_FREE": 7,
    "API_OUT_OF_BOUNDS": 8,
    "LEAK": 9,
    "NULL_POINTER": 10,
}


def test_released_codes_never_change() -> None:
    assert {k.name: k.code for k in ViolationKind if k.name in DEVICE_CODES} == DEVICE_CODES


def test_every_kind_states_its_code() -> None:
    (code,) = [f for f in dataclasses.fields(KindFacts) if f.name == "code"]
    assert code.default is dataclasses.MISSING  # no code falls out of declaration order


def test_codes_are_unique_and_round_trip() -> None:
    codes = [k.code for k in ViolationKind]
    assert len(set(codes)) == len(codes)
    for kind in ViolationKind:
        assert ViolationKind.from_code(kind.code) is kind


@pytest.mark.parametrize("code", [0, 11, -1])
def test_an_unknown_code_is_refused(code: int) -> None:
    with pytest.raises(ValueError, match=f"no violation kind has code {code}"):
        ViolationKind.from_code(code)


def _fake(name: str, code: int) -> SimpleNamespace:
    return SimpleNamespace(name=name, facts=SimpleNamespace(code=code))


def test_a_code_clash_is_refused_at_import() -> None:
    with pytest.raises(ValueError, match="B and A share code 3"):
        index_codes([_fake("A", 3), _fake("B", 3)])  # type: ignore[list-item]


@pytest.mark.parametrize("code", [0, 1 << 32])
def test_a_code_a_record_cannot_hold_is_refused(code: int) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        index_codes([_fake("A", code)])  # type: ignore[list-item]


@pytest.mark.parametrize("kind", list(ViolationKind), ids=str)
def test_every_kind_has_its_words_and_a_place_it_is_found(kind: ViolationKind) -> None:
    f = kind.facts
    assert f.title and f.meaning.endswith(".") and f.remedy.endswith(".")
    assert f.on_device or f.on_host
    assert f.sarif_level in ("error", "warning", "note")


def test_the_schema_enum_lists_the_table_in_order() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    enum = schema["$defs"]["violation"]["properties"]["kind"]["enum"]
    missing = [k.value for k in ViolationKind if k.value not in enum]
    assert not missing, f"add {missing} to the kind enum of {SCHEMA_PATH.name}"
    assert enum == [k.value for k in ViolationKind]


def test_sarif_rules_are_the_table() -> None:
    rules = to_sarif(buggy_report())["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [k.value for k in ViolationKind]
    for rule, kind in zip(rules, ViolationKind, strict=True):
        f = kind.facts
        assert rule["shortDescription"]["text"] == f.title
        assert rule["fullDescription"]["text"] == f.meaning
        assert rule["help"]["text"] == f"{f.meaning} {f.remedy}"
        assert rule["defaultConfiguration"]["level"] == f.sarif_level


def test_terminal_heading_is_the_kind_title() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_host_violation(ViolationKind.INVALID_FREE, location=SourceLocation("app.py", 3))
    text = render_text(b.build(exit_code=0))
    assert f"ERROR invalid-free  {ViolationKind.INVALID_FREE.facts.title}" in text


def test_freed_kinds_describe_their_allocation_as_freed() -> None:
    for kind in ViolationKind:
        if kind is ViolationKind.LEAK:
            continue
        b = ReportBuilder(["python", "app.py"], "cpu")
        b.add_host_violation(kind, location=SourceLocation("app.py", 3), address=0x1000,
                             allocation=AllocationInfo(1, 0x1000, 64, 0, "app.py:1"))
        (v,) = b.build(exit_code=0).violations
        assert ("freed" in describe_allocation(v)) == kind.facts.freed_allocation, kind
