"""The picture in the terminal report (issue 12): one line of memory (the
allocation's box, memory outside it as dots) and one line of carets under
the bytes the access touched, with its offset from the base. Golden text for
each place an access can fall; no picture where there is no range."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_samples import buggy_report, write_sources

from gpusafe.report import AllocationInfo, ReportBuilder, SourceLocation, Violation
from gpusafe.report.picture import WIDTH, has_picture, picture
from gpusafe.report.terminal import render_text
from gpusafe_instrument.kinds import AccessKind, ViolationKind

BASE = 0x7F0000001000


def access(offset: int, *, size: int = 4000, length: int = 4, freed: bool = False,
           kind: ViolationKind = ViolationKind.GLOBAL_OUT_OF_BOUNDS,
           how: AccessKind | None = AccessKind.READ) -> Violation:
    return Violation(
        kind=kind, access=how, size=length, address=BASE + offset, kernel="k",
        allocation=AllocationInfo(7, BASE, size, offset, "app.py:3",
                                  "app.py:9" if freed else None))


def lines(v: Violation) -> list[str]:
    drawn = picture(v)
    assert drawn is not None
    return list(drawn)


def test_just_past_the_end() -> None:
    assert lines(access(4000)) == [
        "    [================ 4000 B ================].",
        "                                              ^ +4000: 0 B past the end",
    ]


def test_a_few_bytes_past_the_end_shows_the_gap_to_scale() -> None:
    assert lines(access(300, size=256, length=16)) == [
        "    [================ 256 B =================]..........",
        "                                                     ^^^ +300: 44 B past the end",
    ]


def test_far_past_the_end_is_drawn_broken() -> None:
    assert lines(access(1_000_000)) == [
        "    [================ 4000 B ================].......//........",
        "                                                              ^ +1000000: 996000 B "
        "past the end",
    ]


def test_before_the_base() -> None:
    assert lines(access(-12, size=512)) == [
        "    ..[================ 512 B =================]",
        "    ^ -12: 12 B before the start",
    ]


def test_far_before_the_base() -> None:
    assert lines(access(-100_000, size=512)) == [
        "    ........//.......[================ 512 B =================]",
        "    ^ -100000: 100000 B before the start",
    ]


def test_inside_a_freed_allocation() -> None:
    v = access(2000, freed=True, kind=ViolationKind.USE_AFTER_FREE)
    assert lines(v) == [
        "    [xxxxxxxxxxxxx 4000 B freed xxxxxxxxxxxxx]",
        "                         ^ +2000: inside the freed allocation",
    ]


def test_a_host_range_that_leaves_its_allocation() -> None:
    v = access(0, size=1000, length=1024, kind=ViolationKind.API_OUT_OF_BOUNDS, how=None)
    assert lines(v) == [
        "    [================ 1000 B ================].",
        "     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ ^ +0..+1024: ends 24 B past the end",
    ]


def test_a_host_range_that_starts_before_the_base() -> None:
    v = access(-8, size=1000, length=64, kind=ViolationKind.API_OUT_OF_BOUNDS, how=None)
    assert lines(v) == [
        "    .[================ 1000 B ================]",
        "    ^ ^^^ -8..+56: starts 8 B before the start",
    ]


def test_caption_moves_left_when_the_right_has_no_room() -> None:
    mapped, marks = lines(access(2 ** 50, size=2 ** 20, length=16))
    assert mapped == "    [============== 1048576 B ===============].......//........"
    assert marks == "           +1125899906842624: 1125899905794048 B past the end ^"
    assert marks.index("^") == len(mapped) - 1


def test_caption_gets_its_own_line_when_neither_side_has_room() -> None:
    v = access(-10, size=0, length=20, kind=ViolationKind.API_OUT_OF_BOUNDS, how=None)
    assert lines(v) == [
        "    ........[================= 0 B ==================]........",
        "    ^^^^^^^^                                          ^^^^^^^^",
        "    -10..+10: starts 10 B before the start",
    ]


@pytest.mark.parametrize("v", [
    Violation(kind=ViolationKind.DOUBLE_FREE, address=BASE,
              allocation=AllocationInfo(2, BASE, 64, 0, "app.py:10", "app.py:12")),
    Violation(kind=ViolationKind.LEAK, address=BASE, size=128,
              allocation=AllocationInfo(4, BASE, 128, None, "app.py:20")),
    Violation(kind=ViolationKind.USE_AFTER_FREE, address=BASE, kernel="k",
              allocation=AllocationInfo(2, BASE, 64, 0, "app.py:10", "app.py:12")),
    Violation(kind=ViolationKind.NULL_POINTER, access=AccessKind.READ, size=4, address=0,
              kernel="k"),
    Violation(kind=ViolationKind.GLOBAL_OUT_OF_BOUNDS, access=AccessKind.READ, size=4,
              address=None, kernel="k", allocation=AllocationInfo(2, BASE, 64, None)),
], ids=["double-free", "leak", "freed-launch-argument", "no-allocation", "no-address"])
def test_no_picture_without_an_access_range(v: Violation) -> None:
    assert not has_picture(v)
    assert picture(v) is None


@settings(max_examples=300, deadline=None)
@given(size=st.integers(0, 2 ** 40), offset=st.integers(-(2 ** 40), 2 ** 41),
       length=st.integers(1, 4096))
def test_every_picture_fits_and_marks_the_access(size: int, offset: int, length: int) -> None:
    v = access(offset, size=size, length=length,
               kind=ViolationKind.API_OUT_OF_BOUNDS, how=None)
    mapped, marks, *caption = lines(v)
    assert all(len(line) <= WIDTH for line in (mapped, marks, *caption))
    assert len(caption) <= 1 and "^" in marks and set(mapped.strip()) <= set("[]=.x/ 0123456789B")
    box_start, box_end = mapped.index("["), mapped.index("]")
    first = marks.index("^")
    if offset >= size:
        assert first > box_end
    elif offset < 0:
        assert first < box_start
    else:
        assert box_start < first < box_end


# -- in the terminal report ----------------------------------------------------------


def test_the_picture_follows_the_address_line_in_the_report() -> None:
    with tempfile.TemporaryDirectory() as d:
        write_sources(Path(d))
        text = render_text(buggy_report(), search_dirs=[d])
    block = text.split("\n\n")[1]
    assert block == """\
