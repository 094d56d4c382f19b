"""The terminal report: what a person reads on stderr. It must read the same
without colour, show the CUDA source around the faulting line when the source
can be found, and describe each allocation in words."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from report_samples import OOB_CU, buggy_report, buggy_session, clean_report, write_sources

from gpusafe.report import AllocationInfo, ReportBuilder, SourceLocation
from gpusafe.report.terminal import find_source, render, render_text, source_excerpt

ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|9[0-7]|38;[0-9;]+)m")


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    write_sources(tmp_path)
    return tmp_path


def test_header_names_command_and_device() -> None:
    text = render_text(buggy_report())
    assert text.splitlines()[0] == "gpusafe 0.1.0: python app.py --n 64"
    assert "device: cpu" in text


def test_out_of_bounds_block(src: Path) -> None:
    text = render_text(buggy_report(), search_dirs=[src])
    assert "ERROR global-out-of-bounds" in text
    assert "write of 4 bytes in kernel oob_write" in text
    assert "at oob.cu:5:9" in text
    assert ("address 0x7f0000001104: 4 bytes past the end of a 256-byte allocation (tag 3) "
            "allocated at app.py:31") in text
    assert "32 occurrences" in text
    assert "PTX line 41: st.global.f32 [%rd8], %f2;" in text


def test_first_offending_threads_are_shown_with_their_block() -> None:
    text = render_text(buggy_report())
    assert ("first offending threads (32,0,0), (33,0,0), (34,0,0), (35,0,0), (36,0,0), "
            "(37,0,0), (38,0,0), (39,0,0) in block (0,0,0)") in text
    assert "thread (2,0,0) in block (0,0,0)" in text


def test_source_excerpt_marks_the_faulting_line(src: Path) -> None:
    text = render_text(buggy_report(), search_dirs=[src])
    lines = text.splitlines()
    (hit,) = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("> 5 |")]
    assert lines[hit].endswith("out[2 * i + 1] = v;   // out holds n floats, not 2 * n")
    assert lines[hit - 2].strip() == "3 |     if (i < n) {"
    assert lines[hit + 2].strip() == "7 | }"


def test_excerpt_is_left_out_when_the_source_is_nowhere(tmp_path: Path) -> None:
    text = render_text(buggy_report(), search_dirs=[tmp_path])
    assert "at oob.cu:5:9" in text
    assert "out[2 * i + 1]" not in text


def test_sentences_for_before_start_freed_double_free_and_leak() -> None:
    text = render_text(buggy_report())
    assert ("12 bytes before the start of a 512-byte allocation (tag 5) "
            "allocated at app.py:50") in text
    assert ("at offset 8 of a freed 64-byte allocation (tag 2) allocated at app.py:10, "
            "freed at app.py:12") in text
    assert "ERROR double-free" in text and "at app.py:40" in text
    assert ("at offset 0 of a freed 64-byte allocation (tag 2) allocated at app.py:10, "
            "freed at app.py:12") in text
    assert "a 128-byte allocation (tag 4) allocated at app.py:20, never freed" in text


def test_summary_table_counts_kinds_and_kernels() -> None:
    text = render_text(buggy_report())
    rows = {m.group(1).strip(): m.group(2).split("|")
            for m in re.finditer(r"^\|([^|]+)\|(.*)\|$", text, re.M)}
    assert [c.strip() for c in rows["global-out-of-bounds"]] == ["2", "33"]
    assert [c.strip() for c in rows["total"]] == ["5", "36"]
    assert rows["kernels checked"][0].strip() == "3"
    assert rows["checked launches"][0].strip() == "4"
    assert rows["kernels NOT checked"][0].strip() == "1"
    assert "not checked: kernel cublas_sgemm: module loaded from a cubin" in text
    assert text.rstrip().endswith("gpusafe: 5 violations (36 occurrences) found.")


def test_clean_report_says_so() -> None:
    text = render_text(clean_report())
    assert "ERROR" not in text
    assert "device: NVIDIA H200" in text
    assert text.rstrip().endswith("gpusafe: no violations found.")


def test_dropped_records_are_warned_about() -> None:
    b = buggy_session()
    b.record_dropped(12)
    text = render_text(b.build(exit_code=0))
    assert "12 violation records were dropped" in text


def test_print_limit_shows_the_first_n_and_counts_the_rest() -> None:
    text = render_text(buggy_report(), print_limit=2)
    assert text.count("ERROR ") == 2
    assert "ERROR global-out-of-bounds" in text and "ERROR use-after-free" not in text
    assert "... 3 more violations not shown (--print-limit 2)" in text
    assert "gpusafe: 5 violations (36 occurrences) found." in text


def test_print_limit_zero_shows_all() -> None:
    assert render_text(buggy_report(), print_limit=0).count("ERROR ") == 5


def test_no_escape_codes_without_colour(src: Path) -> None:
    assert not ANSI.search(render_text(buggy_report(), search_dirs=[src]))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_COLOR", "TERM", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    out = _Tty()
    render(buggy_report(), out)
    assert COLOUR.search(out.getvalue())


def test_no_colour_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    render(buggy_report(), out)
    assert not ANSI.search(out.getvalue())


def test_no_colour_under_no_color_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")
    out = _Tty()
    render(buggy_report(), out)
    assert not COLOUR.search(out.getvalue())
    assert "4 bytes past the end of a 256-byte allocation" in ANSI.sub("", out.getvalue())


def test_long_lines_are_not_wrapped() -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_host_violation("double-free", location=SourceLocation("app.py", 40),
                         address=0x7F0000003000,
                         allocation=AllocationInfo(2, 0x7F0000003000, 64, 0,
                                                   "a_rather_long_module_name_for_an_app.py:10",
                                                   "another_long_module_name_for_frees.py:12"))
    text = render_text(b.build(exit_code=0), width=60)
    assert ("freed 64-byte allocation (tag 2) allocated at "
            "a_rather_long_module_name_for_an_app.py:10, freed at "
            "another_long_module_name_for_frees.py:12") in text


# -- finding the source --------------------------------------------------------


def test_source_found_as_given(src: Path) -> None:
    loc = SourceLocation(str(src / "oob.cu"), 5)
    assert find_source(loc.file, []) == src / "oob.cu"


def test_source_found_relative_to_a_search_dir(src: Path, tmp_path_factory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    assert find_source("oob.cu", [elsewhere, src]) == src / "oob.cu"


def test_source_found_by_name_when_the_recorded_directory_is_gone(src: Path) -> None:
    assert find_source("/build/machine/kernels/oob.cu", [src]) == src / "oob.cu"


def test_excerpt_clips_at_file_edges(src: Path) -> None:
    assert source_excerpt(SourceLocation("oob.cu", 1), [src]) == [
        (1, OOB_CU.splitlines()[0]), (2, OOB_CU.splitlines()[1]), (3, OOB_CU.splitlines()[2])]
    assert source_excerpt(SourceLocation("oob.cu", 99), [src]) is None
