"""Native host stacks (issue 11): which of a native program's frames a
report names.  The symbolization itself runs in tests/test_native_stacks.py
against programs built with ``-g``; here, the choice of frames."""

from __future__ import annotations

import ctypes

from gpusafe.engine import callsite
from gpusafe.native import symbolize


def _site(frames: list[tuple[str, int, str] | None], depth: int = 8):
    addresses = list(range(0x1000, 0x1000 + len(frames)))
    for address, frame in zip(addresses, frames, strict=True):
        symbolize._frames[address] = frame
        if frame is not None and symbolize._is_helper(frame[0], frame[2]):
            symbolize._helpers.add(frame)
    try:
        return symbolize.site(addresses, depth)
    finally:
        for address in addresses:
            del symbolize._frames[address]


def test_nvcc_stubs_and_cuda_headers_are_not_the_program() -> None:
    site = _site([
        ("/cuda/include/crt/device_functions.h", 2963, "__cudaLaunchKernel_helper"),
        ("/tmp/tmpxft_1-6_app.cudafe1.stub.c", 13, "__device_stub__Z4fillPii"),
        ("/src/app.cu", 3, "fill"),  # nvcc's wrapper named as the kernel
        None,  # a frame in libc
        ("/src/app.cu", 12, "main"),
    ])
    assert site is not None
    assert [(f.line, f.function) for f in site.frames] == [(12, "main")]
    assert site.top == 0


def test_helpers_below_the_program_are_kept_and_depth_is_honoured() -> None:
    frames = [("/cuda/include/cuda_runtime.h", 879, "cudaMalloc<int>"),
              ("/src/app.cu", 11, "make"), ("/src/app.cu", 19, "main"),
              ("/src/app.cu", 30, "outer")]
    site = _site(frames, depth=2)
    assert [f.function for f in site.frames] == ["make", "main"]
    only = _site(frames, depth=0)
    assert (only.frame.function, only.stack) == ("make", None)


def test_no_frame_of_the_program_is_no_site() -> None:
    assert _site([None, None]) is None
    assert _site([("/cuda/include/cuda_runtime.h", 879, "cudaMalloc<int>")]) is None


def test_a_library_without_line_tables_has_no_frames() -> None:
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.printf, ctypes.c_void_p).value
    assert symbolize.frame(address + 1) is None


def test_a_python_program_is_not_a_native_one() -> None:
    """Its interpreter's frames (the python binary carries DWARF) must never
    be taken for the program's: only Python frames name its sites."""
    assert not callsite.native_program()