[1] ERROR global-out-of-bounds  Out-of-bounds access to global memory
    write of 4 bytes in kernel oob_write
    at oob.cu:5:9
      3 |     if (i < n) {
      4 |         float v = 2.0f * i;
    > 5 |         out[2 * i + 1] = v;   // out holds n floats, not 2 * n
      6 |     }
      7 | }
    PTX line 41: st.global.f32 [%rd8], %f2;
    first offending threads (32,0,0), (33,0,0), (34,0,0), (35,0,0), (36,0,0), (37,0,0), \
(38,0,0), (39,0,0) in block (0,0,0)
    address 0x7f0000001104: 4 bytes past the end of a 256-byte allocation (tag 3) allocated \
at app.py:31
    [================ 256 B =================]..
                                               ^ +260: 4 B past the end
    32 occurrences"""


def test_host_entries_in_the_report_have_no_picture() -> None:
    text = render_text(buggy_report())
    double_free = text.split("\n\n")[4]
    assert double_free.startswith("[4] ERROR double-free")
    assert "[" not in double_free.split("\n", 1)[1] and "^" not in double_free


def test_the_picture_is_the_only_new_text() -> None:
    """Every other line of the terminal format is what it was before the picture."""
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_device_violation("global-out-of-bounds", access="write", size=4,
                           address=BASE + 64, kernel="k", ptx_line=3, instruction="st;",
                           location=SourceLocation("k.cu", 2), block=(0, 0, 0),
                           thread=(16, 0, 0),
                           allocation=AllocationInfo(1, BASE, 64, 64, "app.py:3"))
    text = render_text(b.build(exit_code=0))
    block = text.split("\n\n")[1].splitlines()
    assert block[:6] == [
        "[1] ERROR global-out-of-bounds  Out-of-bounds access to global memory",
        "    write of 4 bytes in kernel k",
        "    at k.cu:2",
        "    PTX line 3: st;",
        "    thread (16,0,0) in block (0,0,0)",
        "    address 0x7f0000001040: 0 bytes past the end of a 64-byte allocation (tag 1) "
        "allocated at app.py:3",
    ]
    assert block[6:8] == lines(b.build(exit_code=0).violations[0])
    assert block[8:] == ["    1 occurrence"]
