"""The report's data: folding occurrences into entries (DESIGN.md: one entry
per kind + site + allocation, with a count and the first offending threads),
and the exact JSON round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_samples import (
    DESIGN_EXAMPLE,
    FREED_BASE,
    OUT_BASE,
    buggy_report,
    buggy_session,
    clean_report,
    double_free,
    out_of_bounds,
    use_after_free,
)

from gpusafe.report import (
    AllocationInfo,
    Report,
    ReportBuilder,
    ReportFormatError,
    SourceLocation,
    ThreadId,
    Violation,
)
from gpusafe_instrument.kinds import AccessKind, ViolationKind

# -- folding -----------------------------------------------------------------


def test_thirty_two_threads_at_one_site_fold_into_one_entry() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    out_of_bounds(b)
    (v,) = b.build(exit_code=0).violations
    assert v.kind is ViolationKind.GLOBAL_OUT_OF_BOUNDS
    assert v.count == 32


def test_entry_keeps_the_first_eight_offending_threads_by_default() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    out_of_bounds(b)
    (v,) = b.build(exit_code=0).violations
    assert v.threads == tuple(ThreadId((0, 0, 0), (t, 0, 0)) for t in range(32, 40))


def test_max_threads_is_a_parameter() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu", max_threads=3)
    out_of_bounds(b)
    (v,) = b.build(exit_code=0).violations
    assert [t.thread[0] for t in v.threads] == [32, 33, 34]


def test_entry_keeps_the_facts_of_the_first_occurrence() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    out_of_bounds(b)
    (v,) = b.build(exit_code=0).violations
    assert v.address == OUT_BASE + 260
    assert v.allocation.offset == 260
    assert v.location == SourceLocation("oob.cu", 5, 9)
    assert v.access is AccessKind.WRITE and v.size == 4


def test_same_site_different_allocation_is_a_separate_entry() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    for tag in (3, 7, 3):
        b.add_device_violation(
            "global-out-of-bounds", access="write", size=4, address=0x1000 * tag + 260,
            kernel="oob_write", ptx_line=41, instruction="st.global.f32 [%rd8], %f2;",
            location=SourceLocation("oob.cu", 5, 9), block=(0, 0, 0), thread=(32, 0, 0),
            allocation=AllocationInfo(tag, 0x1000 * tag, 256, 260, "app.py:31"))
    report = b.build(exit_code=0)
    assert [(v.allocation.tag, v.count) for v in report.violations] == [(3, 2), (7, 1)]


def test_same_allocation_different_site_is_a_separate_entry() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    alloc = AllocationInfo(3, OUT_BASE, 256, 260, "app.py:31")
    for line, ptx in ((5, 41), (6, 45)):
        b.add_device_violation(
            "global-out-of-bounds", access="write", size=4, address=OUT_BASE + 260,
            kernel="oob_write", ptx_line=ptx, instruction="st.global.f32 [%rd8], %f2;",
            location=SourceLocation("oob.cu", line, 9), block=(0, 0, 0), thread=(32, 0, 0),
            allocation=alloc)
    assert len(b.build(exit_code=0).violations) == 2


def test_same_thread_twice_is_listed_once_but_counted_twice() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    use_after_free(b)
    use_after_free(b)
    (v,) = b.build(exit_code=0).violations
    assert v.count == 2
    assert v.threads == (ThreadId((0, 0, 0), (2, 0, 0)),)


def test_host_violation_has_no_device_facts() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    double_free(b)
    (v,) = b.build(exit_code=0).violations
    assert v.kind is ViolationKind.DOUBLE_FREE
    assert (v.kernel, v.ptx_line, v.instruction, v.threads, v.access) == (None,) * 5
    assert v.location == SourceLocation("app.py", 40)
    assert not v.on_device


def test_repeated_double_free_at_one_call_site_folds() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    double_free(b)
    double_free(b)
    (v,) = b.build(exit_code=0).violations
    assert v.count == 2 and v.threads is None


def test_leak_is_located_at_its_allocation_site_by_default() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_host_violation("leak", address=0x7F0000005000, size=128,
                         allocation=AllocationInfo(4, 0x7F0000005000, 128, None, "app.py:20"))
    (v,) = b.build(exit_code=0).violations
    assert v.location == SourceLocation("app.py", 20)


def test_occurrences_from_many_threads_are_all_counted() -> None:
    import threading

    b = ReportBuilder(["python", "app.py"], "cpu")

    def drain() -> None:
        for _ in range(200):
            out_of_bounds(b)

    workers = [threading.Thread(target=drain) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    (v,) = b.build(exit_code=0).violations
    assert v.count == 4 * 200 * 32 == b.occurrences


def test_summary_counts_entries_occurrences_kernels_and_launches() -> None:
    s = buggy_report().summary
    assert (s.violations, s.occurrences) == (5, 32 + 1 + 1 + 1 + 1)
    assert (s.kernels_checked, s.launches, s.dropped) == (3, 4, 0)


def test_checked_and_unchecked_kernels_are_listed_in_launch_order() -> None:
    r = buggy_report()
    assert [(k.name, k.launches) for k in r.checked_kernels] == [
        ("oob_write", 2), ("stencil", 1), ("uaf_read", 1)]
    assert [(k.name, k.reason) for k in r.unchecked_kernels] == [
        ("cublas_sgemm", "module loaded from a cubin: no PTX to instrument")]


def test_dropped_records_are_summed() -> None:
    b = ReportBuilder(["./app"], "cpu")
    b.record_dropped(10)
    b.record_dropped(5)
    assert b.build(exit_code=None).summary.dropped == 15


def test_merge_folds_a_child_report_into_the_session() -> None:
    parent = buggy_session()
    parent.merge(buggy_report())
    merged = parent.build(exit_code=0)
    single = buggy_report()
    assert [v.count for v in merged.violations] == [2 * v.count for v in single.violations]
    assert merged.summary.launches == 2 * single.summary.launches
    assert merged.violations[0].threads == single.violations[0].threads


def test_kind_and_access_strings_are_checked() -> None:
    b = ReportBuilder(["./app"], "cpu")
    with pytest.raises(ValueError):
        b.add_host_violation("heap-overflow")
    with pytest.raises(ValueError):
        b.add_device_violation("global-out-of-bounds", access="execute", size=4, address=0,
                               kernel="k", ptx_line=1, instruction="x", block=(0, 0, 0),
                               thread=(0, 0, 0))


def test_exit_status_follows_design() -> None:
    assert clean_report().exit_status() == 0
    assert buggy_report().exit_status() == 86
    assert buggy_report().exit_status(error_exitcode=3) == 3
    b = ReportBuilder(["./app"], "cpu")
    assert b.build(exit_code=7).exit_status() == 7


# -- the fold as a property ----------------------------------------------------

_sites = st.sampled_from([("oob_write", 41, 5), ("oob_write", 45, 6), ("stencil", 77, 9)])
_kinds = st.sampled_from([ViolationKind.GLOBAL_OUT_OF_BOUNDS, ViolationKind.USE_AFTER_FREE,
                          ViolationKind.MISALIGNED_ACCESS])
_tags = st.sampled_from([None, 1, 2, 3])
_threads = st.tuples(st.integers(0, 3), st.integers(0, 40))
_occurrence = st.tuples(_kinds, _sites, _tags, _threads)
_host = st.tuples(st.sampled_from([ViolationKind.DOUBLE_FREE, ViolationKind.INVALID_FREE,
                                   ViolationKind.LEAK]),
                  st.sampled_from([38, 40]), _tags)


def _feed(b: ReportBuilder, device: list, host: list) -> None:
    for kind, (kernel, ptx, line), tag, (block, thread) in device:
        b.add_device_violation(
            kind, access="read", size=4, address=0x1000 + thread, kernel=kernel,
            ptx_line=ptx, instruction=f"ld.global.u32 %r{ptx}, [%rd1];",
            location=SourceLocation(f"{kernel}.cu", line, 3),
            block=(block, 0, 0), thread=(thread, 0, 0),
            allocation=None if tag is None else AllocationInfo(tag, 0x1000 * tag, 64, thread))
    for kind, line, tag in host:
        b.add_host_violation(
            kind, location=SourceLocation("app.py", line),
            allocation=None if tag is None else AllocationInfo(tag, 0x1000 * tag, 64, 0))


@settings(max_examples=200, deadline=None)
@given(device=st.lists(_occurrence, max_size=60), host=st.lists(_host, max_size=10),
       max_threads=st.integers(1, 10))
def test_fold_counts_every_occurrence_once_per_key(device, host, max_threads) -> None:
    b = ReportBuilder(["python", "app.py"], "cpu", max_threads=max_threads)
    _feed(b, device, host)
    report = b.build(exit_code=0)

    assert sum(v.count for v in report.violations) == len(device) + len(host)
    assert report.summary.occurrences == len(device) + len(host)

    keys = [(k, s, t) for k, s, t, _ in device] + [(k, ("host", line), t) for k, line, t in host]
    expected_keys = list(dict.fromkeys(keys))  # first-seen order
    got_keys = []
    for v in report.violations:
        tag = v.allocation.tag if v.allocation else None
        site = (v.kernel, v.ptx_line, v.location.line) if v.on_device \
            else ("host", v.location.line)
        got_keys.append((v.kind, site, tag))
    assert got_keys == expected_keys
    assert len(set(v.dedup_key for v in report.violations)) == len(report.violations)

    for v, key in zip(report.violations, expected_keys, strict=True):
        assert v.count == keys.count(key)
        if v.on_device:
            offenders = [ThreadId((bl, 0, 0), (th, 0, 0))
                         for k, s, t, (bl, th) in device if (k, s, t) == key]
            assert list(v.threads) == list(dict.fromkeys(offenders))[:max_threads]


@settings(max_examples=100, deadline=None)
@given(device=st.lists(_occurrence, max_size=30), host=st.lists(_host, max_size=6),
       exit_code=st.one_of(st.none(), st.integers(-255, 255)))
def test_any_built_report_round_trips_through_json(device, host, exit_code) -> None:
    b = ReportBuilder(["python", "app with space.py", "ünï"], "cpu")
    _feed(b, device, host)
    report = b.build(exit_code=exit_code)
    text = report.to_json()
    assert Report.from_json(text) == report
    assert Report.from_json(text).to_json() == text


# -- JSON ----------------------------------------------------------------------


def test_to_json_matches_the_design_field_names() -> None:
    doc = json.loads(buggy_report().to_json())
    assert list(doc) == ["schema", "tool", "command", "device", "exit_code", "violations",
                         "summary", "checked_kernels", "unchecked_kernels"]
    v = doc["violations"][0]
    assert list(v) == ["kind", "access", "size", "address", "kernel", "location", "ptx_line",
                       "instruction", "count", "threads", "allocation"]
    assert v["address"] == "0x7f0000001104"
    assert v["allocation"] == {"tag": 3, "base": "0x7f0000001000", "size": 256, "offset": 260,
                               "allocated_at": "app.py:31", "freed_at": None}
    assert v["threads"][0] == {"block": [0, 0, 0], "thread": [32, 0, 0]}


def test_json_round_trip_is_exact() -> None:
    report = buggy_report()
    text = report.to_json()
    again = Report.from_json(text)
    assert again == report
    assert again.to_json() == text


def test_optional_kernel_lists_stay_absent_when_absent() -> None:
    doc = json.loads(buggy_report().to_json())
    del doc["checked_kernels"], doc["unchecked_kernels"]
    report = Report.from_dict(doc)
    assert report.checked_kernels is None and report.unchecked_kernels is None
    assert "checked_kernels" not in json.loads(report.to_json())


def test_hand_written_layout_reads_back_equal_and_is_rewritten_canonically() -> None:
    report = buggy_report()
    doc = json.loads(report.to_json())
    doc["violations"][0]["address"] = doc["violations"][0]["address"].upper().replace("0X", "0x")
    compact = json.dumps(doc, separators=(",", ":"))
    again = Report.from_json(compact)
    assert again == report
    assert again.to_json() == report.to_json()


def test_design_md_example_reads() -> None:
    report = Report.from_json(DESIGN_EXAMPLE)
    (v,) = report.violations
    assert v.kind is ViolationKind.GLOBAL_OUT_OF_BOUNDS and v.count == 32
    assert v.allocation.offset == 64 and v.address == 0x7F0000001040
    assert report.checked_kernels is None


@pytest.mark.parametrize(("mutate", "path", "words"), [
    (lambda d: d.update(schema="gpusafe-report/2"), "schema", "unsupported report schema"),
    (lambda d: d.pop("summary"), "", "missing required property 'summary'"),
    (lambda d: d.update(colour="red"), "", "unknown property 'colour'"),
    (lambda d: d["violations"][0].update(kind="heap-overflow"), "violations[0].kind",
     "not one of"),
    (lambda d: d["violations"][0].update(address="7f00"), "violations[0].address", "hex"),
    (lambda d: d["violations"][0].update(count=0), "violations[0].count", ">= 1"),
    (lambda d: d["violations"][0]["threads"][0].update(block=[0, 0]),
     "violations[0].threads[0].block", "3 coordinates"),
    (lambda d: d["violations"][2]["location"].update(line="40"),
     "violations[2].location.line", "integer"),
    (lambda d: d["summary"].update(launches=True), "summary.launches", "integer"),
    (lambda d: d.update(checked_kernels=None), "checked_kernels", "array"),
])
def test_malformed_documents_are_refused_naming_the_path(mutate, path, words) -> None:
    doc = json.loads(buggy_report().to_json())
    mutate(doc)
    with pytest.raises(ReportFormatError) as info:
        Report.from_dict(doc)
    assert info.value.path == path
    assert words in info.value.message


def test_violation_is_plain_data() -> None:
    v = buggy_report().violations[3]
    assert isinstance(v, Violation)
    with pytest.raises(AttributeError):
        v.count = 3  # type: ignore[misc]
    assert v.allocation.base == FREED_BASE



def test_notes_are_kept_once_in_order_round_trip_and_merge() -> None:
    b = ReportBuilder(["app"], "cpu")
    b.add_notes(["kernel a ran on the interpreter", "kernel b ran on the interpreter"])
    b.add_notes(["kernel a ran on the interpreter"])
    report = b.build(exit_code=0)
    assert report.notes == ("kernel a ran on the interpreter", "kernel b ran on the interpreter")
    assert Report.from_json(report.to_json()) == report
    parent = ReportBuilder(["gpusafe"], "cpu")
    parent.add_notes(["kernel b ran on the interpreter", "kernel c ran on the interpreter"])
    parent.merge(report)
    assert parent.build(exit_code=0).notes == (
        "kernel b ran on the interpreter", "kernel c ran on the interpreter",
        "kernel a ran on the interpreter")
    assert "notes" not in json.loads(ReportBuilder(["app"], "cpu").build(0).to_json())
